/*
 * External waits (SPEC §17, tern/wait.h): a descriptor wait delivered
 * once through step 2, holding a max_undelivered credit until then,
 * refused with a cause and without a trace, cancelled with an outcome,
 * timed out, capped by an owner, and ended exactly once by teardown; and a
 * blocking wait run off the bounded workers under the long ceiling. The
 * descriptor tests run on every backend (the conformance suite).
 */
#include "loop_helpers.h"

#include <pthread.h>
#include <unistd.h>

struct waited {
    atomic_uint calls;
    int status;
    void *result;
    tern_id id;
    /* a second wait this one's done cancels, and what the cancel said */
    tern_loop *loop;
    tern_id cancel_other;
    int cancel_rc;
};

static void waited_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    struct waited *w = arg;
    w->status = status;
    w->result = result;
    w->id = id;
    if (w->cancel_other != 0)
        w->cancel_rc = tern_cancel(loop, w->cancel_other);
    atomic_fetch_add(&w->calls, 1);
}

static void io_noop(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    (void)loop, (void)id, (void)fd, (void)events, (void)arg;
}

static void *noop_work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

struct on_loop {
    tern_id id;
    int rc, again; /* the cancel's answer, and a second one's right after */
};

static void cancel_cb(tern_loop *loop, void *arg)
{
    struct on_loop *c = arg;
    c->rc = tern_cancel(loop, c->id);
    c->again = tern_cancel(loop, c->id);
}

/* tern_cancel from the thread running the loop (inside a callback), where
 * it answers with the outcome rather than TERN_CANCEL_REQUESTED. */
static int last_again;
static int cancel_on_loop(tern_loop *loop, tern_id id)
{
    struct on_loop c = {.id = id, .rc = 12345};
    cr_assert_eq(tern_defer(loop, cancel_cb, &c), 0);
    tern_loop_run_once(loop, 0);
    cr_assert_neq(c.rc, 12345, "the deferred cancel did not run");
    last_again = c.again;
    return c.rc;
}

static void poke(int fd)
{
    cr_assert_eq(write(fd, "x", 1), 1);
}

static void close_pipe(int p[2])
{
    close(p[0]);
    close(p[1]);
}

#ifdef __linux__
#include <sys/eventfd.h>

BACKEND_TEST(wait, eventfd_signalled_elsewhere_delivers_once)
{
    tern_loop *loop = loop_new_backend(backend);
    int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    cr_assert_geq(efd, 0);
    struct waited w = {0};
    tern_id id = 0;
    cr_assert_eq(tern_wait_fd(loop, efd, waited_done, &w, NULL, &id), 0);
    cr_assert_eq(loop_stats(loop).undelivered, 1, "a pending wait holds a credit");
    tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&w.calls), 0, "done before the event");
    uint64_t one = 1;
    cr_assert_eq(write(efd, &one, sizeof one), (ssize_t)sizeof one);
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(atomic_load(&w.calls), 1);
    cr_assert_eq(w.status, 0);
    cr_assert_eq(w.id, id);
    cr_assert((uintptr_t)w.result & TERN_READABLE);
    cr_assert_eq(loop_stats(loop).undelivered, 0, "the credit came back at delivery");
    /* Once: the descriptor is still readable, and no second done comes. */
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 1 * (int64_t)MS);
    cr_assert_eq(atomic_load(&w.calls), 1);
    uint64_t v = 0;
    cr_assert_eq(read(efd, &v, sizeof v), (ssize_t)sizeof v);
    cr_assert_eq(v, 1, "the wait read nothing from the eventfd");
    cr_assert_eq(cancel_on_loop(loop, id), -ENOENT, "the id is stale after done");
    close(efd);
    loop_free_clean(loop);
}
#endif

#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "child_exit.h"

/* A child that exits with 3 once `release`'s write end is closed (or
 * written). */
static pid_t child_held(int release[2])
{
    make_pipe(release);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        /* Hold no other child's release (nor anything else of the test's). */
        for (int fd = 3; fd < 1024; fd++)
            if (fd != release[0])
                close(fd);
        int fl = fcntl(release[0], F_GETFL);
        (void)fcntl(release[0], F_SETFL, fl & ~O_NONBLOCK);
        char c;
        (void)read(release[0], &c, 1);
        child_exit(3);
    }
    close(release[0]);
    return pid;
}

/* A pidfd for pid, or -1 where the system has none (the test is skipped). */
static int pidfd_for(pid_t pid)
{
#ifdef SYS_pidfd_open
    long fd = syscall(SYS_pidfd_open, pid, 0u);
    if (fd < 0) {
        cr_assert(errno == ENOSYS || errno == EPERM, "pidfd_open: %s", strerror(errno));
        return -1;
    }
    (void)fcntl((int)fd, F_SETFD, FD_CLOEXEC);
    return (int)fd;
#else
    (void)pid;
    return -1;
#endif
}

/*
 * A child's pidfd through tern_wait_fd: done once when the child ends,
 * holding a max_undelivered credit (a wait and a job beyond the limit are
 * refused) until then; a second child's wait is cancelled (-ECANCELED
 * once, and its pidfd is free to be waited on again).
 */
BACKEND_TEST(wait, pidfd_of_a_child)
{
    int ra[2], rb[2];
    pid_t a = child_held(ra), b = child_held(rb);
    int pa = pidfd_for(a), pb = pa >= 0 ? pidfd_for(b) : -1;
    if (pb < 0) {
        close(ra[1]);
        close(rb[1]);
        (void)waitpid(a, NULL, 0);
        (void)waitpid(b, NULL, 0);
        if (pa >= 0)
            close(pa);
        cr_skip_test("no pidfd_open on this system (Linux 5.3 and later)");
    }
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.backend = backend;
    opts.max_undelivered = 2;
    tern_loop *loop = loop_new_opts(&opts);
    struct waited wa = {0}, wb = {0}, wc = {0};
    tern_id ia = 0, ib = 0;
    cr_assert_eq(tern_wait_fd(loop, pa, waited_done, &wa, NULL, &ia), 0);
    cr_assert_eq(tern_wait_fd(loop, pb, waited_done, &wb, NULL, &ib), 0);
    cr_assert_eq(loop_stats(loop).undelivered, 2, "each pending wait holds a credit");
    int p[2];
    make_pipe(p);
    cr_assert_eq(tern_wait_fd(loop, p[0], waited_done, &wc, NULL, NULL), -EAGAIN);
    cr_assert_eq(tern_loop_last_refusal(loop), TERN_REFUSED_UNDELIVERED);
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, noop_work, waited_done, &wc, NULL), -EAGAIN);
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 1 * (int64_t)MS);
    cr_assert_eq(atomic_load(&wa.calls) + atomic_load(&wb.calls), 0, "done before an exit");

    /* The first child ends: its wait is delivered, once. */
    close(ra[1]);
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (atomic_load(&wa.calls) == 0 && mono_ns() < end)
        tern_loop_run_once(loop, 10 * (int64_t)MS);
    cr_assert_eq(atomic_load(&wa.calls), 1);
    cr_assert_eq(wa.status, 0);
    cr_assert_eq(wa.id, ia);
    cr_assert((uintptr_t)wa.result & TERN_READABLE);
    cr_assert_eq(loop_stats(loop).undelivered, 1, "the credit came back at delivery");
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 1 * (int64_t)MS);
    cr_assert_eq(atomic_load(&wa.calls), 1, "a pidfd stays readable; done came again");
    int st = 0;
    cr_assert_eq(waitpid(a, &st, 0), a, "the wait reaped nothing: the child is the caller's");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 3);

    /* The second is cancelled before it ends. */
    cr_assert_eq(cancel_on_loop(loop, ib), TERN_CANCEL_STOPPED);
    close(rb[1]);
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(atomic_load(&wb.calls), 1);
    cr_assert_eq(wb.status, -ECANCELED);
    cr_assert_null(wb.result);
    cr_assert_eq(loop_stats(loop).undelivered, 0);
    /* Not watched any more: a new wait on the same pidfd is accepted and
     * delivered (the child has ended by now or soon will). */
    struct waited wd = {0};
    cr_assert_eq(tern_wait_fd(loop, pb, waited_done, &wd, NULL, NULL), 0);
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(atomic_load(&wd.calls), 1);
    cr_assert_eq(wd.status, 0);
    cr_assert_eq(atomic_load(&wb.calls), 1, "the cancelled wait's done came twice");
    cr_assert_eq(waitpid(b, &st, 0), b);
    close(pa);
    close(pb);
    close_pipe(p);
    loop_free_clean(loop);
}

BACKEND_TEST(wait, refused_at_max_undelivered_leaves_nothing)
{
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.backend = backend;
    opts.max_undelivered = 2;
    tern_loop *loop = loop_new_opts(&opts);
    int p[3][2];
    struct waited w[3] = {0};
    tern_id ids[3] = {0};
    for (int i = 0; i < 3; i++)
        make_pipe(p[i]);
    cr_assert_eq(tern_wait_fd(loop, p[0][0], waited_done, &w[0], NULL, &ids[0]), 0);
    cr_assert_eq(tern_wait_fd(loop, p[1][0], waited_done, &w[1], NULL, &ids[1]), 0);
    unsigned live = loop_live(loop);
    cr_assert_eq(tern_wait_fd(loop, p[2][0], waited_done, &w[2], NULL, &ids[2]), -EAGAIN);
    cr_assert_eq(tern_loop_last_refusal(loop), TERN_REFUSED_UNDELIVERED);
    cr_assert_eq(ids[2], 0);
    cr_assert_eq(loop_live(loop), live, "a refused wait left an operation");
    cr_assert_eq(loop_stats(loop).undelivered, 2);
    /* The refused descriptor was never claimed: a watcher may take it. */
    tern_id io = 0;
    cr_assert_eq(tern_io_start(loop, p[2][0], TERN_READABLE, io_noop, NULL, &io), 0);
    cr_assert_eq(tern_io_stop(loop, io), 0);
    /* Jobs and waits share the credits: a job is refused too. */
    struct waited job = {0};
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, noop_work, waited_done, &job, NULL), -EAGAIN);
    cr_assert_eq(tern_loop_last_refusal(loop), TERN_REFUSED_UNDELIVERED);
    /* A delivery gives a credit back; then a wait is accepted again. */
    poke(p[0][1]);
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (atomic_load(&w[0].calls) == 0 && mono_ns() < end)
        tern_loop_run_once(loop, 10 * (int64_t)MS);
    cr_assert_eq(atomic_load(&w[0].calls), 1);
    cr_assert_eq(tern_wait_fd(loop, p[2][0], waited_done, &w[2], NULL, &ids[2]), 0);
    cr_assert_eq(tern_loop_last_refusal(loop), TERN_REFUSED_NONE);
    cr_assert_eq(cancel_on_loop(loop, ids[1]), TERN_CANCEL_STOPPED);
    cr_assert_eq(cancel_on_loop(loop, ids[2]), TERN_CANCEL_STOPPED);
    cr_assert(run_until_nothing_live(loop));
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(atomic_load(&w[i].calls), 1, "wait %d", i);
        close_pipe(p[i]);
    }
    cr_assert_eq(w[1].status, -ECANCELED);
    loop_free_clean(loop);
}

BACKEND_TEST(wait, cancel_before_the_event_stops_it)
{
    tern_loop *loop = loop_new_backend(backend);
    int p[2];
    make_pipe(p);
    struct waited w = {0};
    tern_id id = 0;
    cr_assert_eq(tern_wait_fd(loop, p[0], waited_done, &w, NULL, &id), 0);
    cr_assert_eq(cancel_on_loop(loop, id), TERN_CANCEL_STOPPED);
    cr_assert_eq(last_again, TERN_CANCEL_STOPPED, "a second cancel, same answer");
    poke(p[1]); /* too late: not watched any more */
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(atomic_load(&w.calls), 1);
    cr_assert_eq(w.status, -ECANCELED);
    cr_assert_null(w.result);
    cr_assert_eq(loop_stats(loop).undelivered, 0);
    close_pipe(p);
    loop_free_clean(loop);
}

BACKEND_TEST(wait, cancel_after_the_event_is_finished)
{
    tern_loop *loop = loop_new_backend(backend);
    int a[2], b[2];
    make_pipe(a);
    make_pipe(b);
    struct waited wa = {0}, wb = {0};
    tern_id ia = 0, ib = 0;
    cr_assert_eq(tern_wait_fd(loop, a[0], waited_done, &wa, NULL, &ia), 0);
    cr_assert_eq(tern_wait_fd(loop, b[0], waited_done, &wb, NULL, &ib), 0);
    /* Both become readable in one turn; whichever done runs first cancels
     * the other, whose event is in but whose done has not run. */
    wa.cancel_other = ib;
    wb.cancel_other = ia;
    poke(a[1]);
    poke(b[1]);
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(atomic_load(&wa.calls), 1);
    cr_assert_eq(atomic_load(&wb.calls), 1);
    cr_assert_eq(wa.status, 0);
    cr_assert_eq(wb.status, 0, "done still gets 0 after a cancel that came too late");
    int first_rc = wa.cancel_rc == -ENOENT ? wb.cancel_rc : wa.cancel_rc;
    int second_rc = wa.cancel_rc == -ENOENT ? wa.cancel_rc : wb.cancel_rc;
    cr_assert_eq(first_rc, TERN_CANCEL_FINISHED);
    cr_assert_eq(second_rc, -ENOENT, "the delivered wait's id is stale");
    close_pipe(a);
    close_pipe(b);
    loop_free_clean(loop);
}

BACKEND_TEST(wait, deadline_gives_etimedout)
{
    tern_loop *loop = loop_new_backend(backend);
    int p[2];
    make_pipe(p);
    struct waited w = {0};
    tern_job_options o;
    tern_job_options_init(&o);
    o.timeout_ns = 20 * MS;
    tern_id id = 0;
    cr_assert_eq(tern_wait_fd(loop, p[0], waited_done, &w, &o, &id), 0);
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(atomic_load(&w.calls), 1);
    cr_assert_eq(w.status, -ETIMEDOUT);
    poke(p[1]);
    tern_loop_run_once(loop, 1 * (int64_t)MS);
    cr_assert_eq(atomic_load(&w.calls), 1);
    o.timeout_ns = ((uint64_t)1 << 62) + 1;
    cr_assert_eq(tern_wait_fd(loop, p[0], waited_done, &w, &o, NULL), -EINVAL);
    close_pipe(p);
    loop_free_clean(loop);
}

/*
 * A cancel after the timeout came and before done ran: the wait was
 * stopped, so the answer is STOPPED, and done keeps the first reason,
 * -ETIMEDOUT (as a job the timeout stopped does). Two waits with one
 * deadline time out in the same step 5; the first done cancels the other.
 */
BACKEND_TEST(wait, cancel_after_the_timeout_says_stopped_and_done_keeps_etimedout)
{
    tern_loop *loop = loop_new_backend(backend);
    int a[2], b[2];
    make_pipe(a);
    make_pipe(b);
    struct waited wa = {0}, wb = {0};
    tern_job_options o;
    tern_job_options_init(&o);
    o.timeout_ns = 20 * MS;
    tern_id ia = 0, ib = 0;
    cr_assert_eq(tern_wait_fd(loop, a[0], waited_done, &wa, &o, &ia), 0);
    cr_assert_eq(tern_wait_fd(loop, b[0], waited_done, &wb, &o, &ib), 0);
    wa.cancel_other = ib;
    wb.cancel_other = ia;
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(atomic_load(&wa.calls), 1);
    cr_assert_eq(atomic_load(&wb.calls), 1);
    cr_assert_eq(wa.status, -ETIMEDOUT);
    cr_assert_eq(wb.status, -ETIMEDOUT, "done keeps -ETIMEDOUT after the late cancel");
    int first_rc = wa.cancel_rc == -ENOENT ? wb.cancel_rc : wa.cancel_rc;
    int second_rc = wa.cancel_rc == -ENOENT ? wa.cancel_rc : wb.cancel_rc;
    cr_assert_eq(first_rc, TERN_CANCEL_STOPPED, "a timed-out wait was stopped: %d", first_rc);
    cr_assert_eq(second_rc, -ENOENT, "the delivered wait's id is stale");
    close_pipe(a);
    close_pipe(b);
    loop_free_clean(loop);
}

BACKEND_TEST(wait, owner_cap_refuses_and_close_cancels)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id owner = 0;
    cr_assert_eq(tern_owner_open(loop, 1, &owner), 0);
    int a[2], b[2];
    make_pipe(a);
    make_pipe(b);
    struct waited wa = {0}, wb = {0};
    tern_job_options o;
    tern_job_options_init(&o);
    o.owner = owner;
    cr_assert_eq(tern_wait_fd(loop, a[0], waited_done, &wa, &o, NULL), 0);
    tern_owner_stats st;
    cr_assert_eq(tern_owner_stats_get(loop, owner, &st), 0);
    cr_assert_eq(st.in_flight, 1);
    cr_assert_eq(tern_wait_fd(loop, b[0], waited_done, &wb, &o, NULL), -EAGAIN);
    cr_assert_eq(tern_loop_last_refusal(loop), TERN_REFUSED_OWNER_CAP);
    cr_assert_eq(loop_stats(loop).undelivered, 1);
    cr_assert_eq(tern_owner_close(loop, owner), 0);
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(atomic_load(&wa.calls), 1);
    cr_assert_eq(wa.status, -ECANCELED);
    cr_assert_eq(atomic_load(&wb.calls), 0);
    o.owner = owner; /* closed now */
    cr_assert_eq(tern_wait_fd(loop, b[0], waited_done, &wb, &o, NULL), -EINVAL);
    close_pipe(a);
    close_pipe(b);
    loop_free_clean(loop);
}

BACKEND_TEST(wait, teardown_with_a_wait_pending_calls_done_once)
{
    tern_loop *loop = loop_new_backend(backend);
    int p[2];
    make_pipe(p);
    struct waited w = {0};
    cr_assert_eq(tern_wait_fd(loop, p[0], waited_done, &w, NULL, NULL), 0);
    tern_loop_run_once(loop, 0);
    tern_loop_free(loop);
    cr_assert_eq(atomic_load(&w.calls), 1);
    cr_assert_eq(w.status, -ECANCELED);
    close_pipe(p);
}

Test(wait, bad_arguments)
{
    tern_loop *loop = loop_new_default();
    struct waited w = {0};
    cr_assert_eq(tern_wait_fd(loop, -1, waited_done, &w, NULL, NULL), -EINVAL);
    int p[2];
    make_pipe(p);
    cr_assert_eq(tern_wait_fd(loop, p[0], NULL, &w, NULL, NULL), -EINVAL);
    tern_id io = 0;
    cr_assert_eq(tern_io_start(loop, p[0], TERN_READABLE, io_noop, NULL, &io), 0);
    cr_assert_eq(tern_wait_fd(loop, p[0], waited_done, &w, NULL, NULL), -EEXIST);
    cr_assert_eq(tern_io_stop(loop, io), 0);
    cr_assert_eq(atomic_load(&w.calls), 0);
    close_pipe(p);
    loop_free_clean(loop);
}

/* ------------------------------------------------------------------ */
/* Blocking waits                                                      */
/* ------------------------------------------------------------------ */

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static bool gate_open;
static atomic_uint blocked;

/* A blocking call with no descriptor: a condition variable another thread signals. */
static void *block_until_open(tern_job *job, void *arg)
{
    (void)job;
    atomic_fetch_add(&blocked, 1);
    pthread_mutex_lock(&gate_lock);
    while (!gate_open)
        pthread_cond_wait(&gate_cond, &gate_lock);
    pthread_mutex_unlock(&gate_lock);
    return arg;
}

static void *bounded_work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

Test(wait, blocking_waits_run_off_the_bounded_workers_under_the_long_ceiling)
{
    enum { N = 3 };
    tern_pool_config cfg;
    tern_pool_config_init(&cfg);
    cfg.threads = 1;
    cfg.long_threads_max = N;
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.pool = &cfg;
    tern_loop *loop = loop_new_opts(&opts);
    struct waited w[N + 1] = {0};
    for (int i = 0; i < N; i++)
        cr_assert_eq(tern_wait_call(loop, block_until_open, waited_done, &w[i], NULL, NULL), 0);
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (atomic_load(&blocked) < N && mono_ns() < end)
        sleep_ns(MS);
    cr_assert_eq(atomic_load(&blocked), N);
    /* N waits block; the one bounded worker is free. */
    struct waited job = {0};
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, bounded_work, waited_done, &job, NULL), 0);
    end = mono_ns() + LIVENESS_NS;
    while (atomic_load(&job.calls) == 0 && mono_ns() < end)
        tern_loop_run_once(loop, 10 * (int64_t)MS);
    cr_assert_eq(atomic_load(&job.calls), 1, "a bounded job did not run while waits blocked");
    cr_assert_eq(job.status, 0);
    /* The ceiling: one more blocking wait is refused, with its cause. */
    cr_assert_eq(tern_wait_call(loop, block_until_open, waited_done, &w[N], NULL, NULL), -EAGAIN);
    cr_assert_eq(tern_loop_last_refusal(loop), TERN_REFUSED_LONG_CEILING);
    cr_assert_eq(loop_stats(loop).undelivered, N, "the refused wait took no credit");
    pthread_mutex_lock(&gate_lock);
    gate_open = true;
    pthread_cond_broadcast(&gate_cond);
    pthread_mutex_unlock(&gate_lock);
    cr_assert(run_until_nothing_live(loop));
    for (int i = 0; i < N; i++) {
        cr_assert_eq(atomic_load(&w[i].calls), 1);
        cr_assert_eq(w[i].status, 0);
        cr_assert_eq(w[i].result, &w[i]);
    }
    cr_assert_eq(atomic_load(&w[N].calls), 0);
    loop_free_clean(loop);
}
