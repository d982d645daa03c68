/*
 * Pipe throughput: `mib` MiB through a pipe whose two ends are streams on
 * one loop. The writer keeps up to 1 MiB queued, topping up with `chunk`
 * byte writes from each write's completion; the reader counts what
 * arrives.
 * Twin: pipe_throughput_uv.c (uv_pipe_open on both ends, the same policy
 * through uv_stream_get_write_queue_size).
 *
 * Parameters: mib=1024 chunk=65536
 * Figures: pipe_throughput (MiB/s, from the first write to the last byte
 * read); pipe_throughput_rw_calls, _syscalls, _uring_enters (system calls
 * per MiB, bench.h) and _enters_per_turn. The loop asks for
 * TERN_BENCH_BACKEND's backend.
 */
#include "bench.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <tern.h>

#define QUEUE_MAX ((size_t)1 << 20)

static size_t total, chunk, sent, received;
static char *data;
static tern_id rd, wr;
static uint64_t t0, t1;
static bench_calls c0, c1;
static uint64_t turns0, turns1;

static uint64_t loop_turns(tern_loop *loop)
{
    tern_loop_stats st;
    tern_loop_stats_get(loop, &st);
    return st.turns;
}

static void top_up(tern_loop *loop);

static void on_written(tern_loop *loop, tern_id stream, int status, void *arg)
{
    (void)stream, (void)arg;
    BENCH_CHECK(status == 0 || status == -ECANCELED, "write: %s", tern_strerror(status));
    if (status == 0)
        top_up(loop);
}

static void top_up(tern_loop *loop)
{
    size_t queued;
    while (sent < total && tern_stream_write_queue_size(loop, wr, &queued) == 0 &&
           queued < QUEUE_MAX) {
        size_t n = total - sent < chunk ? total - sent : chunk;
        tern_buf b = {data, n};
        int rc = tern_stream_write(loop, wr, &b, 1, on_written, NULL);
        BENCH_CHECK(rc >= 0, "tern_stream_write: %s", tern_strerror(rc));
        sent += n;
    }
}

static void on_read(tern_loop *loop, tern_id stream, int status, const void *p, size_t len,
                    void *arg)
{
    (void)p, (void)arg;
    BENCH_CHECK(status == 0 && len > 0, "read: %s", tern_strerror(status));
    received += len;
    if (received == total) {
        t1 = bench_now_ns();
        c1 = bench_calls_now();
        turns1 = loop_turns(loop);
        tern_stream_close(loop, stream);
        tern_stream_close(loop, wr);
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

    tern_loop *loop;
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.backend = bench_backend();
    int rc = tern_loop_new(&loop, &opts);
    BENCH_CHECK(rc == 0, "tern_loop_new: %s", tern_strerror(rc));
    bench_backend_report(tern_loop_backend_name(loop));
    BENCH_CHECK(tern_stream_open(loop, p[0], &rd) == 0, "tern_stream_open");
    BENCH_CHECK(tern_stream_open(loop, p[1], &wr) == 0, "tern_stream_open");
    BENCH_CHECK(tern_stream_read_start(loop, rd, on_read, NULL) == 0, "read_start");
    turns0 = loop_turns(loop);
    c0 = bench_calls_now();
    t0 = bench_now_ns();
    top_up(loop);
    tern_loop_run(loop);
    BENCH_CHECK(received == total, "received %zu of %zu", received, total);

    bench_figure("pipe_throughput", (double)total / (1 << 20) / ((double)(t1 - t0) / 1e9), "MiB/s");
    bench_calls_figures("pipe_throughput", c0, c1, (double)(total >> 20), "MiB");
    bench_enters_per_turn("pipe_throughput", c0, c1, turns1 - turns0);

    tern_loop_free(loop);
    free(data);
    return 0;
}
