/*
 * Pool batches, libuv twin of pool_batch.c: the loop keeps `inflight`
 * empty uv_queue_work requests in flight.
 *
 *   mode=batch  after-work callbacks only count; each time `batch`
 *               requests have come back, the last of them queues `batch`
 *               requests in a row (uv_queue_work has no batch call).
 *   mode=done   each after-work callback requeues its own request.
 *
 * Parameters: jobs=1000000 inflight=1024 batch=64 threads=2 mode=batch|done
 * Figures: pool_batch_<shape>_t<threads> (jobs/s) and
 * pool_batch_<shape>_cpu_t<threads>.
 *
 * UV_THREADPOOL_SIZE is read once, when the first request starts the
 * threadpool, so it is set before anything is queued.
 */
#include "bench.h"

#include <uv.h>

static unsigned long total_jobs;
static unsigned long batch;
static unsigned long submitted;
static unsigned long completed;
static int by_batch;
/* Requests come back here (mode=batch) until a batch is complete. */
static uv_work_t **spare;
static unsigned long nspare;

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

/* The spare requests, in a row. */
static void submit_run(uv_loop_t *loop)
{
    while (nspare > 0 && submitted < total_jobs)
        submit_one(loop, spare[--nspare]);
}

static void on_done(uv_work_t *req, int status)
{
    BENCH_CHECK(status == 0, "job status %s", uv_strerror(status));
    completed++;
    if (submitted >= total_jobs)
        return;
    if (!by_batch) {
        submit_one(req->loop, req);
        return;
    }
    spare[nspare++] = req;
    if (nspare == batch)
        submit_run(req->loop);
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
    batch = bench_arg(argc, argv, "batch", 64);
    const char *mode = bench_arg_str(argc, argv, "mode", "batch");
    BENCH_CHECK(strcmp(mode, "batch") == 0 || strcmp(mode, "done") == 0, "mode=%s", mode);
    by_batch = strcmp(mode, "batch") == 0;
    BENCH_CHECK(batch >= 1 && inflight >= batch, "batch=%lu inflight=%lu", batch, inflight);
    if (inflight > total_jobs)
        inflight = total_jobs;

    char size[32];
    snprintf(size, sizeof size, "%lu", threads);
    bench_setenv("UV_THREADPOOL_SIZE", size);

    uv_loop_t *loop = uv_default_loop();
    uv_work_t *reqs = calloc(inflight + 1, sizeof *reqs);
    spare = calloc(inflight, sizeof *spare);
    BENCH_CHECK(reqs != NULL && spare != NULL, "calloc");

    int rc = uv_queue_work(loop, &reqs[inflight], empty_work, warm_done);
    BENCH_CHECK(rc == 0, "warm-up queue: %s", uv_strerror(rc));
    uv_run(loop, UV_RUN_DEFAULT);

    double cpu0 = bench_cpu_s();
    uint64_t t0 = bench_now_ns();
    for (unsigned long i = 0; i < inflight; i += batch) {
        for (unsigned long j = i; j < inflight && j < i + batch; j++)
            spare[nspare++] = &reqs[j];
        submit_run(loop);
    }
    uv_run(loop, UV_RUN_DEFAULT);
    uint64_t t1 = bench_now_ns();
    double cpu1 = bench_cpu_s();
    BENCH_CHECK(completed == total_jobs, "completed %lu of %lu", completed, total_jobs);

    char name[64];
    const char *shape = by_batch ? "submit" : "done";
    snprintf(name, sizeof name, "pool_batch_%s_t%lu", shape, threads);
    bench_figure(name, (double)total_jobs / ((double)(t1 - t0) / 1e9), "jobs/s");
    snprintf(name, sizeof name, "pool_batch_%s_cpu_t%lu", shape, threads);
    bench_figure(name, (cpu1 - cpu0) / (double)total_jobs * 1e6, "us");

    uv_loop_close(loop);
    free(spare);
    free(reqs);
    return 0;
}
