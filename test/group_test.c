/*
 * Loop groups, exclusive mode and the two-phase shutdown (SPEC §15), and
 * the loop keep-alive they rest on.
 *
 * Every wait is on a condition, bounded by LIVENESS_NS, and fails with the
 * state it found. The pause tests watch counters over an observation
 * window (a few milliseconds in which nothing may move); the window is not
 * a threshold: a broken pause moves them in microseconds.
 */
#include "child_exit.h"
#include "group_helpers.h"
#include "loop_helpers.h"

#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <urcu-qsbr.h>

/* ---------------------------------------------------------------- */
/* Helpers                                                          */
/* ---------------------------------------------------------------- */

static tern_group *group_new_n(unsigned n, unsigned flags)
{
    tern_loop_options lo;
    tern_loop_options_init(&lo);
    lo.flags = flags;
    tern_group_options go;
    tern_group_options_init(&go);
    go.loops = n;
    go.loop = &lo;
    go.name = "gtest";
    tern_group *g = NULL;
    int rc = tern_group_new(&g, &go);
    cr_assert_eq(rc, 0, "tern_group_new: %s", tern_strerror(rc));
    return g;
}

/* Post fn to loop, retrying while the loop is behind (-EAGAIN). */
static void post_ok(tern_loop *loop, tern_fn fn, void *arg)
{
    int rc;
    while ((rc = tern_post(loop, fn, arg)) == -EAGAIN)
        sched_yield();
    cr_assert_eq(rc, 0, "tern_post: %s", tern_strerror(rc));
}

/* ---------------------------------------------------------------- */
/* Keep-alive                                                       */
/* ---------------------------------------------------------------- */

Test(keepalive, a_kept_alive_loop_is_live_with_nothing_to_do, .timeout = TEST_TIMEOUT)
{
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.flags = TERN_LOOP_KEEPALIVE;
    tern_loop *loop = loop_new_opts(&o);
    cr_assert_eq(tern_loop_run_once(loop, 0), 1, "keep-alive counts as live");
    tern_loop_stop(loop);
    cr_assert_eq(tern_loop_run(loop), 1, "run returns only when stopped, with the loop live");
    cr_assert_eq(tern_loop_keepalive(loop, false), 0);
    cr_assert_eq(tern_loop_run_once(loop, 0), 0, "without it, nothing is live");
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(tern_loop_keepalive(loop, true), 0);
    cr_assert_eq(tern_loop_run_once(loop, 0), 1);
    loop_free_clean(loop);
}

static atomic_uint ka_posts;

static void ka_count(tern_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
    atomic_fetch_add(&ka_posts, 1);
}

static void ka_last(tern_loop *loop, void *arg)
{
    (void)arg;
    tern_loop_keepalive(loop, false);
}

static void *ka_producer(void *arg)
{
    tern_loop *loop = arg;
    for (int i = 0; i < 200; i++) {
        post_ok(loop, ka_count, NULL);
        if (i % 50 == 0)
            sched_yield(); /* let the loop run dry and sleep between bursts */
    }
    post_ok(loop, ka_last, NULL);
    return NULL;
}

Test(keepalive, a_loop_serving_only_posts_waits_for_them, .timeout = TEST_TIMEOUT)
{
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.flags = TERN_LOOP_KEEPALIVE;
    tern_loop *loop = loop_new_opts(&o);
    atomic_store(&ka_posts, 0);
    pthread_t t;
    pthread_create(&t, NULL, ka_producer, loop);
    /* Nothing is live but the keep-alive: without it run returns at once. */
    cr_assert_eq(tern_loop_run(loop), 0);
    pthread_join(t, NULL);
    cr_assert_eq(atomic_load(&ka_posts), 200, "run returned before the producer's last post");
    loop_free_clean(loop);
}

/* ---------------------------------------------------------------- */
/* The group: threads, indexes, posts                               */
/* ---------------------------------------------------------------- */

struct seen {
    tern_group *g;
    atomic_uint done;
    int index[4];
    bool current_ok[4];
    char name[4][16];
};

static void record_identity(tern_loop *loop, void *arg)
{
    struct seen *s = arg;
    int i = tern_group_index(s->g);
    cr_assert(i >= 0 && i < 4, "tern_group_index on a member: %d", i);
    s->index[i] = i;
    s->current_ok[i] = tern_loop_current() == loop && tern_group_loop(s->g, (unsigned)i) == loop;
    pthread_getname_np(pthread_self(), s->name[i], sizeof(s->name[i]));
    atomic_fetch_add(&s->done, 1);
}

Test(group, n_loops_on_n_named_threads_each_knows_its_index, .timeout = TEST_TIMEOUT)
{
    static struct seen s;
    tern_group *g = group_new_n(4, 0);
    s.g = g;
    cr_assert_eq(tern_group_size(g), 4);
    cr_assert_null(tern_group_loop(g, 4));
    cr_assert_eq(tern_group_index(g), -ENOENT, "the main thread runs no loop of the group");
    cr_assert_eq(tern_group_start(g), 0);
    cr_assert_eq(tern_group_start(g), -EINVAL, "a group starts once");
    for (unsigned i = 0; i < 4; i++)
        post_ok(tern_group_loop(g, i), record_identity, &s);
    wait_at_least(&s.done, 4, "members that ran their post");
    for (int i = 0; i < 4; i++) {
        char want[16];
        snprintf(want, sizeof want, "gtest-%d", i);
        cr_assert_eq(s.index[i], i);
        cr_assert(s.current_ok[i], "loop %d: tern_loop_current/tern_group_loop disagree", i);
        cr_assert_str_eq(s.name[i], want);
    }
    group_end(g);
}

Test(group, options_out_of_range_are_refused, .timeout = TEST_TIMEOUT)
{
    tern_group_options go;
    tern_group_options_init(&go);
    tern_group *g = NULL;
    go.loops = 1025;
    cr_assert_eq(tern_group_new(&g, &go), -EINVAL);
    go.loops = 1;
    go.name = "elevenchars";
    cr_assert_eq(tern_group_new(&g, &go), -EINVAL);
    go.name = NULL;
    tern_loop_options lo;
    tern_loop_options_init(&lo);
    lo.dispatch_batch = 0;
    go.loop = &lo;
    cr_assert_eq(tern_group_new(&g, &go), -EINVAL);
    cr_assert_null(g);
    /* The default: one loop per usable CPU. */
    cr_assert_eq(tern_group_new(&g, NULL), 0);
    cpu_set_t set;
    sched_getaffinity(0, sizeof set, &set);
    cr_assert_eq(tern_group_size(g), (unsigned)CPU_COUNT(&set));
    tern_group_free(g); /* never started: an ordinary free */
}

/* ---------------------------------------------------------------- */
/* Exclusive mode                                                   */
/* ---------------------------------------------------------------- */

#define BUSY_LOOPS 3

/* Everything that runs, counted; read by the pauser. */
static atomic_uint cb_count[BUSY_LOOPS];
static atomic_uint jobs_running, jobs_started;
static atomic_bool busy_stop;

struct busy {
    tern_group *g;
    unsigned index;
    int sv[2];
    tern_id timer, io;
    unsigned jobs;
};
static struct busy busy[BUSY_LOOPS];

static void busy_count(tern_loop *loop)
{
    int i = tern_group_index(busy[0].g);
    cr_assert(i >= 0, "a busy callback off the group's threads");
    (void)loop;
    atomic_fetch_add_explicit(&cb_count[i], 1, memory_order_relaxed);
}

static void busy_tick(tern_loop *loop, tern_id id, void *arg)
{
    (void)id;
    (void)arg;
    busy_count(loop);
}

static void busy_defer(tern_loop *loop, void *arg)
{
    busy_count(loop);
    if (!atomic_load(&busy_stop))
        tern_defer(loop, busy_defer, arg);
}

static void busy_io(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    (void)id;
    (void)events;
    (void)arg;
    busy_count(loop);
    char b;
    if (read(fd, &b, 1) == 1 && !atomic_load(&busy_stop)) {
        /* Ping-pong over the pair: always one byte in flight. */
        struct busy *bz = arg;
        if (write(bz->sv[1], "p", 1) != 1)
            cr_assert_fail("socketpair write");
    }
}

static void *busy_work(tern_job *job, void *arg)
{
    (void)job;
    (void)arg;
    atomic_fetch_add(&jobs_running, 1);
    atomic_fetch_add(&jobs_started, 1);
    /* Long enough (a few hundred µs) that jobs are always queued and running. */
    volatile unsigned x = 0;
    for (unsigned i = 0; i < 400000; i++)
        x += i;
    atomic_fetch_sub(&jobs_running, 1);
    return NULL;
}

static void busy_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)id;
    (void)status;
    (void)result;
    busy_count(loop);
    struct busy *bz = arg;
    bz->jobs--;
    if (!atomic_load(&busy_stop) &&
        tern_submit(loop, TERN_BOUNDED, busy_work, busy_done, bz, NULL) == 0)
        bz->jobs++;
}

/* Set up on the member's own thread: a timer, a defer chain, I/O, jobs. */
static void busy_setup(tern_loop *loop, void *arg)
{
    struct busy *bz = arg;
    cr_assert_eq(tern_timer_start(loop, MS / 10, MS / 10, busy_tick, bz, &bz->timer), 0);
    cr_assert_eq(tern_defer(loop, busy_defer, bz), 0);
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, bz->sv), 0);
    cr_assert_eq(tern_io_start(loop, bz->sv[0], TERN_READABLE, busy_io, bz, &bz->io), 0);
    cr_assert_eq(write(bz->sv[1], "p", 1), 1);
    for (int j = 0; j < 8; j++)
        if (tern_submit(loop, TERN_BOUNDED, busy_work, busy_done, bz, NULL) == 0)
            bz->jobs++;
}

/* Teardown: stop the timer and the watcher; the jobs and defers end. */
static void busy_teardown(tern_loop *loop, void *arg)
{
    struct busy *bz = arg;
    atomic_store(&busy_stop, true);
    tern_timer_stop(loop, bz->timer);
    tern_io_stop(loop, bz->io);
    close(bz->sv[0]);
    close(bz->sv[1]);
}

static tern_group *busy_group(unsigned flags)
{
    tern_group *g = group_new_n(BUSY_LOOPS, flags);
    atomic_store(&busy_stop, false);
    atomic_store(&jobs_running, 0);
    atomic_store(&jobs_started, 0);
    for (unsigned i = 0; i < BUSY_LOOPS; i++) {
        atomic_store(&cb_count[i], 0);
        busy[i] = (struct busy){.g = g, .index = i};
        cr_assert_eq(tern_group_on_shutdown(g, i, busy_teardown, &busy[i]), 0);
    }
    cr_assert_eq(tern_group_pause(g), -EINVAL, "pause before start is refused");
    cr_assert_eq(tern_group_start(g), 0);
    for (unsigned i = 0; i < BUSY_LOOPS; i++)
        post_ok(tern_group_loop(g, i), busy_setup, &busy[i]);
    /* Every loop has run callbacks and jobs have run: all busy. */
    for (unsigned i = 0; i < BUSY_LOOPS; i++)
        wait_at_least(&cb_count[i], 50, "callbacks of a busy loop");
    wait_at_least(&jobs_started, 20, "bounded jobs started");
    return g;
}

/*
 * Inside exclusive mode: nothing but the pauser's own loop (skip) moves.
 * Watches the counters over a window of a few ms.
 */
static void check_exclusive(int skip, const char *who)
{
    cr_assert_eq(atomic_load(&jobs_running), 0, "%s: a bounded job runs in exclusive mode", who);
    unsigned before[BUSY_LOOPS], jobs = atomic_load(&jobs_started);
    for (int i = 0; i < BUSY_LOOPS; i++)
        before[i] = atomic_load(&cb_count[i]);
    sleep_ns(5 * MS); /* the observation window */
    for (int i = 0; i < BUSY_LOOPS; i++)
        if (i != skip)
            cr_assert_eq(atomic_load(&cb_count[i]), before[i],
                         "%s: loop %d ran %u callbacks while paused", who, i,
                         atomic_load(&cb_count[i]) - before[i]);
    cr_assert_eq(atomic_load(&jobs_started), jobs, "%s: %u bounded jobs started while paused", who,
                 atomic_load(&jobs_started) - jobs);
    cr_assert_eq(atomic_load(&jobs_running), 0, "%s: a bounded job runs in exclusive mode", who);
}

Test(exclusive, pause_from_outside_stops_every_loop_and_every_bounded_job, .timeout = TEST_TIMEOUT)
{
    tern_group *g = busy_group(0);
    for (int round = 0; round < 5; round++) {
        cr_assert_eq(tern_group_pause(g), 0);
        cr_assert_eq(tern_group_pause(g), -EDEADLK, "a second pause by the holder");
        check_exclusive(-1, "outside pauser");
        unsigned after = atomic_load(&cb_count[0]);
        cr_assert_eq(tern_group_resume(g), 0);
        wait_at_least(&cb_count[0], after + 10, "loop 0 callbacks after resume");
    }
    group_end(g);
}

static atomic_uint member_pauses;

static void pause_from_member(tern_loop *loop, void *arg)
{
    (void)arg;
    tern_group *g = busy[0].g;
    int self = tern_group_index(g);
    cr_assert_eq(tern_group_pause(g), 0);
    cr_assert_eq(tern_loop_current(), loop);
    /* Jobs submitted inside exclusive mode wait for the resume. */
    for (int j = 0; j < 2; j++)
        if (tern_submit(loop, TERN_BOUNDED, busy_work, busy_done, &busy[self], NULL) == 0)
            busy[self].jobs++;
    check_exclusive(self, "member pauser");
    cr_assert_eq(tern_group_resume(g), 0);
    atomic_fetch_add(&member_pauses, 1);
}

Test(exclusive, pause_from_a_member_stops_every_other_loop, .timeout = TEST_TIMEOUT)
{
    tern_group *g = busy_group(0);
    atomic_store(&member_pauses, 0);
    for (unsigned i = 0; i < BUSY_LOOPS; i++)
        post_ok(tern_group_loop(g, i), pause_from_member, NULL);
    wait_at_least(&member_pauses, BUSY_LOOPS, "member pauses completed");
    group_end(g);
}

/* synchronize_rcu() inside exclusive mode: parked members are offline. */
static atomic_bool rcu_synced;

static void *do_synchronize(void *arg)
{
    (void)arg;
    urcu_qsbr_synchronize_rcu();
    atomic_store(&rcu_synced, true);
    return NULL;
}

Test(exclusive, synchronize_rcu_inside_exclusive_mode_returns, .timeout = TEST_TIMEOUT)
{
    tern_group *g = busy_group(TERN_LOOP_RCU);
    atomic_store(&rcu_synced, false);
    cr_assert_eq(tern_group_pause(g), 0);
    pthread_t t;
    pthread_create(&t, NULL, do_synchronize, NULL);
    uint64_t deadline = mono_ns() + LIVENESS_NS;
    while (!atomic_load(&rcu_synced)) {
        if (mono_ns() > deadline)
            cr_assert_fail("FAIL: synchronize_rcu() did not return in exclusive mode "
                           "(a paused loop thread is still an online reader)");
        sched_yield();
    }
    pthread_join(t, NULL);
    cr_assert_eq(tern_group_resume(g), 0);
    group_end(g);
}

/* Concurrent pauses: two members and an outside thread, never two inside. */
#define PAUSE_ROUNDS 40
static atomic_int inside;
static atomic_uint pauses_done;

static void exclusive_section(const char *who)
{
    cr_assert_eq(atomic_fetch_add(&inside, 1), 0, "%s entered exclusive mode while another held it",
                 who);
    for (int i = 0; i < 100; i++)
        sched_yield();
    atomic_fetch_sub(&inside, 1);
}

static void member_pause_loop(tern_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
    tern_group *g = busy[0].g;
    for (int r = 0; r < PAUSE_ROUNDS; r++) {
        cr_assert_eq(tern_group_pause(g), 0);
        exclusive_section("a member");
        cr_assert_eq(tern_group_resume(g), 0);
        atomic_fetch_add(&pauses_done, 1);
    }
}

Test(exclusive, concurrent_pauses_are_serialised_without_deadlock, .timeout = TEST_TIMEOUT)
{
    tern_group *g = busy_group(0);
    atomic_store(&inside, 0);
    atomic_store(&pauses_done, 0);
    post_ok(tern_group_loop(g, 0), member_pause_loop, NULL);
    post_ok(tern_group_loop(g, 1), member_pause_loop, NULL);
    for (int r = 0; r < PAUSE_ROUNDS; r++) {
        cr_assert_eq(tern_group_pause(g), 0);
        exclusive_section("the outside thread");
        cr_assert_eq(tern_group_resume(g), 0);
        atomic_fetch_add(&pauses_done, 1);
    }
    wait_at_least(&pauses_done, 3 * PAUSE_ROUNDS, "pauses completed");
    group_end(g);
}

static atomic_int teardown_pause_rc;

static void pause_in_teardown(tern_loop *loop, void *arg)
{
    (void)loop;
    atomic_store(&teardown_pause_rc, tern_group_pause(arg));
}

Test(exclusive, pause_during_shutdown_is_refused, .timeout = TEST_TIMEOUT)
{
    tern_group *g = group_new_n(2, 0);
    atomic_store(&teardown_pause_rc, 1);
    cr_assert_eq(tern_group_on_shutdown(g, 1, pause_in_teardown, g), 0);
    cr_assert_eq(tern_group_start(g), 0);
    cr_assert_eq(tern_group_shutdown(g), 0);
    cr_assert_eq(tern_group_pause(g), -ESHUTDOWN);
    cr_assert_eq(tern_group_shutdown(g), 0, "a second shutdown changes nothing");
    cr_assert_eq(tern_group_wait(g), 0);
    cr_assert_eq(atomic_load(&teardown_pause_rc), -ESHUTDOWN);
    tern_group_free(g);
}

/* ---------------------------------------------------------------- */
/* Two-phase shutdown                                               */
/* ---------------------------------------------------------------- */

#define TD_LOOPS 3
#define TD_HOPS 30

struct td {
    tern_group *g;
    atomic_uint teardowns[TD_LOOPS];
    atomic_uint hops[TD_LOOPS][TD_HOPS + 1];
    atomic_uint job_dones, timers, defers, late_registration;
};
static struct td td;

struct hop {
    unsigned origin, n;
};
static struct hop hops[TD_LOOPS][TD_HOPS + 1];

static void td_defer(tern_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
    atomic_fetch_add(&td.defers, 1);
}

static void td_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)id;
    atomic_fetch_add(&td.timers, 1);
    cr_assert_eq(tern_defer(loop, td_defer, arg), 0, "a defer from teardown work");
}

static void *td_work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

static void td_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)id;
    (void)result;
    cr_assert_eq(status, 0);
    atomic_fetch_add(&td.job_dones, 1);
    cr_assert_eq(tern_timer_start(loop, MS, 0, td_timer, arg, NULL), 0);
}

/* One hop of a chain that walks the loops: each hop runs on the next loop. */
static void td_hop(tern_loop *loop, void *arg)
{
    struct hop *h = arg;
    int self = tern_group_index(td.g);
    cr_assert_eq(tern_group_loop(td.g, (unsigned)self), loop);
    atomic_fetch_add(&td.hops[h->origin][h->n], 1);
    if (h->n % 10 == 0)
        cr_assert_eq(tern_submit(loop, TERN_BOUNDED, td_work, td_done, NULL, NULL), 0);
    if (h->n < TD_HOPS) {
        struct hop *next = &hops[h->origin][h->n + 1];
        tern_loop *to = tern_group_loop(td.g, (unsigned)(self + 1) % TD_LOOPS);
        cr_assert_eq(tern_post(to, td_hop, next), 0, "a post from teardown work");
    }
}

static void td_teardown(tern_loop *loop, void *arg)
{
    unsigned i = (unsigned)(uintptr_t)arg;
    atomic_fetch_add(&td.teardowns[i], 1);
    if (tern_group_on_shutdown(td.g, i, td_teardown, arg) == -ESHUTDOWN)
        atomic_fetch_add(&td.late_registration, 1);
    td_hop(loop, &hops[i][0]);
}

Test(shutdown, work_scheduled_by_teardown_runs_exactly_once, .timeout = TEST_TIMEOUT)
{
    memset(&td, 0, sizeof td);
    tern_group *g = group_new_n(TD_LOOPS, 0);
    td.g = g;
    for (unsigned i = 0; i < TD_LOOPS; i++) {
        for (unsigned n = 0; n <= TD_HOPS; n++)
            hops[i][n] = (struct hop){i, n};
        cr_assert_eq(tern_group_on_shutdown(g, i, td_teardown, (void *)(uintptr_t)i), 0);
    }
    cr_assert_eq(tern_group_start(g), 0);
    cr_assert_eq(tern_group_shutdown(g), 0);
    cr_assert_eq(tern_group_wait(g), 0);
    for (unsigned i = 0; i < TD_LOOPS; i++) {
        cr_assert_eq(atomic_load(&td.teardowns[i]), 1, "loop %u ran its teardown %u times", i,
                     atomic_load(&td.teardowns[i]));
        for (unsigned n = 0; n <= TD_HOPS; n++)
            cr_assert_eq(atomic_load(&td.hops[i][n]), 1, "chain %u hop %u ran %u times", i, n,
                         atomic_load(&td.hops[i][n]));
    }
    unsigned jobs = TD_LOOPS * (TD_HOPS / 10 + 1);
    cr_assert_eq(atomic_load(&td.job_dones), jobs);
    cr_assert_eq(atomic_load(&td.timers), jobs);
    cr_assert_eq(atomic_load(&td.defers), jobs);
    cr_assert_eq(atomic_load(&td.late_registration), TD_LOOPS);
    tern_group_free(g);
}

Test(shutdown, shutdown_before_start_runs_teardown_once_started, .timeout = TEST_TIMEOUT)
{
    memset(&td, 0, sizeof td);
    tern_group *g = group_new_n(TD_LOOPS, 0);
    td.g = g;
    for (unsigned i = 0; i < TD_LOOPS; i++) {
        for (unsigned n = 0; n <= TD_HOPS; n++)
            hops[i][n] = (struct hop){i, n};
        cr_assert_eq(tern_group_on_shutdown(g, i, td_teardown, (void *)(uintptr_t)i), 0);
    }
    cr_assert_eq(tern_group_shutdown(g), 0);
    cr_assert_eq(tern_group_start(g), 0);
    cr_assert_eq(tern_group_wait(g), 0);
    cr_assert_eq(tern_group_wait(g), -EINVAL, "a group is waited for once");
    for (unsigned i = 0; i < TD_LOOPS; i++)
        cr_assert_eq(atomic_load(&td.hops[i][TD_HOPS]), 1);
    tern_group_free(g);
}

/* Destroy-phase scheduling aborts with its message (run in a child). */
static void on_close_defers(tern_loop *loop, tern_id stream, void *arg)
{
    (void)stream;
    tern_defer(loop, td_defer, arg); /* the final drain: a contract violation */
}

/* A stream that outlives phase one (unreferenced) whose close, in the
 * destroy phase, runs in_destroy_close: each test below picks one. */
static tern_close_cb in_destroy_close;

static void body_schedule_in_destroy(void)
{
    tern_group *g = group_new_n(1, 0);
    tern_loop *loop = tern_group_loop(g, 0);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        child_exit(3);
    tern_id s;
    if (tern_stream_open(loop, sv[0], &s) != 0 || tern_unref(loop, s) != 0 ||
        tern_stream_on_close(loop, s, in_destroy_close, NULL) != 0)
        child_exit(4);
    tern_group_start(g);
    tern_group_shutdown(g);
    tern_group_wait(g);
    child_exit(0); /* not reached when the rule holds */
}

/* Run body in a forked child with stderr captured: it must die of SIGABRT
 * and say `needle` (a child that hangs instead is killed by its alarm). */
static void expect_child_abort(void (*body)(void), const char *needle)
{
    int pipefd[2];
    cr_assert_eq(pipe(pipefd), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(pipefd[1], STDERR_FILENO);
        close(pipefd[0]);
        close(pipefd[1]);
        alarm((unsigned)(LIVENESS_NS / SEC)); /* a child that hangs dies of SIGALRM: FAIL */
        body();
        child_exit(0);
    }
    close(pipefd[1]);
    char buf[4096];
    size_t len = 0;
    ssize_t n;
    while (len < sizeof buf - 1 && (n = read(pipefd[0], buf + len, sizeof buf - 1 - len)) > 0)
        len += (size_t)n;
    buf[len] = '\0';
    close(pipefd[0]);
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
              "the violation did not abort (status %#x); stderr: %s", status, buf);
    cr_assert_not_null(strstr(buf, needle), "the abort message does not say \"%s\": %s", needle,
                       buf);
}

Test(shutdown, scheduling_during_the_destroy_drain_aborts_with_its_message, .timeout = TEST_TIMEOUT)
{
    in_destroy_close = on_close_defers;
    expect_child_abort(body_schedule_in_destroy,
                       "work scheduled during a loop group's final drain (the destroy phase)");
}

/* The same through tern_post, which admits through the inbound queue's
 * own check (runtime/core/inbound.c), not tern__loop_closing. */
static void on_close_posts(tern_loop *loop, tern_id stream, void *arg)
{
    (void)stream;
    tern_post(loop, td_defer, arg);
}

Test(shutdown, a_post_during_the_destroy_drain_aborts_with_its_message, .timeout = TEST_TIMEOUT)
{
    in_destroy_close = on_close_posts;
    expect_child_abort(body_schedule_in_destroy,
                       "work scheduled during a loop group's final drain (the destroy phase)");
}

/* The same through a file request, which admits in runtime/fs/fs.c. */
static void on_fs_unreached(tern_loop *loop, tern_id id, int status, tern_fs_result *res, void *arg)
{
    (void)loop, (void)id, (void)status, (void)res, (void)arg;
}

static void on_close_stats(tern_loop *loop, tern_id stream, void *arg)
{
    (void)stream, (void)arg;
    tern_fs_stat(loop, "/", NULL, on_fs_unreached, NULL, NULL);
}

Test(shutdown, a_file_request_during_the_destroy_drain_aborts_with_its_message,
     .timeout = TEST_TIMEOUT)
{
    in_destroy_close = on_close_stats;
    expect_child_abort(body_schedule_in_destroy,
                       "work scheduled during a loop group's final drain (the destroy phase)");
}

Test(shutdown, a_never_started_group_frees_its_loops, .timeout = TEST_TIMEOUT)
{
    tern_group *g = group_new_n(2, 0);
    cr_assert_eq(tern_timer_start(tern_group_loop(g, 0), HOUR, 0, busy_tick, NULL, NULL), 0);
    cr_assert_eq(tern_group_wait(g), -EINVAL, "never started: nothing to wait for");
    tern_group_free(g);
}

/* A pause from a bounded job would wait for itself: it aborts, named. */
static tern_group *job_group;

static void *pause_from_job(tern_job *job, void *arg)
{
    (void)job;
    (void)arg;
    tern_group_pause(job_group);
    return NULL;
}

static void job_done_noop(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)status, (void)result, (void)arg;
}

static void submit_pausing_job(tern_loop *loop, void *arg)
{
    (void)arg;
    tern_submit(loop, TERN_BOUNDED, pause_from_job, job_done_noop, NULL, NULL);
}

static void body_pause_from_job(void)
{
    job_group = group_new_n(2, 0);
    tern_group_start(job_group);
    tern_post(tern_group_loop(job_group, 0), submit_pausing_job, NULL);
    tern_group_wait(job_group); /* never returns: the job aborts first */
    child_exit(0);
}

Test(exclusive, pause_from_a_bounded_job_aborts_with_its_message, .timeout = TEST_TIMEOUT)
{
    expect_child_abort(body_pause_from_job, "called from a bounded pool job");
}

/* ------------------------------------------------------------------ */
/* The pause gate with no pool, and with two holders                   */
/* ------------------------------------------------------------------ */

Test(exclusive, pause_and_resume_with_no_pool_running, .timeout = TEST_TIMEOUT)
{
    tern_group *g = group_new_n(2, 0);
    cr_assert_eq(tern_group_start(g), 0);
    cr_assert(!tern__pool_running(), "something started the pool");
    cr_assert_eq(tern_group_pause(g), 0);
    cr_assert_eq(tern_group_resume(g), 0);
    cr_assert(!tern__pool_running(), "a pause started the pool");
    group_end(g);
}

static atomic_uint gate_job_started;

static void *gate_job(tern_job *job, void *arg)
{
    (void)job, (void)arg;
    atomic_fetch_add(&gate_job_started, 1);
    return NULL;
}

static void gate_job_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)result, (void)arg;
    cr_assert_eq(status, 0);
}

/*
 * Two groups paused at once hold the bounded workers twice: the first
 * resume lets none go, the second lets them all go.
 */
Test(exclusive, bounded_workers_wait_for_the_last_of_two_holders, .timeout = TEST_TIMEOUT)
{
    cr_assert_eq(tern_pool_start(NULL), 0);
    tern_group *g1 = group_new_n(2, 0), *g2 = group_new_n(2, 0);
    cr_assert_eq(tern_group_start(g1), 0);
    cr_assert_eq(tern_group_start(g2), 0);
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    atomic_store(&gate_job_started, 0);
    cr_assert_eq(tern_group_pause(g1), 0);
    cr_assert_eq(tern_group_pause(g2), 0);
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, gate_job, gate_job_done, NULL, NULL), 0);
    sleep_ns(20 * MS);
    cr_assert_eq(atomic_load(&gate_job_started), 0, "a bounded job started under two holds");
    cr_assert_eq(tern_group_resume(g1), 0);
    sleep_ns(20 * MS);
    cr_assert_eq(atomic_load(&gate_job_started), 0,
                 "a bounded job started while a second holder still held");
    cr_assert_eq(tern_group_resume(g2), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&gate_job_started), 1);
    tern_loop_free(loop);
    group_end(g1);
    group_end(g2);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * SEC), 0);
}
