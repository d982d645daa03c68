/*
 * UDP conformance (include/tern/udp.h), run on every backend built:
 * datagrams with their sender's address over IPv4 and IPv6, truncation,
 * batches longer than one receive call, connected UDP and its refusals,
 * multicast and broadcast on loopback, reuse-port, the send queue's
 * high-water mark and drain, close with sends queued (-ECANCELED, in
 * order, then the close callback), tern_cancel and tern_loop_free closing
 * sockets, stale ids and bad input that changes nothing.
 */
#include "loop_helpers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

/* What a receiver saw. */
#define MAXD 256
struct rx {
    atomic_uint n;
    size_t len[MAXD];
    char data[MAXD][128];
    unsigned flags[MAXD];
    unsigned from_port[MAXD];
    int status; /* the last error told */
    atomic_uint errors;
    bool in_call;
};

static unsigned port_of(const struct sockaddr *sa)
{
    return ntohs(sa->sa_family == AF_INET ? ((const struct sockaddr_in *)sa)->sin_port
                                          : ((const struct sockaddr_in6 *)sa)->sin6_port);
}

static void rx_cb(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                  const struct sockaddr *from, unsigned flags, void *arg)
{
    (void)loop;
    (void)id;
    struct rx *r = arg;
    cr_assert_not(r->in_call, "a receive callback ran inside an API call");
    if (status < 0) {
        cr_assert_null(data);
        cr_assert_null(from);
        cr_assert_eq(len, 0);
        r->status = status;
        atomic_fetch_add(&r->errors, 1);
        return;
    }
    unsigned i = atomic_load(&r->n);
    cr_assert_lt(i, MAXD);
    cr_assert_not_null(from);
    r->len[i] = len;
    memcpy(r->data[i], data, len < 128 ? len : 128);
    r->flags[i] = flags;
    r->from_port[i] = port_of(from);
    atomic_store(&r->n, i + 1);
}

/* Send completions in the order they arrive. */
struct log {
    int status[512];
    uintptr_t tag[512];
    atomic_uint n;
    atomic_uint closed;
    unsigned closed_after; /* completions seen when the close callback ran */
    bool in_call;
};
static void *slots[512][2];
static void *slot(struct log *l, uintptr_t tag)
{
    slots[tag][0] = l;
    slots[tag][1] = (void *)tag;
    return slots[tag];
}

static void log_cb(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop;
    (void)id;
    struct log **pl = arg;
    struct log *l = pl[0];
    cr_assert_not(l->in_call, "a send callback ran inside the API call that caused it");
    unsigned i = atomic_load(&l->n);
    cr_assert_lt(i, 512);
    l->status[i] = status;
    l->tag[i] = (uintptr_t)pl[1];
    atomic_store(&l->n, i + 1);
}

static void log_close(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    struct log *l = arg;
    cr_assert_not(l->in_call, "the close callback ran inside the close");
    l->closed_after = atomic_load(&l->n);
    atomic_fetch_add(&l->closed, 1);
}

static tern_id bind_ok(tern_loop *loop, const char *host, unsigned port, unsigned flags)
{
    tern_id id = 0;
    int rc = tern_udp_bind(loop, host, port, flags, &id);
    cr_assert_eq(rc, 0, "tern_udp_bind(%s, %u): %s", host ? host : "NULL", port,
                 tern_strerror(rc));
    cr_assert_neq(id, 0);
    return id;
}

static unsigned port(tern_loop *loop, tern_id id)
{
    unsigned p = 0;
    cr_assert_eq(tern_udp_port(loop, id, &p), 0);
    cr_assert_neq(p, 0);
    return p;
}

static struct sockaddr_storage addr(const char *host, unsigned p)
{
    struct sockaddr_storage ss;
    cr_assert_eq(tern_sockaddr_parse(host, p, &ss), 0);
    return ss;
}
#define SA(ss) ((const struct sockaddr *)&(ss))

static void close_clean(tern_loop *loop, tern_id *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(tern_udp_close(loop, ids[i]), 0);
    cr_assert(run_until_nothing_live(loop), "%u operations still live", loop_live(loop));
}

/* A to B: three datagrams of the given host's family arrive whole, in
 * order, with A's port as the sender, and each send completes once. */
static void round_trip(const char *backend, const char *host)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id ids[2] = {bind_ok(loop, host, 0, 0), bind_ok(loop, host, 0, 0)};
    static struct rx r;
    memset(&r, 0, sizeof(r));
    cr_assert_eq(tern_udp_recv_start(loop, ids[1], 0, rx_cb, &r), 0);
    struct sockaddr_storage to = addr(host, port(loop, ids[1]));
    static struct log l;
    memset(&l, 0, sizeof(l));
    static const char *msgs[] = {"one", "", "three"};
    for (uintptr_t i = 0; i < 3; i++) {
        tern_buf b[2] = {{msgs[i], strlen(msgs[i])}, {"!", 1}};
        l.in_call = r.in_call = true;
        int rc = tern_udp_send(loop, ids[0], b, 2, SA(to), log_cb, slot(&l, i));
        l.in_call = r.in_call = false;
        cr_assert_eq(rc, 0, "send: %s", tern_strerror(rc));
    }
    cr_assert(run_until_count(loop, &r.n, 3, 10 * MS, 2000));
    cr_assert(run_until_count(loop, &l.n, 3, 10 * MS, 2000));
    unsigned pa = port(loop, ids[0]);
    for (unsigned i = 0; i < 3; i++) {
        cr_assert_eq(l.status[i], 0);
        cr_assert_eq(l.tag[i], i, "send completions out of order");
        cr_assert_eq(r.len[i], strlen(msgs[i]) + 1);
        cr_assert(memcmp(r.data[i], msgs[i], strlen(msgs[i])) == 0);
        cr_assert_eq(r.data[i][strlen(msgs[i])], '!', "the two buffers were not one datagram");
        cr_assert_eq(r.flags[i], 0);
        cr_assert_eq(r.from_port[i], pa, "the sender's address is wrong");
    }
    tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&l.n), 3, "a send completed twice");
    close_clean(loop, ids, 2);
    loop_free_clean(loop);
}

/* Whether this host can bind IPv6 loopback; says so when it cannot. */
static bool have_ipv6_loopback(void)
{
    int fd = socket(AF_INET6, SOCK_DGRAM, 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    bool v6 = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    if (fd >= 0)
        close(fd);
    if (!v6)
        cr_log_warn("no IPv6 loopback here; nothing to test");
    return v6;
}

BACKEND_TEST(udp, ipv4_datagrams_carry_the_sender_address)
{
    round_trip(backend, "127.0.0.1");
}

BACKEND_TEST(udp, ipv6_datagrams_carry_the_sender_address)
{
    if (!have_ipv6_loopback())
        return;
    round_trip(backend, "::1");
}

BACKEND_TEST(udp, a_long_datagram_is_cut_and_flagged)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id ids[2] = {bind_ok(loop, "127.0.0.1", 0, 0), bind_ok(loop, "127.0.0.1", 0, 0)};
    static struct rx r;
    memset(&r, 0, sizeof(r));
    cr_assert_eq(tern_udp_recv_start(loop, ids[1], 8, rx_cb, &r), 0);
    struct sockaddr_storage to = addr("127.0.0.1", port(loop, ids[1]));
    tern_buf big = {"0123456789abcdef", 16}, small = {"01234567", 8};
    cr_assert_eq(tern_udp_send(loop, ids[0], &big, 1, SA(to), NULL, NULL), 0);
    cr_assert_eq(tern_udp_send(loop, ids[0], &small, 1, SA(to), NULL, NULL), 0);
    cr_assert(run_until_count(loop, &r.n, 2, 10 * MS, 2000));
    cr_assert_eq(r.len[0], 8);
    cr_assert_eq(r.flags[0], TERN_UDP_TRUNCATED, "a cut datagram was not flagged");
    cr_assert(memcmp(r.data[0], "01234567", 8) == 0);
    cr_assert_eq(r.len[1], 8);
    cr_assert_eq(r.flags[1], 0, "a datagram that fit was flagged");
    close_clean(loop, ids, 2);
    loop_free_clean(loop);
}

/* More datagrams than one receive call takes: all arrive, in order. */
BACKEND_TEST(udp, more_than_a_batch_arrives_in_order)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id rid = bind_ok(loop, "127.0.0.1", 0, 0);
    static struct rx r;
    memset(&r, 0, sizeof(r));
    cr_assert_eq(tern_udp_recv_start(loop, rid, 64, rx_cb, &r), 0);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_storage to = addr("127.0.0.1", port(loop, rid));
    enum { N = 3 * TERN_UDP_BATCH + 5 };
    for (unsigned i = 0; i < N; i++) {
        char b[16];
        int n = snprintf(b, sizeof(b), "d%u", i);
        cr_assert_eq(sendto(fd, b, (size_t)n, 0, SA(to), sizeof(struct sockaddr_in)), n);
    }
    cr_assert(run_until_count(loop, &r.n, N, 10 * MS, 2000));
    for (unsigned i = 0; i < N; i++) {
        char b[16];
        int n = snprintf(b, sizeof(b), "d%u", i);
        cr_assert_eq(r.len[i], (size_t)n);
        cr_assert(memcmp(r.data[i], b, (size_t)n) == 0, "datagram %u out of order", i);
    }
    close(fd);
    close_clean(loop, &rid, 1);
    loop_free_clean(loop);
}

BACKEND_TEST(udp, connected_udp_sends_without_address_and_hears_refusals)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id ids[2] = {bind_ok(loop, "127.0.0.1", 0, 0), bind_ok(loop, "127.0.0.1", 0, 0)};
    static struct rx r, ra;
    memset(&r, 0, sizeof(r));
    memset(&ra, 0, sizeof(ra));
    cr_assert_eq(tern_udp_recv_start(loop, ids[1], 0, rx_cb, &r), 0);
    cr_assert_eq(tern_udp_recv_start(loop, ids[0], 0, rx_cb, &ra), 0);
    struct sockaddr_storage b = addr("127.0.0.1", port(loop, ids[1]));
    tern_buf m = {"hi", 2};
    cr_assert_eq(tern_udp_send(loop, ids[0], &m, 1, NULL, NULL, NULL), -EDESTADDRREQ);
    cr_assert_eq(tern_udp_connect(loop, ids[0], NULL), -ENOTCONN);
    cr_assert_eq(tern_udp_connect(loop, ids[0], SA(b)), 0);
    cr_assert_eq(tern_udp_connect(loop, ids[0], SA(b)), -EALREADY);
    cr_assert_eq(tern_udp_send(loop, ids[0], &m, 1, SA(b), NULL, NULL), -EISCONN);
    cr_assert_eq(tern_udp_send(loop, ids[0], &m, 1, NULL, NULL, NULL), 0);
    cr_assert(run_until_count(loop, &r.n, 1, 10 * MS, 2000));
    cr_assert(memcmp(r.data[0], "hi", 2) == 0);

    /* The peer goes away: the kernel's refusal reaches the receive callback,
     * and the socket goes on receiving. */
    unsigned pb = port(loop, ids[1]);
    static struct log l;
    memset(&l, 0, sizeof(l));
    cr_assert_eq(tern_udp_on_close(loop, ids[1], log_close, &l), 0);
    cr_assert_eq(tern_udp_close(loop, ids[1]), 0);
    cr_assert(run_until_count(loop, &l.closed, 1, 10 * MS, 200));
    cr_assert_eq(tern_udp_send(loop, ids[0], &m, 1, NULL, log_cb, slot(&l, 0)), 0);
    for (unsigned t = 0; t < 2000 && atomic_load(&ra.errors) == 0 && atomic_load(&l.n) < 2;
         t++) {
        if (atomic_load(&l.n) == 1 && l.status[0] == 0 && t % 50 == 49)
            (void)tern_udp_send(loop, ids[0], &m, 1, NULL, log_cb, slot(&l, 1));
        tern_loop_run_once(loop, 10 * MS);
    }
    bool refused = atomic_load(&ra.errors) > 0 || (atomic_load(&l.n) == 2 && l.status[1] < 0);
    /* libkqueue reads SO_ERROR to fill in EV_EOF's fflags, which clears the
     * refusal before recvmsg can report it (docs/testing.md). */
    if (!backend_is_libkqueue(backend))
        cr_assert(refused, "a send to a closed port (%u) was never refused", pb);
    if (atomic_load(&ra.errors) > 0)
        cr_assert_eq(ra.status, -ECONNREFUSED);

    /* Dissolved: an address is needed again. */
    cr_assert_eq(tern_udp_connect(loop, ids[0], NULL), 0);
    cr_assert_eq(tern_udp_send(loop, ids[0], &m, 1, NULL, NULL, NULL), -EDESTADDRREQ);
    close_clean(loop, ids, 1);
    loop_free_clean(loop);
}

BACKEND_TEST(udp, multicast_on_loopback_and_a_group_that_is_not_one)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id ids[2] = {bind_ok(loop, NULL, 0, TERN_UDP_REUSEADDR),
                      bind_ok(loop, "127.0.0.1", 0, 0)};
    /* Not multicast, or not an address: refused before any system call
     * (an armed fault on the next one never fires), and nothing joined. */
    tern__fault_arm(TERN__FAULT_NET, 1);
    cr_assert_eq(tern_udp_membership(loop, ids[0], "127.0.0.1", NULL, true), -EINVAL);
    cr_assert_eq(tern_udp_membership(loop, ids[0], "::1", NULL, true), -EINVAL);
    bool reached = tern__fault_fired();
    tern__fault_arm(0, 0);
    cr_assert_not(reached, "a group that is not multicast reached setsockopt");
    cr_assert_eq(tern_udp_membership(loop, ids[0], "127.0.0.1", "127.0.0.1", true), -EINVAL);
    cr_assert_eq(tern_udp_membership(loop, ids[0], "10.1.2.3", NULL, true), -EINVAL);
    cr_assert_eq(tern_udp_membership(loop, ids[0], "ff02::1", NULL, true), -EINVAL);
    cr_assert_eq(tern_udp_membership(loop, ids[0], "239.1.2.3", "lo", true), -EINVAL);
    cr_assert_eq(tern_udp_membership(loop, ids[0], "239.1.2.3", "127.0.0.1", false),
                 -EADDRNOTAVAIL, "a refused join must not have joined");
    int rc = tern_udp_membership(loop, ids[0], "239.1.2.3", "127.0.0.1", true);
    if (rc == -ENODEV) {
        cr_log_warn("no multicast on loopback here: %s", tern_strerror(rc));
        close_clean(loop, ids, 2);
        loop_free_clean(loop);
        return;
    }
    cr_assert_eq(rc, 0, "join: %s", tern_strerror(rc));
    cr_assert_eq(tern_udp_multicast_interface(loop, ids[1], "127.0.0.1"), 0);
    cr_assert_eq(tern_udp_multicast_interface(loop, ids[1], "nonsense"), -EINVAL);
    cr_assert_eq(tern_udp_set(loop, ids[1], TERN_UDP_MULTICAST_TTL, 1), 0);
    cr_assert_eq(tern_udp_set(loop, ids[1], TERN_UDP_MULTICAST_LOOP, 1), 0);
    cr_assert_eq(tern_udp_set(loop, ids[1], TERN_UDP_MULTICAST_TTL, 256), -EINVAL);
    cr_assert_eq(tern_udp_set(loop, ids[1], TERN_UDP_MULTICAST_LOOP, 2), -EINVAL);
    static struct rx r;
    memset(&r, 0, sizeof(r));
    cr_assert_eq(tern_udp_recv_start(loop, ids[0], 0, rx_cb, &r), 0);
    struct sockaddr_storage g = addr("239.1.2.3", port(loop, ids[0]));
    tern_buf m = {"mc", 2};
    cr_assert_eq(tern_udp_send(loop, ids[1], &m, 1, SA(g), NULL, NULL), 0);
    cr_assert(run_until_count(loop, &r.n, 1, 10 * MS, 2000), "the group's datagram never came");
    cr_assert(memcmp(r.data[0], "mc", 2) == 0);
    cr_assert_eq(tern_udp_membership(loop, ids[0], "239.1.2.3", "127.0.0.1", false), 0);
    cr_assert_eq(tern_udp_membership(loop, ids[0], "239.1.2.3", "127.0.0.1", false),
                 -EADDRNOTAVAIL);
    close_clean(loop, ids, 2);
    loop_free_clean(loop);
}

BACKEND_TEST(udp, broadcast_needs_the_setting)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id ids[2] = {bind_ok(loop, NULL, 0, 0), bind_ok(loop, "127.0.0.1", 0, 0)};
    static struct rx r;
    memset(&r, 0, sizeof(r));
    cr_assert_eq(tern_udp_recv_start(loop, ids[0], 0, rx_cb, &r), 0);
    struct sockaddr_storage bc = addr("127.255.255.255", port(loop, ids[0]));
    tern_buf m = {"bc", 2};
    static struct log l;
    memset(&l, 0, sizeof(l));
    cr_assert_eq(tern_udp_send(loop, ids[1], &m, 1, SA(bc), log_cb, slot(&l, 0)), 0);
    cr_assert(run_until_count(loop, &l.n, 1, 10 * MS, 2000));
    cr_assert_eq(l.status[0], -EACCES, "broadcast without the setting: %s",
                 tern_strerror(l.status[0]));
    cr_assert_eq(tern_udp_set(loop, ids[1], TERN_UDP_BROADCAST, 2), -EINVAL);
    cr_assert_eq(tern_udp_set(loop, ids[1], TERN_UDP_BROADCAST, 1), 0);
    cr_assert_eq(tern_udp_set(loop, ids[1], TERN_UDP_TTL, 0), -EINVAL);
    cr_assert_eq(tern_udp_set(loop, ids[1], TERN_UDP_TTL, 64), 0);
    cr_assert_eq(tern_udp_set(loop, ids[1], (enum tern_udp_option)99, 1), -EINVAL);
    cr_assert_eq(tern_udp_send(loop, ids[1], &m, 1, SA(bc), log_cb, slot(&l, 1)), 0);
    cr_assert(run_until_count(loop, &l.n, 2, 10 * MS, 2000));
    cr_assert_eq(l.status[1], 0, "broadcast: %s", tern_strerror(l.status[1]));
    cr_assert(run_until_count(loop, &r.n, 1, 10 * MS, 2000), "the broadcast never came");
    close_clean(loop, ids, 2);
    loop_free_clean(loop);
}

BACKEND_TEST(udp, reuse_port_lets_two_sockets_share_a_port)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id a = bind_ok(loop, "127.0.0.1", 0, TERN_UDP_REUSEPORT);
    unsigned p = port(loop, a);
    tern_id c = 0;
    cr_assert_eq(tern_udp_bind(loop, "127.0.0.1", p, 0, &c), -EADDRINUSE);
    cr_assert_eq(c, 0);
    tern_id ids[2] = {a, bind_ok(loop, "127.0.0.1", p, TERN_UDP_REUSEPORT)};
    cr_assert_eq(port(loop, ids[1]), p);
    close_clean(loop, ids, 2);
    loop_free_clean(loop);
}

/* ------------------------------------------------------------------ */
/* The send queue                                                      */
/* ------------------------------------------------------------------ */

struct burst {
    tern_id sock;
    struct sockaddr_storage to;
    struct log *l;
    int rcs[8];
    size_t queued_bytes, queued_count;
    bool close_after;
};
static atomic_uint drains;
static void on_drain(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
    atomic_fetch_add(&drains, 1);
}

/* A receive callback that answers with eight datagrams of 50 bytes: inside
 * the socket's dispatch they queue, so the high-water mark is crossed. */
static void burst_cb(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                     const struct sockaddr *from, unsigned flags, void *arg)
{
    (void)data;
    (void)len;
    (void)from;
    (void)flags;
    struct burst *b = arg;
    cr_assert_eq(status, 0);
    static char payload[50];
    tern_buf m = {payload, sizeof(payload)};
    for (uintptr_t i = 0; i < 8; i++)
        b->rcs[i] = tern_udp_send(loop, id, &m, 1, SA(b->to), log_cb, slot(b->l, i));
    cr_assert_eq(tern_udp_send_queue_size(loop, id, &b->queued_bytes, &b->queued_count), 0);
    if (b->close_after)
        cr_assert_eq(tern_udp_close(loop, id), 0);
}

static void burst_setup(tern_loop *loop, tern_id *ids, struct burst *b, struct log *l,
                        struct rx *r)
{
    ids[0] = bind_ok(loop, "127.0.0.1", 0, 0);
    ids[1] = bind_ok(loop, "127.0.0.1", 0, 0);
    b->sock = ids[0];
    b->l = l;
    b->to = addr("127.0.0.1", port(loop, ids[1]));
    cr_assert_eq(tern_udp_recv_start(loop, ids[1], 0, rx_cb, r), 0);
    cr_assert_eq(tern_udp_recv_start(loop, ids[0], 0, burst_cb, b), 0);
    struct sockaddr_storage to0 = addr("127.0.0.1", port(loop, ids[0]));
    tern_buf go = {"go", 2};
    cr_assert_eq(tern_udp_send(loop, ids[1], &go, 1, SA(to0), NULL, NULL), 0);
}

BACKEND_TEST(udp, high_water_says_back_off_and_drain_follows_once)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id ids[2];
    static struct burst b;
    static struct log l;
    static struct rx r;
    memset(&b, 0, sizeof(b));
    memset(&l, 0, sizeof(l));
    memset(&r, 0, sizeof(r));
    atomic_store(&drains, 0);
    burst_setup(loop, ids, &b, &l, &r);
    cr_assert_eq(tern_udp_set_high_water(loop, ids[0], 0, on_drain, NULL), -EINVAL);
    cr_assert_eq(tern_udp_set_high_water(loop, ids[0], 120, on_drain, NULL), 0);
    cr_assert(run_until_count(loop, &l.n, 8, 10 * MS, 2000));
    /* 50, 100 fit under 120; the third and later cross it. */
    cr_assert_eq(b.rcs[0], 0);
    cr_assert_eq(b.rcs[1], 0);
    for (int i = 2; i < 8; i++)
        cr_assert_eq(b.rcs[i], 1, "send %d past the high-water mark returned %d", i, b.rcs[i]);
    cr_assert_eq(b.queued_bytes, 400, "queued bytes not readable");
    cr_assert_eq(b.queued_count, 8);
    for (unsigned i = 0; i < 8; i++) {
        cr_assert_eq(l.status[i], 0);
        cr_assert_eq(l.tag[i], i);
    }
    cr_assert(run_until_count(loop, &drains, 1, 10 * MS, 200), "no drain callback");
    cr_assert(run_until_count(loop, &r.n, 8, 10 * MS, 2000));
    for (int t = 0; t < 5; t++)
        tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&drains), 1, "the drain callback ran more than once");
    size_t q = 1, c = 1;
    cr_assert_eq(tern_udp_send_queue_size(loop, ids[0], &q, &c), 0);
    cr_assert_eq(q, 0);
    cr_assert_eq(c, 0);
    close_clean(loop, ids, 2);
    loop_free_clean(loop);
}

BACKEND_TEST(udp, close_with_sends_queued_cancels_each_once_then_closes)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id ids[2];
    static struct burst b;
    static struct log l;
    static struct rx r;
    memset(&b, 0, sizeof(b));
    memset(&l, 0, sizeof(l));
    memset(&r, 0, sizeof(r));
    b.close_after = true;
    burst_setup(loop, ids, &b, &l, &r);
    cr_assert_eq(tern_udp_on_close(loop, ids[0], log_close, &l), 0);
    cr_assert(run_until_count(loop, &l.closed, 1, 10 * MS, 2000));
    cr_assert_eq(atomic_load(&l.n), 8);
    cr_assert_eq(l.closed_after, 8, "the close callback ran before the cancelled sends");
    for (unsigned i = 0; i < 8; i++) {
        cr_assert_eq(l.status[i], -ECANCELED, "send %u: %s", i, tern_strerror(l.status[i]));
        cr_assert_eq(l.tag[i], i);
    }
    cr_assert_eq(tern_udp_close(loop, ids[0]), -ENOENT, "a second close");
    tern_buf m = {"x", 1};
    cr_assert_eq(tern_udp_send(loop, ids[0], &m, 1, SA(b.to), NULL, NULL), -ENOENT);
    for (int t = 0; t < 5; t++)
        tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&l.n), 8, "a cancelled send completed twice");
    cr_assert_eq(atomic_load(&l.closed), 1);
    close_clean(loop, ids + 1, 1);
    loop_free_clean(loop);
}

static atomic_uint closes;
static void count_close(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
    atomic_fetch_add(&closes, 1);
}

BACKEND_TEST(udp, cancel_and_loop_free_close_sockets_once)
{
    backend_warm_up(backend);
    int fds = count_open_fds_settled();
    tern_loop *loop = loop_new_backend(backend);
    atomic_store(&closes, 0);
    static struct rx r;
    memset(&r, 0, sizeof(r));
    tern_id a = bind_ok(loop, "127.0.0.1", 0, 0), b = bind_ok(loop, "::", 0, 0);
    tern_id c = bind_ok(loop, "127.0.0.1", 0, 0);
    cr_assert_eq(tern_udp_recv_start(loop, a, 0, rx_cb, &r), 0);
    cr_assert_eq(tern_udp_recv_start(loop, b, 512, rx_cb, &r), 0);
    cr_assert_eq(tern_udp_on_close(loop, a, count_close, NULL), 0);
    cr_assert_eq(tern_udp_on_close(loop, b, count_close, NULL), 0);
    cr_assert_eq(tern_udp_on_close(loop, c, count_close, NULL), 0);
    /* From outside a running loop, a cancel is a request step 1 carries out. */
    int rc = tern_cancel(loop, c);
    cr_assert(rc == 0 || rc == TERN_CANCEL_REQUESTED, "tern_cancel: %s", tern_strerror(rc));
    cr_assert(run_until_count(loop, &closes, 1, 10 * MS, 200));
    cr_assert_eq(tern_udp_fd(loop, c), -ENOENT);
    /* A queued send at free time completes with -ECANCELED during the drain. */
    static struct log l;
    memset(&l, 0, sizeof(l));
    struct sockaddr_storage to = addr("127.0.0.1", port(loop, a));
    tern_buf m = {"x", 1};
    cr_assert_eq(tern_udp_send(loop, a, &m, 1, SA(to), log_cb, slot(&l, 0)), 0);
    tern_loop_free(loop);
    cr_assert_eq(atomic_load(&closes), 3, "loop free did not close each socket once");
    cr_assert_eq(atomic_load(&l.n), 1, "the send owed at free time did not complete once");
    cr_assert_eq(count_open_fds_settled(), fds, "a socket's descriptor stayed open");
}

BACKEND_TEST(udp, bad_input_is_refused_and_changes_nothing)
{
    tern_loop *loop = loop_new_backend(backend);
    struct sockaddr_storage ss;
    cr_assert_eq(tern_sockaddr_parse("999.1.1.1", 1, &ss), -EINVAL);
    cr_assert_eq(tern_sockaddr_parse("localhost", 1, &ss), -EINVAL);
    cr_assert_eq(tern_sockaddr_parse("127.0.0.1", 65536, &ss), -EINVAL);
    char longname[300];
    memset(longname, '1', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    cr_assert_eq(tern_sockaddr_parse(longname, 1, &ss), -EINVAL);
    tern_id id = 0;
    cr_assert_eq(tern_udp_bind(loop, longname, 0, 0, &id), -EINVAL);
    cr_assert_eq(tern_udp_bind(loop, "example.com", 0, 0, &id), -EINVAL);
    cr_assert_eq(tern_udp_bind(loop, "127.0.0.1", 65536, 0, &id), -EINVAL);
    cr_assert_eq(tern_udp_bind(loop, "127.0.0.1", 0, 1u << 9, &id), -EINVAL);
    cr_assert_eq(tern_udp_bind(loop, "127.0.0.1", 0, TERN_UDP_IPV6ONLY, &id), -EINVAL);
    cr_assert_eq(id, 0);
    cr_assert_eq(loop_live(loop), 0, "a refused bind left something live");
    id = bind_ok(loop, "127.0.0.1", 0, 0);
    tern_buf m = {"x", 1};
    struct sockaddr_storage v6 = addr("::1", 9);
    struct sockaddr_storage v4 = addr("127.0.0.1", 9);
    cr_assert_eq(tern_udp_send(loop, id, &m, 1, SA(v6), NULL, NULL), -EINVAL);
    cr_assert_eq(tern_udp_send(loop, id, NULL, 1, SA(v4), NULL, NULL), -EINVAL);
    cr_assert_eq(tern_udp_send(loop, id, &m, 0, SA(v4), NULL, NULL), -EINVAL);
    cr_assert_eq(tern_udp_send(loop, id, &m, 65, SA(v4), NULL, NULL), -EINVAL);
    tern_buf nul = {NULL, 3};
    cr_assert_eq(tern_udp_send(loop, id, &nul, 1, SA(v4), NULL, NULL), -EINVAL);
    cr_assert_eq(tern_udp_send(loop, 12345678, &m, 1, SA(v4), NULL, NULL), -ENOENT);
    cr_assert_eq(tern_udp_connect(loop, id, SA(v6)), -EINVAL);
    static struct rx r;
    cr_assert_eq(tern_udp_recv_start(loop, id, 0, NULL, NULL), -EINVAL);
    cr_assert_eq(tern_udp_recv_start(loop, id, 65537, rx_cb, &r), -EINVAL);
    size_t q = 7;
    cr_assert_eq(tern_udp_send_queue_size(loop, id, &q, NULL), 0);
    cr_assert_eq(q, 0, "a refused send was queued");
    /* A stream id is not a UDP socket, nor the other way round. */
    cr_assert_eq(tern_stream_close(loop, id), -ENOENT);
    close_clean(loop, &id, 1);
    cr_assert_eq(tern_udp_recv_stop(loop, id), -ENOENT);
    cr_assert_eq(tern_udp_send(loop, id, &m, 1, SA(v4), NULL, NULL), -ENOENT);
    cr_assert_eq(tern_udp_membership(loop, id, "239.1.1.1", NULL, true), -ENOENT);
    loop_free_clean(loop);
}

/*
 * A socket bound to port 0 and connected keeps the port the system chose
 * once the association is dissolved: it still reports that port, and a
 * datagram sent there arrives.
 */
static void dissolve_keeps_the_port(const char *backend, const char *host)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id ids[2] = {bind_ok(loop, host, 0, 0), bind_ok(loop, host, 0, 0)};
    unsigned pa = port(loop, ids[0]);
    struct sockaddr_storage b = addr(host, port(loop, ids[1]));
    cr_assert_eq(tern_udp_connect(loop, ids[0], SA(b)), 0);
    cr_assert_eq(tern_udp_connect(loop, ids[0], NULL), 0);
    unsigned after = 0;
    cr_assert_eq(tern_udp_port(loop, ids[0], &after), 0);
    cr_assert_eq(after, pa, "bound to port %u, reports %u once dissolved", pa, after);

    static struct rx r;
    memset(&r, 0, sizeof(r));
    cr_assert_eq(tern_udp_recv_start(loop, ids[0], 0, rx_cb, &r), 0);
    struct sockaddr_storage a = addr(host, pa);
    tern_buf m = {"back", 4};
    cr_assert_eq(tern_udp_send(loop, ids[1], &m, 1, SA(a), NULL, NULL), 0);
    cr_assert(run_until_count(loop, &r.n, 1, 10 * MS, 2000),
              "a datagram to the port the socket was bound to never arrived");
    cr_assert(memcmp(r.data[0], "back", 4) == 0);
    close_clean(loop, ids, 2);
    loop_free_clean(loop);
}

BACKEND_TEST(udp, dissolving_keeps_the_chosen_ipv4_port)
{
    dissolve_keeps_the_port(backend, "127.0.0.1");
}

BACKEND_TEST(udp, dissolving_keeps_the_chosen_ipv6_port)
{
    if (!have_ipv6_loopback())
        return;
    dissolve_keeps_the_port(backend, "::1");
}
