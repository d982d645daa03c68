/*
 * Reading many small files whole: tern_fs_read_file (open, fstat, read,
 * close as steps of one request on a reservation), `inflight` requests at
 * a time, each done submitting the next. Twin: fs_read_uv.c (uv_fs_open,
 * uv_fs_fstat, uv_fs_read, uv_fs_close chained from their callbacks).
 *
 * Parameters: files=10000 size=1024 inflight=64 threads=4 floor=1
 * floor_threads=0 floor_ms=200
 * Figures: fs_read_files_per_s (files/s), fs_read_cpu_per_file (CPU µs
 * per file, every thread of the process); fs_read_rw_calls, _syscalls,
 * _uring_enters (system calls per file, bench.h) and _enters_per_turn;
 * after the loop is freed, the synchronous floor on the same files
 * (fs_read.h): fs_read_floor_files_per_s and fs_read_floor_share (this
 * run's files/s over the floor).
 */
#include "fs_read.h"

#include <tern.h>

static unsigned long total, size, next_file, completed;

static void on_read(tern_loop *loop, tern_id id, int status, tern_fs_result *res, void *arg);

static void start_one(tern_loop *loop)
{
    char p[128];
    unsigned long i = next_file++;
    fs_path(p, sizeof p, i);
    int rc = tern_fs_read_file(loop, p, NULL, on_read, (void *)(uintptr_t)i, NULL);
    BENCH_CHECK(rc == 0, "tern_fs_read_file: %s", tern_strerror(rc));
}

static void on_read(tern_loop *loop, tern_id id, int status, tern_fs_result *res, void *arg)
{
    (void)id;
    unsigned long i = (uintptr_t)arg;
    BENCH_CHECK(status == 0, "read_file %lu: %s", i, tern_strerror(status));
    BENCH_CHECK(res->value == (int64_t)size && (size == 0 || ((unsigned char *)res->data)[0] ==
                                                                 fs_byte(i)),
                "file %lu: wrong content", i);
    tern_fs_free(res->data);
    completed++;
    if (next_file < total)
        start_one(loop);
}

int main(int argc, char **argv)
{
    bench_calls_init();
    total = bench_arg(argc, argv, "files", 10000);
    size = bench_arg(argc, argv, "size", 1024);
    unsigned long inflight = bench_arg(argc, argv, "inflight", 64);
    unsigned long threads = bench_arg(argc, argv, "threads", 4);
    if (inflight > total)
        inflight = total;
    fs_make(total, size);

    tern_pool_config cfg;
    tern_pool_config_init(&cfg);
    cfg.threads = (unsigned)threads;
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.pool = &cfg;
    opts.backend = bench_backend();
    tern_loop *loop;
    int rc = tern_loop_new(&loop, &opts);
    BENCH_CHECK(rc == 0, "tern_loop_new: %s", tern_strerror(rc));
    bench_backend_report(tern_loop_backend_name(loop));
    rc = tern_pool_start(&cfg); /* threads started before the clock, as libuv's warm-up does */
    BENCH_CHECK(rc == 0, "tern_pool_start: %s", tern_strerror(rc));

    tern_loop_stats st0, st1;
    tern_loop_stats_get(loop, &st0);
    bench_calls c0 = bench_calls_now();
    double cpu0 = bench_cpu_s();
    uint64_t t0 = bench_now_ns();
    for (unsigned long i = 0; i < inflight; i++)
        start_one(loop);
    tern_loop_run(loop);
    uint64_t t1 = bench_now_ns();
    double cpu1 = bench_cpu_s();
    bench_calls c1 = bench_calls_now();
    tern_loop_stats_get(loop, &st1);
    BENCH_CHECK(completed == total, "completed %lu of %lu", completed, total);

    double rate = (double)total / ((double)(t1 - t0) / 1e9);
    bench_figure("fs_read_files_per_s", rate, "files/s");
    bench_figure("fs_read_cpu_per_file", (cpu1 - cpu0) / (double)total * 1e6, "us");
    bench_calls_figures("fs_read", c0, c1, (double)total, "file");
    bench_enters_per_turn("fs_read", c0, c1, st1.turns - st0.turns);

    tern_loop_free(loop);
    tern_pool_shutdown(TERN_POOL_DRAIN, 1000000000u);
    fs_floor_figures(argc, argv, total, size, rate);
    fs_remove(total);
    return 0;
}
