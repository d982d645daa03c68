/*
 * Every loop of a group at once (SPEC §15): setup callbacks on every loop
 * before any loop serves, and broadcasts that reach every loop exactly
 * once, with one done after the last, including a broadcast racing the
 * group's shutdown (refused, or delivered everywhere: never lost, never
 * twice).
 *
 * Every wait is bounded by LIVENESS_NS and fails with what it saw.
 */
#include "loop_helpers.h"

#include <pthread.h>

#define LOOPS 4

static tern_group *group_n(unsigned n)
{
    tern_group_options go;
    tern_group_options_init(&go);
    go.loops = n;
    go.name = "gset";
    tern_group *g = NULL;
    int rc = tern_group_new(&g, &go);
    cr_assert_eq(rc, 0, "tern_group_new: %s", tern_strerror(rc));
    return g;
}

static void wait_for(atomic_uint *v, unsigned want, const char *what)
{
    uint64_t deadline = mono_ns() + LIVENESS_NS;
    while (atomic_load(v) < want) {
        if (mono_ns() > deadline)
            cr_assert_fail("%s: %u of %u after the deadline", what, atomic_load(v), want);
        sched_yield();
    }
}

/* ---------------------------------------------------------------- */
/* Setup                                                            */
/* ---------------------------------------------------------------- */

static tern_group *su_group;
static atomic_uint su_first[LOOPS], su_second[LOOPS]; /* which setups ran, per loop */
static atomic_uint su_done;                           /* loops whose setups all returned */
static atomic_uint su_served;                         /* posts run */
static atomic_uint su_bad;                            /* rule broken (see where it is set) */

static void su_setup_first(tern_loop *loop, unsigned index, void *arg)
{
    (void)arg;
    if (tern_loop_current() != loop || tern_group_loop(su_group, index) != loop ||
        tern_group_index(su_group) != (int)index)
        atomic_fetch_add(&su_bad, 1); /* not on that loop's own thread */
    if (atomic_load(&su_served) != 0)
        atomic_fetch_add(&su_bad, 1); /* some loop served before every setup */
    /* The first loop is slow to set up: without the barrier, the others'
     * posts would run meanwhile. */
    if (index == 0) {
        struct timespec ts = {0, 30 * 1000000};
        nanosleep(&ts, NULL);
    }
    atomic_fetch_add(&su_first[index], 1);
}

static void su_setup_second(tern_loop *loop, unsigned index, void *arg)
{
    (void)loop;
    if (arg != &su_second || atomic_load(&su_first[index]) != 1)
        atomic_fetch_add(&su_bad, 1); /* out of registration order */
    atomic_fetch_add(&su_second[index], 1);
    atomic_fetch_add(&su_done, 1);
}

static void su_post(tern_loop *loop, void *arg)
{
    (void)loop, (void)arg;
    if (atomic_load(&su_done) != LOOPS)
        atomic_fetch_add(&su_bad, 1); /* served before every loop's setup returned */
    atomic_fetch_add(&su_served, 1);
}

Test(group_setup, setup_runs_on_every_loop_before_any_loop_serves, .timeout = TEST_TIMEOUT)
{
    su_group = group_n(LOOPS);
    cr_assert_eq(tern_group_on_setup(su_group, su_setup_first, NULL), 0);
    cr_assert_eq(tern_group_on_setup(su_group, su_setup_second, &su_second), 0);
    cr_assert_eq(tern_group_on_setup(su_group, NULL, NULL), -EINVAL);
    /* Work already waiting when the group starts: it must wait for setup. */
    for (unsigned i = 0; i < LOOPS; i++)
        cr_assert_eq(tern_post(tern_group_loop(su_group, i), su_post, NULL), 0);
    cr_assert_eq(tern_group_start(su_group), 0);
    cr_assert_eq(tern_group_on_setup(su_group, su_setup_first, NULL), -EINVAL,
                 "registration after start is refused");
    wait_for(&su_served, LOOPS, "posts served");
    cr_assert_eq(tern_group_shutdown(su_group), 0);
    cr_assert_eq(tern_group_wait(su_group), 0);
    tern_group_free(su_group);
    for (unsigned i = 0; i < LOOPS; i++) {
        cr_assert_eq(atomic_load(&su_first[i]), 1, "loop %u ran its first setup %u times", i,
                     atomic_load(&su_first[i]));
        cr_assert_eq(atomic_load(&su_second[i]), 1, "loop %u ran its second setup %u times", i,
                     atomic_load(&su_second[i]));
    }
    cr_assert_eq(atomic_load(&su_bad), 0, "%u broken rules (wrong thread, order, or a loop "
                 "served before every setup returned)", atomic_load(&su_bad));
}

static atomic_uint sd_setups, sd_teardowns;

static void sd_teardown(tern_loop *loop, void *arg)
{
    (void)loop, (void)arg;
    if (atomic_load(&sd_setups) != 2)
        atomic_fetch_add(&su_bad, 1);
    atomic_fetch_add(&sd_teardowns, 1);
}

static void sd_setup(tern_loop *loop, unsigned index, void *arg)
{
    (void)loop, (void)arg;
    if (atomic_load(&sd_teardowns) != 0)
        atomic_fetch_add(&su_bad, 1);
    atomic_fetch_add(&sd_setups, 1);
    (void)index;
}

Test(group_setup, shutdown_before_start_still_runs_setup_then_teardown, .timeout = TEST_TIMEOUT)
{
    tern_group *g = group_n(2);
    cr_assert_eq(tern_group_on_setup(g, sd_setup, NULL), 0);
    for (unsigned i = 0; i < 2; i++)
        cr_assert_eq(tern_group_on_shutdown(g, i, sd_teardown, NULL), 0);
    cr_assert_eq(tern_group_shutdown(g), 0);
    cr_assert_eq(tern_group_start(g), 0);
    cr_assert_eq(tern_group_wait(g), 0);
    tern_group_free(g);
    cr_assert_eq(atomic_load(&sd_setups), 2);
    cr_assert_eq(atomic_load(&sd_teardowns), 2);
    cr_assert_eq(atomic_load(&su_bad), 0, "a teardown ran before every setup");
}

/* A setup callback that pauses the group: the other loops, waiting for
 * it at the barrier, take part instead of deadlocking. */
static tern_group *sp_group;
static atomic_uint sp_paused;
static atomic_int sp_rc = 1;

static void sp_setup(tern_loop *loop, unsigned index, void *arg)
{
    (void)loop, (void)arg;
    if (index != 0)
        return;
    atomic_store(&sp_rc, tern_group_pause(sp_group));
    if (atomic_load(&sp_rc) == 0) {
        atomic_fetch_add(&sp_paused, 1);
        tern_group_resume(sp_group);
    }
}

Test(group_setup, a_setup_callback_may_pause_the_group, .timeout = TEST_TIMEOUT)
{
    sp_group = group_n(3);
    cr_assert_eq(tern_group_on_setup(sp_group, sp_setup, NULL), 0);
    cr_assert_eq(tern_group_start(sp_group), 0);
    wait_for(&sp_paused, 1, "pause from setup");
    cr_assert_eq(atomic_load(&sp_rc), 0);
    cr_assert_eq(tern_group_shutdown(sp_group), 0);
    cr_assert_eq(tern_group_wait(sp_group), 0);
    tern_group_free(sp_group);
}

/* ---------------------------------------------------------------- */
/* Broadcast                                                        */
/* ---------------------------------------------------------------- */

#define CASTS 200

static tern_group *bc_group;
static atomic_uint bc_ran[CASTS][LOOPS];
static atomic_uint bc_done[CASTS];
static atomic_uint bc_done_total;
static atomic_uint bc_bad;
static unsigned bc_last_seen[LOOPS]; /* loop i's own: the last cast it ran, +1 */

static void bc_fn(tern_loop *loop, unsigned index, void *arg)
{
    unsigned k = (unsigned)(uintptr_t)arg;
    if (tern_loop_current() != loop || tern_group_index(bc_group) != (int)index)
        atomic_fetch_add(&bc_bad, 1);
    if (bc_last_seen[index] != k) /* casts come in the order accepted */
        atomic_fetch_add(&bc_bad, 1);
    bc_last_seen[index] = k + 1;
    atomic_fetch_add(&bc_ran[k][index], 1);
}

static void bc_done_fn(tern_loop *loop, void *arg)
{
    unsigned k = (unsigned)(uintptr_t)arg;
    int me = tern_group_index(bc_group);
    if (me < 0 || tern_loop_current() != loop)
        atomic_fetch_add(&bc_bad, 1); /* done runs on a loop of the group */
    for (unsigned i = 0; i < LOOPS; i++)
        if (atomic_load(&bc_ran[k][i]) != 1)
            atomic_fetch_add(&bc_bad, 1); /* done before every loop ran fn */
    atomic_fetch_add(&bc_done[k], 1);
    atomic_fetch_add(&bc_done_total, 1);
}

Test(group_broadcast, reaches_every_loop_exactly_once_then_done_once, .timeout = TEST_TIMEOUT)
{
    bc_group = group_n(LOOPS);
    cr_assert_eq(tern_group_broadcast(bc_group, bc_fn, bc_done_fn, NULL), -EINVAL,
                 "refused before start");
    cr_assert_eq(tern_group_start(bc_group), 0);
    cr_assert_eq(tern_group_broadcast(bc_group, NULL, NULL, NULL), -EINVAL);
    for (unsigned k = 0; k < CASTS; k++) {
        int rc = tern_group_broadcast(bc_group, bc_fn, bc_done_fn, (void *)(uintptr_t)k);
        cr_assert_eq(rc, 0, "broadcast %u: %s", k, tern_strerror(rc));
    }
    wait_for(&bc_done_total, CASTS, "broadcasts done");
    cr_assert_eq(tern_group_shutdown(bc_group), 0);
    cr_assert_eq(tern_group_broadcast(bc_group, bc_fn, bc_done_fn, NULL), -ESHUTDOWN,
                 "refused once shutdown has begun");
    cr_assert_eq(tern_group_wait(bc_group), 0);
    tern_group_free(bc_group);
    for (unsigned k = 0; k < CASTS; k++) {
        cr_assert_eq(atomic_load(&bc_done[k]), 1, "broadcast %u: done ran %u times", k,
                     atomic_load(&bc_done[k]));
        for (unsigned i = 0; i < LOOPS; i++)
            cr_assert_eq(atomic_load(&bc_ran[k][i]), 1, "broadcast %u ran %u times on loop %u",
                         k, atomic_load(&bc_ran[k][i]), i);
    }
    cr_assert_eq(atomic_load(&bc_bad), 0, "%u broken rules (thread, order, or an early done)",
                 atomic_load(&bc_bad));
}

/* A broadcast from a loop of the group, whose done tells the caller's
 * loop by posting there. */
static tern_group *bm_group;
static atomic_uint bm_ran, bm_told;
static atomic_int bm_told_on = -1;

static void bm_fn(tern_loop *loop, unsigned index, void *arg)
{
    (void)loop, (void)index, (void)arg;
    atomic_fetch_add(&bm_ran, 1);
}

static void bm_tell(tern_loop *loop, void *arg)
{
    (void)loop, (void)arg;
    atomic_store(&bm_told_on, tern_group_index(bm_group));
    atomic_fetch_add(&bm_told, 1);
}

static void bm_done(tern_loop *loop, void *arg)
{
    (void)loop;
    tern_loop *origin = arg;
    if (tern_post(origin, bm_tell, NULL) != 0)
        atomic_fetch_add(&bm_told, 100);
}

static void bm_start(tern_loop *loop, void *arg)
{
    (void)arg;
    if (tern_group_broadcast(bm_group, bm_fn, bm_done, loop) != 0)
        atomic_fetch_add(&bm_told, 100);
}

Test(group_broadcast, from_a_member_with_done_posted_back_to_it, .timeout = TEST_TIMEOUT)
{
    bm_group = group_n(3);
    cr_assert_eq(tern_group_start(bm_group), 0);
    cr_assert_eq(tern_post(tern_group_loop(bm_group, 2), bm_start, NULL), 0);
    wait_for(&bm_told, 1, "done posted back");
    cr_assert_eq(tern_group_shutdown(bm_group), 0);
    cr_assert_eq(tern_group_wait(bm_group), 0);
    tern_group_free(bm_group);
    cr_assert_eq(atomic_load(&bm_ran), 3);
    cr_assert_eq(atomic_load(&bm_told), 1);
    cr_assert_eq(atomic_load(&bm_told_on), 2, "told on the loop that broadcast");
}

/*
 * Broadcasts racing shutdown: two threads broadcast as fast as they can
 * while a third shuts the group down. Every accepted broadcast runs on
 * every loop once and its done once; a refused one runs nowhere.
 */
#define RACE_ROUNDS 20

static tern_group *rc_group;
static atomic_uint rc_fn_calls, rc_done_calls, rc_accepted;
static atomic_bool rc_go;

static void rc_fn(tern_loop *loop, unsigned index, void *arg)
{
    (void)loop, (void)index, (void)arg;
    atomic_fetch_add(&rc_fn_calls, 1);
}

static void rc_done(tern_loop *loop, void *arg)
{
    (void)loop, (void)arg;
    atomic_fetch_add(&rc_done_calls, 1);
}

static void *rc_caster(void *arg)
{
    (void)arg;
    while (!atomic_load(&rc_go))
        sched_yield();
    for (;;) {
        int rc = tern_group_broadcast(rc_group, rc_fn, rc_done, NULL);
        if (rc == -ESHUTDOWN)
            return NULL;
        if (rc != 0)
            return (void *)(intptr_t)rc;
        atomic_fetch_add(&rc_accepted, 1);
    }
}

Test(group_broadcast, racing_shutdown_is_refused_or_delivered_never_lost_or_twice,
     .timeout = TEST_TIMEOUT)
{
    for (unsigned round = 0; round < RACE_ROUNDS; round++) {
        atomic_store(&rc_fn_calls, 0);
        atomic_store(&rc_done_calls, 0);
        atomic_store(&rc_accepted, 0);
        atomic_store(&rc_go, false);
        rc_group = group_n(3);
        cr_assert_eq(tern_group_start(rc_group), 0);
        pthread_t t[2];
        for (int i = 0; i < 2; i++)
            cr_assert_eq(pthread_create(&t[i], NULL, rc_caster, NULL), 0);
        atomic_store(&rc_go, true);
        /* Let some be accepted first, varying how many by the round. */
        wait_for(&rc_accepted, 1 + round * 5, "broadcasts accepted before the shutdown");
        cr_assert_eq(tern_group_shutdown(rc_group), 0);
        for (int i = 0; i < 2; i++) {
            void *ret;
            pthread_join(t[i], &ret);
            cr_assert_null(ret, "broadcast failed: %s", tern_strerror((int)(intptr_t)ret));
        }
        cr_assert_eq(tern_group_wait(rc_group), 0);
        tern_group_free(rc_group);
        unsigned acc = atomic_load(&rc_accepted);
        cr_assert_eq(atomic_load(&rc_done_calls), acc, "round %u: %u accepted, %u done", round,
                     acc, atomic_load(&rc_done_calls));
        cr_assert_eq(atomic_load(&rc_fn_calls), 3 * acc, "round %u: %u accepted, fn ran %u times",
                     round, acc, atomic_load(&rc_fn_calls));
    }
}
