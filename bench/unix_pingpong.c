/*
 * Unix-stream ping-pong: a client and an echo server on one loop, joined
 * by a Unix-domain socket (listen and connect by path); the client sends
 * `size` bytes, waits until they all came back, and sends again, `trips`
 * times.
 * Twin: unix_pingpong_uv.c (uv_pipe_t: bind, listen, connect).
 *
 * Parameters: trips=100000 size=4
 * Figures: unix_pingpong (round trips/s, timed from the connect's
 * completion to the last echo); unix_pingpong_rw_calls, _syscalls,
 * _uring_enters (system calls per round trip, bench.h) and
 * _enters_per_turn. The loop asks for TERN_BENCH_BACKEND's backend.
 */
#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <tern.h>

static unsigned long trips, target;
static size_t size, got;
static char msg[65536];
static uint64_t t0, t1;
static tern_id listener, server;
static bench_calls c0, c1;
static uint64_t turns0, turns1;

static uint64_t loop_turns(tern_loop *loop)
{
    tern_loop_stats st;
    tern_loop_stats_get(loop, &st);
    return st.turns;
}

static void on_written(tern_loop *loop, tern_id stream, int status, void *arg)
{
    (void)loop, (void)stream, (void)arg;
    BENCH_CHECK(status == 0 || status == -ECANCELED, "write: %s", tern_strerror(status));
}

/* The echo side: the data is lent for the callback, so it is sent from a
 * copy; size bytes at most are in flight, so one buffer serves. */
static char echo_buf[65536];

static void on_server_read(tern_loop *loop, tern_id stream, int status, const void *data,
                           size_t len, void *arg)
{
    (void)arg;
    if (status < 0 || len == 0) {
        tern_stream_close(loop, stream);
        return;
    }
    memcpy(echo_buf, data, len);
    tern_buf b = {echo_buf, len};
    int rc = tern_stream_write(loop, stream, &b, 1, on_written, NULL);
    BENCH_CHECK(rc >= 0, "echo write: %s", tern_strerror(rc));
}

static void on_accept(tern_loop *loop, tern_id l, int status, tern_id stream, void *arg)
{
    (void)l, (void)arg;
    BENCH_CHECK(status == 0, "accept: %s", tern_strerror(status));
    server = stream;
    int rc = tern_stream_read_start(loop, stream, on_server_read, NULL);
    BENCH_CHECK(rc == 0, "read_start: %s", tern_strerror(rc));
}

static void send_ping(tern_loop *loop, tern_id stream)
{
    tern_buf buf = {msg, size};
    int rc = tern_stream_write(loop, stream, &buf, 1, on_written, NULL);
    BENCH_CHECK(rc >= 0, "tern_stream_write: %s", tern_strerror(rc));
}

static void on_read(tern_loop *loop, tern_id stream, int status, const void *data, size_t len,
                    void *arg)
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
        turns1 = loop_turns(loop);
        tern_stream_close(loop, stream);
        tern_stream_close(loop, listener);
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
    turns0 = loop_turns(loop);
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
    char path[64];
    snprintf(path, sizeof path, "/tmp/tern-bench-unix-%d", (int)getpid());
    unlink(path);

    tern_loop *loop;
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.backend = bench_backend();
    int rc = tern_loop_new(&loop, &opts);
    BENCH_CHECK(rc == 0, "tern_loop_new: %s", tern_strerror(rc));
    bench_backend_report(tern_loop_backend_name(loop));
    rc = tern_unix_listen(loop, path, TERN_TCP_BACKLOG_DEFAULT, on_accept, NULL, &listener);
    BENCH_CHECK(rc == 0, "tern_unix_listen: %s", tern_strerror(rc));
    rc = tern_unix_connect(loop, path, on_connect, NULL, NULL);
    BENCH_CHECK(rc == 0, "tern_unix_connect: %s", tern_strerror(rc));
    tern_loop_run(loop);
    BENCH_CHECK(trips == target, "trips %lu of %lu", trips, target);

    bench_figure("unix_pingpong", (double)trips / ((double)(t1 - t0) / 1e9), "trips/s");
    bench_calls_figures("unix_pingpong", c0, c1, (double)trips, "trip");
    bench_enters_per_turn("unix_pingpong", c0, c1, turns1 - turns0);

    tern_loop_free(loop);
    unlink(path);
    return 0;
}
