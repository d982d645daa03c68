/*
 * Pool throughput from several loops at once: `loops` threads each run
 * their own loop and keep `inflight` empty bounded jobs in flight,
 * resubmitting from each done, until the `jobs` shared out between them
 * are all done. Every loop submits to the one process-wide pool, so this
 * is what a queue shared by every submitter costs as submitters are added
 * (a per-submitter queue would be the other answer).
 * Twin: pool_loops_uv.c (one uv_loop_t per thread, uv_queue_work).
 *
 * Parameters: jobs=1000000 loops=2 inflight=256 threads=2
 * Figures: pool_loops_l<loops> (jobs/s, all loops together, from the
 * common start to the last loop's end), pool_loops_cpu_l<loops> (CPU µs per
 * job, every thread of the process).
 */
#include "bench.h"

#include <pthread.h>
#include <tern.h>

struct submitter {
    tern_loop *loop;
    unsigned long quota, submitted, completed;
    pthread_t thread;
};

static pthread_barrier_t start;

static void *empty_work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

static void on_done(tern_loop *loop, tern_id id, int status, void *result, void *arg);

static void submit_one(struct submitter *s)
{
    int rc = tern_submit(s->loop, TERN_BOUNDED, empty_work, on_done, s, NULL);
    BENCH_CHECK(rc == 0, "tern_submit: %s", tern_strerror(rc));
    s->submitted++;
}

static void on_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)result;
    struct submitter *s = arg;
    BENCH_CHECK(status == 0, "job status %s", tern_strerror(status));
    s->completed++;
    if (s->submitted < s->quota)
        submit_one(s);
}

static unsigned long inflight;

static void *run(void *arg)
{
    struct submitter *s = arg;
    pthread_barrier_wait(&start);
    unsigned long first = inflight < s->quota ? inflight : s->quota;
    for (unsigned long i = 0; i < first; i++)
        submit_one(s);
    tern_loop_run(s->loop);
    BENCH_CHECK(s->completed == s->quota, "completed %lu of %lu", s->completed, s->quota);
    return NULL;
}

static void warm_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)status, (void)result, (void)arg;
}

int main(int argc, char **argv)
{
    unsigned long jobs = bench_arg(argc, argv, "jobs", 1000000);
    unsigned long loops = bench_arg(argc, argv, "loops", 2);
    unsigned long threads = bench_arg(argc, argv, "threads", 2);
    inflight = bench_arg(argc, argv, "inflight", 256);
    BENCH_CHECK(loops >= 1 && loops <= 64, "loops=%lu", loops);

    /* Every loop's jobs fit the queue at once, and every completion fits
     * its loop's ring, so no submission is ever refused. */
    tern_pool_config cfg;
    tern_pool_config_init(&cfg);
    cfg.threads = (unsigned)threads;
    cfg.queue_capacity = (unsigned)(2 * inflight * loops > 1024 ? 2 * inflight * loops : 1024);
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.pool = &cfg;
    opts.max_undelivered = (unsigned)(2 * inflight > 4096 ? 2 * inflight : 4096);
    opts.max_operations = opts.max_undelivered + 1024;

    struct submitter *s = calloc(loops, sizeof *s);
    BENCH_CHECK(s != NULL, "calloc");
    for (unsigned long i = 0; i < loops; i++) {
        int rc = tern_loop_new(&s[i].loop, &opts);
        BENCH_CHECK(rc == 0, "tern_loop_new: %s", tern_strerror(rc));
        s[i].quota = jobs / loops + (i < jobs % loops ? 1 : 0);
    }
    /* Start the pool's workers before the clock. */
    int rc = tern_submit(s[0].loop, TERN_BOUNDED, empty_work, warm_done, NULL, NULL);
    BENCH_CHECK(rc == 0, "warm-up submit: %s", tern_strerror(rc));
    tern_loop_run(s[0].loop);

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

    for (unsigned long i = 0; i < loops; i++)
        tern_loop_free(s[i].loop);
    free(s);
    tern_pool_shutdown(TERN_POOL_DRAIN, 1000000000u);
    return 0;
}
