/*
 * A UDP socket's less travelled paths (include/tern/udp.h): a send the
 * kernel refuses with EAGAIN waits for room and leaves once; one
 * interrupted (EINTR) is tried again; a watcher the backend refuses to
 * widen fails the queued sends with the backend's error and ends
 * receiving with it, each told once, in step 2, never inside the call;
 * sends made from send and drain callbacks leave in the same dispatch; a
 * dispatch runs at most 256 send callbacks and the rest in order in the
 * next turn; a receive callback that stops receiving hears nothing more
 * of its batch, and one that asks for a larger size gets whole datagrams
 * of it; a connect the kernel refuses (broadcast without
 * TERN_UDP_BROADCAST) changes nothing; a buffer too large to count is
 * refused; a bind out of memory at any step leaves nothing open; a socket
 * bound without asking for its id is closed by tern_loop_free. Failures
 * are injected through the UDP fault seam (backends/fault.h) with the
 * errno each case needs. The sends from callbacks also check the drain:
 * setting the mark again while the queue is still above half of it owes
 * no drain yet.
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

/* What a receiver saw; in_call is set around API calls that must not
 * run a callback. */
struct rx {
    atomic_uint n, errors;
    int status;
    size_t len[64];
    char first[64];
    bool in_call;
    bool stop_after_first;  /* recv_stop from inside the first callback */
    size_t grow_to;         /* recv_start with this size from the first callback */
};

static void rx_cb(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                  const struct sockaddr *from, unsigned flags, void *arg)
{
    (void)from, (void)flags;
    struct rx *r = arg;
    cr_assert_not(r->in_call, "a receive callback ran inside an API call");
    if (status < 0) {
        cr_assert_null(data);
        r->status = status;
        atomic_fetch_add(&r->errors, 1);
        return;
    }
    unsigned i = atomic_load(&r->n);
    cr_assert_lt(i, 64);
    r->len[i] = len;
    r->first[i] = len > 0 ? ((const char *)data)[0] : 0;
    atomic_store(&r->n, i + 1);
    if (i == 0 && r->stop_after_first)
        cr_assert_eq(tern_udp_recv_stop(loop, id), 0);
    if (i == 0 && r->grow_to != 0)
        cr_assert_eq(tern_udp_recv_start(loop, id, r->grow_to, rx_cb, r), 0);
}

/* Send completions, in order. */
struct log {
    atomic_uint n;
    int status[400];
    unsigned tag[400];
    bool in_call;
};

struct sent {
    struct log *log;
    unsigned tag;
};

static void log_cb(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id;
    struct sent *s = arg;
    cr_assert_not(s->log->in_call, "a send callback ran inside the API call that caused it");
    unsigned i = atomic_load(&s->log->n);
    cr_assert_lt(i, 400);
    s->log->status[i] = status;
    s->log->tag[i] = s->tag;
    atomic_store(&s->log->n, i + 1);
}

static void close_all(tern_loop *loop, const tern_id *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(tern_udp_close(loop, ids[i]), 0);
    cr_assert(run_until_nothing_live(loop), "%u operations still live", loop_live(loop));
    loop_free_clean(loop);
}

static const char one[] = "1";

Test(udp_paths, a_send_refused_with_eagain_waits_for_room_and_leaves_once,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    tern_id a = bind_ok(loop), b = bind_ok(loop);
    struct sockaddr_storage to = where(loop, b);
    static struct rx r;
    cr_assert_eq(tern_udp_recv_start(loop, b, 0, rx_cb, &r), 0);
    static struct log l;
    static struct sent s0 = {&l, 0};
    tern_buf buf = {one, 1};

    tern__fault_net_errno(-EAGAIN);
    tern__fault_arm(TERN__FAULT_NET, 1);
    l.in_call = true;
    cr_assert_eq(tern_udp_send(loop, a, &buf, 1, SA(to), log_cb, &s0), 0);
    l.in_call = false;
    cr_assert(tern__fault_fired(), "the send was not refused: the test proves nothing");
    fault_off();
    size_t bytes = 0, count = 0;
    cr_assert_eq(tern_udp_send_queue_size(loop, a, &bytes, &count), 0);
    cr_assert_eq(count, 1, "a send that met EAGAIN left the queue");
    cr_assert_eq(bytes, 1);

    cr_assert(run_until_count(loop, &l.n, 1, 10 * (int64_t)MS, 500));
    cr_assert(run_until_count(loop, &r.n, 1, 10 * (int64_t)MS, 500));
    cr_assert_eq(l.status[0], 0, "the send ended with %s", tern_err_name(l.status[0]));
    cr_assert_eq(r.len[0], 1);
    cr_assert_eq(r.first[0], '1');
    cr_assert_eq(tern_udp_send_queue_size(loop, a, &bytes, &count), 0);
    cr_assert_eq(count, 0);
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&l.n), 1, "the send completed %u times", atomic_load(&l.n));
    cr_assert_eq(atomic_load(&r.n), 1, "%u datagrams arrived", atomic_load(&r.n));
    tern_id ids[] = {a, b};
    close_all(loop, ids, 2);
}

Test(udp_paths, an_interrupted_send_is_tried_again, .timeout = TEST_TIMEOUT)
{
    /* Readiness's own mechanics: on epoll, whatever TERN_TEST_BACKEND says. */
    tern_loop *loop = loop_new_default();
    tern_id a = bind_ok(loop), b = bind_ok(loop);
    struct sockaddr_storage to = where(loop, b);
    static struct rx r;
    cr_assert_eq(tern_udp_recv_start(loop, b, 0, rx_cb, &r), 0);
    static struct log l;
    static struct sent s0 = {&l, 0};
    tern_buf buf = {one, 1};

    tern__fault_net_errno(-EINTR);
    tern__fault_arm(TERN__FAULT_NET, 1);
    cr_assert_eq(tern_udp_send(loop, a, &buf, 1, SA(to), log_cb, &s0), 0);
    cr_assert(tern__fault_fired());
    fault_off();
    size_t bytes = 1, count = 1;
    cr_assert_eq(tern_udp_send_queue_size(loop, a, &bytes, &count), 0);
    cr_assert_eq(count, 0, "an interrupted send was not tried again at once");
    cr_assert(run_until_count(loop, &l.n, 1, 10 * (int64_t)MS, 500));
    cr_assert(run_until_count(loop, &r.n, 1, 10 * (int64_t)MS, 500));
    cr_assert_eq(l.status[0], 0, "the send ended with %s", tern_err_name(l.status[0]));
    tern_id ids[] = {a, b};
    close_all(loop, ids, 2);
}

/*
 * The backend refuses to change the watcher: the socket's descriptor is
 * replaced under it (dup2), which drops epoll's registration, so the
 * EPOLL_CTL_MOD that widens the interest to TERN_WRITABLE fails with
 * -ENOENT. A real cause of the same path is the kernel's ENOMEM.
 */
static void refused_watch(bool receiving)
{
    tern_loop *loop = loop_new_epoll_or_skip();
    tern_id a = bind_ok(loop), b = bind_ok(loop);
    struct sockaddr_storage to = where(loop, b);
    static struct rx ra;
    memset(&ra, 0, sizeof ra);
    cr_assert_eq(tern_udp_recv_start(loop, a, 0, rx_cb, &ra), 0);
    if (!receiving) /* the watcher stays, lazily, with TERN_READABLE */
        cr_assert_eq(tern_udp_recv_stop(loop, a), 0);
    int fd = tern_udp_fd(loop, a);
    cr_assert_geq(fd, 0);
    int other = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(other, 0);
    cr_assert_eq(dup2(other, fd), fd);
    cr_assert_eq(close(other), 0);

    static struct log l;
    memset(&l, 0, sizeof l);
    static struct sent s0 = {&l, 0};
    tern_buf buf = {one, 1};
    tern__fault_net_errno(-EAGAIN);
    tern__fault_arm(TERN__FAULT_NET, 1);
    l.in_call = ra.in_call = true;
    cr_assert_eq(tern_udp_send(loop, a, &buf, 1, SA(to), log_cb, &s0), 0);
    l.in_call = ra.in_call = false;
    cr_assert(tern__fault_fired(), "the send was not refused: the test proves nothing");
    fault_off();
    size_t bytes = 1, count = 1;
    cr_assert_eq(tern_udp_send_queue_size(loop, a, &bytes, &count), 0);
    cr_assert_eq(count, 0, "a send that cannot wait for room stayed queued");
    cr_assert_eq(bytes, 0);

    cr_assert(run_until_count(loop, &l.n, 1, 10 * (int64_t)MS, 500));
    cr_assert_eq(l.status[0], -ENOENT, "the send ended with %s", tern_err_name(l.status[0]));
    if (receiving) {
        cr_assert(run_until_count(loop, &ra.errors, 1, 10 * (int64_t)MS, 500));
        cr_assert_eq(ra.status, -ENOENT, "receiving ended with %s", tern_err_name(ra.status));
    }
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&l.n), 1);
    cr_assert_eq(atomic_load(&ra.errors), receiving ? 1u : 0u, "receiving was told %u errors",
                 atomic_load(&ra.errors));
    cr_assert_eq(atomic_load(&ra.n), 0);
    tern_id ids[] = {a, b};
    close_all(loop, ids, 2);
}

Test(udp_paths, a_refused_watcher_fails_the_send_and_ends_receiving_in_step_2,
     .timeout = TEST_TIMEOUT)
{
    refused_watch(true);
}

Test(udp_paths, a_refused_watcher_fails_the_send_of_a_socket_not_receiving,
     .timeout = TEST_TIMEOUT)
{
    refused_watch(false);
}

/*
 * A send callback sends again (B), and a send from a callback crosses the
 * high-water mark (C returns 1), so the drain callback runs in the same
 * dispatch and sends D: all four leave and complete once, in order.
 */
struct chain {
    tern_id a;
    struct sockaddr_storage to;
    struct log log;
    struct sent s[4];
    int c_rc;
    atomic_uint drains;
    int hw_again_rc;
};
static char big[2000];

static void chain_send(tern_loop *loop, struct chain *c, unsigned i, const void *p, size_t n,
                       int *rc)
{
    tern_buf buf = {p, n};
    c->s[i] = (struct sent){&c->log, i};
    int r = tern_udp_send(loop, c->a, &buf, 1, SA(c->to), log_cb, &c->s[i]);
    cr_assert_geq(r, 0, "send %u: %s", i, tern_err_name(r));
    if (rc != NULL)
        *rc = r;
}

static struct chain *the_chain;

static void chain_cb(tern_loop *loop, tern_id id, int status, void *arg)
{
    log_cb(loop, id, status, arg);
    struct chain *c = the_chain;
    unsigned n = atomic_load(&c->log.n);
    if (n == 1) { /* A done: send B */
        chain_send(loop, c, 1, "B", 1, NULL);
        /* ... and C, larger than the mark: the hint says back off */
        tern_buf buf = {big, sizeof big};
        c->s[2] = (struct sent){&c->log, 2};
        c->c_rc = tern_udp_send(loop, c->a, &buf, 1, SA(c->to), log_cb, &c->s[2]);
    }
}

static void chain_drain(tern_loop *loop, tern_id id, void *arg)
{
    struct chain *c = arg;
    cr_assert_eq(id, c->a);
    atomic_fetch_add(&c->drains, 1);
    chain_send(loop, c, 3, "D", 1, NULL);
}

static void chain_cb_and_mark(tern_loop *loop, tern_id id, int status, void *arg)
{
    chain_cb(loop, id, status, arg);
    struct chain *c = the_chain;
    if (atomic_load(&c->log.n) == 1) {
        /* Setting the mark again while still above half of it owes no drain yet. */
        c->hw_again_rc = tern_udp_set_high_water(loop, c->a, 1000, chain_drain, c);
        cr_assert_eq(atomic_load(&c->drains), 0, "a drain callback ran inside the call");
    }
}

Test(udp_paths, sends_from_send_and_drain_callbacks_leave_in_the_same_dispatch,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    static struct chain c;
    the_chain = &c;
    c.a = bind_ok(loop);
    tern_id b = bind_ok(loop);
    c.to = where(loop, b);
    static struct rx r;
    cr_assert_eq(tern_udp_recv_start(loop, b, 0, rx_cb, &r), 0);
    cr_assert_eq(tern_udp_set_high_water(loop, c.a, 1000, chain_drain, &c), 0);
    memset(big, 'C', sizeof big);
    tern_buf buf = {"A", 1};
    c.s[0] = (struct sent){&c.log, 0};
    cr_assert_eq(tern_udp_send(loop, c.a, &buf, 1, SA(c.to), chain_cb_and_mark, &c.s[0]), 0);

    cr_assert(run_until_count(loop, &c.log.n, 4, 10 * (int64_t)MS, 500), "%u sends completed",
              atomic_load(&c.log.n));
    cr_assert_eq(c.c_rc, 1, "a send past the mark did not say back off");
    cr_assert_eq(c.hw_again_rc, 0);
    cr_assert_eq(atomic_load(&c.drains), 1, "the drain callback ran %u times",
                 atomic_load(&c.drains));
    for (unsigned i = 0; i < 4; i++) {
        cr_assert_eq(c.log.tag[i], i, "completion %u was send %u", i, c.log.tag[i]);
        cr_assert_eq(c.log.status[i], 0);
    }
    cr_assert(run_until_count(loop, &r.n, 4, 10 * (int64_t)MS, 500));
    const char order[] = "ABCD";
    for (unsigned i = 0; i < 4; i++)
        cr_assert_eq(r.first[i], order[i], "datagram %u began with %c", i, r.first[i]);
    tern_id ids[] = {c.a, b};
    close_all(loop, ids, 2);
}

#define MANY 300

Test(udp_paths, a_dispatch_runs_256_send_callbacks_and_the_rest_next_turn,
     .timeout = TEST_TIMEOUT)
{
    /* Readiness's own mechanics: on epoll, whatever TERN_TEST_BACKEND says. */
    tern_loop *loop = loop_new_default();
    tern_id a = bind_ok(loop), b = bind_ok(loop);
    struct sockaddr_storage to = where(loop, b);
    static struct log l;
    static struct sent s[MANY];
    tern_buf buf = {one, 1};
    for (unsigned i = 0; i < MANY; i++) {
        s[i] = (struct sent){&l, i};
        cr_assert_eq(tern_udp_send(loop, a, &buf, 1, SA(to), log_cb, &s[i]), 0);
    }
    cr_assert_eq(atomic_load(&l.n), 0);
    unsigned turns = 0;
    while (atomic_load(&l.n) == 0 && turns++ < 100)
        tern_loop_run_once(loop, 10 * (int64_t)MS);
    cr_assert_eq(atomic_load(&l.n), 256, "one turn ran %u send callbacks", atomic_load(&l.n));
    cr_assert(run_until_count(loop, &l.n, MANY, 10 * (int64_t)MS, 100));
    for (unsigned i = 0; i < MANY; i++)
        cr_assert_eq(l.tag[i], i, "completion %u was send %u", i, l.tag[i]);
    tern_id ids[] = {a, b};
    close_all(loop, ids, 2);
}

static void send_three(tern_loop *loop, tern_id a, struct sockaddr_storage to, size_t len)
{
    static char d[3][300];
    for (int i = 0; i < 3; i++) {
        memset(d[i], 'x' + i, sizeof d[i]);
        tern_buf buf = {d[i], len};
        cr_assert_eq(tern_udp_send(loop, a, &buf, 1, SA(to), NULL, NULL), 0);
    }
}

Test(udp_paths, a_receiver_that_stops_hears_nothing_more_of_its_batch,
     .timeout = TEST_TIMEOUT)
{
    /* Readiness's own mechanics: on epoll, whatever TERN_TEST_BACKEND says. */
    tern_loop *loop = loop_new_default();
    tern_id a = bind_ok(loop), b = bind_ok(loop);
    static struct rx r = {.stop_after_first = true};
    send_three(loop, a, where(loop, b), 10);
    /* All three are in b's kernel buffer before it starts receiving. */
    cr_assert(fd_readable_now(tern_udp_fd(loop, b), 1000));
    cr_assert_eq(tern_udp_recv_start(loop, b, 0, rx_cb, &r), 0);
    cr_assert(run_until_count(loop, &r.n, 1, 10 * (int64_t)MS, 500));
    for (int i = 0; i < 10; i++)
        tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&r.n), 1, "a stopped receiver heard %u datagrams",
                 atomic_load(&r.n));
    tern_id ids[] = {a, b};
    close_all(loop, ids, 2);
}

Test(udp_paths, a_receiver_that_asks_for_more_room_gets_whole_datagrams,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    tern_id a = bind_ok(loop), b = bind_ok(loop);
    static struct rx r = {.grow_to = 256};
    struct sockaddr_storage to = where(loop, b);
    /* Receive 16 bytes at first; the first callback asks for 256. */
    cr_assert_eq(tern_udp_recv_start(loop, b, 16, rx_cb, &r), 0);
    static char d[200];
    memset(d, 'y', sizeof d);
    tern_buf buf = {d, sizeof d};
    cr_assert_eq(tern_udp_send(loop, a, &buf, 1, SA(to), NULL, NULL), 0);
    cr_assert(run_until_count(loop, &r.n, 1, 10 * (int64_t)MS, 500));
    cr_assert_eq(r.len[0], 16, "the first datagram was cut to %zu bytes", r.len[0]);
    cr_assert_eq(tern_udp_send(loop, a, &buf, 1, SA(to), NULL, NULL), 0);
    cr_assert(run_until_count(loop, &r.n, 2, 10 * (int64_t)MS, 500));
    cr_assert_eq(r.len[1], sizeof d, "after asking for 256 bytes a datagram had %zu",
                 r.len[1]);
    cr_assert_eq(r.first[1], 'y');
    tern_id ids[] = {a, b};
    close_all(loop, ids, 2);
}

Test(udp_paths, a_refused_connect_changes_nothing, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    tern_id a = bind_ok(loop);
    struct sockaddr_storage bc = addr("255.255.255.255", 9);
    /* Without TERN_UDP_BROADCAST the kernel refuses the broadcast peer. */
    cr_assert_eq(tern_udp_connect(loop, a, SA(bc)), -EACCES);
    tern_buf buf = {one, 1};
    cr_assert_eq(tern_udp_send(loop, a, &buf, 1, NULL, NULL, NULL), -EDESTADDRREQ,
                 "a refused connect left the socket connected");
    cr_assert_eq(tern_udp_connect(loop, a, NULL), -ENOTCONN);
    tern_id ids[] = {a};
    close_all(loop, ids, 1);
}

Test(udp_paths, a_buffer_too_large_to_count_is_refused, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    tern_id a = bind_ok(loop), b = bind_ok(loop);
    struct sockaddr_storage to = where(loop, b);
    tern_buf bufs[2] = {{one, 1}, {one, SIZE_MAX / 2}};
    cr_assert_eq(tern_udp_send(loop, a, bufs, 2, SA(to), NULL, NULL), -EINVAL);
    size_t bytes = 1, count = 1;
    cr_assert_eq(tern_udp_send_queue_size(loop, a, &bytes, &count), 0);
    cr_assert_eq(count, 0);
    cr_assert_eq(bytes, 0);
    tern_id ids[] = {a, b};
    close_all(loop, ids, 2);
}

/* Enough sockets that the loop's table of ids grows while binding. */
#define BINDS 200

Test(udp_paths, a_bind_out_of_memory_at_any_step_leaves_nothing, .timeout = TEST_TIMEOUT)
{
    int before = count_open_fds_settled();
    tern_loop *loop = loop_new_tested();
    static tern_id ids[BINDS];
    unsigned failed = 0;
    for (unsigned i = 0; i < BINDS; i++) {
        for (uint64_t n = 1;; n++) {
            tern__fault_arm(TERN__FAULT_ALLOC, n);
            int rc = tern_udp_bind(loop, "127.0.0.1", 0, 0, &ids[i]);
            bool fired = tern__fault_fired();
            tern__fault_arm(0, 0);
            if (!fired) {
                cr_assert_eq(rc, 0, "bind %u failed on its own: %s", i, tern_err_name(rc));
                break;
            }
            cr_assert_eq(rc, -ENOMEM, "bind %u, allocation %llu: %s", i,
                         (unsigned long long)n, tern_err_name(rc));
            cr_assert_eq(loop_live(loop), i, "a refused bind left an operation live");
            failed++;
        }
    }
    cr_assert_gt(failed, BINDS, "no bind made more than one allocation: the table never grew");
    close_all(loop, ids, BINDS);
    cr_assert_eq(count_open_fds_settled(), before, "a refused bind left its socket open");
}

Test(udp_paths, a_socket_bound_without_its_id_is_closed_by_loop_free, .timeout = TEST_TIMEOUT)
{
    int before = count_open_fds_settled();
    tern_loop *loop = loop_new_tested();
    cr_assert_eq(tern_udp_bind(loop, "127.0.0.1", 0, 0, NULL), 0);
    cr_assert_eq(loop_live(loop), 1);
    tern_loop_free(loop);
    cr_assert_eq(count_open_fds_settled(), before, "loop_free left the socket open");
}
