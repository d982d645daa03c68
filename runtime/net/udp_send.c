/*
 * A UDP socket's send queue: datagrams in order, sent in batches, bounded
 * by a high-water mark that tells the sender to back off.
 *
 * Where the system has sendmmsg, one call sends up to TERN_UDP_BATCH
 * queued datagrams; elsewhere (and in -Dportable builds) a sendmsg per
 * datagram does the same. A datagram is sent whole or not at all, so a
 * send's failure (EMSGSIZE, an unreachable network, a refusal reported by
 * ICMP on a connected socket) belongs to that datagram alone: it
 * completes with the error and the queue goes on. Only EAGAIN stops the
 * flush, to wait for TERN_WRITABLE.
 *
 * Completions are never called from inside tern_udp_send: finished sends
 * move to the `done` list and the socket's dispatch runs them in step 2.
 *
 * On a backend that sends (TERN__DO_UDP_SEND: io_uring) the flush hands
 * the same batch to the backend instead, as linked sends made in order,
 * and the next batch waits for the last completion of this one
 * (tern__udp_sent). A send the backend cannot take is made here, as on
 * any other backend.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "udp_p.h"

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0
#endif

static void complete_head(struct tern__udp *u, int status)
{
    struct tern__usend *r = u->sq;
    u->sq = r->next;
    if (u->sq == NULL)
        u->sq_tail = &u->sq;
    u->queued -= r->len;
    u->queued_count--;
    r->next = NULL;
    r->status = status;
    *u->done_tail = r;
    u->done_tail = &r->next;
}

static void check_drain(struct tern__udp *u)
{
    if ((u->state & TERN__U_DRAIN_OWED) && u->queued <= u->high_water / 2) {
        u->state = (u->state & ~TERN__U_DRAIN_OWED) | TERN__U_DRAIN_DUE;
        tern__udp_owe(u);
    }
}

static void fill_msg(struct msghdr *m, struct tern__usend *r)
{
    *m = (struct msghdr){.msg_name = r->tolen ? &r->to : NULL,
                         .msg_namelen = r->tolen,
                         .msg_iov = r->iov,
                         .msg_iovlen = r->nbufs};
}

/*
 * Hand up to a batch from the head of the queue to a backend that sends
 * (TERN__DO_UDP_SEND): 1 when it took them, 0 when it cannot (not
 * offered, no room for the messages, its queue full: the flush sends by
 * itself), or the failure the fault seam injects into the send, as the
 * head datagram's. Until their completions those datagrams are the
 * kernel's to read.
 */
static int ring_flush(struct tern__udp *u)
{
    tern_loop *loop = u->loop;
    struct tern__backend *b = &loop->backend;
    if (!(b->completes & TERN__DO_UDP_SEND) || u->ring_msgs == NULL)
        return 0;
    int rc = tern__net_fault();
    if (rc < 0)
        return rc;
    unsigned n = 0;
    for (struct tern__usend *r = u->sq; r != NULL && n < TERN_UDP_BATCH; r = r->next)
        fill_msg(&u->ring_msgs[n++], r);
    int k = b->ops->send_dgrams(b, u->fd, u->op.id, u->ring_msgs, n);
    if (k < 0)
        return 0;
    u->ring_sends = (unsigned)k;
    loop->io_count += (unsigned)k; /* the kernel has something to report: ask it */
    loop->sends += (unsigned)k;
    return 1;
}

/* Send up to a batch from the head of the queue: how many the kernel took,
 * or a negative errno for the head datagram. */
static int send_some(struct tern__udp *u)
{
    struct tern__dgram d[TERN_UDP_BATCH];
    unsigned n = 0;
    for (struct tern__usend *r = u->sq; r != NULL && n < TERN_UDP_BATCH; r = r->next) {
        fill_msg(&d[n].hdr, r);
        d[n++].len = 0;
    }
    return tern__send_dgrams(u->fd, d, n);
}

void tern__udp_flush(struct tern__udp *u)
{
    if (u->ring_sends > 0)
        return; /* their completions flush again */
    while (u->sq != NULL) {
        int n = ring_flush(u);
        if (n > 0)
            break; /* the kernel's until their completions */
        if (n == 0)
            n = send_some(u);
        if (n == -EINTR)
            continue;
        if (n == -EAGAIN || n == -EWOULDBLOCK)
            break;
        if (n < 0) {
            complete_head(u, n);
            continue;
        }
        while (n-- > 0)
            complete_head(u, 0);
    }
    if (u->done != NULL)
        tern__udp_owe(u);
    check_drain(u);
    tern__udp_rewatch(u);
}

/*
 * Interest that drops to nothing is dropped lazily, as a stream's is: the
 * watcher stays until it next reports. A failure to widen it (ENOMEM, or
 * the backend) fails the queued sends and stops receiving with the cause.
 */
void tern__udp_rewatch(struct tern__udp *u)
{
    int rc = tern__udp_recv_sync(u);
    unsigned want = tern__udp_wanted(u);
    if (rc == 0 && want == 0 && !(u->state & TERN__U_CLOSING))
        return;
    if (rc == 0)
        rc = tern__udp_watch(u, want);
    if (rc == 0)
        return;
    tern__udp_fail_all(u, rc);
    if (u->state & TERN__U_RECEIVING) {
        /* Told from dispatch: this may run inside an API call (a send). */
        u->state &= ~TERN__U_RECEIVING;
        u->recv_error = rc;
        tern__udp_owe(u);
    }
    /* The queue is empty and receiving has ended: nothing is wanted now,
     * and stopping never fails. */
    tern__udp_watch(u, 0);
}

void tern__udp_fail_all(struct tern__udp *u, int status)
{
    /* The batch in the kernel (its completions come, and the kept ones
     * ahead of them) stays at the head: the queue is cut after it, the
     * rest completes, and the cut is where the queue ends again. */
    struct tern__usend **cut = &u->sq;
    for (unsigned i = 0; i < u->ring_kept + u->ring_sends; i++)
        cut = &(*cut)->next;
    struct tern__usend *kernel = u->sq;
    u->sq = *cut;
    if (u->sq == NULL)
        u->sq_tail = &u->sq;
    while (u->sq != NULL)
        complete_head(u, status);
    if (cut != &u->sq) {
        *cut = NULL;
        u->sq = kernel;
        u->sq_tail = cut;
    }
    if (u->done != NULL)
        tern__udp_owe(u);
    check_drain(u);
}

/*
 * Step 4: the kernel's sends complete in the order they were handed over,
 * each the queue's head datagram then. One that failed completes with its
 * error, and makes those after it in the batch come back -ECANCELED,
 * unsent: they stay queued (kept) and go again once the batch is back, as
 * after an -ECANCELED nobody asked for (the thread that submitted them
 * exited). Once closed, every one completes: 0 if the kernel took it,
 * else -ECANCELED or its error.
 */
void tern__udp_sent(struct tern__udp *u, const struct tern__done *d)
{
    TERN_INSIST(u->ring_sends > 0);
    u->ring_sends--;
    TERN_DECREMENT(u->loop->io_count);
    u->loop->sends--; /* counted with ring_sends */
    bool closing = (u->state & TERN__U_CLOSING) != 0;
    /* After one kept, the rest of the batch is unsent too. */
    if (u->ring_kept > 0 || (!closing && d->res == -ECANCELED))
        u->ring_kept++;
    else
        complete_head(u, d->res >= 0 ? 0 : d->res);
    if (u->ring_sends == 0) {
        u->ring_kept = 0;
        if (closing) {
            tern__udp_fail_all(u, -ECANCELED);
        } else if (u->sq != NULL) {
            tern__udp_flush(u);
            return;
        }
    }
    if (u->done != NULL || closing)
        tern__udp_owe(u); /* a closed socket's close callback waited for this */
    check_drain(u);
}

/*
 * Step 2: run up to `budget` completed sends' callbacks, in order. Each is
 * unlinked before its callback runs, so sends completed (or cancelled) by
 * a callback join the end of the same list.
 */
void tern__udp_deliver(struct tern__udp *u, unsigned budget)
{
    tern_id id = u->op.id;
    while (u->done != NULL && budget-- > 0) {
        struct tern__usend *r = u->done;
        u->done = r->next;
        if (u->done == NULL)
            u->done_tail = &u->done;
        if (r->cb != NULL)
            r->cb(u->loop, id, r->status, r->arg);
        tern__free(r);
    }
}

int tern_udp_send(tern_loop *loop, tern_id id, const tern_buf *bufs, unsigned nbufs,
                  const struct sockaddr *to, tern_stream_cb cb, void *arg)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (bufs == NULL || nbufs == 0 || nbufs > TERN__UDP_BUFS_MAX)
        return -EINVAL;
    size_t total = 0;
    for (unsigned i = 0; i < nbufs; i++) {
        if ((bufs[i].base == NULL && bufs[i].len != 0) || bufs[i].len > SIZE_MAX / 2 - total)
            return -EINVAL;
        total += bufs[i].len;
    }
    struct tern__udp *u = tern__udp_get(loop, id);
    if (u == NULL)
        return -ENOENT;
    socklen_t tolen = 0;
    if (u->state & TERN__U_CONNECTED) {
        if (to != NULL)
            return -EISCONN;
    } else if (to == NULL) {
        return -EDESTADDRREQ;
    } else if ((tolen = tern__udp_addr_len(u, to)) == 0) {
        return -EINVAL;
    }
    /* A backend that sends: room for what its sends read, kept from the
     * socket's first send to its end. */
    if ((loop->backend.completes & TERN__DO_UDP_SEND) && u->ring_msgs == NULL &&
        (u->ring_msgs = tern__malloc(TERN_UDP_BATCH * sizeof(*u->ring_msgs))) == NULL)
        return -ENOMEM;
    struct tern__usend *r = tern__malloc(sizeof(*r) + nbufs * sizeof(struct iovec));
    if (r == NULL)
        return -ENOMEM;
    r->next = NULL;
    r->cb = cb;
    r->arg = arg;
    r->status = 0;
    r->tolen = tolen;
    if (tolen != 0)
        memcpy(&r->to, to, tolen);
    r->len = total;
    r->nbufs = nbufs;
    for (unsigned i = 0; i < nbufs; i++)
        r->iov[i] = (struct iovec){.iov_base = (void *)bufs[i].base, .iov_len = bufs[i].len};
    bool was_empty = u->sq == NULL;
    *u->sq_tail = r;
    u->sq_tail = &r->next;
    u->queued += total;
    u->queued_count++;
    /* Inside its own dispatch the socket flushes once its callbacks ran;
     * a queue waiting for room is flushed when the room comes. */
    if (!(u->state & TERN__U_DISPATCH) && !(u->io.events & TERN_WRITABLE) && u->ring_sends == 0) {
        if (was_empty)
            tern__udp_flush(u);
        else
            tern__udp_owe(u);
    }
    if (u->queued > u->high_water) {
        u->state |= TERN__U_DRAIN_OWED;
        return 1;
    }
    return 0;
}

int tern_udp_set_high_water(tern_loop *loop, tern_id id, size_t bytes, tern_drain_cb cb, void *arg)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    struct tern__udp *u = tern__udp_get(loop, id);
    if (u == NULL)
        return -ENOENT;
    if (bytes == 0)
        return -EINVAL;
    u->high_water = bytes;
    u->drain_cb = cb;
    u->drain_arg = arg;
    check_drain(u);
    return 0;
}

int tern_udp_send_queue_size(tern_loop *loop, tern_id id, size_t *bytes, size_t *count)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    TERN_REQUIRE(bytes != NULL);
    struct tern__udp *u = tern__udp_get(loop, id);
    if (u == NULL)
        return -ENOENT;
    *bytes = u->queued;
    if (count != NULL)
        *count = u->queued_count;
    return 0;
}
