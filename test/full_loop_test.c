/*
 * A loop at max_operations (tern.h, tern_loop_options): every call that
 * would add an operation returns -EAGAIN and adds nothing — no callback
 * ever runs for it, a descriptor handed in is left as it was (its flags
 * too), and the loop ends as soon as the one operation that filled it is
 * gone. Then, with room again, the same kind of call is accepted.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
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

#define TEST_TIMEOUT 60

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

/* X(name, call with loop L): each would add one operation (or more). */
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
    int (*call)(tern_loop *L);
};

#define DEFINE_CALL(name, expr)                                                                  \
    static int call_##name(tern_loop *L)                                                         \
    {                                                                                            \
        tern_id id = 0, ids[2] = {0, 0};                                                         \
        void *args[2] = {NULL, NULL};                                                            \
        struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(9),                   \
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};                    \
        int rc = (expr);                                                                         \
        (void)args, (void)sin;                                                                   \
        cr_expect(id == 0 && ids[0] == 0 && ids[1] == 0, #name ": an id was written");           \
        return rc;                                                                               \
    }
ADDING_CALLS(DEFINE_CALL)

#define ROW(name, expr) {#name, call_##name},
static const struct call calls[] = {ADDING_CALLS(ROW)};

static void on_filler(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id, (void)arg;
}

Test(full_loop, every_adding_call_is_refused_and_adds_nothing, .timeout = TEST_TIMEOUT)
{
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.max_operations = 1;
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, &o), 0);
    cr_assert_eq(pipe(pipe_fd), 0);

    tern_id filler = 0;
    cr_assert_eq(tern_timer_start(loop, 1000, 0, on_filler, NULL, &filler), 0);
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        int rc = calls[i].call(loop);
        cr_expect_eq(rc, -EAGAIN, "%s at max_operations returned %d (%s)", calls[i].name, rc,
                     rc < 0 ? strerror(-rc) : "accepted");
    }

    /* An address that can never bind is its own error even at the limit:
     * a retryable -EAGAIN would send the caller round for ever. */
    tern_id udp = 0;
    cr_assert_eq(tern_udp_bind(loop, "not-an-address", 0, 0, &udp), -EINVAL);
    cr_assert_eq(tern_udp_bind(loop, "127.0.0.1", 0, TERN_UDP_IPV6ONLY, &udp), -EINVAL);
    cr_assert_eq(udp, 0);

    /* A stream handed in is refused and left as it was, flags included. */
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    int fl = fcntl(sv[0], F_GETFL), fdfl = fcntl(sv[0], F_GETFD);
    tern_id stream = 0;
    cr_assert_eq(tern_stream_open(loop, sv[0], &stream), -EAGAIN);
    cr_assert_eq(stream, 0);
    cr_assert_eq(fcntl(sv[0], F_GETFL), fl, "the refused descriptor's status flags changed");
    cr_assert_eq(fcntl(sv[0], F_GETFD), fdfl, "the refused descriptor's descriptor flags changed");
    cr_assert_eq(write(sv[1], "x", 1), 1, "the refused descriptor was closed");
    char c;
    cr_assert_eq(read(sv[0], &c, 1), 1);

    /* Only the filler is live: the loop ends with it, and nothing refused ran. */
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(called, 0, "%d refused operations called back", called);

    /* With room again, an adding call is accepted and completes. */
    cr_assert_eq(tern_post(loop, post_fn, NULL), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(called, 1);
    tern_loop_free(loop);
    close(sv[0]);
    close(sv[1]);
    close(pipe_fd[0]);
    close(pipe_fd[1]);
}
