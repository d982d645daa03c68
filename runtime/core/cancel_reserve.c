/*
 * The cancel reserve: the records a foreign tern_cancel queues on the
 * inbound queue, reserved with the loop so such a cancel never needs
 * memory (inbound.h says why). A mutex guards the spare list: only
 * foreign cancels and step 1's drain take it, never a post.
 */
#include <errno.h>
#include <stdlib.h>

#include "container.h"
#include "loop_p.h"
#include "os_thread.h"

int tern__cancel_reserve_init(struct tern__cancel_reserve *r)
{
    r->nodes = tern__calloc_lazy(TERN__CANCEL_RESERVE, sizeof(*r->nodes));
    if (r->nodes == NULL)
        return -ENOMEM;
    tern__mutex_init(&r->lock);
    r->spare = NULL;
    r->carved = 0;
    return 0;
}

void tern__cancel_reserve_destroy(struct tern__cancel_reserve *r)
{
    if (r->nodes == NULL)
        return; /* tern_loop_new failed before the reserve was made */
    tern__mutex_destroy(&r->lock);
    tern__free_lazy(r->nodes, TERN__CANCEL_RESERVE, sizeof(*r->nodes));
    r->nodes = NULL;
}

/* A record for one foreign cancel, or NULL when all of them are waiting. */
struct tern__inbound *tern__cancel_node_get(struct tern__cancel_reserve *r)
{
    struct tern__inbound *in = NULL;
    tern__mutex_lock(&r->lock);
    if (r->spare != NULL) {
        in = tern__container_of(r->spare, struct tern__inbound, node);
        r->spare = r->spare->next;
    } else if (r->carved < TERN__CANCEL_RESERVE)
        in = &r->nodes[r->carved++];
    tern__mutex_unlock(&r->lock);
    return in;
}

void tern__cancel_node_put(struct tern__cancel_reserve *r, struct tern__inbound *in)
{
    tern__mutex_lock(&r->lock);
    in->node.next = r->spare;
    r->spare = &in->node;
    tern__mutex_unlock(&r->lock);
}
