/*
 * Exclusive mode (tern_group_pause) with overflow workers (docs/pool.md,
 * "Stalled work"): an overflow worker is a bounded worker too, so a pause
 * taken while one is alive waits for it to park as well and returns, and
 * a pause called from a job that runs on an overflow worker aborts with
 * the message a bounded job's pause gets (it would wait for itself).
 *
 * The stalled job blocks on a pipe the test holds, never on a sleep.
 */
#include "abort_helpers.h"
#include "loop_helpers.h"
#include "pool_helpers.h"

static int fds[2];
static atomic_uint blocked_started;
static tern_group *group;

static void *block_work(tern_job *job, void *arg)
{
    (void)job, (void)arg;
    atomic_fetch_add(&blocked_started, 1);
    char c;
    while (read(fds[0], &c, 1) < 0 && errno == EINTR) {
    }
    return NULL;
}

static void count_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)result;
    if (status == 0)
        atomic_fetch_add((atomic_uint *)arg, 1);
}

/* One bounded worker and at most one overflow worker, which idles for an
 * hour: once started it stays alive for the whole test. */
static tern_loop *pool_with_overflow(void)
{
    if (pipe(fds) != 0)
        return NULL;
    tern_pool_watch w;
    tern_pool_watch_init(&w);
    w.stall_ns = 20 * PH_MS;
    w.overflow_max = 1;
    w.overflow_idle_ns = 3600 * PH_SEC;
    tern_pool_config cfg = ph_config(1, 64, 0);
    tern_loop *loop = NULL;
    if (tern_pool_watch_set(&w) != 0 || tern_pool_start(&cfg) != 0 ||
        tern_loop_new(&loop, NULL) != 0)
        return NULL;
    return loop;
}

static tern_group *one_loop_group(void)
{
    tern_group_options go;
    tern_group_options_init(&go);
    go.loops = 1;
    go.name = "pov";
    tern_group *g = NULL;
    if (tern_group_new(&g, &go) != 0 || tern_group_start(g) != 0)
        return NULL;
    return g;
}

Test(pause_overflow, a_pause_waits_for_a_live_overflow_worker_too, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = pool_with_overflow();
    cr_assert_not_null(loop);
    atomic_uint done = 0;
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, block_work, count_done, &done, NULL), 0);
    bool ok;
    PH_WAIT_UNTIL(ok, atomic_load(&blocked_started) == 1);
    cr_assert(ok);
    ph_job quick;
    ph_job_init(&quick, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &quick), 0);
    PH_PUMP_UNTIL(ok, loop, atomic_load(&quick.done_calls) == 1);
    cr_assert(ok, "no overflow worker ran the job behind the stalled one");
    cr_assert_eq(ph_stats().overflow_now, 1);
    cr_assert_eq(write(fds[1], "x", 1), 1);
    PH_PUMP_UNTIL(ok, loop, atomic_load(&done) == 1);
    cr_assert(ok);

    /* Both workers idle, the overflow one alive: the pause counts it. */
    tern_group *g = one_loop_group();
    cr_assert_not_null(g);
    cr_assert_eq(tern_group_pause(g), 0);
    cr_assert_eq(tern__test_pool_holds(), 1u, "the pause holds the pool");
    cr_assert_eq(ph_stats().overflow_now, 1, "the overflow worker is alive, parked");
    cr_assert_eq(tern_group_resume(g), 0);
    cr_assert_eq(tern__test_pool_holds(), 0u);
    /* The pool runs again after the resume. */
    ph_job after;
    ph_job_init(&after, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &after), 0);
    PH_PUMP_UNTIL(ok, loop, atomic_load(&after.done_calls) == 1);
    cr_assert(ok, "a job after the resume never ran");
    cr_assert_eq(tern_group_shutdown(g), 0);
    cr_assert_eq(tern_group_wait(g), 0);
    tern_group_free(g);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}

static void *pause_from_job(tern_job *job, void *arg)
{
    (void)job, (void)arg;
    tern_group_pause(group);
    return NULL;
}

/* In the forked child: the only bounded worker stalls, so the second job
 * runs on the overflow worker, and pauses from there. */
static void body_pause_on_overflow(void *ctx)
{
    (void)ctx;
    tern_loop *loop = pool_with_overflow();
    group = one_loop_group();
    if (loop == NULL || group == NULL)
        child_exit(3);
    atomic_uint done = 0;
    if (tern_submit(loop, TERN_BOUNDED, block_work, count_done, &done, NULL) != 0)
        child_exit(4);
    uint64_t deadline = mono_ns() + LIVENESS_NS;
    while (atomic_load(&blocked_started) == 0 && mono_ns() < deadline)
        sched_yield();
    if (atomic_load(&blocked_started) == 0)
        child_exit(5);
    if (tern_submit(loop, TERN_BOUNDED, pause_from_job, count_done, NULL, NULL) != 0)
        child_exit(6);
    while (mono_ns() < deadline)
        tern_loop_run_once(loop, (int64_t)(10 * MS));
    /* Returning exits 0: the abort never came, and the test fails. */
}

Test(pause_overflow, a_pause_from_a_job_on_an_overflow_worker_aborts, .timeout = TEST_TIMEOUT)
{
    expect_abort(body_pause_on_overflow, NULL, "tern_group_pause",
                 "called from a bounded pool job");
}
