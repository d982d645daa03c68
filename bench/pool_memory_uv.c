/*
 * Memory per queued job, libuv twin of pool_memory.c: one threadpool
 * thread is held by a gate request while the loop queues `jobs` more
 * uv_work_t requests (allocated by the caller, as libuv requires); the
 * growth of the resident set divided by `jobs` is the cost of one.
 *
 * Parameters: jobs=1048575 (with the gate job, 2^20 in all, so tern's
 * power-of-two rings are sized exactly and no unused slot is charged)
 * Figures: pool_queued_job_bytes (bytes per queued job).
 */
#include "bench.h"

#include <uv.h>

static _Atomic int gate_open, gate_running;
static unsigned long completed;

static void gate_work(uv_work_t *req)
{
    (void)req;
    atomic_store_explicit(&gate_running, 1, memory_order_release);
    while (!atomic_load_explicit(&gate_open, memory_order_acquire)) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

static void empty_work(uv_work_t *req)
{
    (void)req;
}

static void on_done(uv_work_t *req, int status)
{
    (void)req;
    BENCH_CHECK(status == 0, "job status %s", uv_strerror(status));
    completed++;
}

int main(int argc, char **argv)
{
    unsigned long jobs = bench_arg(argc, argv, "jobs", 1048575);
    BENCH_CHECK(jobs > 0, "jobs=0");
    bench_setenv("UV_THREADPOOL_SIZE", "1");

    double rss0 = bench_rss_bytes();

    uv_loop_t *loop = uv_default_loop();
    uv_work_t *reqs = calloc(jobs + 1, sizeof *reqs);
    BENCH_CHECK(reqs != NULL, "calloc");
    int rc = uv_queue_work(loop, &reqs[jobs], gate_work, on_done);
    BENCH_CHECK(rc == 0, "gate queue: %s", uv_strerror(rc));
    while (!atomic_load_explicit(&gate_running, memory_order_acquire))
        sched_yield();

    for (unsigned long i = 0; i < jobs; i++) {
        rc = uv_queue_work(loop, &reqs[i], empty_work, on_done);
        BENCH_CHECK(rc == 0, "queue #%lu: %s", i, uv_strerror(rc));
    }
    double rss1 = bench_rss_bytes();

    atomic_store_explicit(&gate_open, 1, memory_order_release);
    uv_run(loop, UV_RUN_DEFAULT);
    BENCH_CHECK(completed == jobs + 1, "completed %lu", completed);

    bench_figure("pool_queued_job_bytes", (rss1 - rss0) / (double)jobs, "bytes");

    uv_loop_close(loop);
    free(reqs);
    return 0;
}
