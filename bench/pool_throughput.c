/*
 * Pool throughput: the loop submits `jobs` empty jobs to the bounded pool,
 * keeping `inflight` of them in flight by resubmitting from each done.
 * Twin: pool_throughput_uv.c (uv_queue_work).
 *
 * Parameters: jobs=1000000 inflight=1024 threads=2
 * Figures: pool_throughput_t<threads> (jobs/s), pool_cpu_per_job_t<threads>
 * (CPU µs per job, every thread of the process).
 *
 * The pool is warmed by one job first, so thread creation is not timed on
 * either side (libuv also starts its threads on the first submission).
 */
#include "bench.h"

#include <errno.h>
#include <tern.h>

static unsigned long total_jobs;
static unsigned long submitted;
static unsigned long completed;

static void *empty_work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

static void on_done(tern_loop *loop, tern_id id, int status, void *result, void *arg);

static void submit_one(tern_loop *loop)
{
    int rc = tern_submit(loop, TERN_BOUNDED, empty_work, on_done, NULL, NULL);
    BENCH_CHECK(rc == 0, "tern_submit: %s", tern_strerror(rc));
    submitted++;
}

static void on_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)id, (void)result, (void)arg;
    BENCH_CHECK(status == 0, "job status %s", tern_strerror(status));
    completed++;
    if (submitted < total_jobs)
        submit_one(loop);
}

static void warm_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)status, (void)result, (void)arg;
}

int main(int argc, char **argv)
{
    total_jobs = bench_arg(argc, argv, "jobs", 1000000);
    unsigned long inflight = bench_arg(argc, argv, "inflight", 1024);
    unsigned long threads = bench_arg(argc, argv, "threads", 2);
    if (inflight > total_jobs)
        inflight = total_jobs;

    /* tern's defaults (queue_capacity 1024, max_undelivered 4096) would
     * accept 1,024 in flight only just; leave headroom so a completion
     * whose credit is still being returned never refuses a resubmission. */
    tern_pool_config cfg;
    tern_pool_config_init(&cfg);
    cfg.threads = (unsigned)threads;
    cfg.queue_capacity = (unsigned)(2 * inflight > 1024 ? 2 * inflight : 1024);

    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.pool = &cfg;
    opts.max_undelivered = (unsigned)(2 * inflight > 4096 ? 2 * inflight : 4096);
    opts.max_operations = opts.max_undelivered + 1024;

    tern_loop *loop;
    int rc = tern_loop_new(&loop, &opts);
    BENCH_CHECK(rc == 0, "tern_loop_new: %s", tern_strerror(rc));

    rc = tern_submit(loop, TERN_BOUNDED, empty_work, warm_done, NULL, NULL);
    BENCH_CHECK(rc == 0, "warm-up submit: %s", tern_strerror(rc));
    tern_loop_run(loop);

    double cpu0 = bench_cpu_s();
    uint64_t t0 = bench_now_ns();
    for (unsigned long i = 0; i < inflight; i++)
        submit_one(loop);
    tern_loop_run(loop);
    uint64_t t1 = bench_now_ns();
    double cpu1 = bench_cpu_s();
    BENCH_CHECK(completed == total_jobs, "completed %lu of %lu", completed, total_jobs);

    char name[64];
    snprintf(name, sizeof name, "pool_throughput_t%lu", threads);
    bench_figure(name, (double)total_jobs / ((double)(t1 - t0) / 1e9), "jobs/s");
    snprintf(name, sizeof name, "pool_cpu_per_job_t%lu", threads);
    bench_figure(name, (cpu1 - cpu0) / (double)total_jobs * 1e6, "us");

    /* Diagnostics for profiling (stderr, not figures): how often the loop
     * had to be woken, and how many jobs each turn carried. */
    tern_loop_stats st;
    tern_loop_stats_get(loop, &st);
    fprintf(stderr, "loop: %.4f wake syscalls per job, %.1f jobs per turn\n",
            (double)st.wake_syscalls / (double)total_jobs,
            st.turns ? (double)total_jobs / (double)st.turns : 0.0);
    for (unsigned i = 0; i < tern_pool_worker_count(); i++) {
        tern_pool_worker_stats ws;
        if (tern_pool_worker_stats_get(i, &ws) == 0)
            fprintf(stderr, "worker %u: %llu entries, %llu parks, %llu woken\n", i,
                    (unsigned long long)ws.jobs, (unsigned long long)ws.parks,
                    (unsigned long long)ws.wakes);
    }

    tern_loop_free(loop);
    tern_pool_shutdown(TERN_POOL_DRAIN, 1000000000u);
    return 0;
}
