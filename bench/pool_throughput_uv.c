/*
 * Pool throughput, libuv twin of pool_throughput.c: the loop queues `jobs`
 * empty uv_queue_work requests, keeping `inflight` in flight by requeueing
 * each request from its after-work callback.
 *
 * Parameters: jobs=1000000 inflight=1024 threads=2
 * Figures: pool_throughput_t<threads> (jobs/s), pool_cpu_per_job_t<threads>.
 *
 * UV_THREADPOOL_SIZE is read once, when the first request starts the
 * threadpool, so it is set before anything is queued.
 */
#include "bench.h"

#include <uv.h>

static unsigned long total_jobs;
static unsigned long submitted;
static unsigned long completed;

static void empty_work(uv_work_t *req)
{
    (void)req;
}

static void on_done(uv_work_t *req, int status);

static void submit_one(uv_loop_t *loop, uv_work_t *req)
{
    int rc = uv_queue_work(loop, req, empty_work, on_done);
    BENCH_CHECK(rc == 0, "uv_queue_work: %s", uv_strerror(rc));
    submitted++;
}

static void on_done(uv_work_t *req, int status)
{
    BENCH_CHECK(status == 0, "job status %s", uv_strerror(status));
    completed++;
    if (submitted < total_jobs)
        submit_one(req->loop, req);
}

static void warm_done(uv_work_t *req, int status)
{
    (void)req, (void)status;
}

int main(int argc, char **argv)
{
    total_jobs = bench_arg(argc, argv, "jobs", 1000000);
    unsigned long inflight = bench_arg(argc, argv, "inflight", 1024);
    unsigned long threads = bench_arg(argc, argv, "threads", 2);
    if (inflight > total_jobs)
        inflight = total_jobs;

    char size[32];
    snprintf(size, sizeof size, "%lu", threads);
    bench_setenv("UV_THREADPOOL_SIZE", size);

    uv_loop_t *loop = uv_default_loop();
    uv_work_t *reqs = calloc(inflight + 1, sizeof *reqs);
    BENCH_CHECK(reqs != NULL, "calloc");

    int rc = uv_queue_work(loop, &reqs[inflight], empty_work, warm_done);
    BENCH_CHECK(rc == 0, "warm-up queue: %s", uv_strerror(rc));
    uv_run(loop, UV_RUN_DEFAULT);

    double cpu0 = bench_cpu_s();
    uint64_t t0 = bench_now_ns();
    for (unsigned long i = 0; i < inflight; i++)
        submit_one(loop, &reqs[i]);
    uv_run(loop, UV_RUN_DEFAULT);
    uint64_t t1 = bench_now_ns();
    double cpu1 = bench_cpu_s();
    BENCH_CHECK(completed == total_jobs, "completed %lu of %lu", completed, total_jobs);

    char name[64];
    snprintf(name, sizeof name, "pool_throughput_t%lu", threads);
    bench_figure(name, (double)total_jobs / ((double)(t1 - t0) / 1e9), "jobs/s");
    snprintf(name, sizeof name, "pool_cpu_per_job_t%lu", threads);
    bench_figure(name, (cpu1 - cpu0) / (double)total_jobs * 1e6, "us");

    uv_loop_close(loop);
    free(reqs);
    return 0;
}
