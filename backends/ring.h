/*
 * One bounded ring of pointers for tern's two queues between threads: the
 * bounded class's queue (many producers, many consumers: pool/bounded.c)
 * and each loop's result ring (many producers, one consumer:
 * runtime/job.c). It lives in the lowest layer because both use it; it
 * knows nothing of either.
 *
 * Vyukov's scheme: free-running 64-bit head and tail with a power-of-two
 * mask, and a sequence word per slot saying whose turn it is. With
 * lap = pos & ~mask (the position less its slot index):
 *
 *   seq == lap          the slot is free for the producer that claims pos
 *   seq == lap + 1      it holds the item pushed at pos, for the consumer
 *   seq == lap + size   freed by the consumer, for the producer one lap on
 *
 * (every sequence less its slot index, so the initial state is all zeros:
 * the slots come from tern__calloc_lazy untouched, and a ring sized for
 * 2^31 items costs the pages its positions have reached.)
 *
 * The full-slot rule, one for both queues: the ring is never full.
 * Its client admits an item (a queue slot, an undelivered credit) before
 * pushing it and returns the admission only after the item's slot was
 * freed, and the ring has at least as many slots as admissions. So the
 * slot a producer claims is free, or its previous item has been claimed
 * by a consumer that has not yet stored the slot's next sequence (the
 * client's admission counter is relaxed, so a producer may see the
 * admission returned before it sees that store). The producer waits that
 * out: a few instructions, unless the consumer was preempted there.
 * A producer never fails, and a consumer never blocks.
 */
#ifndef TERN_RING_H
#define TERN_RING_H

#include <sched.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <urcu/arch.h>

#include "check.h"

/*
 * The most items a ring's client may admit (queue_capacity, and the
 * loop's counts, are bounded by it): 2^31 is its own power of two, so the
 * ring's size, its mask and every count of its items fit in 32 bits.
 */
#define TERN__COUNT_MAX (UINT32_C(1) << 31)

/*
 * A producer that finds its slot not yet freed waits for a consumer a few
 * instructions from its store of the slot's sequence (the full-slot rule
 * above). This many relax rounds, a microsecond or so, cover that;
 * a consumer still not done was preempted there, so the producer yields
 * its CPU to let it finish rather than spin out its time slice.
 */
#define TERN__RING_SPINS_BEFORE_YIELD 64

struct tern__ring_slot {
    _Atomic uint64_t seq;
    void *item;
};

struct tern__ring {
    uint64_t mask;
    struct tern__ring_slot *slots;
    alignas(TERN_CACHELINE) _Atomic uint64_t tail; /* producers */
    alignas(TERN_CACHELINE) _Atomic uint64_t head; /* consumers */
};

/*
 * Layout pins. The mask and the slots pointer, read by every push and
 * pop and written only at init, share the first line; the producers'
 * tail and the consumers' head each own the next two, so a push never
 * pulls the consumers' line across and a pop never the producers'. A
 * field added to either hot line, or a slot grown past a power of two
 * (four slots to a line, none straddling two), fails here.
 */
_Static_assert(sizeof(struct tern__ring_slot) == 16, "a ring slot is a quarter line");
_Static_assert(offsetof(struct tern__ring, tail) == TERN_CACHELINE, "the tail owns line 1");
_Static_assert(offsetof(struct tern__ring, head) == 2 * TERN_CACHELINE, "the head owns line 2");
_Static_assert(sizeof(struct tern__ring) == 3 * TERN_CACHELINE, "nothing after the head");

/*
 * Set up ring for at least capacity items (rounded up to a power of two).
 * 0 or -ENOMEM. tern__ring_destroy releases the slots (NULL slots: none).
 */
int tern__ring_init(struct tern__ring *ring, uint64_t capacity);
void tern__ring_destroy(struct tern__ring *ring);

/* Fill the slot of a position the caller has claimed from the tail. */
static inline void tern__ring_fill(struct tern__ring *ring, uint64_t pos, void *item)
{
    uint64_t lap = pos & ~ring->mask;
    struct tern__ring_slot *slot = &ring->slots[pos & ring->mask];
    for (unsigned spins = 0; atomic_load_explicit(&slot->seq, memory_order_acquire) != lap;
         spins++) {
        if (spins > TERN__RING_SPINS_BEFORE_YIELD)
            sched_yield();
        else
            caa_cpu_relax();
    }
    slot->item = item;
    /* Pairs with the acquire load in the pops and in tern__ring_ready(). */
    atomic_store_explicit(&slot->seq, lap + 1, memory_order_release);
}

/* Any thread. Never fails (the full-slot rule above). */
static inline void tern__ring_push(struct tern__ring *ring, void *item)
{
    /*
     * Relaxed: the position only names the slot. What orders us against
     * the consumer is the slot's own sequence: the acquire load in fill
     * pairs with the consumer's release store that freed the slot a lap
     * ago, and fill's release store pairs with its acquire load in pop.
     */
    uint64_t pos = atomic_fetch_add_explicit(&ring->tail, 1, memory_order_relaxed);
    tern__ring_fill(ring, pos, item);
}

/*
 * Push n items with one claim of n consecutive positions: one atomic
 * step on the tail for the run instead of one per item. The slots are
 * filled in order, so consumers see the items become ready one by one,
 * as if pushed one by one. Any thread; never fails (the full-slot rule:
 * the caller admitted all n).
 */
static inline void tern__ring_push_many(struct tern__ring *ring, void *const *items, unsigned n)
{
    /* Relaxed, as in push: each slot's own sequence orders its item. */
    uint64_t pos = atomic_fetch_add_explicit(&ring->tail, n, memory_order_relaxed);
    for (unsigned i = 0; i < n; i++)
        tern__ring_fill(ring, pos + i, items[i]);
}

/* Whether a pop would find an item now (any thread; a snapshot). */
static inline bool tern__ring_ready(struct tern__ring *ring)
{
    uint64_t pos = atomic_load_explicit(&ring->head, memory_order_relaxed);
    /* Pairs with the release store in tern__ring_push(). */
    return atomic_load_explicit(&ring->slots[pos & ring->mask].seq, memory_order_acquire) ==
           (pos & ~ring->mask) + 1;
}

/* The one consumer of a single-consumer ring. NULL when nothing is ready. */
static inline void *tern__ring_pop_single(struct tern__ring *ring)
{
    uint64_t pos = atomic_load_explicit(&ring->head, memory_order_relaxed);
    uint64_t lap = pos & ~ring->mask;
    struct tern__ring_slot *slot = &ring->slots[pos & ring->mask];
    /* Pairs with the release store in tern__ring_push(). */
    if (atomic_load_explicit(&slot->seq, memory_order_acquire) != lap + 1)
        return NULL;
    void *item = slot->item;
    /* Pairs with the producer's acquire load one lap later. */
    atomic_store_explicit(&slot->seq, lap + ring->mask + 1, memory_order_release);
    atomic_store_explicit(&ring->head, pos + 1, memory_order_relaxed);
    return item;
}

/* Any consumer of a many-consumer ring (consumers compete by CAS on head). */
static inline void *tern__ring_pop(struct tern__ring *ring)
{
    uint64_t pos = atomic_load_explicit(&ring->head, memory_order_relaxed);
    for (;;) {
        struct tern__ring_slot *slot = &ring->slots[pos & ring->mask];
        uint64_t lap = pos & ~ring->mask;
        /* Pairs with the release store in tern__ring_push(). */
        uint64_t seq = atomic_load_explicit(&slot->seq, memory_order_acquire);
        int64_t dif = (int64_t)(seq - (lap + 1));
        if (dif == 0) {
            if (atomic_compare_exchange_weak_explicit(&ring->head, &pos, pos + 1,
                                                      memory_order_relaxed, memory_order_relaxed)) {
                void *item = slot->item;
                /* Pairs with the producer's acquire load one lap later. */
                atomic_store_explicit(&slot->seq, lap + ring->mask + 1, memory_order_release);
                return item;
            }
        } else if (dif < 0) {
            return NULL; /* not pushed yet: empty */
        } else {
            pos = atomic_load_explicit(&ring->head, memory_order_relaxed);
        }
    }
}

/*
 * Items between the consumers' head and the producers' tail now: pushed
 * or being pushed, not yet popped (any thread; a snapshot, which reads
 * the producers' line).
 */
static inline uint64_t tern__ring_count(struct tern__ring *ring)
{
    uint64_t head = atomic_load_explicit(&ring->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
    return tail > head ? tail - head : 0;
}

/*
 * Any consumer of a many-consumer ring: pop up to max (>= 1) items that
 * are ready one after another from the head, with one CAS of the head
 * for all of them. Returns how many were stored in items (0: empty).
 * Once the CAS has claimed the run no other consumer can reach its
 * slots and no producer writes a slot that holds an item, so the items
 * are read and their slots freed after it, in order.
 */
static inline unsigned tern__ring_pop_many(struct tern__ring *ring, void **items, unsigned max)
{
    uint64_t pos = atomic_load_explicit(&ring->head, memory_order_relaxed);
    for (;;) {
        unsigned n = 0;
        for (; n < max; n++) {
            uint64_t at = pos + n;
            /* Pairs with the release store in tern__ring_fill(). */
            uint64_t seq = atomic_load_explicit(&ring->slots[at & ring->mask].seq,
                                                memory_order_acquire);
            if (seq != (at & ~ring->mask) + 1)
                break;
        }
        if (n == 0) {
            uint64_t seq = atomic_load_explicit(&ring->slots[pos & ring->mask].seq,
                                                memory_order_acquire);
            if ((int64_t)(seq - ((pos & ~ring->mask) + 1)) < 0)
                return 0; /* not pushed yet: empty */
            pos = atomic_load_explicit(&ring->head, memory_order_relaxed);
            continue; /* another consumer took it: look again from the new head */
        }
        if (atomic_compare_exchange_weak_explicit(&ring->head, &pos, pos + n,
                                                  memory_order_relaxed, memory_order_relaxed)) {
            for (unsigned i = 0; i < n; i++) {
                uint64_t at = pos + i;
                struct tern__ring_slot *slot = &ring->slots[at & ring->mask];
                items[i] = slot->item;
                /* Pairs with the producer's acquire load one lap later. */
                atomic_store_explicit(&slot->seq, (at & ~ring->mask) + ring->mask + 1,
                                      memory_order_release);
            }
            return n;
        }
    }
}

#endif
