/*
 * The ring's setup, and the producer's rare wait (ring.h has the scheme
 * and the push and pops).
 */
#include <errno.h>
#include <sched.h>

#include "fault.h"
#include "ring.h"
#include "spin.h"

int tern__ring_init(struct tern__ring *ring, uint64_t capacity)
{
    uint64_t size = 1;
    unsigned shift = 0;
    while (size < capacity)
        size <<= 1, shift++;
    ring->slots = tern__calloc_lazy(size, sizeof(ring->slots[0]));
    if (ring->slots == NULL)
        return -ENOMEM;
    ring->mask = size - 1;
    ring->shift = shift;
    atomic_store_explicit(&ring->tail, 0, memory_order_relaxed);
    atomic_store_explicit(&ring->head, 0, memory_order_relaxed);
    return 0;
}

void tern__ring_destroy(struct tern__ring *ring)
{
    if (ring->slots != NULL)
        tern__free_lazy(ring->slots, ring->mask + 1, sizeof(ring->slots[0]));
    ring->slots = NULL;
}

void tern__ring_wait_free(_Atomic uint64_t *cell, uint64_t free_cell)
{
    /* Pairs with the consumer's release store that freed the slot a lap ago. */
    for (unsigned spins = 0; atomic_load_explicit(cell, memory_order_acquire) != free_cell;
         spins++) {
        if (spins > TERN__RING_SPINS_BEFORE_YIELD)
            sched_yield();
        else
            tern__spin_pause();
    }
}
