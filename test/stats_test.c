/*
 * Pool statistics for load shedding (SPEC §5, header tern_pool_stats_get).
 *
 * The counters are read lock-free and "may be a moment apart", so every
 * check that follows a worker's action waits (bounded) for the counter to
 * settle instead of reading it once.
 *
 * Reading of the counters these tests hold the pool to: every accepted job
 * is counted once in submitted and ends as exactly one of completed (done
 * got status 0), cancelled (done got -ECANCELED) or timed out (done got
 * -ETIMEDOUT), so once everything is delivered submitted == completed +
 * cancelled + timed_out (no job here has a deadline).
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "pool_helpers.h"

static void shutdown_clean(void)
{
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}

static tern_loop *new_loop(void)
{
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    return loop;
}

Test(stats, all_zero_before_the_pool_starts)
{
    tern_pool_stats s = ph_stats();
    cr_assert(!tern__pool_running());
    cr_assert_eq(s.threads, 0u);
    cr_assert_eq(s.busy, 0u);
    cr_assert_eq(s.queued, 0u);
    cr_assert_eq(s.queued_peak, 0u);
    cr_assert_eq(s.reserved, 0u);
    cr_assert_eq(s.long_threads, 0u);
    cr_assert_eq(s.long_busy, 0u);
    cr_assert_eq(s.submitted, 0u);
    cr_assert_eq(s.completed, 0u);
    cr_assert_eq(s.cancelled, 0u);
    cr_assert_eq(s.refused_queue_full, 0u);
    cr_assert_eq(s.refused_long_ceiling, 0u);
    cr_assert_eq(s.refused_undelivered, 0u);
    cr_assert_eq(s.refused_operations, 0u);
    cr_assert_eq(s.refused_owner_cap, 0u);
    cr_assert_eq(s.refused_shutdown, 0u);
    cr_assert_eq(s.refused_threads, 0u);
    cr_assert_eq(s.timed_out, 0u);
    cr_assert_eq(s.wait_p50_ns, 0u);
    cr_assert_eq(s.wait_p99_ns, 0u);
    cr_assert_eq(s.run_p50_ns, 0u);
    cr_assert_eq(s.run_p99_ns, 0u);

    /* Creating a loop alone does not start the pool. */
    tern_loop *loop = new_loop();
    cr_assert_eq(ph_stats().threads, 0u);
    tern_loop_free(loop);
    shutdown_clean();
}

Test(stats, occupancy_counters_follow_the_pool)
{
    enum { T = 2 };
    tern_pool_config cfg = ph_config(T, 16, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    bool ok;
    /* Workers count themselves as they start: "a moment apart". */
    PH_WAIT_UNTIL(ok, ph_stats().threads == T);
    tern_pool_stats s = ph_stats();
    cr_assert(ok, "%u threads, configured %d", s.threads, T);
    cr_assert_eq(s.busy, 0u);
    cr_assert_eq(s.long_threads, 0u);

    tern_loop *loop = new_loop();
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job b[T + 3], l;
    for (int i = 0; i < T + 3; i++) {
        ph_job_init(&b[i], &gate);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &b[i]), 0);
    }
    ph_job_init(&l, &gate);
    cr_assert_eq(ph_submit(loop, TERN_LONG, &l), 0);
    cr_assert(ph_gate_wait_entered(&gate, T + 1));
    PH_WAIT_UNTIL(ok, ph_stats().busy == T && ph_stats().queued == 3 &&
                          ph_stats().long_busy == 1 && ph_stats().long_threads == 1);
    s = ph_stats();
    cr_assert(ok, "busy %u queued %u long_busy %u long_threads %u", s.busy, s.queued, s.long_busy,
              s.long_threads);
    cr_assert_geq(s.queued_peak, 3u);
    cr_assert_eq(s.submitted, (uint64_t)T + 4);

    ph_gate_open(&gate);
    PH_PUMP_UNTIL(ok, loop, ph_done_total(b, T + 3) == T + 3 && atomic_load(&l.done_calls) == 1);
    cr_assert(ok);
    PH_WAIT_UNTIL(ok, ph_stats().busy == 0 && ph_stats().queued == 0 && ph_stats().long_busy == 0);
    cr_assert(ok);
    s = ph_stats();
    cr_assert_geq(s.queued_peak, 3u, "the peak must survive the drain");
    cr_assert_eq(s.completed, (uint64_t)T + 4);
    cr_assert_eq(s.cancelled, 0u);
    tern_loop_free(loop);
    ph_gate_destroy(&gate);
    shutdown_clean();
}

/*
 * A loop adds its dones' outcomes once per step, not once per job. A done
 * reading the figures on its own thread still sees itself and every done
 * before it, and another thread sees them all once the step has ended.
 */
struct counted_done {
    unsigned seen, cancelled_seen;
    uint64_t completed0, cancelled0;
    ph_job *blocker; /* its done counts too */
    bool exact;      /* every done saw the outcomes so far, itself included */
};

static void *empty_work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

static void read_in_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)result;
    struct counted_done *c = arg;
    c->seen++;
    c->cancelled_seen += status == -ECANCELED;
    tern_pool_stats s = ph_stats();
    uint64_t all = c->seen + (unsigned)atomic_load(&c->blocker->done_calls);
    if (s.completed - c->completed0 + s.cancelled - c->cancelled0 != all ||
        s.cancelled - c->cancelled0 != c->cancelled_seen)
        c->exact = false;
}

static void *read_elsewhere(void *arg)
{
    *(tern_pool_stats *)arg = ph_stats();
    return NULL;
}

Test(stats, outcomes_are_exact_on_the_loop_thread_and_whole_after_the_step)
{
    enum { N = 40 };
    tern_pool_config cfg = ph_config(1, 64, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop();
    tern_pool_stats s0 = ph_stats();
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job blocker;
    ph_job_init(&blocker, &gate);
    struct counted_done c = {.completed0 = s0.completed, .cancelled0 = s0.cancelled,
                             .blocker = &blocker, .exact = true};
    /* The one worker is held, so the first job is cancelled while queued. */
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &blocker), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    tern_id first = 0;
    for (int i = 0; i < N; i++) {
        tern_id id;
        cr_assert_eq(tern_submit(loop, TERN_BOUNDED, empty_work, read_in_done, &c, &id), 0);
        if (i == 0)
            first = id;
    }
    cr_assert_eq(tern_cancel(loop, first), TERN_CANCEL_REQUESTED);
    bool ok;
    /* The request resolves on the loop: the queued job becomes a tombstone. */
    PH_PUMP_UNTIL(ok, loop, ph_stats().tombstones == 1);
    cr_assert(ok);
    ph_gate_open(&gate);
    PH_PUMP_UNTIL(ok, loop, c.seen == N && atomic_load(&blocker.done_calls) == 1);
    cr_assert(ok, "%u of %d dones", c.seen, N);
    cr_assert_eq(c.cancelled_seen, 1u);
    cr_assert(c.exact, "a done read outcomes that did not count itself and those before it");
    /* Dones that read nothing: their step's end adds them. */
    ph_job quiet[N];
    for (int i = 0; i < N; i++) {
        ph_job_init(&quiet[i], NULL);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &quiet[i]), 0);
    }
    PH_PUMP_UNTIL(ok, loop, ph_done_total(quiet, N) == N);
    cr_assert(ok);
    /* The steps have ended: another thread sees every outcome at once. */
    tern_pool_stats s;
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, read_elsewhere, &s), 0);
    cr_assert_eq(pthread_join(t, NULL), 0);
    cr_assert_eq(s.completed - s0.completed, (uint64_t)N + N);
    cr_assert_eq(s.cancelled - s0.cancelled, 1u);
    tern_loop_free(loop);
    ph_gate_destroy(&gate);
    shutdown_clean();
}

Test(stats, submitted_is_completed_plus_cancelled)
{
    enum { N = 30 };
    tern_pool_config cfg = ph_config(1, 64, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop();
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job blocker, jobs[N];
    ph_job_init(&blocker, &gate);
    blocker.poll_cancel = true;
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &blocker), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    for (int i = 0; i < N; i++) {
        ph_job_init(&jobs[i], NULL);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &jobs[i]), 0);
    }
    /* Cancel a third of the queued jobs and the running one. */
    int cancelled = 1;
    cr_assert_eq(tern_cancel(loop, blocker.id), TERN_CANCEL_REQUESTED); /* nobody runs it */
    for (int i = 0; i < N; i += 3, cancelled++)
        cr_assert_eq(tern_cancel(loop, jobs[i].id), TERN_CANCEL_REQUESTED);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(jobs, N) == N && atomic_load(&blocker.done_calls) == 1);
    cr_assert(ok);
    int seen_cancelled = blocker.status == -ECANCELED;
    for (int i = 0; i < N; i++)
        seen_cancelled += jobs[i].status == -ECANCELED;
    cr_assert_eq(seen_cancelled, cancelled);

    tern_pool_stats s;
    PH_WAIT_UNTIL(ok, (s = ph_stats(), s.completed + s.cancelled == s.submitted));
    cr_assert(ok, "submitted %llu completed %llu cancelled %llu", (unsigned long long)s.submitted,
              (unsigned long long)s.completed, (unsigned long long)s.cancelled);
    cr_assert_eq(s.submitted, (uint64_t)N + 1);
    cr_assert_eq(s.cancelled, (uint64_t)cancelled);
    cr_assert_eq(s.completed, (uint64_t)(N + 1 - cancelled));
    tern_loop_free(loop);
    ph_gate_destroy(&gate);
    shutdown_clean();
}

/*
 * Queue-wait and run-time percentiles. One worker and jobs that each
 * sleep a known time, so each waits behind the ones before it: both
 * figures are non-zero, p50 <= p99, and the run time is at least the
 * sleep, to within the histogram bucket the header documents (1/8).
 */
Test(stats, percentiles_are_non_zero_ordered_and_cover_the_run_time)
{
    /* Enough jobs that a pool timing only a sample of queue waits (one
     * in four, say) still has a handful to rank. */
    enum { N = 40 };
    const uint64_t sleep_ns = 2 * PH_MS;
    tern_pool_config cfg = ph_config(1, 64, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop();
    ph_job jobs[N];
    for (int i = 0; i < N; i++) {
        ph_job_init(&jobs[i], NULL);
        jobs[i].sleep_ns = sleep_ns;
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &jobs[i]), 0);
    }
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(jobs, N) == N);
    cr_assert(ok);

    tern_pool_stats s;
    PH_WAIT_UNTIL(ok,
                  (s = ph_stats(), s.completed == N && s.run_p50_ns != 0 && s.wait_p50_ns != 0));
    cr_assert(ok, "percentiles stayed zero: wait p50 %llu run p50 %llu",
              (unsigned long long)s.wait_p50_ns, (unsigned long long)s.run_p50_ns);
    cr_log_info("wait p50 %llu p99 %llu, run p50 %llu p99 %llu ns",
                (unsigned long long)s.wait_p50_ns, (unsigned long long)s.wait_p99_ns,
                (unsigned long long)s.run_p50_ns, (unsigned long long)s.run_p99_ns);
    cr_assert_neq(s.wait_p99_ns, 0u);
    cr_assert_neq(s.run_p99_ns, 0u);
    cr_assert_leq(s.wait_p50_ns, s.wait_p99_ns);
    cr_assert_leq(s.run_p50_ns, s.run_p99_ns);
    cr_assert_geq(s.run_p50_ns, sleep_ns - sleep_ns / 8,
                  "run p50 %llu ns is below the %llu ns every job slept",
                  (unsigned long long)s.run_p50_ns, (unsigned long long)sleep_ns);
    /* Half the jobs waited behind at least N/2 - 1 sleeps. */
    uint64_t median_wait = (uint64_t)(N / 2 - 1) * sleep_ns;
    cr_assert_geq(s.wait_p50_ns, median_wait - median_wait / 8,
                  "wait p50 %llu ns is below the %llu ns the middle job must have waited",
                  (unsigned long long)s.wait_p50_ns, (unsigned long long)median_wait);
    tern_loop_free(loop);
    shutdown_clean();
}

/*
 * p50 and p99 are different ranks: nine jobs in ten sleep 1 ms and one in
 * ten sleeps 20 ms, so p50 reports a short job and p99 a long one. (A short
 * sleep would have to overrun twentyfold on most jobs for this to blur.)
 */
Test(stats, p50_and_p99_are_different_ranks)
{
    enum { N = 100 };
    const uint64_t short_ns = 1 * PH_MS, long_ns = 20 * PH_MS;
    tern_pool_config cfg = ph_config(4, 256, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop();
    ph_job jobs[N];
    for (int i = 0; i < N; i++) {
        ph_job_init(&jobs[i], NULL);
        jobs[i].sleep_ns = i % 10 == 9 ? long_ns : short_ns;
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &jobs[i]), 0);
    }
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(jobs, N) == N);
    cr_assert(ok);
    tern_pool_stats s;
    PH_WAIT_UNTIL(ok, (s = ph_stats(), s.completed == N && s.run_p99_ns != 0));
    cr_assert(ok);
    cr_log_info("run p50 %llu p99 %llu ns", (unsigned long long)s.run_p50_ns,
                (unsigned long long)s.run_p99_ns);
    cr_assert_geq(s.run_p50_ns, short_ns - short_ns / 8);
    cr_assert_geq(s.run_p99_ns, long_ns - long_ns / 8, "run p99 %llu ns misses the 20 ms jobs",
                  (unsigned long long)s.run_p99_ns);
    cr_assert_lt(s.run_p50_ns, s.run_p99_ns, "p50 and p99 report the same rank (%llu ns)",
                 (unsigned long long)s.run_p50_ns);
    tern_loop_free(loop);
    shutdown_clean();
}

/*
 * A worker whose jobs are short times one in four, chosen at random, and
 * counts it four times (pool/worker.c, "Timing"); it times every job
 * while they are long (16 us and more). Run the pattern long, long,
 * short, long, short on one worker: three jobs in five are long, so the
 * median is a long one. Counted once each, the sampled jobs would put it
 * on a short one: a timed short job sends the worker back to sampling,
 * where a long job is timed only one time in four, while a timed long
 * job has every job after it timed. One worker and its fixed seed make
 * the choices the same on every run.
 */
static void run_pattern(const char *pattern, int rounds, uint64_t long_ns, tern_pool_stats *s)
{
    int len = (int)strlen(pattern), n = len * rounds;
    tern_pool_config cfg = ph_config(1, (unsigned)n, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop();
    ph_job *jobs = calloc((size_t)n, sizeof *jobs);
    cr_assert_not_null(jobs);
    for (int i = 0; i < n; i++) {
        ph_job_init(&jobs[i], NULL);
        jobs[i].sleep_ns = pattern[i % len] == 'L' ? long_ns : 0;
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &jobs[i]), 0);
    }
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(jobs, (size_t)n) == n);
    cr_assert(ok);
    PH_WAIT_UNTIL(ok, (*s = ph_stats(), s->completed == (uint64_t)n));
    cr_assert(ok);
    cr_log_info("%s x%d: run p50 %llu p99 %llu ns", pattern, rounds,
                (unsigned long long)s->run_p50_ns, (unsigned long long)s->run_p99_ns);
    tern_loop_free(loop);
    free(jobs);
    shutdown_clean();
}

Test(stats, sampled_run_times_keep_each_jobs_share)
{
    const uint64_t long_ns = 100 * PH_MS / 1000;
    tern_pool_stats s;
    run_pattern("LLSLS", 200, long_ns, &s);
    cr_assert_geq(s.run_p50_ns, long_ns - long_ns / 8,
                  "run p50 %llu ns: three jobs in five slept %llu ns, the median is one of them",
                  (unsigned long long)s.run_p50_ns, (unsigned long long)long_ns);
}

/* Among short jobs, sampled, one slow job in ten still reaches p99. */
Test(stats, one_slow_job_in_ten_reaches_p99_among_short_ones)
{
    const uint64_t long_ns = 200 * PH_MS / 1000;
    tern_pool_stats s;
    run_pattern("SSSSSSSSSL", 100, long_ns, &s);
    cr_assert_neq(s.run_p50_ns, 0u, "short jobs were never timed");
    cr_assert_lt(s.run_p50_ns, long_ns / 2, "run p50 %llu ns: nine jobs in ten did not sleep",
                 (unsigned long long)s.run_p50_ns);
    cr_assert_geq(s.run_p99_ns, long_ns - long_ns / 8, "run p99 %llu ns misses the slow jobs",
                  (unsigned long long)s.run_p99_ns);
}

Test(stats, long_jobs_count_in_the_run_time)
{
    const uint64_t sleep_ns = 3 * PH_MS;
    tern_pool_config cfg = ph_config(1, 64, 8);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop();
    ph_job jobs[8];
    for (int i = 0; i < 8; i++) {
        ph_job_init(&jobs[i], NULL);
        jobs[i].sleep_ns = sleep_ns;
        cr_assert_eq(ph_submit(loop, TERN_LONG, &jobs[i]), 0);
    }
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(jobs, 8) == 8);
    cr_assert(ok);
    tern_pool_stats s;
    PH_WAIT_UNTIL(ok, (s = ph_stats(), s.completed == 8 && s.run_p50_ns != 0));
    cr_assert(ok);
    cr_assert_leq(s.run_p50_ns, s.run_p99_ns);
    cr_assert_geq(s.run_p50_ns, sleep_ns - sleep_ns / 8);
    tern_loop_free(loop);
    shutdown_clean();
}

Test(stats, loop_stats_are_zero_on_a_new_loop)
{
    tern_loop *loop = new_loop();
    tern_loop_stats ls = ph_loop_stats(loop);
    cr_assert_eq(ls.undelivered, 0u);
    cr_assert_eq(ls.undelivered_peak, 0u);
    cr_assert_eq(ls.live_operations, 0u);
    tern_loop_free(loop);
    shutdown_clean();
}
