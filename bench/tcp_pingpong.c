/*
 * TCP ping-pong: one connection over loopback to an echo server running on
 * its own thread and loop; the client sends `size` bytes, waits until they
 * all came back, and sends again, `trips` times.
 * Twin: tcp_pingpong_uv.c (libuv client and libuv echo server).
 *
 * Parameters: trips=100000 size=4
 * Figures: tcp_pingpong (round trips/s, timed from the connect's
 * completion to the last echo); tcp_pingpong_rw_calls, _syscalls,
 * _uring_enters (system calls per round trip, both threads, bench.h) and
 * _enters_per_turn (over both loops' turns).
 */
#include "tcp_echo.h"

static unsigned long trips, target;
static size_t size, got;
static char msg[65536];
static uint64_t t0, t1;
static echo_server server;
static bench_calls c0, c1;
static uint64_t turns0, turns1;

/* Turns of the client's loop and the echo server's together. */
static uint64_t both_turns(tern_loop *client)
{
    tern_loop_stats a, b;
    tern_loop_stats_get(client, &a);
    tern_loop_stats_get(server.loop, &b);
    return a.turns + b.turns;
}

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
        c1 = bench_calls_now();
        turns1 = both_turns(loop);
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
    turns0 = both_turns(loop);
    c0 = bench_calls_now();
    t0 = bench_now_ns();
    send_ping(loop, stream);
}

int main(int argc, char **argv)
{
    bench_calls_init();
    target = bench_arg(argc, argv, "trips", 100000);
    size = bench_arg(argc, argv, "size", 4);
    BENCH_CHECK(target > 0 && size > 0 && size <= sizeof msg, "trips or size");
    memset(msg, 'p', size);
    raise_fd_limit();

    unsigned port = echo_start(&server);

    tern_loop *loop;
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.backend = bench_backend();
    int rc = tern_loop_new(&loop, &opts);
    BENCH_CHECK(rc == 0, "tern_loop_new: %s", tern_strerror(rc));
    bench_backend_report(tern_loop_backend_name(loop));
    rc = tern_tcp_connect(loop, "127.0.0.1", port, 0, on_connect, NULL, NULL);
    BENCH_CHECK(rc == 0, "tern_tcp_connect: %s", tern_strerror(rc));
    tern_loop_run(loop);
    BENCH_CHECK(trips == target, "trips %lu of %lu", trips, target);

    bench_figure("tcp_pingpong", (double)trips / ((double)(t1 - t0) / 1e9), "trips/s");
    bench_calls_figures("tcp_pingpong", c0, c1, (double)trips, "trip");
    bench_enters_per_turn("tcp_pingpong", c0, c1, turns1 - turns0);

    tern_loop_free(loop);
    echo_stop(&server);
    tern_pool_shutdown(TERN_POOL_DRAIN, 1000000000u);
    return 0;
}
