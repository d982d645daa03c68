/*
 * group_test: loop groups on Windows through the public API (the checks of
 * test/group_test.c and group_setup_test.c that apply without descriptors,
 * without criterion). Setup callbacks run on every member, on its own
 * pinned thread, before any member turns; a broadcast reaches every member
 * exactly once and its done once; exclusive mode parks every other member
 * and holds the pool's bounded workers until the resume, from outside and
 * from a member; the two-phase shutdown runs every post, job, timer and
 * defer its teardowns start exactly once, also when an idle member (asleep
 * in its completion port, runtime/group/group.c's idle_wait) must be woken
 * by a post; a shutdown asked from another thread ends the group;
 * broadcasts and pauses from outside threads racing the shutdown are
 * refused or run everywhere, never lost nor twice (20 rounds); and
 * once the pool is shut down the process holds no more handles than
 * before the first group (test/win/handles.h). Closes with "N passed, N
 * failed".
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <windows.h>

#include "errno_os.h"
#include "handles.h"
#include "os_thread.h"
#include "runner.h"
#include "tern.h"

#define MS 1000000ull
/* A liveness bound, never a speed check: a wait that hits it is a hang. */
#define LIVENESS_MS 20000u
#define LOOPS 3

/* Waits until cond holds or the liveness bound passes. */
#define WAIT_UNTIL(cond)                                    \
    do {                                                    \
        DWORD end_ = GetTickCount() + LIVENESS_MS;          \
        while (!(cond) && (int)(GetTickCount() - end_) < 0) \
            Sleep(1);                                       \
        CHECK(cond);                                        \
    } while (0)

static tern_group *group_new(unsigned n, bool pin)
{
    tern_group_options o;
    tern_group_options_init(&o);
    o.loops = n;
    o.name = "wgrp";
    o.pin = pin;
    tern_group *g = NULL;
    CHECK(tern_group_new(&g, &o) == 0);
    return g;
}

static void group_end(tern_group *g)
{
    CHECK(tern_group_shutdown(g) == 0);
    CHECK(tern_group_wait(g) == 0);
    tern_group_free(g);
}

/* ---------------------------------------------------------------- */
/* Setup                                                            */
/* ---------------------------------------------------------------- */

static tern_group *su_g;
static atomic_uint su_ran[LOOPS]; /* setup calls per member */
static atomic_uint su_returned;   /* members whose setup returned */
static atomic_uint su_served;     /* posts run */
static atomic_uint su_bad;        /* a rule broken */
static DWORD_PTR su_mask[LOOPS];  /* each member's affinity, read in setup */

static void su_setup(tern_loop *loop, unsigned index, void *arg)
{
    (void)arg;
    if (index >= LOOPS || tern_group_loop(su_g, index) != loop ||
        tern_group_index(su_g) != (int)index || tern_loop_current() != loop)
        atomic_fetch_add(&su_bad, 1);
    /* SetThreadAffinityMask answers with the mask it replaces: put the
     * same one back to read it. */
    DWORD_PTR all, system;
    GetProcessAffinityMask(GetCurrentProcess(), &all, &system);
    su_mask[index] = SetThreadAffinityMask(GetCurrentThread(), all);
    SetThreadAffinityMask(GetCurrentThread(), su_mask[index]);
    atomic_fetch_add(&su_ran[index], 1);
    if (index == 0)
        Sleep(50); /* a slow setup: the others must not serve meanwhile */
    atomic_fetch_add(&su_returned, 1);
}

static void su_post(tern_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
    if (atomic_load(&su_returned) != LOOPS)
        atomic_fetch_add(&su_bad, 1); /* served before every setup returned */
    atomic_fetch_add(&su_served, 1);
}

/* Each member runs the setup once, on its own thread (pinned to usable
 * CPU index mod n), and no member serves a post before every setup has
 * returned. */
TEST(setup_runs_on_every_pinned_member_before_any_turn)
{
    memset(su_ran, 0, sizeof su_ran);
    atomic_store(&su_returned, 0);
    atomic_store(&su_served, 0);
    atomic_store(&su_bad, 0);
    tern_group *g = su_g = group_new(LOOPS, true);
    CHECK(tern_group_on_setup(g, su_setup, NULL) == 0);
    CHECK(tern_group_start(g) == 0);
    CHECK(tern_group_on_setup(g, su_setup, NULL) == -EINVAL);
    for (unsigned i = 0; i < LOOPS; i++)
        CHECK(tern_post(tern_group_loop(g, i), su_post, NULL) == 0);
    WAIT_UNTIL(atomic_load(&su_served) == LOOPS);
    group_end(g);
    CHECK(atomic_load(&su_bad) == 0);
    int cpus[TERN__CPUS_MAX];
    unsigned n = tern__cpus_usable(cpus, TERN__CPUS_MAX);
    for (unsigned i = 0; i < LOOPS; i++) {
        CHECK(atomic_load(&su_ran[i]) == 1);
        CHECK(su_mask[i] == (DWORD_PTR)1 << cpus[i % n]);
    }
}

/* ---------------------------------------------------------------- */
/* Broadcast                                                        */
/* ---------------------------------------------------------------- */

#define BROADCASTS 50

static tern_group *bc_g;
static atomic_uint bc_ran[BROADCASTS][LOOPS];
static atomic_uint bc_done[BROADCASTS];
static atomic_uint bc_dones, bc_bad;

static void bc_fn(tern_loop *loop, unsigned index, void *arg)
{
    unsigned k = (unsigned)(uintptr_t)arg;
    if (tern_group_loop(bc_g, index) != loop || tern_group_index(bc_g) != (int)index)
        atomic_fetch_add(&bc_bad, 1);
    atomic_fetch_add(&bc_ran[k][index], 1);
}

static void bc_finish(tern_loop *loop, void *arg)
{
    unsigned k = (unsigned)(uintptr_t)arg;
    (void)loop;
    for (unsigned i = 0; i < LOOPS; i++)
        if (atomic_load(&bc_ran[k][i]) != 1)
            atomic_fetch_add(&bc_bad, 1); /* done before every member ran fn */
    atomic_fetch_add(&bc_done[k], 1);
    atomic_fetch_add(&bc_dones, 1);
}

/* Broadcasts from outside reach every member exactly once and then done
 * once; before start and after shutdown they are refused. */
TEST(broadcast_reaches_every_member_exactly_once)
{
    memset(bc_ran, 0, sizeof bc_ran);
    memset(bc_done, 0, sizeof bc_done);
    atomic_store(&bc_dones, 0);
    atomic_store(&bc_bad, 0);
    tern_group *g = bc_g = group_new(LOOPS, false);
    CHECK(tern_group_broadcast(g, bc_fn, bc_finish, NULL) == -EINVAL);
    CHECK(tern_group_start(g) == 0);
    for (unsigned k = 0; k < BROADCASTS; k++) {
        CHECK(tern_group_broadcast(g, bc_fn, bc_finish, (void *)(uintptr_t)k) == 0);
        if (k % 10 == 0)
            Sleep(2); /* some find the members asleep, some awake */
    }
    WAIT_UNTIL(atomic_load(&bc_dones) == BROADCASTS);
    CHECK(tern_group_shutdown(g) == 0);
    CHECK(tern_group_broadcast(g, bc_fn, bc_finish, NULL) == -ESHUTDOWN);
    CHECK(tern_group_wait(g) == 0);
    tern_group_free(g);
    CHECK(atomic_load(&bc_bad) == 0);
    for (unsigned k = 0; k < BROADCASTS; k++) {
        CHECK(atomic_load(&bc_done[k]) == 1);
        for (unsigned i = 0; i < LOOPS; i++)
            CHECK(atomic_load(&bc_ran[k][i]) == 1);
    }
}

/* ---------------------------------------------------------------- */
/* Exclusive mode                                                   */
/* ---------------------------------------------------------------- */

static tern_group *ex_g;
static atomic_uint ex_ticks[LOOPS];
static atomic_bool ex_stop;
static atomic_int ex_running; /* bounded jobs inside their work */
static atomic_uint ex_started, ex_member_pauses, ex_bad;
static tern_id ex_timer[LOOPS];
static unsigned ex_jobs[LOOPS]; /* jobs in flight, per member (its thread only) */

static void ex_tick(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    atomic_fetch_add(&ex_ticks[(uintptr_t)arg], 1);
}

static void *ex_work(tern_job *job, void *arg)
{
    (void)job;
    (void)arg;
    atomic_fetch_add(&ex_running, 1);
    atomic_fetch_add(&ex_started, 1);
    Sleep(1);
    atomic_fetch_sub(&ex_running, 1);
    return NULL;
}

static void ex_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)id;
    (void)status;
    (void)result;
    unsigned i = (unsigned)(uintptr_t)arg;
    ex_jobs[i]--;
    if (!atomic_load(&ex_stop) && tern_submit(loop, TERN_BOUNDED, ex_work, ex_done, arg, NULL) == 0)
        ex_jobs[i]++;
}

static void ex_setup(tern_loop *loop, unsigned index, void *arg)
{
    (void)arg;
    void *i = (void *)(uintptr_t)index;
    if (tern_timer_start(loop, MS, MS, ex_tick, i, &ex_timer[index]) != 0)
        atomic_fetch_add(&ex_bad, 1);
    for (int j = 0; j < 4; j++)
        if (tern_submit(loop, TERN_BOUNDED, ex_work, ex_done, i, NULL) == 0)
            ex_jobs[index]++;
}

static void ex_teardown(tern_loop *loop, void *arg)
{
    if (tern_group_pause(ex_g) != -ESHUTDOWN)
        atomic_fetch_add(&ex_bad, 1); /* exclusive mode is refused once shutdown began */
    atomic_store(&ex_stop, true);
    tern_timer_stop(loop, ex_timer[(uintptr_t)arg]);
}

/* Inside exclusive mode: no bounded job runs or starts, and no member but
 * skip (the pausing member, or -1) ticks, over a window of 30 ms. */
static void check_exclusive(int skip)
{
    CHECK(atomic_load(&ex_running) == 0);
    unsigned before[LOOPS], started = atomic_load(&ex_started);
    for (unsigned i = 0; i < LOOPS; i++)
        before[i] = atomic_load(&ex_ticks[i]);
    Sleep(30);
    for (int i = 0; i < LOOPS; i++)
        if (i != skip)
            CHECK(atomic_load(&ex_ticks[i]) == before[i]);
    CHECK(atomic_load(&ex_started) == started);
    CHECK(atomic_load(&ex_running) == 0);
}

static void ex_pause_inside(tern_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
    int self = tern_group_index(ex_g);
    if (tern_group_pause(ex_g) != 0) {
        atomic_fetch_add(&ex_bad, 1);
        return;
    }
    check_exclusive(self);
    tern_group_resume(ex_g);
    atomic_fetch_add(&ex_member_pauses, 1);
}

/* A pause from outside and one from a member each park every other
 * member and hold the bounded workers; after the resume all move again. */
TEST(exclusive_mode_parks_members_and_holds_bounded_workers)
{
    memset(ex_ticks, 0, sizeof ex_ticks);
    memset(ex_jobs, 0, sizeof ex_jobs);
    atomic_store(&ex_stop, false);
    atomic_store(&ex_running, 0);
    atomic_store(&ex_started, 0);
    atomic_store(&ex_member_pauses, 0);
    atomic_store(&ex_bad, 0);
    tern_group *g = ex_g = group_new(LOOPS, false);
    CHECK(tern_group_pause(g) == -EINVAL); /* not started */
    for (unsigned i = 0; i < LOOPS; i++)
        CHECK(tern_group_on_shutdown(g, i, ex_teardown, (void *)(uintptr_t)i) == 0);
    CHECK(tern_group_on_setup(g, ex_setup, NULL) == 0);
    CHECK(tern_group_start(g) == 0);
    for (unsigned i = 0; i < LOOPS; i++)
        WAIT_UNTIL(atomic_load(&ex_ticks[i]) >= 5);
    WAIT_UNTIL(atomic_load(&ex_started) >= 10);
    for (int round = 0; round < 3; round++) {
        CHECK(tern_group_pause(g) == 0);
        CHECK(tern_group_pause(g) == -EDEADLK);
        check_exclusive(-1);
        unsigned after = atomic_load(&ex_ticks[0]), started = atomic_load(&ex_started);
        CHECK(tern_group_resume(g) == 0);
        WAIT_UNTIL(atomic_load(&ex_ticks[0]) >= after + 3);
        WAIT_UNTIL(atomic_load(&ex_started) >= started + 3);
    }
    CHECK(tern_post(tern_group_loop(g, 1), ex_pause_inside, NULL) == 0);
    WAIT_UNTIL(atomic_load(&ex_member_pauses) == 1);
    group_end(g);
    CHECK(atomic_load(&ex_bad) == 0);
    for (unsigned i = 0; i < LOOPS; i++)
        CHECK(ex_jobs[i] == 0); /* every job's done ran before the loop went */
}

/* ---------------------------------------------------------------- */
/* Two-phase shutdown                                               */
/* ---------------------------------------------------------------- */

#define HOPS 30

static tern_group *td_g;
static atomic_uint td_teardowns[LOOPS], td_hops[LOOPS][HOPS + 1];
static atomic_uint td_job_dones, td_timers, td_defers, td_late, td_bad;

struct hop {
    unsigned origin, n;
};
static struct hop hops[LOOPS][HOPS + 1];

static void td_defer(tern_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
    atomic_fetch_add(&td_defers, 1);
}

static void td_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)id;
    atomic_fetch_add(&td_timers, 1);
    if (tern_defer(loop, td_defer, arg) != 0)
        atomic_fetch_add(&td_bad, 1);
}

static void *td_work(tern_job *job, void *arg)
{
    (void)job;
    Sleep(2); /* in flight while the members around go idle */
    return arg;
}

static void td_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)id;
    (void)result;
    if (status != 0 || tern_timer_start(loop, MS, 0, td_timer, arg, NULL) != 0)
        atomic_fetch_add(&td_bad, 1);
    atomic_fetch_add(&td_job_dones, 1);
}

/* One hop of a chain that walks the members: each hop runs on the next. */
static void td_hop(tern_loop *loop, void *arg)
{
    struct hop *h = arg;
    int self = tern_group_index(td_g);
    if (self < 0 || tern_group_loop(td_g, (unsigned)self) != loop)
        atomic_fetch_add(&td_bad, 1);
    atomic_fetch_add(&td_hops[h->origin][h->n], 1);
    if (h->n % 10 == 0 && tern_submit(loop, TERN_BOUNDED, td_work, td_done, NULL, NULL) != 0)
        atomic_fetch_add(&td_bad, 1);
    if (h->n < HOPS) {
        tern_loop *to = tern_group_loop(td_g, (unsigned)(self + 1) % LOOPS);
        if (tern_post(to, td_hop, &hops[h->origin][h->n + 1]) != 0)
            atomic_fetch_add(&td_bad, 1);
    }
}

static void td_teardown(tern_loop *loop, void *arg)
{
    unsigned i = (unsigned)(uintptr_t)arg;
    atomic_fetch_add(&td_teardowns[i], 1);
    if (tern_group_on_shutdown(td_g, i, td_teardown, arg) == -ESHUTDOWN)
        atomic_fetch_add(&td_late, 1);
    td_hop(loop, &hops[i][0]);
}

static tern_group *td_group(void)
{
    memset(td_teardowns, 0, sizeof td_teardowns);
    memset(td_hops, 0, sizeof td_hops);
    atomic_store(&td_job_dones, 0);
    atomic_store(&td_timers, 0);
    atomic_store(&td_defers, 0);
    atomic_store(&td_late, 0);
    atomic_store(&td_bad, 0);
    tern_group *g = td_g = group_new(LOOPS, false);
    for (unsigned i = 0; i < LOOPS; i++) {
        for (unsigned n = 0; n <= HOPS; n++)
            hops[i][n] = (struct hop){i, n};
        CHECK(tern_group_on_shutdown(g, i, td_teardown, (void *)(uintptr_t)i) == 0);
    }
    return g;
}

/* After tern_group_wait: every hop, job, timer and defer ran exactly once. */
static void td_check(void)
{
    CHECK(atomic_load(&td_bad) == 0);
    for (unsigned i = 0; i < LOOPS; i++) {
        CHECK(atomic_load(&td_teardowns[i]) == 1);
        for (unsigned n = 0; n <= HOPS; n++)
            CHECK(atomic_load(&td_hops[i][n]) == 1);
    }
    unsigned jobs = LOOPS * (HOPS / 10 + 1);
    CHECK(atomic_load(&td_job_dones) == jobs);
    CHECK(atomic_load(&td_timers) == jobs);
    CHECK(atomic_load(&td_defers) == jobs);
    CHECK(atomic_load(&td_late) == LOOPS);
}

/* The teardowns start chains of posts that walk the members, with jobs,
 * timers and defers on the way: phase one does not end until all have
 * run, each exactly once, though members go idle between hops. */
TEST(shutdown_runs_work_in_flight_exactly_once)
{
    tern_group *g = td_group();
    CHECK(tern_group_start(g) == 0);
    CHECK(tern_group_shutdown(g) == 0);
    CHECK(tern_group_shutdown(g) == 0); /* a second ask changes nothing */
    CHECK(tern_group_wait(g) == 0);
    CHECK(tern_group_wait(g) == -EINVAL);
    tern_group_free(g);
    td_check();
}

/* Shutdown asked before start: setup, then teardown, then the end. */
TEST(shutdown_before_start_runs_teardown_once_started)
{
    tern_group *g = td_group();
    CHECK(tern_group_shutdown(g) == 0);
    CHECK(tern_group_start(g) == 0);
    CHECK(tern_group_wait(g) == 0);
    tern_group_free(g);
    td_check();
}

/* A never-started group frees its loops. */
TEST(a_never_started_group_frees_its_loops)
{
    tern_group *g = group_new(LOOPS, false);
    CHECK(tern_group_wait(g) == -EINVAL);
    tern_group_free(g);
}

static atomic_uint wk_ran;
static atomic_int wk_index = -2;
static tern_group *wk_g;

static void wk_on_idle(tern_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
    atomic_store(&wk_index, tern_group_index(wk_g));
    atomic_fetch_add(&wk_ran, 1);
}

/* The process's CPU time so far (user and kernel), in ms. */
static uint64_t cpu_ms(void)
{
    FILETIME created, exited, kernel, user;
    if (!GetProcessTimes(GetCurrentProcess(), &created, &exited, &kernel, &user))
        return 0;
    uint64_t k = ((uint64_t)kernel.dwHighDateTime << 32) | kernel.dwLowDateTime;
    uint64_t u = ((uint64_t)user.dwHighDateTime << 32) | user.dwLowDateTime;
    return (k + u) / 10000; /* 100 ns units */
}

static atomic_uint wk_cpu; /* CPU ms the process spent while the job slept */

static void *wk_slow(tern_job *job, void *arg)
{
    (void)job;
    /* Member 1 is idle, asleep in its port; member 0 waits for this job;
     * the caller waits for the group: nothing should use a CPU. */
    Sleep(20);
    uint64_t start = cpu_ms();
    Sleep(200);
    atomic_store(&wk_cpu, (unsigned)(cpu_ms() - start));
    return arg;
}

static void wk_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop;
    (void)id;
    (void)status;
    (void)result;
    (void)arg;
    if (tern_post(tern_group_loop(wk_g, 1), wk_on_idle, NULL) != 0)
        atomic_store(&wk_index, -3);
}

static void wk_teardown(tern_loop *loop, void *arg)
{
    (void)arg;
    if (tern_submit(loop, TERN_BOUNDED, wk_slow, wk_done, NULL, NULL) != 0)
        atomic_store(&wk_index, -4);
}

/* Phase one: member 1 has nothing live and sleeps (using no CPU); member
 * 0's slow job posts to it at the end. The post wakes it, it runs the
 * callback on its own thread, and only then can the group finish. */
TEST(an_idle_member_wakes_for_a_post)
{
    atomic_store(&wk_ran, 0);
    atomic_store(&wk_index, -2);
    tern_group *g = wk_g = group_new(2, false);
    CHECK(tern_group_on_shutdown(g, 0, wk_teardown, NULL) == 0);
    CHECK(tern_group_start(g) == 0);
    CHECK(tern_group_shutdown(g) == 0);
    CHECK(tern_group_wait(g) == 0);
    tern_group_free(g);
    CHECK(atomic_load(&wk_ran) == 1);
    CHECK(atomic_load(&wk_index) == 1);
    /* An idle member that spun instead of sleeping would use the whole
     * 200 ms; a sleeping group uses next to nothing. */
    printf("(CPU while idle: %u ms of 200)\n", atomic_load(&wk_cpu));
    CHECK(atomic_load(&wk_cpu) < 40);
}

/* ---------------------------------------------------------------- */
/* Shutdown from another thread                                     */
/* ---------------------------------------------------------------- */

static atomic_uint st_posts_run;

static void st_count(tern_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
    atomic_fetch_add(&st_posts_run, 1);
}

static void *st_stopper(void *arg)
{
    tern_group *g = arg;
    Sleep(20);
    tern_group_shutdown(g);
    return NULL;
}

/* The thread that waits is not the one that stops: a shutdown from
 * another thread wakes the sleeping members and ends the group, and
 * every post accepted before it ran once. */
TEST(shutdown_from_another_thread_ends_the_group)
{
    atomic_store(&st_posts_run, 0);
    tern_group *g = group_new(LOOPS, false);
    CHECK(tern_group_start(g) == 0);
    unsigned accepted = 0;
    for (unsigned i = 0; i < 100; i++)
        accepted += tern_post(tern_group_loop(g, i % LOOPS), st_count, NULL) == 0;
    CHECK(accepted == 100);
    tern__thread_t t;
    CHECK(tern__thread_start(&t, st_stopper, g) == 0);
    CHECK(tern_group_wait(g) == 0);
    tern__thread_join(t, NULL);
    tern_group_free(g);
    CHECK(atomic_load(&st_posts_run) == accepted);
}

/* ---------------------------------------------------------------- */
/* Races with the shutdown                                          */
/* ---------------------------------------------------------------- */

#define RACE_ROUNDS 20
#define RACE_CASTS 2000

struct cast {
    atomic_uint ran[LOOPS];
    atomic_uint done;
};
static struct cast casts[RACE_CASTS];
static tern_group *race_g;
static atomic_uint race_pauses, race_bad;
static atomic_uint race_accepted; /* this round's accepted broadcasts, as the caster counts */

static void race_fn(tern_loop *loop, unsigned index, void *arg)
{
    (void)loop;
    atomic_fetch_add(&((struct cast *)arg)->ran[index], 1);
}

static void race_done(tern_loop *loop, void *arg)
{
    (void)loop;
    atomic_fetch_add(&((struct cast *)arg)->done, 1);
}

/* Broadcasts until the shutdown refuses one; returns how many were accepted. */
static void *race_caster(void *arg)
{
    (void)arg;
    uintptr_t accepted = 0;
    while (accepted < RACE_CASTS) {
        int rc = tern_group_broadcast(race_g, race_fn, race_done, &casts[accepted]);
        if (rc == -ESHUTDOWN)
            break;
        if (rc != 0)
            atomic_fetch_add(&race_bad, 1);
        else
            atomic_store(&race_accepted, (unsigned)++accepted);
        if (accepted % 16 == 0)
            Sleep(0);
    }
    return (void *)accepted;
}

/* Pauses and resumes until the shutdown refuses a pause. */
static void *race_pauser(void *arg)
{
    (void)arg;
    for (;;) {
        int rc = tern_group_pause(race_g);
        if (rc == -ESHUTDOWN)
            return NULL;
        if (rc != 0) {
            atomic_fetch_add(&race_bad, 1);
            return NULL;
        }
        atomic_fetch_add(&race_pauses, 1);
        Sleep(0);
        tern_group_resume(race_g);
        Sleep(1);
    }
}

/* Broadcasts and pauses from two outside threads race the shutdown, 20
 * rounds: each accepted broadcast ran once on every member and done once,
 * every one the shutdown refused ran nowhere, and the group ends. The
 * shutdown comes once both have made at least one call of the round (a
 * loaded machine may not run them within a fixed sleep), then a few ms
 * later. */
TEST(broadcasts_and_pauses_racing_the_shutdown)
{
    unsigned total = 0;
    atomic_store(&race_pauses, 0);
    atomic_store(&race_bad, 0);
    for (int round = 0; round < RACE_ROUNDS; round++) {
        memset(casts, 0, sizeof casts);
        tern_group *g = race_g = group_new(LOOPS, false);
        CHECK(tern_group_start(g) == 0);
        tern__thread_t caster, pauser;
        unsigned pauses_before = atomic_load(&race_pauses);
        atomic_store(&race_accepted, 0);
        CHECK(tern__thread_start(&caster, race_caster, NULL) == 0);
        CHECK(tern__thread_start(&pauser, race_pauser, NULL) == 0);
        WAIT_UNTIL(atomic_load(&race_accepted) > 0 && atomic_load(&race_pauses) > pauses_before);
        Sleep(round % 5);
        CHECK(tern_group_shutdown(g) == 0);
        void *accepted = NULL;
        tern__thread_join(caster, &accepted);
        tern__thread_join(pauser, NULL);
        CHECK(tern_group_wait(g) == 0);
        tern_group_free(g);
        unsigned n = (unsigned)(uintptr_t)accepted;
        total += n;
        for (unsigned k = 0; k < RACE_CASTS; k++) {
            unsigned want = k < n ? 1 : 0;
            CHECK(atomic_load(&casts[k].done) == want);
            for (unsigned i = 0; i < LOOPS; i++)
                CHECK(atomic_load(&casts[k].ran[i]) == want);
        }
    }
    printf("(%u broadcasts accepted, %u pauses, in %d rounds)\n", total, atomic_load(&race_pauses),
           RACE_ROUNDS);
    CHECK(atomic_load(&race_bad) == 0);
    CHECK(total >= RACE_ROUNDS);
    CHECK(atomic_load(&race_pauses) >= RACE_ROUNDS);
}

/* ---------------------------------------------------------------- */
/* Handles                                                          */
/* ---------------------------------------------------------------- */

static struct handles handles_before;

/* Last: every group above is gone; once the pool's workers are joined
 * the process holds what it held before the first group. */
TEST(no_handle_left_after_the_groups)
{
    CHECK(tern_pool_shutdown(TERN_POOL_DRAIN, 10000 * MS) == 0);
    CHECK(handles_same(handles_before, handles_now()));
}

static const struct runner_test tests[] = {
    RUNNER_TEST(setup_runs_on_every_pinned_member_before_any_turn),
    RUNNER_TEST(broadcast_reaches_every_member_exactly_once),
    RUNNER_TEST(exclusive_mode_parks_members_and_holds_bounded_workers),
    RUNNER_TEST(shutdown_runs_work_in_flight_exactly_once),
    RUNNER_TEST(shutdown_before_start_runs_teardown_once_started),
    RUNNER_TEST(a_never_started_group_frees_its_loops),
    RUNNER_TEST(an_idle_member_wakes_for_a_post),
    RUNNER_TEST(shutdown_from_another_thread_ends_the_group),
    RUNNER_TEST(broadcasts_and_pauses_racing_the_shutdown),
    RUNNER_TEST(no_handle_left_after_the_groups),
};

int main(void)
{
    handles_warm_up();
    handles_before = handles_now();
    return RUNNER_MAIN(tests);
}
