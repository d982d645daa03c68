/*
 * The watchdog for stalled bounded work (tern_pool_watch, docs/pool.md,
 * "Stalled work"): a bounded job blocked past the stall bound is counted
 * once, an overflow worker keeps the rest of the queue moving, overflow
 * workers stay within the ceiling and retire after idling, and a bad
 * setting is refused.
 *
 * Jobs block on a pipe the test holds: they end when the test writes one
 * byte per job (or closes it), never on a sleep.
 */
#include <criterion/criterion.h>

#include <fcntl.h>

#include "stall_helpers.h"

static void teardown(tern_loop *loop)
{
    tern_loop_free(loop);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
    stall_close_pipe();
}

Test(watchdog, stalled_job_starts_an_overflow_worker_and_the_queue_moves)
{
    tern_loop *loop = stall_setup(1, 4, 2, 50 * PH_MS);
    atomic_int blocked_done = 0;
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, block_work, count_done, &blocked_done, NULL), 0);
    bool ok;
    PH_WAIT_UNTIL(ok, atomic_load(&blocked_started) == 1);
    cr_assert(ok);
    /* The only worker is blocked: these run only if an overflow worker does. */
    ph_job quick[10];
    for (int i = 0; i < 10; i++) {
        ph_job_init(&quick[i], NULL);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &quick[i]), 0);
    }
    PH_PUMP_UNTIL(ok, loop, ph_done_total(quick, 10) == 10);
    cr_assert(ok, "the queue behind a stalled job did not move");
    tern_pool_stats s = ph_stats();
    cr_assert_eq(s.stalls, 1, "one stalled job counted once, not %" PRIu64, s.stalls);
    cr_assert_eq(s.overflow_started, 1);
    cr_assert_leq(s.overflow_now, 1); /* it may have idled out already */
    cr_assert_eq(s.threads, 1, "overflow workers are not in threads");
    cr_assert_eq(atomic_load(&blocked_done), 0);

    unblock(1);
    PH_PUMP_UNTIL(ok, loop, atomic_load(&blocked_done) == 1);
    cr_assert(ok);
    /* With nothing to do, the overflow worker retires. */
    PH_WAIT_UNTIL(ok, ph_stats().overflow_now == 0);
    cr_assert(ok, "the overflow worker did not retire");
    s = ph_stats();
    cr_assert_eq(s.overflow_retired, 1);
    cr_assert_eq(s.overflow_started, 1);
    teardown(loop);
}

/*
 * Four jobs block, one worker, a ceiling of two: the worker and two
 * overflow workers end up blocked, and no third overflow worker starts
 * however long they stay so.
 */
Test(watchdog, overflow_workers_stay_within_the_ceiling)
{
    tern_loop *loop = stall_setup(1, 4, 2, 50 * PH_MS);
    atomic_int blocked_done = 0;
    for (int i = 0; i < 4; i++)
        cr_assert_eq(
            tern_submit(loop, TERN_BOUNDED, block_work, count_done, &blocked_done, NULL), 0);
    bool ok;
    PH_WAIT_UNTIL(ok, ph_stats().stalls >= 3);
    cr_assert(ok, "the worker and two overflow workers were not all seen stalled");
    /* A hundred stall bounds more: many looks, and still no third. */
    uint64_t until = ph_now() + 100 * 20 * PH_MS;
    while (ph_now() < until) {
        tern_pool_stats s = ph_stats();
        cr_assert_leq(s.overflow_started, 2, "the ceiling was passed");
        cr_assert_leq(s.overflow_now, 2);
        ph_sleep_ns(PH_MS);
    }
    cr_assert_eq(atomic_load(&blocked_started), 3, "a fourth job ran beyond the ceiling");
    cr_assert_eq(ph_stats().overflow_now, 2);

    unblock(4);
    PH_PUMP_UNTIL(ok, loop, atomic_load(&blocked_done) == 4);
    cr_assert(ok);
    PH_WAIT_UNTIL(ok, ph_stats().overflow_now == 0);
    cr_assert(ok, "the overflow workers did not retire");
    cr_assert_eq(ph_stats().overflow_retired, 2);
    teardown(loop);
}

/* A ceiling of 0 counts stalls and starts nothing. */
Test(watchdog, a_zero_ceiling_only_counts)
{
    tern_loop *loop = stall_setup(1, 4, 0, 50 * PH_MS);
    atomic_int blocked_done = 0;
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, block_work, count_done, &blocked_done, NULL), 0);
    bool ok;
    PH_WAIT_UNTIL(ok, ph_stats().stalls == 1);
    cr_assert(ok);
    ph_job quick;
    ph_job_init(&quick, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &quick), 0);
    cr_assert_eq(ph_stats().overflow_started, 0);
    unblock(1);
    PH_PUMP_UNTIL(ok, loop, atomic_load(&quick.done_calls) == 1);
    cr_assert(ok);
    cr_assert_eq(ph_stats().overflow_started, 0);
    teardown(loop);
}

/*
 * A stall bound set to 0 on the running pool turns the watchdog off: it
 * goes on waking (every 250 ms) but never looks, so a job blocked far
 * past the old bound is never counted and no overflow worker starts.
 */
Test(watchdog, a_stall_bound_set_to_zero_on_the_running_pool_stops_the_looks)
{
    tern_loop *loop = stall_setup(1, 4, 2, 50 * PH_MS);
    tern_pool_watch w;
    tern_pool_watch_init(&w);
    w.stall_ns = 0;
    w.overflow_max = 2;
    cr_assert_eq(tern_pool_watch_set(&w), 0);
    atomic_int blocked_done = 0;
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, block_work, count_done, &blocked_done, NULL), 0);
    bool ok;
    PH_WAIT_UNTIL(ok, atomic_load(&blocked_started) == 1);
    cr_assert(ok);
    ph_job quick;
    ph_job_init(&quick, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &quick), 0);
    /* Three of the watchdog's 250 ms waits, 35 times the old bound. */
    for (int i = 0; i < 70; i++)
        tern_loop_run_once(loop, 10 * (int64_t)PH_MS);
    tern_pool_stats s = ph_stats();
    cr_assert_eq(s.stalls, 0, "a stall was counted with the bound at 0");
    cr_assert_eq(s.overflow_started, 0, "an overflow worker started with the bound at 0");
    cr_assert_eq(atomic_load(&quick.done_calls), 0, "the job behind the blocked one ran");
    unblock(1);
    PH_PUMP_UNTIL(ok, loop, atomic_load(&quick.done_calls) == 1);
    cr_assert(ok);
    teardown(loop);
}

Test(watchdog, bad_settings_are_refused)
{
    tern_pool_watch w, before;
    tern_pool_watch_init(&before);
    w = before;
    w.stall_ns = 1000; /* under 1 ms */
    cr_assert_eq(tern_pool_watch_set(&w), -EINVAL);
    w = before;
    w.overflow_max = 65;
    cr_assert_eq(tern_pool_watch_set(&w), -EINVAL);
    w = before;
    w.overflow_idle_ns = 0;
    cr_assert_eq(tern_pool_watch_set(&w), -EINVAL);
    w = before;
    w.stall_ns = 0; /* never stalled: allowed */
    cr_assert_eq(tern_pool_watch_set(&w), 0);
    tern_pool_watch_init(&w);
    cr_assert_eq(w.stall_ns, 1000000000u, "init gives the defaults, not the last set");
    cr_assert_eq(w.overflow_max, 4);
}
