/*
 * TCP ping-pong: one connection over loopback to an echo server running on
 * its own thread and loop; the client sends `size` bytes, waits until they
 * all came back, and sends again, `trips` times.
 * Twin: tcp_pingpong_uv.c (libuv client and libuv echo server).
 *
 * Parameters: trips=100000 size=4
 * Figures: tcp_pingpong (round trips/s, timed from the connect's
 * completion to the last echo).
 */
#include "tcp_echo.h"

static unsigned long trips, target;
static size_t size, got;
static char msg[65536];
static uint64_t t0, t1;

static void on_written(tern_loop *loop, tern_id stream, int status, void *arg)
{
    (void)loop, (void)stream, (void)arg;
    BENCH_CHECK(status == 0 || status == -ECANCELED, "write: %s", tern_strerror(status));
}

static void send_ping(tern_loop *loop, tern_id stream)
{
    tern_buf buf = {msg, size};
    int rc = tern_stream_write(loop, stream, &buf, 1, on_written, NULL);
    BENCH_CHECK(rc >= 0, "tern_stream_write: %s", tern_strerror(rc));
}

static void on_read(tern_loop *loop, tern_id stream, int status, const void *data,
                    size_t len, void *arg)
{
    (void)data, (void)arg;
    BENCH_CHECK(status == 0 && len > 0, "read: %s, len %zu", tern_strerror(status), len);
    got += len;
    if (got < size)
        return;
    got -= size;
    if (++trips == target) {
        t1 = bench_now_ns();
        tern_stream_close(loop, stream);
        return;
    }
    send_ping(loop, stream);
}

static void on_connect(tern_loop *loop, tern_id stream, int status, void *arg)
{
    (void)arg;
    BENCH_CHECK(status == 0, "connect: %s", tern_strerror(status));
    int rc = tern_stream_read_start(loop, stream, on_read, NULL);
    BENCH_CHECK(rc == 0, "tern_stream_read_start: %s", tern_strerror(rc));
    t0 = bench_now_ns();
    send_ping(loop, stream);
}

int main(int argc, char **argv)
{
    target = bench_arg(argc, argv, "trips", 100000);
    size = bench_arg(argc, argv, "size", 4);
    BENCH_CHECK(target > 0 && size > 0 && size <= sizeof msg, "trips or size");
    memset(msg, 'p', size);
    raise_fd_limit();

    echo_server server;
    unsigned port = echo_start(&server);

    tern_loop *loop;
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.backend = bench_backend();
    int rc = tern_loop_new(&loop, &opts);
    BENCH_CHECK(rc == 0, "tern_loop_new: %s", tern_strerror(rc));
    fprintf(stderr, "backend %s\n", tern_loop_backend_name(loop));
    rc = tern_tcp_connect(loop, "127.0.0.1", port, 0, on_connect, NULL, NULL);
    BENCH_CHECK(rc == 0, "tern_tcp_connect: %s", tern_strerror(rc));
    tern_loop_run(loop);
    BENCH_CHECK(trips == target, "trips %lu of %lu", trips, target);

    bench_figure("tcp_pingpong", (double)trips / ((double)(t1 - t0) / 1e9), "trips/s");

    tern_loop_free(loop);
    echo_stop(&server);
    tern_pool_shutdown(TERN_POOL_DRAIN, 1000000000u);
    return 0;
}
