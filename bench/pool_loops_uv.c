/*
 * Pool throughput from several loops at once, libuv twin of pool_loops.c:
 * `loops` threads each run their own uv_loop_t and keep `inflight` empty
 * uv_queue_work requests in flight, requeueing each from its after-work
 * callback, until the `jobs` shared out between them are done. libuv's
 * threadpool is one queue behind one mutex for every loop.
 *
 * Parameters: jobs=1000000 loops=2 inflight=256 threads=2
 * Figures: pool_loops_l<loops> (jobs/s), pool_loops_cpu_l<loops>.
 */
#include "bench.h"

#include <pthread.h>
#include <uv.h>

struct submitter {
    uv_loop_t loop;
    uv_work_t *reqs;
    unsigned long quota, submitted, completed;
    pthread_t thread;
};

static pthread_barrier_t start;
static unsigned long inflight;

static void empty_work(uv_work_t *req)
{
    (void)req;
}

static void on_done(uv_work_t *req, int status);

static void submit_one(struct submitter *s, uv_work_t *req)
{
    req->data = s;
    int rc = uv_queue_work(&s->loop, req, empty_work, on_done);
    BENCH_CHECK(rc == 0, "uv_queue_work: %s", uv_strerror(rc));
    s->submitted++;
}

static void on_done(uv_work_t *req, int status)
{
    struct submitter *s = req->data;
    BENCH_CHECK(status == 0, "job status %s", uv_strerror(status));
    s->completed++;
    if (s->submitted < s->quota)
        submit_one(s, req);
}

static void *run(void *arg)
{
    struct submitter *s = arg;
    pthread_barrier_wait(&start);
    unsigned long first = inflight < s->quota ? inflight : s->quota;
    for (unsigned long i = 0; i < first; i++)
        submit_one(s, &s->reqs[i]);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    BENCH_CHECK(s->completed == s->quota, "completed %lu of %lu", s->completed, s->quota);
    return NULL;
}

static void warm_done(uv_work_t *req, int status)
{
    (void)req, (void)status;
}

int main(int argc, char **argv)
{
    unsigned long jobs = bench_arg(argc, argv, "jobs", 1000000);
    unsigned long loops = bench_arg(argc, argv, "loops", 2);
    unsigned long threads = bench_arg(argc, argv, "threads", 2);
    inflight = bench_arg(argc, argv, "inflight", 256);
    BENCH_CHECK(loops >= 1 && loops <= 64, "loops=%lu", loops);

    char size[32];
    snprintf(size, sizeof size, "%lu", threads);
    bench_setenv("UV_THREADPOOL_SIZE", size);

    struct submitter *s = calloc(loops, sizeof *s);
    BENCH_CHECK(s != NULL, "calloc");
    for (unsigned long i = 0; i < loops; i++) {
        BENCH_CHECK(uv_loop_init(&s[i].loop) == 0, "uv_loop_init");
        s[i].quota = jobs / loops + (i < jobs % loops ? 1 : 0);
        s[i].reqs = calloc(inflight, sizeof *s[i].reqs);
        BENCH_CHECK(s[i].reqs != NULL, "calloc");
    }
    /* Start the threadpool before the clock. */
    uv_work_t warm;
    BENCH_CHECK(uv_queue_work(&s[0].loop, &warm, empty_work, warm_done) == 0, "warm-up");
    uv_run(&s[0].loop, UV_RUN_DEFAULT);

    pthread_barrier_init(&start, NULL, (unsigned)loops + 1);
    for (unsigned long i = 0; i < loops; i++)
        BENCH_CHECK(pthread_create(&s[i].thread, NULL, run, &s[i]) == 0, "pthread_create");
    pthread_barrier_wait(&start);
    double cpu0 = bench_cpu_s();
    uint64_t t0 = bench_now_ns();
    for (unsigned long i = 0; i < loops; i++)
        pthread_join(s[i].thread, NULL);
    uint64_t t1 = bench_now_ns();
    double cpu1 = bench_cpu_s();

    char name[64];
    snprintf(name, sizeof name, "pool_loops_l%lu", loops);
    bench_figure(name, (double)jobs / ((double)(t1 - t0) / 1e9), "jobs/s");
    snprintf(name, sizeof name, "pool_loops_cpu_l%lu", loops);
    bench_figure(name, (cpu1 - cpu0) / (double)jobs * 1e6, "us");

    for (unsigned long i = 0; i < loops; i++) {
        uv_loop_close(&s[i].loop);
        free(s[i].reqs);
    }
    free(s);
    return 0;
}
