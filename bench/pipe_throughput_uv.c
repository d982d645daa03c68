/*
 * Pipe throughput, libuv twin of pipe_throughput.c: both ends of a pipe
 * opened with uv_pipe_open on one loop; the writer keeps up to 1 MiB
 * queued (uv_stream_get_write_queue_size), topping up with `chunk` byte
 * writes from each write's completion; the reader counts.
 *
 * Parameters: mib=1024 chunk=65536
 * Figures: pipe_throughput (MiB/s) and its system calls per MiB (bench.h).
 */
#include "bench.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#define QUEUE_MAX ((size_t)1 << 20)

static size_t total, chunk, sent, received;
static char *data;
static char read_buffer[65536];
static uv_pipe_t rd, wr;
static uint64_t t0, t1;
static bench_calls c0, c1;

static void top_up(void);

static void on_written(uv_write_t *req, int status)
{
    free(req);
    BENCH_CHECK(status == 0 || status == UV_ECANCELED, "write: %s", uv_strerror(status));
    if (status == 0)
        top_up();
}

static void top_up(void)
{
    while (sent < total && uv_stream_get_write_queue_size((uv_stream_t *)&wr) < QUEUE_MAX) {
        size_t n = total - sent < chunk ? total - sent : chunk;
        uv_write_t *req = malloc(sizeof *req);
        BENCH_CHECK(req != NULL, "malloc");
        uv_buf_t b = uv_buf_init(data, (unsigned)n);
        BENCH_CHECK(uv_write(req, (uv_stream_t *)&wr, &b, 1, on_written) == 0, "uv_write");
        sent += n;
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)h, (void)suggested;
    *buf = uv_buf_init(read_buffer, sizeof read_buffer);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    (void)buf;
    BENCH_CHECK(n >= 0, "read: %s", uv_strerror((int)n));
    received += (size_t)n;
    if (received == total) {
        t1 = bench_now_ns();
        c1 = bench_calls_now();
        uv_close((uv_handle_t *)s, NULL);
        uv_close((uv_handle_t *)&wr, NULL);
    }
}

int main(int argc, char **argv)
{
    bench_calls_init();
    total = bench_arg(argc, argv, "mib", 1024) << 20;
    chunk = bench_arg(argc, argv, "chunk", 65536);
    BENCH_CHECK(total > 0 && chunk > 0, "mib or chunk");
    signal(SIGPIPE, SIG_IGN);
    data = malloc(chunk);
    BENCH_CHECK(data != NULL, "malloc");
    memset(data, 'd', chunk);
    int p[2];
    BENCH_CHECK(pipe(p) == 0, "pipe");

    uv_loop_t *loop = uv_default_loop();
    uv_pipe_init(loop, &rd, 0);
    uv_pipe_init(loop, &wr, 0);
    BENCH_CHECK(uv_pipe_open(&rd, p[0]) == 0, "uv_pipe_open");
    BENCH_CHECK(uv_pipe_open(&wr, p[1]) == 0, "uv_pipe_open");
    uv_read_start((uv_stream_t *)&rd, on_alloc, on_read);
    c0 = bench_calls_now();
    t0 = bench_now_ns();
    top_up();
    uv_run(loop, UV_RUN_DEFAULT);
    BENCH_CHECK(received == total, "received %zu of %zu", received, total);

    bench_figure("pipe_throughput", (double)total / (1 << 20) / ((double)(t1 - t0) / 1e9), "MiB/s");
    bench_calls_figures("pipe_throughput", c0, c1, (double)(total >> 20), "MiB");

    uv_loop_close(loop);
    free(data);
    return 0;
}
