/*
 * The deadline heap: a binary min-heap of 16-byte (deadline, sequence,
 * ref) entries. The sequence is the heap's arming counter, so equal
 * deadlines pop in arming order (FIFO on a tie). Whatever is armed keeps
 * its entry's index (a timer record's `heap`, an op's `aux`), updated at
 * every move, so a stop removes it in O(log n) without a search. Timers
 * and every internal deadline share it: the loop computes one wait from
 * one top.
 *
 * The sequence is 32 bits, half of what a 64-bit counter costs per entry.
 * It never wraps: when the counter reaches its end, the entries are
 * renumbered 0..len-1 in their (deadline, sequence) order, which keeps
 * every comparison's answer. That is an O(n log n) sort once per four
 * billion armings.
 *
 * Ops outside the timer table are named through `ops`, a small table of
 * pointers indexed by the entry's ref: an op gets an index when armed and
 * gives it back when disarmed; its claim guarantees the room.
 */
#include <errno.h>
#include <stdlib.h>

#include "heap.h"
#include "lag.h"
#include "loop_p.h"
#include "testing.h"

static bool before(const struct tern__heap_entry *a, const struct tern__heap_entry *b)
{
    return a->deadline < b->deadline || (a->deadline == b->deadline && a->seq < b->seq);
}

static struct tern__op *op_of(const struct tern__heap *h, uint32_t ref)
{
    return (struct tern__op *)h->ops[ref & ~TERN__HEAP_OP];
}

/*
 * Tell the armed thing where its entry now is: a timer's record (one
 * index away; `rec` is passed in so the sift keeps it in a register), or
 * an op through the op table.
 */
static inline void placed_in(tern_loop *loop, struct tern__timer *rec, uint32_t ref, uint32_t i)
{
    if (TERN_LIKELY(!(ref & TERN__HEAP_OP)))
        rec[ref].heap = i;
    else
        op_of(&loop->heap, ref)->aux = i & TERN__OP_UNARMED; /* UINT32_MAX: unarmed */
}

static void placed(tern_loop *loop, uint32_t ref, uint32_t i)
{
    placed_in(loop, loop->timers.rec, ref, i);
}

/*
 * The sift moves a hole rather than swapping, and keeps the array and the
 * record array in locals: every move stores into a record, and the
 * compiler cannot tell that such a store leaves them alone.
 */
static void sift_up(tern_loop *loop, uint32_t i)
{
    struct tern__heap_entry *v = loop->heap.v;
    struct tern__timer *rec = loop->timers.rec;
    struct tern__heap_entry e = v[i];
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (!before(&e, &v[parent]))
            break;
        v[i] = v[parent];
        placed_in(loop, rec, v[i].ref, i);
        i = parent;
    }
    v[i] = e;
    placed_in(loop, rec, e.ref, i);
}

static int cmp_entry(const void *a, const void *b)
{
    const struct tern__heap_entry *x = a, *y = b;
    return before(x, y) ? -1 : before(y, x) ? 1 : 0;
}

/*
 * The counter is at its end: renumber. A sorted array is a valid heap, so
 * sorting by the current order and numbering by position keeps both the
 * heap and every tie's order, and leaves room for 2^32 - len armings.
 */
static void renumber(tern_loop *loop)
{
    struct tern__heap *h = &loop->heap;
    qsort(h->v, h->len, sizeof(h->v[0]), cmp_entry);
    for (uint32_t i = 0; i < h->len; i++) {
        h->v[i].seq = i;
        placed(loop, h->v[i].ref, i);
    }
    h->next_seq = h->len;
}

static void push(tern_loop *loop, uint64_t deadline, uint32_t ref)
{
    struct tern__heap *h = &loop->heap;
    TERN_INSIST(h->len < h->cap);
    if (TERN_UNLIKELY(h->next_seq == UINT32_MAX))
        renumber(loop);
    h->v[h->len] = (struct tern__heap_entry){deadline, h->next_seq++, ref};
    sift_up(loop, h->len++);
}

/*
 * Remove entry i; returns its ref. Bottom-up: the hole goes down to a
 * leaf along the smaller children (one comparison per level, not two),
 * then the last entry fills it and climbs. The last entry is usually one
 * of the latest deadlines and belongs near the bottom, so the climb is
 * short; at 100k timers this saves a fifth of a pop's instructions.
 */
static uint32_t remove_at(tern_loop *loop, uint32_t i)
{
    struct tern__heap *h = &loop->heap;
    TERN_INSIST(i < h->len);
    uint32_t ref = h->v[i].ref;
    placed(loop, ref, UINT32_MAX);
    const uint32_t len = --h->len;
    if (i == len)
        return ref;
    struct tern__heap_entry *v = h->v;
    struct tern__timer *rec = loop->timers.rec;
    for (;;) {
        uint32_t child = 2 * i + 1;
        if (child >= len)
            break;
        if (child + 1 < len && before(&v[child + 1], &v[child]))
            child++;
        v[i] = v[child];
        placed_in(loop, rec, v[i].ref, i);
        i = child;
    }
    v[i] = v[len];
    sift_up(loop, i);
    return ref;
}

void tern__heap_destroy(struct tern__heap *h)
{
    free(h->v);
    free(h->ops);
    *h = (struct tern__heap){0};
}

/* Room for n entries in all, so pushes up to n cannot fail. */
static int reserve(struct tern__heap *h, size_t n)
{
    if (n <= h->cap)
        return 0;
    /* Refs are 31-bit and an op's index 26-bit (op_types.h): all ones marks "not armed". */
    if (n >= TERN__OP_UNARMED)
        return -ENOMEM;
    uint32_t ncap = h->cap ? h->cap : 64;
    while (ncap < n)
        ncap *= 2;
    struct tern__heap_entry *v = tern__realloc(h->v, (size_t)ncap * sizeof(*v));
    if (v == NULL)
        return -ENOMEM;
    h->v = v;
    h->cap = ncap;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Claims and arming                                                   */
/* ------------------------------------------------------------------ */

int tern__deadline_claim_timer_slow(tern_loop *loop)
{
    int rc = reserve(&loop->heap, (size_t)loop->heap.claims + 1);
    if (rc == 0)
        loop->heap.claims++;
    return rc;
}

int tern__deadline_claim(tern_loop *loop)
{
    struct tern__heap *h = &loop->heap;
    if (h->op_claims == h->ops_cap) {
        uint32_t ncap = h->ops_cap ? 2 * h->ops_cap : 16;
        if (ncap >= TERN__HEAP_OP)
            return -ENOMEM;
        uintptr_t *ops = tern__realloc(h->ops, (size_t)ncap * sizeof(*ops));
        if (ops == NULL)
            return -ENOMEM;
        /* Chain the new indexes onto the free list. */
        for (uint32_t i = ncap; i-- > h->ops_cap;) {
            ops[i] = ((uintptr_t)h->ops_free << 1) | 1;
            h->ops_free = i + 1;
        }
        h->ops = ops;
        h->ops_cap = ncap;
    }
    int rc = tern__deadline_claim_timer(loop);
    if (rc == 0)
        h->op_claims++;
    return rc;
}

void tern__deadline_unclaim(tern_loop *loop)
{
    TERN_DECREMENT(loop->heap.op_claims);
    tern__deadline_unclaim_timer(loop);
}

void tern__deadline_arm(tern_loop *loop, struct tern__op *op, uint64_t deadline)
{
    struct tern__heap *h = &loop->heap;
    uint32_t ix;
    if (tern__deadline_armed(op)) {
        /* Keep the index: it is the op's while armed. */
        ix = remove_at(loop, op->aux) & ~TERN__HEAP_OP;
    } else {
        TERN_INSIST(h->ops_free != 0); /* the op's claim holds an index for it */
        ix = h->ops_free - 1;
        h->ops_free = (uint32_t)(h->ops[ix] >> 1);
    }
    h->ops[ix] = (uintptr_t)op;
    push(loop, deadline, ix | TERN__HEAP_OP);
}

static void release_op_index(struct tern__heap *h, uint32_t ref)
{
    uint32_t ix = ref & ~TERN__HEAP_OP;
    h->ops[ix] = ((uintptr_t)h->ops_free << 1) | 1;
    h->ops_free = ix + 1;
}

void tern__deadline_disarm(tern_loop *loop, struct tern__op *op)
{
    if (tern__deadline_armed(op))
        release_op_index(&loop->heap, remove_at(loop, op->aux));
}

void tern__deadline_arm_timer(tern_loop *loop, uint32_t slot, uint64_t deadline)
{
    TERN_INSIST(!(slot & TERN__HEAP_OP));
    tern__deadline_disarm_timer(loop, slot);
    push(loop, deadline, slot);
}

void tern__deadline_remove_timer(tern_loop *loop, uint32_t slot)
{
    (void)remove_at(loop, tern__timer_at(&loop->timers, slot)->heap);
}

bool tern__deadline_pop_due(tern_loop *loop, struct tern__op **opp, uint32_t *slotp)
{
    const struct tern__heap_entry *top = tern__heap_top(&loop->heap);
    if (top == NULL || top->deadline > loop->now)
        return false;
    tern__lag_record(loop, top->deadline);
    uint32_t ref = top->ref;
    if (!(ref & TERN__HEAP_OP)) {
        (void)remove_at(loop, 0);
        *opp = NULL;
        *slotp = ref;
        return true;
    }
    *opp = op_of(&loop->heap, ref);
    release_op_index(&loop->heap, remove_at(loop, 0));
    return true;
}
