/*
 * A stream's record, at the bottom of the stream files: creating and
 * discarding it, finding it by id, queueing it for its dispatch, its fd
 * watcher, and what it holds besides (the internal deadline, a lookup in
 * flight, the addresses a connect tries). The files above (stream.c with
 * the dispatch and the public calls, tcp.c, unix.c, tty.c, write.c) call
 * down into it; it calls none of them. Its op class is stream.c's and its
 * deadline's tcp.c's, reached as data through the loop (the op books call
 * their hooks); it knows a stream by its class's kind.
 */
#include <errno.h>
#include <stdlib.h>

#include "admit.h"
#include "container.h"
#include "heap.h"
#include "job_p.h"
#include "net_p.h"

static void stream_fired(tern_loop *loop, struct tern__io *io, unsigned events);

int tern__stream_new(tern_loop *loop, enum tern__stream_kind kind, int fd, struct tern__stream **sp)
{
    int rc = tern__op_admit(loop);
    if (rc < 0)
        return rc;
    struct tern__stream *s = tern__calloc(1, sizeof(*s));
    if (s == NULL) {
        tern__op_unadmit(loop);
        return -ENOMEM;
    }
    s->loop = loop;
    s->kind = kind;
    s->fd = fd;
    s->wq_tail = &s->wq;
    s->land_head = s->land_tail = TERN__LANDED_NONE;
    s->done_tail = &s->done;
    s->high_water = TERN__HIGH_WATER_DEFAULT;
    tern__io_init(&s->io, stream_fired);
    tern__deadline_init(&s->deadline, loop->stream_deadline_class);
    if ((rc = tern__op_add(loop, &s->op, loop->stream_class)) < 0) {
        tern__op_unadmit(loop);
        tern__free(s);
        return rc;
    }
    *sp = s;
    return 0;
}

/*
 * Undo tern__stream_new for a stream that never reached the caller: no
 * callback is owed, so it ends at once. The fd is left to the caller.
 */
void tern__stream_discard(struct tern__stream *s)
{
    tern__stream_watch(s, 0);
    tern__stream_stop_aux(s);
    TERN_INSIST(s->lookup == NULL && s->wq == NULL && s->done == NULL);
    s->fd = -1;
    s->state |= TERN__S_CLOSING | TERN__S_CLOSE_RAN;
    tern__op_finish(s->loop, &s->op);
}

struct tern__stream *tern__stream_get(tern_loop *loop, tern_id id)
{
    struct tern__op *op = tern__op_find(loop, id);
    if (op == NULL || op->cls->kind != TERN__KIND_STREAM)
        return NULL;
    struct tern__stream *s = (struct tern__stream *)op;
    return (s->state & TERN__S_CLOSING) ? NULL : s;
}

void tern__stream_owe(struct tern__stream *s)
{
    tern__op_ready(s->loop, &s->op); /* a no-op when already queued */
}

/* ------------------------------------------------------------------ */
/* The watcher                                                         */
/* ------------------------------------------------------------------ */

/* Step 4: note what the backend reported; the stream's dispatch acts on it. */
static void stream_fired(tern_loop *loop, struct tern__io *io, unsigned events)
{
    struct tern__stream *s = tern__container_of(io, struct tern__stream, io);
    s->io_revents |= events;
    tern__op_ready(loop, &s->op);
}

int tern__stream_watch(struct tern__stream *s, unsigned events)
{
    tern_loop *loop = s->loop;
    if (events == s->io.events)
        return 0;
    if (events == 0) {
        tern__io_stop(loop, &s->io);
        s->io_revents = 0; /* about that fd, which may be closed and reused next */
        return 0;
    }
    if (!tern__io_active(&s->io))
        return tern__io_start(loop, &s->io, s->fd, events);
    return tern__io_modify(loop, &s->io, events);
}

/*
 * Free the record once the close callback ran and no lookup holds it.
 */
void tern__stream_maybe_finish(struct tern__stream *s)
{
    /* A lookup still in flight holds `s` as its argument: wait for it. */
    if ((s->state & TERN__S_CLOSE_RAN) && s->lookup == NULL)
        tern__op_finish(s->loop, &s->op);
}

void tern__stream_stop_aux(struct tern__stream *s)
{
    if (tern__deadline_armed(&s->deadline)) {
        tern__deadline_disarm(s->loop, &s->deadline);
        tern__deadline_unclaim(s->loop);
    }
    /* The lookup's callback still comes (with -ECANCELED); s->lookup stays
     * set until it does, which keeps the record alive for it. Cancelling
     * again (a connect that failed, then closed) changes nothing. */
    if (s->lookup != NULL)
        tern__lookup_cancel(s->loop, s->lookup);
}

void tern__stream_free_addrs(struct tern__stream *s)
{
    if (s->addrs == NULL)
        return;
    if (s->addrs_resolved)
        tern_freeaddrinfo(s->addrs);
    s->addrs = s->next_addr = NULL;
}
