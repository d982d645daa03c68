/*
 * Admission (SPEC §3, §4): each refusal cause returns -EAGAIN before the
 * work exists and leaves no trace — no completion is ever delivered for
 * it, its work never runs, nothing about the loop changes, and only the
 * matching refused_* counter moves. Also the undelivered credit counts.
 */
#include <criterion/criterion.h>

#include "pool_helpers.h"

static void shutdown_clean(void)
{
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}

static tern_loop *new_loop(unsigned max_operations, unsigned max_undelivered)
{
    tern_loop_options opts;
    tern_loop *loop = NULL;
    tern_loop_options_init(&opts);
    if (max_operations != 0)
        opts.max_operations = max_operations;
    if (max_undelivered != 0)
        opts.max_undelivered = max_undelivered;
    cr_assert_eq(tern_loop_new(&loop, &opts), 0);
    return loop;
}

enum cause { QUEUE_FULL, LONG_CEILING, UNDELIVERED, OPERATIONS };

static uint64_t cause_count(ph_refusals r, enum cause c)
{
    switch (c) {
    case QUEUE_FULL: return r.queue_full;
    case LONG_CEILING: return r.long_ceiling;
    case UNDELIVERED: return r.undelivered;
    default: return r.operations;
    }
}

static const char *cause_names[] = {"queue_full", "long_ceiling", "undelivered", "operations"};

/*
 * Submit `victim` expecting a refusal for `cause`, and check that it left
 * no trace in the pool statistics or the loop's counters.
 */
static void expect_refusal(tern_loop *loop, tern_occupancy occ, ph_job *victim, enum cause cause)
{
    tern_pool_stats ps0 = ph_stats();
    ph_refusals r0 = ph_refusals_now();
    tern_loop_stats ls0 = ph_loop_stats(loop);

    tern_id id = 12345;
    int rc = tern_submit(loop, occ, ph_work, ph_done, victim, &id);
    cr_assert_eq(rc, -EAGAIN, "expected -EAGAIN for %s, got %d (%s)", cause_names[cause], rc,
                 tern_err_name(rc));

    ph_refusals r1 = ph_refusals_now();
    tern_pool_stats ps1 = ph_stats();
    tern_loop_stats ls1 = ph_loop_stats(loop);
    for (int c = QUEUE_FULL; c <= OPERATIONS; c++) {
        uint64_t want = cause_count(r0, (enum cause)c) + (c == (int)cause ? 1 : 0);
        cr_assert_eq(cause_count(r1, (enum cause)c), want, "refused_%s went %llu -> %llu",
                     cause_names[c], (unsigned long long)cause_count(r0, (enum cause)c),
                     (unsigned long long)cause_count(r1, (enum cause)c));
    }
    cr_assert_eq(ps1.submitted, ps0.submitted, "a refused job was counted as submitted");
    cr_assert_eq(ls1.undelivered, ls0.undelivered, "a refused job holds an undelivered credit");
    cr_assert_eq(ls1.live_operations, ls0.live_operations, "a refused job is live");
}

/* Pump until the given records are all delivered, then check the victim never was. */
static void finish(tern_loop *loop, ph_job *jobs, size_t n, ph_job *victim)
{
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(jobs, n) == (int)n);
    cr_assert(ok, "accepted jobs were not all delivered");
    /* Let the loop run dry: nothing may be owed to the refused job. */
    cr_assert_eq(tern_loop_run(loop), 0);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(atomic_load(&jobs[i].done_calls), 1);
        cr_assert_eq(jobs[i].status, 0);
    }
    tern_loop_free(loop);
    cr_assert_eq(atomic_load(&victim->ran), 0, "the refused job's work ran");
    cr_assert_eq(atomic_load(&victim->done_calls), 0, "the refused job got a completion");
}

Test(submit, queue_full_refuses_and_leaves_no_trace)
{
    enum { CAP = 4 };
    tern_pool_config cfg = ph_config(1, CAP, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop(0, 0);
    ph_gate gate;
    ph_gate_init(&gate);

    /* The one worker takes the first job and blocks; the rest fill the queue. */
    ph_job jobs[1 + CAP], victim;
    ph_job_init(&jobs[0], &gate);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &jobs[0]), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    for (int i = 1; i <= CAP; i++) {
        ph_job_init(&jobs[i], NULL);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &jobs[i]), 0,
                     "queued job %d of a %d-slot queue refused", i, CAP);
    }
    tern_pool_stats s = ph_stats();
    cr_assert_eq(s.queued, (unsigned)CAP);
    cr_assert_geq(s.queued_peak, (unsigned)CAP);

    ph_job_init(&victim, NULL);
    expect_refusal(loop, TERN_BOUNDED, &victim, QUEUE_FULL);
    /* Refused again: still no trace, still the same cause. */
    expect_refusal(loop, TERN_BOUNDED, &victim, QUEUE_FULL);

    ph_gate_open(&gate);
    finish(loop, jobs, 1 + CAP, &victim);
    ph_gate_destroy(&gate);
    shutdown_clean();
}

Test(submit, long_ceiling_refuses_and_leaves_no_trace)
{
    enum { CEIL = 2 };
    tern_pool_config cfg = ph_config(1, 16, CEIL);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop(0, 0);
    ph_gate gate;
    ph_gate_init(&gate);

    ph_job jobs[CEIL], victim;
    for (int i = 0; i < CEIL; i++) {
        ph_job_init(&jobs[i], &gate);
        cr_assert_eq(ph_submit(loop, TERN_LONG, &jobs[i]), 0);
    }
    cr_assert(ph_gate_wait_entered(&gate, CEIL));
    tern_pool_stats s = ph_stats();
    cr_assert_eq(s.long_threads, (unsigned)CEIL);
    cr_assert_eq(s.long_busy, (unsigned)CEIL);

    ph_job_init(&victim, NULL);
    expect_refusal(loop, TERN_LONG, &victim, LONG_CEILING);
    cr_assert_eq(ph_stats().long_threads, (unsigned)CEIL, "a refused long job started a thread");

    ph_gate_open(&gate);
    finish(loop, jobs, CEIL, &victim);
    ph_gate_destroy(&gate);
    shutdown_clean();
}

/* The ceiling counts jobs that hold a long thread, not submissions ever made. */
Test(submit, long_ceiling_frees_up_when_a_long_job_returns)
{
    tern_pool_config cfg = ph_config(1, 16, 1);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop(0, 0);
    ph_job jobs[3];
    bool ok;
    for (int i = 0; i < 3; i++) {
        ph_job_init(&jobs[i], NULL);
        cr_assert_eq(ph_submit(loop, TERN_LONG, &jobs[i]), 0, "long job %d refused", i);
        PH_PUMP_UNTIL(ok, loop, atomic_load(&jobs[i].done_calls) == 1);
        cr_assert(ok);
        /* The worker is free again once its job has been delivered and it
         * has parked; wait for that. */
        char what[256];
        cr_assert(ph_wait_parked(jobs[i].work_tid, what, sizeof what),
                  "long job %d: its worker never parked: %s (long_busy %u)", i, what,
                  ph_stats().long_busy);
    }
    tern_loop_free(loop);
    shutdown_clean();
}

Test(submit, max_undelivered_refuses_and_leaves_no_trace)
{
    enum { MAXU = 2 };
    tern_pool_config cfg = ph_config(2, 64, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop(0, MAXU);
    ph_gate gate;
    ph_gate_init(&gate);

    ph_job jobs[MAXU], victim;
    for (int i = 0; i < MAXU; i++) {
        ph_job_init(&jobs[i], &gate);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &jobs[i]), 0);
    }
    cr_assert_eq(ph_loop_stats(loop).undelivered, (unsigned)MAXU);

    ph_job_init(&victim, NULL);
    expect_refusal(loop, TERN_BOUNDED, &victim, UNDELIVERED);
    /* The credit is per loop, not per class: a long job is refused too. */
    expect_refusal(loop, TERN_LONG, &victim, UNDELIVERED);

    /* Finished but undelivered jobs still hold their credits. */
    ph_gate_open(&gate);
    bool ok;
    PH_WAIT_UNTIL(ok, atomic_load(&jobs[0].returned) == 1 && atomic_load(&jobs[1].returned) == 1);
    cr_assert(ok);
    expect_refusal(loop, TERN_BOUNDED, &victim, UNDELIVERED);

    /* Delivery returns the credits. */
    PH_PUMP_UNTIL(ok, loop, ph_done_total(jobs, MAXU) == MAXU);
    cr_assert(ok);
    cr_assert_eq(ph_loop_stats(loop).undelivered, 0u);
    ph_job again;
    ph_job_init(&again, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &again), 0, "credits did not come back");
    PH_PUMP_UNTIL(ok, loop, atomic_load(&again.done_calls) == 1);
    cr_assert(ok);

    finish(loop, jobs, MAXU, &victim);
    ph_gate_destroy(&gate);
    shutdown_clean();
}

static void timer_never(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
    cr_assert_fail("the guard timer fired");
}

Test(submit, max_operations_refuses_and_leaves_no_trace)
{
    tern_pool_config cfg = ph_config(2, 64, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    /* Two live operations: a timer and a blocked job. */
    tern_loop *loop = new_loop(2, 0);
    ph_gate gate;
    ph_gate_init(&gate);

    tern_id timer = 0;
    cr_assert_eq(tern_timer_start(loop, 3600 * PH_SEC, 0, timer_never, NULL, &timer), 0);
    ph_job jobs[1], victim;
    ph_job_init(&jobs[0], &gate);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &jobs[0]), 0);

    ph_job_init(&victim, NULL);
    expect_refusal(loop, TERN_BOUNDED, &victim, OPERATIONS);
    expect_refusal(loop, TERN_LONG, &victim, OPERATIONS);

    ph_gate_open(&gate);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&jobs[0].done_calls) == 1);
    cr_assert(ok);
    cr_assert_eq(tern_timer_stop(loop, timer), 0);
    finish(loop, jobs, 1, &victim);
    ph_gate_destroy(&gate);
    shutdown_clean();
}

/* ------------------------------------------------------------------ */
/* Undelivered credits in the loop statistics                          */
/* ------------------------------------------------------------------ */

Test(submit, undelivered_counts_accepted_jobs_until_delivery)
{
    tern_pool_config cfg = ph_config(2, 64, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop(0, 0);
    ph_gate gate;
    ph_gate_init(&gate);

    tern_loop_stats ls = ph_loop_stats(loop);
    cr_assert_eq(ls.undelivered, 0u);
    cr_assert_eq(ls.undelivered_peak, 0u);

    ph_job jobs[3];
    ph_job_init(&jobs[0], &gate);
    ph_job_init(&jobs[1], &gate);
    ph_job_init(&jobs[2], NULL); /* finishes at once, stays undelivered */
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(ph_submit(loop, i == 1 ? TERN_LONG : TERN_BOUNDED, &jobs[i]), 0);
        ls = ph_loop_stats(loop);
        cr_assert_eq(ls.undelivered, (unsigned)i + 1);
        cr_assert_eq(ls.undelivered_peak, (unsigned)i + 1);
    }
    bool ok;
    PH_WAIT_UNTIL(ok, atomic_load(&jobs[2].returned) == 1);
    cr_assert(ok);
    cr_assert_eq(ph_loop_stats(loop).undelivered, 3u, "a finished job is not yet delivered");

    PH_PUMP_UNTIL(ok, loop, atomic_load(&jobs[2].done_calls) == 1);
    cr_assert(ok);
    ls = ph_loop_stats(loop);
    cr_assert_eq(ls.undelivered, 2u);
    cr_assert_eq(ls.undelivered_peak, 3u);

    ph_gate_open(&gate);
    PH_PUMP_UNTIL(ok, loop, ph_done_total(jobs, 3) == 3);
    cr_assert(ok);
    ls = ph_loop_stats(loop);
    cr_assert_eq(ls.undelivered, 0u);
    cr_assert_eq(ls.undelivered_peak, 3u, "the peak must survive delivery");

    /* A lower level later does not lower the peak. */
    ph_job one;
    ph_job_init(&one, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &one), 0);
    PH_PUMP_UNTIL(ok, loop, atomic_load(&one.done_calls) == 1);
    cr_assert(ok);
    ls = ph_loop_stats(loop);
    cr_assert_eq(ls.undelivered, 0u);
    cr_assert_eq(ls.undelivered_peak, 3u);

    tern_loop_free(loop);
    ph_gate_destroy(&gate);
    shutdown_clean();
}

Test(submit, cancelled_jobs_return_their_credit)
{
    tern_pool_config cfg = ph_config(1, 64, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop(0, 2);
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job a, b;
    ph_job_init(&a, &gate);
    ph_job_init(&b, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &a), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &b), 0);
    cr_assert_eq(tern_cancel(loop, b.id), TERN_CANCEL_REQUESTED); /* resolved next turn */
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&b.done_calls) == 1);
    cr_assert(ok);
    cr_assert_eq(b.status, -ECANCELED);
    cr_assert_eq(ph_loop_stats(loop).undelivered, 1u, "the cancelled job kept its credit");

    ph_job c;
    ph_job_init(&c, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &c), 0, "the cancelled job's credit is lost");
    ph_gate_open(&gate);
    PH_PUMP_UNTIL(ok, loop, atomic_load(&a.done_calls) == 1 && atomic_load(&c.done_calls) == 1);
    cr_assert(ok);
    cr_assert_eq(atomic_load(&b.ran), 0);
    tern_loop_free(loop);
    ph_gate_destroy(&gate);
    shutdown_clean();
}
