/*
 * A UDP socket's receive at two edges (include/tern/udp.h): a receive the
 * kernel answers with EAGAIN (the fault seam, backends/fault.h) ends the
 * batch quietly, and the datagram still waiting arrives on the next
 * report, once; a socket closed before the dispatch that would tell its
 * receiver that receiving ended (a watcher the backend refused to widen,
 * as in udp_paths_test) tells nothing more: the queued send completes
 * once, the close callback runs once, the receiver hears no error.
 */
#include "net_paths_helpers.h"
#include "tested_backend.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

static struct sockaddr_storage addr(const char *host, unsigned p)
{
    struct sockaddr_storage ss;
    cr_assert_eq(tern_sockaddr_parse(host, p, &ss), 0);
    return ss;
}
#define SA(ss) ((const struct sockaddr *)&(ss))

static tern_id bind_ok(tern_loop *loop)
{
    tern_id id = 0;
    cr_assert_eq(tern_udp_bind(loop, "127.0.0.1", 0, 0, &id), 0);
    return id;
}

static struct sockaddr_storage where(tern_loop *loop, tern_id id)
{
    unsigned p = 0;
    cr_assert_eq(tern_udp_port(loop, id, &p), 0);
    return addr("127.0.0.1", p);
}

struct rx {
    atomic_uint n, errors;
    int status;
    char first;
};

static void rx_cb(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                  const struct sockaddr *from, unsigned flags, void *arg)
{
    (void)loop, (void)id, (void)from, (void)flags;
    struct rx *r = arg;
    if (status < 0) {
        r->status = status;
        atomic_fetch_add(&r->errors, 1);
        return;
    }
    r->first = len > 0 ? ((const char *)data)[0] : 0;
    atomic_fetch_add(&r->n, 1);
}

static void count_cb(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id, (void)status;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

static void close_count(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

Test(udp_edges, a_receive_answered_eagain_ends_quietly_and_the_datagram_comes_next,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    tern_id a = bind_ok(loop);
    struct sockaddr_storage to = where(loop, a);
    static struct rx r;
    cr_assert_eq(tern_udp_recv_start(loop, a, 0, rx_cb, &r), 0);
    /* Sent from outside tern, so the only UDP system call the seam counts
     * is the receive's. */
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(s, 0);
    cr_assert_eq(sendto(s, "x", 1, 0, SA(to), sizeof(struct sockaddr_in)), 1);
    cr_assert(fd_readable_now(tern_udp_fd(loop, a), 1000), "the datagram never arrived");
    tern__fault_net_errno(-EAGAIN);
    tern__fault_arm(TERN__FAULT_NET, 1);
    /* Readiness is seen in one turn's step 4 and received in the next's
     * step 2. */
    for (int i = 0; i < 10 && !tern__fault_fired(); i++)
        tern_loop_run_once(loop, 0);
    bool fired = tern__fault_fired();
    fault_off();
    cr_assert(fired, "the receive was not refused: the test proves nothing");
    cr_assert_eq(atomic_load(&r.n), 0u, "the refused receive delivered");
    cr_assert_eq(atomic_load(&r.errors), 0u, "EAGAIN was told: %d", r.status);
    cr_assert(run_until_count(loop, &r.n, 1, 10 * (int64_t)MS, 500),
              "the datagram left waiting never arrived");
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&r.n), 1u);
    cr_assert_eq(r.first, 'x');
    cr_assert_eq(atomic_load(&r.errors), 0u);
    close(s);
    cr_assert_eq(tern_udp_close(loop, a), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}

Test(udp_edges, closed_before_the_dispatch_that_owed_a_receive_error_tells_nothing_more,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_epoll_or_skip();
    tern_id a = bind_ok(loop), b = bind_ok(loop);
    struct sockaddr_storage to = where(loop, b);
    static struct rx ra;
    cr_assert_eq(tern_udp_recv_start(loop, a, 0, rx_cb, &ra), 0);
    /* epoll loses the registration of a replaced descriptor: the send's
     * widening to TERN_WRITABLE is refused (udp_paths_test). */
    int fd = tern_udp_fd(loop, a);
    cr_assert_geq(fd, 0);
    int other = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(other, 0);
    cr_assert_eq(dup2(other, fd), fd);
    cr_assert_eq(close(other), 0);
    atomic_uint sent = 0, closed = 0;
    tern_buf buf = {"1", 1};
    tern__fault_net_errno(-EAGAIN);
    tern__fault_arm(TERN__FAULT_NET, 1);
    cr_assert_eq(tern_udp_send(loop, a, &buf, 1, SA(to), count_cb, &sent), 0);
    bool fired = tern__fault_fired();
    fault_off();
    cr_assert(fired, "the send was not refused: the test proves nothing");
    cr_assert_eq(tern_udp_on_close(loop, a, close_count, &closed), 0);
    cr_assert_eq(tern_udp_close(loop, a), 0);
    cr_assert(run_until_count(loop, &closed, 1, 10 * (int64_t)MS, 500));
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&sent), 1u, "the send completed %u times", atomic_load(&sent));
    cr_assert_eq(atomic_load(&closed), 1u);
    cr_assert_eq(atomic_load(&ra.errors), 0u, "a closed socket's receiver was told %d",
                 ra.status);
    cr_assert_eq(atomic_load(&ra.n), 0u);
    cr_assert_eq(tern_udp_close(loop, b), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}
