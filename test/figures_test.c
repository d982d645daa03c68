/*
 * The pool's per-worker figures (include/tern/figures.h): each worker's
 * count of entries run, its parks and wakes, its busy time and its
 * wake-latency histogram, read lock-free by any thread.
 *
 * The figures are a moment apart from the pool's counters, so every
 * comparison after a worker's action waits (bounded) for them to settle.
 * A build with -Dfigures=false reports them unavailable: the tests that
 * need them skip, and one checks what such a build answers.
 */
#include <criterion/criterion.h>
#include <time.h>

#include "pool_helpers.h"

static tern_loop *setup(unsigned threads)
{
    tern_pool_config cfg = ph_config(threads, 256, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    return loop;
}

static void teardown(tern_loop *loop)
{
    tern_loop_free(loop);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}

/* Skip the calling test when the build has no figures (the pool runs). */
static void need_figures(void)
{
    tern_pool_worker_stats w;
    if (tern_pool_worker_stats_get(0, &w) == -ENOTSUP)
        cr_skip("built with -Dfigures=false");
}

/* The sum of one field over every worker index. */
#define SUM(field)                                                        \
    ({                                                                    \
        uint64_t sum_ = 0;                                                \
        unsigned n_ = tern_pool_worker_count();                          \
        for (unsigned i_ = 0; i_ < n_; i_++) {                           \
            tern_pool_worker_stats w_;                                   \
            cr_assert_eq(tern_pool_worker_stats_get(i_, &w_), 0);        \
            sum_ += w_.field;                                             \
        }                                                                 \
        sum_;                                                             \
    })

static uint64_t wake_latency_total(void)
{
    uint64_t sum = 0;
    for (unsigned i = 0; i < tern_pool_worker_count(); i++) {
        tern_pool_worker_stats w;
        cr_assert_eq(tern_pool_worker_stats_get(i, &w), 0);
        for (unsigned b = 0; b < TERN_POOL_WAKE_BUCKETS; b++)
            sum += w.wake_latency[b];
    }
    return sum;
}

Test(figures, indexes_name_the_bounded_workers)
{
    tern_pool_worker_stats w;
    cr_assert_eq(tern_pool_worker_count(), 0u, "no pool runs yet");
    cr_assert_eq(tern_pool_worker_stats_get(0, &w), -ENOENT);
    tern_loop *loop = setup(3);
    cr_assert_eq(tern_pool_worker_count(), 3u);
    for (unsigned i = 0; i < 3; i++) {
        int rc = tern_pool_worker_stats_get(i, &w);
        cr_assert(rc == 0 || rc == -ENOTSUP, "index %u: %d", i, rc);
        cr_assert_eq(w.kind, (unsigned)TERN_POOL_WORKER_BOUNDED);
        cr_assert_eq(w.slot, i);
    }
    w.jobs = 7;
    cr_assert_eq(tern_pool_worker_stats_get(3, &w), -ENOENT);
    cr_assert_eq(w.jobs, 0u, "a refused read zeroes out");
    teardown(loop);
}

Test(figures, compiled_out_reads_as_unavailable_and_zero)
{
    tern_loop *loop = setup(1);
    ph_job j;
    ph_job_init(&j, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &j), 0);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(&j, 1) == 1);
    cr_assert(ok);
    tern_pool_worker_stats w;
    memset(&w, 0xff, sizeof w);
    if (tern_pool_worker_stats_get(0, &w) == 0) {
        teardown(loop);
        cr_skip("built with figures: the other tests check them");
    }
    cr_assert_eq(tern_pool_worker_stats_get(0, &w), -ENOTSUP);
    cr_assert_eq(w.kind, (unsigned)TERN_POOL_WORKER_BOUNDED);
    cr_assert_eq(w.jobs, 0u);
    cr_assert_eq(w.parks, 0u);
    cr_assert_eq(w.wakes, 0u);
    cr_assert_eq(w.busy_ns, 0u);
    for (unsigned b = 0; b < TERN_POOL_WAKE_BUCKETS; b++)
        cr_assert_eq(w.wake_latency[b], 0u);
    teardown(loop);
}

Test(figures, jobs_run_add_up_to_the_pools_completed)
{
    enum { T = 2, WAVES = 20, PER = 25 };
    tern_loop *loop = setup(T);
    need_figures();
    static ph_job jobs[WAVES * PER];
    bool ok;
    for (int wave = 0; wave < WAVES; wave++) {
        ph_job *js = &jobs[wave * PER];
        for (int i = 0; i < PER; i++) {
            ph_job_init(&js[i], NULL);
            cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &js[i]), 0);
        }
        PH_PUMP_UNTIL(ok, loop, ph_done_total(js, PER) == PER);
        cr_assert(ok, "wave %d did not drain", wave);
    }
    tern_pool_stats s = ph_stats();
    cr_assert_eq(s.completed, (uint64_t)WAVES * PER);
    uint64_t sum = 0;
    PH_WAIT_UNTIL(ok, (sum = SUM(jobs)) == s.completed);
    cr_assert(ok, "per-worker jobs add up to %" PRIu64 ", the pool completed %" PRIu64, sum,
              s.completed);
    teardown(loop);
}

Test(figures, parks_and_wakes_move)
{
    tern_loop *loop = setup(1);
    need_figures();
    bool ok;
    for (uint64_t round = 1; round <= 3; round++) {
        /* The worker runs dry, spins, then parks: a submission must wake it. */
        PH_WAIT_UNTIL(ok, SUM(parks) >= round);
        cr_assert(ok, "the worker never parked (round %" PRIu64 ")", round);
        ph_job j;
        ph_job_init(&j, NULL);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &j), 0);
        PH_PUMP_UNTIL(ok, loop, ph_done_total(&j, 1) == 1);
        cr_assert(ok);
    }
    uint64_t wakes = SUM(wakes);
    cr_assert_gt(wakes, 0u, "a parked worker was woken but counted no wake");
    cr_assert_leq(wakes, SUM(parks));
    cr_assert_eq(wake_latency_total(), wakes, "every wake has its latency");
    teardown(loop);
}

struct spin_arg {
    uint64_t want_ns; /* CPU time the job uses */
    int done;         /* done callbacks run (the loop's thread) */
};

/* Spin until this thread has used want_ns of CPU time. */
static void *spin_cpu(tern_job *job, void *arg)
{
    (void)job;
    struct spin_arg *a = arg;
    struct timespec t0, t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    uint64_t used;
    do {
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
        used = (uint64_t)(t.tv_sec - t0.tv_sec) * PH_SEC + (uint64_t)t.tv_nsec -
               (uint64_t)t0.tv_nsec;
    } while (used < a->want_ns);
    return NULL;
}

static void spin_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)result;
    cr_assert_eq(status, 0);
    ((struct spin_arg *)arg)->done++;
}

Test(figures, busy_time_grows_with_a_spinning_job)
{
    tern_loop *loop = setup(1);
    need_figures();
    bool ok;
    uint64_t before = SUM(busy_ns);
    struct spin_arg a = {.want_ns = 20 * PH_MS};
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, spin_cpu, spin_done, &a, NULL), 0);
    PH_PUMP_UNTIL(ok, loop, a.done == 1);
    cr_assert(ok);
    /* The worker adds its busy time before it takes the next entry: settle. */
    uint64_t after = 0;
    PH_WAIT_UNTIL(ok, (after = SUM(busy_ns)) > before);
    cr_assert(ok, "busy time did not grow with a job that used CPU (%" PRIu64 " ns)", after);
    cr_assert_eq(SUM(jobs), 1u);
    teardown(loop);
}

/* ------------------------------------------------------------------ */
/* Memory figures (always built in)                                    */
/* ------------------------------------------------------------------ */

Test(memory, pool_bytes_grow_with_jobs_in_flight_and_return_after_drain)
{
    enum { N = 20 };
    cr_assert_eq(ph_stats().memory_bytes, 0u, "no pool, nothing in flight");
    tern_loop *loop = setup(1);
    uint64_t base = ph_stats().memory_bytes;
    cr_assert_gt(base, 0u, "a running pool holds its queue and tables");
    ph_gate gate;
    ph_gate_init(&gate);
    static ph_job jobs[N];
    for (int i = 0; i < N; i++) {
        ph_job_init(&jobs[i], &gate);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &jobs[i]), 0);
    }
    uint64_t held = ph_stats().memory_bytes;
    cr_assert_gt(held, base, "%d jobs in flight add nothing (%" PRIu64 ")", N, held);
    ph_gate_open(&gate);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(jobs, N) == N);
    cr_assert(ok);
    uint64_t after = 0;
    PH_WAIT_UNTIL(ok, (after = ph_stats().memory_bytes) == base);
    cr_assert(ok, "after the drain the pool holds %" PRIu64 ", at start %" PRIu64, after, base);
    ph_gate_destroy(&gate);
    teardown(loop);
    cr_assert_eq(ph_stats().memory_bytes, 0u, "a shut-down pool holds nothing");
}

/* Submit n jobs behind gate (NULL: none) and, unless gated, drain them. */
static void round_of_jobs(tern_loop *loop, ph_job *jobs, int n, ph_gate *gate)
{
    for (int i = 0; i < n; i++) {
        ph_job_init(&jobs[i], gate);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &jobs[i]), 0);
    }
    if (gate != NULL)
        return;
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(jobs, (size_t)n) == n);
    cr_assert(ok);
}

/* Run n gated jobs: the loop's figure while they are owed their done, and after. */
static void gated_round(tern_loop *loop, ph_job *jobs, int n, uint64_t *held, uint64_t *after)
{
    ph_gate gate;
    ph_gate_init(&gate);
    round_of_jobs(loop, jobs, n, &gate);
    *held = tern_loop_memory_bytes(loop);
    ph_gate_open(&gate);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(jobs, (size_t)n) == n);
    cr_assert(ok);
    *after = tern_loop_memory_bytes(loop);
    ph_gate_destroy(&gate);
}

/*
 * The loop keeps the records it frees for reuse (and its result ring),
 * so after a drain it holds its working set: the base a second round of
 * the same size returns to, not the empty loop's figure.
 */
Test(memory, loop_bytes_grow_with_jobs_and_return_after_drain)
{
    enum { N = 40 };
    tern_loop *loop = setup(1);
    uint64_t empty = tern_loop_memory_bytes(loop);
    cr_assert_gt(empty, 0u, "a loop holds at least its record");
    static ph_job jobs[N];
    uint64_t held, base;
    gated_round(loop, jobs, N, &held, &base);
    cr_assert_gt(held, empty, "%d jobs owed their done add nothing (%" PRIu64 ")", N, held);
    cr_assert_gt(base, empty, "the result ring and the records kept for reuse count");
    cr_assert_leq(base, held);
    uint64_t held2, after;
    gated_round(loop, jobs, N, &held2, &after);
    cr_assert_eq(held2, held, "the same jobs in flight, the same figure");
    cr_assert_eq(after, base, "after the drain, back to the base");
    /* More jobs at once than the working set: the figure grows past it. */
    static ph_job more[2 * N];
    uint64_t held3, after3;
    gated_round(loop, more, 2 * N, &held3, &after3);
    cr_assert_gt(held3, held, "twice the jobs in flight add nothing");
    teardown(loop);
}
