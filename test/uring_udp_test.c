/*
 * The io_uring backend's UDP receives and sends (TERN__DO_UDP_RECV and
 * TERN__DO_UDP_SEND): with every receive or send system call denied on
 * tern's socket, datagrams still arrive in order, each with its source
 * address, an empty one too, and sends complete once each, in order; a
 * datagram longer than the receive size (or than a buffer's room) arrives
 * cut and flagged as on readiness; a datagram that fails fails alone; a
 * stop keeps what the kernel took for the restart, in order; a receive
 * error is told and receiving goes on; a close or a loop free with
 * receives and sends in the kernel completes every send once and leaks
 * nothing; a queue that takes no entry refuses a receive's start and
 * makes a send go by the socket's own call; a kernel without the probe
 * or the buffer ring, or a receive size the buffers cannot hold, goes by
 * readiness.
 */
#include "uring_helpers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/utsname.h>

#include "backend.h"

#ifdef TERN_HAVE_IO_URING

/* A loop on io_uring whose kernel has what UDP's ring path needs (6.0),
 * or the test is skipped. */
static tern_loop *udp_loop(void)
{
    struct utsname u;
    int major = 0, minor = 0;
    if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &major, &minor) != 2 || major < 6)
        cr_skip_test("UDP through the ring needs a 6.0 kernel");
    return uring_loop();
}

/* Every way tern could receive on, or send from, socket fd by itself. */
static void deny_receives(int fd)
{
    static const long nrs[] = {__NR_recvmsg, __NR_recvmmsg, __NR_recvfrom, __NR_read};
    deny_syscalls(nrs, sizeof nrs / sizeof nrs[0], fd, EPERM);
}

static void deny_sends(int fd)
{
    static const long nrs[] = {__NR_sendmsg, __NR_sendmmsg, __NR_sendto, __NR_write};
    deny_syscalls(nrs, sizeof nrs / sizeof nrs[0], fd, EPERM);
}

/* A plain loopback UDP socket of the test's, and its address. */
static int raw_socket(struct sockaddr_in *a)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    *a = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof *a;
    cr_assert_eq(bind(fd, (struct sockaddr *)a, sizeof *a), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)a, &len), 0);
    return fd;
}

/* tern's socket on the loopback, and its address. */
static tern_id tern_socket(tern_loop *loop, struct sockaddr_in *a)
{
    tern_id id;
    cr_assert_eq(tern_udp_bind(loop, "127.0.0.1", 0, 0, &id), 0);
    unsigned port;
    cr_assert_eq(tern_udp_port(loop, id, &port), 0);
    *a = (struct sockaddr_in){.sin_family = AF_INET,
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                              .sin_port = htons((uint16_t)port)};
    return id;
}

/* One datagram from fd to a: n bytes, the first four its number. */
static void send_numbered(int fd, const struct sockaddr_in *a, uint32_t number, size_t n)
{
    static unsigned char buf[70000];
    memset(buf, (int)(number & 0xff), sizeof buf);
    memcpy(buf, &number, n < sizeof number ? n : sizeof number);
    cr_assert_eq(sendto(fd, buf, n, 0, (const struct sockaddr *)a, sizeof *a), (ssize_t)n);
}

#define GOT_MAX 512
struct got {
    atomic_uint n;
    uint32_t number[GOT_MAX];
    size_t len[GOT_MAX];
    unsigned flags[GOT_MAX];
    uint16_t port[GOT_MAX];
    int status[GOT_MAX];
    unsigned errors;
    unsigned stop_at;  /* stop receiving at this many (0: never) */
    unsigned close_at; /* close the socket at this many (0: never) */
};

static void rx_cb(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                  const struct sockaddr *from, unsigned flags, void *arg)
{
    struct got *g = arg;
    unsigned i = atomic_load(&g->n);
    cr_assert_lt(i, GOT_MAX);
    g->status[i] = status;
    if (status < 0) {
        g->errors++;
        atomic_store(&g->n, i + 1);
        return;
    }
    uint32_t number = 0;
    memcpy(&number, data, len < sizeof number ? len : sizeof number);
    g->number[i] = number;
    g->len[i] = len;
    g->flags[i] = flags;
    cr_assert_eq(from->sa_family, AF_INET);
    g->port[i] = ntohs(((const struct sockaddr_in *)from)->sin_port);
    atomic_store(&g->n, i + 1);
    if (g->stop_at != 0 && i + 1 == g->stop_at)
        cr_assert_eq(tern_udp_recv_stop(loop, id), 0);
    if (g->close_at != 0 && i + 1 == g->close_at)
        cr_assert_eq(tern_udp_close(loop, id), 0);
}

/*
 * From two senders in turn, 300 datagrams (one of them empty) arrive in
 * order, each with its sender's port and length, with every receive call
 * denied on tern's socket.
 */
Test(uring_udp, datagrams_arrive_in_order_with_their_source_through_the_ring)
{
    tern_loop *loop = udp_loop();
    struct sockaddr_in ta, a1, a2;
    tern_id id = tern_socket(loop, &ta);
    int s1 = raw_socket(&a1), s2 = raw_socket(&a2);
    deny_receives(tern_udp_fd(loop, id));
    static struct got g;
    cr_assert_eq(tern_udp_recv_start(loop, id, 2048, rx_cb, &g), 0);
    for (uint32_t i = 0; i < 300; i++) {
        send_numbered(i % 2 ? s2 : s1, &ta, i, i == 150 ? 0 : 4 + i % 100);
        if (i % 50 == 49)
            tern_loop_run_once(loop, 0);
    }
    cr_assert(run_until_count(loop, &g.n, 300, 10 * (int64_t)MS, 200), "got %u", atomic_load(&g.n));
    for (uint32_t i = 0; i < 300; i++) {
        cr_assert_eq(g.status[i], 0);
        cr_assert_eq(g.len[i], i == 150 ? 0 : 4 + i % 100, "datagram %u", i);
        if (i != 150)
            cr_assert_eq(g.number[i], i);
        cr_assert_eq(g.port[i], ntohs(i % 2 ? a2.sin_port : a1.sin_port));
        cr_assert_eq(g.flags[i], 0);
    }
    cr_assert_eq(tern_udp_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(s1);
    close(s2);
}

/*
 * Each allocation of a ring receive's start fails in turn (the backend's
 * slots and its buffers' table, the loop's table of landed datagrams): the
 * start says -ENOMEM and changes nothing, so the next start, unarmed,
 * receives through the ring as if nothing had failed.
 */
Test(uring_udp, a_receive_start_out_of_memory_changes_nothing)
{
    int first_fd = -1;
    for (uint64_t n = 1;; n++) {
        tern_loop *loop = udp_loop();
        struct sockaddr_in ta, a1;
        tern_id id = tern_socket(loop, &ta);
        int s1 = raw_socket(&a1);
        static struct got g;
        memset(&g, 0, sizeof g);
        tern__fault_arm(TERN__FAULT_ALLOC, n);
        int rc = tern_udp_recv_start(loop, id, 2048, rx_cb, &g);
        bool fired = tern__fault_fired();
        tern__fault_arm(TERN__FAULT_ALLOC, 0);
        if (fired) {
            cr_assert_eq(rc, -ENOMEM, "allocation %lu: %d", (unsigned long)n, rc);
            cr_assert_eq(tern_udp_recv_start(loop, id, 2048, rx_cb, &g), 0,
                         "allocation %lu: the failed start left something", (unsigned long)n);
        } else {
            cr_assert_eq(rc, 0);
        }
        /* Receives only through the ring: each loop's socket gets one number. */
        int fd = tern_udp_fd(loop, id);
        if (first_fd == -1) {
            first_fd = fd;
            deny_receives(fd);
        }
        cr_assert_eq(fd, first_fd, "the socket's number changed: the filter would miss it");
        send_numbered(s1, &ta, 7, 8);
        cr_assert(run_until_count(loop, &g.n, 1, 10 * (int64_t)MS, 200), "allocation %lu",
                  (unsigned long)n);
        cr_assert_eq(g.number[0], 7);
        cr_assert_eq(tern_udp_close(loop, id), 0);
        cr_assert(run_until_nothing_live(loop));
        loop_free_clean(loop);
        close(s1);
        if (!fired) {
            cr_assert_gt(n, 1, "no allocation on the ring receive's start");
            break;
        }
        cr_assert_lt(n, 50, "the walk did not end");
    }
}

/*
 * Longer than the receive size: its head, flagged TERN_UDP_TRUNCATED, as
 * on readiness; longer than a buffer's room too. A size over the room
 * receives by readiness, whole.
 */
Test(uring_udp, a_datagram_longer_than_the_size_arrives_cut_and_flagged)
{
    tern_loop *loop = udp_loop();
    struct sockaddr_in ta, a1;
    tern_id id = tern_socket(loop, &ta);
    int s1 = raw_socket(&a1);
    static struct got g;
    cr_assert_eq(tern_udp_recv_start(loop, id, 64, rx_cb, &g), 0);
    send_numbered(s1, &ta, 1, 64);
    send_numbered(s1, &ta, 2, 100);
    send_numbered(s1, &ta, 3, 20000);
    cr_assert(run_until_count(loop, &g.n, 3, 10 * (int64_t)MS, 200));
    cr_assert_eq(g.len[0], 64);
    cr_assert_eq(g.flags[0], 0);
    cr_assert_eq(g.len[1], 64);
    cr_assert_eq(g.flags[1], TERN_UDP_TRUNCATED);
    cr_assert_eq(g.len[2], 64);
    cr_assert_eq(g.flags[2], TERN_UDP_TRUNCATED);
    /* As large as the ring's buffers allow: a longer one is cut there. */
    cr_assert_eq(tern_udp_recv_start(loop, id, 16000, rx_cb, &g), 0);
    send_numbered(s1, &ta, 4, 16000);
    send_numbered(s1, &ta, 5, 20000);
    cr_assert(run_until_count(loop, &g.n, 5, 10 * (int64_t)MS, 200));
    cr_assert_eq(g.len[3], 16000);
    cr_assert_eq(g.flags[3], 0);
    cr_assert_eq(g.len[4], 16000);
    cr_assert_eq(g.flags[4], TERN_UDP_TRUNCATED);
    cr_assert_eq(g.number[4], 5);
    /* Larger than the room: by readiness, whole. */
    cr_assert_eq(tern_udp_recv_start(loop, id, 0, rx_cb, &g), 0);
    send_numbered(s1, &ta, 6, 60000);
    cr_assert(run_until_count(loop, &g.n, 6, 10 * (int64_t)MS, 200));
    cr_assert_eq(g.len[5], 60000);
    cr_assert_eq(g.flags[5], 0);
    cr_assert_eq(tern_udp_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(s1);
}

/*
 * A callback stops receiving partway through what the kernel took: the
 * rest waits, more comes meanwhile, and a restart delivers all of it in
 * order, nothing lost or twice. A restart with a size the buffers cannot
 * hold delivers what landed first, then reads by readiness.
 */
Test(uring_udp, a_stop_keeps_what_the_kernel_took_for_the_restart)
{
    tern_loop *loop = udp_loop();
    struct sockaddr_in ta, a1;
    tern_id id = tern_socket(loop, &ta);
    int s1 = raw_socket(&a1);
    static struct got g = {.stop_at = 10};
    cr_assert_eq(tern_udp_recv_start(loop, id, 512, rx_cb, &g), 0);
    for (uint32_t i = 0; i < 50; i++)
        send_numbered(s1, &ta, i, 32);
    cr_assert(run_until_count(loop, &g.n, 10, 10 * (int64_t)MS, 200));
    for (int t = 0; t < 5; t++)
        tern_loop_run_once(loop, 5 * (int64_t)MS);
    cr_assert_eq(atomic_load(&g.n), 10, "delivered while stopped");
    for (uint32_t i = 50; i < 100; i++)
        send_numbered(s1, &ta, i, 32);
    g.stop_at = 60;
    cr_assert_eq(tern_udp_recv_start(loop, id, 512, rx_cb, &g), 0);
    cr_assert(run_until_count(loop, &g.n, 60, 10 * (int64_t)MS, 200));
    tern_loop_run_once(loop, 5 * (int64_t)MS);
    cr_assert_eq(atomic_load(&g.n), 60);
    cr_assert_eq(tern_udp_recv_start(loop, id, 0, rx_cb, &g), 0);
    cr_assert(run_until_count(loop, &g.n, 100, 10 * (int64_t)MS, 200));
    for (uint32_t i = 0; i < 100; i++)
        cr_assert_eq(g.number[i], i, "datagram %u", i);
    tern_loop_run_once(loop, 5 * (int64_t)MS);
    cr_assert_eq(atomic_load(&g.n), 100, "a datagram came twice");
    cr_assert_eq(tern_udp_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(s1);
}

/*
 * A connected socket whose peer has no listener: the ring's receive ends
 * with the refusal, which is told, and receiving goes on.
 */
Test(uring_udp, a_receive_error_is_told_and_receiving_goes_on)
{
    tern_loop *loop = udp_loop();
    struct sockaddr_in ta, a1;
    tern_id id = tern_socket(loop, &ta);
    int s1 = raw_socket(&a1);
    close(s1); /* nobody listens there now */
    cr_assert_eq(tern_udp_connect(loop, id, (const struct sockaddr *)&a1), 0);
    static struct got g;
    cr_assert_eq(tern_udp_recv_start(loop, id, 2048, rx_cb, &g), 0);
    tern_loop_run_once(loop, 0);
    tern_buf b = {.base = "x", .len = 1};
    cr_assert_eq(tern_udp_send(loop, id, &b, 1, NULL, NULL, NULL), 0);
    cr_assert(run_until_count(loop, &g.n, 1, 10 * (int64_t)MS, 200));
    cr_assert_eq(g.status[0], -ECONNREFUSED);
    /* The peer is back: its datagrams arrive. */
    s1 = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert_eq(bind(s1, (struct sockaddr *)&a1, sizeof a1), 0);
    send_numbered(s1, &ta, 7, 8);
    cr_assert(run_until_count(loop, &g.n, 2, 10 * (int64_t)MS, 200));
    cr_assert_eq(g.status[1], 0);
    cr_assert_eq(g.number[1], 7);
    cr_assert_eq(tern_udp_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(s1);
}

/* Each send's callback: once, in order, with its status. */
#define SENDS_MAX 512
struct sends {
    atomic_uint called;
    unsigned order[SENDS_MAX];
    int status[SENDS_MAX];
    unsigned times[SENDS_MAX];
    unsigned tags[SENDS_MAX];
    bool closed;
    unsigned called_at_close;
};

static void sent_cb(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop;
    (void)id;
    unsigned *tag = arg;
    struct sends *s = (struct sends *)((char *)(tag - *tag) - offsetof(struct sends, tags));
    cr_assert_not(s->closed, "a send completed after the close callback");
    unsigned i = atomic_load(&s->called);
    s->order[i] = *tag;
    s->status[*tag] = status;
    s->times[*tag]++;
    atomic_store(&s->called, i + 1);
}

static void closed_cb(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    struct sends *s = arg;
    s->closed = true;
    s->called_at_close = atomic_load(&s->called);
}

static int send_one(tern_loop *loop, tern_id id, struct sends *s, unsigned i, const void *data,
                    size_t len, const struct sockaddr_in *to)
{
    static tern_buf bufs[SENDS_MAX];
    s->tags[i] = i;
    bufs[i] = (tern_buf){.base = data, .len = len};
    return tern_udp_send(loop, id, &bufs[i], 1, (const struct sockaddr *)to, sent_cb, &s->tags[i]);
}

/* Read every datagram waiting on fd; their numbers into out. */
static unsigned drain_numbers(int fd, uint32_t *out, unsigned max)
{
    unsigned n = 0;
    unsigned char buf[2048];
    ssize_t r;
    while (n < max && (r = recv(fd, buf, sizeof buf, MSG_DONTWAIT)) >= 0)
        memcpy(&out[n++], buf, sizeof(uint32_t));
    return n;
}

/*
 * With every send call denied on tern's socket, 400 datagrams go, in
 * order, each callback once with 0; one too large for UDP fails alone
 * (-EMSGSIZE) and those queued behind it in the same batch still go.
 */
Test(uring_udp, sends_complete_once_in_order_and_a_failure_fails_alone)
{
    tern_loop *loop = udp_loop();
    struct sockaddr_in ta, a1;
    tern_id id = tern_socket(loop, &ta);
    int s1 = raw_socket(&a1);
    int big = 1 << 20;
    cr_assert_eq(setsockopt(s1, SOL_SOCKET, SO_RCVBUF, &big, sizeof big), 0);
    deny_sends(tern_udp_fd(loop, id));
    static struct sends s;
    static uint32_t numbers[SENDS_MAX];
    static unsigned char huge[70000];
    unsigned n = 400;
    for (unsigned i = 0; i < n; i++) {
        numbers[i] = i;
        if (i == 100)
            cr_assert_geq(send_one(loop, id, &s, i, huge, sizeof huge, &a1), 0);
        else
            cr_assert_geq(send_one(loop, id, &s, i, &numbers[i], sizeof numbers[i], &a1), 0);
        if (i % 150 == 149)
            tern_loop_run_once(loop, 0);
    }
    static uint32_t seen[SENDS_MAX];
    unsigned got = 0;
    uint64_t give_up = mono_ns() + LIVENESS_NS;
    while (atomic_load(&s.called) < n || got < n - 1) {
        cr_assert_lt(mono_ns(), give_up, "called %u, received %u", atomic_load(&s.called), got);
        tern_loop_run_once(loop, 5 * (int64_t)MS);
        got += drain_numbers(s1, seen + got, SENDS_MAX - got);
    }
    for (unsigned i = 0; i < n; i++) {
        cr_assert_eq(s.order[i], i, "callback %u out of order", i);
        cr_assert_eq(s.times[i], 1);
        cr_assert_eq(s.status[i], i == 100 ? -EMSGSIZE : 0, "send %u: %d", i, s.status[i]);
    }
    for (unsigned i = 0; i < n - 1; i++)
        cr_assert_eq(seen[i], i < 100 ? i : i + 1, "received %u out of order", i);
    cr_assert_eq(tern_udp_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(s1);
}

/*
 * Closed with sends handed to the kernel and datagrams landed: each send
 * completes once (0 or -ECANCELED) before the close callback, the landed
 * datagrams go back, and nothing is left open. Closed from inside a
 * receive callback too.
 */
Test(uring_udp, a_close_with_receives_and_sends_in_the_kernel_loses_and_leaks_nothing)
{
    int before = count_open_fds();
    tern_loop *loop = udp_loop();
    struct sockaddr_in ta, a1;
    tern_id id = tern_socket(loop, &ta);
    int s1 = raw_socket(&a1);
    static struct got g = {.close_at = 5};
    static struct sends s;
    static uint32_t numbers[64];
    cr_assert_eq(tern_udp_recv_start(loop, id, 256, rx_cb, &g), 0);
    cr_assert_eq(tern_udp_on_close(loop, id, closed_cb, &s), 0);
    for (uint32_t i = 0; i < 40; i++)
        send_numbered(s1, &ta, i, 16);
    for (unsigned i = 0; i < 64; i++) {
        numbers[i] = i;
        cr_assert_geq(send_one(loop, id, &s, i, &numbers[i], sizeof numbers[i], &a1), 0);
    }
    cr_assert(run_until_nothing_live(loop));
    cr_assert(s.closed);
    cr_assert_eq(atomic_load(&g.n), 5, "delivered after the close");
    cr_assert_eq(s.called_at_close, 64);
    for (unsigned i = 0; i < 64; i++) {
        cr_assert_eq(s.times[i], 1);
        cr_assert(s.status[i] == 0 || s.status[i] == -ECANCELED, "send %u: %d", i, s.status[i]);
    }
    loop_free_clean(loop);
    close(s1);
    cr_assert_eq(count_open_fds_settled(), before);
}

/* Closed at once after sending: the sends are in the queue, not yet in
 * the kernel, when the cancel goes; a loop freed with them all too. */
Test(uring_udp, a_close_or_free_right_after_sending_completes_every_send_once)
{
    int before = count_open_fds();
    tern_loop *loop = udp_loop();
    struct sockaddr_in ta, a1;
    tern_id id = tern_socket(loop, &ta);
    int s1 = raw_socket(&a1);
    static struct sends s;
    static uint32_t numbers[100];
    cr_assert_eq(tern_udp_on_close(loop, id, closed_cb, &s), 0);
    for (unsigned i = 0; i < 100; i++) {
        numbers[i] = i;
        cr_assert_geq(send_one(loop, id, &s, i, &numbers[i], sizeof numbers[i], &a1), 0);
    }
    cr_assert_eq(tern_udp_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(s.called_at_close, 100);
    for (unsigned i = 0; i < 100; i++)
        cr_assert_eq(s.times[i], 1);
    /* A loop freed with a receive and sends in the kernel. */
    static struct sends s2;
    static struct got g;
    id = tern_socket(loop, &ta);
    cr_assert_eq(tern_udp_recv_start(loop, id, 256, rx_cb, &g), 0);
    send_numbered(s1, &ta, 1, 16);
    for (unsigned i = 0; i < 100; i++)
        cr_assert_geq(send_one(loop, id, &s2, i, &numbers[i], sizeof numbers[i], &a1), 0);
    tern_loop_free(loop);
    for (unsigned i = 0; i < 100; i++)
        cr_assert_eq(s2.times[i], 1);
    close(s1);
    cr_assert_eq(count_open_fds_settled(), before);
}

/*
 * Ten sockets' batches in one turn, more entries than the queue holds: a
 * batch goes to the kernel whole (the queue submitted first), so every
 * socket's datagrams still arrive in order. Then each closes while the
 * queue takes no entry: the receive's and the sends' cancels are owed,
 * and every send still completes once before its close callback.
 */
Test(uring_udp, many_batches_in_one_turn_and_owed_cancels)
{
    int before = count_open_fds();
    tern_loop *loop = udp_loop();
    struct sockaddr_in a1, ta;
    int s1 = raw_socket(&a1);
    int big = 4 << 20;
    cr_assert_eq(setsockopt(s1, SOL_SOCKET, SO_RCVBUF, &big, sizeof big), 0);
    enum { SOCKS = 10, EACH = 40 };
    static struct sends s[SOCKS];
    static uint32_t numbers[SOCKS][EACH];
    tern_id ids[SOCKS];
    for (unsigned k = 0; k < SOCKS; k++) {
        ids[k] = tern_socket(loop, &ta);
        cr_assert_eq(tern_udp_on_close(loop, ids[k], closed_cb, &s[k]), 0);
    }
    /* Queued from inside no dispatch but behind a first send each: the
     * first goes at once, the rest wait for its completion. */
    for (unsigned i = 0; i < EACH; i++)
        for (unsigned k = 0; k < SOCKS; k++) {
            numbers[k][i] = k << 16 | i;
            cr_assert_geq(
                send_one(loop, ids[k], &s[k], i, &numbers[k][i], sizeof numbers[k][i], &a1), 0);
        }
    uint64_t give_up = mono_ns() + LIVENESS_NS;
    for (unsigned k = 0; k < SOCKS; k++)
        while (atomic_load(&s[k].called) < EACH) {
            cr_assert_lt(mono_ns(), give_up);
            tern_loop_run_once(loop, 5 * (int64_t)MS);
        }
    static uint32_t seen[SOCKS * EACH];
    unsigned got = drain_numbers(s1, seen, SOCKS * EACH);
    cr_assert_eq(got, SOCKS * EACH);
    unsigned next[SOCKS] = {0};
    for (unsigned i = 0; i < got; i++) {
        unsigned k = seen[i] >> 16;
        cr_assert_eq(seen[i] & 0xffff, next[k]++, "socket %u out of order", k);
    }
    /* Sends in the kernel, a receive in the kernel, and no entry for the cancels. */
    static struct got g;
    for (unsigned k = 0; k < SOCKS; k++) {
        cr_assert_eq(tern_udp_recv_start(loop, ids[k], 256, rx_cb, &g), 0);
        for (unsigned i = 0; i < 8; i++)
            cr_assert_geq(
                send_one(loop, ids[k], &s[k], i, &numbers[k][i], sizeof numbers[k][i], &a1), 0);
        s[k].times[0] = s[k].times[1] = s[k].times[2] = s[k].times[3] = 0;
        s[k].times[4] = s[k].times[5] = s[k].times[6] = s[k].times[7] = 0;
        atomic_store(&s[k].called, 0);
    }
    tern_loop_run_once(loop, 0);
    for (unsigned k = 0; k < SOCKS; k++) {
        tern__uring_refuse_entries(2);
        cr_assert_eq(tern_udp_close(loop, ids[k]), 0);
    }
    tern__uring_refuse_entries(0);
    cr_assert(run_until_nothing_live(loop));
    for (unsigned k = 0; k < SOCKS; k++) {
        cr_assert(s[k].closed);
        for (unsigned i = 0; i < 8; i++)
            cr_assert_eq(s[k].times[i], 1, "socket %u send %u", k, i);
    }
    loop_free_clean(loop);
    close(s1);
    cr_assert_eq(count_open_fds_settled(), before);
}

/*
 * A queue that takes no entry: a receive's start is refused (-EBUSY, as a
 * stream's read_start is) and changes nothing, a send goes by the
 * socket's own call, a stop's cancel is owed; every datagram still
 * arrives and every send goes.
 */
Test(uring_udp, a_queue_that_takes_no_entry_refuses_starts_and_sends_by_itself)
{
    tern_loop *loop = udp_loop();
    struct sockaddr_in ta, a1;
    tern_id id = tern_socket(loop, &ta);
    int s1 = raw_socket(&a1);
    static struct got g;
    tern__uring_refuse_entries(1);
    cr_assert_eq(tern_udp_recv_start(loop, id, 256, rx_cb, &g), -EBUSY);
    cr_assert_eq(tern_udp_recv_start(loop, id, 256, rx_cb, &g), 0);
    send_numbered(s1, &ta, 0, 8);
    cr_assert(run_until_count(loop, &g.n, 1, 10 * (int64_t)MS, 200));
    static struct sends s;
    static uint32_t numbers[4] = {0, 1, 2, 3};
    tern__uring_refuse_entries(1);
    cr_assert_geq(send_one(loop, id, &s, 0, &numbers[0], sizeof numbers[0], &a1), 0);
    cr_assert(run_until_count(loop, &s.called, 1, 10 * (int64_t)MS, 200));
    cr_assert_eq(s.status[0], 0);
    /* The next send goes through the ring. */
    cr_assert_geq(send_one(loop, id, &s, 1, &numbers[1], sizeof numbers[1], &a1), 0);
    cr_assert(run_until_count(loop, &s.called, 2, 10 * (int64_t)MS, 200));
    send_numbered(s1, &ta, 1, 8);
    cr_assert(run_until_count(loop, &g.n, 2, 10 * (int64_t)MS, 200));
    /* A stop whose cancel the queue cannot take: owed, then sent. */
    tern__uring_refuse_entries(1);
    cr_assert_eq(tern_udp_recv_stop(loop, id), 0);
    tern_loop_run_once(loop, 0);
    send_numbered(s1, &ta, 2, 8);
    cr_assert_eq(tern_udp_recv_start(loop, id, 256, rx_cb, &g), 0);
    cr_assert(run_until_count(loop, &g.n, 3, 10 * (int64_t)MS, 200));
    for (unsigned i = 0; i < 3; i++)
        cr_assert_eq(g.number[i], i);
    uint32_t seen[4];
    cr_assert_eq(drain_numbers(s1, seen, 4), 2);
    cr_assert_eq(tern_udp_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(s1);
}

/*
 * A kernel whose probe and buffer ring are refused (io_uring_register
 * denied, as a filter may): the loop stays on io_uring and its UDP
 * sockets receive and send by readiness, every datagram still arriving.
 */
Test(uring_udp, without_the_probe_udp_goes_by_readiness)
{
    static const long nrs[] = {__NR_io_uring_register};
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    deny_syscalls(nrs, 1, -1, EPERM);
    tern_loop *loop = udp_loop();
    struct sockaddr_in ta, a1;
    tern_id id = tern_socket(loop, &ta);
    int s1 = raw_socket(&a1);
    static struct got g;
    cr_assert_eq(tern_udp_recv_start(loop, id, 256, rx_cb, &g), 0);
    static struct sends s;
    static uint32_t numbers[3] = {0, 1, 2};
    for (unsigned i = 0; i < 3; i++) {
        send_numbered(s1, &ta, i, 8);
        cr_assert_geq(send_one(loop, id, &s, i, &numbers[i], sizeof numbers[i], &a1), 0);
    }
    cr_assert(run_until_count(loop, &g.n, 3, 10 * (int64_t)MS, 200));
    cr_assert(run_until_count(loop, &s.called, 3, 10 * (int64_t)MS, 200));
    for (unsigned i = 0; i < 3; i++) {
        cr_assert_eq(g.number[i], i);
        cr_assert_eq(s.status[i], 0);
    }
    uint32_t seen[4];
    cr_assert_eq(drain_numbers(s1, seen, 4), 3);
    cr_assert_eq(tern_udp_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(s1);
}

#else

Test(uring_udp, not_built)
{
    cr_skip_test("built without io_uring");
}

#endif
