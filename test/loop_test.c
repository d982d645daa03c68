/*
 * The loop's lifecycle (SPEC §1): when run() and run_once() return,
 * references, stop, tern_loop_current, and embedding through
 * tern_loop_backend_fd() and tern_loop_next_timeout().
 */
#include "loop_helpers.h"

static void count_cb(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

static void count_fn(tern_loop *loop, void *arg)
{
    (void)loop;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

/* ---------------------------------------------------------------- */
/* run / run_once return values                                      */
/* ---------------------------------------------------------------- */

Test(loop, new_and_free_with_defaults)
{
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    cr_assert_not_null(loop);
    cr_assert_null(tern_loop_current(), "creating a loop does not claim it");
    loop_free_clean(loop);
}

/* With nothing live, run() returns 0 and run_once() returns 0 at once
 * even when told to wait forever (the test timeout catches a block). */
Test(loop, nothing_live_returns_zero_at_once, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(tern_loop_run_once(loop, -1), 0);
    cr_assert_eq(tern_loop_run_once(loop, 0), 0);
    cr_assert_eq(tern_loop_run_once(loop, (int64_t)HOUR), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    loop_free_clean(loop);
}

Test(loop, run_returns_zero_when_the_last_timer_fires, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    atomic_uint fired = 0;
    cr_assert_eq(tern_timer_start(loop, MS, 0, count_cb, &fired, NULL), 0);
    cr_assert_eq(tern_timer_start(loop, 2 * MS, 0, count_cb, &fired, NULL), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&fired), 2);
    loop_free_clean(loop);
}

Test(loop, run_once_reports_whether_anything_is_live, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    atomic_uint fired = 0;
    tern_id id = 0;
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, count_cb, &fired, &id), 0);
    cr_assert_eq(tern_loop_run_once(loop, 0), 1);
    cr_assert_eq(tern_timer_stop(loop, id), 0);
    cr_assert_eq(tern_loop_run_once(loop, -1), 0);
    loop_free_clean(loop);
}

static void stop_fn(tern_loop *loop, tern_id id, void *arg)
{
    (void)id;
    atomic_fetch_add((atomic_uint *)arg, 1);
    tern_loop_stop(loop);
}

Test(loop, run_returns_one_when_stopped_with_work_live, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    atomic_uint fired = 0;
    tern_id rep = 0;
    cr_assert_eq(tern_timer_start(loop, 0, MS, stop_fn, &fired, &rep), 0);
    cr_assert_eq(tern_loop_run(loop), 1);
    cr_assert_eq(atomic_load(&fired), 1, "run kept going after the stop");
    cr_assert_eq(loop_live(loop), 1);
    /* The stop was consumed: a second run goes on until stopped again. */
    cr_assert_eq(tern_loop_run(loop), 1);
    cr_assert_eq(atomic_load(&fired), 2);
    cr_assert_eq(tern_timer_stop(loop, rep), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    loop_free_clean(loop);
}

Test(loop, stop_before_run_returns_after_one_turn, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    atomic_uint fired = 0;
    tern_id id = 0;
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, count_cb, &fired, &id), 0);
    cr_assert_eq(tern_loop_stop(loop), 0);
    uint64_t turns = loop_stats(loop).turns;
    cr_assert_eq(tern_loop_run(loop), 1);
    cr_assert_eq(loop_stats(loop).turns, turns + 1, "run should take exactly one turn");
    cr_assert_eq(tern_timer_stop(loop, id), 0);
    loop_free_clean(loop);
}

struct stopper {
    tern_loop *loop;
    atomic_bool done;
    bool step_seen;
};

static void *stop_from_thread(void *arg)
{
    struct stopper *s = arg;
    s->step_seen = wait_for_step(s->loop, 4);
    tern_loop_stop(s->loop);
    return NULL;
}

/* tern_loop_stop from another thread wakes a loop blocked in step 4. */
Test(loop, stop_from_another_thread_wakes_the_loop, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    atomic_uint fired = 0;
    tern_id id = 0;
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, count_cb, &fired, &id), 0);
    struct stopper s = {.loop = loop};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, stop_from_thread, &s), 0);
    cr_assert_eq(tern_loop_run(loop), 1);
    pthread_join(t, NULL);
    cr_assert(s.step_seen, "the loop never reached step 4");
    cr_assert_eq(atomic_load(&fired), 0);
    cr_assert_geq(loop_stats(loop).wake_syscalls, 1,
                  "a sleeping loop was woken without a syscall?");
    cr_assert_eq(tern_timer_stop(loop, id), 0);
    loop_free_clean(loop);
}

/* ---------------------------------------------------------------- */
/* references                                                        */
/* ---------------------------------------------------------------- */

/* An unreferenced timer does not keep run() going; tern_ref brings it
 * back. The 100 ms delay only has to outlast one run() that returns at
 * once; it is not a measured bound. */
Test(loop, unref_timer_does_not_keep_the_loop_alive, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    atomic_uint fired = 0;
    tern_id id = 0;
    cr_assert_eq(tern_timer_start(loop, 100 * MS, 0, count_cb, &fired, &id), 0);
    cr_assert_eq(tern_unref(loop, id), 0);
    cr_assert_eq(loop_live(loop), 1, "unref does not end the timer");
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&fired), 0, "run waited for an unreferenced timer");
    cr_assert_eq(tern_loop_run_once(loop, -1), 0, "run_once blocked on an unreferenced timer");
    cr_assert_eq(loop_live(loop), 1);

    cr_assert_eq(tern_ref(loop, id), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&fired), 1,
                 "a re-referenced timer keeps the loop alive until it fires");
    loop_free_clean(loop);
}

/* An unreferenced timer still fires while something else keeps the loop
 * running. */
Test(loop, unref_timer_still_fires, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    atomic_uint weak = 0, strong = 0;
    tern_id id = 0;
    cr_assert_eq(tern_timer_start(loop, MS, 0, count_cb, &weak, &id), 0);
    cr_assert_eq(tern_unref(loop, id), 0);
    cr_assert_eq(tern_timer_start(loop, 50 * MS, 0, count_cb, &strong, NULL), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&weak), 1);
    cr_assert_eq(atomic_load(&strong), 1);
    loop_free_clean(loop);
}

static void io_count_cb(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    (void)loop;
    (void)id;
    (void)fd;
    (void)events;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

Test(loop, unref_watcher_does_not_keep_the_loop_alive, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    int p[2];
    make_pipe(p);
    atomic_uint n = 0;
    tern_id id = 0;
    cr_assert_eq(tern_io_start(loop, p[0], TERN_READABLE, io_count_cb, &n, &id), 0);
    cr_assert_eq(tern_unref(loop, id), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(tern_ref(loop, id), 0);
    cr_assert_eq(tern_loop_run_once(loop, 0), 1);
    cr_assert_eq(tern_io_stop(loop, id), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    close(p[0]);
    close(p[1]);
    loop_free_clean(loop);
}

/* A pending post keeps the loop alive until it has run. */
Test(loop, pending_post_keeps_the_loop_alive, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    atomic_uint n = 0;
    cr_assert_eq(tern_post(loop, count_fn, &n), 0);
    cr_assert_eq(loop_live(loop), 1);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&n), 1);
    loop_free_clean(loop);
}

/* A deferred callback also keeps the loop alive. */
Test(loop, pending_defer_keeps_the_loop_alive, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    atomic_uint n = 0;
    cr_assert_eq(tern_defer(loop, count_fn, &n), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&n), 1);
    loop_free_clean(loop);
}

/* ---------------------------------------------------------------- */
/* tern_loop_current                                                 */
/* ---------------------------------------------------------------- */

struct current_probe {
    tern_loop *loop;
    atomic_uint right, wrong;
};

static void current_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)id;
    struct current_probe *p = arg;
    atomic_fetch_add(tern_loop_current() == loop && loop == p->loop ? &p->right : &p->wrong, 1);
}

static void current_fn(tern_loop *loop, void *arg)
{
    current_timer(loop, 0, arg);
}

static void current_io(tern_loop *loop, tern_id id, int fd, unsigned ev, void *arg)
{
    (void)fd;
    (void)ev;
    current_timer(loop, id, arg);
    tern_io_stop(loop, id);
}

Test(loop, current_is_the_running_loop_in_every_callback, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    tern_loop *other = loop_new_default();
    struct current_probe p = {.loop = loop};
    int sp[2];
    make_socketpair(sp);
    cr_assert_eq(tern_timer_start(loop, 0, 0, current_timer, &p, NULL), 0);
    cr_assert_eq(tern_post(loop, current_fn, &p), 0);
    cr_assert_eq(tern_defer(loop, current_fn, &p), 0);
    cr_assert_eq(tern_io_start(loop, sp[0], TERN_WRITABLE, current_io, &p, NULL), 0);
    cr_assert_null(tern_loop_current());
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_null(tern_loop_current(), "run() left the thread claiming the loop");
    cr_assert_eq(atomic_load(&p.right), 4);
    cr_assert_eq(atomic_load(&p.wrong), 0);

    /* The other loop, run on the same thread afterwards, is current in
     * its own callbacks. */
    struct current_probe q = {.loop = other};
    cr_assert_eq(tern_post(other, current_fn, &q), 0);
    cr_assert_eq(tern_loop_run_once(other, 0), 0);
    cr_assert_eq(atomic_load(&q.right), 1);
    cr_assert_null(tern_loop_current());
    close(sp[0]);
    close(sp[1]);
    loop_free_clean(other);
    loop_free_clean(loop);
}

/* Running loop B from inside loop A's callback (two loops, one thread)
 * makes B current for B's turn and A current again afterwards. */
static void nested_other(tern_loop *loop, void *arg)
{
    tern_loop *outer = arg;
    (void)outer;
    cr_assert_eq(tern_loop_current(), loop);
}

static void run_other_inside(tern_loop *loop, void *arg)
{
    tern_loop *other = arg;
    cr_assert_eq(tern_post(other, nested_other, loop), 0);
    cr_assert_eq(tern_loop_run_once(other, 0), 0);
    cr_assert_eq(tern_loop_current(), loop, "running another loop lost this one's identity");
}

Test(loop, another_loop_may_run_inside_a_callback, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    tern_loop *other = loop_new_default();
    cr_assert_eq(tern_defer(loop, run_other_inside, other), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(loop_stats(other).posts, 1);
    loop_free_clean(other);
    loop_free_clean(loop);
}

/* Loop-only calls are legal from any thread while nobody claims the
 * loop: set up on one thread, run on another, pump from a third. */
struct handoff {
    tern_loop *loop;
    atomic_uint fired;
};

static void *run_loop_thread(void *arg)
{
    struct handoff *h = arg;
    cr_assert_eq(tern_loop_run(h->loop), 0);
    return NULL;
}

static void *setup_thread(void *arg)
{
    struct handoff *h = arg;
    cr_assert_eq(tern_timer_start(h->loop, 0, 0, count_cb, &h->fired, NULL), 0);
    cr_assert_eq(tern_defer(h->loop, count_fn, &h->fired), 0);
    return NULL;
}

Test(loop, unclaimed_loop_may_be_used_from_any_thread, .timeout = TEST_TIMEOUT)
{
    struct handoff h = {.loop = loop_new_default()};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, setup_thread, &h), 0);
    pthread_join(t, NULL);
    cr_assert_eq(pthread_create(&t, NULL, run_loop_thread, &h), 0);
    pthread_join(t, NULL);
    cr_assert_eq(atomic_load(&h.fired), 2);
    /* And the main thread may pump it afterwards. */
    cr_assert_eq(tern_timer_start(h.loop, 0, 0, count_cb, &h.fired, NULL), 0);
    cr_assert(run_until_count(h.loop, &h.fired, 3, 0, 10));
    loop_free_clean(h.loop);
}

/* ---------------------------------------------------------------- */
/* embedding                                                         */
/* ---------------------------------------------------------------- */

struct poster {
    tern_loop *loop;
    atomic_uint *count;
};

static void *post_once(void *arg)
{
    struct poster *p = arg;
    cr_assert_eq(tern_post(p->loop, count_fn, p->count), 0);
    return NULL;
}

/* A host that polls tern_loop_backend_fd() learns of a post made by
 * another thread while nobody runs the loop, pumps run_once(0), and the
 * descriptor is quiet again afterwards (so the host does not spin). */
BACKEND_TEST(embed, backend_fd_readable_on_foreign_post)
{
    tern_loop *loop = loop_new_backend(backend);
    int fd = tern_loop_backend_fd(loop);
    cr_assert_geq(fd, 0);
    cr_assert_not(fd_readable_now(fd, 0), "backend fd readable with nothing to do");

    atomic_uint n = 0;
    struct poster p = {.loop = loop, .count = &n};
    for (int round = 0; round < 3; round++) {
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, post_once, &p), 0);
        pthread_join(t, NULL);
        cr_assert(fd_readable_now(fd, (int)(LIVENESS_NS / MS)),
                  "round %d: a foreign post did not make the backend fd readable", round);
        cr_assert_eq(tern_loop_next_timeout(loop), 0, "a pending post means ready now");
        cr_assert_eq(tern_loop_run_once(loop, 0), 0);
        cr_assert_eq(atomic_load(&n), (unsigned)round + 1);
        cr_assert_not(fd_readable_now(fd, 0), "round %d: backend fd still readable after pumping",
                      round);
    }
    loop_free_clean(loop);
}

BACKEND_TEST(embed, next_timeout_reflects_armed_work)
{
    tern_loop *loop = loop_new_backend(backend);
    atomic_uint n = 0;
    cr_assert_eq(tern_loop_next_timeout(loop), -1);

    /* The delays are long so that no turn below can reach them, however
     * slowly it runs (valgrind); they bound nothing. */
    tern_id id = 0;
    cr_assert_eq(tern_timer_start(loop, 100 * SEC, 0, count_cb, &n, &id), 0);
    int64_t t = tern_loop_next_timeout(loop);
    cr_assert_gt(t, 0);
    cr_assert_leq(t, (int64_t)(100 * SEC));

    /* A nearer timer takes over; a ready callback makes it 0. */
    tern_id near = 0;
    cr_assert_eq(tern_timer_start(loop, 10 * SEC, 0, count_cb, &n, &near), 0);
    t = tern_loop_next_timeout(loop);
    cr_assert_gt(t, 0);
    cr_assert_leq(t, (int64_t)(10 * SEC));
    cr_assert_eq(tern_defer(loop, count_fn, &n), 0);
    cr_assert_eq(tern_loop_next_timeout(loop), 0);
    cr_assert_eq(tern_loop_run_once(loop, 0), 1);
    cr_assert_eq(atomic_load(&n), 1);
    t = tern_loop_next_timeout(loop);
    cr_assert_gt(t, 0, "nothing is ready after the drain");
    cr_assert_leq(t, (int64_t)(10 * SEC));

    cr_assert_eq(tern_timer_stop(loop, near), 0);
    t = tern_loop_next_timeout(loop);
    cr_assert_gt(t, (int64_t)(10 * SEC), "the stopped near timer still bounds the wait");
    cr_assert_eq(tern_timer_stop(loop, id), 0);
    cr_assert_eq(tern_loop_next_timeout(loop), -1);
    loop_free_clean(loop);
}

#ifdef __linux__
/* Under epoll the backend fd also reports watched descriptors, so a host
 * needs only that one fd. */
Test(embed, epoll_backend_fd_reports_watched_fds, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_backend("epoll");
    int fd = tern_loop_backend_fd(loop);
    int p[2];
    make_pipe(p);
    atomic_uint n = 0;
    tern_id id = 0;
    cr_assert_eq(tern_io_start(loop, p[0], TERN_READABLE, io_count_cb, &n, &id), 0);
    /* Registration may be applied lazily just before a wait. */
    tern_loop_run_once(loop, 0);
    cr_assert_not(fd_readable_now(fd, 0));
    write_byte(p[1]);
    cr_assert(fd_readable_now(fd, (int)(LIVENESS_NS / MS)));
    cr_assert(run_until_count(loop, &n, 1, 0, 10));
    cr_assert_eq(tern_io_stop(loop, id), 0);
    close(p[0]);
    close(p[1]);
    loop_free_clean(loop);
}
#endif

/* Statistics: turns count run_once calls; events count callbacks. */
Test(loop, stats_count_turns_and_events, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    atomic_uint n = 0;
    tern_id id = 0;
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, count_cb, &n, &id), 0);
    for (int i = 0; i < 10; i++)
        tern_loop_run_once(loop, 0);
    tern_loop_stats s = loop_stats(loop);
    cr_assert_eq(s.turns, 10);
    cr_assert_eq(s.events, 0);
    for (int i = 0; i < 7; i++)
        cr_assert_eq(tern_defer(loop, count_fn, &n), 0);
    tern_loop_run_once(loop, 0);
    s = loop_stats(loop);
    cr_assert_eq(s.turns, 11);
    cr_assert_eq(s.events, 7);
    cr_assert_eq(atomic_load(&n), 7);
    cr_assert_eq(tern_timer_stop(loop, id), 0);
    loop_free_clean(loop);
}

/* idle_ns grows while the loop blocks in the backend. Only a turn that
 * really blocked (last_wait > 0) proves it, so the delay grows until one
 * does (a very slow run may find each timer overdue already). */
Test(loop, idle_time_is_counted_while_blocked, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    cr_assert_eq(loop_stats(loop).idle_ns, 0);
    bool blocked = false;
    for (uint64_t delay = 5 * MS; delay <= 5 * SEC && !blocked; delay *= 10) {
        atomic_uint n = 0;
        cr_assert_eq(tern_timer_start(loop, delay, 0, count_cb, &n, NULL), 0);
        while (atomic_load(&n) == 0) {
            tern_loop_run_once(loop, -1);
            blocked = blocked || tern__loop_last_wait(loop) > 0;
        }
    }
    cr_assert(blocked, "the loop never blocked for a timer");
    cr_assert_gt(loop_stats(loop).idle_ns, 0, "a blocking wait added no idle time");
    loop_free_clean(loop);
}

/* TERN_CHECK_BOOKS set to "0" or to nothing leaves the audit off; the
 * loop works either way. */
Test(loop, the_books_audit_is_off_for_zero_or_empty)
{
    const char *values[] = {"0", ""};
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(setenv("TERN_CHECK_BOOKS", values[i], 1), 0);
        tern_loop *loop = loop_new_default();
        cr_assert_eq(tern_loop_run_once(loop, 0), 0);
        loop_free_clean(loop);
    }
}
