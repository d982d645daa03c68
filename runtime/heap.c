/*
 * The deadline heap: a binary min-heap of (deadline, sequence, op). The
 * sequence is the loop's arming counter, so equal deadlines pop in arming
 * order (FIFO on a tie). Each op remembers its index (op->aux) so a stop
 * removes it in O(log n) without a search. Timers and every internal
 * deadline share it: the loop computes one wait from one top.
 */
#include <errno.h>
#include <stdlib.h>

#include "loop_p.h"

static bool before(const struct tern__heap_entry *a, const struct tern__heap_entry *b)
{
    return a->deadline < b->deadline || (a->deadline == b->deadline && a->seq < b->seq);
}

static void set(struct tern__heap *h, uint32_t i, struct tern__heap_entry e)
{
    h->v[i] = e;
    e.op->aux = i;
}

static void sift_up(struct tern__heap *h, uint32_t i)
{
    struct tern__heap_entry e = h->v[i];
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (!before(&e, &h->v[parent]))
            break;
        set(h, i, h->v[parent]);
        i = parent;
    }
    set(h, i, e);
}

static void sift_down(struct tern__heap *h, uint32_t i)
{
    struct tern__heap_entry e = h->v[i];
    for (;;) {
        uint32_t child = 2 * i + 1;
        if (child >= h->len)
            break;
        if (child + 1 < h->len && before(&h->v[child + 1], &h->v[child]))
            child++;
        if (!before(&h->v[child], &e))
            break;
        set(h, i, h->v[child]);
        i = child;
    }
    set(h, i, e);
}

void tern__heap_destroy(struct tern__heap *h)
{
    free(h->v);
    h->v = NULL;
    h->len = h->cap = 0;
}

int tern__heap_reserve(struct tern__heap *h, size_t n)
{
    if (n <= h->cap)
        return 0;
    if (n >= UINT32_MAX / 2)
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

void tern__heap_push(struct tern__heap *h, uint64_t deadline, uint64_t seq, struct tern__op *op)
{
    TERN_INSIST(h->len < h->cap);
    h->v[h->len] = (struct tern__heap_entry){deadline, seq, op};
    sift_up(h, h->len++);
}

void tern__heap_remove(struct tern__heap *h, uint32_t i)
{
    TERN_INSIST(i < h->len);
    h->v[i].op->aux = UINT32_MAX;
    h->len--;
    if (i == h->len)
        return;
    set(h, i, h->v[h->len]);
    if (i > 0 && before(&h->v[i], &h->v[(i - 1) / 2]))
        sift_up(h, i);
    else
        sift_down(h, i);
}

/* ------------------------------------------------------------------ */
/* The loop's deadlines                                                */
/* ------------------------------------------------------------------ */

int tern__deadline_claim(tern_loop *loop)
{
    int rc = tern__heap_reserve(&loop->heap, (size_t)loop->heap_claims + 1);
    if (rc == 0)
        loop->heap_claims++;
    return rc;
}

void tern__deadline_unclaim(tern_loop *loop)
{
    TERN_INSIST(loop->heap_claims > 0);
    TERN_DECREMENT(loop->heap_claims);
}

void tern__deadline_arm(tern_loop *loop, struct tern__op *op, uint64_t deadline)
{
    if (tern__deadline_armed(op))
        tern__heap_remove(&loop->heap, op->aux);
    tern__heap_push(&loop->heap, deadline, loop->arm_seq++, op);
}

void tern__deadline_disarm(tern_loop *loop, struct tern__op *op)
{
    if (tern__deadline_armed(op))
        tern__heap_remove(&loop->heap, op->aux);
}
