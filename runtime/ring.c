/*
 * The result ring: many pool threads push finished jobs, one loop pops
 * them (G1). Free-running 64-bit head and tail with a power-of-two mask;
 * each slot carries a sequence number saying whose turn it is. With
 * lap = pos & ~mask (the position less its slot index):
 *
 *   seq == lap          the slot is free for the producer that claims pos
 *   seq == lap + 1      it holds the job pushed at pos, for the consumer
 *   seq == lap + size   freed by the consumer, for the producer one lap on
 *
 * (Vyukov's scheme with every sequence less its slot index, so the
 * initial state is all zeros: the slot array comes from calloc untouched,
 * and a ring sized for 2^31 credits costs the pages its positions have
 * reached, not 32 GiB written up front.)
 *
 * A push never finds the ring full: every job in flight holds one
 * undelivered credit, taken at submission and returned only after its slot
 * was freed, and the ring has at least as many slots as credits. So a
 * producer's slot is always free or about to be (a consumer between
 * claiming and freeing it); anything else is a broken invariant.
 */
#include <errno.h>
#include <stdlib.h>

#include <urcu/arch.h>

#include "job_p.h"

int tern__ring_new(struct tern__ring **ringp, uint64_t capacity)
{
    uint64_t size = 1;
    while (size < capacity)
        size <<= 1;
    struct tern__ring *r = tern__calloc_aligned(alignof(struct tern__ring), sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    if ((r->slots = tern__calloc_lazy(size, sizeof(r->slots[0]))) == NULL) {
        free(r);
        return -ENOMEM;
    }
    r->mask = size - 1;
    *ringp = r;
    return 0;
}

void tern__ring_free(struct tern__ring *ring)
{
    if (ring != NULL)
        tern__free_lazy(ring->slots, ring->mask + 1, sizeof(ring->slots[0]));
    free(ring);
}

void tern__ring_push(struct tern__ring *ring, tern_job *job)
{
    /*
     * Relaxed: the position only names the slot. What orders us against
     * the consumer is the slot's own sequence: the acquire load below
     * pairs with the consumer's release store that freed the slot a lap
     * ago, and our release store pairs with its acquire load in pop.
     */
    uint64_t pos = atomic_fetch_add_explicit(&ring->tail, 1, memory_order_relaxed);
    uint64_t lap = pos & ~ring->mask;
    struct tern__ring_slot *slot = &ring->slots[pos & ring->mask];
    uint64_t seq = atomic_load_explicit(&slot->seq, memory_order_acquire);
    TERN_INSIST(seq == lap); /* a full ring: the credit accounting is broken */
    slot->job = job;
    /* Pairs with the acquire load in tern__ring_pop(): publishes job. */
    atomic_store_explicit(&slot->seq, lap + 1, memory_order_release);
}

tern_job *tern__ring_pop(struct tern__ring *ring)
{
    uint64_t lap = ring->head & ~ring->mask;
    struct tern__ring_slot *slot = &ring->slots[ring->head & ring->mask];
    /* Pairs with the release store in tern__ring_push(). */
    if (atomic_load_explicit(&slot->seq, memory_order_acquire) != lap + 1)
        return NULL;
    tern_job *job = slot->job;
    /* Pairs with the producer's acquire load one lap later. */
    atomic_store_explicit(&slot->seq, lap + ring->mask + 1, memory_order_release);
    ring->head++;
    return job;
}

bool tern__ring_ready(const struct tern__ring *ring)
{
    uint64_t lap = ring->head & ~ring->mask;
    const struct tern__ring_slot *slot = &ring->slots[ring->head & ring->mask];
    return atomic_load_explicit(&slot->seq, memory_order_acquire) == lap + 1;
}
