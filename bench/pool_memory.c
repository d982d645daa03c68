/*
 * Memory per queued job: one worker is held by a gate job while the loop
 * queues `jobs` more; the growth of the resident set from before the loop
 * existed, divided by `jobs`, is what one queued job costs (job record,
 * queue slot, result-ring slot and anything else the runtime keeps).
 * Twin: pool_memory_uv.c (the uv_work_t the caller must provide, plus
 * whatever libuv allocates).
 *
 * Parameters: jobs=1048575 (with the gate job, 2^20 in all, so tern's
 * power-of-two rings are sized exactly and no unused slot is charged)
 * Figures: pool_queued_job_bytes (bytes per queued job).
 *
 * tern bounds its queue, so the queue, the undelivered credits and the
 * operation limit are all sized to hold `jobs`: that is what an
 * application that wants this many jobs queued must configure, and the
 * preallocated rings it implies are part of the cost being measured.
 *
 * The gate job stalls the one worker on purpose, so the pool's watchdog
 * must not start an overflow worker for it (tern_pool_watch's
 * overflow_max = 0, set before the pool starts): one would
 * run the queued jobs while the loop is still submitting, and each job it
 * finished would be charged its result-ring cell as well, a figure that
 * then depends on how long the submissions took. No job other than the
 * gate may have run when the resident set is read; the run checks it.
 */
#include "bench.h"

#include <tern.h>

static _Atomic int gate_open, gate_running;
static _Atomic unsigned long ran_early; /* jobs run before the gate opened */
static unsigned long completed;

static void *gate_work(tern_job *job, void *arg)
{
    (void)job;
    atomic_store_explicit(&gate_running, 1, memory_order_release);
    while (!atomic_load_explicit(&gate_open, memory_order_acquire)) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return arg;
}

static void *empty_work(tern_job *job, void *arg)
{
    (void)job;
    if (!atomic_load_explicit(&gate_open, memory_order_relaxed))
        atomic_fetch_add_explicit(&ran_early, 1, memory_order_relaxed);
    return arg;
}

static void on_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)result, (void)arg;
    BENCH_CHECK(status == 0, "job status %s", tern_strerror(status));
    completed++;
}

int main(int argc, char **argv)
{
    unsigned long jobs = bench_arg(argc, argv, "jobs", 1048575);
    BENCH_CHECK(jobs > 0, "jobs=0");

    double rss0 = bench_rss_bytes();

    tern_pool_watch watch;
    tern_pool_watch_init(&watch);
    watch.overflow_max = 0;
    int rc = tern_pool_watch_set(&watch);
    BENCH_CHECK(rc == 0, "tern_pool_watch_set: %s", tern_strerror(rc));

    tern_pool_config cfg;
    tern_pool_config_init(&cfg);
    cfg.threads = 1;
    cfg.queue_capacity = (unsigned)(jobs + 1);
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.pool = &cfg;
    opts.max_undelivered = (unsigned)(jobs + 1);
    opts.max_operations = (unsigned)(jobs + 1);

    tern_loop *loop;
    rc = tern_loop_new(&loop, &opts);
    BENCH_CHECK(rc == 0, "tern_loop_new: %s", tern_strerror(rc));
    rc = tern_submit(loop, TERN_BOUNDED, gate_work, on_done, NULL, NULL);
    BENCH_CHECK(rc == 0, "gate submit: %s", tern_strerror(rc));
    while (!atomic_load_explicit(&gate_running, memory_order_acquire))
        sched_yield();

    for (unsigned long i = 0; i < jobs; i++) {
        rc = tern_submit(loop, TERN_BOUNDED, empty_work, on_done, NULL, NULL);
        BENCH_CHECK(rc == 0, "submit #%lu: %s", i, tern_strerror(rc));
    }
    double rss1 = bench_rss_bytes();
    BENCH_CHECK(atomic_load_explicit(&ran_early, memory_order_relaxed) == 0,
                "%lu jobs ran while the gate was shut: they were not queued",
                atomic_load_explicit(&ran_early, memory_order_relaxed));

    atomic_store_explicit(&gate_open, 1, memory_order_release);
    tern_loop_run(loop);
    BENCH_CHECK(completed == jobs + 1, "completed %lu", completed);

    bench_figure("pool_queued_job_bytes", (rss1 - rss0) / (double)jobs, "bytes");

    tern_loop_free(loop);
    tern_pool_shutdown(TERN_POOL_DRAIN, 1000000000u);
    return 0;
}
