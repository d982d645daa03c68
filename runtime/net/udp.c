/*
 * UDP sockets: the record's life (bind, close, free), receiving in
 * batches, and the dispatch hook that delivers everything a socket owes.
 *
 * Hazards, named where they are handled:
 *  - A receive callback may close the socket, stop receiving, or start
 *    again with a larger size (a new buffer) while the rest of its batch
 *    waits in the old one. Closing or stopping drops the rest of the
 *    batch (those datagrams are gone, as if the kernel had dropped them);
 *    a buffer replaced during the batch is freed after it (`rbuf_busy`).
 *  - Nothing frees the record inside a callback: closing only marks it
 *    and queues it, and tern__op_finish() at the end of the dispatch that
 *    ran the close callback frees it, as for streams.
 *  - The descriptor is closed only after its watcher stopped, so the
 *    process-wide fd registry never names a closed fd.
 *
 * Receive errors are not the end of a datagram socket: an ICMP refusal on
 * a connected socket, or ENOBUFS, is told to the callback and receiving
 * goes on.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "admit.h"
#include "container.h"
#include "udp_p.h"

static void udp_dispatch(tern_loop *loop, struct tern__op *op);
static int udp_cancel(tern_loop *loop, struct tern__op *op);
static void udp_free(tern_loop *loop, struct tern__op *op);
static void udp_completed(tern_loop *loop, struct tern__op *op, const struct tern__done *d);

const struct tern__op_class tern__udp_class = {
    .name = "udp",
    .dispatch = udp_dispatch,
    .cancel = udp_cancel,
    .free = udp_free,
    .completed = udp_completed,
    .refable = true,
    .kind = TERN__KIND_UDP,
};

/* A send callback that sends again is served in the next turn after this
 * many completions, so it cannot starve the other operations. */
#define DISPATCH_BUDGET 256

/* ------------------------------------------------------------------ */
/* The watcher                                                         */
/* ------------------------------------------------------------------ */

/* Step 4: note what the backend reported; the dispatch acts on it. */
static void udp_fired(tern_loop *loop, struct tern__io *io, unsigned events)
{
    struct tern__udp *u = tern__container_of(io, struct tern__udp, io);
    u->io_revents |= events;
    tern__op_ready(loop, &u->op);
}

/* ------------------------------------------------------------------ */
/* Receiving                                                           */
/* ------------------------------------------------------------------ */

static bool still_receiving(const struct tern__udp *u)
{
    return (u->state & (TERN__U_RECEIVING | TERN__U_CLOSING)) == TERN__U_RECEIVING;
}

/* Hand one datagram (or an error) to the callback. */
static void deliver(struct tern__udp *u, const void *data, size_t len,
                    const struct sockaddr_storage *from, int msg_flags)
{
    unsigned flags = (msg_flags & MSG_TRUNC) ? TERN_UDP_TRUNCATED : 0;
    u->recv_cb(u->loop, u->op.id, 0, data, len, (const struct sockaddr *)from, flags, u->recv_arg);
}

/* A failed receive: EAGAIN ends the batch quietly, anything else is told. */
static void recv_failed(struct tern__udp *u, int err)
{
    if (err == -EAGAIN || err == -EWOULDBLOCK)
        return;
    u->recv_cb(u->loop, u->op.id, err, NULL, 0, NULL, 0, u->recv_arg);
}

/* One batch of up to TERN_UDP_BATCH datagrams, each into its slot. */
static void receive_batch(struct tern__udp *u, unsigned char *buf, size_t slot)
{
    struct tern__dgram d[TERN_UDP_BATCH];
    struct iovec iov[TERN_UDP_BATCH];
    struct sockaddr_storage from[TERN_UDP_BATCH];
    for (unsigned i = 0; i < TERN_UDP_BATCH; i++) {
        iov[i] = (struct iovec){.iov_base = buf + i * slot, .iov_len = u->recv_len};
        d[i].hdr = (struct msghdr){.msg_name = &from[i],
                                   .msg_namelen = sizeof(from[i]),
                                   .msg_iov = &iov[i],
                                   .msg_iovlen = 1};
    }
    int err;
    int n = tern__recv_dgrams(u->fd, d, TERN_UDP_BATCH, &err);
    for (int i = 0; i < n && still_receiving(u); i++)
        deliver(u, iov[i].iov_base, d[i].len, &from[i], d[i].hdr.msg_flags);
    if (err != 0 && still_receiving(u))
        recv_failed(u, err);
}

/*
 * Receiving through the backend (TERN__DO_UDP_RECV): the kernel receives
 * into the backend's buffers while the socket is receiving, and each
 * datagram waits in the landed list until the dispatch hands it to the
 * callback; its buffer goes back when the callback returns. Stopping
 * cancels the receive; what the kernel took before it stays landed and
 * is delivered first when receiving starts again, so nothing is lost or
 * reordered. Closing drops what landed (as the kernel's queue is dropped
 * with the socket). The callback sees what readiness gives it: a datagram
 * longer than the receive size cut to it and flagged TERN_UDP_TRUNCATED.
 */
static void udp_completed(tern_loop *loop, struct tern__op *op, const struct tern__done *d)
{
    struct tern__udp *u = (struct tern__udp *)op;
    if (d->sent) {
        tern__udp_sent(u, d);
        return;
    }
    if (d->data == NULL) { /* the receive ended: told after what landed, then started again */
        TERN_INSIST(d->final && u->recv_on);
        u->recv_on = false;
        TERN_DECREMENT(loop->io_count);
        u->ring_error = d->res;
        tern__udp_owe(u);
        return;
    }
    if (u->state & TERN__U_CLOSING) { /* taken before the close's cancel: nobody's */
        loop->backend.ops->recycle(&loop->backend, d->buf);
        return;
    }
    loop->landed[d->buf] = (struct tern__landed){.data = d->data,
                                                 .ctl = d->from,
                                                 .ctllen = d->fromlen,
                                                 .len = (uint32_t)d->res,
                                                 .next = TERN__LANDED_NONE,
                                                 .truncated = d->truncated};
    if (u->land_head == TERN__LANDED_NONE)
        u->land_head = d->buf;
    else
        loop->landed[u->land_tail].next = d->buf;
    u->land_tail = d->buf;
    if (u->state & TERN__U_RECEIVING)
        tern__udp_owe(u);
}

/* Every landed datagram in order, each buffer back once its callback
 * returned; then a receive's end, told as a readiness error is. */
static void deliver_landed(struct tern__udp *u)
{
    tern_loop *loop = u->loop;
    while (u->land_head != TERN__LANDED_NONE && still_receiving(u)) {
        uint32_t buf = u->land_head;
        const struct tern__landed *l = &loop->landed[buf];
        u->land_head = l->next;
        size_t len = l->len;
        unsigned flags = l->truncated ? TERN_UDP_TRUNCATED : 0;
        if (len > u->recv_len) {
            len = u->recv_len;
            flags |= TERN_UDP_TRUNCATED;
        }
        u->recv_cb(loop, u->op.id, 0, l->data, len, (const struct sockaddr *)l->ctl, flags,
                   u->recv_arg);
        loop->backend.ops->recycle(&loop->backend, buf);
    }
    if (u->land_head == TERN__LANDED_NONE && u->ring_error != 0 && still_receiving(u)) {
        int err = u->ring_error;
        u->ring_error = 0;
        recv_failed(u, err);
        tern__udp_rewatch(u); /* receiving goes on */
    }
}

/* What landed and was never delivered goes back: the socket closes. */
static void drop_landed(struct tern__udp *u)
{
    while (u->land_head != TERN__LANDED_NONE) {
        uint32_t buf = u->land_head;
        u->land_head = u->loop->landed[buf].next;
        u->loop->backend.ops->recycle(&u->loop->backend, buf);
    }
    u->ring_error = 0;
}

static void receive(struct tern__udp *u)
{
    unsigned char *buf = u->rbuf;
    size_t slot = u->rbuf_slot;
    u->rbuf = NULL; /* busy: a recv_start meanwhile allocates a new one */
    receive_batch(u, buf, slot);
    if (u->rbuf == NULL) {
        u->rbuf = buf;
    } else {
        tern__free_lazy(buf, TERN_UDP_BATCH, slot);
    }
}

/* Allocate (or grow) the receive buffer for datagrams of len bytes. */
static int ensure_rbuf(struct tern__udp *u, size_t len)
{
    size_t slot = (len + 63) & ~(size_t)63;
    if (u->rbuf != NULL && u->rbuf_slot >= slot)
        return 0;
    unsigned char *buf = tern__calloc_lazy(TERN_UDP_BATCH, slot);
    if (buf == NULL)
        return -ENOMEM;
    if (u->rbuf != NULL)
        tern__free_lazy(u->rbuf, TERN_UDP_BATCH, u->rbuf_slot);
    /* While a batch is being delivered u->rbuf is NULL and the busy buffer
     * is receive()'s to free; the new one replaces it after the batch. */
    u->rbuf = buf;
    u->rbuf_slot = slot;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Dispatch and close                                                  */
/* ------------------------------------------------------------------ */

static bool owes(const struct tern__udp *u)
{
    return u->done != NULL || (u->state & TERN__U_DRAIN_DUE) || u->recv_error != 0 ||
           ((u->land_head != TERN__LANDED_NONE || u->ring_error != 0) && still_receiving(u));
}

/* Sends are queued, the socket is open, and no writable watch will flush
 * them: this dispatch sends them. */
static bool flush_due(const struct tern__udp *u)
{
    return u->sq != NULL && !(u->state & TERN__U_CLOSING) && !(u->io.events & TERN_WRITABLE) &&
           u->ring_sends == 0;
}

/*
 * Step 2. Order: what the watcher reported (a batch of datagrams to the
 * receive callback, a flush of the send queue), then the flush of what
 * those callbacks sent, then the completed sends' callbacks in order, the
 * drain callback, and finally, once closed and owing nothing else, the
 * close callback, after which the record goes.
 */
static void udp_dispatch(tern_loop *loop, struct tern__op *op)
{
    struct tern__udp *u = (struct tern__udp *)op;
    tern_id id = op->id;
    unsigned ev = u->io_revents & (u->io.events | TERN_HANGUP | TERN_ERROR);
    u->io_revents = 0;
    u->state |= TERN__U_DISPATCH;
    /* What the backend received came before anything readiness reads now. */
    if (still_receiving(u))
        deliver_landed(u);
    /* A closing socket has no reports: closing stopped its watcher, which
     * dropped them (tern__udp_watch clears io_revents). */
    if (ev != 0) {
        if (tern__udp_wanted(u) == 0) {
            tern__udp_watch(u, 0); /* interest dropped lazily: stop now */
        } else {
            if (u->sq != NULL && (ev & (TERN_WRITABLE | TERN_ERROR)))
                tern__udp_flush(u);
            /* Never beside the backend's receive: both would take datagrams. */
            if (still_receiving(u) && !u->recv_on &&
                (ev & (TERN_READABLE | TERN_HANGUP | TERN_ERROR)))
                receive(u);
        }
    }
    /* Receiving ended because the watcher could not be changed. */
    if (u->recv_error != 0) {
        int err = u->recv_error;
        u->recv_error = 0;
        if (!(u->state & TERN__U_CLOSING))
            u->recv_cb(loop, id, err, NULL, 0, NULL, 0, u->recv_arg);
    }
    /* Sends queued by the receive callback leave together; then their
     * callbacks run, and what those send leaves together too. */
    if (flush_due(u))
        tern__udp_flush(u);
    tern__udp_deliver(u, DISPATCH_BUDGET);
    if (flush_due(u))
        tern__udp_flush(u);
    u->state &= ~TERN__U_DISPATCH;
    if (u->done == NULL && (u->state & TERN__U_DRAIN_DUE)) {
        u->state &= ~TERN__U_DRAIN_DUE;
        if (u->drain_cb != NULL && !(u->state & TERN__U_CLOSING))
            u->drain_cb(loop, id, u->drain_arg);
        if (flush_due(u))
            tern__udp_flush(u);
    }
    if (owes(u) || flush_due(u)) {
        tern__udp_owe(u); /* the rest in the next turn */
        return;
    }
    /* Once closed, the close callback waits for the sends in the kernel. */
    if ((u->state & (TERN__U_CLOSING | TERN__U_CLOSE_RAN)) == TERN__U_CLOSING &&
        u->ring_sends == 0) {
        u->state |= TERN__U_CLOSE_RAN;
        if (u->close_cb != NULL)
            u->close_cb(loop, id, u->close_arg);
        tern__op_finish(loop, &u->op);
    }
}

/* The shared body of tern_udp_close and the cancel hook. */
static int udp_close(struct tern__udp *u)
{
    if (u->state & TERN__U_CLOSING)
        return -ENOENT;
    u->state = (u->state & ~TERN__U_RECEIVING) | TERN__U_CLOSING;
    tern__udp_watch(u, 0);
    /* The kernel's receive and sends are cancelled before the descriptor
     * closes; the sends' completions then complete their datagrams. */
    (void)tern__udp_recv_sync(u); /* a stop */
    drop_landed(u);
    if (u->ring_sends > 0)
        u->loop->backend.ops->send_cancel(&u->loop->backend, u->fd, u->op.id);
    close(u->fd);
    u->fd = -1;
    tern__udp_fail_all(u, -ECANCELED);
    u->state &= ~TERN__U_DRAIN_DUE;
    /* The close callback is owed: keep run() turning until it is delivered. */
    tern__op_set_ref(u->loop, &u->op, true);
    tern__udp_owe(u);
    return 0;
}

static int udp_cancel(tern_loop *loop, struct tern__op *op)
{
    (void)loop;
    return udp_close((struct tern__udp *)op);
}

static void udp_free(tern_loop *loop, struct tern__op *op)
{
    (void)loop;
    struct tern__udp *u = (struct tern__udp *)op;
    TERN_INSIST(u->fd < 0 && !tern__io_active(&u->io));
    /* Closing failed every queued send and its dispatch delivered them all
     * before the close callback: nothing is left to free. */
    TERN_INSIST(u->sq == NULL && u->done == NULL);
    if (u->rbuf != NULL)
        tern__free_lazy(u->rbuf, TERN_UDP_BATCH, u->rbuf_slot);
    tern__free(u->ring_msgs);
    tern__free(u);
}

/* ------------------------------------------------------------------ */
/* Binding                                                             */
/* ------------------------------------------------------------------ */

int tern_sockaddr_parse(const char *host, unsigned port, struct sockaddr_storage *out)
{
    TERN_REQUIRE(host != NULL && out != NULL);
    if (port > 65535)
        return -EINVAL;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons((uint16_t)port);
    } else if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
    } else {
        return -EINVAL;
    }
    *out = ss;
    return 0;
}

static int set_flag(int fd, int level, int name)
{
    int one = 1, rc = tern__net_fault();
    if (rc == 0 && setsockopt(fd, level, name, &one, sizeof(one)) < 0)
        rc = -errno;
    return rc;
}

/* The address a bind names, and whether the flags can apply to it:
 * checked before the loop admits the socket, so an address that can never
 * bind is -EINVAL (or -ENOTSUP) even on a loop at max_operations. */
static int bind_address(const char *host, unsigned port, unsigned flags,
                        struct sockaddr_storage *out)
{
    struct sockaddr_storage ss;
    int rc;
    if (host == NULL) {
        memset(&ss, 0, sizeof(ss));
        struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
        in4->sin_family = AF_INET;
        in4->sin_addr.s_addr = htonl(INADDR_ANY);
        in4->sin_port = htons((uint16_t)port);
    } else if ((rc = tern_sockaddr_parse(host, port, &ss)) < 0) {
        return rc;
    }
#ifndef SO_REUSEPORT
    if (flags & TERN_UDP_REUSEPORT)
        return -ENOTSUP;
#endif
    if ((flags & TERN_UDP_IPV6ONLY) && ss.ss_family != AF_INET6)
        return -EINVAL;
    *out = ss;
    return 0;
}

static int open_socket(const struct sockaddr_storage *addr, unsigned flags)
{
    struct sockaddr_storage ss = *addr;
    int fd = tern__socket(ss.ss_family, SOCK_DGRAM);
    if (fd < 0)
        return fd;
    int rc = 0;
    if (flags & TERN_UDP_REUSEADDR)
        rc = set_flag(fd, SOL_SOCKET, SO_REUSEADDR);
#ifdef SO_REUSEPORT
    if (rc == 0 && (flags & TERN_UDP_REUSEPORT))
        rc = set_flag(fd, SOL_SOCKET, SO_REUSEPORT);
#endif
    if (rc == 0 && (flags & TERN_UDP_IPV6ONLY))
        rc = set_flag(fd, IPPROTO_IPV6, IPV6_V6ONLY);
    if (rc == 0)
        rc = tern__net_fault();
    socklen_t len =
        ss.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    if (rc == 0 && bind(fd, (struct sockaddr *)&ss, len) < 0)
        rc = -errno;
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

int tern_udp_bind(tern_loop *loop, const char *host, unsigned port, unsigned flags, tern_id *idp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (port > 65535 ||
        (flags & ~(unsigned)(TERN_UDP_REUSEADDR | TERN_UDP_REUSEPORT | TERN_UDP_IPV6ONLY)))
        return -EINVAL;
    struct sockaddr_storage addr;
    int rc = bind_address(host, port, flags, &addr);
    if (rc < 0)
        return rc;
    if ((rc = tern__op_admit(loop)) < 0)
        return rc;
    struct tern__udp *u = tern__calloc(1, sizeof(*u));
    if (u == NULL) {
        tern__op_unadmit(loop);
        return -ENOMEM;
    }
    int fd = open_socket(&addr, flags);
    if (fd < 0) {
        tern__op_unadmit(loop);
        tern__free(u);
        return fd;
    }
    /* The family decides every later address's size: it must be read. */
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
        rc = -errno;
        tern__op_unadmit(loop);
        close(fd);
        tern__free(u);
        return rc;
    }
    u->loop = loop;
    u->fd = fd;
    u->family = ss.ss_family;
    u->sq_tail = &u->sq;
    u->done_tail = &u->done;
    u->land_head = u->land_tail = TERN__LANDED_NONE;
    u->high_water = (size_t)1 << 20;
    tern__io_init(&u->io, udp_fired);
    if ((rc = tern__op_add(loop, &u->op, &tern__udp_class)) < 0) {
        tern__op_unadmit(loop);
        close(fd);
        tern__free(u);
        return rc;
    }
    if (idp != NULL)
        *idp = u->op.id;
    return 0;
}

/* ------------------------------------------------------------------ */
/* The public calls                                                    */
/* ------------------------------------------------------------------ */

int tern_udp_recv_start(tern_loop *loop, tern_id id, size_t max_len, tern_udp_recv_cb cb, void *arg)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (cb == NULL || max_len > TERN__UDP_RECV_MAX)
        return -EINVAL;
    struct tern__udp *u = tern__udp_get(loop, id);
    if (u == NULL)
        return -ENOENT;
    if (max_len == 0)
        max_len = TERN__UDP_RECV_MAX;
    int rc = ensure_rbuf(u, max_len);
    if (rc < 0)
        return rc;
    unsigned old = u->state;
    size_t old_len = u->recv_len;
    u->state |= TERN__U_RECEIVING;
    u->recv_len = max_len; /* decides whether the backend's buffers can hold them */
    if ((rc = tern__udp_recv_sync(u)) < 0 || (rc = tern__udp_watch(u, tern__udp_wanted(u))) < 0) {
        u->state = old;
        u->recv_len = old_len;
        (void)tern__udp_recv_sync(u); /* back as it was: a stop, or a start that was on */
        return rc;
    }
    u->recv_error = 0; /* a start supersedes an end not yet told */
    u->recv_cb = cb;
    u->recv_arg = arg;
    if (owes(u)) /* datagrams landed before a stop */
        tern__udp_owe(u);
    return 0;
}

int tern_udp_recv_stop(tern_loop *loop, tern_id id)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    struct tern__udp *u = tern__udp_get(loop, id);
    if (u == NULL)
        return -ENOENT;
    u->state &= ~TERN__U_RECEIVING;
    tern__udp_rewatch(u);
    return 0;
}

int tern_udp_on_close(tern_loop *loop, tern_id id, tern_close_cb cb, void *arg)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    struct tern__udp *u = tern__udp_get(loop, id);
    if (u == NULL)
        return -ENOENT;
    u->close_cb = cb;
    u->close_arg = arg;
    return 0;
}

int tern_udp_close(tern_loop *loop, tern_id id)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    struct tern__udp *u = tern__udp_get(loop, id);
    return u == NULL ? -ENOENT : udp_close(u);
}

int tern_udp_fd(tern_loop *loop, tern_id id)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    struct tern__udp *u = tern__udp_get(loop, id);
    return u == NULL ? -ENOENT : u->fd;
}

int tern_udp_port(tern_loop *loop, tern_id id, unsigned *portp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    TERN_REQUIRE(portp != NULL);
    struct tern__udp *u = tern__udp_get(loop, id);
    if (u == NULL)
        return -ENOENT;
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int rc = tern__net_fault();
    if (rc == 0 && getsockname(u->fd, (struct sockaddr *)&ss, &len) < 0)
        rc = -errno;
    if (rc < 0)
        return rc;
    *portp = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                           : ((struct sockaddr_in6 *)&ss)->sin6_port);
    return 0;
}
