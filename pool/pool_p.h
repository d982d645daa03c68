/*
 * The pool's private interface: jobs, the two occupancy classes, the
 * per-loop result ring, statistics.
 *
 * Ownership of a job. The loop allocates it at submission and holds it
 * (as an op in its id map) until done has run. The pool borrows it from
 * enqueue to completion: a worker runs it, marks it FINISHED and pushes it
 * onto its loop's result ring, which hands it back. A job cancelled while
 * still queued is TOMBSTONED by one CAS; the loop delivers its done at once
 * and the record stays in the queue until a worker (or shutdown) skips it.
 * Whichever side lets go of a tombstone last frees it (LOOP_DONE /
 * POOL_DONE below), so neither waits for the other.
 */
#ifndef TERN_POOL_P_H
#define TERN_POOL_P_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>

#include "loop_p.h"

enum tern__job_state {
    TERN__JOB_QUEUED = 0,     /* accepted, not yet taken by a worker */
    TERN__JOB_RUNNING = 1,    /* a worker runs work() */
    TERN__JOB_FINISHED = 2,   /* work returned (or never will): on its way to the ring */
    TERN__JOB_TOMBSTONED = 3, /* cancelled while queued; the queue still holds it */
    TERN__JOB_LOOP_DONE = 4,  /* tombstone: the loop has delivered done */
    TERN__JOB_POOL_DONE = 5,  /* tombstone: the pool has dropped it */
};

/*
 * TERN__JOB_STEPS: a request of several steps (steps.c). Its work function
 * runs one step per pass and returns NULL while another step follows; the
 * job then goes back into the bounded queue on its reservation.
 */
enum tern__job_kind { TERN__JOB_WORK = 0, TERN__JOB_LOOKUP = 1, TERN__JOB_STEPS = 2 };

struct tern__owner;

struct tern_job {
    struct tern__op op;           /* loop side: id, ready link, deadline */
    _Atomic uint8_t state;        /* enum tern__job_state */
    _Atomic bool cancel;          /* tern_job_cancelled() */
    uint8_t occupancy;            /* tern_occupancy */
    uint8_t kind;                 /* enum tern__job_kind */
    bool has_deadline;            /* loop side: holds a heap claim (a timeout) */
    bool timed_out;               /* loop side: the deadline took effect */
    uint16_t cancel_window;       /* worker side: tern__pool_cancel_windows when it started */
    tern_loop *loop;
    struct tern__owner *owner;    /* loop side: whose cap it counts against, or NULL */
    tern_job *owner_prev, *owner_next; /* loop side: the owner's jobs in flight */
    tern_work_fn work;
    tern_done_fn done;
    void *arg;
    void *result;
    uint64_t t_submit; /* tern__ticks() at submission, for the queue-wait percentile */
};

/* ------------------------------------------------------------------ */
/* The result ring (ring.c): MPSC, one per loop.                      */
/* ------------------------------------------------------------------ */

struct tern__ring_slot {
    _Atomic uint64_t seq;
    tern_job *job;
};

struct tern__ring {
    uint64_t mask;
    struct tern__ring_slot *slots; /* calloc'd: zero is every slot's initial state */
    alignas(TERN_CACHELINE) _Atomic uint64_t tail; /* producers: pool threads */
    _Atomic unsigned pins; /* producers inside push + wake (see tern__job_complete) */
    alignas(TERN_CACHELINE) uint64_t head;         /* consumer: the loop */
};

int tern__ring_new(struct tern__ring **ringp, uint64_t capacity);
void tern__ring_free(struct tern__ring *ring);
/* Any thread. Never fails: the producer's job holds a credit (see ring.c). */
void tern__ring_push(struct tern__ring *ring, tern_job *job);
/* The loop only. NULL when nothing is ready. */
tern_job *tern__ring_pop(struct tern__ring *ring);
bool tern__ring_ready(const struct tern__ring *ring);

/* Admit and hand over a job of either kind (tern_submit, tern_resolve). */
int tern__submit_job(tern_loop *loop, tern_occupancy occ, enum tern__job_kind kind,
                     tern_work_fn work, tern_done_fn done, void *arg, tern_id *idp);
/* The same with an owner and a timeout (opts may be NULL). */
int tern__submit_job_with(tern_loop *loop, tern_occupancy occ, enum tern__job_kind kind,
                          tern_work_fn work, tern_done_fn done, void *arg,
                          const tern_job_options *opts, tern_id *idp);

/*
 * Hand a finished job back to its loop: ring push + wake (any thread).
 * True when the loop was asleep and had to be woken by a syscall.
 */
bool tern__job_complete(tern_job *job);
/* A worker found this job; true if it now runs, false if it was a tombstone. */
bool tern__job_claim(tern_job *job);
/*
 * Around a claimed job's work (or each step of one): note the cancelling
 * shutdowns begun so far, and latch a cancel if one ran meanwhile.
 * started is false when a cancelling shutdown is under way: the job counts
 * as queued and its work (or its next step) must not start.
 */
bool tern__job_started(tern_job *job);
void tern__job_returned(tern_job *job);
/* A worker runs a claimed job and completes it (stats recorded); as complete. */
bool tern__job_run(tern_job *job, unsigned worker_index);

/* ------------------------------------------------------------------ */
/* Statistics (histogram.c)                                            */
/* ------------------------------------------------------------------ */

#define TERN__HIST_BUCKETS 304
#define TERN__HIST_DECAY 4096 /* halve every this many samples: "recent jobs" */

struct tern__hist {
    _Atomic uint64_t count;
    _Atomic uint64_t buckets[TERN__HIST_BUCKETS];
};

/* shared: several threads record into h (the long class); else one does. */
void tern__hist_record(struct tern__hist *h, uint64_t value, bool shared);
/* Percentile q (0..1) over the sum of n histograms, in recorded units. */
uint64_t tern__hist_percentile(struct tern__hist *const *hs, unsigned n, double q);

/* ------------------------------------------------------------------ */
/* The process-wide pool (pool.c, bounded.c, long.c)                   */
/* ------------------------------------------------------------------ */

#define TERN__MAX_THREADS 1024

struct tern__bounded_cell {
    _Atomic uint64_t seq;
    tern_job *job;
};

struct tern__long_worker {
    pthread_t thread;
    pthread_cond_t cond;
    tern_job *job; /* handed over under long_lock */
    bool exit;     /* told to exit (shutdown), under long_lock */
    struct tern__long_worker *next_parked, *next_all;
};

struct tern__pool {
    tern_pool_config cfg;
    uint64_t gen; /* which start this is: a loop's cached config check names it */

    /* The bounded queue: a per-slot-sequence MPMC ring (bounded.c). */
    alignas(TERN_CACHELINE) _Atomic uint64_t q_head;
    alignas(TERN_CACHELINE) _Atomic uint64_t q_tail;
    alignas(TERN_CACHELINE) struct tern__bounded_cell *cells;
    uint64_t q_mask;

    /* Bounded workers park here; submitters wake one only if some sleep. */
    alignas(TERN_CACHELINE) _Atomic unsigned sleepers;
    _Atomic bool waking;
    _Atomic unsigned spinners; /* workers spinning before they park */
    unsigned max_spinners;
    _Atomic bool exiting;
    /* Off the line above: workers write the lock as they park, and every
     * submission reads `sleepers` and `spinners`. */
    alignas(TERN_CACHELINE) pthread_mutex_t park_lock;
    pthread_cond_t park_cond;
    pthread_t *threads;
    unsigned nthreads;
    unsigned held; /* workers holding at the pause gate (gate.c), under park_lock */

    /* The long class (long.c). Lock order: long_lock is a leaf. */
    pthread_mutex_t long_lock;
    struct tern__long_worker *long_parked, *long_all;
    unsigned long_count; /* threads alive, under long_lock */

    /* Name lookups beyond the cap wait here (resolve.c). Leaf lock. */
    pthread_mutex_t lookup_lock;
    unsigned lookups_active, lookups_cap;
    tern_job **lookups_waiting;
    unsigned lookups_len, lookups_cap_alloc, lookups_first;
};

/* Counters live outside the pool so a reader never races a free. */
struct tern__pool_counters {
    /*
     * The bounded queue's slots: jobs queued in the low 32 bits (TERN__SLOT_QUEUED),
     * reservations in the high 32 (TERN__SLOT_RESERVED). One word, so admission
     * bounds queued + reserved exactly and a reader sees both at one instant.
     */
    alignas(TERN_CACHELINE) _Atomic uint64_t queued;
    _Atomic unsigned queued_peak;
    alignas(TERN_CACHELINE) _Atomic unsigned threads, busy, long_threads, long_busy;
    /* Workers spinning for a job (as the pool's `spinners`, readable with no pool). */
    _Atomic unsigned spinning;
    alignas(TERN_CACHELINE) _Atomic uint64_t submitted;
    _Atomic uint64_t refused_queue_full, refused_long_ceiling, refused_undelivered,
        refused_operations;
    alignas(TERN_CACHELINE) _Atomic uint64_t completed, cancelled;
};

extern struct tern__pool_counters tern__pool_stats;

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
/* Give one queued slot back: a checked counter (check.h) on the low half. */
static inline void tern__slots_unqueue(void)
{
    uint64_t before = atomic_fetch_sub_explicit(&tern__pool_stats.queued, TERN__SLOT_QUEUED,
                                                memory_order_relaxed);
    if (TERN_UNLIKELY(tern__slots_queued(before) == 0))
        tern__check_failed(__FILE__, __LINE__, __func__, "COUNTER", "queued went below zero");
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
 */
extern _Atomic uint64_t tern__pool_inflight;
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
static inline void tern__pool_leave(void)
{
    /* Pairs with the acquire load in tern_pool_shutdown()'s wait. */
    TERN_ATOMIC_DECREMENT(tern__pool_inflight, memory_order_release);
}

/*
 * Hand an admitted job to the pool (starting it with cfg if none runs; NULL
 * cfg adopts any). *checked caches the generation whose configuration was
 * last found equal to cfg, so the comparison is paid once per pool start.
 * 0, or -EINVAL (configuration conflict), -EAGAIN with *cause (queue full,
 * long ceiling, a shutdown under way), -ENOMEM, thread errors. On success
 * the job counts in tern__pool_inflight until its pool life ends.
 */
int tern__pool_accept(const tern_pool_config *cfg, uint64_t *checked, tern_job *job,
                      tern_refusal *cause);
/* The running pool or NULL (an acquire load; no start). */
struct tern__pool *tern__pool_current(void);
/* The running pool, started on demand with cfg (NULL: defaults). */
int tern__pool_get(const tern_pool_config *cfg, struct tern__pool **poolp);

int tern__bounded_start(struct tern__pool *p);
void tern__bounded_stop(struct tern__pool *p);
/* Admit and enqueue; -EAGAIN when the queue is full. */
int tern__bounded_submit(struct tern__pool *p, tern_job *job);
/*
 * Reservations (SPEC §13): one queue slot promised to an accepted request
 * of several steps, so its next step is never refused. A TERN__JOB_STEPS
 * job's slot turns into a reservation when a worker dequeues it (one atomic
 * step, so no other submission can take it meanwhile); the runner then
 * either queues the next step into it or gives it back.
 *
 * tern__bounded_submit_reserved: queue a job into a reservation the caller
 * holds. Never fails. Any thread.
 * tern__bounded_unreserve: give a held reservation back. Any thread.
 */
void tern__bounded_submit_reserved(struct tern__pool *p, tern_job *job);
void tern__bounded_unreserve(void);

/*
 * A worker found a TERN__JOB_STEPS job: run one step (steps.c). True, as
 * for tern__job_run, when the request ended and its loop had to be woken.
 */
bool tern__steps_run(struct tern__pool *p, tern_job *job, unsigned worker_index);

/* Take everything still queued (shutdown); each job is passed to fn. */
void tern__bounded_drain(struct tern__pool *p, void (*fn)(tern_job *job));
void tern__bounded_wake_all(struct tern__pool *p);

/*
 * The pause gate (gate.c): while any hold is taken, bounded workers stop
 * before their next job. A worker reads the count once per job (relaxed)
 * and, when it is non-zero, calls tern__bounded_hold, which returns once
 * every hold is given back (or the pool exits). *busy is the worker's
 * busy-spell flag: a held worker is not busy.
 */
extern _Atomic unsigned tern__pool_holds;
void tern__bounded_hold(struct tern__pool *p, bool *busy);

int tern__long_init(struct tern__pool *p);
int tern__long_submit(struct tern__pool *p, tern_job *job);
/* Tell every long worker to exit and join them (no job may be running). */
void tern__long_stop(struct tern__pool *p);
void tern__long_destroy(struct tern__pool *p);

/* Lookups: run one claimed lookup job under the cap, then any waiting. */
void tern__lookup_run(struct tern__pool *p, tern_job *job, unsigned worker_index);
int tern__lookup_init(struct tern__pool *p);
void tern__lookup_destroy(struct tern__pool *p);
void tern__lookup_drain(struct tern__pool *p, void (*fn)(tern_job *job));
/* A lookup's deadline passed while it runs: answer its caller now (loop thread). */
void tern__lookup_expired(tern_loop *loop, tern_job *job);

#endif
