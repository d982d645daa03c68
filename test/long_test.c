/*
 * The long class (SPEC §3): no queue, a parked worker or a new thread or a
 * refusal at the ceiling; idle workers retire; neither class can take a
 * thread or a queue slot from the other; and freeing a loop waits for its
 * running long jobs, which see tern_job_cancelled() turn true.
 */
#include <criterion/criterion.h>
#include <stdlib.h>

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

Test(long_class, saturated_long_class_does_not_refuse_or_delay_bounded_work)
{
    enum { CEIL = 3, BOUNDED = 16 };
    tern_pool_config cfg = ph_config(1, 64, CEIL);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop();
    ph_gate gate;
    ph_gate_init(&gate);

    ph_job longs[CEIL], bounded[BOUNDED];
    for (int i = 0; i < CEIL; i++) {
        ph_job_init(&longs[i], &gate);
        cr_assert_eq(ph_submit(loop, TERN_LONG, &longs[i]), 0);
    }
    cr_assert(ph_gate_wait_entered(&gate, CEIL));
    cr_assert_eq(ph_stats().long_busy, (unsigned)CEIL);

    /* Every long thread is held; bounded work is still accepted and runs. */
    for (int i = 0; i < BOUNDED; i++) {
        ph_job_init(&bounded[i], NULL);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &bounded[i]), 0,
                     "bounded job %d refused while the long class is saturated", i);
    }
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(bounded, BOUNDED) == BOUNDED);
    cr_assert(ok, "bounded work did not complete while the long class was saturated");
    cr_assert_eq(ph_gate_inside(&gate), (unsigned)CEIL, "the long jobs were not blocking");
    cr_assert_eq(ph_done_total(longs, CEIL), 0);
    for (int i = 0; i < BOUNDED; i++)
        cr_assert_eq(bounded[i].status, 0);

    ph_gate_open(&gate);
    PH_PUMP_UNTIL(ok, loop, ph_done_total(longs, CEIL) == CEIL);
    cr_assert(ok);
    tern_loop_free(loop);
    ph_gate_destroy(&gate);
    shutdown_clean();
}

Test(long_class, full_bounded_queue_does_not_refuse_a_long_job)
{
    enum { CAP = 2 };
    tern_pool_config cfg = ph_config(1, CAP, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop();
    ph_gate gate;
    ph_gate_init(&gate);

    ph_job bounded[1 + CAP], extra, lj;
    ph_job_init(&bounded[0], &gate);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &bounded[0]), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    for (int i = 1; i <= CAP; i++) {
        ph_job_init(&bounded[i], NULL);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &bounded[i]), 0);
    }
    ph_job_init(&extra, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &extra), -EAGAIN, "the bounded queue is not full");

    ph_job_init(&lj, NULL);
    cr_assert_eq(ph_submit(loop, TERN_LONG, &lj), 0, "a full bounded queue refused a long job");
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&lj.done_calls) == 1);
    cr_assert(ok, "the long job waited behind the bounded class");
    cr_assert_eq(lj.status, 0);
    cr_assert_eq(ph_done_total(bounded, 1 + CAP), 0, "the bounded worker was not blocked");

    ph_gate_open(&gate);
    PH_PUMP_UNTIL(ok, loop, ph_done_total(bounded, 1 + CAP) == 1 + CAP);
    cr_assert(ok);
    tern_loop_free(loop);
    cr_assert_eq(atomic_load(&extra.ran), 0);
    cr_assert_eq(atomic_load(&extra.done_calls), 0);
    ph_gate_destroy(&gate);
    shutdown_clean();
}

Test(long_class, a_long_job_never_waits_behind_another)
{
    enum { N = 6 };
    tern_pool_config cfg = ph_config(1, 16, N);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop();
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job jobs[N];
    for (int i = 0; i < N; i++) {
        ph_job_init(&jobs[i], &gate);
        cr_assert_eq(ph_submit(loop, TERN_LONG, &jobs[i]), 0);
    }
    /* All of them run at once, each on its own thread. */
    cr_assert(ph_gate_wait_entered(&gate, N), "only %u of %d long jobs started",
              ph_gate_entered(&gate), N);
    tern_pool_stats s = ph_stats();
    cr_assert_eq(s.long_threads, (unsigned)N);
    cr_assert_eq(s.long_busy, (unsigned)N);
    ph_gate_open(&gate);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(jobs, N) == N);
    cr_assert(ok);
    for (int i = 0; i < N; i++)
        for (int k = i + 1; k < N; k++)
            cr_assert(!pthread_equal(jobs[i].work_thread, jobs[k].work_thread));
    tern_loop_free(loop);
    ph_gate_destroy(&gate);
    shutdown_clean();
}

Test(long_class, idle_long_workers_retire)
{
    tern_pool_config cfg = ph_config(1, 16, 4);
    cfg.long_idle_timeout_ns = 50 * PH_MS;
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop();
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job jobs[2];
    for (int i = 0; i < 2; i++) {
        ph_job_init(&jobs[i], &gate);
        cr_assert_eq(ph_submit(loop, TERN_LONG, &jobs[i]), 0);
    }
    cr_assert(ph_gate_wait_entered(&gate, 2));
    tern_pool_stats s = ph_stats();
    cr_assert_eq(s.long_threads, 2u);
    cr_assert_eq(s.long_busy, 2u);
    ph_gate_open(&gate);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(jobs, 2) == 2);
    cr_assert(ok);

    /* Both park, then retire once idle for the timeout. Keep the loop
     * turning in case retirement rides on a loop deadline. */
    PH_PUMP_UNTIL(ok, loop, ph_stats().long_threads == 0);
    cr_assert(ok, "idle long workers did not retire (long_threads %u)", ph_stats().long_threads);
    cr_assert_eq(ph_stats().long_busy, 0u);

    /* A long job after retirement starts a fresh thread. */
    ph_job again;
    ph_job_init(&again, NULL);
    cr_assert_eq(ph_submit(loop, TERN_LONG, &again), 0);
    PH_PUMP_UNTIL(ok, loop, atomic_load(&again.done_calls) == 1);
    cr_assert(ok);
    cr_assert_eq(again.status, 0);
    tern_loop_free(loop);
    ph_gate_destroy(&gate);
    shutdown_clean();
}

Test(long_class, a_parked_long_worker_is_reused)
{
    /* The default idle timeout (10 s) keeps the first worker parked. */
    tern_pool_config cfg = ph_config(1, 16, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop();
    bool ok;

    ph_job first;
    ph_job_init(&first, NULL);
    cr_assert_eq(ph_submit(loop, TERN_LONG, &first), 0);
    PH_PUMP_UNTIL(ok, loop, atomic_load(&first.done_calls) == 1);
    cr_assert(ok);
    /* long_busy drops as the worker leaves the job; it parks a moment
     * later. Submitting in that moment may legitimately start a second
     * thread, so wait until it is parked (well inside the 10 s idle
     * timeout). */
    char what[256];
    cr_assert(ph_wait_parked(first.work_tid, what, sizeof what),
              "the long worker never parked after its job: %s (long_busy %u)", what,
              ph_stats().long_busy);
    cr_assert_eq(ph_stats().long_threads, 1u);

    for (int round = 0; round < 5; round++) {
        ph_gate gate;
        ph_gate_init(&gate);
        ph_job next;
        ph_job_init(&next, &gate);
        cr_assert_eq(ph_submit(loop, TERN_LONG, &next), 0);
        cr_assert(ph_gate_wait_entered(&gate, 1));
        tern_pool_stats s = ph_stats();
        cr_assert_eq(s.long_threads, 1u, "round %d: a new thread started instead of reusing the "
                                         "parked one (long_threads %u)", round, s.long_threads);
        cr_assert_eq(s.long_busy, 1u);
        cr_assert(pthread_equal(next.work_thread, first.work_thread),
                  "round %d ran on another thread", round);
        ph_gate_open(&gate);
        PH_PUMP_UNTIL(ok, loop, atomic_load(&next.done_calls) == 1);
        cr_assert(ok);
        cr_assert(ph_wait_parked(next.work_tid, what, sizeof what),
                  "round %d: the long worker never parked again: %s", round, what);
        ph_gate_destroy(&gate);
    }
    tern_loop_free(loop);
    shutdown_clean();
}

/* ------------------------------------------------------------------ */
/* Freeing a loop while its long job runs                              */
/* ------------------------------------------------------------------ */

struct polling_job {
    atomic_bool entered;
    atomic_bool saw_cancel;
    atomic_bool returned;
    void *result;
    atomic_int done_calls;
    int status;
    void *done_result;
};

static void *poll_until_cancelled(tern_job *job, void *arg)
{
    struct polling_job *p = arg;
    uint64_t deadline = ph_now() + PH_LIVENESS_NS;
    atomic_store(&p->entered, true);
    while (ph_now() < deadline) {
        if (tern_job_cancelled(job)) {
            atomic_store(&p->saw_cancel, true);
            break;
        }
        ph_sleep_ns(PH_MS);
    }
    /* Give free() something to wait for once the flag is seen. */
    ph_sleep_ns(20 * PH_MS);
    p->result = malloc(32);
    atomic_store(&p->returned, true);
    return p->result;
}

static void polling_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    struct polling_job *p = arg;
    (void)loop;
    (void)id;
    p->status = status;
    p->done_result = result;
    free(result); /* done owns the result whatever the status */
    atomic_fetch_add(&p->done_calls, 1);
}

Test(long_class, freeing_a_loop_cancels_and_waits_for_its_running_long_job)
{
    tern_pool_config cfg = ph_config(1, 16, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop();
    struct polling_job p = {0};
    tern_id id = 0;
    cr_assert_eq(tern_submit(loop, TERN_LONG, poll_until_cancelled, polling_done, &p, &id), 0);
    bool ok;
    PH_WAIT_UNTIL(ok, atomic_load(&p.entered));
    cr_assert(ok);

    tern_loop_free(loop);
    /* free returned: so the job must have returned, and done ran once. */
    cr_assert(atomic_load(&p.returned), "tern_loop_free returned before the long job did");
    cr_assert(atomic_load(&p.saw_cancel), "the job never saw tern_job_cancelled() turn true");
    cr_assert_eq(atomic_load(&p.done_calls), 1, "done ran %d times", atomic_load(&p.done_calls));
    cr_assert_eq(p.status, -ECANCELED);
    cr_assert_eq(p.done_result, p.result, "done did not get the cancelled job's result");
    shutdown_clean();
}

Test(long_class, freeing_a_loop_with_bounded_jobs_running_and_queued)
{
    tern_pool_config cfg = ph_config(1, 16, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop();
    struct polling_job running = {0};
    ph_job queued[4];
    cr_assert_eq(
        tern_submit(loop, TERN_BOUNDED, poll_until_cancelled, polling_done, &running, NULL), 0);
    bool ok;
    PH_WAIT_UNTIL(ok, atomic_load(&running.entered));
    cr_assert(ok);
    for (int i = 0; i < 4; i++) {
        ph_job_init(&queued[i], NULL);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &queued[i]), 0);
    }
    tern_loop_free(loop);
    cr_assert(atomic_load(&running.returned));
    cr_assert_eq(atomic_load(&running.done_calls), 1);
    cr_assert_eq(running.status, -ECANCELED);
    int ran_at_free[4];
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(atomic_load(&queued[i].done_calls), 1, "queued job %d: %d completions", i,
                     atomic_load(&queued[i].done_calls));
        cr_assert_eq(queued[i].status, -ECANCELED);
        /* The worker may in principle reach a job before free cancels it;
         * a job that never ran must get a NULL result. */
        ran_at_free[i] = atomic_load(&queued[i].ran);
        if (queued[i].ran_at_done == 0)
            cr_assert_null(queued[i].done_result);
    }
    /* The tombstones the worker later finds must stay skipped. */
    ph_job probe;
    tern_loop *loop2 = new_loop();
    ph_job_init(&probe, NULL);
    cr_assert_eq(ph_submit(loop2, TERN_BOUNDED, &probe), 0);
    PH_PUMP_UNTIL(ok, loop2, atomic_load(&probe.done_calls) == 1);
    cr_assert(ok);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(atomic_load(&queued[i].ran), ran_at_free[i],
                     "a cancelled queued job ran after free");
    tern_loop_free(loop2);
    shutdown_clean();
}
