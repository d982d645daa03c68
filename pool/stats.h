/*
 * The pool's statistics counters (stats.c) and the calls that move the
 * ones several files share: the queue's slot word, the tombstones, the
 * outcomes a loop delivers. Below every file that counts, so the counters
 * are defined beneath their writers, never in a file that calls them.
 */
#ifndef TERN_POOL_STATS_H
#define TERN_POOL_STATS_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "check.h"
#include "tern.h"

/* One counter slot per refusal cause, indexed by its value (slot 0, NONE, unused). */
#define TERN__REFUSAL_ONE_(name, short_name, value) +1
enum { TERN__REFUSAL_SLOTS = 1 TERN_REFUSAL_MAP(TERN__REFUSAL_ONE_) };
#undef TERN__REFUSAL_ONE_

/*
 * The counters behind tern_pool_stats_get. They live outside the pool so
 * a reader never races a free. The pool writes the gauges; the client
 * writes the outcomes (submitted, completed, cancelled, timed_out,
 * refused[cause]), so that every refusal is counted where admission
 * decides it. All relaxed.
 */
struct tern__pool_counters {
    /*
     * The bounded queue's slots: jobs queued in the low 32 bits (TERN__SLOT_QUEUED),
     * reservations in the high 32 (TERN__SLOT_RESERVED). One word, so admission
     * bounds queued + reserved exactly and a reader sees both at one instant.
     */
    alignas(TERN_CACHELINE) _Atomic uint64_t queued;
    _Atomic unsigned queued_peak;
    /*
     * Stopped jobs the queue still holds (bounded.c, "Tombstones"). Not
     * queued any more, but each holds a ring cell until a worker skips it.
     * On the slots word's line: admission reads both.
     */
    _Atomic uint64_t tombstones;
    alignas(TERN_CACHELINE) _Atomic unsigned threads, busy, long_threads, long_busy;
    /* Workers spinning for a job (as the pool's `spinners`, readable with no pool). */
    _Atomic unsigned spinning;
    alignas(TERN_CACHELINE) _Atomic uint64_t submitted;
    _Atomic uint64_t refused[TERN__REFUSAL_SLOTS]; /* by tern_refusal value */
    alignas(TERN_CACHELINE) _Atomic uint64_t completed, cancelled, timed_out;
    /*
     * The watchdog (pool/watchdog.c): stalled jobs seen, overflow workers.
     * One line for all four: written a few times a second at most.
     */
    alignas(TERN_CACHELINE) _Atomic uint64_t stalls;
    _Atomic uint64_t overflow_started, overflow_retired;
    _Atomic unsigned overflow_now;
};
/*
 * Layout pins. alignas on a declaration of several names aligns each of
 * them, so apart from the slot word's peak and `spinning` every counter
 * here owns a cache line: line 0, the slot word (every submission and
 * every take), its peak and the tombstones (which admission reads with
 * it); one line per gauge (workers as they go busy
 * and idle; `spinning` beside `long_busy`); acceptances and refusals (the
 * submitting loops); one line per outcome (the workers, as jobs end); one
 * line for the watchdog's counters. A
 * field added onto a line another thread writes, or a regrouping, fails
 * here. Offsets are in lines (TERN_CACHELINE).
 */
#define TERN__LINE(n) ((n)*TERN_CACHELINE)
#define TERN__LINES_FOR(bytes) (((bytes) + TERN_CACHELINE - 1) / TERN_CACHELINE * TERN_CACHELINE)
_Static_assert(offsetof(struct tern__pool_counters, queued) == 0 &&
                   offsetof(struct tern__pool_counters, queued_peak) == 8,
               "line 0: the slot word and its peak only");
_Static_assert(offsetof(struct tern__pool_counters, threads) == TERN__LINE(1) &&
                   offsetof(struct tern__pool_counters, busy) == TERN__LINE(2) &&
                   offsetof(struct tern__pool_counters, long_threads) == TERN__LINE(3) &&
                   offsetof(struct tern__pool_counters, long_busy) == TERN__LINE(4) &&
                   offsetof(struct tern__pool_counters, spinning) == TERN__LINE(4) + 4,
               "lines 1-4: a gauge each, spinning beside long_busy");
_Static_assert(offsetof(struct tern__pool_counters, submitted) == TERN__LINE(5) &&
                   offsetof(struct tern__pool_counters, refused) == TERN__LINE(5) + 8,
               "acceptances and refusals start line 5");
#define TERN__OUTCOMES_ (TERN__LINE(5) + TERN__LINES_FOR(8 * (1 + TERN__REFUSAL_SLOTS)))
_Static_assert(offsetof(struct tern__pool_counters, completed) == TERN__OUTCOMES_ &&
                   offsetof(struct tern__pool_counters, cancelled) ==
                       TERN__OUTCOMES_ + TERN__LINE(1) &&
                   offsetof(struct tern__pool_counters, timed_out) ==
                       TERN__OUTCOMES_ + TERN__LINE(2),
               "outcomes: a line each, after the refusals");
_Static_assert(offsetof(struct tern__pool_counters, tombstones) == 16,
               "line 0: the tombstones beside the slot word, which admission reads with them");
_Static_assert(offsetof(struct tern__pool_counters, stalls) == TERN__OUTCOMES_ + TERN__LINE(3) &&
                   sizeof(struct tern__pool_counters) == TERN__OUTCOMES_ + TERN__LINE(4),
               "the watchdog's line after the outcomes, and nothing after it");
#undef TERN__OUTCOMES_

extern __attribute__((visibility("hidden"))) struct tern__pool_counters tern__pool_stats;
/*
 * Outcomes a thread's loops have delivered but not yet added to the
 * counters above, by kind. A loop counts each done here, on its own
 * thread, and adds them once as the step that ran them ends
 * (tern__outcomes_settle); a statistics read settles its own thread's
 * first. An add per job would wait, as every locked instruction does,
 * for the stores before it, which are the misses on the record just
 * handed back. So a reader on another thread sees a
 * step's outcomes when the step ends, one step late at most.
 */
enum {
    TERN__OUTCOME_COMPLETED,
    TERN__OUTCOME_CANCELLED,
    TERN__OUTCOME_TIMED_OUT,
    TERN__OUTCOME_KINDS
};
extern _Thread_local uint64_t tern__outcomes_due[TERN__OUTCOME_KINDS]
    __attribute__((tls_model("initial-exec")));
void tern__outcomes_add(void);
static inline void tern__outcomes_settle(void)
{
    if ((tern__outcomes_due[0] | tern__outcomes_due[1] | tern__outcomes_due[2]) != 0)
        tern__outcomes_add();
}

/*
 * The slot word's calls. Several files move it (admission and repayment
 * in bounded.c, a stop in work.c, a shutdown in pool.c); these are its
 * steps that are not admission's own.
 */
#define TERN__SLOT_QUEUED UINT64_C(1)
#define TERN__SLOT_RESERVED (UINT64_C(1) << 32)
static inline unsigned tern__slots_queued(uint64_t slots)
{
    return (unsigned)(slots & 0xffffffffu);
}
static inline unsigned tern__slots_reserved(uint64_t slots)
{
    return (unsigned)(slots >> 32);
}
/*
 * Give one queued slot back, or turn it into a reservation (delta), with
 * a checked counter (check.h) on the low half. Release: a stop's
 * tombstone count, made before, is seen by an admission that sees this.
 */
static inline void tern__slots_leave(uint64_t delta)
{
    uint64_t before =
        atomic_fetch_add_explicit(&tern__pool_stats.queued, delta, memory_order_release);
    if (TERN_UNLIKELY(tern__slots_queued(before) == 0))
        tern__check_failed(__FILE__, __LINE__, __func__, "COUNTER", "queued went below zero");
}
static inline void tern__slots_unqueue(void)
{
    tern__slots_leave((uint64_t)0 - TERN__SLOT_QUEUED);
}

/*
 * Tombstones (bounded.c's top comment). A stop that tombstones a queued
 * bounded job gives its slot back at once and counts a tombstone instead;
 * the worker or shutdown that meets the tombstone counts it out.
 */
static inline void tern__tombstones_add(void)
{
    atomic_fetch_add_explicit(&tern__pool_stats.tombstones, 1, memory_order_relaxed);
}
static inline void tern__tombstones_sub(void)
{
    uint64_t before =
        atomic_fetch_sub_explicit(&tern__pool_stats.tombstones, 1, memory_order_relaxed);
    if (TERN_UNLIKELY(before == 0))
        tern__check_failed(__FILE__, __LINE__, __func__, "COUNTER", "tombstones went below zero");
}

#endif
