/*
 * The pool's private interface: the worker side of a job (claim, run,
 * hand-back), the two occupancy classes, the lookup cap, requests of
 * several steps, statistics. What the rest of tern may use is in pool.h.
 *
 * Ownership of a work header. The client (runtime/jobs/job.c) allocates the
 * record around it and holds it until its done has run. The pool borrows
 * it from tern__pool_accept to its hand-back: a worker claims it, runs it,
 * marks it FINISHED and calls its hand-back. A header stopped while still
 * queued is TOMBSTONED (tern__work_stop); the worker (or shutdown) that
 * later meets it lets go of it, and the client frees it when both sides
 * have let go (enum tern__work_state, below).
 *
 * The files of pool/, top-down: each calls only files below it
 * (test/calls_check.py checks this on the built objects).
 *
 *   figures.c    the per-worker figures' reader
 *   gate.c       exclusive mode's hold on the bounded workers (the holder)
 *   pool.c       the process-wide pool: start, accept, kick, shutdown,
 *                statistics, fork
 *   watchdog.c   the watchdog for stalled bounded work
 *   env.c        the configuration: defaults, bounds, the environment
 *   long.c       the long class's threads
 *   worker.c     the bounded workers: take, run, spin, park, hold
 *   steps.c      one step of a request of several steps
 *   lookup.c     the lookup cap
 *   bounded.c    the bounded queue: admission, reservations, the wake
 *   work.c       a job's state word: claim, run, hand back, stop
 *   histogram.c  the statistics' histograms
 *   stops.c      stop points where a test holds a pool thread
 *
 * Shared state (tern__pool_stats, the `current` pool) is read where it is
 * needed; only calls go one way.
 */
#ifndef TERN_POOL_P_H
#define TERN_POOL_P_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>

#include <urcu/list.h>

#include "clock.h"
#include "fault.h"
#include "platform.h"
#include "pool.h"
#include "probe.h"
#include "ring.h"
#include "spin.h"

/* ------------------------------------------------------------------ */
/* The worker side of a job (work.c)                                   */
/* ------------------------------------------------------------------ */

/*
 * A header's state word: the protocol between the client, which may stop
 * a header still queued (tern__work_stop), and the workers, which claim
 * it. Only pool/ names these; the client asks pool.h's questions.
 *
 * QUEUED -> RUNNING -> FINISHED by a worker (claim, then hand-back);
 * QUEUED -> FINISHED by a cancelling shutdown (never started);
 * QUEUED -> TOMBSTONED by the client's stop (one CAS). The record stays
 * in the queue until a worker or shutdown meets it; LOOP_DONE and
 * POOL_DONE say which side let go of a tombstone first, so the last one
 * frees it (the client, in tern__work_let_go's answer or in the hand-back)
 * and neither waits for the other. A steps header goes RUNNING -> QUEUED
 * between its steps.
 */
enum tern__work_state {
    TERN__WORK_QUEUED = 0,     /* accepted, not yet taken by a worker */
    TERN__WORK_RUNNING = 1,    /* a worker runs fn */
    TERN__WORK_FINISHED = 2,   /* fn returned (or never will): being handed back */
    TERN__WORK_TOMBSTONED = 3, /* stopped while queued; the queue still holds it */
    TERN__WORK_LOOP_DONE = 4,  /* tombstone: the client has let go */
    TERN__WORK_POOL_DONE = 5,  /* tombstone: the pool has let go */
};

/*
 * Hand finished work back (its state already FINISHED) and end its pool
 * life. True when the hand-back woke a sleeping thread with a syscall.
 */
bool tern__work_complete(struct tern__work *w);
/*
 * A worker found this header: true if it now runs (RUNNING), false if it
 * was a tombstone, which the pool then lets go of (handing it back to be
 * freed if the client let go first) and must not touch again.
 */
bool tern__work_claim(struct tern__work *w);
/*
 * A claimed header's work: tern__work_started and _returned around it and
 * tern__work_execute running it are inline, further down, after the
 * statistics they record into.
 */
/* Run a claimed header and complete it (stats recorded); as complete. */
bool tern__work_run(struct tern__work *w, unsigned worker_index);

/* ------------------------------------------------------------------ */
/* Statistics (histogram.c)                                            */
/* ------------------------------------------------------------------ */

#define TERN__HIST_BUCKETS 304
#define TERN__HIST_DECAY 4096 /* halve every this many samples: "recent jobs" */

struct tern__hist {
    _Atomic uint64_t count;
    _Atomic uint64_t buckets[TERN__HIST_BUCKETS];
};

/*
 * Record value as `weight` samples: a job timed as one of several chosen
 * at random stands for them all (worker.c, "Timing"). shared: several
 * threads record into h (the long class); else one does.
 */
void tern__hist_record(struct tern__hist *h, uint64_t value, unsigned weight, bool shared);
/* Percentile q (0..1) over the sum of n histograms, in recorded units. */
uint64_t tern__hist_percentile(struct tern__hist *const *hs, unsigned n, double q);

/* ------------------------------------------------------------------ */
/* The process-wide pool (pool.c, bounded.c, worker.c, long.c)        */
/* ------------------------------------------------------------------ */

#define TERN__MAX_THREADS 1024
#define TERN__MAX_OVERFLOW 64 /* overflow workers alive at once, at most */

/*
 * Queue slots a worker owes back (tern__queue_claim_owed): jobs of its run
 * it has claimed, whose slots still count as queued. What is owed is
 * claimed - settled. Only the worker writes `claimed`, with a plain
 * store, so a claim costs no locked instruction; `settled` moves by
 * compare-and-swap, when the worker repays at the end of a run or when an
 * admission about to refuse takes the slots back (bounded.c), so each
 * claimed slot is given back once; it carries a mark until the queued word
 * has been given the slots, which readers wait out. Readers of the
 * statistics subtract it.
 */
struct tern__owed {
    _Atomic uint64_t claimed, settled;
};

/*
 * One bounded worker's figures, written by that worker alone with plain
 * relaxed stores (no locked instruction) and read by anyone. Indexed by
 * worker: bounded workers 0..threads-1, overflow workers from
 * TERN__MAX_THREADS. Outside the pool, as the counters are, so a reader
 * never races a free.
 *
 * seq: odd while the worker runs what it took from the queue, one more
 * at each start and each end; the watchdog (watchdog.c) sees a stall as
 * an odd seq that has not moved for the stall bound.
 */
struct tern__worker_figures {
    alignas(TERN_CACHELINE) _Atomic uint64_t seq;
    /* Queue slots the worker owes back (struct tern__owed). */
    struct tern__owed owed;
    /* The worker's hand-back slot (pool.h, tern__pool_hand_slot). */
    _Atomic(const void *) handing;
    /*
     * The public figures (tern_pool_worker_stats_read), on the worker's
     * own lines, written only when TERN_FIGURES is built in: queue entries
     * run, parks, parks ended by a wake signal, ticks spent running what
     * it took, and the wake latencies (signal to running) in log2 buckets
     * of nanoseconds.
     */
    _Atomic uint64_t jobs, parks, wakes, busy_ticks;
    _Atomic uint64_t wake_hist[TERN_POOL_WAKE_BUCKETS];
};
#define TERN__WORKER_SLOTS (TERN__MAX_THREADS + TERN__MAX_OVERFLOW)
extern struct tern__worker_figures tern__pool_workers[TERN__WORKER_SLOTS];

/*
 * Add to a figure only its worker writes: a relaxed load and store, no
 * locked instruction; readers may see it a moment old. Compiled out
 * (-Dfigures=false) it is nothing.
 */
#ifdef TERN_FIGURES
#define TERN__FIGURE_ADD(field, n)                                                        \
    atomic_store_explicit(&(field), atomic_load_explicit(&(field), memory_order_relaxed) + (n), \
                          memory_order_relaxed)
#else
#define TERN__FIGURE_ADD(field, n) ((void)0)
#endif
/* The bucket of a wake latency of ns nanoseconds: floor(log2(ns)), 0 for 0 and 1. */
static inline unsigned tern__wake_bucket(uint64_t ns)
{
    unsigned b = ns < 2 ? 0 : 63u - (unsigned)__builtin_clzll(ns);
    return b < TERN_POOL_WAKE_BUCKETS ? b : TERN_POOL_WAKE_BUCKETS - 1;
}
/*
 * When the last wake signal was sent (tern__ticks), or 0: written under
 * park_lock by the submitter that signals (bounded.c), taken back to 0 by
 * the parked worker that finds it set when it wakes (worker.c).
 */
extern uint64_t tern__pool_wake_at;

/*
 * The running pool's shape, for readers on any thread that must not
 * touch the pool itself (a shutdown may free it under them): its bounded
 * workers (0 while none runs), the overflow slots it has used, and the
 * bytes it allocated at start (pool.c, statistics). Written at start and
 * stop (pool.c) and as overflow slots are first used (worker.c).
 */
struct tern__pool_shape {
    _Atomic unsigned threads, overflow_slots;
    _Atomic uint64_t fixed_bytes;
};
extern struct tern__pool_shape tern__pool_shape;

struct tern__long_worker {
    pthread_t thread;
    pthread_cond_t cond;
    struct tern__work *job; /* handed over under long_lock */
    bool exit;     /* told to exit (shutdown), under long_lock */
    struct cds_list_head parked_node; /* on long_parked while idle */
    struct cds_list_head all_node;    /* on long_all while it lives */
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
    alignas(TERN_CACHELINE) pthread_mutex_t park_lock;
    pthread_cond_t park_cond;
    /*
     * Holders (gate.c) wait here, under park_lock, for the workers to be
     * held or asleep; each worker that arrives at the gate broadcasts it.
     * Held workers wait on park_cond, beside the parked ones, so that the
     * pool's own wake-all (release, exit) reaches them too; a submission's
     * signal that lands on a held worker is not lost: the release wakes all.
     */
    pthread_cond_t quiet_cond;
    pthread_t *threads;
    unsigned nthreads;
    unsigned held; /* workers holding at the pause gate (worker.c), under park_lock */

    /*
     * The long class (long.c). Lock order: long_lock is a leaf. On its own
     * line: every loop's long submission takes it, and bounded workers
     * write park_lock's line as they park.
     */
    alignas(TERN_CACHELINE) pthread_mutex_t long_lock;
    struct cds_list_head long_parked, long_all; /* cds_lists of tern__long_worker */
    unsigned long_count; /* threads alive, under long_lock */

    /*
     * Overflow workers (bounded.c), started by the watchdog (watchdog.c)
     * while a bounded job is stalled. Under park_lock.
     */
    struct {
        pthread_t thread;
        bool alive; /* started and not retired (joined by the stop) */
    } overflow[TERN__MAX_OVERFLOW];
    unsigned overflow_alive;

    /* The watchdog thread (watchdog.c). watch_lock is a leaf. */
    pthread_t watch_thread;
    pthread_mutex_t watch_lock;
    pthread_cond_t watch_cond;
    bool watch_exit; /* under watch_lock */

    /* Name lookups beyond the cap wait here (lookup.c). Leaf lock. */
    pthread_mutex_t lookup_lock;
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
_Static_assert(offsetof(struct tern__pool, queue) % TERN_CACHELINE == 0,
               "the queue starts a line");
_Static_assert(offsetof(struct tern__pool, sleepers) ==
                   offsetof(struct tern__pool, queue) + sizeof(struct tern__ring),
               "the parking gauges follow the queue directly");
_Static_assert(offsetof(struct tern__pool, park_lock) ==
                   offsetof(struct tern__pool, sleepers) + TERN_CACHELINE,
               "the parking gauges have their line to themselves");
_Static_assert(offsetof(struct tern__pool, long_lock) % TERN_CACHELINE == 0,
               "the long class's lock starts a line");


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
 * the worker or shutdown that meets the tombstone counts it out. The
 * ring has room for queue_capacity slots and as many tombstones again (at
 * most TERN__TOMB_ROOM_MAX), and admission keeps queued + reserved +
 * tombstones within that room, so the ring is never full.
 */
#define TERN__TOMB_ROOM_MAX (UINT64_C(1) << 30)
static inline uint64_t tern__queue_room(const tern_pool_config *cfg)
{
    uint64_t cap = cfg->queue_capacity;
    return cap + (cap < TERN__TOMB_ROOM_MAX ? cap : TERN__TOMB_ROOM_MAX);
}
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

/*
 * A worker or a shutdown has taken a bounded header off the queue (the
 * ring, or the lookups waiting for their cap): claim it and settle its
 * slot. Claimed, it leaves the queued count, and a request of several
 * steps keeps its slot as the reservation for its next step, in the same
 * add (steps.c). Not claimed, it was a tombstone, whose slot its stop gave
 * back: only the tombstone is counted out. The kind is read before the
 * claim, which may free a tombstone's record.
 */
static inline bool tern__queue_claim(struct tern__work *w)
{
    bool steps = w->kind == TERN__WORK_STEPS;
    if (!tern__work_claim(w)) {
        tern__tombstones_sub();
        return false;
    }
    tern__slots_leave(steps ? TERN__SLOT_RESERVED - TERN__SLOT_QUEUED
                            : (uint64_t)0 - TERN__SLOT_QUEUED);
    return true;
}
/*
 * A worker claims a plain job of its run (not a lookup, not a request of
 * several steps: those settle at once, as above) and owes its queued slot
 * instead of giving it back: the slot is given back with the rest of its
 * run's in one step on the shared `queued` word (tern__bounded_repay),
 * not one step per job. The claimed count is on the worker's own line.
 */
static inline bool tern__queue_claim_owed(struct tern__work *w, struct tern__owed *owed)
{
    if (!tern__work_claim(w)) {
        tern__tombstones_sub();
        return false;
    }
    uint64_t claimed = atomic_load_explicit(&owed->claimed, memory_order_relaxed);
    atomic_store_explicit(&owed->claimed, claimed + 1, memory_order_relaxed);
    return true;
}
/* Per worker histograms; index TERN__MAX_THREADS is shared by long workers. */
extern struct tern__hist tern__pool_wait_hist[TERN__MAX_THREADS + 1];
extern struct tern__hist tern__pool_run_hist[TERN__MAX_THREADS + 1];

/*
 * Jobs in flight, process-wide: from the moment a submitter counts itself
 * in (before it looks at the pool) until the job's pool life ends — its
 * completion handed back, or its tombstone dropped. tern_pool_shutdown
 * waits for this to reach zero with its `closing` word set, so nothing
 * it frees is still reachable by a submitter or a job.
 *
 * Two counters on two cache lines, units in and units out, rather than
 * one count: submitters add to `entered`, pool threads to `left`, and
 * neither side's add pulls the other's line across (one shared count was
 * 15% of bench/pool_throughput's samples, on its lock add). Both only
 * grow; what is in flight is their difference (tern__pool_in_flight).
 */
struct tern__pool_presence {
    alignas(TERN_CACHELINE) _Atomic uint64_t entered;
    alignas(TERN_CACHELINE) _Atomic uint64_t left;
};
/* Layout pin: `entered` and `left` on two lines, nothing else on either. */
_Static_assert(offsetof(struct tern__pool_presence, left) == TERN_CACHELINE &&
                   sizeof(struct tern__pool_presence) == 2 * TERN_CACHELINE,
               "the two presence counters own a line each");
extern struct tern__pool_presence tern__pool_inflight;
/*
 * A sleeping bounded worker has been signalled and has not yet cleared
 * this (worker.c): a worker is about to be on a CPU. At most one wake is
 * on its way at a time; submitters signal only when this is clear, and
 * tern__pool_active() counts it, so a loop that just woke a worker spins
 * for its answer instead of parking too.
 */
extern _Atomic bool tern__pool_waking;
/*
 * A TERN_POOL_CANCEL shutdown is under way: every running job reads as
 * cancelled (tern_job_cancelled) and completes -ECANCELED. A flag the jobs
 * read, rather than a write into each running job, so shutdown never
 * touches a job record a loop may already have delivered and reused.
 */
extern _Atomic bool tern__pool_cancel_all;
/*
 * Cancelling shutdowns begun, ever. A job that finds it moved between its
 * start and its end ran while one was under way, even if that shutdown
 * timed out and cleared tern__pool_cancel_all before the job returned.
 */
extern _Atomic unsigned tern__pool_cancel_windows;
/*
 * Whether a cancelling pool shutdown has been under way while the job ran:
 * one is now, or one began since the job started. (Shutdown never writes
 * into a running job: its client may already have delivered and reused it.)
 */
static inline bool tern__work_shutdown_cancelled(const struct tern__work *w)
{
    return atomic_load_explicit(&tern__pool_cancel_all, memory_order_relaxed) ||
           (uint16_t)atomic_load_explicit(&tern__pool_cancel_windows, memory_order_relaxed) !=
               w->cancel_window;
}

/*
 * Around a claimed header's work (or each step of one): note the cancelling
 * shutdowns begun so far, and latch a cancel if one ran meanwhile.
 * started is false when a cancelling shutdown is under way: the job counts
 * as queued and its work (or its next step) must not start.
 */
static inline bool tern__work_started(struct tern__work *w)
{
    w->cancel_window =
        (uint16_t)atomic_load_explicit(&tern__pool_cancel_windows, memory_order_relaxed);
    if (TERN_LIKELY(!atomic_load_explicit(&tern__pool_cancel_all, memory_order_relaxed)))
        return true;
    /*
     * Taken off the queue during a cancelling shutdown (its drain had not
     * reached it yet): it counts as queued, so its work never starts.
     */
    atomic_store_explicit(&w->unrun, true, memory_order_relaxed);
    atomic_store_explicit(&w->cancel, true, memory_order_relaxed);
    return false;
}

static inline void tern__work_returned(struct tern__work *w)
{
    /* Ran during a cancelling shutdown: its done says so, seen or not. */
    if (TERN_UNLIKELY(tern__work_shutdown_cancelled(w)))
        atomic_store_explicit(&w->cancel, true, memory_order_relaxed);
}

/* The client's hand-back (pool.h): the one call the pool makes into it. */
static inline bool tern__work_hand_back(struct tern__work *w)
{
    return atomic_load_explicit(&tern__pool_handback, memory_order_relaxed)(w);
}

/*
 * tern__work_run without the unit's leave: the caller owes it to
 * tern__pool_inflight and gives it back after the hand-back (a bounded
 * worker, once per run). weight: 0 leaves the work function untimed;
 * else its run time goes into the run histogram as that many samples
 * and *ran is set to it (worker.c, "Timing"). *ran is 0 otherwise.
 * Forced inline: it is a bounded worker's whole path per job, and out of
 * line (with the two calls above) it cost a worker 28 instructions a job
 * more (callgrind, bench/pool_throughput threads=2).
 */
static TERN_ALWAYS_INLINE bool tern__work_execute(struct tern__work *w, unsigned worker,
                                                  unsigned weight, uint64_t *ran)
{
    *ran = 0;
    if (TERN_UNLIKELY(!tern__work_started(w))) {
        w->result = NULL;
    } else {
        bool shared = worker == TERN__MAX_THREADS; /* the long class's pair */
        /* A clock reading only for a figure that wants one: the wait's
         * sample (its loop's choice), the run's (the worker's). */
        uint64_t start = w->t_submit != 0 || weight != 0 ? tern__ticks() : 0;
        if (w->t_submit != 0)
            tern__hist_record(&tern__pool_wait_hist[worker], tern__work_waited(w->t_submit, start),
                              1, shared);
        /* The public handle is the header's address (pool.h). */
        TERN_PROBE(job_started, w, (int)w->occupancy);
        w->result = w->fn((tern_job *)w, w->arg);
        if (weight != 0) {
            *ran = tern__ticks() - start;
            tern__hist_record(&tern__pool_run_hist[worker], *ran, weight, shared);
        }
        tern__work_returned(w);
    }
    atomic_store_explicit(&w->state, TERN__WORK_FINISHED, memory_order_release);
    return tern__work_hand_back(w);
}

/* Count n units in: before looking at the pool (pairs with `closing`). */
static inline void tern__pool_enter(unsigned n)
{
    atomic_fetch_add_explicit(&tern__pool_inflight.entered, n, memory_order_seq_cst);
}

static inline void tern__pool_leave_n(unsigned n)
{
    /* Pairs with the acquire load in tern__pool_in_flight(). */
    atomic_fetch_add_explicit(&tern__pool_inflight.left, n, memory_order_release);
}
static inline void tern__pool_leave(void)
{
    tern__pool_leave_n(1);
}

/*
 * Units in flight now. `left` is read first: it only grows, so the
 * difference can only overstate what is in flight at the second read,
 * never understate it, and a 0 is exact.
 */
static inline uint64_t tern__pool_in_flight(void)
{
    uint64_t left = atomic_load_explicit(&tern__pool_inflight.left, memory_order_acquire);
    uint64_t entered = atomic_load_explicit(&tern__pool_inflight.entered, memory_order_seq_cst);
    /* A checked counter (check.h): more units out than in is a lost count. */
    if (TERN_UNLIKELY(left > entered))
        tern__check_failed(__FILE__, __LINE__, __func__, "COUNTER", "pool units left > entered");
    return entered - left;
}

/* The running pool or NULL (an acquire load; no start). */
struct tern__pool *tern__pool_current(void);
/*
 * The running pool or NULL, once any start under way has finished
 * (start_lock): a caller that finds NULL is ordered before every start
 * that follows, so what it wrote before the call, those workers see.
 */
struct tern__pool *tern__pool_current_settled(void);

/* Start the bounded workers (and the queue they take from); stop them (worker.c). */
int tern__bounded_start(struct tern__pool *p);
void tern__bounded_stop(struct tern__pool *p);
/*
 * Whether a take would find a job now. This reads the ring, not the
 * admission counter: lookups waiting for their cap still count as queued
 * there, and must not keep idle workers spinning.
 */
static inline bool tern__bounded_ready(struct tern__pool *p)
{
    return tern__ring_ready(&p->queue);
}
/* Take the next job off the queue, or NULL; tern__queue_claim settles its slot (bounded.c). */
struct tern__work *tern__bounded_take(struct tern__pool *p);
/*
 * Batch take. A worker reserves a run of up to TERN__TAKE_MAX entries
 * with one CAS of the queue's head (tern__bounded_take_run), but fewer
 * when other workers are idle and the queue is short: its share is
 * ready / (idle workers + 1), at least one, where idle counts the parked
 * and the spinning. The entries of a run stay QUEUED (stoppable, counted
 * as queued) until the worker claims each just before running it; the
 * slots of the plain jobs it claimed are owed (tern__queue_claim_owed)
 * and repaid in one step when the run ends (tern__bounded_repay).
 */
#define TERN__TAKE_MAX 32
unsigned tern__bounded_take_run(struct tern__pool *p, struct tern__work **jobs);
/* Give back what owed holds to the queued count: a swap of the settled
 * count and one step on the queued word; neither if nothing is owed. */
void tern__bounded_repay(struct tern__owed *owed);
/*
 * Put the untouched rest of a run back at the queue's tail (a pause is
 * on: the worker must not start them). Their slots are still counted,
 * so the ring has room (ring.h's full-slot rule).
 */
void tern__bounded_put_back(struct tern__pool *p, struct tern__work *const *jobs, unsigned n);
/*
 * A worker's run: the entries it took from the queue in one step
 * (tern__bounded_take_run), published so that an idle worker can take
 * what the owner has not reached (a job of the run may block: what
 * follows it must not wait for it). One word says which entries are
 * left: generation << 16 | next << 8 | len. Whoever takes entry `next`
 * (the owner, or a thief) does so by one CAS of the word, on the owner's
 * line; the owner refills the entries only once next == len, and a new
 * generation makes every CAS made on the old reading fail, so an entry
 * read before the CAS is the one the CAS took. The entries stay QUEUED
 * until their taker claims them (tern__queue_claim_owed).
 */
struct tern__run {
    alignas(TERN_CACHELINE) _Atomic uint64_t word;
    _Atomic(struct tern__work *) entry[TERN__TAKE_MAX];
};
_Static_assert(TERN__TAKE_MAX < 256, "next and len are a byte each");
#define TERN__RUN_NEXT(word) ((unsigned)((word) >> 8) & 0xffu)
#define TERN__RUN_LEN(word) ((unsigned)(word) & 0xffu)
#define TERN__RUN_GEN_ONE (UINT64_C(1) << 16)
extern struct tern__run tern__pool_runs[TERN__WORKER_SLOTS]; /* bounded.c */

/* Take the run's next entry, or NULL when it has none left (any worker). */
static inline struct tern__work *tern__run_take(struct tern__run *r)
{
    /* Acquire: pairs with the owner's release store of a new run. */
    uint64_t word = atomic_load_explicit(&r->word, memory_order_acquire);
    for (;;) {
        unsigned next = TERN__RUN_NEXT(word);
        if (next >= TERN__RUN_LEN(word))
            return NULL;
        struct tern__work *job = atomic_load_explicit(&r->entry[next], memory_order_relaxed);
        if (atomic_compare_exchange_weak_explicit(&r->word, &word, word + (1u << 8),
                                                  memory_order_acquire, memory_order_acquire))
            return job;
    }
}

static inline bool tern__run_left(struct tern__run *r)
{
    uint64_t word = atomic_load_explicit(&r->word, memory_order_relaxed);
    return TERN__RUN_NEXT(word) < TERN__RUN_LEN(word);
}

/* The runs of the worker slots the running pool uses (its shape, pool_p.h). */
static inline unsigned tern__runs_in_use(unsigned *fixed)
{
    *fixed = atomic_load_explicit(&tern__pool_shape.threads, memory_order_relaxed);
    return *fixed + atomic_load_explicit(&tern__pool_shape.overflow_slots, memory_order_relaxed);
}
/* The slot of the i-th worker in use: fixed workers first, then overflow
 * workers, whose slots start at TERN__MAX_THREADS. */
static inline unsigned tern__worker_slot(unsigned i, unsigned fixed)
{
    return i < fixed ? i : TERN__MAX_THREADS + (i - fixed);
}
static inline struct tern__run *tern__run_at(unsigned i, unsigned fixed)
{
    return &tern__pool_runs[tern__worker_slot(i, fixed)];
}

/* Whether some worker's run has entries its owner has not reached. */
static inline bool tern__runs_left(void)
{
    unsigned fixed, n = tern__runs_in_use(&fixed);
    for (unsigned i = 0; i < n; i++)
        if (tern__run_left(tern__run_at(i, fixed)))
            return true;
    return false;
}

/*
 * The statistics' `queued`: the slot word less what the workers owe,
 * read so that a repayment between the two is neither missed nor counted
 * twice. *slots is the word it was read against (queued and reserved).
 */
uint64_t tern__bounded_queued(uint64_t *slots);
/* Signal one parked worker, unless one is spinning or already being woken. */
void tern__bounded_wake_one(struct tern__pool *p);
/*
 * Admit and enqueue; -EAGAIN when the queue is full. With a lane the job
 * is held there (pushed with the lane's run, decision 133) and no worker
 * is woken; without one it is pushed and a sleeping worker woken.
 */
int tern__bounded_submit(struct tern__pool *p, struct tern__work *job);
/*
 * Lane credit: the units and slots a lane takes ahead when it has none
 * (0 while it has some): the last run's length, or as many again as it
 * holds when a run outgrows it, within the lane's room.
 */
unsigned tern__lane_credit_wanted(const struct tern__lane *lane);
/*
 * Admit into the lane on its credit; fresh units (counted in by the
 * caller, tern__lane_credit_wanted) first become credit with as many
 * slots as fit, the units without a slot given back. -EAGAIN when the
 * queue is full: the fresh units are the caller's to give back.
 */
int tern__bounded_submit_lane(struct tern__pool *p, struct tern__work *job,
                              struct tern__lane *lane, unsigned fresh);
/*
 * Lanes (pool.h, struct tern__lane), bounded.c:
 *   tern__lane_flush: push what the lane holds as one run, no wake. The
 *     lane's thread.
 *   tern__lanes_flush_open: flush every lane this thread has open (a
 *     shutdown from inside a loop's callback).
 *   tern__lanes_forget_open: a forked child's: the lanes of the parent's
 *     loops are emptied and forgotten unpushed (their pool is the parent's).
 */
void tern__lanes_flush_open(void);
void tern__lanes_forget_open(void);
/*
 * Wake decisions made for submissions, ever (relaxed; read by a test
 * seam, pool/seams.c): one per single submission, one per batch, one per
 * kick that found work.
 */
extern _Atomic uint64_t tern__pool_wake_checks;
/*
 * Admit n jobs at once: n slots in one step (all or none: -EAGAIN), one
 * run of ring positions, and one wake decision unless there is a lane
 * (whose held jobs are pushed first: the queue keeps the caller's order).
 */
int tern__bounded_submit_batch(struct tern__pool *p, struct tern__work *const *jobs, unsigned n,
                               struct tern__lane *lane);
/* Wake a sleeping worker if the queue holds work (tern__pool_kick). */
void tern__bounded_kick(struct tern__pool *p);
/*
 * Reservations (SPEC §13): one queue slot promised to an accepted request
 * of several steps, so its next step is never refused. A TERN__WORK_STEPS
 * job's slot turns into a reservation when a worker dequeues it (one atomic
 * step, so no other submission can take it meanwhile); the runner then
 * either queues the next step into it or gives it back.
 *
 * tern__bounded_submit_reserved: queue a job into a reservation the caller
 * holds, setting its state QUEUED once the slot is queued again (so a stop
 * that tombstones it finds a slot to give back). Never fails. Any thread.
 * tern__bounded_unreserve: give a held reservation back. Any thread.
 */
void tern__bounded_submit_reserved(struct tern__pool *p, struct tern__work *job);
void tern__bounded_unreserve(void);

/*
 * A worker found and claimed (tern__queue_claim) a TERN__WORK_STEPS job:
 * run one step (steps.c). True, as
 * for tern__work_run, when the request ended and its loop had to be woken.
 */
bool tern__steps_run(struct tern__pool *p, struct tern__work *job, unsigned worker_index);

/*
 * tern__bounded_overflow_start: start one overflow worker (worker.c)
 * unless `max` are alive already or the pool exits; 0, -EAGAIN (at max)
 * or pthread_create's error. The watchdog's thread only.
 */
int tern__bounded_overflow_start(struct tern__pool *p, unsigned max);

/* The watchdog (watchdog.c): started after the bounded class, stopped before it. */
int tern__watch_start(struct tern__pool *p);
void tern__watch_stop(struct tern__pool *p);

/*
 * The watchdog's settings (tern_pool_watch), process-wide, read when
 * used: set by tern_pool_watch_set (env.c) at any time.
 */
struct tern__watch_settings {
    _Atomic uint64_t stall_ns, overflow_idle_ns;
    _Atomic unsigned overflow_max;
};
extern struct tern__watch_settings tern__pool_watch_now;
/* Load the environment's settings once (env.c); before any read of the above. */
void tern__pool_watch_load(void);

/* Take everything still queued (shutdown); each job is passed to fn. */
void tern__bounded_drain(struct tern__pool *p, void (*fn)(struct tern__work *job));
void tern__bounded_wake_all(struct tern__pool *p);

/*
 * The pause gate (gate.c): while any hold is taken, bounded workers stop
 * before their next job. A worker reads the word once per job (relaxed)
 * and, when its count is non-zero, holds (worker.c) until every hold is
 * given back (or the pool exits). The word's top bit is a test's stop
 * point (stops.c), not a hold: a worker that finds only it stops as if it
 * had read the gate open, before it takes its job.
 */
extern _Atomic unsigned tern__pool_holds;
#define TERN__HOLDS_STOP (1u << 31)
#define TERN__HOLDS_COUNT (~TERN__HOLDS_STOP)

/*
 * Stop points (stops.c): one list, one bit each in tern__stops_armed.
 *   WORKER_PAST_GATE  a bounded worker has read the pause gate open and
 *                     not yet taken its job (armed together with
 *                     TERN__HOLDS_STOP, which is how the worker looks);
 *   START_UNPUBLISHED a pool start has its workers running and is not
 *                     yet the running pool (start_lock held);
 *   WORKER_REPAYING   a bounded worker has marked its settled count and
 *                     not yet given the slots back (bounded.c, settle);
 *   REPAYMENT_WAITED  a thread found such a repayment on its way and has
 *                     not yet waited it out.
 */
#define TERN__STOP_POINTS(X) \
    X(WORKER_PAST_GATE)      \
    X(START_UNPUBLISHED)     \
    X(WORKER_REPAYING)       \
    X(REPAYMENT_WAITED)

enum tern__stop_point {
#define TERN__STOP_ENUM(name) TERN__STOP_##name,
    TERN__STOP_POINTS(TERN__STOP_ENUM)
#undef TERN__STOP_ENUM
        TERN__STOP_COUNT
};

extern _Atomic unsigned tern__stops_armed;
/* Wait here while the point is armed (any pool thread). */
void tern__stop_at(enum tern__stop_point point);
/* Whether the point is armed: one relaxed load, for a caller's cold path. */
static inline bool tern__stop_armed(enum tern__stop_point point)
{
    return atomic_load_explicit(&tern__stops_armed, memory_order_relaxed) & (1u << point);
}
/* The test's side (pool/seams.c): arm, release, count the threads stopped. */
void tern__stop_arm(enum tern__stop_point point);
void tern__stop_release(enum tern__stop_point point);
unsigned tern__stop_waiting(enum tern__stop_point point);

int tern__long_init(struct tern__pool *p);
int tern__long_submit(struct tern__pool *p, struct tern__work *job, tern_refusal *cause);
/* Tell every long worker to exit and join them (no job may be running). */
void tern__long_stop(struct tern__pool *p);
void tern__long_destroy(struct tern__pool *p);

/* Lookups (lookup.c): run one lookup under the cap, then any waiting. */
void tern__lookup_run(struct tern__pool *p, struct tern__work *job, unsigned worker_index);
int tern__lookup_init(struct tern__pool *p);
void tern__lookup_destroy(struct tern__pool *p);
void tern__lookup_drain(struct tern__pool *p, void (*fn)(struct tern__work *job));

/*
 * The configuration's defaults (env.c): built in, and with the
 * environment's TERN_POOL_* variables applied. A bad variable
 * makes every start fail: tern__pool_env_check returns -EINVAL and says
 * why on stderr, once.
 */
void tern__pool_config_defaults(tern_pool_config *cfg);
void tern__pool_env_apply(tern_pool_config *cfg);
int tern__pool_env_check(void);

#endif
