/*
 * The ring's setup (ring.h has the scheme and the push and pops).
 */
#include <errno.h>

#include "fault.h"
#include "ring.h"

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
