/*
 * What only the kqueue backend has: the wake-up through EVFILT_USER
 * instead of a wake descriptor. Natively it is the default; under
 * libkqueue (Linux CI) the loop normally wakes through its wake
 * descriptor, because libkqueue's kqueue descriptor cannot be watched by
 * a host, so these tests turn EVFILT_USER on with the test seam
 * tern__kqueue_user_wake. Everything else kqueue does is checked by the
 * conformance suite (the BACKEND_TESTs of io, post, loop, signal, stream,
 * tcp, teardown and turn). Skipped where kqueue or EVFILT_USER is not
 * built.
 */
#include "loop_helpers.h"

#include "backend.h"

#ifdef TERN_HAVE_KQUEUE
#include <sys/types.h>
#include <sys/event.h>
#include <sys/time.h>

static tern_loop *kqueue_loop_with_user_wake(void)
{
    if (!tern__kqueue_user_wake(true))
        cr_skip_test("EVFILT_USER is not built in (old system or a portable build)");
    tern_loop *loop = loop_new_backend("kqueue");
    cr_assert_geq(tern_loop_backend_fd(loop), 0, "an EVFILT_USER loop hands out its kqueue");
    return loop;
}

/* Whether a user event is queued in the loop's kqueue: a zero-timeout
 * kevent on it (which consumes what it finds; tests look at the end). */
static bool user_event_pending(tern_loop *loop)
{
    struct kevent ev[8];
    const struct timespec zero = {0, 0};
    int n = kevent(tern_loop_backend_fd(loop), NULL, 0, ev, 8, &zero);
    cr_assert_geq(n, 0);
    for (int i = 0; i < n; i++)
        if (ev[i].filter == EVFILT_USER)
            return true;
    return false;
}

static void never(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id, (void)arg;
}

struct waker {
    tern_loop *loop;
    atomic_uint ran;
    bool saw_step_4;
};

static void stop_it(tern_loop *loop, void *arg)
{
    atomic_fetch_add(&((struct waker *)arg)->ran, 1);
    tern_loop_stop(loop);
}

static void *post_when_blocked(void *arg)
{
    struct waker *w = arg;
    w->saw_step_4 = wait_for_step(w->loop, 4);
    cr_assert_eq(tern_post(w->loop, stop_it, w), 0);
    return NULL;
}

/* A post from another thread gets a loop out of kevent through NOTE_TRIGGER,
 * and the trigger is consumed with it. */
Test(kqueue, evfilt_user_wakes_a_blocked_loop, .timeout = TEST_TIMEOUT)
{
    struct waker w = {.loop = kqueue_loop_with_user_wake()};
    tern_id keep;
    cr_assert_eq(tern_timer_start(w.loop, HOUR, 0, never, NULL, &keep), 0);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, post_when_blocked, &w), 0);
    cr_assert_eq(tern_loop_run(w.loop), 1);
    pthread_join(t, NULL);
    cr_assert(w.saw_step_4);
    cr_assert_eq(atomic_load(&w.ran), 1);
    cr_assert_eq(loop_stats(w.loop).wake_syscalls, 1);
    cr_assert_not(user_event_pending(w.loop), "the trigger outlived its wake-up");
    cr_assert_eq(tern_timer_stop(w.loop, keep), 0);
    loop_free_clean(w.loop);
}

static void *post_stop_it(void *arg)
{
    struct waker *w = arg;
    cr_assert_eq(tern_post(w->loop, stop_it, w), 0);
    return NULL;
}

/*
 * A loop nobody runs counts as asleep, so a foreign post triggers the
 * user event; the host then pumps run_once(0), which has no descriptor to
 * wait on and so never calls kevent: the wake-up must be taken back
 * (deleted and re-added) all the same, or the trigger stays queued and
 * every later park returns at once.
 */
Test(kqueue, evfilt_user_taken_without_a_wait_leaves_no_trigger, .timeout = TEST_TIMEOUT)
{
    struct waker w = {.loop = kqueue_loop_with_user_wake()};
    for (int round = 0; round < 3; round++) {
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, post_stop_it, &w), 0);
        pthread_join(t, NULL);
        cr_assert_eq(tern_loop_run_once(w.loop, 0), 0);
        cr_assert_eq(atomic_load(&w.ran), (unsigned)round + 1);
        cr_assert_not(user_event_pending(w.loop), "round %d: the trigger was left queued", round);
    }
    cr_assert_eq(loop_stats(w.loop).wake_syscalls, 3);
    loop_free_clean(w.loop);
}

static void count_post(tern_loop *loop, void *arg)
{
    (void)loop;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

struct producer {
    tern_loop *loop;
    atomic_uint *ran;
    unsigned posts;
    uint64_t seed;
};

static void *produce(void *arg)
{
    struct producer *p = arg;
    uint64_t x = p->seed;
    for (unsigned i = 0; i < p->posts; i++) {
        int rc;
        while ((rc = tern_post(p->loop, count_post, p->ran)) == -EAGAIN)
            sched_yield(); /* the loop is behind: max_operations */
        cr_assert_eq(rc, 0);
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        for (volatile unsigned spin = (unsigned)(x % 3000); spin > 0; spin--)
            ;
    }
    return NULL;
}

static void *run_loop(void *arg)
{
    tern_loop_run(arg);
    return NULL;
}

/*
 * Posts land in every corner of the park (fixed seeds): before it, in its
 * re-check (the wake is then taken back without a wait, by deleting and
 * re-adding the user event), while blocked (the wait retrieves it). After
 * each storm the drained loop must have no trigger left, or every later
 * park would return at once.
 */
Test(kqueue, evfilt_user_never_leaves_a_stale_trigger, .timeout = TEST_TIMEOUT)
{
    enum { PRODUCERS = 2, POSTS = 20000, ROUNDS = 3 };
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.max_operations = 1u << 20;
    o.backend = "kqueue";
    if (!tern__kqueue_user_wake(true))
        cr_skip_test("EVFILT_USER is not built in (old system or a portable build)");
    tern_loop *loop = loop_new_opts(&o);
    atomic_uint ran = 0;
    tern_id keep;
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, never, NULL, &keep), 0);
    for (unsigned round = 0; round < ROUNDS; round++) {
        pthread_t r, t[PRODUCERS];
        struct producer p[PRODUCERS];
        cr_assert_eq(pthread_create(&r, NULL, run_loop, loop), 0);
        for (unsigned k = 0; k < PRODUCERS; k++) {
            p[k] = (struct producer){loop, &ran, POSTS, 0x9e3779b97f4a7c15u + 7919 * k + round};
            cr_assert_eq(pthread_create(&t[k], NULL, produce, &p[k]), 0);
        }
        for (unsigned k = 0; k < PRODUCERS; k++)
            pthread_join(t[k], NULL);
        tern_loop_stop(loop);
        pthread_join(r, NULL);
        while (atomic_load(&ran) < (round + 1) * PRODUCERS * POSTS)
            tern_loop_run_once(loop, 0);
        tern_loop_run_once(loop, 0);
        cr_assert_not(user_event_pending(loop), "round %u: a stale trigger was left", round);
    }
    cr_assert_eq(atomic_load(&ran), ROUNDS * PRODUCERS * POSTS);
    cr_log_info("%u posts, %llu wake syscalls", atomic_load(&ran),
                (unsigned long long)loop_stats(loop).wake_syscalls);
    cr_assert_eq(tern_timer_stop(loop, keep), 0);
    loop_free_clean(loop);
}

#ifndef TERN_LIBKQUEUE
/* Natively the kqueue descriptor is what a host watches: a foreign post
 * makes it readable and a pump makes it quiet again. (libkqueue's
 * descriptor never turns readable; see docs/testing.md.) */
static void *post_once(void *arg)
{
    struct waker *w = arg;
    cr_assert_eq(tern_post(w->loop, stop_it, w), 0);
    return NULL;
}

Test(kqueue, evfilt_user_makes_the_kqueue_readable_for_a_host, .timeout = TEST_TIMEOUT)
{
    struct waker w = {.loop = kqueue_loop_with_user_wake()};
    int fd = tern_loop_backend_fd(w.loop);
    cr_assert_not(fd_readable_now(fd, 0));
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, post_once, &w), 0);
    pthread_join(t, NULL);
    cr_assert(fd_readable_now(fd, (int)(LIVENESS_NS / MS)));
    cr_assert_eq(tern_loop_run_once(w.loop, 0), 0);
    cr_assert_eq(atomic_load(&w.ran), 1);
    cr_assert_not(fd_readable_now(fd, 0), "still readable after pumping");
    loop_free_clean(w.loop);
}
#endif

#else
Test(kqueue, not_built)
{
    cr_assert_not(tern__kqueue_user_wake(true), "the seam must say EVFILT_USER is absent");
    cr_skip_test("the kqueue backend is not built here (-Dkqueue=enabled takes libkqueue)");
}
#endif
