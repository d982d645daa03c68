/*
 * TCP pound: `conns` connections at a time, each connecting to a loopback
 * echo server (its own thread and loop), sending `size` bytes, reading
 * them back and closing; its close callback starts the next connection
 * until `requests` have completed. Twin: tcp_pound_uv.c, of the same
 * shape: a slot is reused only once its stream's close has completed, so
 * neither side ever has more than `conns` sockets open, and each pays for
 * the close's last turn before the next connect starts.
 *
 * Parameters: conns=100 requests=20000 size=64
 * Figures: tcp_pound_c<conns> (completed connections/s) and its
 * _rw_calls, _syscalls, _uring_enters (system calls per connection, client
 * and server together, bench.h). Both loops ask for TERN_BENCH_BACKEND's
 * backend.
 *
 * tern_tcp_connect takes a host name; for a numeric address such as
 * 127.0.0.1 it parses it in place (AI_NUMERICHOST) and never involves the
 * pool, so both twins connect straight to a sockaddr.
 */
#include "tcp_echo.h"

typedef struct conn_slot {
    tern_id stream;
    size_t got;
    int open; /* from start_one until its close callback */
} conn_slot;

static unsigned long started, finished, failed, total;
static size_t size;
static unsigned port;
static char msg[65536];
static uint64_t t1;
static bench_calls c0, c1;

static void start_one(tern_loop *loop, conn_slot *slot);

static void on_closed(tern_loop *loop, tern_id stream, void *arg)
{
    conn_slot *slot = arg;
    (void)stream;
    slot->open = 0;
    if (++finished == total) {
        t1 = bench_now_ns();
        c1 = bench_calls_now();
    }
    if (started < total)
        start_one(loop, slot);
}

static void on_written(tern_loop *loop, tern_id stream, int status, void *arg)
{
    (void)loop, (void)stream, (void)status, (void)arg;
}

static void on_read(tern_loop *loop, tern_id stream, int status, const void *data, size_t len,
                    void *arg)
{
    conn_slot *slot = arg;
    (void)data;
    if (status < 0 || len == 0) {
        failed++;
        tern_stream_close(loop, stream);
        return;
    }
    slot->got += len;
    if (slot->got >= size)
        tern_stream_close(loop, stream);
}

/* A failed connect has already closed the stream; its close callback,
 * which starts the next connection, runs after this one. */
static void on_connect(tern_loop *loop, tern_id stream, int status, void *arg)
{
    conn_slot *slot = arg;
    if (status < 0) {
        failed++;
        return;
    }
    int rc = tern_stream_read_start(loop, stream, on_read, slot);
    BENCH_CHECK(rc == 0, "tern_stream_read_start: %s", tern_strerror(rc));
    tern_buf buf = {msg, size};
    rc = tern_stream_write(loop, stream, &buf, 1, on_written, NULL);
    BENCH_CHECK(rc >= 0, "tern_stream_write: %s", tern_strerror(rc));
}

static void start_one(tern_loop *loop, conn_slot *slot)
{
    /* A slot takes its next connection only once the last one's close has
     * completed, so at most `conns` sockets are ever open. */
    BENCH_CHECK(!slot->open, "slot reused before its close completed");
    slot->open = 1;
    started++;
    slot->got = 0;
    int rc = tern_tcp_connect(loop, "127.0.0.1", port, 0, on_connect, slot, &slot->stream);
    BENCH_CHECK(rc == 0, "tern_tcp_connect: %s", tern_strerror(rc));
    rc = tern_stream_on_close(loop, slot->stream, on_closed, slot);
    BENCH_CHECK(rc == 0, "tern_stream_on_close: %s", tern_strerror(rc));
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
    port = echo_start(&server);

    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.max_operations = 1u << 20;
    opts.backend = bench_backend();
    tern_loop *loop;
    int rc = tern_loop_new(&loop, &opts);
    BENCH_CHECK(rc == 0, "tern_loop_new: %s", tern_strerror(rc));
    bench_backend_report(tern_loop_backend_name(loop));
    conn_slot *slots = calloc(conns, sizeof *slots);
    BENCH_CHECK(slots != NULL, "calloc");

    c0 = bench_calls_now();
    uint64_t t0 = bench_now_ns();
    for (unsigned long i = 0; i < conns; i++)
        start_one(loop, &slots[i]);
    tern_loop_run(loop);
    BENCH_CHECK(finished == total, "finished %lu of %lu", finished, total);
    if (failed > 0)
        fprintf(stderr, "%lu of %lu connections failed\n", failed, total);

    char name[64];
    snprintf(name, sizeof name, "tcp_pound_c%lu", conns);
    bench_figure(name, (double)(total - failed) / ((double)(t1 - t0) / 1e9), "conns/s");
    bench_calls_figures(name, c0, c1, (double)total, "conn");

    tern_loop_free(loop);
    echo_stop(&server);
    tern_pool_shutdown(TERN_POOL_DRAIN, 1000000000u);
    free(slots);
    return 0;
}
