/*
 * Timers: a 32-byte record in the loop's timer table (timer_table.c) and
 * one 16-byte heap entry, and nothing else: no op header, no id-map
 * entry. A million timers cost about 48 MB, a third of libuv's.
 *
 * A repeating timer is rearmed in step 5 when it fires (now + repeat), so
 * it keeps its heap slot and a slow callback cannot cause a burst of
 * catch-up calls; if it fires again before its callback ran, the two
 * firings merge into one.
 *
 * The due queue. Step 5 moves expired timers onto a FIFO linked through
 * their records, and one op, `due`, stands for the whole FIFO on the
 * loop's ready queue: it is queued where the first of them came due, and
 * step 2 drains the FIFO through it within dispatch_batch (the class's
 * `drain` hook), leaving it at the head while callbacks remain. So
 * timers keep their place among the other ready ops as when each was an
 * op; the one difference is under a backlog (more ready than one step 2
 * runs): timers that come due while earlier ones still wait join them.
 *
 * A timer stopped while on the FIFO cannot be unlinked (singly linked):
 * its callback is cleared, which makes it dead, and the drain frees its
 * slot when it gets there. While every queued timer is dead, `due` is
 * marked dead too, so an empty-in-effect FIFO is not ready work.
 */
#include <errno.h>
#include <stdlib.h>

#include "admit.h"
#include "heap.h"
#include "loop_p.h"
#include "timer_table.h"

static uint64_t period_of(const struct tern__timer_table *t, const struct tern__timer *r)
{
    uint32_t ix = tern__timer_rep(r);
    return ix != 0 ? t->repeat[ix - 1].period : 0;
}

/*
 * End the live timer in `slot`: its id goes stale, its unit of the live
 * count and its reference are returned, it leaves the heap. The record is
 * freed now, or by the drain if it waits on the due queue.
 */
static void finish(tern_loop *loop, uint32_t slot)
{
    struct tern__timer_table *t = &loop->timers;
    struct tern__timer *r = tern__timer_at(t, slot);
    TERN_INSIST(r->cb != NULL);
    tern__deadline_disarm_timer(loop, slot);
    tern__deadline_unclaim_timer(loop);
    if (!(r->bits & TERN__TIMER_UNREF))
        TERN_DECREMENT(loop->refs);
    tern__op_unadmit(loop);
    TERN_DECREMENT(t->live);
    uint32_t rep = tern__timer_rep(r);
    if (rep != 0) {
        /* Off the heap now: a queued timer's link moves into its record. */
        if (r->bits & TERN__TIMER_QUEUED)
            r->next = t->repeat[rep - 1].next;
        tern__timer_repeat_free(t, rep);
    }
    if (!(r->bits & TERN__TIMER_QUEUED)) {
        tern__timer_slot_free(t, slot);
        return;
    }
    r->cb = NULL; /* dead: tern__timer_slot_of no longer finds it */
    r->bits = TERN__TIMER_QUEUED;
    TERN_DECREMENT(t->due_live);
    if (t->due_live == 0) {
        /* Nothing on the FIFO will run: it is no ready work. */
        t->due.flags |= TERN__OP_DEAD;
        TERN_DECREMENT(loop->ready_count);
    }
}

/* The live timer `id` names, as a public call may see it. */
static uint32_t find(tern_loop *loop, tern_id id)
{
    return tern__timer_slot_of(&loop->timers, id);
}

void tern__timer_expired(tern_loop *loop, uint32_t slot)
{
    struct tern__timer_table *t = &loop->timers;
    struct tern__timer *r = tern__timer_at(t, slot);
    uint64_t period = period_of(t, r);
    if (period != 0)
        tern__deadline_arm_timer(loop, slot, loop->now + period);
    if (r->bits & TERN__TIMER_QUEUED)
        return; /* fired again before its callback ran: one callback */
    r->bits |= TERN__TIMER_QUEUED;
    *tern__timer_link(t, r) = TERN__SLOT_NONE;
    if (t->due_tail != TERN__SLOT_NONE)
        *tern__timer_link(t, tern__timer_at(t, t->due_tail)) = slot;
    else
        t->due_head = slot;
    t->due_tail = slot;
    t->due_live++;
    if (!(t->due.flags & TERN__OP_QUEUED)) {
        tern__op_ready(loop, &t->due);
    } else if (t->due.flags & TERN__OP_DEAD) {
        t->due.flags &= ~TERN__OP_DEAD; /* live work behind it again */
        loop->ready_count++;
    }
}

/* Take the FIFO's head off; returns its slot. */
static uint32_t due_pop(struct tern__timer_table *t)
{
    uint32_t slot = t->due_head;
    struct tern__timer *r = tern__timer_at(t, slot);
    t->due_head = *tern__timer_link(t, r);
    if (t->due_head == TERN__SLOT_NONE)
        t->due_tail = TERN__SLOT_NONE;
    if (tern__timer_rep(r) == 0)
        r->heap = UINT32_MAX; /* a one-shot's word was its link: it is not armed */
    r->bits &= ~TERN__TIMER_QUEUED;
    return slot;
}

/* Step 2: run up to `budget` due timers, freeing dead ones on the way. */
static unsigned due_drain(tern_loop *loop, struct tern__op *op, unsigned budget, bool *more)
{
    (void)op;
    struct tern__timer_table *t = &loop->timers;
    unsigned ran = 0;
    while (t->due_head != TERN__SLOT_NONE) {
        struct tern__timer *r = tern__timer_at(t, t->due_head);
        if (r->cb != NULL && ran == budget)
            break;
        uint32_t slot = due_pop(t);
        if (r->cb == NULL) {
            tern__timer_slot_free(t, slot);
            continue;
        }
        TERN_DECREMENT(t->due_live);
        tern_id id = tern__timer_id_of(t, slot);
        tern_timer_cb cb = r->cb;
        void *arg = r->arg;
        if (tern__timer_rep(r) == 0)
            finish(loop, slot); /* a one-shot id is stale once its callback starts */
        ran++;
        cb(loop, id, arg);
    }
    *more = t->due_head != TERN__SLOT_NONE;
    return ran;
}

/* Step 2 found `due` dead at the head: only dead timers are behind it. */
static void due_free(tern_loop *loop, struct tern__op *op)
{
    struct tern__timer_table *t = &loop->timers;
    while (t->due_head != TERN__SLOT_NONE) {
        uint32_t slot = due_pop(t);
        TERN_INSIST(tern__timer_at(t, slot)->cb == NULL);
        tern__timer_slot_free(t, slot);
    }
    op->flags &= ~TERN__OP_DEAD;
}

static const struct tern__op_class due_class = {
    .name = "due timers",
    .drain = due_drain,
    .free = due_free,
};

void tern__timers_init(tern_loop *loop)
{
    struct tern__timer_table *t = &loop->timers;
    t->free = TERN__SLOT_NONE;
    t->due_head = t->due_tail = TERN__SLOT_NONE;
    t->due = (struct tern__op){.cls = &due_class, .aux = TERN__OP_UNARMED};
}

void tern__timers_cancel_all(tern_loop *loop)
{
    struct tern__timer_table *t = &loop->timers;
    for (uint32_t slot = 0; slot < t->used && t->live > 0; slot++)
        if (tern__timer_at(t, slot)->cb != NULL)
            finish(loop, slot);
}

void tern__timers_destroy(tern_loop *loop)
{
    TERN_INSIST(loop->timers.live == 0 && loop->timers.due_head == TERN__SLOT_NONE);
    tern__timer_table_destroy(&loop->timers);
}

int tern__timer_cancel(tern_loop *loop, tern_id id)
{
    uint32_t slot = find(loop, id);
    if (slot == TERN__SLOT_NONE)
        return -ENOENT;
    finish(loop, slot);
    return 0;
}

int tern__timer_set_ref(tern_loop *loop, tern_id id, bool ref)
{
    uint32_t slot = find(loop, id);
    if (slot == TERN__SLOT_NONE)
        return -ENOENT;
    struct tern__timer *r = tern__timer_at(&loop->timers, slot);
    bool is_ref = !(r->bits & TERN__TIMER_UNREF);
    if (ref && !is_ref) {
        r->bits &= ~TERN__TIMER_UNREF;
        loop->refs++;
    } else if (!ref && is_ref) {
        r->bits |= TERN__TIMER_UNREF;
        TERN_DECREMENT(loop->refs);
    }
    return 0;
}

int tern_timer_start(tern_loop *loop, uint64_t delay_ns, uint64_t repeat_ns, tern_timer_cb cb,
                     void *arg, tern_id *idp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (cb == NULL || delay_ns > TERN__DURATION_MAX_NS || repeat_ns > TERN__DURATION_MAX_NS)
        return -EINVAL;
    int rc = tern__op_admit(loop);
    if (rc < 0)
        return rc;
    struct tern__timer_table *t = &loop->timers;
    uint32_t rep = 0, slot;
    if ((rc = tern__deadline_claim_timer(loop)) < 0)
        goto unadmit;
    rc = -ENOMEM;
    if (repeat_ns != 0 && (rep = tern__timer_repeat_alloc(t, repeat_ns)) == 0)
        goto unclaim;
    if ((rc = tern__timer_slot_alloc(t, &slot)) < 0)
        goto unrepeat;
    struct tern__timer *r = tern__timer_at(t, slot);
    r->cb = cb;
    r->arg = arg;
    r->bits = rep << TERN__TIMER_REPEAT_SHIFT;
    r->born = tern__op_stamp(loop->now);
    t->live++;
    loop->refs++; /* ops_local counted it at admission */
    tern__deadline_arm_timer(loop, slot, loop->now + delay_ns);
    if (idp != NULL)
        *idp = tern__timer_id_of(t, slot);
    return 0;

unrepeat:
    if (rep != 0)
        tern__timer_repeat_free(t, rep);
unclaim:
    tern__deadline_unclaim_timer(loop);
unadmit:
    tern__op_unadmit(loop);
    return rc;
}

int tern_timer_stop(tern_loop *loop, tern_id id)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (id == 0)
        return -EINVAL;
    return tern__timer_cancel(loop, id);
}
