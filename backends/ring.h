/*
 * One bounded ring of pointers for tern's two queues between threads: the
 * bounded class's queue (many producers, many consumers: pool/bounded.c)
 * and each loop's result ring (many producers, one consumer:
 * runtime/jobs/job.c). It lives in the lowest layer because both use it; it
 * knows nothing of either.
 *
 * Vyukov's scheme with the item and the turn in one 8-byte cell: free-running
 * 64-bit head and tail with a power-of-two mask, and per slot a cell
 * that holds the slot's item or says it is free, each tagged with a lap
 * number (lap = pos >> shift, the position's count of whole rings,
 * truncated to TERN__RING_LAP_BITS). For the position pos, of lap L:
 *
 *   free(L)           the slot is free for the producer that claims pos
 *   full(L, item)     it holds the item pushed at pos, for the consumer
 *   free(L + 1)       freed by the consumer, for the producer one lap on
 *
 * (free(0) is 0, so the initial state is all zeros: the cells come from
 * tern__calloc_lazy untouched, and a ring sized for 2^31 items costs the
 * pages its positions have reached.) An item is a pointer below 2^47
 * and 8-aligned (a record's address; the pushes check it), so its 44
 * significant bits, the full bit and a 19-bit lap share the word.
 *
 * Why the lap is needed, and why 19 bits of it do (docs/decisions.md has
 * the whole argument): consumers claim a position by a CAS of the head
 * and free its cell after the CAS (a batch take frees a run of them), so
 * a consumer that reads the head as pos can find in pos's cell the item
 * of pos - size, claimed but not yet freed. Without a lap it would take
 * that item a second time. With one, an item is taken only from the cell
 * and lap of its own position, and a false match needs a view of the
 * cell 2^19 laps old; the full-slot rule below keeps every cell within
 * one lap of its position's turn.
 *
 * The full-slot rule, one for both queues: the ring is never full.
 * Its client admits an item (a queue slot, an undelivered credit) before
 * pushing it and returns the admission only after the item's slot was
 * freed, and the ring has at least as many slots as admissions. So the
 * slot a producer claims is free, or its previous item has been claimed
 * by a consumer that has not yet stored the slot's free cell (the
 * client's admission counter is relaxed, so a producer may see the
 * admission returned before it sees that store). The producer waits that
 * out: a few instructions, unless the consumer was preempted there.
 * A producer never fails, and a consumer never blocks.
 */
#ifndef TERN_RING_H
#define TERN_RING_H

#include <stdalign.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "check.h"

/*
 * The most items a ring's client may admit (queue_capacity, and the
 * loop's counts, are bounded by it): 2^31 is its own power of two, so the
 * ring's size, its mask and every count of its items fit in 32 bits.
 */
#define TERN__COUNT_MAX (UINT32_C(1) << 31)

/*
 * A producer that finds its slot not yet freed waits for a consumer a few
 * instructions from its store of the slot's free cell (the full-slot rule
 * above). This many relax rounds, a microsecond or so, cover that;
 * a consumer still not done was preempted there, so the producer yields
 * its CPU to let it finish rather than spin out its time slice.
 */
#define TERN__RING_SPINS_BEFORE_YIELD 64

struct tern__ring_slot {
    _Atomic uint64_t cell; /* free(lap) or full(lap, item): the scheme above */
};

/* The cell's layout: bit 0 full, bits 1..44 the item's address >> 3, bits 45..63 the lap. */
#define TERN__RING_LAP_SHIFT 45
#define TERN__RING_LAP_BITS (64 - TERN__RING_LAP_SHIFT)
#define TERN__RING_ITEM_MASK ((UINT64_C(1) << TERN__RING_LAP_SHIFT) - 2)

struct tern__ring {
    uint64_t mask;
    struct tern__ring_slot *slots;
    unsigned shift; /* log2(mask + 1): a position's lap is pos >> shift */
    alignas(TERN_CACHELINE) _Atomic uint64_t tail; /* producers */
    alignas(TERN_CACHELINE) _Atomic uint64_t head; /* consumers */
};

/*
 * Layout pins. The mask and the slots pointer, read by every push and
 * pop and written only at init, share the first line; the producers'
 * tail and the consumers' head each own the next two, so a push never
 * pulls the consumers' line across and a pop never the producers'. A
 * field added to either hot line, or a slot grown past a power of two
 * (eight slots to a line, none straddling two), fails here.
 */
_Static_assert(sizeof(struct tern__ring_slot) == 8, "a ring slot is an eighth of a line");
_Static_assert(offsetof(struct tern__ring, tail) == TERN_CACHELINE, "the tail owns line 1");
_Static_assert(offsetof(struct tern__ring, head) == 2 * TERN_CACHELINE, "the head owns line 2");
_Static_assert(sizeof(struct tern__ring) == 3 * TERN_CACHELINE, "nothing after the head");

/*
 * Set up ring for at least capacity items (rounded up to a power of two).
 * 0 or -ENOMEM. tern__ring_destroy releases the slots (NULL slots: none).
 */
int tern__ring_init(struct tern__ring *ring, uint64_t capacity);
void tern__ring_destroy(struct tern__ring *ring);

/* The cell that frees pos's slot for its producer (lap L: free(L)). */
static inline uint64_t tern__ring_free(const struct tern__ring *ring, uint64_t pos)
{
    return (pos >> ring->shift) << TERN__RING_LAP_SHIFT;
}

/* Whether cell holds the item pushed at pos (full(L, item) with pos's lap L). */
static inline bool tern__ring_holds(const struct tern__ring *ring, uint64_t pos, uint64_t cell)
{
    return (cell & ~TERN__RING_ITEM_MASK) == (tern__ring_free(ring, pos) | 1);
}

static inline void *tern__ring_item(uint64_t cell)
{
    return (void *)(uintptr_t)((cell & TERN__RING_ITEM_MASK) << 2);
}

/*
 * Free the slot of a position a consumer has claimed: its cell becomes
 * free(L + 1), the producer's one lap on.
 */
static inline void tern__ring_release(struct tern__ring *ring, uint64_t pos)
{
    /* Pairs with the producer's acquire load one lap later. */
    atomic_store_explicit(&ring->slots[pos & ring->mask].cell,
                          tern__ring_free(ring, pos + ring->mask + 1), memory_order_release);
}

/*
 * The wait of the full-slot rule (ring.c), out of line: a run of pushes
 * keeps the ring's shape in registers only if no call sits in its loop.
 * Returns once cell reads free_cell.
 */
__attribute__((cold)) void tern__ring_wait_free(_Atomic uint64_t *cell, uint64_t free_cell);

/* One lap in a cell's lap bits: free(L + 1) is free(L) + TERN__RING_LAP_ONE. */
#define TERN__RING_LAP_ONE (UINT64_C(1) << TERN__RING_LAP_SHIFT)

/* Fill a claimed position's cell, whose free cell (free(L)) is free_cell. */
static inline void tern__ring_fill_cell(_Atomic uint64_t *cell, uint64_t free_cell, void *item)
{
    uintptr_t at = (uintptr_t)item;
    /* The cell holds an item's bits 3..46 (the layout above). */
    TERN_REQUIRE(at != 0 && (at & 7) == 0 && ((uint64_t)at >> 47) == 0);
    /* Pairs with the consumer's release store that freed the slot a lap ago. */
    if (TERN_UNLIKELY(atomic_load_explicit(cell, memory_order_acquire) != free_cell))
        tern__ring_wait_free(cell, free_cell);
    /* Pairs with the acquire load in the pops and in tern__ring_ready(). */
    atomic_store_explicit(cell, free_cell | ((uint64_t)at >> 2) | 1, memory_order_release);
}

/* Fill the slot of a position the caller has claimed from the tail. */
static inline void tern__ring_fill(struct tern__ring *ring, uint64_t pos, void *item)
{
    tern__ring_fill_cell(&ring->slots[pos & ring->mask].cell, tern__ring_free(ring, pos), item);
}

/* Any thread. Never fails (the full-slot rule above). */
static inline void tern__ring_push(struct tern__ring *ring, void *item)
{
    /*
     * Relaxed: the position only names the slot. What orders us against
     * the consumer is the slot's own cell: the acquire load in fill
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
    /* Relaxed, as in push: each slot's own cell orders its item. */
    uint64_t pos = atomic_fetch_add_explicit(&ring->tail, n, memory_order_relaxed);
    /* The ring's shape in locals: a cell's store could alias its fields. */
    uint64_t mask = ring->mask;
    struct tern__ring_slot *slots = ring->slots;
    /* The run's free cell, a lap on wherever the run wraps to slot 0. */
    uint64_t free_cell = tern__ring_free(ring, pos);
    for (unsigned i = 0; i < n; i++, pos++) {
        uint64_t at = pos & mask;
        if (at == 0 && i > 0)
            free_cell += TERN__RING_LAP_ONE;
        tern__ring_fill_cell(&slots[at].cell, free_cell, items[i]);
    }
}

/* Whether a pop would find an item now (any thread; a snapshot). */
static inline bool tern__ring_ready(struct tern__ring *ring)
{
    uint64_t pos = atomic_load_explicit(&ring->head, memory_order_relaxed);
    /* Pairs with the release store in tern__ring_fill(). */
    return tern__ring_holds(
        ring, pos, atomic_load_explicit(&ring->slots[pos & ring->mask].cell, memory_order_acquire));
}

/*
 * The one consumer of a single-consumer ring: pop up to max items into
 * out, in order, with one store of the head for them all. Returns how many.
 */
static inline unsigned tern__ring_pop_single_many(struct tern__ring *ring, void **out, unsigned max)
{
    /* The ring's shape in locals, as in push_many. */
    uint64_t mask = ring->mask;
    struct tern__ring_slot *slots = ring->slots;
    uint64_t pos = atomic_load_explicit(&ring->head, memory_order_relaxed);
    /*
     * The tags of the run's lap: its items' (full(L), item bits aside)
     * and the free cell each slot gets for lap L + 1; a lap on wherever
     * the run wraps to slot 0.
     */
    uint64_t full = tern__ring_free(ring, pos) | 1;
    uint64_t freed = full - 1 + TERN__RING_LAP_ONE;
    unsigned n = 0;
    for (; n < max; n++, pos++) {
        uint64_t at = pos & mask;
        if (at == 0 && n > 0) {
            full += TERN__RING_LAP_ONE;
            freed += TERN__RING_LAP_ONE;
        }
        /* Pairs with the release store in tern__ring_fill(). */
        uint64_t cell = atomic_load_explicit(&slots[at].cell, memory_order_acquire);
        if ((cell & ~TERN__RING_ITEM_MASK) != full)
            break;
        out[n] = tern__ring_item(cell);
        /* Pairs with the producer's acquire load one lap later. */
        atomic_store_explicit(&slots[at].cell, freed, memory_order_release);
    }
    if (n > 0)
        atomic_store_explicit(&ring->head, pos, memory_order_relaxed);
    return n;
}

/*
 * A consumer of a many-consumer ring found pos's item not there: the
 * queue is empty if the head is still pos (the item is not pushed yet,
 * or pos's cell still holds the item of the lap before, claimed and not
 * yet freed); otherwise another consumer took pos, and *pos becomes the
 * new head to look at.
 */
static inline bool tern__ring_moved(struct tern__ring *ring, uint64_t *pos)
{
    uint64_t now = atomic_load_explicit(&ring->head, memory_order_relaxed);
    if (now == *pos)
        return false;
    *pos = now;
    return true;
}

/* Any consumer of a many-consumer ring (consumers compete by CAS on head). */
static inline void *tern__ring_pop(struct tern__ring *ring)
{
    uint64_t pos = atomic_load_explicit(&ring->head, memory_order_relaxed);
    for (;;) {
        /* Pairs with the release store in tern__ring_fill(). */
        uint64_t cell =
            atomic_load_explicit(&ring->slots[pos & ring->mask].cell, memory_order_acquire);
        if (tern__ring_holds(ring, pos, cell)) {
            /* The CAS finds the head still at pos, so the item read is pos's own. */
            if (atomic_compare_exchange_weak_explicit(&ring->head, &pos, pos + 1,
                                                      memory_order_relaxed, memory_order_relaxed)) {
                tern__ring_release(ring, pos);
                return tern__ring_item(cell);
            }
        } else if (!tern__ring_moved(ring, &pos)) {
            return NULL; /* not pushed yet: empty */
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
 * read before it are the run's, and their slots are freed after it, in
 * order.
 */
static inline unsigned tern__ring_pop_many(struct tern__ring *ring, void **items, unsigned max)
{
    uint64_t pos = atomic_load_explicit(&ring->head, memory_order_relaxed);
    for (;;) {
        unsigned n = 0;
        for (; n < max; n++) {
            uint64_t at = pos + n;
            /* Pairs with the release store in tern__ring_fill(). */
            uint64_t cell =
                atomic_load_explicit(&ring->slots[at & ring->mask].cell, memory_order_acquire);
            if (!tern__ring_holds(ring, at, cell))
                break;
            items[n] = tern__ring_item(cell);
        }
        if (n == 0) {
            if (!tern__ring_moved(ring, &pos))
                return 0; /* not pushed yet: empty */
            continue;     /* another consumer took it: look again from the new head */
        }
        if (atomic_compare_exchange_weak_explicit(&ring->head, &pos, pos + n, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            for (unsigned i = 0; i < n; i++)
                tern__ring_release(ring, pos + i);
            return n;
        }
    }
}

#endif
