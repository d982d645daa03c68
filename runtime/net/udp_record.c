/*
 * A UDP socket's record, at the bottom of the UDP files: finding it by
 * id, queueing it for its dispatch, its fd watcher, and the length of an
 * address of its family. udp.c (the dispatch, receiving and the public
 * calls), udp_opt.c and udp_send.c call down into it; it calls none of
 * them. It knows a UDP op by its class's kind, not by udp.c's class.
 */
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

socklen_t tern__udp_addr_len(const struct tern__udp *u, const struct sockaddr *sa)
{
    if (sa->sa_family != u->family)
        return 0;
    return sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}
