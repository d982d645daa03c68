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

/* Tell the armed thing where its entry now is. */
static void placed(tern_loop *loop, uint32_t ref, uint32_t i)
{
    if (ref & TERN__HEAP_OP)
        op_of(&loop->heap, ref)->aux = i;
    else
        tern__timer_at(&loop->timers, ref)->heap = i;
}

static void set(tern_loop *loop, uint32_t i, struct tern__heap_entry e)
{
    loop->heap.v[i] = e;
    placed(loop, e.ref, i);
}

static void sift_up(tern_loop *loop, uint32_t i)
{
    struct tern__heap *h = &loop->heap;
    struct tern__heap_entry e = h->v[i];
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (!before(&e, &h->v[parent]))
            break;
        set(loop, i, h->v[parent]);
        i = parent;
    }
    set(loop, i, e);
}

static void sift_down(tern_loop *loop, uint32_t i)
{
    struct tern__heap *h = &loop->heap;
    struct tern__heap_entry e = h->v[i];
    for (;;) {
        uint32_t child = 2 * i + 1;
        if (child >= h->len)
            break;
        if (child + 1 < h->len && before(&h->v[child + 1], &h->v[child]))
            child++;
        if (!before(&h->v[child], &e))
            break;
        set(loop, i, h->v[child]);
        i = child;
    }
    set(loop, i, e);
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

/* Remove entry i; returns its ref. */
static uint32_t remove_at(tern_loop *loop, uint32_t i)
{
    struct tern__heap *h = &loop->heap;
    TERN_INSIST(i < h->len);
    uint32_t ref = h->v[i].ref;
    placed(loop, ref, UINT32_MAX);
    h->len--;
    if (i != h->len) {
        set(loop, i, h->v[h->len]);
        if (i > 0 && before(&h->v[i], &h->v[(i - 1) / 2]))
            sift_up(loop, i);
        else
            sift_down(loop, i);
    }
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
    /* Refs and indexes are 31-bit; UINT32_MAX marks "not armed". */
    if (n >= TERN__HEAP_OP)
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

int tern__deadline_claim_timer(tern_loop *loop)
{
    int rc = reserve(&loop->heap, (size_t)loop->heap.claims + 1);
    if (rc == 0)
        loop->heap.claims++;
    return rc;
}

void tern__deadline_unclaim_timer(tern_loop *loop)
{
    TERN_DECREMENT(loop->heap.claims);
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

void tern__deadline_disarm_timer(tern_loop *loop, uint32_t slot)
{
    uint32_t i = tern__timer_at(&loop->timers, slot)->heap;
    if (i != UINT32_MAX)
        (void)remove_at(loop, i);
}

void tern__deadline_fire(tern_loop *loop)
{
    const struct tern__heap_entry *top;
    while ((top = tern__heap_top(&loop->heap)) != NULL && top->deadline <= loop->now) {
        uint32_t ref = top->ref;
        if (!(ref & TERN__HEAP_OP)) {
            (void)remove_at(loop, 0);
            tern__timer_expired(loop, ref);
            continue;
        }
        struct tern__op *op = op_of(&loop->heap, ref);
        release_op_index(&loop->heap, remove_at(loop, 0));
        if (op->cls->expired != NULL)
            op->cls->expired(loop, op);
        else
            tern__op_ready(loop, op);
    }
}

void tern__test_heap_seq(tern_loop *loop, uint32_t next)
{
    loop->heap.next_seq = next;
}
