/*
 * An overflow worker that cannot be started (docs/pool.md, "Stalled
 * work"): when the watchdog's first try fails (no memory for the worker's
 * record, or no thread), nothing is counted as started and the watchdog
 * tries again at its next look, so the queue behind the stalled job still
 * moves. An overflow worker still alive at shutdown (a long idle bound)
 * is joined by the shutdown and counted out.
 *
 * The stalled job blocks on a pipe the test holds, never on a sleep.
 */
#include <criterion/criterion.h>

#include "stall_helpers.h"

static void overflow_fails_once(unsigned site)
{
    /* One worker, no long ones, one overflow worker alive until the
     * shutdown joins it. */
    tern_loop *loop = stall_setup(1, 0, 1, 3600 * PH_SEC);

    /* A first job, so the loop's records and ring exist before the fault
     * is armed: the submissions below allocate nothing. */
    ph_job warm;
    ph_job_init(&warm, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &warm), 0);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&warm.done_calls) == 1);
    cr_assert(ok);

    atomic_int blocked_done = 0;
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, block_work, count_done, &blocked_done, NULL), 0);
    PH_WAIT_UNTIL(ok, atomic_load(&blocked_started) == 1);
    cr_assert(ok);
    tern__fault_arm(site, 1);
    ph_job quick[8];
    for (int i = 0; i < 8; i++) {
        ph_job_init(&quick[i], NULL);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &quick[i]), 0);
    }
    /* The only worker is blocked: these run only once an overflow worker does. */
    PH_PUMP_UNTIL(ok, loop, ph_done_total(quick, 8) == 8);
    bool fired = tern__fault_fired();
    tern__fault_arm(0, 0);
    cr_assert(ok, "the queue behind a stalled job did not move after a failed start");
    cr_assert(fired, "the watchdog's first overflow start met the injected failure");
    tern_pool_stats s = ph_stats();
    cr_assert_eq(s.overflow_started, 1, "the failed start is not counted: %" PRIu64,
                 s.overflow_started);
    cr_assert_eq(s.overflow_now, 1);
    cr_assert_eq(s.stalls, 1);

    /* Its figures: index threads + slot, of the overflow kind; only it ran
     * the queue behind the stalled job. */
    cr_assert_eq(tern_pool_worker_count(), 2u, "one bounded worker, one overflow slot");
    tern_pool_worker_stats ws;
    int rc = tern_pool_worker_stats_get(1, &ws);
    if (rc != -ENOTSUP) {
        cr_assert_eq(rc, 0);
        cr_assert_eq(ws.kind, TERN_POOL_WORKER_OVERFLOW);
        cr_assert_eq(ws.slot, 0u);
        cr_assert_eq(ws.jobs, 8u, "the overflow worker ran the 8 queued jobs: %" PRIu64, ws.jobs);
    }
    cr_assert_eq(tern_pool_worker_stats_get(2, &ws), -ENOENT);

    unblock(1);
    PH_PUMP_UNTIL(ok, loop, atomic_load(&blocked_done) == 1);
    cr_assert(ok);
    tern_loop_free(loop);
    /* The overflow worker idles for an hour: the shutdown joins it. */
    cr_assert_eq(ph_stats().overflow_now, 1);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
    s = ph_stats();
    cr_assert_eq(s.overflow_now, 0, "the joined overflow worker is counted out");
    cr_assert_eq(s.overflow_retired, 0, "joined, not retired");
    stall_close_pipe();
}

Test(overflow_faults, no_thread_for_the_first_overflow_worker, .timeout = 60)
{
    overflow_fails_once(TERN__FAULT_THREAD);
}

Test(overflow_faults, no_memory_for_the_first_overflow_worker, .timeout = 60)
{
    overflow_fails_once(TERN__FAULT_ALLOC);
}
