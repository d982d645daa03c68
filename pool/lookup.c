/*
 * The lookup cap: name lookups run on the bounded class, at most
 * (threads+1)/2 at once in the process, so a stalled resolver cannot take
 * every worker from CPU work. A lookup that a worker dequeues beyond the
 * cap is set aside in `lookups_waiting` (still QUEUED, so still
 * cancellable by tombstone, and still holding its queue slot in the
 * admission count until it is claimed or stopped); the worker goes back
 * to CPU work. The worker that finishes a lookup takes the next waiting
 * one, so the cap holds exactly and nothing waits forever. What a lookup does is the runtime's
 * (runtime/net/resolve.c); here it is any header of kind TERN__WORK_LOOKUP.
 *
 * The waiting lookups are an array used as a FIFO under lookup_lock, not a
 * cds_wfcq: the cap and the waiting list change together under the lock
 * anyway (a finishing worker must see a lookup set aside by a racing one),
 * and a wfcq would need a link in every job's header, eight bytes on every
 * job (taking the record past two cache lines) to save this one array per
 * pool, which is allocated lazily (a large queue costs the pages it uses).
 */
#include <errno.h>
#include <stdlib.h>

#include "bounded.h"
#include "fault.h"
#include "lookup.h"
#include "pool_p.h"

int tern__lookup_init(struct tern__pool *p)
{
    p->lookups_cap = (p->cfg.threads + 1) / 2;
    /*
     * Waiting lookups are queued or tombstoned, together within the
     * queue's room (bounded.h); workers may hold one each in passing.
     */
    p->lookups_cap_alloc = (unsigned)tern__queue_room(&p->cfg) + p->cfg.threads;
    p->lookups_waiting = tern__calloc_lazy(p->lookups_cap_alloc, sizeof(*p->lookups_waiting));
    if (p->lookups_waiting == NULL)
        return -ENOMEM;
    tern__mutex_init(&p->lookup_lock);
    return 0;
}

void tern__lookup_destroy(struct tern__pool *p)
{
    TERN_INSIST(p->lookups_len == 0 && p->lookups_active == 0);
    tern__mutex_destroy(&p->lookup_lock);
    tern__free_lazy(p->lookups_waiting, p->lookups_cap_alloc, sizeof(*p->lookups_waiting));
}

/* With lookup_lock held. */
static struct tern__work *pop_waiting(struct tern__pool *p)
{
    if (p->lookups_len == 0)
        return NULL;
    struct tern__work *job = p->lookups_waiting[p->lookups_first];
    p->lookups_first = (p->lookups_first + 1) % p->lookups_cap_alloc;
    TERN_DECREMENT(p->lookups_len);
    return job;
}

void tern__lookup_run(struct tern__pool *p, struct tern__work *job, unsigned worker)
{
    tern__mutex_lock(&p->lookup_lock);
    if (p->lookups_active >= p->lookups_cap) {
        /*
         * Over the cap: set it aside. It keeps its queue slot (the
         * admission counter), which also bounds this array's use.
         */
        TERN_INSIST(p->lookups_len < p->lookups_cap_alloc);
        p->lookups_waiting[(p->lookups_first + p->lookups_len) % p->lookups_cap_alloc] = job;
        p->lookups_len++;
        tern__mutex_unlock(&p->lookup_lock);
        return;
    }
    p->lookups_active++;
    tern__mutex_unlock(&p->lookup_lock);

    while (job != NULL) {
        if (tern__queue_claim(job))
            (void)tern__work_run(job, worker); /* the worker counts as busy already */
        tern__mutex_lock(&p->lookup_lock);
        job = pop_waiting(p);
        if (job == NULL)
            TERN_DECREMENT(p->lookups_active);
        tern__mutex_unlock(&p->lookup_lock);
    }
}

void tern__lookup_drain(struct tern__pool *p, void (*fn)(struct tern__work *job))
{
    for (;;) {
        tern__mutex_lock(&p->lookup_lock);
        struct tern__work *job = pop_waiting(p);
        tern__mutex_unlock(&p->lookup_lock);
        if (job == NULL)
            return;
        fn(job);
    }
}
