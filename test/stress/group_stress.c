/*
 * Loop groups under contention: exclusive mode and the two-phase shutdown
 * while every loop is busy and pausers compete.
 *
 * Each round builds a group of 2..4 loops (some TERN_LOOP_RCU) from a
 * seeded generator (default seed 0x6a09e667, printed; TERN_STRESS_SEED
 * overrides it). Every loop runs a fast repeating timer whose ticks post
 * to random loops of the group and, now and then, pause the group from
 * inside the callback; bounded jobs stream through the pool; an outside
 * thread pauses too. Every second round runs with a busy process on every
 * core (forked here, killed at the end of the round, and bounded by alarm).
 * The first argument, if any, is the number of rounds (default 12).
 *
 * Windows builds it unchanged (test/win/meson.build) with what group_os.h
 * says the platform lacks left out: no round is an RCU round (tern refuses
 * TERN_LOOP_RCU there: no liburcu) and no round has busy processes (no
 * fork), so every round runs quiet for one round's time. The seeded draws
 * are the same, so a seed gives the same loop counts on both.
 *
 * Checked:
 *   - no callback of another loop and no bounded job starts while a
 *     thread holds exclusive mode (each callback and job checks the
 *     holder), and `config`, a plain struct written only in exclusive mode
 *     and read by every callback and bounded job, is race-free under TSan;
 *   - synchronize_rcu() inside exclusive mode returns (RCU rounds);
 *   - shutdown: every loop's teardown starts chains of posts that walk the
 *     loops and submit jobs; every hop, every post and every job runs
 *     exactly once, and the group ends;
 *   - setup (tern_group_on_setup) ran once on every loop before any loop
 *     served: the first post each loop runs sees every setup done;
 *   - broadcasts from an outside thread and from the loops' ticks, racing
 *     pauses and the shutdown: each accepted one ran fn once on every loop
 *     and done once, each refused one (-ESHUTDOWN) nowhere, and fn never
 *     runs while another thread holds exclusive mode;
 *   - every wait is bounded: a watchdog reports the state and fails the
 *     run if a round does not end in time.
 * Ends with "N passed, N failed".
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "group_os.h"
#include "tern.h"

#define ROUNDS 12
#define ROUND_NS (300ull * 1000 * 1000) /* how long a round keeps busy (twice on busy cores) */
#define WATCHDOG_S 120                  /* a round that takes longer fails */
#define MAX_LOOPS 4
#define CHAINS 3
#define HOPS 40
#define NO_HOLDER (-2)
#define OUTSIDE (-1)

static unsigned passed, failed;
static uint64_t seed = 0x6a09e667;

static void check(int ok, const char *what)
{
    printf("%s: %s\n", ok ? "ok" : "FAIL", what);
    fflush(stdout);
    ok ? passed++ : failed++;
}

static uint64_t rnd(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---------------------------------------------------------------- */
/* Round state                                                      */
/* ---------------------------------------------------------------- */

/* Written only inside exclusive mode; read everywhere else. Plain on purpose. */
static struct {
    unsigned generation;
    unsigned spin;
} config;

static tern_group *group;
static unsigned nloops;
static bool rcu_round;
static atomic_int holder = NO_HOLDER;
static atomic_uint violations, pauses, member_pauses, refused_pauses, rcu_syncs;
static atomic_uint posts_made, posts_ran, jobs_made, jobs_done;
static atomic_uint hops_ran[CHAINS * MAX_LOOPS][HOPS + 1];
static atomic_bool stopping_outside;
static atomic_uint setups_ran, casts_accepted, cast_fn_calls, cast_dones;

struct member {
    unsigned index;
    uint64_t rng;
    tern_id timer;
    bool stopping; /* loop thread only */
    unsigned jobs; /* loop thread only */
};
static struct member members[MAX_LOOPS];

struct hop {
    unsigned chain, n;
};
static struct hop hop_args[CHAINS * MAX_LOOPS][HOPS + 1];

static int self_index(void)
{
    return tern_group_index(group);
}

/* Every callback starts here: nobody else may hold exclusive mode. */
static void on_callback(void)
{
    int h = atomic_load(&holder);
    if (h != NO_HOLDER && h != self_index())
        atomic_fetch_add(&violations, 1);
    unsigned s = config.spin; /* a read TSan checks against the writes */
    for (volatile unsigned i = 0; i < s; i++)
        ;
}

static void submit_one(tern_loop *loop, struct member *m);

/*
 * Inside exclusive mode. A member pauser also submits a bounded job: it
 * must not start before the resume (job_work counts it if it does).
 */
static void in_exclusive(int who, tern_loop *loop, struct member *m)
{
    atomic_store(&holder, who);
    config.generation++;
    config.spin = config.generation % 64;
    if (m != NULL)
        submit_one(loop, m);
    if (rcu_round) {
        group_os_synchronize_rcu();
        atomic_fetch_add(&rcu_syncs, 1);
    }
    for (int i = 0; i < 50; i++)
        sched_yield(); /* a window for a job that should be held to start */
    atomic_store(&holder, NO_HOLDER);
}

/* ---------------------------------------------------------------- */
/* Busy work                                                        */
/* ---------------------------------------------------------------- */

static void post_ran(tern_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
    on_callback();
    atomic_fetch_add(&posts_ran, 1);
}

static void *job_work(tern_job *job, void *arg)
{
    (void)job;
    if (atomic_load(&holder) != NO_HOLDER)
        atomic_fetch_add(&violations, 1); /* a bounded job started in exclusive mode */
    unsigned s = config.spin * 16;
    for (volatile unsigned i = 0; i < s; i++)
        ;
    return arg;
}

static void job_done(tern_loop *loop, tern_id id, int status, void *result, void *arg);

static void submit_one(tern_loop *loop, struct member *m)
{
    if (tern_submit(loop, TERN_BOUNDED, job_work, job_done, m, NULL) == 0) {
        m->jobs++;
        atomic_fetch_add(&jobs_made, 1);
    }
}

static void job_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)id;
    (void)result;
    struct member *m = arg;
    on_callback();
    if (status != 0)
        atomic_fetch_add(&violations, 1);
    atomic_fetch_add(&jobs_done, 1);
    m->jobs--;
    if (!m->stopping)
        submit_one(loop, m);
}

/* ---------------------------------------------------------------- */
/* Setup and broadcasts                                              */
/* ---------------------------------------------------------------- */

static void on_setup(tern_loop *loop, unsigned index, void *arg)
{
    (void)loop, (void)arg;
    if (self_index() != (int)index || atomic_load(&posts_ran) != 0)
        atomic_fetch_add(&violations, 1); /* wrong thread, or a loop served already */
    atomic_fetch_add(&setups_ran, 1);
}

static void cast_fn(tern_loop *loop, unsigned index, void *arg)
{
    (void)loop, (void)arg;
    on_callback(); /* never inside another thread's exclusive mode */
    if (self_index() != (int)index)
        atomic_fetch_add(&violations, 1);
    atomic_fetch_add(&cast_fn_calls, 1);
}

static void cast_done(tern_loop *loop, void *arg)
{
    (void)loop, (void)arg;
    atomic_fetch_add(&cast_dones, 1);
}

/* Broadcast; count it if accepted. False once the group refuses. */
static bool cast_one(void)
{
    int rc = tern_group_broadcast(group, cast_fn, cast_done, NULL);
    if (rc == 0)
        atomic_fetch_add(&casts_accepted, 1);
    else if (rc != -ESHUTDOWN)
        atomic_fetch_add(&violations, 1);
    return rc == 0;
}

static void *outside_caster(void *arg)
{
    uint64_t x = (uint64_t)(uintptr_t)arg | 1;
    while (cast_one()) {
        group_os_pace((long)(rnd(&x) % 200000)); /* pacing, not synchronisation */
    }
    return NULL;
}

static void tick(tern_loop *loop, tern_id id, void *arg)
{
    (void)id;
    struct member *m = arg;
    on_callback();
    uint64_t r = rnd(&m->rng);
    tern_loop *to = tern_group_loop(group, (unsigned)(r % nloops));
    if (tern_post(to, post_ran, NULL) == 0)
        atomic_fetch_add(&posts_made, 1);
    if (r % 53 == 0)
        cast_one();
    if (r % 97 == 0) {
        int rc = tern_group_pause(group);
        if (rc == 0) {
            in_exclusive((int)m->index, loop, m);
            tern_group_resume(group);
            atomic_fetch_add(&member_pauses, 1);
        } else if (rc != -ESHUTDOWN) {
            atomic_fetch_add(&violations, 1);
        }
    }
}

static void setup(tern_loop *loop, void *arg)
{
    struct member *m = arg;
    if (atomic_load(&setups_ran) != nloops)
        atomic_fetch_add(&violations, 1);            /* served before every loop's setup returned */
    uint64_t period = 20000 + rnd(&m->rng) % 200000; /* 20..220 µs */
    if (tern_timer_start(loop, period, period, tick, m, &m->timer) != 0)
        atomic_fetch_add(&violations, 1);
    for (int j = 0; j < 3; j++)
        submit_one(loop, m);
}

/* ---------------------------------------------------------------- */
/* Teardown: chains of posts that walk the loops and submit jobs     */
/* ---------------------------------------------------------------- */

static void hop(tern_loop *loop, void *arg)
{
    struct hop *h = arg;
    on_callback();
    atomic_fetch_add(&hops_ran[h->chain][h->n], 1);
    struct member *m = &members[self_index()];
    if (h->n % 8 == 0)
        submit_one(loop, m); /* m->stopping: no resubmission from its done */
    if (h->n < HOPS) {
        tern_loop *to = tern_group_loop(group, (unsigned)(rnd(&m->rng) % nloops));
        int rc;
        while ((rc = tern_post(to, hop, &hop_args[h->chain][h->n + 1])) == -EAGAIN)
            sched_yield();
        if (rc != 0)
            atomic_fetch_add(&violations, 1);
    }
}

static void teardown(tern_loop *loop, void *arg)
{
    struct member *m = arg;
    m->stopping = true;
    tern_timer_stop(loop, m->timer);
    if (tern_group_pause(group) != -ESHUTDOWN)
        atomic_fetch_add(&violations, 1); /* pause during shutdown must be refused */
    for (unsigned c = 0; c < CHAINS; c++)
        hop(loop, &hop_args[m->index * CHAINS + c][0]);
}

/* ---------------------------------------------------------------- */
/* The outside pauser, the watchdog                                  */
/* ---------------------------------------------------------------- */

static void *outside_pauser(void *arg)
{
    uint64_t x = (uint64_t)(uintptr_t)arg | 1;
    while (!atomic_load(&stopping_outside)) {
        int rc = tern_group_pause(group);
        if (rc == -ESHUTDOWN) {
            atomic_fetch_add(&refused_pauses, 1);
            break;
        }
        if (rc != 0) {
            atomic_fetch_add(&violations, 1);
            break;
        }
        in_exclusive(OUTSIDE, NULL, NULL);
        tern_group_resume(group);
        atomic_fetch_add(&pauses, 1);
        group_os_pace((long)(rnd(&x) % 2000000)); /* pacing, not synchronisation */
    }
    return NULL;
}

static pthread_mutex_t wd_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wd_cond = PTHREAD_COND_INITIALIZER;
static bool round_over;
static unsigned round_no;

static void *watchdog(void *arg)
{
    (void)arg;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += WATCHDOG_S;
    pthread_mutex_lock(&wd_lock);
    int rc = 0;
    while (!round_over && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&wd_cond, &wd_lock, &ts);
    bool over = round_over;
    pthread_mutex_unlock(&wd_lock);
    if (!over) {
        printf("FAIL: round %u did not end within %d s: pauses %u, member pauses %u, posts "
               "%u/%u, jobs %u/%u, violations %u\n",
               round_no, WATCHDOG_S, atomic_load(&pauses), atomic_load(&member_pauses),
               atomic_load(&posts_ran), atomic_load(&posts_made), atomic_load(&jobs_done),
               atomic_load(&jobs_made), atomic_load(&violations));
        printf("%u passed, %u failed\n", passed, failed + 1);
        fflush(stdout);
        group_os_busy_stop();
        _exit(1);
    }
    return NULL;
}

/* ---------------------------------------------------------------- */
/* A round                                                          */
/* ---------------------------------------------------------------- */

static void round_run(unsigned r, uint64_t *x)
{
    nloops = 2 + (unsigned)(rnd(x) % 3);
    rcu_round = rnd(x) % 2 == 0 && GROUP_OS_RCU; /* drawn anyway: the same draws everywhere */
    bool contended = r % 2 == 1 && GROUP_OS_BUSY;
    atomic_store(&violations, 0);
    atomic_store(&pauses, 0);
    atomic_store(&member_pauses, 0);
    atomic_store(&refused_pauses, 0);
    atomic_store(&rcu_syncs, 0);
    atomic_store(&posts_made, 0);
    atomic_store(&posts_ran, 0);
    atomic_store(&jobs_made, 0);
    atomic_store(&jobs_done, 0);
    atomic_store(&stopping_outside, false);
    atomic_store(&setups_ran, 0);
    atomic_store(&casts_accepted, 0);
    atomic_store(&cast_fn_calls, 0);
    atomic_store(&cast_dones, 0);
    memset(hops_ran, 0, sizeof hops_ran);
    round_no = r;
    round_over = false;
    pthread_t wd;
    pthread_create(&wd, NULL, watchdog, NULL);
    if (contended)
        group_os_busy_start(WATCHDOG_S);

    tern_loop_options lo;
    tern_loop_options_init(&lo);
    lo.flags = rcu_round ? TERN_LOOP_RCU : 0;
    tern_group_options go;
    tern_group_options_init(&go);
    go.loops = nloops;
    go.loop = &lo;
    go.name = "gstress";
    int rc = tern_group_new(&group, &go);
    if (rc != 0) {
        printf("FAIL: tern_group_new: %s\n", tern_strerror(rc));
        failed++;
        group_os_busy_stop();
        return;
    }
    for (unsigned i = 0; i < nloops; i++) {
        members[i] = (struct member){.index = i, .rng = rnd(x) | 1};
        for (unsigned c = 0; c < CHAINS; c++)
            for (unsigned n = 0; n <= HOPS; n++)
                hop_args[i * CHAINS + c][n] = (struct hop){i * CHAINS + c, n};
        tern_group_on_shutdown(group, i, teardown, &members[i]);
        tern_post(tern_group_loop(group, i), setup, &members[i]);
    }
    tern_group_on_setup(group, on_setup, NULL);
    tern_group_start(group);
    pthread_t pauser, caster;
    pthread_create(&pauser, NULL, outside_pauser, (void *)(uintptr_t)rnd(x));
    pthread_create(&caster, NULL, outside_caster, (void *)(uintptr_t)rnd(x));
    uint64_t end = now_ns() + (contended ? 2 : 1) * ROUND_NS;
    while (now_ns() < end) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL); /* the round's running time, not a synchronisation */
    }
    tern_group_shutdown(group);
    atomic_store(&stopping_outside, true);
    pthread_join(pauser, NULL);
    pthread_join(caster, NULL); /* it ends when the shutdown refuses it */
    tern_group_wait(group);
    tern_group_free(group);
    group = NULL;

    if (contended)
        group_os_busy_stop();
    pthread_mutex_lock(&wd_lock);
    round_over = true;
    pthread_cond_signal(&wd_cond);
    pthread_mutex_unlock(&wd_lock);
    pthread_join(wd, NULL);

    char what[256];
    snprintf(what, sizeof what,
             "round %u (%u loops%s%s): %u outside + %u member pauses, %u rcu syncs, no "
             "violation (%u)",
             r, nloops, rcu_round ? ", rcu" : "", contended ? ", busy cores" : "",
             atomic_load(&pauses), atomic_load(&member_pauses), atomic_load(&rcu_syncs),
             atomic_load(&violations));
    check(atomic_load(&violations) == 0, what);
    snprintf(what, sizeof what, "round %u: every post ran once (%u of %u)", r,
             atomic_load(&posts_ran), atomic_load(&posts_made));
    check(atomic_load(&posts_ran) == atomic_load(&posts_made), what);
    snprintf(what, sizeof what, "round %u: every job completed once (%u of %u)", r,
             atomic_load(&jobs_done), atomic_load(&jobs_made));
    check(atomic_load(&jobs_done) == atomic_load(&jobs_made), what);
    snprintf(what, sizeof what, "round %u: setup ran once per loop (%u of %u)", r,
             atomic_load(&setups_ran), nloops);
    check(atomic_load(&setups_ran) == nloops, what);
    unsigned acc = atomic_load(&casts_accepted);
    snprintf(what, sizeof what,
             "round %u: every accepted broadcast ran once per loop and done once (%u accepted, "
             "%u fn of %u, %u done)",
             r, acc, atomic_load(&cast_fn_calls), acc * nloops, atomic_load(&cast_dones));
    check(acc > 0 && atomic_load(&cast_fn_calls) == acc * nloops && atomic_load(&cast_dones) == acc,
          what);
    unsigned bad = 0;
    for (unsigned c = 0; c < nloops * CHAINS; c++)
        for (unsigned n = 0; n <= HOPS; n++)
            bad += atomic_load(&hops_ran[c][n]) != 1;
    snprintf(what, sizeof what, "round %u: every teardown hop ran exactly once (%u wrong of %u)", r,
             bad, nloops * CHAINS * (HOPS + 1));
    check(bad == 0, what);
}

int main(int argc, char **argv)
{
    const char *s = getenv("TERN_STRESS_SEED");
    if (s != NULL)
        seed = strtoull(s, NULL, 0);
    unsigned rounds = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 0) : ROUNDS;
    printf("group_stress: seed %#llx (TERN_STRESS_SEED replays), %u rounds\n",
           (unsigned long long)seed, rounds);
    uint64_t x = seed | 1;
    for (unsigned r = 0; r < rounds; r++)
        round_run(r, &x);
    tern_pool_shutdown(TERN_POOL_DRAIN, 10ull * 1000 * 1000 * 1000);
    printf("%u passed, %u failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
