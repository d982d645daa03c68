/*
 * Unix-stream ping-pong, libuv twin of unix_pingpong.c: a client and an
 * echo server on one loop, joined by a uv_pipe_t bound to a path.
 *
 * Parameters: trips=100000 size=4
 * Figures: unix_pingpong (round trips/s) and its system calls per trip
 * (bench.h).
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

static unsigned long trips, target;
static size_t size, got;
static char msg[65536];
static char client_buf[65536], server_buf[65536], echo_buf[65536];
static uint64_t t0, t1;
static bench_calls c0, c1;
static uv_pipe_t listener, server, client;
static uv_connect_t connect_req;
static uv_write_t ping_req, echo_req;

static void on_alloc_client(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)h, (void)suggested;
    *buf = uv_buf_init(client_buf, sizeof client_buf);
}

static void on_alloc_server(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)h, (void)suggested;
    *buf = uv_buf_init(server_buf, sizeof server_buf);
}

static void on_written(uv_write_t *req, int status)
{
    (void)req;
    BENCH_CHECK(status == 0 || status == UV_ECANCELED, "write: %s", uv_strerror(status));
}

static void on_server_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    if (n < 0) {
        uv_close((uv_handle_t *)s, NULL);
        return;
    }
    if (n == 0)
        return;
    memcpy(echo_buf, buf->base, (size_t)n);
    uv_buf_t b = uv_buf_init(echo_buf, (unsigned)n);
    BENCH_CHECK(uv_write(&echo_req, s, &b, 1, on_written) == 0, "echo write");
}

static void on_accept(uv_stream_t *l, int status)
{
    BENCH_CHECK(status == 0, "accept: %s", uv_strerror(status));
    uv_pipe_init(l->loop, &server, 0);
    BENCH_CHECK(uv_accept(l, (uv_stream_t *)&server) == 0, "uv_accept");
    uv_read_start((uv_stream_t *)&server, on_alloc_server, on_server_read);
}

static void send_ping(void)
{
    uv_buf_t b = uv_buf_init(msg, (unsigned)size);
    BENCH_CHECK(uv_write(&ping_req, (uv_stream_t *)&client, &b, 1, on_written) == 0, "write");
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    (void)buf;
    BENCH_CHECK(n >= 0, "read: %s", uv_strerror((int)n));
    got += (size_t)n;
    if (got < size)
        return;
    got -= size;
    if (++trips == target) {
        t1 = bench_now_ns();
        c1 = bench_calls_now();
        uv_close((uv_handle_t *)s, NULL);
        uv_close((uv_handle_t *)&listener, NULL);
        return;
    }
    send_ping();
}

static void on_connect(uv_connect_t *req, int status)
{
    (void)req;
    BENCH_CHECK(status == 0, "connect: %s", uv_strerror(status));
    uv_read_start((uv_stream_t *)&client, on_alloc_client, on_read);
    c0 = bench_calls_now();
    t0 = bench_now_ns();
    send_ping();
}

int main(int argc, char **argv)
{
    bench_calls_init();
    target = bench_arg(argc, argv, "trips", 100000);
    size = bench_arg(argc, argv, "size", 4);
    BENCH_CHECK(target > 0 && size > 0 && size <= sizeof msg, "trips or size");
    memset(msg, 'p', size);
    char path[64];
    snprintf(path, sizeof path, "/tmp/tern-bench-unix-uv-%d", (int)getpid());
    unlink(path);

    uv_loop_t *loop = uv_default_loop();
    uv_pipe_init(loop, &listener, 0);
    BENCH_CHECK(uv_pipe_bind(&listener, path) == 0, "uv_pipe_bind");
    BENCH_CHECK(uv_listen((uv_stream_t *)&listener, SOMAXCONN, on_accept) == 0, "uv_listen");
    uv_pipe_init(loop, &client, 0);
    uv_pipe_connect(&connect_req, &client, path, on_connect);
    uv_run(loop, UV_RUN_DEFAULT);
    BENCH_CHECK(trips == target, "trips %lu of %lu", trips, target);

    bench_figure("unix_pingpong", (double)trips / ((double)(t1 - t0) / 1e9), "trips/s");
    bench_calls_figures("unix_pingpong", c0, c1, (double)trips, "trip");

    uv_loop_close(loop);
    unlink(path);
    return 0;
}
