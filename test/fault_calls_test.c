/*
 * The fault walk over every call that adds an operation (backends/fault.h):
 * on a fresh loop, the nth allocation, thread or descriptor creation the
 * call makes fails, for n = 1, 2, ... until the call makes no more. Each
 * injected failure must come back from the call as -ENOMEM, -EAGAIN or
 * -EMFILE, with no id written, nothing left live (the loop's live
 * operations are back to what they were), no callback ever run for it,
 * and the loop still usable: a post then runs. The walk must inject at
 * least once, which proves the call reaches the seam.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tern.h"
#include "tern/admission.h"
#include "tern/batch.h"
#include "tern/fs.h"
#include "tern/net.h"
#include "tern/process.h"
#include "tern/udp.h"
#include "tern/wait.h"
#include "tern/watch.h"
#include "testing.h"

#define TEST_TIMEOUT 120
#define MAX_STEPS 200 /* a walk longer than this has lost its way */

static int called;
static void *work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}
static void counted(void) { called++; }
static void *const any_cb = (void *)counted;
static void post_fn(tern_loop *loop, void *arg)
{
    (void)loop, (void)arg;
    called++;
}

static int pipe_fd[2];

/* X(name, call with loop L): each adds one operation (or more). */
#define ADDING_CALLS(X)                                                                          \
    X(post, tern_post(L, post_fn, NULL))                                                         \
    X(defer, tern_defer(L, post_fn, NULL))                                                       \
    X(timer_start, tern_timer_start(L, 1000, 0, any_cb, NULL, &id))                              \
    X(submit, tern_submit(L, TERN_BOUNDED, work, any_cb, NULL, &id))                             \
    X(submit_long, tern_submit(L, TERN_LONG, work, any_cb, NULL, &id))                           \
    X(submit_with, tern_submit_with(L, TERN_BOUNDED, work, any_cb, NULL, NULL, &id))             \
    X(submit_batch, tern_submit_batch(L, TERN_BOUNDED, work, any_cb, args, 2, NULL, ids))        \
    X(wait_call, tern_wait_call(L, work, any_cb, NULL, NULL, &id))                               \
    X(wait_fd, tern_wait_fd(L, pipe_fd[0], any_cb, NULL, NULL, &id))                             \
    X(resolve_with, tern_resolve_with(L, "localhost", NULL, NULL, any_cb, NULL, NULL, &id))      \
    X(resolve_addr, tern_resolve_addr(L, (struct sockaddr *)&sin, 0, any_cb, NULL, NULL, &id))   \
    X(io_start, tern_io_start(L, pipe_fd[0], TERN_READABLE, any_cb, NULL, &id))                  \
    X(signal_start, tern_signal_start(L, SIGUSR2, any_cb, NULL, &id))                            \
    X(hook_start, tern_hook_start(L, TERN_HOOK_CHECK, any_cb, NULL, &id))                        \
    X(watch_start, tern_watch_start(L, "/", 1000000000, any_cb, NULL, &id))                      \
    X(udp_bind, tern_udp_bind(L, "127.0.0.1", 0, 0, &id))                                        \
    X(tcp_listen, tern_tcp_listen(L, "127.0.0.1", 0, 8, 0, any_cb, NULL, &id))                   \
    X(tcp_listen_name, tern_tcp_listen_name(L, "localhost", 0, 8, 0, 0, any_cb, any_cb, NULL, &id)) \
    X(tcp_connect, tern_tcp_connect(L, "127.0.0.1", 9, 0, any_cb, NULL, &id))                    \
    X(unix_connect, tern_unix_connect(L, "/nonexistent/tern", any_cb, NULL, &id))                \
    X(fs_open, tern_fs_open(L, "/", O_RDONLY, 0, NULL, any_cb, NULL, &id))

struct call {
    const char *name;
    int (*call)(tern_loop *L, bool *wrote);
};

#define DEFINE_CALL(name, expr)                                                                  \
    static int call_##name(tern_loop *L, bool *wrote)                                                         \
    {                                                                                            \
        tern_id id = 0, ids[2] = {0, 0};                                                         \
        void *args[2] = {NULL, NULL};                                                            \
        struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(9),                   \
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};                    \
        int rc = (expr);                                                                         \
        (void)args, (void)sin;                                                                   \
        *wrote = id != 0 || ids[0] != 0 || ids[1] != 0;           \
        return rc;                                                                               \
    }
ADDING_CALLS(DEFINE_CALL)

#define ROW(name, expr) {#name, call_##name},
static const struct call calls[] = {ADDING_CALLS(ROW)};
#define N_CALLS (sizeof calls / sizeof calls[0])

static unsigned live(tern_loop *loop)
{
    tern_loop_stats s;
    tern_loop_stats_read(loop, &s, sizeof s);
    return s.live_operations;
}

static size_t call_index[N_CALLS];

ParameterizedTestParameters(fault_calls, walk)
{
    for (size_t i = 0; i < N_CALLS; i++)
        call_index[i] = i;
    return cr_make_param_array(size_t, call_index, N_CALLS);
}

ParameterizedTest(size_t *i, fault_calls, walk, .timeout = TEST_TIMEOUT)
{
    const struct call *c = &calls[*i];
    cr_assert_eq(pipe(pipe_fd), 0);
    unsigned injected = 0;
    uint64_t n;
    for (n = 1; n <= MAX_STEPS; n++) {
        tern_loop *loop = NULL;
        cr_assert_eq(tern_loop_new(&loop, NULL), 0);
        unsigned before = live(loop);
        called = 0;
        bool wrote = false;
        tern__fault_arm(TERN__FAULT_ALLOC | TERN__FAULT_THREAD | TERN__FAULT_FD, n);
        int rc = c->call(loop, &wrote);
        bool fired = tern__fault_fired();
        tern__fault_arm(0, 0);
        if (!fired) {
            cr_assert_geq(rc, 0, "%s returned %d with no failure injected", c->name, rc);
            tern_loop_free(loop); /* what was accepted is cancelled and freed */
            break;
        }
        injected++;
        if (rc >= 0) {
            /* The failure hit something the call recovers from (a cache,
             * a retry): it must then have worked. */
            tern_loop_free(loop);
            continue;
        }
        cr_assert(rc == -ENOMEM || rc == -EAGAIN || rc == -EMFILE,
                  "%s, failure %llu: returned %d (%s)", c->name, (unsigned long long)n, rc,
                  strerror(-rc));
        cr_assert(!wrote, "%s, failure %llu: refused, but an id was written", c->name,
                  (unsigned long long)n);
        cr_assert_eq(live(loop), before, "%s, failure %llu: %u operations left live", c->name,
                     (unsigned long long)n, live(loop) - before);
        cr_assert_eq(tern_post(loop, post_fn, NULL), 0, "%s, failure %llu: the loop is unusable",
                     c->name, (unsigned long long)n);
        cr_assert_eq(tern_loop_run(loop), 0);
        cr_assert_eq(called, 1, "%s, failure %llu: %d callbacks ran (only the post may)", c->name,
                     (unsigned long long)n, called);
        tern_loop_free(loop);
    }
    cr_assert_leq(n, MAX_STEPS, "%s: the walk did not end", c->name);
    cr_assert_gt(injected, 0, "%s reached no checked call", c->name);
    close(pipe_fd[0]);
    close(pipe_fd[1]);
}
