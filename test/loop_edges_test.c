/*
 * Edges of the loop's turn and of what a loop is made of
 * (runtime/loop/turn.c, runtime/loop/loop.c, runtime/core/rcu.c, runtime/kinds/hooks.c and
 * the backends' waits): a signal the application handles, landing while
 * the loop sleeps in its backend, ends that turn quietly; a wait longer
 * than the backend's own unit can hold still returns on readiness; a
 * backend whose wait fails stops the process with a report, never a
 * spin; a loop the system refuses descriptors returns the errno and
 * leaves none behind; a thread the application registered as an RCU
 * reader stays online across the loop's turns; a hook start refused for
 * memory leaves nothing behind, and a start without an id pointer works.
 */
#include "loop_helpers.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <urcu-qsbr.h>

#include "alloc_walk.h"
#include "child_exit.h"
#include "fault.h"

static void never(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id;
    atomic_store((atomic_bool *)arg, true);
}

static atomic_uint handled;
static void count_signal(int signo)
{
    (void)signo;
    atomic_fetch_add(&handled, 1);
}

struct kicker {
    const tern_loop *loop;
    pid_t tid;
    pthread_t target;
    bool seen_waiting;
};

static void *kick_when_waiting(void *arg)
{
    struct kicker *k = arg;
    char what[256];
    k->seen_waiting = wait_blocked_in_backend(k->loop, k->tid, what, sizeof what);
    pthread_kill(k->target, SIGUSR1);
    return NULL;
}

/* The backend's wait interrupted by a handled signal (EINTR) is a turn
 * with nothing fired: run_once returns, the loop goes on. */
BACKEND_TEST(loop_edges, a_handled_signal_during_the_wait_ends_the_turn_quietly)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = count_signal;
    sigemptyset(&sa.sa_mask);
    cr_assert_eq(sigaction(SIGUSR1, &sa, NULL), 0);
    tern_loop *loop = loop_new_backend(backend);
    atomic_bool fired = false;
    tern_id timer;
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, never, &fired, &timer), 0);
    struct kicker k = {.loop = loop, .tid = thread_tid(), .target = pthread_self()};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, kick_when_waiting, &k), 0);
    cr_assert_eq(tern_loop_run_once(loop, -1), 1, "the interrupted turn did not end as a turn");
    cr_assert_eq(pthread_join(t, NULL), 0);
    cr_assert(k.seen_waiting, "the loop never sat in its backend wait");
    cr_assert_eq(atomic_load(&handled), 1);
    cr_assert_not(atomic_load(&fired));
    cr_assert_eq(tern_loop_run_once(loop, 0), 1, "the loop does not go on after the signal");
    cr_assert_eq(tern__test_cancel_now(loop, timer), 0);
    loop_free_clean(loop);
}

static void on_readable(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    (void)loop, (void)id, (void)fd, (void)events;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

/* 30 days in nanoseconds is more milliseconds than an int holds: the wait
 * is held at the longest the backend can say, and a ready descriptor
 * still ends it at once; so for INT64_MAX. */
BACKEND_TEST(loop_edges, a_wait_longer_than_the_backend_can_say_ends_on_readiness)
{
    tern_loop *loop = loop_new_backend(backend);
    int fds[2];
    make_pipe(fds);
    write_byte(fds[1]);
    atomic_uint n = 0;
    tern_id w;
    cr_assert_eq(tern_io_start(loop, fds[0], TERN_READABLE, on_readable, &n, &w), 0);
    const int64_t month = 30 * 24 * (int64_t)HOUR;
    for (unsigned i = 0; i < 100 && atomic_load(&n) == 0; i++)
        tern_loop_run_once(loop, month);
    cr_assert_geq(atomic_load(&n), 1);
    /* The longest wait there is: rounded up to milliseconds without
     * passing INT64_MAX (a sanitizer build would report the overflow). */
    unsigned seen = atomic_load(&n);
    for (unsigned i = 0; i < 100 && atomic_load(&n) == seen; i++)
        tern_loop_run_once(loop, INT64_MAX);
    cr_assert_gt(atomic_load(&n), seen);
    cr_assert_eq(tern__test_cancel_now(loop, w), 0);
    close(fds[0]);
    close(fds[1]);
    loop_free_clean(loop);
}

/* The epoll descriptor replaced under the loop: its wait fails with
 * EINVAL, which the loop reports and aborts on. */
static void break_the_backend(void)
{
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.backend = "epoll";
    tern_loop *loop = NULL;
    if (tern_loop_new(&loop, &opts) != 0)
        exit(2); /* no epoll here: not the abort the test expects */
    atomic_bool fired = false;
    tern_id timer;
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, never, &fired, &timer), 0);
    int fds[2];
    make_pipe(fds);
    cr_assert_geq(dup2(fds[0], tern_loop_backend_fd(loop)), 0);
    tern_loop_run_once(loop, 10 * (int64_t)MS);
}

Test(loop_edges, a_failing_backend_wait_aborts_with_a_report, .signal = SIGABRT,
     .timeout = TEST_TIMEOUT)
{
    bool have_epoll = false;
    for (const char *const *b = tern__backend_names; *b != NULL; b++)
        have_epoll |= strcmp(*b, "epoll") == 0;
    if (!have_epoll)
        abort(); /* nothing to break; the expected ending */
    break_the_backend();
}

/* The lowest descriptor number free now (the first one a call would get). */
static int lowest_free(void)
{
    int fd = dup(0);
    if (fd >= 0)
        close(fd);
    return fd;
}

/* Allow descriptor numbers below `limit` only (setrlimit's soft limit);
 * RLIM_INFINITY gives the hard limit back. */
static int descriptors_below(rlim_t limit)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -1;
    rl.rlim_cur = limit == RLIM_INFINITY ? rl.rlim_max : limit;
    return setrlimit(RLIMIT_NOFILE, &rl);
}

static int count_fds_child(void)
{
    int n = 0;
    for (int fd = 0; fd < 1024; fd++)
        n += fcntl(fd, F_GETFD) >= 0;
    return n;
}

/* A loop allowed 0, 1, 2, ... more descriptors: -EMFILE and nothing left
 * open until it has what it needs, then a working loop (freed with its
 * descriptors). */
static int loops_short_of_descriptors(const char *backend)
{
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.backend = backend;
    int before = count_fds_child(), lowest = lowest_free();
    for (int spare = 0; spare < 8; spare++) {
        if (lowest < 0 || descriptors_below((rlim_t)(lowest + spare)) != 0)
            return 1;
        tern_loop *loop = NULL;
        int rc = tern_loop_new(&loop, &opts);
        if (rc == 0) {
            if (tern_loop_run_once(loop, 0) != 0)
                return 3;
            tern_loop_free(loop);
            return count_fds_child() == before ? 0 : 4;
        }
        if (rc != -EMFILE || loop != NULL)
            return 5;
        if (count_fds_child() != before)
            return 6;
    }
    return 7;
}

BACKEND_TEST(loop_edges, a_loop_refused_descriptors_returns_emfile_and_leaves_none)
{
    if (backend_is_libkqueue(backend)) {
        cr_log_info("libkqueue opens descriptors of its own");
        return;
    }
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int rc = loops_short_of_descriptors(backend);
        descriptors_below(RLIM_INFINITY); /* child_exit writes coverage counters */
        child_exit(rc);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "the child died of signal %d", WTERMSIG(status));
    cr_assert_eq(WEXITSTATUS(status), 0, "the child's check %d failed", WEXITSTATUS(status));
}

static void post_noop(tern_loop *loop, void *arg)
{
    (void)loop;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

/* The application's own reader: the loop leaves its state alone, so it
 * stays online after the loop's turns (tern only parks it while asleep). */
Test(loop_edges, an_application_rcu_reader_stays_online_across_turns, .timeout = TEST_TIMEOUT)
{
    urcu_qsbr_register_thread();
    cr_assert(urcu_qsbr_read_ongoing());
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.flags = TERN_LOOP_RCU;
    tern_loop *loop = loop_new_opts(&opts);
    atomic_uint n = 0;
    cr_assert_eq(tern_post(loop, post_noop, &n), 0);
    cr_assert(run_until_count(loop, &n, 1, 0, 10));
    cr_assert(urcu_qsbr_read_ongoing(), "a turn put the application's reader offline");
    atomic_bool fired = false;
    tern_id timer;
    cr_assert_eq(tern_timer_start(loop, 1 * MS, 0, never, &fired, &timer), 0);
    cr_assert(run_until_flag(loop, &fired, 10 * (int64_t)MS, 1000));
    cr_assert(urcu_qsbr_read_ongoing(), "a wait put the application's reader offline");
    loop_free_clean(loop);
    urcu_qsbr_unregister_thread();
}

static void count_hook(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

/* The start the hook walk refuses: a PREPARE hook counting into arg. */
static int start_prepare_hook(tern_loop *loop, void *arg, tern_id *id)
{
    return tern_hook_start(loop, TERN_HOOK_PREPARE, count_hook, arg, id);
}

/* Each allocation of a hook start failing in turn: -ENOMEM, nothing live,
 * the hook never called; a start without an id pointer runs its hook. */
Test(loop_edges, a_hook_start_refused_for_memory_leaves_nothing, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    atomic_uint n = 0, filler = 0;
    struct alloc_walk w = {start_prepare_hook, &n, count_hook, &filler};
    tern_id fill[ALLOC_WALK_FILL];
    cr_assert(alloc_walk(loop, &w, fill));
    tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&n), 0, "a refused hook was called");
    cr_assert_eq(atomic_load(&filler), ALLOC_WALK_FILL);
    for (unsigned f = 0; f < ALLOC_WALK_FILL; f++)
        cr_assert_eq(tern__test_cancel_now(loop, fill[f]), 0);
    cr_assert_eq(tern_hook_start(loop, TERN_HOOK_PREPARE, count_hook, &n, NULL), 0);
    cr_assert_eq(loop_live(loop), 1);
    tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&n), 1);
    tern_loop_free(loop); /* the hook has no id here: the loop's free stops it */
}
