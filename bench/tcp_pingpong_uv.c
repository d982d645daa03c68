/*
 * TCP ping-pong, libuv twin of tcp_pingpong.c: one connection over
 * loopback to a libuv echo server on its own thread; send `size` bytes,
 * wait for all of them to come back, repeat `trips` times.
 *
 * Parameters: trips=100000 size=4
 * Figures: tcp_pingpong (round trips/s); tcp_pingpong_rw_calls, _syscalls,
 * _uring_enters (system calls per round trip, both threads, bench.h).
 */
#include "tcp_echo_uv.h"

static unsigned long trips, target;
static size_t size, got;
static char msg[65536];
static char read_buffer[65536];
static uint64_t t0, t1;
static bench_calls c0, c1;
static uv_tcp_t conn;
static uv_connect_t connect_req;
static uv_write_t write_req;

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)h, (void)suggested;
    *buf = uv_buf_init(read_buffer, sizeof read_buffer);
}

static void on_written(uv_write_t *req, int status)
{
    (void)req;
    BENCH_CHECK(status == 0 || status == UV_ECANCELED, "write: %s", uv_strerror(status));
}

static void send_ping(uv_stream_t *stream)
{
    uv_buf_t buf = uv_buf_init(msg, (unsigned)size);
    int rc = uv_write(&write_req, stream, &buf, 1, on_written);
    BENCH_CHECK(rc == 0, "uv_write: %s", uv_strerror(rc));
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    if (nread == 0)
        return;
    BENCH_CHECK(nread > 0, "read: %s", uv_strerror((int)nread));
    got += (size_t)nread;
    if (got < size)
        return;
    got -= size;
    if (++trips == target) {
        t1 = bench_now_ns();
        c1 = bench_calls_now();
        uv_close((uv_handle_t *)stream, NULL);
        return;
    }
    send_ping(stream);
}

static void on_connect(uv_connect_t *req, int status)
{
    BENCH_CHECK(status == 0, "connect: %s", uv_strerror(status));
    int rc = uv_read_start(req->handle, on_alloc, on_read);
    BENCH_CHECK(rc == 0, "uv_read_start: %s", uv_strerror(rc));
    c0 = bench_calls_now();
    t0 = bench_now_ns();
    send_ping(req->handle);
}

int main(int argc, char **argv)
{
    bench_calls_init();
    target = bench_arg(argc, argv, "trips", 100000);
    size = bench_arg(argc, argv, "size", 4);
    BENCH_CHECK(target > 0 && size > 0 && size <= sizeof msg, "trips or size");
    memset(msg, 'p', size);
    raise_fd_limit();

    echo_server server;
    unsigned port = echo_start(&server);

    uv_loop_t *loop = uv_default_loop();
    struct sockaddr_in addr;
    uv_ip4_addr("127.0.0.1", (int)port, &addr);
    uv_tcp_init(loop, &conn);
    int rc = uv_tcp_connect(&connect_req, &conn, (const struct sockaddr *)&addr, on_connect);
    BENCH_CHECK(rc == 0, "uv_tcp_connect: %s", uv_strerror(rc));
    uv_run(loop, UV_RUN_DEFAULT);
    BENCH_CHECK(trips == target, "trips %lu of %lu", trips, target);

    bench_figure("tcp_pingpong", (double)trips / ((double)(t1 - t0) / 1e9), "trips/s");
    bench_calls_figures("tcp_pingpong", c0, c1, (double)trips, "trip");

    uv_loop_close(loop);
    echo_stop(&server);
    return 0;
}
