/*
 * Loop hooks (include/tern.h), run on every backend built: check runs
 * first in step 2, before the callbacks the wait made ready; idle and
 * then prepare run after the ready queue; an idle hook keeps step 3 from
 * waiting; a timer started in prepare counts in that turn's wait; a hook
 * stopped inside a run (itself or the next one) never runs again; hooks
 * keep run() alive unless unref'd; tern_cancel and tern_loop_free stop
 * them; bad input.
 */
#include "loop_helpers.h"

static char order[64];
static unsigned norder;

static void note(char c)
{
    if (norder < sizeof order - 1)
        order[norder++] = c;
}

static void h_check(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id, (void)arg;
    note('C');
}

static void h_idle(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id, (void)arg;
    note('I');
}

static void h_prepare(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id, (void)arg;
    note('P');
}

static void on_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id, (void)arg;
    note('T');
}

static void on_post(tern_loop *loop, void *arg)
{
    (void)loop, (void)arg;
    note('S');
}

static void on_defer(tern_loop *loop, void *arg)
{
    (void)loop, (void)arg;
    note('D');
}

BACKEND_TEST(hook, order_within_a_turn)
{
    tern_loop *loop = loop_new_backend(backend);
    norder = 0;
    memset(order, 0, sizeof order);
    tern_id c, i, p, t;
    /* Started in the opposite order to the one they run in. */
    cr_assert_eq(tern_hook_start(loop, TERN_HOOK_PREPARE, h_prepare, NULL, &p), 0);
    cr_assert_eq(tern_hook_start(loop, TERN_HOOK_IDLE, h_idle, NULL, &i), 0);
    cr_assert_eq(tern_hook_start(loop, TERN_HOOK_CHECK, h_check, NULL, &c), 0);
    cr_assert_eq(norder, 0, "a hook ran inside start");
    cr_assert_eq(tern_timer_start(loop, 0, 0, on_timer, NULL, &t), 0);
    /* Turn 1: the timer is due only after step 5, so turn 1 is hooks only. */
    tern_loop_run_once(loop, 0);
    cr_assert_str_eq(order, "CIP");
    norder = 0;
    memset(order, 0, sizeof order);
    cr_assert_eq(tern_defer(loop, on_defer, NULL), 0);
    cr_assert_eq(tern_post(loop, on_post, NULL), 0);
    /* Turn 2: post (step 1), check, the ready queue (timer, defer), idle, prepare. */
    tern_loop_run_once(loop, 0);
    cr_assert_str_eq(order, "SCTDIP", "order was %s", order);
    cr_assert_eq(tern_hook_stop(loop, c), 0);
    cr_assert_eq(tern_hook_stop(loop, c), -ENOENT);
    cr_assert_geq(tern_cancel(loop, i), 0); /* from outside run: resolved in step 1 */
    cr_assert_eq(tern_hook_stop(loop, p), 0);
    norder = 0;
    memset(order, 0, sizeof order);
    tern_loop_run_once(loop, 0);
    cr_assert_str_eq(order, "");
    loop_free_clean(loop);
}

BACKEND_TEST(hook, idle_keeps_the_loop_from_waiting)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id t, i;
    /* A long timer keeps the loop alive; without idle step 3 would wait for it. */
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, on_timer, NULL, &t), 0);
    tern_loop_run_once(loop, 0);
    cr_assert_eq(tern_hook_start(loop, TERN_HOOK_IDLE, h_idle, NULL, &i), 0);
    tern_loop_run_once(loop, 200 * (int64_t)MS);
    cr_assert_eq(tern__loop_last_wait(loop), 0, "an idle hook let step 3 wait");
    cr_assert_eq(tern_hook_stop(loop, i), 0);
    tern_loop_run_once(loop, 5 * MS);
    cr_assert_gt(tern__loop_last_wait(loop), 0, "the idle hook's effect outlived it");
    cr_assert_eq(tern_timer_stop(loop, t), 0);
    loop_free_clean(loop);
}

static tern_id prep_timer;
static atomic_uint prep_fired;

static void prep_fire(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id, (void)arg;
    atomic_fetch_add(&prep_fired, 1);
}

static void prep_arm(tern_loop *loop, tern_id id, void *arg)
{
    (void)id, (void)arg;
    if (prep_timer == 0)
        cr_assert_eq(tern_timer_start(loop, 3 * MS, 0, prep_fire, NULL, &prep_timer), 0);
}

BACKEND_TEST(hook, a_timer_started_in_prepare_bounds_that_turns_wait)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id p;
    prep_timer = 0;
    atomic_store(&prep_fired, 0);
    cr_assert_eq(tern_hook_start(loop, TERN_HOOK_PREPARE, prep_arm, NULL, &p), 0);
    /* One turn allowed to wait up to an hour: the prepare's timer bounds it. */
    tern_loop_run_once(loop, (int64_t)HOUR);
    int64_t w = tern__loop_last_wait(loop);
    cr_assert(w >= 0 && w <= (int64_t)(3 * MS), "step 3 waited %lld ns", (long long)w);
    cr_assert(run_until_count(loop, &prep_fired, 1, 10 * MS, 1000));
    cr_assert_eq(tern_hook_stop(loop, p), 0);
    loop_free_clean(loop);
}

static tern_id victims[3];
static unsigned ran[3];

static void stopper(tern_loop *loop, tern_id id, void *arg)
{
    unsigned k = (unsigned)(uintptr_t)arg;
    ran[k]++;
    if (k == 0) {
        /* Stop the next one in this very run, and ourselves. */
        cr_assert_eq(tern_hook_stop(loop, victims[1]), 0);
        cr_assert_eq(tern_hook_stop(loop, id), 0);
    }
}

BACKEND_TEST(hook, a_hook_stopped_during_a_run_never_runs_again)
{
    tern_loop *loop = loop_new_backend(backend);
    memset(ran, 0, sizeof ran);
    for (unsigned k = 0; k < 3; k++)
        cr_assert_eq(tern_hook_start(loop, TERN_HOOK_CHECK, stopper, (void *)(uintptr_t)k,
                                     &victims[k]), 0);
    tern_loop_run_once(loop, 0);
    tern_loop_run_once(loop, 0);
    cr_assert_eq(ran[0], 1);
    cr_assert_eq(ran[1], 0, "a hook stopped earlier in the run still ran");
    cr_assert_eq(ran[2], 2);
    cr_assert_eq(tern_hook_stop(loop, victims[2]), 0);
    loop_free_clean(loop);
}

static unsigned late_runs;
static void late(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id, (void)arg;
    late_runs++;
}

static void starter(tern_loop *loop, tern_id id, void *arg)
{
    (void)arg;
    tern_id n;
    cr_assert_eq(tern_hook_start(loop, TERN_HOOK_PREPARE, late, NULL, &n), 0);
    cr_assert_eq(tern_hook_stop(loop, id), 0);
}

BACKEND_TEST(hook, a_hook_started_during_a_run_waits_for_the_next_turn)
{
    tern_loop *loop = loop_new_backend(backend);
    late_runs = 0;
    tern_id s;
    cr_assert_eq(tern_hook_start(loop, TERN_HOOK_PREPARE, starter, NULL, &s), 0);
    tern_loop_run_once(loop, 0);
    cr_assert_eq(late_runs, 0);
    tern_loop_run_once(loop, 0);
    cr_assert_eq(late_runs, 1);
    /* loop_free stops it (the id map walk reaches hooks). */
    tern_loop_free(loop);
}

BACKEND_TEST(hook, hooks_keep_run_alive_unless_unrefd)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id h;
    cr_assert_eq(tern_hook_start(loop, TERN_HOOK_CHECK, h_check, NULL, &h), 0);
    cr_assert_eq(tern_loop_run_once(loop, 0), 1, "a started hook did not keep the loop alive");
    cr_assert_eq(tern_unref(loop, h), 0);
    cr_assert_eq(tern_loop_run_once(loop, 0), 0);
    cr_assert_eq(tern_loop_run(loop), 0); /* returns: nothing referenced */
    cr_assert_eq(tern_hook_stop(loop, h), 0);
    loop_free_clean(loop);
}

BACKEND_TEST(hook, bad_input)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id h = 0;
    cr_assert_eq(tern_hook_start(loop, TERN_HOOK_CHECK, NULL, NULL, &h), -EINVAL);
    cr_assert_eq(tern_hook_start(loop, 3, h_check, NULL, &h), -EINVAL);
    cr_assert_eq(tern_hook_start(loop, -1, h_check, NULL, &h), -EINVAL);
    cr_assert_eq(h, 0);
    cr_assert_eq(tern_hook_stop(loop, 12345), -ENOENT);
    tern_id t;
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, on_timer, NULL, &t), 0);
    cr_assert_eq(tern_hook_stop(loop, t), -ENOENT, "a timer's id stopped as a hook");
    cr_assert_eq(tern_timer_stop(loop, t), 0);
    cr_assert_eq(loop_live(loop), 0);
    loop_free_clean(loop);
}
