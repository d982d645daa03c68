/*
 * The write queue: requests in order, coalesced into one sendmsg, with a
 * high-water mark that tells the writer to back off; and the write that
 * bypasses it (tern_stream_try_write), allowed only while it is empty.
 *
 * A write is tried at once when the queue was empty (the common case for
 * a request/response server costs one syscall and no epoll change); what
 * the kernel does not take waits for TERN_WRITABLE. Completions are never
 * called from inside tern_stream_write: finished requests move to the
 * `done` list and the stream's dispatch runs them in step 2, in order.
 *
 * sendmsg with MSG_NOSIGNAL, not writev: a peer that has gone must give
 * -EPIPE, never a SIGPIPE that kills the process. Where MSG_NOSIGNAL does
 * not exist, tern__socket_nosigpipe (platform.c) sets SO_NOSIGPIPE on the
 * socket instead.
 *
 * On a backend that sends itself (TERN__DO_SEND: io_uring) a socket's
 * flush hands the gathered queue to the backend instead of calling
 * sendmsg, and the send goes to the kernel with the turn's one wait. One
 * send per stream is in flight at a time: writes queued meanwhile wait
 * and go, coalesced, in the next send, which also carries on from where a
 * short one stopped. Until its completion the queue's head requests are
 * the kernel's to read, so nothing completes or fails before it
 * (tern__write_sent); a close cancels it and fails the rest then. A send
 * the backend refuses (its queue full) is made here, by readiness, as on
 * any other backend. tern_stream_try_write stays a system call of its own:
 * it returns what was taken, which only a synchronous call can tell.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "net_p.h"

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0
#endif

#define GATHER_MAX TERN__GATHER_MAX

/* ------------------------------------------------------------------ */
/* Passing descriptors: the writing side                               */
/* ------------------------------------------------------------------ */

void tern__wreq_fds_close(struct tern__wreq *w)
{
    for (unsigned i = 0; i < w->nfds; i++)
        close(w->fds[i]);
    w->fds = NULL;
    w->nfds = 0;
}

void tern__wreq_attach_fds(struct msghdr *msg, const struct tern__wreq *w,
                           union tern__fds_cmsg *cbuf)
{
    memset(cbuf, 0, sizeof(*cbuf));
    msg->msg_control = cbuf->buf;
    msg->msg_controllen = CMSG_SPACE(sizeof(int) * w->nfds);
    struct cmsghdr *c = CMSG_FIRSTHDR(msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * w->nfds);
    memcpy(CMSG_DATA(c), w->fds, sizeof(int) * w->nfds);
}

static void complete_head(struct tern__stream *s, int status)
{
    struct tern__wreq *w = s->wq;
    s->wq = w->next;
    if (s->wq == NULL)
        s->wq_tail = &s->wq;
    w->next = NULL;
    w->status = status;
    if (w->fds != NULL) /* not sent: their duplicates go now */
        tern__wreq_fds_close(w);
    *s->done_tail = w;
    s->done_tail = &w->next;
}

/* Account for n bytes the kernel took, completing requests in order. */
static void advance(struct tern__stream *s, size_t n)
{
    s->queued -= n;
    while (s->wq != NULL) {
        struct tern__wreq *w = s->wq;
        if (w->left <= n) {
            n -= w->left;
            w->left = 0;
            complete_head(s, 0);
            continue;
        }
        w->left -= n;
        while (n > 0) {
            struct iovec *v = &w->iov[w->first];
            if (v->iov_len <= n) {
                n -= v->iov_len;
                v->iov_len = 0;
                w->first++;
            } else {
                v->iov_base = (char *)v->iov_base + n;
                v->iov_len -= n;
                n = 0;
            }
        }
        return;
    }
    TERN_INSIST(n == 0);
}

/* Copy the unwritten iovec entries of the queue, in order, into iov. */
static unsigned gather(const struct tern__stream *s, struct iovec *iov, size_t *bytes)
{
    unsigned n = 0;
    *bytes = 0;
    for (const struct tern__wreq *w = s->wq; w != NULL && n < GATHER_MAX; w = w->next) {
        /* Descriptors ride with their request's first byte: such a request
         * goes out alone, at the head (unix.c attaches them). */
        if (w->fds != NULL && w != s->wq)
            break;
        for (unsigned i = w->first; i < w->nbufs && n < GATHER_MAX; i++) {
            if (w->iov[i].iov_len == 0)
                continue;
            iov[n++] = w->iov[i];
            *bytes += w->iov[i].iov_len;
        }
        if (w->fds != NULL)
            break;
    }
    return n;
}

static void check_drain(struct tern__stream *s)
{
    if ((s->state & TERN__S_DRAIN_OWED) && s->queued <= s->high_water / 2) {
        s->state &= ~TERN__S_DRAIN_OWED;
        s->drain_due = true;
        tern__stream_owe(s);
    }
}

void tern__write_flush(struct tern__stream *s)
{
    if (s->send_on)
        return; /* its completion flushes again */
    struct tern__backend *b = &s->loop->backend;
    /* The stream's area when the backend sends for it (it outlives the
     * call: tern__write_queue made it), else the stack. */
    struct tern__send_area stack;
    struct tern__send_area *a = s->send_area;
    bool handed = a != NULL;
    if (!handed)
        a = &stack;
    while (s->wq != NULL) {
        if (s->wq->left == 0) { /* an empty write completes in order, without a syscall */
            complete_head(s, 0);
            continue;
        }
        size_t bytes;
        unsigned n = gather(s, a->iov, &bytes);
        a->msg = (struct msghdr){.msg_iov = a->iov, .msg_iovlen = n};
        if (s->wq->fds != NULL)
            tern__wreq_attach_fds(&a->msg, s->wq, &a->cbuf);
        ssize_t r = tern__stream_fault();
        if (r == 0 && handed) {
            if (b->ops->send(b, s->fd, s->op.id, &a->msg) == 0) {
                s->send_on = true;
                s->loop->io_count++; /* the kernel has something to report: ask it */
                s->loop->sends++;
                break;
            }
            handed = false; /* refused (its queue is full): this flush sends by itself */
        }
        if (r == 0 && (r = s->not_socket ? writev(s->fd, a->iov, (int)n)
                                         : sendmsg(s->fd, &a->msg, MSG_NOSIGNAL)) < 0)
            r = -errno;
        if (r > 0 && s->wq->fds != NULL) /* the kernel took them with the first byte */
            tern__wreq_fds_close(s->wq);
        if (r < 0) {
            if (r == -EINTR)
                continue;
            if (r != -EAGAIN && r != -EWOULDBLOCK)
                tern__write_fail(s, (int)r);
            break;
        }
        advance(s, (size_t)r);
        /* A short write means the socket buffer is full: wait to be told. */
        if ((size_t)r < bytes)
            break;
    }
    if (s->done != NULL)
        tern__stream_owe(s);
    check_drain(s);
    tern__write_maybe_shutdown(s);
    tern__stream_rewatch(s);
}

void tern__write_fail(struct tern__stream *s, int status)
{
    if (s->write_error == 0)
        s->write_error = status;
    if (s->send_on) { /* the kernel still reads the head: its completion fails the queue */
        if (s->send_fail == 0)
            s->send_fail = status;
        /* Descriptors ride alone at the head: any behind it are not in
         * the send, and their duplicates go now. */
        for (struct tern__wreq *w = s->wq->next; w != NULL; w = w->next)
            if (w->fds != NULL)
                tern__wreq_fds_close(w);
        return;
    }
    while (s->wq != NULL)
        complete_head(s, status);
    s->queued = 0;
    if (s->done != NULL)
        tern__stream_owe(s);
    check_drain(s);
}

/*
 * Interest that drops to nothing is dropped lazily: the watcher stays
 * registered until it next reports (stream_io then stops it). A stream
 * that stops and restarts reading, or a connect followed at once by
 * read_start, so costs one epoll_ctl MOD instead of a DEL and an ADD.
 * Before its descriptor is closed a stream always stops the watcher for
 * real (tern__stream_watch(s, 0)).
 *
 * Only starting or modifying a watcher can fail (ENOMEM, or the backend).
 * A stream that cannot be watched cannot make progress, so its queued
 * writes fail with the cause and reading stops with it.
 */
void tern__stream_rewatch(struct tern__stream *s)
{
    if (!tern__stream_recv_idle(s))
        (void)tern__stream_recv_sync(s); /* a stream that stopped reading stops its receive */
    if (s->kind == TERN__LISTENER)
        (void)tern__listener_sync(s); /* refused: it accepts by readiness meanwhile */
    unsigned want = tern__stream_wanted(s);
    if (want == 0 && !(s->state & TERN__S_CLOSING) && s->fd >= 0)
        return;
    int rc = tern__stream_watch(s, want);
    if (rc == 0)
        return;
    tern__write_fail(s, rc);
    if (s->state & TERN__S_READING) {
        /* Told from dispatch: this may run inside an API call. */
        s->state = (s->state & ~TERN__S_READING) | TERN__S_READ_DONE;
        s->read_status = rc;
        s->read_due = true;
        tern__stream_owe(s);
    }
    /* Fewer events (or none) can always be set: stopping never fails. */
    if (tern__stream_watch(s, tern__stream_wanted(s)) < 0)
        tern__stream_watch(s, 0);
}

/*
 * Step 4: what the kernel took of the send, or why it took nothing. The
 * bytes complete their requests in order; the rest goes in the next send
 * (the flush), unless the queue was failed meanwhile (send_fail) or the
 * send failed: then the queue fails with that status, as a sendmsg's
 * error fails it. -ECANCELED not asked for (the thread that submitted it
 * exited) is no failure: the next send carries on.
 */
void tern__write_sent(struct tern__stream *s, const struct tern__done *d)
{
    s->send_on = false;
    TERN_DECREMENT(s->loop->io_count);
    s->loop->sends--; /* counted with send_on, which was set */
    if (d->res > 0) {
        if (s->wq->fds != NULL) /* the kernel took them with the first byte */
            tern__wreq_fds_close(s->wq);
        advance(s, (size_t)d->res);
    }
    int fail = s->send_fail;
    s->send_fail = 0;
    /* (A send in the kernel never meets -EAGAIN or -EINTR: it waits for
     * room by itself.) */
    if (fail == 0 && d->res < 0 && d->res != -ECANCELED)
        fail = d->res;
    if (fail != 0)
        tern__write_fail(s, fail);
    if (s->state & TERN__S_CLOSING)
        tern__stream_owe(s); /* the close callback waited for this */
    else
        tern__write_flush(s);
}

void tern__write_maybe_shutdown(struct tern__stream *s)
{
    if ((s->state & (TERN__S_SHUT_ASKED | TERN__S_SHUT_DONE | TERN__S_CLOSING)) !=
            TERN__S_SHUT_ASKED ||
        s->wq != NULL)
        return;
    s->state |= TERN__S_SHUT_DONE;
    s->shut_status = s->write_error;
    if (s->shut_status == 0 && (s->shut_status = tern__stream_fault()) == 0 &&
        shutdown(s->fd, SHUT_WR) < 0)
        s->shut_status = -errno;
    s->shut_due = true;
    tern__stream_owe(s);
}

/*
 * Step 2: run up to `budget` completed requests' callbacks, in order. Each
 * is unlinked before its callback runs, so requests completed (or
 * cancelled) by a callback join the end of the same list.
 */
void tern__write_deliver(struct tern__stream *s, unsigned budget)
{
    tern_id id = s->op.id;
    while (s->done != NULL && budget-- > 0) {
        struct tern__wreq *w = s->done;
        s->done = w->next;
        if (s->done == NULL)
            s->done_tail = &s->done;
        w->cb(s->loop, id, w->status, w->arg);
        tern__free(w);
    }
}

/*
 * Queue a request (tern_stream_write, tern_unix_write_fds). With fds, the
 * request carries room for nfds descriptors, filled by the caller through
 * *wp before the request can be flushed: `fill` runs on it first and may
 * refuse it (then nothing is queued).
 */
int tern__write_queue(tern_loop *loop, tern_id id, const tern_buf *bufs, unsigned nbufs,
                      unsigned nfds,
                      int (*fill)(struct tern__stream *, struct tern__wreq *, const void *),
                      const void *fill_arg, tern_stream_cb cb, void *arg)
{
    if (bufs == NULL || nbufs == 0 || nbufs > TERN__WRITE_BUFS_MAX || cb == NULL)
        return -EINVAL;
    size_t total = 0;
    for (unsigned i = 0; i < nbufs; i++) {
        if ((bufs[i].base == NULL && bufs[i].len != 0) || bufs[i].len > SIZE_MAX / 2 - total)
            return -EINVAL;
        total += bufs[i].len;
    }
    if (nfds > 0 && total == 0) /* descriptors need a byte to ride with */
        return -EINVAL;
    struct tern__stream *s = tern__stream_get(loop, id);
    if (s == NULL)
        return -ENOENT;
    if (s->kind != TERN__STREAM || (nfds > 0 && !s->unix_sock))
        return -EINVAL;
    if ((s->state & TERN__S_SHUT_ASKED) || s->write_error != 0)
        return -EPIPE;
    /* A socket on a backend that sends: room for what its sends point at,
     * kept from its first write to its end. */
    if ((s->loop->backend.completes & TERN__DO_SEND) && !s->not_socket && s->send_area == NULL &&
        (s->send_area = tern__malloc(sizeof(*s->send_area))) == NULL)
        return -ENOMEM;
    struct tern__wreq *w =
        tern__malloc(sizeof(*w) + nbufs * sizeof(struct iovec) + nfds * sizeof(int));
    if (w == NULL)
        return -ENOMEM;
    *w = (struct tern__wreq){.cb = cb, .arg = arg, .nbufs = nbufs, .left = total};
    for (unsigned i = 0; i < nbufs; i++)
        w->iov[i] = (struct iovec){.iov_base = (void *)bufs[i].base, .iov_len = bufs[i].len};
    if (nfds > 0) {
        w->fds = (int *)(void *)&w->iov[nbufs];
        w->nfds = nfds;
        int rc = fill(s, w, fill_arg);
        if (rc < 0) {
            tern__free(w);
            return rc;
        }
    }
    bool was_empty = s->wq == NULL;
    *s->wq_tail = w;
    s->wq_tail = &w->next;
    s->queued += total;
    /* With earlier writes still queued the watcher already waits for room. */
    if (was_empty && !(s->state & TERN__S_CONNECTING))
        tern__write_flush(s);
    if (s->queued > s->high_water) {
        s->state |= TERN__S_DRAIN_OWED;
        return 1;
    }
    return 0;
}

int tern_stream_try_write(tern_loop *loop, tern_id id, const tern_buf *bufs, unsigned nbufs)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (bufs == NULL || nbufs == 0 || nbufs > TERN__WRITE_BUFS_MAX)
        return -EINVAL;
    struct iovec iov[GATHER_MAX];
    unsigned n = 0;
    size_t total = 0;
    for (unsigned i = 0; i < nbufs; i++) {
        if (bufs[i].base == NULL && bufs[i].len != 0)
            return -EINVAL;
        if (n == GATHER_MAX || bufs[i].len == 0 || total == INT_MAX)
            continue; /* checked, not sent this time */
        size_t len = bufs[i].len < INT_MAX - total ? bufs[i].len : INT_MAX - total;
        iov[n++] = (struct iovec){.iov_base = (void *)bufs[i].base, .iov_len = len};
        total += len;
    }
    struct tern__stream *s = tern__stream_get(loop, id);
    if (s == NULL)
        return -ENOENT;
    if (s->kind != TERN__STREAM)
        return -EINVAL;
    if ((s->state & TERN__S_CONNECTING) || s->fd < 0)
        return -ENOTCONN;
    if ((s->state & TERN__S_SHUT_ASKED) || s->write_error != 0)
        return -EPIPE;
    if (s->wq != NULL)
        return -EAGAIN; /* order: what is queued goes first */
    if (total == 0)
        return 0;
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = n};
    ssize_t r;
    do
        if ((r = tern__stream_fault()) == 0 &&
            (r = s->not_socket ? writev(s->fd, iov, (int)n) : sendmsg(s->fd, &msg, MSG_NOSIGNAL)) <
                0)
            r = -errno;
    while (r == -EINTR);
    return r == -EWOULDBLOCK ? -EAGAIN : (int)r;
}

int tern_stream_write(tern_loop *loop, tern_id id, const tern_buf *bufs, unsigned nbufs,
                      tern_stream_cb cb, void *arg)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    return tern__write_queue(loop, id, bufs, nbufs, 0, NULL, NULL, cb, arg);
}

int tern_stream_set_high_water(tern_loop *loop, tern_id id, size_t bytes, tern_drain_cb cb,
                               void *arg)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    struct tern__stream *s = tern__stream_get(loop, id);
    if (s == NULL)
        return -ENOENT;
    if (bytes == 0 || s->kind != TERN__STREAM)
        return -EINVAL;
    s->high_water = bytes;
    s->drain_cb = cb;
    s->drain_arg = arg;
    check_drain(s);
    return 0;
}

int tern_stream_write_queue_size(tern_loop *loop, tern_id id, size_t *out)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    TERN_REQUIRE(out != NULL);
    struct tern__stream *s = tern__stream_get(loop, id);
    if (s == NULL)
        return -ENOENT;
    *out = s->queued;
    return 0;
}
