/*
 * Admission of the loop's own ops (starts, defers, submissions): whether
 * the loop is closing, and max_operations, counted with the pending posts;
 * and an op's retirement, which gives its admission back.
 * Jobs add their own limits on top (runtime/jobs/job.c). Inline: every start
 * pays for it. Above loop_p.h, whose struct it reads;
 * included by the files that admit or retire ops.
 */
#ifndef TERN_ADMIT_H
#define TERN_ADMIT_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdnoreturn.h>

#include "heap.h"
#include "loop_p.h"

/*
 * Whether the loop is being freed, for every call that schedules work
 * (starts, posts, defers, submissions): they answer -ESHUTDOWN. A loop of
 * a group in its destroy phase is also sealed, and there scheduling is a
 * contract violation, not a refusal: it aborts naming the rule (loop.c).
 */
static inline bool tern__loop_closing(tern_loop *loop)
{
    if (TERN_LIKELY(!atomic_load_explicit(&loop->closing, memory_order_relaxed)))
        return false;
    if (atomic_load_explicit(&loop->sealed, memory_order_relaxed))
        tern__loop_sealed_failed();
    return true;
}

/*
 * Admission for a new op on the loop thread: -ESHUTDOWN while closing,
 * -EAGAIN at max_operations; 0 means one unit of ops_local is now held and
 * must be handed to tern__op_add or returned with tern__op_unadmit.
 */

/* Posts admitted and not yet run (any thread; a snapshot). */
static inline uint64_t tern__posts_pending(const tern_loop *loop)
{
    return atomic_load_explicit(&((tern_loop *)loop)->posted, memory_order_relaxed) -
           atomic_load_explicit(&((tern_loop *)loop)->posts_done, memory_order_relaxed);
}

static inline void tern__ops_set(tern_loop *loop, unsigned n)
{
    loop->ops_local = n;
    atomic_store_explicit(&loop->ops_count, n, memory_order_relaxed);
}

/*
 * Admission of a loop-thread op. Counted against max_operations with the
 * pending posts; the loop's own count is a plain store, so an op costs no
 * atomic read-modify-write. (Posts are exact among themselves; a start on
 * the loop racing a post can exceed the bound by that one op.)
 */
static inline int tern__op_admit(tern_loop *loop)
{
    if (tern__loop_closing(loop))
        return -ESHUTDOWN;
    if (TERN_UNLIKELY(loop->ops_local + tern__posts_pending(loop) >= loop->max_operations))
        return -EAGAIN;
    tern__ops_set(loop, loop->ops_local + 1);
    return 0;
}

static inline void tern__op_unadmit(tern_loop *loop)
{
    unsigned n = loop->ops_local;
    TERN_DECREMENT(n);
    tern__ops_set(loop, n);
}

/*
 * An op's finish but for its record: its id goes stale, its deadline is
 * disarmed, its reference and admission are given back. Inline for the
 * one path that runs it per job (job.c's delivery, whose op is never
 * queued then and whose record job.c frees itself).
 */
static TERN_ALWAYS_INLINE void tern__op_retire(tern_loop *loop, struct tern__op *op)
{
    TERN_INSIST(!(op->flags & TERN__OP_DEAD));
    if (op->flags & TERN__OP_TABLED) {
        op->id = 0; /* what its kind's table matches an id against: stale from now */
        TERN_DECREMENT(loop->tabled);
    } else if (!(op->flags & TERN__OP_ANON))
        tern__idmap_remove(&loop->ids, op);
    else
        TERN_DECREMENT(loop->anon);
    if (tern__deadline_armed(op))
        tern__deadline_disarm(loop, op);
    if (!(op->flags & TERN__OP_UNREF))
        TERN_DECREMENT(loop->refs);
    tern__op_unadmit(loop);
}

#endif
