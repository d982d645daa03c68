/*
 * A long job whose thread cannot be made (SPEC §4): below the ceiling and
 * with no parked long worker, the pool makes a thread for it; when that
 * fails the job is refused for threads (-EAGAIN, TERN_REFUSED_THREADS,
 * counted once), no worker is counted, nothing stays live, and the next
 * long job gets its thread and runs.
 */
#include "loop_helpers.h"
#include "pool_helpers.h"

static atomic_uint dones;

static void *echo_work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

static void count_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop;
    (void)id;
    (void)result;
    (void)arg;
    cr_assert_eq(status, 0);
    atomic_fetch_add(&dones, 1);
}

Test(long_spawn_faults, a_long_job_without_a_thread_is_refused_for_threads,
     .timeout = TEST_TIMEOUT)
{
    tern_pool_config c = ph_config(1, 16, 4);
    cr_assert_eq(tern_pool_start(&c), 0);
    tern_loop *loop = loop_new_default();
    tern_pool_stats before;
    tern_pool_stats_get(&before);
    cr_assert_eq(before.long_threads, 0u);

    tern__fault_arm(TERN__FAULT_THREAD, 1);
    tern_id id = 0;
    int rc = tern_submit(loop, TERN_LONG, echo_work, count_done, NULL, &id);
    bool fired = tern__fault_fired();
    tern__fault_arm(0, 0);
    cr_assert(fired, "the long job asked for a thread");
    cr_assert_eq(rc, -EAGAIN, "%s", tern_strerror(rc));
    cr_assert_eq(id, 0u);
    cr_assert_eq(tern_loop_last_refusal(loop), TERN_REFUSED_THREADS);
    tern_pool_stats after;
    tern_pool_stats_get(&after);
    cr_assert_eq(ph_refused(&after, TERN_REFUSED_THREADS) -
                     ph_refused(&before, TERN_REFUSED_THREADS),
                 1u, "refused once, for threads");
    cr_assert_eq(after.long_threads, 0u, "no long worker is counted");
    cr_assert_eq(after.long_busy, 0u);
    cr_assert_eq(loop_live(loop), 0u);

    cr_assert_eq(tern_submit(loop, TERN_LONG, echo_work, count_done, NULL, &id), 0);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&dones) == 1);
    cr_assert(ok, "the next long job never ran");
    tern_pool_stats_get(&after);
    cr_assert_eq(after.long_threads, 1u, "the next long job made its thread");
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 60 * PH_SEC), 0);
    cr_assert_eq(atomic_load(&dones), 1u, "done came once, for the accepted job only");
}
