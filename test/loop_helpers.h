/*
 * Shared helpers for the loop suite's criterion tests (test/<module>_test.c).
 * Header-only and static, so each test program carries its
 * own copy and criterion's per-test processes share nothing.
 *
 * Every helper that waits is bounded by a count or by a generous
 * liveness deadline (LIVENESS_NS); none asserts on elapsed time.
 */
#ifndef TERN_TEST_LOOP_HELPERS_H
#define TERN_TEST_LOOP_HELPERS_H

#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "proc_helpers.h"
#include "tern.h"
#include "testing.h"

#define MS (UINT64_C(1000000))
#define SEC (UINT64_C(1000000000))
#define HOUR (UINT64_C(3600) * SEC)

/* How long a helper waits for something that must happen before it gives
 * up and lets the test fail. Not a performance bound: a correct runtime
 * meets these in microseconds; the margin covers valgrind and loaded CI. */
#define LIVENESS_NS (UINT64_C(20) * SEC)

/* Criterion's per-test timeout, a backstop for a test that would
 * otherwise block forever when the guarantee it checks is broken. */
#define TEST_TIMEOUT 60.0

static inline uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * SEC + (uint64_t)ts.tv_nsec;
}

static inline void sleep_ns(uint64_t ns)
{
    struct timespec ts = { .tv_sec = (time_t)(ns / SEC), .tv_nsec = (long)(ns % SEC) };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static inline tern_loop *loop_new_opts(const tern_loop_options *opts)
{
    tern_loop *loop = NULL;
    int rc = tern_loop_new(&loop, opts);
    cr_assert_eq(rc, 0, "tern_loop_new: %s", tern_strerror(rc));
    cr_assert_not_null(loop);
    return loop;
}

static inline tern_loop *loop_new_default(void)
{
    return loop_new_opts(NULL);
}

static inline tern_loop *loop_new_backend(const char *backend)
{
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.backend = backend;
    tern_loop *loop = loop_new_opts(&opts);
    cr_assert_str_eq(tern__loop_backend_name(loop), backend);
    return loop;
}

static inline tern_loop_stats loop_stats(const tern_loop *loop)
{
    tern_loop_stats s;
    memset(&s, 0xa5, sizeof s);
    tern_loop_stats_get(loop, &s);
    return s;
}

static inline unsigned loop_live(const tern_loop *loop)
{
    return loop_stats(loop).live_operations;
}

/* The ending every loop test shares: nothing may be left live, then the
 * loop is freed (ASan and valgrind check that nothing leaks). */
static inline void loop_free_clean(tern_loop *loop)
{
    cr_assert_eq(loop_live(loop), 0, "operations left live at the end of the test");
    tern_loop_free(loop);
}

/* Turn the loop until no operation is live (closes finished, lookups
 * back from the pool), bounded by the liveness deadline. Returns whether
 * it got there; the caller reports loop_live() when it did not. */
static inline bool run_until_nothing_live(tern_loop *loop)
{
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (loop_live(loop) > 0 && mono_ns() < end)
        tern_loop_run_once(loop, 10 * (int64_t)MS);
    return loop_live(loop) == 0;
}

/* Turn the loop (each turn waiting at most max_wait_ns) until *flag is
 * set or max_turns pass. Returns whether the flag was seen. */
static inline bool run_until_flag(tern_loop *loop, atomic_bool *flag, int64_t max_wait_ns,
                                  unsigned max_turns)
{
    for (unsigned i = 0; i < max_turns && !atomic_load(flag); i++)
        tern_loop_run_once(loop, max_wait_ns);
    return atomic_load(flag);
}

/* Turn until counter reaches want (bounded by max_turns). */
static inline bool run_until_count(tern_loop *loop, atomic_uint *counter, unsigned want,
                                   int64_t max_wait_ns, unsigned max_turns)
{
    for (unsigned i = 0; i < max_turns && atomic_load(counter) < want; i++)
        tern_loop_run_once(loop, max_wait_ns);
    return atomic_load(counter) >= want;
}

/* Wait (yielding) until another thread's loop is in the given step or
 * the liveness deadline passes. tern__loop_step is read racily on
 * purpose: it only steers when the test acts, never what it asserts. */
static inline bool wait_for_step(const tern_loop *loop, int step)
{
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (tern__loop_step(loop) != step) {
        if (mono_ns() > end)
            return false;
        sched_yield();
    }
    return true;
}

/* The kernel thread id of the calling thread (for wait_blocked_in_backend). */
static inline pid_t thread_tid(void)
{
    return (pid_t)syscall(SYS_gettid);
}

/* Whether thread `tid` of this process sits in a backend wait now
 * (epoll_wait, epoll_pwait, poll, ppoll or io_uring_enter), read from
 * /proc/self/task/<tid>/syscall; `what` gets the line read. */
static inline bool thread_in_backend_wait(pid_t tid, char *what, size_t what_len)
{
    char line[256];
    bool got = task_syscall_line(tid, line, sizeof line, what, what_len);
    long nr;
    if (!got || sscanf(line, "%ld", &nr) != 1)
        return false; /* "running" */
#ifdef SYS_io_uring_enter
    if (nr == SYS_io_uring_enter)
        return true;
#endif
    return nr == SYS_epoll_wait || nr == SYS_epoll_pwait || nr == SYS_poll || nr == SYS_ppoll;
}

/* Wait (bounded) until the loop run by thread `tid` is in step 4 *and*
 * that thread is blocked in the backend's wait, so what the caller does
 * next happens while the loop sleeps, not just before it does. Returns
 * false at the liveness deadline, with what it last saw in `what` (safe
 * on any thread: it asserts nothing). */
static inline bool wait_blocked_in_backend(const tern_loop *loop, pid_t tid, char *what,
                                           size_t what_len)
{
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (!(tern__loop_step(loop) == 4 && thread_in_backend_wait(tid, what, what_len))) {
        if (mono_ns() > end)
            return false;
        sched_yield();
    }
    return true;
}

static inline bool wait_for_flag(atomic_bool *flag)
{
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (!atomic_load(flag)) {
        if (mono_ns() > end)
            return false;
        sleep_ns(50000);
    }
    return true;
}

/* Descriptors open in this process, to prove a loop closes its own. */
static inline int count_open_fds(void)
{
    int n = proc_open_fds();
    cr_assert_geq(n, 0, "cannot read /proc/self/fd");
    return n;
}

#ifdef TERN_LIBKQUEUE
/* libkqueue's own export for deterministic teardown (not in its header):
 * returns once its monitoring thread has freed every kqueue closed so far. */
void libkqueue_drain_pending_close(void);
#endif

/*
 * The open descriptors, counted once every loop freed so far has really
 * let go of its own: libkqueue closes a kqueue's descriptors on its
 * monitoring thread after close() returned, so under it the count is
 * taken after that thread acknowledged the closes. Elsewhere close() is
 * the end of it.
 */
static inline int count_open_fds_settled(void)
{
#ifdef TERN_LIBKQUEUE
    libkqueue_drain_pending_close();
#endif
    return count_open_fds();
}

/*
 * Create and free one loop on backend, so what a backend keeps for the
 * whole process (libkqueue's monitoring thread and its descriptors) exists
 * before a test counts descriptors.
 */
static inline void backend_warm_up(const char *backend)
{
    loop_free_clean(loop_new_backend(backend));
}

/* Whether backend is kqueue emulated by libkqueue (see docs/testing.md for
 * what it does not emulate faithfully). */
static inline bool backend_is_libkqueue(const char *backend)
{
#ifdef TERN_LIBKQUEUE
    return backend != NULL && strcmp(backend, "kqueue") == 0;
#else
    (void)backend;
    return false;
#endif
}

static inline bool fd_readable_now(int fd, int timeout_ms)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };
    int rc;
    do {
        rc = poll(&p, 1, timeout_ms);
    } while (rc < 0 && errno == EINTR);
    return rc == 1 && (p.revents & POLLIN);
}

static inline void make_pipe(int fds[2])
{
    cr_assert_eq(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
}

static inline void make_socketpair(int fds[2])
{
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
}

static inline void write_byte(int fd)
{
    char c = 'x';
    cr_assert_eq(write(fd, &c, 1), 1);
}

static inline size_t drain_fd(int fd)
{
    char buf[4096];
    size_t total = 0;
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        total += (size_t)n;
    return total;
}

/* Criterion parameters: one per backend built into the library. The
 * parameter is an index into tern__backend_names, since criterion may
 * hand parameters to a separate process where pointers would not hold. */
static inline size_t backend_count(void)
{
    size_t n = 0;
    while (tern__backend_names[n] != NULL)
        n++;
    return n;
}

#define BACKEND_PARAMS_MAX 8

/*
 * The backends BACKEND_TESTs run on: every one built, or only the one
 * named by TERN_TEST_BACKEND (CI runs the conformance suite once more on
 * its libkqueue build with TERN_TEST_BACKEND=kqueue, rather than repeating
 * epoll and poll there), less one named by TERN_TEST_SKIP_BACKEND (the
 * valgrind run skips io_uring: valgrind cannot follow what the kernel
 * completes through the ring). Fills idx with indices into
 * tern__backend_names.
 */
static inline bool backend_selected(const char *name)
{
    const char *only = getenv("TERN_TEST_BACKEND");
    const char *skip = getenv("TERN_TEST_SKIP_BACKEND");
    return (only == NULL || strcmp(only, name) == 0) && (skip == NULL || strcmp(skip, name) != 0);
}

static inline size_t backend_params(int *idx, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; tern__backend_names[i] != NULL && n < max; i++)
        if (backend_selected(tern__backend_names[i]))
            idx[n++] = (int)i;
    return n;
}

/*
 * BACKEND_TEST(suite, name) { ...body using `backend`... } defines a test
 * that criterion runs once per backend built, as suite/name with the
 * backend's index as the parameter.
 */
#define BACKEND_TEST(suite, name)                                                      \
    static void suite##_##name##_body(const char *backend);                           \
    ParameterizedTestParameters(suite, name)                                           \
    {                                                                                  \
        static int idx[BACKEND_PARAMS_MAX];                                            \
        size_t n = backend_params(idx, BACKEND_PARAMS_MAX);                            \
        return cr_make_param_array(int, idx, n);                                       \
    }                                                                                  \
    ParameterizedTest(int *ix, suite, name, .timeout = TEST_TIMEOUT)                  \
    {                                                                                  \
        cr_log_info("backend %s", tern__backend_names[*ix]);                           \
        suite##_##name##_body(tern__backend_names[*ix]);                               \
    }                                                                                  \
    static void suite##_##name##_body(const char *backend)

#endif
