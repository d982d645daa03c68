/*
 * TCP pound, libuv twin of tcp_pound.c: `conns` connections at a time to a
 * loopback libuv echo server on its own thread; each connects, sends
 * `size` bytes, reads them back and closes, and its close callback starts
 * the next connection until `requests` have completed.
 *
 * Parameters: conns=100 requests=20000 size=64
 * Figures: tcp_pound_c<conns> (completed connections/s) and its system
 * calls per connection (bench.h).
 */
#include "tcp_echo_uv.h"

typedef struct conn_slot {
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    uv_write_t write_req;
    size_t got;
    int open; /* from start_one until its close callback */
} conn_slot;

static unsigned long started, finished, failed, total;
static size_t size;
static struct sockaddr_in addr;
static char msg[65536];
static char read_buffer[65536];
static uint64_t t1;
static bench_calls c0, c1;

static void start_one(uv_loop_t *loop, conn_slot *slot);

static void on_closed(uv_handle_t *h)
{
    conn_slot *slot = (conn_slot *)h;
    slot->open = 0;
    if (++finished == total) {
        t1 = bench_now_ns();
        c1 = bench_calls_now();
    }
    if (started < total)
        start_one(h->loop, slot);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)h, (void)suggested;
    *buf = uv_buf_init(read_buffer, sizeof read_buffer);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    conn_slot *slot = (conn_slot *)stream;
    (void)buf;
    if (nread == 0)
        return;
    if (nread < 0) {
        failed++;
        uv_close((uv_handle_t *)stream, on_closed);
        return;
    }
    slot->got += (size_t)nread;
    if (slot->got >= size)
        uv_close((uv_handle_t *)stream, on_closed);
}

static void on_connect(uv_connect_t *req, int status)
{
    conn_slot *slot = (conn_slot *)req->handle;
    if (status < 0) {
        failed++;
        uv_close((uv_handle_t *)&slot->tcp, on_closed);
        return;
    }
    int rc = uv_read_start(req->handle, on_alloc, on_read);
    BENCH_CHECK(rc == 0, "uv_read_start: %s", uv_strerror(rc));
    uv_buf_t buf = uv_buf_init(msg, (unsigned)size);
    rc = uv_write(&slot->write_req, req->handle, &buf, 1, NULL);
    BENCH_CHECK(rc == 0, "uv_write: %s", uv_strerror(rc));
}

static void start_one(uv_loop_t *loop, conn_slot *slot)
{
    /* A slot takes its next connection only once the last one's close has
     * completed, so at most `conns` sockets are ever open. */
    BENCH_CHECK(!slot->open, "slot reused before its close completed");
    slot->open = 1;
    started++;
    slot->got = 0;
    uv_tcp_init(loop, &slot->tcp);
    int rc =
        uv_tcp_connect(&slot->connect_req, &slot->tcp, (const struct sockaddr *)&addr, on_connect);
    BENCH_CHECK(rc == 0, "uv_tcp_connect: %s", uv_strerror(rc));
}

int main(int argc, char **argv)
{
    bench_calls_init();
    unsigned long conns = bench_arg(argc, argv, "conns", 100);
    total = bench_arg(argc, argv, "requests", 20000);
    size = bench_arg(argc, argv, "size", 64);
    BENCH_CHECK(conns > 0 && total >= conns && size > 0 && size <= sizeof msg, "parameters");
    memset(msg, 'q', size);
    raise_fd_limit();

    echo_server server;
    unsigned port = echo_start(&server);
    uv_ip4_addr("127.0.0.1", (int)port, &addr);

    uv_loop_t *loop = uv_default_loop();
    conn_slot *slots = calloc(conns, sizeof *slots);
    BENCH_CHECK(slots != NULL, "calloc");

    c0 = bench_calls_now();
    uint64_t t0 = bench_now_ns();
    for (unsigned long i = 0; i < conns; i++)
        start_one(loop, &slots[i]);
    uv_run(loop, UV_RUN_DEFAULT);
    BENCH_CHECK(finished == total, "finished %lu of %lu", finished, total);
    if (failed > 0)
        fprintf(stderr, "%lu of %lu connections failed\n", failed, total);

    char name[64];
    snprintf(name, sizeof name, "tcp_pound_c%lu", conns);
    bench_figure(name, (double)(total - failed) / ((double)(t1 - t0) / 1e9), "conns/s");
    bench_calls_figures(name, c0, c1, (double)total, "conn");

    uv_loop_close(loop);
    echo_stop(&server);
    free(slots);
    return 0;
}
