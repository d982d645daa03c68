/*
 * Signal watchers (tern_signal_start/stop): delivery through the loop for
 * thread-directed (raise) and process-directed (kill) signals, including
 * one sent from a pool thread; several watchers per signal, on one loop
 * and on two, each called once per signal; stop and
 * cancel hand the signal back (unblocked, pending instances consumed);
 * unreferenced watchers; teardown; bad input. Every backend.
 */
#include "abort_helpers.h"
#include "loop_helpers.h"

#include <signal.h>

#include "platform.h"

#include <urcu-qsbr.h>

struct seen {
    atomic_uint n;
    int signo;
    tern_id id;
};

static void on_signal(tern_loop *loop, tern_id id, int signo, void *arg)
{
    (void)loop;
    struct seen *s = arg;
    s->signo = signo;
    s->id = id;
    atomic_fetch_add(&s->n, 1);
}

static bool blocked_here(int signo)
{
    sigset_t cur;
    cr_assert_eq(pthread_sigmask(SIG_BLOCK, NULL, &cur), 0);
    return sigismember(&cur, signo);
}

static bool pending_here(int signo)
{
    sigset_t p;
    cr_assert_eq(sigpending(&p), 0);
    return sigismember(&p, signo);
}

/*
 * Whether a watched signal is blocked in the loop's thread: yes for
 * signalfd and kqueue, which read it while it is pending; no for the
 * self-pipe of portable builds, whose handler must run.
 */
static bool watching_blocks(const char *backend)
{
    return tern__sigsource_kind_for(strcmp(backend, "kqueue") == 0) != TERN__SIG_PIPE;
}

/*
 * Send signo to this (the loop's) thread. libkqueue cannot see signals
 * directed at one thread (its BUGS.md: its signalfd lives on its own
 * thread), so there the signal goes to the process instead; native kqueue
 * sees both.
 */
static void raise_here(const char *backend, int signo)
{
    if (backend_is_libkqueue(backend)) {
        cr_log_info("libkqueue: kill(getpid()) instead of raise()");
        cr_assert_eq(kill(getpid(), signo), 0);
    } else {
        cr_assert_eq(raise(signo), 0);
    }
}

BACKEND_TEST(signal, raise_is_delivered_through_the_loop)
{
    tern_loop *loop = loop_new_backend(backend);
    struct seen s = {0};
    tern_id id = 0;
    cr_assert_not(blocked_here(SIGUSR1));
    cr_assert_eq(tern_signal_start(loop, SIGUSR1, on_signal, &s, &id), 0);
    cr_assert_neq(id, 0);
    cr_assert_eq(blocked_here(SIGUSR1), watching_blocks(backend),
                 "the loop thread must block the watched signal (but not for a self-pipe)");
    raise_here(backend, SIGUSR1); /* would kill the process if not caught by the loop */
    cr_assert_eq(atomic_load(&s.n), 0, "delivered in step 2, not in the handler");
    cr_assert(run_until_count(loop, &s.n, 1, 10 * MS, 500));
    cr_assert_eq(s.signo, SIGUSR1);
    cr_assert_eq(s.id, id);
    /* A second one is delivered too. */
    raise_here(backend, SIGUSR1);
    cr_assert(run_until_count(loop, &s.n, 2, 10 * MS, 500));
    cr_assert_eq(tern_signal_stop(loop, id), 0);
    cr_assert_not(blocked_here(SIGUSR1), "stop hands the signal back");
    cr_assert_eq(tern_signal_stop(loop, id), -ENOENT);
    loop_free_clean(loop);
}

BACKEND_TEST(signal, kill_to_the_process_reaches_the_loop)
{
    tern_loop *loop = loop_new_backend(backend);
    struct seen s = {0};
    tern_id id;
    cr_assert_eq(tern_signal_start(loop, SIGUSR2, on_signal, &s, &id), 0);
    cr_assert_eq(kill(getpid(), SIGUSR2), 0);
    cr_assert(run_until_count(loop, &s.n, 1, 10 * MS, 500));
    cr_assert_eq(s.signo, SIGUSR2);
    cr_assert_eq(tern__test_cancel_now(loop, id), 0); /* cancel stops it too */
    cr_assert_eq(tern__test_cancel_now(loop, id), -ENOENT);
    cr_assert_not(blocked_here(SIGUSR2));
    loop_free_clean(loop);
}

static void *send_from_pool(tern_job *job, void *arg)
{
    (void)job;
    (void)arg;
    /* This worker blocks every signal, so the signal stays pending for the
     * process until the loop's signalfd reads it. */
    kill(getpid(), SIGUSR1);
    return NULL;
}

static atomic_uint jobs_done;

static void job_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop;
    (void)id;
    (void)status;
    (void)result;
    (void)arg;
    atomic_fetch_add(&jobs_done, 1);
}

BACKEND_TEST(signal, a_signal_sent_from_a_pool_thread_reaches_the_loop)
{
    tern_loop *loop = loop_new_backend(backend);
    struct seen s = {0};
    tern_id id;
    cr_assert_eq(tern_signal_start(loop, SIGUSR1, on_signal, &s, &id), 0);
    atomic_store(&jobs_done, 0);
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, send_from_pool, job_done, NULL, NULL), 0);
    cr_assert(run_until_count(loop, &s.n, 1, 10 * MS, 1000));
    cr_assert(run_until_count(loop, &jobs_done, 1, 10 * MS, 1000));
    cr_assert_eq(s.signo, SIGUSR1);
    cr_assert_eq(tern_signal_stop(loop, id), 0);
    loop_free_clean(loop);
}

/* A few more turns, to see that nothing more arrives. */
static void settle(tern_loop *loop)
{
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 2 * MS);
}

BACKEND_TEST(signal, two_watchers_on_one_loop_each_fire_once_per_signal)
{
    tern_loop *loop = loop_new_backend(backend);
    struct seen a = {0}, b = {0};
    tern_id first, second;
    cr_assert_eq(tern_signal_start(loop, SIGUSR1, on_signal, &a, &first), 0);
    cr_assert_eq(tern_signal_start(loop, SIGUSR1, on_signal, &b, &second), 0);
    cr_assert_neq(first, second);
    raise_here(backend, SIGUSR1);
    cr_assert(run_until_count(loop, &a.n, 1, 10 * MS, 500));
    cr_assert(run_until_count(loop, &b.n, 1, 10 * MS, 500));
    settle(loop);
    cr_assert_eq(atomic_load(&a.n), 1);
    cr_assert_eq(atomic_load(&b.n), 1);
    cr_assert_eq(a.id, first);
    cr_assert_eq(b.id, second);
    /* Stopping the first (the one reading the signal) leaves the other. */
    cr_assert_eq(tern_signal_stop(loop, first), 0);
    cr_assert_eq(blocked_here(SIGUSR1), watching_blocks(backend), "given back too early");
    raise_here(backend, SIGUSR1);
    cr_assert(run_until_count(loop, &b.n, 2, 10 * MS, 500), "the other stopped firing");
    settle(loop);
    cr_assert_eq(atomic_load(&a.n), 1, "a stopped watcher fired");
    cr_assert_eq(atomic_load(&b.n), 2);
    cr_assert_eq(tern_signal_stop(loop, second), 0);
    cr_assert_not(blocked_here(SIGUSR1), "the last stop did not give the signal back");
    loop_free_clean(loop);
}

struct far_loop {
    const char *backend;
    struct seen s;
    tern_id id;
    atomic_uint started, stopped; /* 0 or 1 */
    atomic_bool stop_watcher, quit;
};

/* A second loop on its own thread, with its own watcher of SIGUSR1. */
static void *far_loop_main(void *arg)
{
    struct far_loop *f = arg;
    tern_loop *loop = loop_new_backend(f->backend);
    cr_assert_eq(tern_signal_start(loop, SIGUSR1, on_signal, &f->s, &f->id), 0);
    atomic_store(&f->started, 1);
    while (!atomic_load(&f->quit)) {
        tern_loop_run_once(loop, 2 * MS);
        if (atomic_load(&f->stop_watcher) && !atomic_load(&f->stopped)) {
            cr_assert_eq(tern_signal_stop(loop, f->id), 0);
            atomic_store(&f->stopped, 1);
        }
    }
    loop_free_clean(loop);
    return NULL;
}

static void wait_far(tern_loop *loop, atomic_uint *n, unsigned want)
{
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (atomic_load(n) < want && mono_ns() < end)
        tern_loop_run_once(loop, 2 * MS);
    cr_assert_geq(atomic_load(n), want, "the watcher on the other loop did not fire");
}

/*
 * Send SIGUSR1 to the process until *n passes `from`: on kqueue an
 * instance sent while the heir registers may be lost, so one may not do.
 * Elsewhere the first always arrives (strict: exactly one send).
 */
static void send_until(tern_loop *loop, const char *backend, atomic_uint *n, unsigned from)
{
    bool lossy = strcmp(backend, "kqueue") == 0;
    uint64_t end = mono_ns() + LIVENESS_NS;
    cr_assert_eq(kill(getpid(), SIGUSR1), 0);
    while (atomic_load(n) <= from && mono_ns() < end) {
        uint64_t resend = mono_ns() + 50 * MS;
        while (atomic_load(n) <= from && mono_ns() < resend)
            tern_loop_run_once(loop, 2 * MS);
        if (lossy && atomic_load(n) <= from)
            cr_assert_eq(kill(getpid(), SIGUSR1), 0);
    }
    cr_assert_gt(atomic_load(n), from, "the watcher did not fire");
}

BACKEND_TEST(signal, watchers_on_two_loops_each_fire_once_per_signal)
{
    tern_loop *loop = loop_new_backend(backend);
    struct seen a = {0};
    tern_id first;
    cr_assert_eq(tern_signal_start(loop, SIGUSR1, on_signal, &a, &first), 0);
    struct far_loop far = {.backend = backend};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, far_loop_main, &far), 0);
    wait_far(loop, &far.started, 1);
    /* To the process: whichever thread reads it, both loops are called. */
    cr_assert_eq(kill(getpid(), SIGUSR1), 0);
    cr_assert(run_until_count(loop, &a.n, 1, 10 * MS, 500));
    wait_far(loop, &far.s.n, 1);
    settle(loop);
    cr_assert_eq(atomic_load(&a.n), 1);
    cr_assert_eq(atomic_load(&far.s.n), 1);
    /* Stop this loop's watcher (the reader): the far one goes on. */
    cr_assert_eq(tern_signal_stop(loop, first), 0);
    send_until(loop, backend, &far.s.n, 1);
    unsigned far_n = atomic_load(&far.s.n);
    send_until(loop, backend, &far.s.n, far_n);
    cr_assert_eq(atomic_load(&a.n), 1, "a stopped watcher fired");
    /* And back: a new watcher here while the far one reads; then the far
     * one stops, and this one still fires. */
    cr_assert_eq(tern_signal_start(loop, SIGUSR1, on_signal, &a, &first), 0);
    far_n = atomic_load(&far.s.n);
    cr_assert_eq(kill(getpid(), SIGUSR1), 0);
    cr_assert(run_until_count(loop, &a.n, 2, 10 * MS, 500));
    wait_far(loop, &far.s.n, far_n + 1);
    atomic_store(&far.stop_watcher, true);
    wait_far(loop, &far.stopped, 1);
    send_until(loop, backend, &a.n, 2);
    atomic_store(&far.quit, true);
    cr_assert_eq(pthread_join(t, NULL), 0);
    cr_assert_eq(tern_signal_stop(loop, first), 0);
    loop_free_clean(loop);
}

BACKEND_TEST(signal, stop_consumes_pending_instances_instead_of_dying)
{
    tern_loop *loop = loop_new_backend(backend);
    struct seen s = {0};
    tern_id id;
    cr_assert_eq(tern_signal_start(loop, SIGUSR2, on_signal, &s, &id), 0);
    raise_here(backend, SIGUSR2);
    /* A self-pipe's handler has run already; the others leave it pending
     * (libkqueue's own thread takes it off the process at once). */
    if (!backend_is_libkqueue(backend))
        cr_assert_eq(pending_here(SIGUSR2), watching_blocks(backend));
    /* Stopped before the loop read it: unblocking must not deliver it with
     * its default action (which would end this process). */
    cr_assert_eq(tern_signal_stop(loop, id), 0);
    cr_assert_not(pending_here(SIGUSR2));
    cr_assert_not(blocked_here(SIGUSR2));
    cr_assert_eq(atomic_load(&s.n), 0);
    loop_free_clean(loop);
}

BACKEND_TEST(signal, a_signal_blocked_before_start_stays_blocked_after_stop)
{
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, SIGUSR1);
    cr_assert_eq(pthread_sigmask(SIG_BLOCK, &one, NULL), 0);
    tern_loop *loop = loop_new_backend(backend);
    struct seen s = {0};
    tern_id id;
    cr_assert_eq(tern_signal_start(loop, SIGUSR1, on_signal, &s, &id), 0);
    cr_assert_eq(tern_signal_stop(loop, id), 0);
    cr_assert(blocked_here(SIGUSR1), "tern unblocks only what it blocked");
    loop_free_clean(loop);
}

BACKEND_TEST(signal, an_unreferenced_watcher_does_not_keep_run_going)
{
    tern_loop *loop = loop_new_backend(backend);
    struct seen s = {0};
    tern_id id;
    cr_assert_eq(tern_signal_start(loop, SIGUSR1, on_signal, &s, &id), 0);
    cr_assert_eq(tern_unref(loop, id), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(tern_ref(loop, id), 0);
    cr_assert_eq(tern_signal_stop(loop, id), 0);
    loop_free_clean(loop);
}

static void stop_inside(tern_loop *loop, tern_id id, int signo, void *arg)
{
    (void)signo;
    atomic_fetch_add((atomic_uint *)arg, 1);
    cr_assert_eq(tern_signal_stop(loop, id), 0);
}

BACKEND_TEST(signal, a_watcher_may_stop_itself_in_its_callback)
{
    tern_loop *loop = loop_new_backend(backend);
    atomic_uint n = 0;
    tern_id id;
    cr_assert_eq(tern_signal_start(loop, SIGUSR1, stop_inside, &n, &id), 0);
    raise_here(backend, SIGUSR1);
    cr_assert(run_until_count(loop, &n, 1, 10 * MS, 500));
    cr_assert_eq(tern_signal_stop(loop, id), -ENOENT);
    cr_assert_eq(tern_loop_run(loop), 0);
    loop_free_clean(loop);
}

BACKEND_TEST(signal, loop_free_releases_the_signal)
{
    tern_loop *loop = loop_new_backend(backend);
    struct seen s = {0};
    tern_id id;
    cr_assert_eq(tern_signal_start(loop, SIGUSR1, on_signal, &s, &id), 0);
    tern_loop_free(loop);
    cr_assert_not(blocked_here(SIGUSR1));
    loop = loop_new_backend(backend);
    cr_assert_eq(tern_signal_start(loop, SIGUSR1, on_signal, &s, &id), 0,
                 "the freed loop's watcher must not hold the signal");
    cr_assert_eq(tern_signal_stop(loop, id), 0);
    loop_free_clean(loop);
}

static void noop_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
}

BACKEND_TEST(signal, bad_input_is_refused)
{
    tern_loop *loop = loop_new_backend(backend);
    struct seen s = {0};
    tern_id id = 0;
    cr_assert_eq(tern_signal_start(loop, SIGUSR1, NULL, &s, &id), -EINVAL);
    cr_assert_eq(tern_signal_start(loop, 0, on_signal, &s, &id), -EINVAL);
    cr_assert_eq(tern_signal_start(loop, -1, on_signal, &s, &id), -EINVAL);
    cr_assert_eq(tern_signal_start(loop, SIGKILL, on_signal, &s, &id), -EINVAL);
    cr_assert_eq(tern_signal_start(loop, SIGSTOP, on_signal, &s, &id), -EINVAL);
    cr_assert_eq(tern_signal_start(loop, 100000, on_signal, &s, &id), -EINVAL);
    cr_assert_eq(id, 0);
    cr_assert_not(blocked_here(SIGUSR1));
    cr_assert_eq(tern_signal_stop(loop, 999999999), -ENOENT);
    tern_id timer;
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, noop_timer, NULL, &timer), 0);
    cr_assert_eq(tern_signal_stop(loop, timer), -ENOENT, "a timer is not a signal watcher");
    cr_assert_eq(tern_timer_stop(loop, timer), 0);
    loop_free_clean(loop);
}

/* ---------------------------------------------------------------- */

static struct rcu_head rcu_probe;
static atomic_bool rcu_probe_ran;
static atomic_bool rcu_helper_blocks_usr1;

static void probe_mask(struct rcu_head *head)
{
    (void)head;
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    atomic_store(&rcu_helper_blocks_usr1, sigismember(&cur, SIGUSR1));
    atomic_store(&rcu_probe_ran, true);
}

/* An application thread with an open signal mask that uses call_rcu. */
static void *open_mask_rcu_user(void *arg)
{
    (void)arg;
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, NULL);
    rcu_register_thread();
    call_rcu(&rcu_probe, probe_mask);
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (!atomic_load(&rcu_probe_ran) && mono_ns() < end) {
        rcu_quiescent_state();
        sleep_ns(MS);
    }
    rcu_unregister_thread();
    return NULL;
}

BACKEND_TEST(signal, liburcus_call_rcu_helper_never_takes_the_signal)
{
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.backend = backend;
    o.flags = TERN_LOOP_RCU;
    tern_loop *loop = loop_new_opts(&o);
    struct seen s = {0};
    tern_id id;
    cr_assert_eq(tern_signal_start(loop, SIGUSR1, on_signal, &s, &id), 0);
    /* The first call_rcu comes from a thread that does not block SIGUSR1;
     * the helper it would start lazily would inherit that open mask. */
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, open_mask_rcu_user, NULL), 0);
    pthread_join(t, NULL);
    cr_assert(atomic_load(&rcu_probe_ran));
    cr_assert(atomic_load(&rcu_helper_blocks_usr1),
              "liburcu's call_rcu thread must block the loop's signal");
    /* And a signal to the process reaches the loop, not the helper. */
    cr_assert_eq(kill(getpid(), SIGUSR1), 0);
    cr_assert(run_until_count(loop, &s.n, 1, 10 * MS, 500));
    cr_assert_eq(tern_signal_stop(loop, id), 0);
    loop_free_clean(loop);
}

static void never_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id, (void)arg;
    cr_assert_fail("the placeholder timer fired");
}

/*
 * A loop at max_operations refuses a signal watcher with -EAGAIN and
 * releases the signal it had reserved: once there is room, the same
 * signal can be watched (nothing left reserved).
 */
BACKEND_TEST(signal, a_full_loop_refuses_and_gives_the_signal_back)
{
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.backend = backend;
    opts.max_operations = 1;
    tern_loop *loop = loop_new_opts(&opts);
    struct seen s = {0};
    tern_id timer, id = 0;
    cr_assert_eq(tern_timer_start(loop, 3600 * SEC, 0, never_timer, NULL, &timer), 0);
    cr_assert_eq(tern_signal_start(loop, SIGUSR1, on_signal, &s, &id), -EAGAIN);
    cr_assert_eq(id, 0, "a refused start wrote an id");
    cr_assert_not(blocked_here(SIGUSR1), "a refused start left the signal blocked");
    cr_assert_eq(tern_timer_stop(loop, timer), 0);
    cr_assert_eq(tern_signal_start(loop, SIGUSR1, on_signal, &s, &id), 0,
                 "the refused start kept the signal reserved");
    cr_assert_eq(tern_signal_stop(loop, id), 0);
    loop_free_clean(loop);
}

static void on_readable(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    (void)loop, (void)id, (void)fd, (void)events, (void)arg;
}

/*
 * idp may be NULL (the watcher then ends with its loop); a signal number
 * the kernel does not have is -EINVAL; tern_signal_stop refuses the id of
 * an operation of another kind with -ENOENT and leaves it running.
 */
BACKEND_TEST(signal, no_id_out_of_range_and_the_wrong_kind)
{
    tern_loop *loop = loop_new_backend(backend);
    struct seen s = {0};
    tern_id id = 0;
    cr_assert_eq(tern_signal_start(loop, 0, on_signal, &s, &id), -EINVAL);
    cr_assert_eq(tern_signal_start(loop, _NSIG, on_signal, &s, &id), -EINVAL);
    cr_assert_eq(tern_signal_start(loop, SIGSTOP, on_signal, &s, &id), -EINVAL);
    cr_assert_eq(tern_signal_start(loop, SIGUSR2, on_signal, &s, NULL), 0);
    raise_here(backend, SIGUSR2);
    cr_assert(run_until_count(loop, &s.n, 1, 10 * MS, 500));
    cr_assert_eq(s.signo, SIGUSR2);
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    tern_id io;
    cr_assert_eq(tern_io_start(loop, sv[0], TERN_READABLE, on_readable, NULL, &io), 0);
    cr_assert_eq(tern_signal_stop(loop, io), -ENOENT, "a watcher's id stopped as a signal's");
    cr_assert_eq(tern_io_stop(loop, io), 0, "the watcher was stopped by tern_signal_stop");
    cr_assert_eq(tern_signal_stop(loop, s.id), 0);
    loop_free_clean(loop);
    close(sv[0]);
    close(sv[1]);
}

static void signal_start_null_loop(void *ctx)
{
    (void)ctx;
    tern_signal_start(NULL, SIGUSR1, on_signal, NULL, NULL);
}

static void signal_stop_null_loop(void *ctx)
{
    (void)ctx;
    tern_signal_stop(NULL, 1);
}

Test(signal, a_null_loop_aborts_naming_the_rule, .timeout = TEST_TIMEOUT)
{
    expect_abort(signal_start_null_loop, NULL, "tern_signal_start",
                 "REQUIRE failed: NULL or freed loop");
    expect_abort(signal_stop_null_loop, NULL, "tern_signal_stop",
                 "REQUIRE failed: NULL or freed loop");
}
