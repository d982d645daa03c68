/*
 * The io_uring backend's sends (TERN__DO_SEND): a stream's queued writes
 * go to the kernel through the ring, so with sendmsg, sendto and writev
 * denied to the process a TCP or Unix stream still writes everything, in
 * order, each callback once: many small writes, a large write the kernel
 * takes in parts (a small send buffer), descriptors passed with their
 * bytes. A failed peer is EPIPE as on readiness; close and loop free with
 * a send in the kernel wait for its completion, then cancel the rest; a
 * queue that takes no entry makes the loop send by itself, and a cancel
 * it cannot take is owed; a kernel whose probe says nothing of sends
 * writes by readiness. tern_stream_try_write stays a system call.
 */
#include "uring_helpers.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include "backend.h"
#include "fault.h"

#ifdef TERN_HAVE_IO_URING

/* Every way tern could write socket fd by itself. */
static void deny_sends(int fd)
{
    static const long nrs[] = {__NR_sendmsg, __NR_sendto, __NR_writev, __NR_write};
    deny_syscalls(nrs, sizeof nrs / sizeof nrs[0], fd, EPERM);
}

/* A connected pair of TCP sockets on the loopback: *ours for tern, *peer
 * for the test (non-blocking). */
static void tcp_pair(int *ours, int *peer)
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(l, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    cr_assert_eq(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(l, 1), 0);
    cr_assert_eq(getsockname(l, (struct sockaddr *)&a, &al), 0);
    *peer = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(*peer, 0);
    cr_assert_eq(connect(*peer, (struct sockaddr *)&a, sizeof a), 0);
    *ours = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    cr_assert_geq(*ours, 0);
    close(l);
    cr_assert_eq(fcntl(*peer, F_SETFL, O_NONBLOCK), 0);
}

/* Keep the kernel's send buffer small, so a large write goes in parts. */
static void small_sndbuf(int fd)
{
    int v = 4096;
    cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v), 0);
}

static unsigned char pattern(size_t i)
{
    return (unsigned char)(i * 13 + i / 253);
}

/* Each write's callback: once, in order, with its status. */
#define WRITES_MAX 2048
struct writes;
struct wtag {
    struct writes *w;
    unsigned n;
};
struct writes {
    struct wtag tags[WRITES_MAX]; /* each write's callback argument */
    unsigned issued;
    atomic_uint called;
    int status[WRITES_MAX];
    unsigned order[WRITES_MAX];
    atomic_uint closed;
    unsigned writes_at_close; /* callbacks seen when the close callback ran */
};

static void write_cb(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop;
    (void)id;
    struct wtag *t = arg;
    unsigned k = atomic_load(&t->w->called);
    cr_assert_lt(k, t->w->issued, "more callbacks than writes");
    t->w->order[k] = t->n;
    t->w->status[k] = status;
    atomic_store(&t->w->called, k + 1);
}

static void close_cb(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    struct writes *w = arg;
    w->writes_at_close = atomic_load(&w->called);
    atomic_store(&w->closed, 1);
}

static int write_one(tern_loop *loop, tern_id id, struct writes *w, const void *p, size_t len)
{
    unsigned n = w->issued++;
    cr_assert_lt(n, WRITES_MAX);
    w->tags[n] = (struct wtag){w, n};
    tern_buf b = {.base = p, .len = len};
    return tern_stream_write(loop, id, &b, 1, write_cb, &w->tags[n]);
}

/* Every callback came once, in order; the statuses are zeros, then (from
 * the first that is not) all `rest`. */
static void check_writes(const struct writes *w, int rest)
{
    cr_assert_eq(atomic_load(&w->called), w->issued);
    bool failing = false;
    for (unsigned i = 0; i < w->issued; i++) {
        cr_assert_eq(w->order[i], i, "callback %u out of order", i);
        if (w->status[i] != 0)
            failing = true;
        cr_assert_eq(w->status[i], failing ? rest : 0, "write %u: %s", i, strerror(-w->status[i]));
    }
}

/* Read what the peer has now, checking the pattern; true at its end. */
static bool peer_take(int peer, size_t *got)
{
    unsigned char buf[65536];
    for (;;) {
        ssize_t n = read(peer, buf, sizeof buf);
        if (n == 0)
            return true;
        if (n < 0) {
            cr_assert(errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNRESET, "read: %s",
                      strerror(errno));
            return errno == ECONNRESET;
        }
        for (ssize_t i = 0; i < n; i++)
            cr_assert_eq(buf[i], pattern(*got + (size_t)i), "byte %zu wrong or out of order",
                         *got + (size_t)i);
        *got += (size_t)n;
    }
}

/* Turn the loop and read the peer until it has `want` bytes. */
static void pump_until(tern_loop *loop, int peer, size_t *got, size_t want)
{
    uint64_t give_up = mono_ns() + LIVENESS_NS;
    while (*got < want) {
        cr_assert_lt(mono_ns(), give_up, "the peer has %zu of %zu bytes", *got, want);
        tern_loop_run_once(loop, 1 * (int64_t)MS);
        (void)peer_take(peer, got);
    }
}

static unsigned char big[4 << 20];

static void fill_big(void)
{
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = pattern(i);
}

/*
 * With every send call denied to the process, many small writes and then
 * large ones through a small send buffer (the kernel takes them in parts,
 * and each send carries on where the last stopped) all arrive in order
 * and each callback runs once, in order, with 0. try_write stays a system
 * call of its own (denied here: it says so), and the write queue is what
 * it waits behind.
 */
Test(uring_send, writes_go_through_the_ring_in_order_and_in_parts)
{
    tern_loop *loop = uring_loop();
    fill_big();
    int ours, peer;
    tcp_pair(&ours, &peer);
    small_sndbuf(ours);
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, ours, &id), 0);
    deny_sends(ours);
    static struct writes w;
    size_t off = 0;
    for (unsigned i = 0; i < 1000; i++, off += 7)
        cr_assert_geq(write_one(loop, id, &w, big + off, 7), 0);
    tern_buf tb = {.base = big, .len = 1};
    cr_assert_eq(tern_stream_try_write(loop, id, &tb, 1), -EAGAIN, "writes are queued");
    size_t got = 0;
    pump_until(loop, peer, &got, off);
    cr_assert(run_until_count(loop, &w.called, w.issued, 10 * (int64_t)MS, 100));
    check_writes(&w, 0);
    cr_assert_eq(tern_stream_try_write(loop, id, &tb, 1), -EPERM,
                 "try_write is a system call of its own");
    /* Large writes, several buffers each, while others are queued behind. */
    for (unsigned i = 0; i < 4; i++) {
        size_t len = (sizeof big - off) / 4;
        tern_buf bufs[3] = {{big + off, len / 3},
                            {big + off + len / 3, len / 3},
                            {big + off + 2 * (len / 3), len - 2 * (len / 3)}};
        unsigned n = w.issued++;
        w.tags[n] = (struct wtag){&w, n};
        cr_assert_geq(tern_stream_write(loop, id, bufs, 3, write_cb, &w.tags[n]), 0);
        off += len;
    }
    pump_until(loop, peer, &got, off);
    cr_assert(run_until_count(loop, &w.called, w.issued, 10 * (int64_t)MS, 100));
    check_writes(&w, 0);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(peer);
}

/*
 * A shutdown asked behind queued writes happens after the last byte went
 * through the ring: the peer reads every byte, then the end.
 */
static atomic_uint shut_calls;
static int shut_status;

static void shut_cb(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
    shut_status = status;
    atomic_fetch_add(&shut_calls, 1);
}

Test(uring_send, a_shutdown_goes_after_the_queued_writes)
{
    tern_loop *loop = uring_loop();
    fill_big();
    int ours, peer;
    tcp_pair(&ours, &peer);
    small_sndbuf(ours);
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, ours, &id), 0);
    deny_sends(ours);
    static struct writes w;
    cr_assert_geq(write_one(loop, id, &w, big, 1 << 20), 0);
    cr_assert_geq(write_one(loop, id, &w, big + (1 << 20), 1 << 20), 0);
    cr_assert_eq(tern_stream_shutdown(loop, id, shut_cb, NULL), 0);
    size_t got = 0;
    uint64_t give_up = mono_ns() + LIVENESS_NS;
    bool end = false;
    while (!end) {
        cr_assert_lt(mono_ns(), give_up, "the peer has %zu bytes and no end", got);
        tern_loop_run_once(loop, 1 * (int64_t)MS);
        end = peer_take(peer, &got);
    }
    cr_assert_eq(got, (size_t)2 << 20, "the shutdown overtook queued bytes");
    cr_assert(run_until_count(loop, &shut_calls, 1, 10 * (int64_t)MS, 100));
    cr_assert_eq(shut_status, 0);
    cr_assert_eq(atomic_load(&shut_calls), 1);
    check_writes(&w, 0);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(peer);
}

/*
 * Descriptors ride with their write's first byte in the ring's sendmsg:
 * the peer receives the bytes in order and each descriptor with its
 * write, and tern's duplicates are closed once sent.
 */
Test(uring_send, descriptors_pass_with_their_bytes)
{
    tern_loop *loop = uring_loop();
    fill_big();
    int sp[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    int pipe_fds[2];
    make_pipe(pipe_fds);
    int before = count_open_fds();
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, sp[0], &id), 0);
    deny_sends(sp[0]);
    static struct writes w;
    cr_assert_geq(write_one(loop, id, &w, big, 100), 0);
    for (unsigned i = 0; i < 3; i++) {
        unsigned n = w.issued++;
        w.tags[n] = (struct wtag){&w, n};
        tern_buf b = {.base = big + 100 + i * 10, .len = 10};
        cr_assert_eq(tern_unix_write_fds(loop, id, &b, 1, &pipe_fds[1], 1, write_cb, &w.tags[n]),
                     0);
    }
    cr_assert(run_until_count(loop, &w.called, w.issued, 10 * (int64_t)MS, 200));
    check_writes(&w, 0);
    /* The peer: 100 bytes alone, then each 10 with one descriptor. */
    unsigned char buf[200];
    size_t got = 0;
    unsigned fds = 0;
    while (got < 130) {
        union {
            char b[CMSG_SPACE(sizeof(int) * 4)];
            struct cmsghdr align;
        } cbuf;
        struct iovec v = {buf, got < 100 ? 100 - got : 130 - got};
        struct msghdr m = {
            .msg_iov = &v, .msg_iovlen = 1, .msg_control = cbuf.b, .msg_controllen = sizeof cbuf.b};
        ssize_t n = recvmsg(sp[1], &m, MSG_CMSG_CLOEXEC);
        cr_assert_gt(n, 0, "recvmsg: %s", strerror(errno));
        for (ssize_t i = 0; i < n; i++)
            cr_assert_eq(buf[i], pattern(got + (size_t)i));
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c != NULL; c = CMSG_NXTHDR(&m, c)) {
            cr_assert_eq(c->cmsg_type, SCM_RIGHTS);
            cr_assert_geq(got, 100, "a descriptor came with the plain write's bytes");
            int fd;
            memcpy(&fd, CMSG_DATA(c), sizeof fd);
            close(fd);
            fds++;
        }
        got += (size_t)n;
    }
    cr_assert_eq(fds, 3);
    cr_assert_eq(count_open_fds(), before, "tern's duplicates were not closed once sent");
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(sp[1]);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
}

/* A stream whose send is stuck in the kernel: the peer reads nothing and
 * the writes are far more than both sides' buffers hold. */
static tern_id stuck_stream(tern_loop *loop, int *peer, struct writes *w)
{
    fill_big();
    int ours;
    tcp_pair(&ours, peer);
    small_sndbuf(ours);
    int v = 4096;
    cr_assert_eq(setsockopt(*peer, SOL_SOCKET, SO_RCVBUF, &v, sizeof v), 0);
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, ours, &id), 0);
    cr_assert_eq(tern_stream_on_close(loop, id, close_cb, w), 0);
    for (unsigned i = 0; i < 4; i++)
        cr_assert_geq(write_one(loop, id, w, big + i * (1 << 20), 1 << 20), 0);
    for (int t = 0; t < 5; t++)
        tern_loop_run_once(loop, 1 * (int64_t)MS);
    cr_assert_lt(atomic_load(&w->called), w->issued, "nothing is stuck");
    return id;
}

/*
 * Closing a stream with a send in the kernel cancels it and waits for its
 * completion: then each write's callback runs once, in order (0 for what
 * the kernel took whole, -ECANCELED for the rest), and the close callback
 * after them all; the peer sees the end.
 */
Test(uring_send, a_close_with_a_send_in_the_kernel_waits_for_it)
{
    tern_loop *loop = uring_loop();
    int peer;
    static struct writes w;
    tern_id id = stuck_stream(loop, &peer, &w);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_count(loop, &w.closed, 1, 10 * (int64_t)MS, 500));
    check_writes(&w, -ECANCELED);
    cr_assert_eq(w.writes_at_close, w.issued, "the close callback came before a write's");
    cr_assert_neq(w.status[w.issued - 1], 0);
    size_t got = 0;
    uint64_t give_up = mono_ns() + LIVENESS_NS;
    while (!peer_take(peer, &got))
        cr_assert_lt(mono_ns(), give_up, "the peer never saw the end");
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(peer);
}

/* The same, freeing the loop at once: every callback once, nothing left. */
Test(uring_send, a_loop_freed_with_a_send_in_the_kernel_frees_everything)
{
    int before = count_open_fds();
    tern_loop *loop = uring_loop();
    int peer;
    static struct writes w;
    (void)stuck_stream(loop, &peer, &w);
    tern_loop_free(loop);
    check_writes(&w, -ECANCELED);
    cr_assert_eq(atomic_load(&w.closed), 1);
    close(peer);
    cr_assert_eq(count_open_fds_settled(), before);
}

/*
 * A peer that is gone: the send's -EPIPE (or -ECONNRESET) fails the write
 * and every write behind it, as a sendmsg's would; later writes say
 * -EPIPE at once.
 */
Test(uring_send, a_gone_peer_fails_the_writes_as_sendmsg_would)
{
    tern_loop *loop = uring_loop();
    fill_big();
    int ours, peer;
    tcp_pair(&ours, &peer);
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, ours, &id), 0);
    unsigned char junk = 1;
    cr_assert_eq(write(ours, &junk, 1), 1); /* unread at close: the peer resets */
    close(peer);
    deny_sends(ours);
    static struct writes w;
    /* The first send may still be taken; the reset comes back to a later one. */
    uint64_t give_up = mono_ns() + LIVENESS_NS;
    while (atomic_load(&w.called) == w.issued || w.status[w.issued - 1] == 0) {
        cr_assert_lt(mono_ns(), give_up);
        if (atomic_load(&w.called) == w.issued) {
            int rc = write_one(loop, id, &w, big, 1000);
            if (rc == -EPIPE) {
                w.issued--;
                break;
            }
            cr_assert_geq(rc, 0);
        }
        tern_loop_run_once(loop, 1 * (int64_t)MS);
    }
    cr_assert(run_until_count(loop, &w.called, w.issued, 10 * (int64_t)MS, 100));
    int last = w.status[w.issued - 1];
    cr_assert(last == -EPIPE || last == -ECONNRESET, "%s", strerror(-last));
    check_writes(&w, last);
    cr_assert_eq(write_one(loop, id, &w, big, 1), -EPIPE);
    w.issued--;
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}

/*
 * A queue that takes no entry: the write is made by the loop's own
 * sendmsg (so with sendmsg denied it fails with EPERM, which a send
 * through the ring would not), nothing else changes; the next write goes
 * through the ring again.
 */
Test(uring_send, a_refused_entry_sends_by_itself)
{
    tern_loop *loop = uring_loop();
    fill_big();
    int ours, peer;
    tcp_pair(&ours, &peer);
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, ours, &id), 0);
    static struct writes w;
    tern__uring_refuse_entries(1);
    cr_assert_eq(write_one(loop, id, &w, big, 100), 0);
    cr_assert(run_until_count(loop, &w.called, 1, 10 * (int64_t)MS, 100));
    size_t got = 0;
    pump_until(loop, peer, &got, 100);
    deny_sends(ours);
    tern__uring_refuse_entries(1);
    cr_assert_eq(write_one(loop, id, &w, big + 100, 100), 0);
    cr_assert(run_until_count(loop, &w.called, 2, 10 * (int64_t)MS, 100));
    cr_assert_eq(w.status[1], -EPERM, "the refused send did not fall back to sendmsg");
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(peer);
}

/*
 * A close whose cancel the queue cannot take: the cancel is owed and goes
 * with the next wait; the writes then complete as on any close, and a
 * loop freed right after sends it too.
 */
Test(uring_send, a_cancel_the_queue_cannot_take_is_owed)
{
    tern_loop *loop = uring_loop();
    int peer;
    static struct writes w;
    tern_id id = stuck_stream(loop, &peer, &w);
    tern__uring_refuse_entries(1);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_count(loop, &w.closed, 1, 10 * (int64_t)MS, 500));
    check_writes(&w, -ECANCELED);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(peer);

    int before = count_open_fds();
    loop = uring_loop();
    static struct writes w2;
    id = stuck_stream(loop, &peer, &w2);
    tern__uring_refuse_entries(1);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    tern_loop_free(loop);
    check_writes(&w2, -ECANCELED);
    close(peer);
    cr_assert_eq(count_open_fds_settled(), before);
}

/*
 * A descriptor whose earlier stream still owes its send's cancel: a new
 * stream on the same number sends by itself until the cancel went.
 */
Test(uring_send, a_new_stream_on_a_descriptor_owing_a_cancel)
{
    tern_loop *loop = uring_loop();
    int peer;
    static struct writes w;
    tern_id id = stuck_stream(loop, &peer, &w);
    int fd = tern_stream_fd(loop, id);
    tern__uring_refuse_entries(1);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    int ours, peer2;
    tcp_pair(&ours, &peer2);
    if (peer2 == fd) { /* the number is for ours */
        peer2 = dup(peer2);
        cr_assert_geq(peer2, 0);
    }
    if (ours != fd) {
        cr_assert_eq(dup2(ours, fd), fd);
        close(ours);
    }
    tern_id id2;
    cr_assert_eq(tern_stream_open(loop, fd, &id2), 0);
    static struct writes w2;
    tern__uring_refuse_entries(1); /* the owed cancel cannot go yet: sent by the loop */
    cr_assert_eq(write_one(loop, id2, &w2, big, 100), 0);
    cr_assert_eq(write_one(loop, id2, &w2, big + 100, 100), 0);
    size_t got = 0;
    pump_until(loop, peer2, &got, 200);
    cr_assert(run_until_count(loop, &w2.called, 2, 10 * (int64_t)MS, 100));
    check_writes(&w2, 0);
    cr_assert(run_until_count(loop, &w.closed, 1, 10 * (int64_t)MS, 500));
    check_writes(&w, -ECANCELED);
    cr_assert_eq(tern_stream_close(loop, id2), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(peer);
    close(peer2);
}

/*
 * The stream fault seam sits before each send: an injected -EAGAIN makes
 * the write wait for room by readiness, then go through the ring; an
 * injected error fails the queue as a sendmsg's would.
 */
Test(uring_send, the_stream_fault_seam_walks_the_send)
{
    tern_loop *loop = uring_loop();
    fill_big();
    int ours, peer;
    tcp_pair(&ours, &peer);
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, ours, &id), 0);
    static struct writes w;
    tern__fault_net_errno(-EAGAIN);
    tern__fault_arm(TERN__FAULT_STREAM, 1);
    cr_assert_eq(write_one(loop, id, &w, big, 100), 0);
    cr_assert(tern__fault_fired());
    tern__fault_arm(0, 0);
    deny_sends(ours);
    size_t got = 0;
    pump_until(loop, peer, &got, 100);
    cr_assert(run_until_count(loop, &w.called, 1, 10 * (int64_t)MS, 100));
    tern__fault_net_errno(-ECONNRESET);
    tern__fault_arm(TERN__FAULT_STREAM, 1);
    cr_assert_eq(write_one(loop, id, &w, big + 100, 100), 0);
    tern__fault_arm(0, 0);
    cr_assert(run_until_count(loop, &w.called, 2, 10 * (int64_t)MS, 100));
    check_writes(&w, -ECONNRESET);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(peer);
}

static void *one_turn(void *arg)
{
    tern_loop_run_once(arg, 0);
    return NULL;
}

/*
 * A send submitted by a thread that has since exited (a loop run by one
 * thread after another) still completes for the loop: whether the kernel
 * finishes it or ends it with -ECANCELED (not asked for, which fails
 * nothing), the next send carries on from what it took, and the peer gets
 * every byte in order.
 */
Test(uring_send, a_send_made_by_a_thread_that_exited_carries_on)
{
    tern_loop *loop = uring_loop();
    fill_big();
    int ours, peer;
    tcp_pair(&ours, &peer);
    small_sndbuf(ours);
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, ours, &id), 0);
    static struct writes w;
    cr_assert_geq(write_one(loop, id, &w, big, 1 << 20), 0);
    /* The socket fills; the send that carries on is queued, not submitted. */
    for (int i = 0; i < 3; i++)
        tern_loop_run_once(loop, 1 * (int64_t)MS);
    cr_assert_eq(atomic_load(&w.called), 0);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, one_turn, loop), 0); /* it submits the send */
    cr_assert_eq(pthread_join(t, NULL), 0);
    size_t got = 0;
    pump_until(loop, peer, &got, 1 << 20);
    cr_assert(run_until_count(loop, &w.called, 1, 10 * (int64_t)MS, 100));
    check_writes(&w, 0);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(peer);
}

static void *sink_alloc(tern_loop *loop, tern_id id, size_t *len, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
    static char mem[4096];
    *len = sizeof mem;
    return mem;
}

static void sink_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                      void *arg)
{
    (void)loop;
    (void)id;
    (void)status;
    (void)data;
    (void)len;
    (void)arg;
}

/*
 * A peer that resets while a send is stuck in the kernel and the stream
 * reads by readiness (into the caller's memory): the watcher's error and
 * the send's failure may come in either order; the writes fail once each,
 * in order, with the reset.
 */
Test(uring_send, a_reset_with_a_send_in_the_kernel_fails_the_writes_once)
{
    tern_loop *loop = uring_loop();
    int peer;
    static struct writes w;
    tern_id id = stuck_stream(loop, &peer, &w);
    cr_assert_eq(tern_stream_read_start_alloc(loop, id, sink_alloc, sink_read, NULL), 0);
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    cr_assert_eq(setsockopt(peer, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
    close(peer); /* a reset */
    cr_assert(run_until_count(loop, &w.called, w.issued, 10 * (int64_t)MS, 500));
    int last = w.status[w.issued - 1];
    cr_assert(last == -EPIPE || last == -ECONNRESET, "%s", strerror(-last));
    check_writes(&w, last);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}

/*
 * A close that owes both a watcher's removal and a send's cancel for one
 * descriptor (the queue takes neither): both go with the next wait, and
 * the writes and the close complete as on any close.
 */
Test(uring_send, a_close_owing_a_removal_and_a_cancel_sends_both)
{
    tern_loop *loop = uring_loop();
    int peer;
    static struct writes w;
    tern_id id = stuck_stream(loop, &peer, &w);
    cr_assert_eq(tern_stream_read_start_alloc(loop, id, sink_alloc, sink_read, NULL), 0);
    tern_loop_run_once(loop, 0);
    tern__uring_refuse_entries(2);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    tern__uring_refuse_entries(0);
    cr_assert(run_until_count(loop, &w.closed, 1, 10 * (int64_t)MS, 500));
    check_writes(&w, -ECANCELED);
    size_t got = 0;
    uint64_t give_up = mono_ns() + LIVENESS_NS;
    while (!peer_take(peer, &got))
        cr_assert_lt(mono_ns(), give_up, "the peer never saw the end");
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(peer);
}

/*
 * A kernel whose probe says nothing of sends (here: io_uring_register
 * denied, as a filter may) leaves the loop on io_uring and its streams
 * writing by readiness: with sendmsg denied on the socket too, the write
 * fails with EPERM, where a send through the ring would have gone.
 */
Test(uring_send, without_the_probe_streams_write_by_readiness)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    static const long nrs[] = {__NR_io_uring_register};
    deny_syscalls(nrs, 1, -1, EPERM);
    tern_loop *loop = uring_loop();
    fill_big();
    int ours, peer;
    tcp_pair(&ours, &peer);
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, ours, &id), 0);
    deny_sends(ours);
    static struct writes w;
    cr_assert_geq(write_one(loop, id, &w, big, 1000), 0);
    cr_assert(run_until_count(loop, &w.called, 1, 10 * (int64_t)MS, 100));
    check_writes(&w, -EPERM);
    cr_assert_eq(w.status[0], -EPERM);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(peer);
}

#else

Test(uring_send, not_built)
{
    cr_skip_test("built without io_uring");
}

#endif
