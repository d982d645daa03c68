/*
 * Every public call that adds an operation to a loop, as a table the tests
 * of refusals walk (full_loop_test: refused at max_operations;
 * fault_calls_test: refused by an injected failure). Each entry makes its
 * call on loop L and says whether it wrote an id; a refused call must not.
 * Any callback it registers counts into `called`, which a refused call must
 * never move. The test opens pipe_fd before the first call.
 */
#ifndef TERN_TEST_ADDING_CALLS_H
#define TERN_TEST_ADDING_CALLS_H

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/socket.h>

#include "tern.h"
#include "tern/admission.h"
#include "tern/batch.h"
#include "tern/fs.h"
#include "tern/net.h"
#include "tern/process.h"
#include "tern/udp.h"
#include "tern/wait.h"
#include "tern/watch.h"

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

/* X(name, call with loop L): each adds one operation (or more) when it is
 * accepted. */
#define ADDING_CALLS(X)                                                                        \
    X(post, tern_post(L, post_fn, NULL))                                                       \
    X(defer, tern_defer(L, post_fn, NULL))                                                     \
    X(timer_start, tern_timer_start(L, 1000, 0, any_cb, NULL, &id))                            \
    X(submit, tern_submit(L, TERN_BOUNDED, work, any_cb, NULL, &id))                           \
    X(submit_long, tern_submit(L, TERN_LONG, work, any_cb, NULL, &id))                         \
    X(submit_with, tern_submit_with(L, TERN_BOUNDED, work, any_cb, NULL, NULL, &id))           \
    X(submit_batch, tern_submit_batch(L, TERN_BOUNDED, work, any_cb, args, 2, NULL, ids))      \
    X(wait_call, tern_wait_call(L, work, any_cb, NULL, NULL, &id))                             \
    X(wait_fd, tern_wait_fd(L, pipe_fd[0], any_cb, NULL, NULL, &id))                           \
    X(resolve_with, tern_resolve_with(L, "localhost", NULL, NULL, any_cb, NULL, NULL, &id))    \
    X(resolve_addr, tern_resolve_addr(L, (struct sockaddr *)&sin, 0, any_cb, NULL, NULL, &id)) \
    X(io_start, tern_io_start(L, pipe_fd[0], TERN_READABLE, any_cb, NULL, &id))                \
    X(signal_start, tern_signal_start(L, SIGUSR2, any_cb, NULL, &id))                          \
    X(hook_start, tern_hook_start(L, TERN_HOOK_CHECK, any_cb, NULL, &id))                      \
    X(watch_start, tern_watch_start(L, "/", 1000000000, any_cb, NULL, &id))                    \
    X(udp_bind, tern_udp_bind(L, "127.0.0.1", 0, 0, &id))                                      \
    X(tcp_listen, tern_tcp_listen(L, "127.0.0.1", 0, 8, 0, any_cb, NULL, &id))                 \
    X(tcp_listen_name,                                                                         \
      tern_tcp_listen_name(L, "localhost", 0, 8, 0, 0, any_cb, any_cb, NULL, &id))             \
    X(tcp_connect, tern_tcp_connect(L, "127.0.0.1", 9, 0, any_cb, NULL, &id))                  \
    X(unix_connect, tern_unix_connect(L, "/nonexistent/tern", any_cb, NULL, &id))              \
    X(fs_open, tern_fs_open(L, "/", O_RDONLY, 0, NULL, any_cb, NULL, &id))

struct call {
    const char *name;
    int (*call)(tern_loop *L, bool *wrote);
};

#define DEFINE_CALL(name, expr)                                                                  \
    static int call_##name(tern_loop *L, bool *wrote)                                    \
    {                                                                                            \
        tern_id id = 0, ids[2] = {0, 0};                                                         \
        void *args[2] = {NULL, NULL};                                                            \
        struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(9),                   \
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};                    \
        int rc = (expr);                                                                         \
        (void)args, (void)sin;                                                                   \
        *wrote = id != 0 || ids[0] != 0 || ids[1] != 0;                                  \
        return rc;                                                                               \
    }
ADDING_CALLS(DEFINE_CALL)

#define ROW(name, expr) {#name, call_##name},
static const struct call calls[] = {ADDING_CALLS(ROW)};
#define N_CALLS (sizeof calls / sizeof calls[0])

#endif
