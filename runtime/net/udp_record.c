/*
 * A UDP socket's record, at the bottom of the UDP files: finding it by
 * id, queueing it for its dispatch, its fd watcher, and the length of an
 * address of its family. udp.c (the dispatch, receiving and the public
 * calls), udp_opt.c and udp_send.c call down into it; it calls none of
 * them. It knows a UDP op by its class's kind, not by udp.c's class.
 */
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "udp_p.h"

struct tern__udp *tern__udp_get(tern_loop *loop, tern_id id)
{
    struct tern__op *op = tern__op_find(loop, id);
    if (op == NULL || op->cls->kind != TERN__KIND_UDP)
        return NULL;
    struct tern__udp *u = (struct tern__udp *)op;
    return (u->state & TERN__U_CLOSING) ? NULL : u;
}

void tern__udp_owe(struct tern__udp *u)
{
    tern__op_ready(u->loop, &u->op); /* a no-op when already queued */
}

int tern__udp_watch(struct tern__udp *u, unsigned events)
{
    if (events == u->io.events)
        return 0;
    if (events == 0) {
        tern__io_stop(u->loop, &u->io);
        u->io_revents = 0;
        return 0;
    }
    if (!tern__io_active(&u->io))
        return tern__io_start(u->loop, &u->io, u->fd, events);
    return tern__io_modify(u->loop, &u->io, events);
}

int tern__udp_recv_sync(struct tern__udp *u)
{
    tern_loop *loop = u->loop;
    struct tern__backend *b = &loop->backend;
    bool want = (b->completes & TERN__DO_UDP_RECV) && u->fd >= 0 && u->recv_len <= b->dgram_room &&
                u->ring_error == 0 &&
                (u->state & (TERN__U_RECEIVING | TERN__U_CLOSING)) == TERN__U_RECEIVING;
    if (want == u->recv_on)
        return 0;
    if (!want) {
        (void)b->ops->dgram_recv(b, u->fd, u->op.id, false); /* a stop is never refused */
        u->recv_on = false;
        TERN_DECREMENT(loop->io_count);
        return 0;
    }
    if (loop->landed == NULL &&
        (loop->landed = tern__calloc(b->nbufs, sizeof(*loop->landed))) == NULL)
        return -ENOMEM;
    int rc = b->ops->dgram_recv(b, u->fd, u->op.id, true);
    if (rc == -EOPNOTSUPP)
        return 0; /* the backend cleared TERN__DO_UDP_RECV: readiness from now on */
    if (rc < 0)
        return rc;
    u->recv_on = true;
    loop->io_count++; /* the kernel has something to report: ask it */
    return 0;
}

socklen_t tern__udp_addr_len(const struct tern__udp *u, const struct sockaddr *sa)
{
    if (sa->sa_family != u->family)
        return 0;
    return sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}
