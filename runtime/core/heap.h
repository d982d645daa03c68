/*
 * The deadline heap's calls (heap.c): claiming a slot, arming and
 * disarming ops and timers, and step 5's pop. The heap's layout is op_types.h's,
 * where the loop embeds it; the claim and disarm fast paths are inline,
 * since every timer start and stop pays for them.
 */
#ifndef TERN_HEAP_H
#define TERN_HEAP_H

#include <stdbool.h>
#include <stdint.h>

#include "loop_p.h"

/*
 * Deadlines on the one heap (timers and internal deadlines alike). An op
 * that may be armed first claims a heap slot (the only step that can fail,
 * -ENOMEM); while it holds the claim, arming never fails, so a repeating
 * timer can always rearm. An armed op becomes ready in step 5 when due
 * (or its class's `expired` runs). Any op may be armed, embedded anywhere.
 */
int tern__deadline_claim(tern_loop *loop);
void tern__deadline_unclaim(tern_loop *loop);
void tern__deadline_arm(tern_loop *loop, struct tern__op *op, uint64_t deadline);
void tern__deadline_disarm(tern_loop *loop, struct tern__op *op);
static inline bool tern__deadline_armed(const struct tern__op *op)
{
    return op->aux != TERN__OP_UNARMED;
}
/*
 * An internal deadline (a connect's timeout, a listener's back-off): an op
 * embedded in its owner's record that lives only on the heap. It has no
 * id, is never registered, counted or queued, so no public call can reach
 * it; its class needs only an `expired` hook, which runs in step 5 (after
 * the heap let go of it) and must not call user code. The owner claims a
 * heap slot before arming it and gives the claim back when it disarms it
 * or it expires.
 */
static inline void tern__deadline_init(struct tern__op *op, const struct tern__op_class *cls)
{
    *op = (struct tern__op){.cls = cls, .aux = TERN__OP_UNARMED};
}
/* The same for a timer's slot (timer.c); its record keeps the index. */
int tern__deadline_claim_timer_slow(tern_loop *loop);
static inline int tern__deadline_claim_timer(tern_loop *loop)
{
    if (TERN_LIKELY(loop->heap.claims < loop->heap.cap)) {
        loop->heap.claims++;
        return 0;
    }
    return tern__deadline_claim_timer_slow(loop);
}
static inline void tern__deadline_unclaim_timer(tern_loop *loop)
{
    TERN_DECREMENT(loop->heap.claims);
}
void tern__deadline_arm_timer(tern_loop *loop, uint32_t slot, uint64_t deadline);
void tern__deadline_remove_timer(tern_loop *loop, uint32_t slot);
static inline void tern__deadline_disarm_timer(tern_loop *loop, uint32_t slot)
{
    if (tern__timer_armed(&loop->timers.rec[slot]))
        tern__deadline_remove_timer(loop, slot);
}

void tern__heap_destroy(struct tern__heap *h);
static inline const struct tern__heap_entry *tern__heap_top(const struct tern__heap *h)
{
    return h->len ? &h->v[0] : NULL;
}
/*
 * Step 5's pop (turn.c fires what it returns): whether the soonest entry
 * is due at loop->now; if so it leaves the heap, its lateness is recorded,
 * and *opp is the op armed there, or NULL with *slotp the timer's slot.
 */
bool tern__deadline_pop_due(tern_loop *loop, struct tern__op **opp, uint32_t *slotp);

#endif
