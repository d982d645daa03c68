/*
 * Pool batches: the loop keeps `inflight` empty jobs in flight and hands
 * them to the bounded pool in one of two shapes.
 *
 *   mode=batch  done callbacks only count; each time `batch` jobs have
 *               come back, the last of their done callbacks submits
 *               `batch` new jobs with one tern_submit_batch.
 *   mode=done   each done callback submits one new job (what
 *               pool_throughput does, with the same parameters as
 *               mode=batch, so the two figures compare).
 *
 * Twin: pool_batch_uv.c (uv_queue_work in a row, from after_work_cb).
 *
 * Parameters: jobs=1000000 inflight=1024 batch=64 threads=2 mode=batch|done
 * Figures: pool_batch_<shape>_t<threads> (jobs/s) and
 * pool_batch_<shape>_cpu_t<threads> (CPU µs per job, every thread).
 *
 * The pool is warmed by one job first, so thread creation is not timed on
 * either side.
 */
#include "bench.h"

#include <errno.h>
#include <tern.h>

static unsigned long total_jobs;
static unsigned long batch;
static unsigned long submitted;
static unsigned long completed;
static unsigned long returned; /* come back since the last batch (mode=batch) */
static int by_batch;

static void *empty_work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

static void on_done(tern_loop *loop, tern_id id, int status, void *result, void *arg);

/* Every job's argument: none. */
static void **no_args;

/* n jobs from the loop: one tern_submit_batch (mode=batch), or n tern_submit. */
static void submit_run(tern_loop *loop, unsigned long n)
{
    if (n > total_jobs - submitted)
        n = total_jobs - submitted;
    if (n == 0)
        return;
    if (by_batch) {
        int rc = tern_submit_batch(loop, TERN_BOUNDED, empty_work, on_done, no_args, n, NULL,
                                   NULL);
        BENCH_CHECK(rc == 0, "tern_submit_batch: %s", tern_strerror(rc));
    }
    for (unsigned long i = 0; !by_batch && i < n; i++) {
        int rc = tern_submit(loop, TERN_BOUNDED, empty_work, on_done, NULL, NULL);
        BENCH_CHECK(rc == 0, "tern_submit: %s", tern_strerror(rc));
    }
    submitted += n;
}

static void on_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)id, (void)result, (void)arg;
    BENCH_CHECK(status == 0, "job status %s", tern_strerror(status));
    completed++;
    if (submitted >= total_jobs)
        return;
    if (!by_batch) {
        submit_run(loop, 1);
    } else if (++returned == batch) {
        returned = 0;
        submit_run(loop, batch);
    }
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
    batch = bench_arg(argc, argv, "batch", 64);
    const char *mode = bench_arg_str(argc, argv, "mode", "batch");
    BENCH_CHECK(strcmp(mode, "batch") == 0 || strcmp(mode, "done") == 0, "mode=%s", mode);
    by_batch = strcmp(mode, "batch") == 0;
    BENCH_CHECK(batch >= 1 && inflight >= batch, "batch=%lu inflight=%lu", batch, inflight);
    if (inflight > total_jobs)
        inflight = total_jobs;
    no_args = calloc(batch, sizeof *no_args);
    BENCH_CHECK(no_args != NULL, "calloc");

    /* Headroom as in pool_throughput: a resubmission is never refused. */
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
    for (unsigned long i = 0; i < inflight; i += batch)
        submit_run(loop, inflight - i < batch ? inflight - i : batch);
    tern_loop_run(loop);
    uint64_t t1 = bench_now_ns();
    double cpu1 = bench_cpu_s();
    BENCH_CHECK(completed == total_jobs, "completed %lu of %lu", completed, total_jobs);

    char name[64];
    const char *shape = by_batch ? "submit" : "done";
    snprintf(name, sizeof name, "pool_batch_%s_t%lu", shape, threads);
    bench_figure(name, (double)total_jobs / ((double)(t1 - t0) / 1e9), "jobs/s");
    snprintf(name, sizeof name, "pool_batch_%s_cpu_t%lu", shape, threads);
    bench_figure(name, (cpu1 - cpu0) / (double)total_jobs * 1e6, "us");

    tern_loop_stats st;
    tern_loop_stats_get(loop, &st);
    fprintf(stderr, "loop: %.4f wake syscalls per job, %.1f jobs per turn\n",
            (double)st.wake_syscalls / (double)total_jobs,
            st.turns ? (double)total_jobs / (double)st.turns : 0.0);

    tern_loop_free(loop);
    tern_pool_shutdown(TERN_POOL_DRAIN, 1000000000u);
    free(no_args);
    return 0;
}
