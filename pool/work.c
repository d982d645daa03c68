/*
 * The worker side of a job, shared by every class: claim a header, run
 * it, hand it back; and the client's questions about a header (stop it,
 * is it finished, may the client free it). The state word is changed here
 * and in the shutdown and steps paths only. The hand-back is the client's
 * function (work.h, tern__pool_handback); the pool calls nothing else of
 * its client's.
 */
#include "stats.h"
#include "work.h"

_Atomic(tern__handback_fn) tern__pool_handback;
struct tern__pool_presence tern__pool_inflight;
/* Written by a cancelling shutdown (pool.c), read by every job as it runs. */
_Atomic bool tern__pool_cancel_all;
_Atomic unsigned tern__pool_cancel_windows;

bool tern__work_claim(struct tern__work *w)
{
    uint8_t expected = TERN__WORK_QUEUED;
    if (atomic_compare_exchange_strong_explicit(&w->state, &expected, TERN__WORK_RUNNING,
                                                memory_order_acq_rel, memory_order_acquire))
        return true;
    /*
     * A tombstone: its client has (or will have) delivered its outcome.
     * Let go of it; if the client let go first, the record is freed now,
     * by the client's hand-back. The hand-back of a tombstone touches only
     * the record, never the client's loop, which may be gone.
     */
    TERN_INSIST(expected == TERN__WORK_TOMBSTONED || expected == TERN__WORK_LOOP_DONE);
    if (expected == TERN__WORK_LOOP_DONE ||
        !atomic_compare_exchange_strong_explicit(&w->state, &expected, TERN__WORK_POOL_DONE,
                                                 memory_order_acq_rel, memory_order_acquire))
        (void)tern__work_hand_back(w);
    tern__pool_leave(); /* the tombstone's pool life ends here */
    return false;
}

enum tern__stop tern__work_stop(struct tern__work *w)
{
    uint8_t state = atomic_load_explicit(&w->state, memory_order_acquire);
    /* Stopped before; the pool may have let go of it since (POOL_DONE). */
    if (state == TERN__WORK_TOMBSTONED || state == TERN__WORK_POOL_DONE)
        return TERN__STOP_STOPPED_BEFORE;
    /* A cancelling shutdown stopped it unrun: done gets -ECANCELED and NULL. */
    if (atomic_load_explicit(&w->unrun, memory_order_relaxed))
        return TERN__STOP_STOPPED_BEFORE;
    /*
     * Told before (running, or finished since). A worker latches the flag
     * only before its release store of FINISHED, so with FINISHED seen
     * (acquire, above) the flag read here is final.
     */
    if (atomic_load_explicit(&w->cancel, memory_order_relaxed))
        return TERN__STOP_TOLD_BEFORE;
    if (state != TERN__WORK_QUEUED && state != TERN__WORK_RUNNING)
        return TERN__STOP_FINISHED;
    /* Set before the swap: a worker finishing right now still reports it. */
    atomic_store_explicit(&w->cancel, true, memory_order_relaxed);
    /*
     * A bounded tombstone gives its queue slot back now and is counted as
     * a tombstone until the queue lets go of it (stats.h). Counted before
     * the swap, so the worker that meets it never counts it out first, and
     * an admission that sees the slot given back sees the tombstone too.
     */
    bool bounded = w->occupancy == TERN_BOUNDED;
    if (bounded)
        tern__tombstones_add();
    uint8_t expected = TERN__WORK_QUEUED;
    if (atomic_compare_exchange_strong_explicit(&w->state, &expected, TERN__WORK_TOMBSTONED,
                                                memory_order_acq_rel, memory_order_acquire)) {
        w->result = NULL;
        if (bounded)
            tern__slots_unqueue();
        return TERN__STOP_STOPPED_NOW;
    }
    if (bounded)
        tern__tombstones_sub(); /* no tombstone after all: for a moment it was overstated */
    /* A cancelling shutdown's drain took it first (unrun is set before its swap). */
    if (atomic_load_explicit(&w->unrun, memory_order_relaxed))
        return TERN__STOP_STOPPED_BEFORE;
    return TERN__STOP_TOLD_NOW; /* claimed meanwhile (it sees the flag) or just finished */
}

bool tern__work_finished(struct tern__work *w)
{
    /* Pairs with the release stores and CASes of the state word. */
    return atomic_load_explicit(&w->state, memory_order_acquire) == TERN__WORK_FINISHED;
}

bool tern__work_let_go(struct tern__work *w)
{
    uint8_t state = atomic_load_explicit(&w->state, memory_order_acquire);
    /* A tombstone the queue still holds: the pool frees it through the hand-back. */
    return !(state == TERN__WORK_TOMBSTONED &&
             atomic_compare_exchange_strong_explicit(&w->state, &state, TERN__WORK_LOOP_DONE,
                                                     memory_order_acq_rel, memory_order_acquire));
}

bool tern__work_complete(struct tern__work *w)
{
    bool woke = tern__work_hand_back(w);
    tern__pool_leave(); /* handed back: the job's pool life ends here */
    return woke;
}

bool tern__work_run(struct tern__work *w, unsigned worker)
{
    uint64_t ran;
    bool woke = tern__work_execute(w, worker, 1, &ran); /* every job timed */
    tern__pool_leave(); /* handed back: the job's pool life ends here */
    return woke;
}

bool tern_job_cancelled(const tern_job *job)
{
    TERN_REQUIRE(job != NULL);
    struct tern__work *w = (struct tern__work *)job; /* the header comes first (work.h) */
    if (atomic_load_explicit(&w->cancel, memory_order_relaxed))
        return true;
    if (TERN_UNLIKELY(tern__work_shutdown_cancelled(w))) {
        /* Latch it, so done reports -ECANCELED too. */
        atomic_store_explicit(&w->cancel, true, memory_order_relaxed);
        return true;
    }
    return false;
}
