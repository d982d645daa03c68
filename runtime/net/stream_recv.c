/*
 * Reading a stream through a completion backend's receive (the backend's
 * TERN__DO_RECV, io_uring's multishot receive into provided buffers): the
 * kernel reads while the stream reads, and the read callback gets the
 * backend's buffer instead of the loop thread's stack.
 *
 * The rules readiness reading keeps hold here too, and are kept this way:
 *  - Back-pressure: stopping reading cancels the receive at once, so the
 *    kernel stops taking bytes off the socket. What it took before the
 *    cancel still comes, waits in the list, and is delivered first when
 *    reading starts again: nothing is lost or reordered.
 *  - The end of the stream or an error comes after every byte before it,
 *    as the last thing the list holds.
 *  - Closing gives every buffer back and cancels the receive before the
 *    descriptor closes; completions still on their way find the stream
 *    closing (or gone) and go back too (tern__op_completed).
 * Which streams read this way: stream sockets read into tern's memory; a
 * Unix-domain one receives as recvmsg does, with room for the descriptors
 * a peer passes, which join the stream's ring (unix.c) just before the
 * bytes they came with are delivered, as when read by readiness. A pipe or
 * TTY, and reading into the caller's memory, stay on readiness.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "heap.h"
#include "net_p.h"

static bool recv_wanted(const struct tern__stream *s)
{
    const struct tern__backend *b = &s->loop->backend;
    return (b->completes & TERN__DO_RECV) && s->kind == TERN__STREAM && s->fd >= 0 &&
           !s->not_socket && s->alloc_cb == NULL && !s->recv_end_due &&
           (s->state & (TERN__S_READING | TERN__S_READ_DONE | TERN__S_CLOSING)) == TERN__S_READING;
}

int tern__stream_recv_sync(struct tern__stream *s)
{
    tern_loop *loop = s->loop;
    struct tern__backend *b = &loop->backend;
    bool want = recv_wanted(s);
    if (want == s->recv_on)
        return 0;
    if (!want) {
        (void)b->ops->recv(b, s->fd, s->op.id, false, 0); /* a stop is never refused */
        s->recv_on = false;
        TERN_DECREMENT(loop->io_count);
        return 0;
    }
    if (loop->landed == NULL &&
        (loop->landed = tern__calloc(b->nbufs, sizeof(*loop->landed))) == NULL)
        return -ENOMEM;
    int rc =
        b->ops->recv(b, s->fd, s->op.id, true, s->unix_sock ? sizeof(union tern__fds_cmsg) : 0);
    if (rc == -EOPNOTSUPP)
        return 0; /* the backend cleared TERN__DO_RECV: readiness from now on */
    if (rc < 0)
        return rc;
    s->recv_on = true;
    loop->io_count++; /* the kernel has something to report: ask it */
    return 0;
}

void tern__stream_recv_completed(tern_loop *loop, struct tern__op *op, const struct tern__done *d)
{
    struct tern__stream *s = (struct tern__stream *)op;
    if (s->state & TERN__S_CLOSING) {
        /* Bytes taken before the close's cancel; its end goes unreported. */
        TERN_INSIST(d->res > 0);
        tern__stream_recv_release(loop, d->buf);
        return;
    }
    if (d->res > 0) {
        loop->landed[d->buf] = (struct tern__landed){.data = d->data,
                                                     .ctl = d->ctl,
                                                     .ctllen = d->ctllen,
                                                     .len = (uint32_t)d->res,
                                                     .next = TERN__LANDED_NONE};
        if (s->land_head == TERN__LANDED_NONE)
            s->land_head = d->buf;
        else
            loop->landed[s->land_tail].next = d->buf;
        s->land_tail = d->buf;
    } else {
        TERN_INSIST(d->final && s->recv_on);
        s->recv_on = false;
        TERN_DECREMENT(loop->io_count);
        s->recv_end_due = true;
        s->recv_end = d->res;
    }
    if (s->state & TERN__S_READING)
        tern__stream_owe(s);
}

const void *tern__stream_recv_head(const struct tern__stream *s, size_t *len, const void **ctl,
                                   size_t *ctllen)
{
    if (s->land_head == TERN__LANDED_NONE)
        return NULL;
    const struct tern__landed *l = &s->loop->landed[s->land_head];
    *len = l->len - s->land_off;
    /* The descriptors go with the buffer's first delivery only. */
    *ctl = s->land_off == 0 ? l->ctl : NULL;
    *ctllen = s->land_off == 0 ? l->ctllen : 0;
    return l->data + s->land_off;
}

void tern__passed_fds(const void *ctl, size_t len, void (*fn)(int fd, void *arg), void *arg)
{
    struct msghdr msg = {.msg_control = (void *)ctl, .msg_controllen = len};
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            fn(fd, arg);
        }
    }
}

static void close_passed(int fd, void *arg)
{
    (void)arg;
    close(fd);
}

uint32_t tern__stream_recv_consume(struct tern__stream *s, size_t n)
{
    uint32_t buf = s->land_head;
    const struct tern__landed *l = &s->loop->landed[buf];
    TERN_INSIST(buf != TERN__LANDED_NONE && n <= l->len - s->land_off);
    s->land_off += (uint32_t)n;
    if (s->land_off < l->len)
        return TERN__LANDED_NONE;
    s->land_off = 0;
    s->land_head = l->next;
    if (s->land_head == TERN__LANDED_NONE)
        s->land_tail = TERN__LANDED_NONE;
    return buf;
}

void tern__stream_recv_release(tern_loop *loop, uint32_t buf)
{
    loop->backend.ops->recycle(&loop->backend, buf);
}

void tern__stream_recv_drop(struct tern__stream *s)
{
    while (s->land_head != TERN__LANDED_NONE) {
        size_t len, ctllen;
        const void *ctl;
        tern__stream_recv_head(s, &len, &ctl, &ctllen);
        tern__passed_fds(ctl, ctllen, close_passed, NULL); /* never delivered: nobody's */
        tern__stream_recv_release(s->loop, tern__stream_recv_consume(s, len));
    }
    s->recv_end_due = false;
}

/*
 * A listener on the backend's accept (tcp.c has the rest): here, beside
 * the receive's sync, so the files that rewatch and close a stream need
 * not call into tcp.c.
 */
int tern__listener_sync(struct tern__stream *s)
{
    tern_loop *loop = s->loop;
    struct tern__backend *b = &loop->backend;
    bool want = (b->completes & TERN__DO_ACCEPT) && s->fd >= 0 &&
                !(s->state & (TERN__S_CLOSING | TERN__S_BACKOFF));
    if (want == s->accept_on)
        return 0;
    if (!want) {
        (void)b->ops->accept(b, s->fd, s->op.id, false); /* a stop is never refused */
        s->accept_on = false;
        TERN_DECREMENT(loop->io_count);
        return 0;
    }
    int rc = b->ops->accept(b, s->fd, s->op.id, true);
    if (rc < 0)
        return rc;
    s->accept_on = true;
    loop->io_count++; /* the kernel has something to report: ask it */
    return 0;
}

bool tern__fds_push(struct tern__stream *s, int fd)
{
    if (s->rfds_len == s->rfds_cap) {
        unsigned cap = s->rfds_cap ? s->rfds_cap * 2 : 8;
        int *v = tern__malloc(cap * sizeof(int));
        if (v == NULL)
            return false;
        for (unsigned i = 0; i < s->rfds_len; i++)
            v[i] = s->rfds[(s->rfds_head + i) % s->rfds_cap];
        tern__free(s->rfds);
        s->rfds = v;
        s->rfds_cap = cap;
        s->rfds_head = 0;
    }
    s->rfds[(s->rfds_head + s->rfds_len) % s->rfds_cap] = fd;
    s->rfds_len++;
    return true;
}
