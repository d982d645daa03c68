/*
 * The pool's own record (struct tern__pool) and the running pool's
 * accessors (pool.c). Each other file of pool/ offers its calls in a
 * header of its own name (work.h beside work.c, bounded.h beside
 * bounded.c, ...); what the rest of tern may use is in pool.h.
 *
 * The files of pool/, top-down: each uses only files below it, by call,
 * by type or by global (test/calls_check.py checks the calls on the built
 * objects, test/depends_check.py every use on the sources).
 *
 *   seams.c      the test seams the runtime's testing.h reaches
 *   figures.c    the per-worker figures' reader
 *   gate.c       exclusive mode's hold on the bounded workers (the holder)
 *   pool.c       the process-wide pool: start, accept, kick, shutdown,
 *                statistics, fork (pool.h, and this header's accessors)
 *   watchdog.c   the watchdog for stalled bounded work
 *   env.c        the configuration: defaults, bounds, the environment
 *   long.c       the long class's threads
 *   worker.c     the bounded workers: take, run, spin, park, hold
 *   steps.c      one step of a request of several steps
 *   lookup.c     the lookup cap
 *   bounded.c    the bounded queue: admission, reservations, lanes, runs,
 *                the wake; the per-worker slots
 *   pool_p.h     the pool's record (this header)
 *   work.c       a job's state word: claim, run, hand back, stop; the
 *                units in flight
 *   stats.c      the statistics counters and the slot word's steps
 *   histogram.c  the statistics' histograms
 *   stops.c      stop points where a test holds a pool thread
 *   sizes.h      the fixed sizes the arrays are built from
 *
 * State lives in the lowest file that changes it or reads it on a hot
 * path, so every file above reaches it downwards. Each global a pool
 * header declares is declared hidden, so a file that does not define it
 * still reads it with one PC-relative load rather than through the GOT.
 */
#ifndef TERN_POOL_P_H
#define TERN_POOL_P_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "check.h"
#include "list.h"
#include "os_thread.h"
#include "ring.h"
#include "sizes.h"
#include "tern.h"

struct tern__work;

struct tern__long_worker {
    tern__thread_t thread;
    tern__cond_t cond;
    struct tern__work *job;        /* handed over under long_lock */
    bool exit;                     /* told to exit (shutdown), under long_lock */
    struct tern__list parked_node; /* on long_parked while idle */
    struct tern__list all_node;    /* on long_all while it lives */
};

struct tern__pool {
    tern_pool_config cfg;
    uint64_t gen; /* which start this is: a loop's cached config check names it */

    /* The bounded queue (bounded.c): ring.h's ring, many consumers. */
    alignas(TERN_CACHELINE) struct tern__ring queue;

    /* Bounded workers park here; submitters wake one only if some sleep. */
    alignas(TERN_CACHELINE) _Atomic unsigned sleepers;
    _Atomic unsigned spinners; /* workers spinning before they park */
    unsigned max_spinners;
    _Atomic bool exiting;
    /* Off the line above: workers write the lock as they park, and every
     * submission reads `sleepers` and `spinners`. */
    alignas(TERN_CACHELINE) tern__mutex_t park_lock;
    tern__cond_t park_cond;
    /*
     * Holders (gate.c) wait here, under park_lock, for the workers to be
     * held or asleep; each worker that arrives at the gate broadcasts it.
     * Held workers wait on park_cond, beside the parked ones, so that the
     * pool's own wake-all (release, exit) reaches them too; a submission's
     * signal that lands on a held worker is not lost: the release wakes all.
     */
    tern__cond_t quiet_cond;
    tern__thread_t *threads;
    unsigned nthreads;
    unsigned held; /* workers holding at the pause gate (worker.c), under park_lock */

    /*
     * The long class (long.c). Lock order: long_lock is a leaf. On its own
     * line: every loop's long submission takes it, and bounded workers
     * write park_lock's line as they park.
     */
    alignas(TERN_CACHELINE) tern__mutex_t long_lock;
    struct tern__list long_parked, long_all; /* lists (list.h) of tern__long_worker */
    unsigned long_count;                     /* threads alive, under long_lock */

    /*
     * Overflow workers (bounded.c), started by the watchdog (watchdog.c)
     * while a bounded job is stalled. Under park_lock.
     */
    struct {
        tern__thread_t thread;
        bool alive; /* started and not retired (joined by the stop) */
    } overflow[TERN__MAX_OVERFLOW];
    unsigned overflow_alive;

    /* The watchdog thread (watchdog.c). watch_lock is a leaf. */
    tern__thread_t watch_thread;
    tern__mutex_t watch_lock;
    tern__cond_t watch_cond;
    bool watch_exit; /* under watch_lock */

    /* Name lookups beyond the cap wait here (lookup.c). Leaf lock. */
    tern__mutex_t lookup_lock;
    unsigned lookups_active, lookups_cap;
    struct tern__work **lookups_waiting;
    unsigned lookups_len, lookups_cap_alloc, lookups_first;
};
/*
 * Layout pins. The queue's three lines come first on a line of their own;
 * the parking gauges (`sleepers` and `spinners`, read by every
 * submission) own the next line, so a worker writing park_lock or a
 * submitter bumping the ring's tail never pulls them across; the long
 * class's lock starts its own line. A field added between these fails.
 */
_Static_assert(offsetof(struct tern__pool, queue) % TERN_CACHELINE == 0, "the queue starts a line");
_Static_assert(offsetof(struct tern__pool, sleepers) ==
                   offsetof(struct tern__pool, queue) + sizeof(struct tern__ring),
               "the parking gauges follow the queue directly");
_Static_assert(offsetof(struct tern__pool, park_lock) ==
                   offsetof(struct tern__pool, sleepers) + TERN_CACHELINE,
               "the parking gauges have their line to themselves");
_Static_assert(offsetof(struct tern__pool, long_lock) % TERN_CACHELINE == 0,
               "the long class's lock starts a line");

/* The running pool or NULL (an acquire load; no start). */
struct tern__pool *tern__pool_current(void);
/*
 * The running pool or NULL, once any start under way has finished
 * (start_lock): a caller that finds NULL is ordered before every start
 * that follows, so what it wrote before the call, those workers see.
 */
struct tern__pool *tern__pool_current_settled(void);

/*
 * Whether a take would find a job now. This reads the ring, not the
 * admission counter: lookups waiting for their cap still count as queued
 * there, and must not keep idle workers spinning.
 */
static inline bool tern__bounded_ready(struct tern__pool *p)
{
    return tern__ring_ready(&p->queue);
}

#endif
