/*
 * Ids that name nothing the call can act on (net.h: "a stale id is
 * -ENOENT"): for every call that takes a handle's id, an id never issued,
 * the id of a handle already closed and freed, and the id of a live handle
 * of another kind each return -ENOENT, and change nothing: the live
 * handles passed in (a timer, a UDP socket and a stream) still work
 * afterwards, and the loop still ends with nothing live.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tern.h"
#include "tern/net.h"
#include "tern/process.h"
#include "tern/udp.h"
#include "tern/watch.h"

#define TEST_TIMEOUT 60

/* Callbacks of every shape the calls below take; none is ever called. */
static void never(void) { cr_assert_fail("a refused call's callback ran"); }
static void *const any_cb = (void *)never;

static char byte = 'x';
static tern_buf one_buf = {.base = &byte, .len = 1};

/*
 * X(name, call with id I and loop L). Every other argument is one the call
 * accepts for a live handle of its kind.
 */
#define STREAM_CALLS(X)                                                                          \
    X(stream_close, tern_stream_close(L, I))                                                     \
    X(stream_fd, tern_stream_fd(L, I))                                                           \
    X(stream_on_close, tern_stream_on_close(L, I, any_cb, NULL))                                 \
    X(read_start, tern_stream_read_start(L, I, any_cb, NULL))                                    \
    X(read_start_alloc, tern_stream_read_start_alloc(L, I, any_cb, any_cb, NULL))                \
    X(read_stop, tern_stream_read_stop(L, I))                                                    \
    X(high_water, tern_stream_set_high_water(L, I, 1024, any_cb, NULL))                          \
    X(shutdown, tern_stream_shutdown(L, I, any_cb, NULL))                                        \
    X(try_write, tern_stream_try_write(L, I, &one_buf, 1))                                       \
    X(write, tern_stream_write(L, I, &one_buf, 1, any_cb, NULL))                                 \
    X(write_queue, tern_stream_write_queue_size(L, I, &size))                                    \
    X(tcp_keepalive, tern_tcp_keepalive(L, I, true, 1, 1))                                       \
    X(tcp_nodelay, tern_tcp_nodelay(L, I, true))                                                 \
    X(tcp_port, tern_tcp_port(L, I, &port))                                                      \
    X(tty_set_mode, tern_tty_set_mode(L, I, 0))                                                  \
    X(tty_winsize, tern_tty_winsize(L, I, &port, &port))                                         \
    X(peer_cred, tern_unix_peer_cred(L, I, &cred))                                               \
    X(take_fd, tern_unix_take_fd(L, I))                                                          \
    X(write_fds, tern_unix_write_fds(L, I, &one_buf, 1, &fd0, 1, any_cb, NULL))

#define UDP_CALLS(X)                                                                             \
    X(udp_close, tern_udp_close(L, I))                                                           \
    X(udp_connect, tern_udp_connect(L, I, (struct sockaddr *)&sin))                              \
    X(udp_fd, tern_udp_fd(L, I))                                                                 \
    X(udp_membership, tern_udp_membership(L, I, "239.1.2.3", NULL, true))                        \
    X(udp_mcast_if, tern_udp_multicast_interface(L, I, "127.0.0.1"))                             \
    X(udp_on_close, tern_udp_on_close(L, I, any_cb, NULL))                                       \
    X(udp_port, tern_udp_port(L, I, &port))                                                      \
    X(udp_recv_start, tern_udp_recv_start(L, I, 64, any_cb, NULL))                               \
    X(udp_recv_stop, tern_udp_recv_stop(L, I))                                                   \
    X(udp_send, tern_udp_send(L, I, &one_buf, 1, (struct sockaddr *)&sin, any_cb, NULL))         \
    X(udp_send_queue, tern_udp_send_queue_size(L, I, &size, &size))                              \
    X(udp_set, tern_udp_set(L, I, TERN_UDP_BROADCAST, 1))                                        \
    X(udp_high_water, tern_udp_set_high_water(L, I, 64, any_cb, NULL))

#define OTHER_CALLS(X)                                                                           \
    X(process_kill, tern_process_kill(L, I, SIGTERM))                                            \
    X(process_pid, tern_process_pid(L, I, &pid))                                                 \
    X(watch_stop, tern_watch_stop(L, I))                                                         \
    X(signal_stop, tern_signal_stop(L, I))                                                       \
    X(hook_stop, tern_hook_stop(L, I))                                                           \
    X(io_modify, tern_io_modify(L, I, TERN_READABLE))                                            \
    X(io_stop, tern_io_stop(L, I))                                                               \
    X(owner_close, tern_owner_close(L, I))

struct call {
    const char *name;
    int (*call)(tern_loop *L, tern_id I);
};

#define DEFINE_CALL(name, expr)                                                                  \
    static int call_##name(tern_loop *L, tern_id I)                                              \
    {                                                                                            \
        size_t size = 0;                                                                         \
        unsigned port = 0;                                                                       \
        int pid = 0, fd0 = 0;                                                                    \
        tern_unix_cred cred;                                                                     \
        struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(9),                   \
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};                    \
        (void)size, (void)port, (void)pid, (void)fd0, (void)cred, (void)sin;                     \
        return (expr);                                                                           \
    }
STREAM_CALLS(DEFINE_CALL)
UDP_CALLS(DEFINE_CALL)
OTHER_CALLS(DEFINE_CALL)

#define ROW(name, expr) {#name, call_##name},
static const struct call stream_calls[] = {STREAM_CALLS(ROW)};
static const struct call udp_calls[] = {UDP_CALLS(ROW)};
static const struct call other_calls[] = {OTHER_CALLS(ROW)};

static int timer_fired;
static void on_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id, (void)arg;
    timer_fired++;
}

static int udp_closed, stream_closed;
static void on_udp_close(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id, (void)arg;
    udp_closed++;
}

static void on_stream_close(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id, (void)arg;
    stream_closed++;
}

/* A UDP socket opened, closed and freed: its id is stale. */
static tern_id stale_udp(tern_loop *loop)
{
    tern_id id = 0;
    cr_assert_eq(tern_udp_bind(loop, "127.0.0.1", 0, 0, &id), 0);
    cr_assert_eq(tern_udp_close(loop, id), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    return id;
}

static void refuse_all(tern_loop *loop, const struct call *calls, size_t n, tern_id id,
                       const char *what)
{
    for (size_t i = 0; i < n; i++) {
        int rc = calls[i].call(loop, id);
        cr_expect_eq(rc, -ENOENT, "%s with %s returned %d (%s), not -ENOENT", calls[i].name, what,
                     rc, rc < 0 ? strerror(-rc) : "accepted");
    }
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

Test(stale_id, every_handle_call_refuses_an_id_it_cannot_act_on, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    tern_id stale = stale_udp(loop);

    tern_id timer = 0, udp = 0;
    cr_assert_eq(tern_timer_start(loop, 1000000, 0, on_timer, NULL, &timer), 0);
    cr_assert_eq(tern_udp_bind(loop, "127.0.0.1", 0, 0, &udp), 0);
    cr_assert_eq(tern_udp_on_close(loop, udp, on_udp_close, NULL), 0);
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    tern_id stream = 0;
    cr_assert_eq(tern_stream_open(loop, sv[0], &stream), 0);
    cr_assert_eq(tern_stream_on_close(loop, stream, on_stream_close, NULL), 0);
    tern_id never_issued = timer ^ (UINT64_C(1) << 62);

    refuse_all(loop, stream_calls, N(stream_calls), never_issued, "an id never issued");
    refuse_all(loop, stream_calls, N(stream_calls), stale, "a freed UDP socket's id");
    refuse_all(loop, stream_calls, N(stream_calls), udp, "a live UDP socket's id");
    refuse_all(loop, stream_calls, N(stream_calls), timer, "a live timer's id");
    refuse_all(loop, udp_calls, N(udp_calls), never_issued, "an id never issued");
    refuse_all(loop, udp_calls, N(udp_calls), stale, "a freed UDP socket's id");
    refuse_all(loop, udp_calls, N(udp_calls), timer, "a live timer's id");
    refuse_all(loop, udp_calls, N(udp_calls), stream, "a live stream's id");
    refuse_all(loop, other_calls, N(other_calls), never_issued, "an id never issued");
    refuse_all(loop, other_calls, N(other_calls), stale, "a freed UDP socket's id");
    refuse_all(loop, other_calls, N(other_calls), timer, "a live timer's id");
    refuse_all(loop, other_calls, N(other_calls), udp, "a live UDP socket's id");
    refuse_all(loop, other_calls, N(other_calls), stream, "a live stream's id");

    /* Nothing changed: both handles still work, and close once. */
    unsigned port = 0;
    cr_assert_eq(tern_udp_port(loop, udp, &port), 0);
    cr_assert_neq(port, 0u);
    cr_assert_eq(tern_stream_fd(loop, stream), sv[0]);
    cr_assert_eq(tern_udp_close(loop, udp), 0);
    cr_assert_eq(tern_stream_close(loop, stream), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(timer_fired, 1);
    cr_assert_eq(udp_closed, 1);
    cr_assert_eq(stream_closed, 1);
    close(sv[1]);
    tern_loop_free(loop);
}
