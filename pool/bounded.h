/*
 * The bounded queue (bounded.c): admission against the slot word,
 * reservations, the lanes that hold a submitter's jobs back for one push,
 * the runs a worker takes in one step, and the wake of a parked worker.
 * Also the per-worker slots the queue's repayment and the workers share
 * (figures, owed slots, runs, the pool's shape): bounded.c defines them,
 * below the workers that write them and the readers above.
 *
 * A lane's credit and its held jobs are this file's: the client's inline
 * admission (pool.h, tern__lane_accept_held) spends credit through
 * tern__lane_spend, and nothing else writes a lane.
 */
#ifndef TERN_POOL_BOUNDED_H
#define TERN_POOL_BOUNDED_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "check.h"
#include "sizes.h"
#include "stats.h"
#include "tern.h"
#include "work.h"

struct tern__pool;

/*
 * A submitter's lane: bounded headers it admitted while it owed a wake
 * decision anyway (a loop in steps 1 and 2 of its turn), held back from
 * the queue and pushed as one run at the kick, or when a worker's run of
 * them has gathered. Admission is exact when a header
 * enters the lane (its slot is taken and its unit counted in); only the
 * push waits, so the loop writes the queue once per run instead of once
 * per job, and a worker finds a run waiting instead of a job at a time.
 * One thread at a time uses a lane, the thread that fills it; it is empty
 * whenever that thread is outside the window (the kick flushes it), and
 * a tern_pool_shutdown on a thread with lanes open flushes them first.
 * The client zeroes it before first use and never touches its fields.
 */
#define TERN__LANE_MAX 32
struct tern__lane {
    unsigned n;
    unsigned credit;         /* slots taken and units counted in ahead, unused */
    unsigned want;           /* the credit to take next: the last run's length */
    struct tern__pool *pool; /* where the held headers were admitted (n > 0) */
    struct tern__lane *next; /* this thread's other open lanes */
    struct tern__work *held[TERN__LANE_MAX];
};

/* Push what the lane holds as one run, without a wake. The lane's thread. */
void tern__lane_flush(struct tern__lane *lane);
/*
 * Admit into an open lane on the credit it holds (lane->credit > 0: its
 * units and slots were taken from lane->pool, so the lane holds a job of
 * that pool or was just opened for one): no atomic step. A full lane is
 * pushed as one run.
 */
static inline void tern__lane_spend(struct tern__lane *lane, struct tern__work *w)
{
    TERN_INSIST(lane->credit > 0);
    lane->credit--;
    lane->held[lane->n++] = w;
    if (lane->n == TERN__LANE_MAX)
        tern__lane_flush(lane);
}

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
extern __attribute__((
    visibility("hidden"))) struct tern__worker_figures tern__pool_workers[TERN__WORKER_SLOTS];
/*
 * When the last wake signal was sent (tern__ticks), or 0: written under
 * park_lock by the submitter that signals (bounded.c), taken back to 0 by
 * the parked worker that finds it set when it wakes (worker.c).
 */
extern __attribute__((visibility("hidden"))) uint64_t tern__pool_wake_at;

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
extern __attribute__((visibility("hidden"))) struct tern__pool_shape tern__pool_shape;
/*
 * The ring's room (bounded.c's top comment, "Tombstones"): queue_capacity
 * slots and as many tombstones again (at most TERN__TOMB_ROOM_MAX).
 * Admission keeps queued + reserved + tombstones within that room, so the
 * ring is never full.
 */
#define TERN__TOMB_ROOM_MAX (UINT64_C(1) << 30)
static inline uint64_t tern__queue_room(const tern_pool_config *cfg)
{
    uint64_t cap = cfg->queue_capacity;
    return cap + (cap < TERN__TOMB_ROOM_MAX ? cap : TERN__TOMB_ROOM_MAX);
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
/*
 * A sleeping bounded worker has been signalled and has not yet cleared
 * this (worker.c): a worker is about to be on a CPU. At most one wake is
 * on its way at a time; submitters signal only when this is clear, and
 * tern__pool_active() counts it, so a loop that just woke a worker spins
 * for its answer instead of parking too.
 */
extern __attribute__((visibility("hidden"))) _Atomic bool tern__pool_waking;
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
#define TERN__RUN_LEN(word) ((unsigned)(word)&0xffu)
#define TERN__RUN_GEN_ONE (UINT64_C(1) << 16)
extern __attribute__((visibility("hidden"))) struct tern__run tern__pool_runs[TERN__WORKER_SLOTS];

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

/* The runs of the worker slots the running pool uses (its shape, above). */
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
 * is held there (pushed with the lane's run) and no worker
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
int tern__bounded_submit_lane(struct tern__pool *p, struct tern__work *job, struct tern__lane *lane,
                              unsigned fresh);
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
extern __attribute__((visibility("hidden"))) _Atomic uint64_t tern__pool_wake_checks;
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

/* Take everything still queued (shutdown); each job is passed to fn. */
void tern__bounded_drain(struct tern__pool *p, void (*fn)(struct tern__work *job));
void tern__bounded_wake_all(struct tern__pool *p);
#endif
