/*
 * The bounded class's workers: a fixed set of threads that take jobs from
 * the bounded queue (bounded.c) and run them, one step of a request of
 * several steps (steps.c) or a lookup under its cap (lookup.c) at a time.
 *
 * Parking. A worker that finds nothing spins briefly (a job that arrives
 * during the spin is cheaper to catch than to be woken for: a cross-core
 * wake measured about 20 µs; docs/performance.md has the figures),
 * then parks on a condition variable after announcing itself in
 * `sleepers`; bounded.c says how a submitter wakes one.
 *
 * Exclusive mode (gate.c) holds the workers between jobs: each reads the
 * hold count once per job and, finding it non-zero, holds here.
 *
 * Timing. Two clock readings around every job were a fifth of a short
 * job's cost on the worker. A worker times every job while the last job
 * it timed ran at least TIME_ALL_NS (the readings are then noise beside
 * the work); otherwise it times one job in four, chosen at random, and
 * records it as four samples. The choice depends only on jobs already
 * run, so each job is counted four times with chance 1/4 or once for
 * sure: the run histogram still estimates every job's share without
 * bias, and a pattern in the work (one slow job in ten) cannot line up
 * with the sample. Busy time is read per run instead (span_mark, below).
 */
#define _LGPL_SOURCE /* the reader's `registered` flag, as in runtime/core/rcu.c */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "bounded.h"
#include "clock.h"
#include "fault.h"
#include "lookup.h"
#include "platform.h"
#include "pool_p.h"
#include "qsbr.h"
#include "spin.h"
#include "steps.h"
#include "stops.h"
#include "worker.h"

_Atomic unsigned tern__pool_holds;
struct tern__watch_settings tern__pool_watch_now;

/*
 * Add to a figure only its worker writes: a relaxed load and store, no
 * locked instruction; readers may see it a moment old. Compiled out
 * (-Dfigures=false) it is nothing.
 */
#ifdef TERN_FIGURES
#define FIGURE_ADD(field, n)                                                                    \
    atomic_store_explicit(&(field), atomic_load_explicit(&(field), memory_order_relaxed) + (n), \
                          memory_order_relaxed)
#else
#define FIGURE_ADD(field, n) ((void)0)
#endif
/* The bucket of a wake latency of ns nanoseconds: floor(log2(ns)), 0 for 0 and 1. */
static inline unsigned wake_bucket(uint64_t ns)
{
    unsigned b = ns < 2 ? 0 : 63u - (unsigned)__builtin_clzll(ns);
    return b < TERN_POOL_WAKE_BUCKETS ? b : TERN_POOL_WAKE_BUCKETS - 1;
}

/*
 * Before parking, a worker spins for a job within its adaptive budget
 * (backends/spin.h), but only while fewer than `max_spinners` spin: half
 * the CPUs, and at least two where there are two. On a small machine the
 * loop that feeds the pool shares the cores, and every extra spinner
 * takes its time; but a worker that parks because another spins is
 * woken for the next run, and the woken thread is what takes the feeding
 * loop's CPU from it. It checks the clock every
 * TERN__SPIN_CLOCK_EVERY rounds and yields every YIELD_EVERY, so a feeder
 * that shares its core still runs: 256 rounds are few beside a spin's
 * budget (TERN__SPIN_NS) and many beside the cost of one yield.
 */
#define YIELD_EVERY 256

/* Timing: jobs at least this long are all timed (see the top). */
#define TIME_ALL_NS 16000

struct worker_arg {
    struct tern__pool *pool;
    unsigned index;   /* histograms: its own, or TERN__MAX_THREADS (shared) */
    unsigned figures; /* its slot of tern__pool_workers */
    int overflow;     /* an overflow worker's slot in the pool, or -1 */
};

_Thread_local _Atomic(const void *) *tern__pool_hand_slot
    __attribute__((tls_model("initial-exec")));

bool tern__pool_handing(const void *target)
{
    /*
     * The running pool's workers. A pool shut down has none inside a
     * hand-back: its shutdown waited for every job's unit, which a job
     * gives up only after its hand-back returned.
     */
    unsigned fixed, n = tern__runs_in_use(&fixed);
    for (unsigned i = 0; i < n; i++) {
        unsigned slot = tern__worker_slot(i, fixed);
        if (atomic_load_explicit(&tern__pool_workers[slot].handing, memory_order_acquire) == target)
            return true;
    }
    return false;
}

struct worker {
    struct tern__pool *pool;
    struct tern__spin spin;
    /*
     * The last completion had to wake its loop with a syscall: that loop
     * was asleep, and its next submission is at least a wake away. Park
     * without spinning.
     */
    bool loop_slept;
    /* Its run and its figures' count of slots owed (bounded.h). */
    struct tern__run *run;
    struct tern__owed *owed;
    /*
     * Units of tern__pool_inflight owed for jobs of the run handed back
     * (tern__work_execute): given back with the slots when the run ends,
     * one add on a line every worker writes instead of one per job.
     */
    unsigned units;
    /* Timing (see the top): the sampler's state, and its threshold in ticks. */
    uint32_t rng;
    bool time_all;
    uint64_t long_ticks;
#ifdef TERN_FIGURES
    /*
     * Busy time is read per run, not per job: from the tick it found
     * work (span_from) to the next fresh run, or to running dry or
     * holding, whichever is first; so it counts the worker's own steps
     * between jobs as busy too.
     */
    bool spanning;
    uint64_t span_from;
#endif
};

/* The threshold of "Timing" in ticks; the rate firms up as the process ages. */
static uint64_t long_ticks(void)
{
    return (uint64_t)(tern__ticks_per_ns() * TIME_ALL_NS);
}

/* Weight of the next job's run time: 1 (all timed), 4 (sampled) or 0 (untimed). */
static unsigned run_weight(struct worker *w)
{
    if (w->time_all)
        return 1;
    uint32_t x = w->rng; /* xorshift32 */
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    w->rng = x;
    return (x & 3) == 0 ? 4 : 0;
}

/* Busy time: a span starts, or goes on (the time so far is added), or ends. */
static void span_mark(struct worker *w, struct tern__worker_figures *fig, bool go_on)
{
#ifdef TERN_FIGURES
    uint64_t now = go_on || w->spanning ? tern__ticks() : 0;
    if (w->spanning)
        FIGURE_ADD(fig->busy_ticks, now - w->span_from);
    w->spanning = go_on;
    w->span_from = now;
#else
    (void)w, (void)fig, (void)go_on;
#endif
}

/* An entry found: a span starts, or, at a fresh run, its time so far is added. */
static void span_found(struct worker *w, struct tern__worker_figures *fig, bool fresh)
{
#ifdef TERN_FIGURES
    if (fresh || !w->spanning)
        span_mark(w, fig, true);
#else
    (void)w, (void)fig, (void)fresh;
#endif
}

/* A run ended: repay the slots and the units its jobs owe. */
static void repay(struct worker *w)
{
    tern__bounded_repay(w->owed);
    if (w->units != 0) {
        tern__pool_leave_n(w->units);
        w->units = 0;
    }
}

/* Work for an idle worker: the queue, or another worker's run. */
static bool work_waiting(struct tern__pool *p)
{
    return tern__bounded_ready(p) || tern__runs_left();
}

/* Take an entry from another worker's run; NULL if none has one. */
static struct tern__work *steal(struct worker *w)
{
    unsigned fixed, n = tern__runs_in_use(&fixed);
    for (unsigned i = 0; i < n; i++) {
        struct tern__run *r = tern__run_at(i, fixed);
        struct tern__work *job;
        if (r != w->run && tern__run_left(r) && (job = tern__run_take(r)) != NULL)
            return job;
    }
    return NULL;
}

/*
 * The next entry of the worker's run, else of a new run taken from the
 * queue, else one taken from another worker's run; NULL when there is
 * none. A run that ends repays the slots its claimed jobs owe, in one
 * step, before the next is taken. *fresh: a new run was taken.
 */
static struct tern__work *next_entry(struct worker *w, bool *fresh)
{
    *fresh = false;
    struct tern__work *job = tern__run_take(w->run);
    if (job != NULL)
        return job;
    repay(w);
    struct tern__work *taken[TERN__TAKE_MAX];
    unsigned n = tern__bounded_take_run(w->pool, taken);
    if (n == 0)
        return steal(w);
    /*
     * Ask for every record of the run now: each was last written by a
     * loop on another core, and the worker would otherwise wait on each
     * miss in turn as it reaches the job (a third of its time).
     */
    for (unsigned i = 0; i < n; i++)
        tern__prefetch_write(taken[i]);
    for (unsigned i = 1; i < n; i++)
        atomic_store_explicit(&w->run->entry[i], taken[i], memory_order_relaxed);
    /*
     * Release: a thief that reads this word sees the entries. The owner
     * alone stores the word, and only with nothing left in it, when no
     * CAS on it can succeed.
     */
    uint64_t word = atomic_load_explicit(&w->run->word, memory_order_relaxed);
    atomic_store_explicit(&w->run->word,
                          (word & ~(TERN__RUN_GEN_ONE - 1)) + TERN__RUN_GEN_ONE + (1u << 8) + n,
                          memory_order_release);
    *fresh = true;
    return taken[0];
}

/*
 * A pause is on: the rest of the run goes back to the queue, untouched
 * and still queued, so nothing waits in a held worker's hands (a
 * cancelling shutdown's drain finds it there; any worker may take it
 * when the pause ends), and the slots owed are repaid.
 */
static void put_back_run(struct worker *w)
{
    repay(w);
    struct tern__run *r = w->run;
    uint64_t word = atomic_load_explicit(&r->word, memory_order_acquire);
    unsigned next, len;
    do {
        next = TERN__RUN_NEXT(word);
        len = TERN__RUN_LEN(word);
        if (next >= len)
            return;
    } while (!atomic_compare_exchange_weak_explicit(&r->word, &word,
                                                    word + ((uint64_t)(len - next) << 8),
                                                    memory_order_acquire, memory_order_acquire));
    struct tern__work *rest[TERN__TAKE_MAX];
    for (unsigned i = next; i < len; i++)
        rest[i - next] = atomic_load_explicit(&r->entry[i], memory_order_relaxed);
    tern__bounded_put_back(w->pool, rest, len - next);
}

static bool held_by_rcu(void)
{
    return tern__qsbr_registered() && tern__qsbr_read_ongoing();
}

/*
 * The worker's side of the pause gate (gate.c): hold until every hold is
 * given back or the pool exits. A worker the application registered as a
 * urcu-qsbr reader (tern never does) is taken offline while it holds, so a
 * synchronize_rcu() made inside exclusive mode does not wait for it.
 */
static void hold(struct tern__pool *p, bool *busy)
{
    if (*busy) {
        *busy = false; /* a held worker is not busy: the statistics say so */
        TERN_ATOMIC_DECREMENT(tern__pool_stats.busy, memory_order_relaxed);
    }
    bool online = held_by_rcu();
    if (online)
        tern__qsbr_offline();
    tern__mutex_lock(&p->park_lock);
    p->held++;
    tern__cond_broadcast(&p->quiet_cond);
    while (atomic_load_explicit(&tern__pool_holds, memory_order_relaxed) != 0 &&
           !atomic_load_explicit(&p->exiting, memory_order_relaxed))
        tern__cond_wait(&p->park_cond, &p->park_lock);
    p->held--;
    tern__mutex_unlock(&p->park_lock);
    if (online)
        tern__qsbr_online();
}

/*
 * A parked worker is running again: if a wake signal is outstanding
 * (tern__pool_wake_at, under park_lock), it takes it as its own and
 * records the wake's latency. Nothing when figures are compiled out.
 */
static void note_wake(struct tern__worker_figures *fig)
{
#ifdef TERN_FIGURES
    uint64_t at = tern__pool_wake_at;
    if (at == 0)
        return;
    tern__pool_wake_at = 0;
    uint64_t now = tern__ticks();
    uint64_t ns = now > at ? (uint64_t)((double)(now - at) / tern__ticks_per_ns()) : 0;
    FIGURE_ADD(fig->wakes, 1);
    FIGURE_ADD(fig->wake_hist[wake_bucket(ns)], 1);
#else
    (void)fig;
#endif
}

/* Park until signalled, or for at most timeout_ns (0: no limit); true if the time ran out. */
static bool park(struct tern__pool *p, uint64_t timeout_ns, struct tern__worker_figures *fig)
{
    bool timed_out = false;
    tern__mutex_lock(&p->park_lock);
    atomic_fetch_add_explicit(&p->sleepers, 1, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
    if (!work_waiting(p) && !atomic_load_explicit(&p->exiting, memory_order_relaxed)) {
        FIGURE_ADD(fig->parks, 1);
        if (timeout_ns == 0) {
            tern__cond_wait(&p->park_cond, &p->park_lock);
        } else {
            tern__deadline_t until = tern__cond_deadline(timeout_ns);
            timed_out = tern__cond_timedwait(&p->park_cond, &p->park_lock, &until);
        }
        note_wake(fig);
    }
    atomic_fetch_sub_explicit(&p->sleepers, 1, memory_order_relaxed);
    tern__mutex_unlock(&p->park_lock);
    /* `tern__pool_waking` is cleared by the caller, once it counts as busy. */
    return timed_out;
}

/*
 * A worker back from park() clears `tern__pool_waking` (it may be the one
 * signalled). Only after it counts as busy, if it found work: the loop
 * that woke it reads either gauge as "a worker is on a CPU"
 * (tern__pool_active), and a gap between them would end its spin just as
 * the answer is coming.
 */
static void woken(bool *parked)
{
    if (*parked) {
        *parked = false;
        atomic_store_explicit(&tern__pool_waking, false, memory_order_relaxed);
    }
}

/* A worker ran dry: it stops counting as busy (a gauge of tern__pool_active). */
static void idle(bool *busy)
{
    if (*busy) {
        *busy = false;
        TERN_ATOMIC_DECREMENT(tern__pool_stats.busy, memory_order_relaxed);
    }
}

/*
 * Spin for a job within the budget; false: park. The worker counts as
 * spinning before it stops counting as busy, so the loop waiting for its
 * answer never sees the pool go quiet between a job and the spin after it.
 */
static bool spin(struct worker *w, bool *busy)
{
    struct tern__pool *p = w->pool;
    if (w->loop_slept) {
        w->loop_slept = false;
        idle(busy);
        return false;
    }
    uint32_t budget = tern__spin_budget(&w->spin);
    if (budget == 0) {
        idle(busy);
        return false;
    }
    if (atomic_fetch_add_explicit(&p->spinners, 1, memory_order_relaxed) >= p->max_spinners) {
        atomic_fetch_sub_explicit(&p->spinners, 1, memory_order_relaxed);
        idle(busy);
        return false;
    }
    atomic_fetch_add_explicit(&tern__pool_stats.spinning, 1, memory_order_relaxed);
    idle(busy);
    uint64_t deadline = tern__clock_now() + budget;
    bool found = false;
    for (unsigned i = 1;; i++) {
        found = tern__bounded_ready(p) || atomic_load_explicit(&p->exiting, memory_order_relaxed);
        /* Other workers' runs cost a line each to look at: now and then. */
        if (!found && i % TERN__SPIN_CLOCK_EVERY == 1)
            found = tern__runs_left();
        if (found)
            break;
        /*
         * Yield now and then: if the thread that will feed us shares our
         * core (a busy or small machine, or valgrind, which runs one
         * thread at a time), a pure spin would only delay it.
         */
        if (i % YIELD_EVERY == 0)
            tern__thread_yield();
        else
            tern__spin_pause();
        if (i % TERN__SPIN_CLOCK_EVERY == 0 && tern__clock_now() >= deadline)
            break;
    }
    TERN_ATOMIC_DECREMENT(tern__pool_stats.spinning, memory_order_relaxed);
    atomic_fetch_sub_explicit(&p->spinners, 1, memory_order_relaxed);
    if (found && !*busy) {
        /* Busy again before it stops spinning: the gauges never both read 0. */
        *busy = true;
        atomic_fetch_add_explicit(&tern__pool_stats.busy, 1, memory_order_relaxed);
    }
    tern__spin_result(&w->spin, found);
    return found;
}

/*
 * Run what a worker took from the queue: a job, a lookup, or one step of
 * a request. Returns 1 if it ran (a lookup counts when taken), 0 for a
 * tombstone: the figures' count of entries run. Lookups and steps are
 * timed every one (they are rare beside plain jobs).
 */
static unsigned run_taken(struct tern__pool *p, struct worker *w, struct tern__work *job,
                          unsigned index)
{
    if (job->kind == TERN__WORK_LOOKUP || job->kind == TERN__WORK_STEPS) {
        unsigned ran = 1;
        if (job->kind == TERN__WORK_LOOKUP)
            tern__lookup_run(p, job, index); /* claims it under the cap */
        else if (!tern__queue_claim(job))
            ran = 0; /* a tombstone: its stop gave the slot back */
        else
            w->loop_slept = tern__steps_run(p, job, index); /* one step, then requeued or done */
        return ran;
    }
    if (!tern__queue_claim_owed(job, w->owed))
        return 0;
    unsigned weight = run_weight(w);
    uint64_t ticks;
    w->loop_slept = tern__work_execute(job, index, weight, &ticks);
    if (weight != 0)
        w->time_all = ticks >= w->long_ticks;
    w->units++;
    return 1;
}

/*
 * An overflow worker idle for its whole timed park retires, unless work
 * came or the pool exits (the stop joins it then). Under park_lock, so
 * the stop and the exclusive-mode gate count it exactly; detached, since
 * nobody will join it. It touches nothing of the pool after the unlock.
 */
static bool overflow_retire(struct tern__pool *p, int slot)
{
    tern__mutex_lock(&p->park_lock);
    bool go = !work_waiting(p) && !atomic_load_explicit(&p->exiting, memory_order_relaxed);
    if (go) {
        p->overflow[slot].alive = false;
        TERN_DECREMENT(p->overflow_alive);
        TERN_ATOMIC_DECREMENT(tern__pool_stats.overflow_now, memory_order_relaxed);
        atomic_fetch_add_explicit(&tern__pool_stats.overflow_retired, 1, memory_order_relaxed);
        tern__thread_detach(tern__thread_self());
    }
    tern__mutex_unlock(&p->park_lock);
    return go;
}

static void *worker_main(void *argp)
{
    struct worker_arg a = *(struct worker_arg *)argp;
    free(argp);
    tern__thread_name(a.overflow < 0 ? "tern-pool" : "tern-overflow");
    struct tern__pool *p = a.pool;
    struct tern__worker_figures *fig = &tern__pool_workers[a.figures];
    struct worker w = {.pool = p,
                       .run = &tern__pool_runs[a.figures],
                       .owed = &fig->owed,
                       .rng = 0x9e3779b9u * (a.figures + 1), /* never 0: xorshift's fixed point */
                       .time_all = true,                     /* until a job shows it is short */
                       .long_ticks = long_ticks()};
    uint64_t seq = atomic_load_explicit(&fig->seq, memory_order_relaxed);
    tern__pool_hand_slot = &fig->handing;
    tern__spin_init(&w.spin);
    /* `threads` counts the fixed set; overflow workers have their own gauge. */
    if (a.overflow < 0)
        atomic_fetch_add_explicit(&tern__pool_stats.threads, 1, memory_order_relaxed);
    /*
     * `busy` counts workers between finding work and running dry, so a
     * worker that goes from job to job touches the shared counter twice
     * per busy spell, not twice per job.
     */
    bool busy = false;
    bool parked = false; /* back from park(), `tern__pool_waking` not yet cleared */
    for (;;) {
        /* Exclusive mode (gate.c): one relaxed load per job when open. */
        if (TERN_UNLIKELY(atomic_load_explicit(&tern__pool_holds, memory_order_relaxed) != 0)) {
            put_back_run(&w);
            span_mark(&w, fig, false); /* a held worker is not busy */
            hold(p, &busy);
        }
        /* A test may hold the worker here: the gate read open, the job not yet taken. */
        tern__stop_point(TERN__STOP_WORKER_PAST_GATE);
        bool fresh;
        struct tern__work *job = next_entry(&w, &fresh);
        if (job != NULL) {
            if (!busy) {
                busy = true;
                atomic_fetch_add_explicit(&tern__pool_stats.busy, 1, memory_order_relaxed);
            }
            woken(&parked); /* before the pass-on: a wake skips while it is set */
            span_found(&w, fig, fresh);
            /*
             * Pass the wake on: more work than this worker (the queue, or
             * the rest of its run, which an idle worker may take from it).
             */
            if (fresh && (tern__run_left(w.run) || tern__bounded_ready(p)))
                tern__bounded_wake_one(p);
            /* Odd while it runs (the watchdog's view); this worker's line alone. */
            atomic_store_explicit(&fig->seq, ++seq, memory_order_relaxed);
            unsigned ran = run_taken(p, &w, job, a.index);
#ifdef TERN_FIGURES
            FIGURE_ADD(fig->jobs, ran);
#else
            (void)ran;
#endif
            atomic_store_explicit(&fig->seq, ++seq, memory_order_relaxed);
            continue;
        }
        woken(&parked);
        span_mark(&w, fig, false); /* ran dry */
        if (atomic_load_explicit(&p->exiting, memory_order_acquire)) {
            idle(&busy);
            break;
        }
        if (!spin(&w, &busy)) {
            uint64_t idle_ns = a.overflow < 0
                                   ? 0
                                   : atomic_load_explicit(&tern__pool_watch_now.overflow_idle_ns,
                                                          memory_order_relaxed);
            bool idled = park(p, idle_ns, fig);
            parked = true;
            w.long_ticks = long_ticks(); /* a park costs more: the rate, read again */
            if (idled) {
                woken(&parked); /* a signal that raced the timeout: the retire looks at the queue */
                if (overflow_retire(p, a.overflow))
                    return NULL;
            }
        }
    }
    if (a.overflow < 0)
        TERN_ATOMIC_DECREMENT(tern__pool_stats.threads, memory_order_relaxed);
    return NULL;
}

/*
 * A starting pool's workers begin with zero figures (seq carries on: the
 * watchdog only compares it with itself). No worker runs yet.
 */
static void figures_reset(void)
{
    tern__pool_wake_at = 0;
    atomic_store_explicit(&tern__pool_shape.overflow_slots, 0, memory_order_relaxed);
    for (unsigned i = 0; i < TERN__WORKER_SLOTS; i++) {
        struct tern__worker_figures *f = &tern__pool_workers[i];
        /*
         * Nothing owed, no run: a pool's workers repay and empty them
         * before they exit, but a child of fork inherits its parent's.
         */
        if (atomic_load_explicit(&f->owed.claimed, memory_order_relaxed) != 0) {
            atomic_store_explicit(&f->owed.claimed, 0, memory_order_relaxed);
            atomic_store_explicit(&f->owed.settled, 0, memory_order_relaxed);
        }
        if (tern__run_left(&tern__pool_runs[i]))
            atomic_store_explicit(&tern__pool_runs[i].word, 0, memory_order_relaxed);
        if (atomic_load_explicit(&f->parks, memory_order_relaxed) == 0 &&
            atomic_load_explicit(&f->jobs, memory_order_relaxed) == 0 &&
            atomic_load_explicit(&f->busy_ticks, memory_order_relaxed) == 0)
            continue; /* never used: leave its pages untouched */
        atomic_store_explicit(&f->jobs, 0, memory_order_relaxed);
        atomic_store_explicit(&f->parks, 0, memory_order_relaxed);
        atomic_store_explicit(&f->wakes, 0, memory_order_relaxed);
        atomic_store_explicit(&f->busy_ticks, 0, memory_order_relaxed);
        for (unsigned b = 0; b < TERN_POOL_WAKE_BUCKETS; b++)
            atomic_store_explicit(&f->wake_hist[b], 0, memory_order_relaxed);
    }
}

/* How many workers may spin at once on `cpus` CPUs (see the top of the file). */
static unsigned max_spinners(long cpus)
{
    if (cpus < 2)
        return 1;
    return cpus / 2 > 2 ? (unsigned)(cpus / 2) : 2;
}

int tern__bounded_start(struct tern__pool *p)
{
    if (tern__ring_init(&p->queue, tern__queue_room(&p->cfg)) < 0)
        return -ENOMEM;
    p->threads = tern__calloc(p->cfg.threads, sizeof(*p->threads));
    if (p->threads == NULL) {
        tern__ring_destroy(&p->queue);
        return -ENOMEM;
    }
    figures_reset();
    p->max_spinners = max_spinners(tern__cpu_count());
    atomic_store_explicit(&tern__pool_waking, false, memory_order_relaxed);
    tern__mutex_init(&p->park_lock);
    (void)tern__cond_init(&p->park_cond); /* monotonic: overflow workers park for a time */
    (void)tern__cond_init(&p->quiet_cond);

    int rc = 0;
    for (p->nthreads = 0; p->nthreads < p->cfg.threads; p->nthreads++) {
        struct worker_arg *a = tern__malloc(sizeof(*a));
        if (a == NULL) {
            rc = -ENOMEM;
            break;
        }
        *a = (struct worker_arg){p, p->nthreads, p->nthreads, -1};
        if ((rc = tern__thread_create(&p->threads[p->nthreads], worker_main, a)) < 0) {
            free(a);
            break;
        }
    }
    if (rc < 0)
        tern__bounded_stop(p); /* a partial pool leaves nothing behind */
    return rc;
}

int tern__bounded_overflow_start(struct tern__pool *p, unsigned max)
{
    tern__mutex_lock(&p->park_lock);
    int slot = -1;
    if (p->overflow_alive < max && !atomic_load_explicit(&p->exiting, memory_order_relaxed))
        for (int i = 0; i < TERN__MAX_OVERFLOW && slot < 0; i++)
            if (!p->overflow[i].alive)
                slot = i;
    int rc = -EAGAIN;
    struct worker_arg *a = slot < 0 ? NULL : tern__malloc(sizeof(*a));
    if (a != NULL) {
        *a = (struct worker_arg){p, TERN__MAX_THREADS, TERN__MAX_THREADS + (unsigned)slot, slot};
        /* Under the lock, as long.c does: the stop finds it before it runs. */
        rc = tern__thread_create(&p->overflow[slot].thread, worker_main, a);
        if (rc == 0) {
            p->overflow[slot].alive = true;
            p->overflow_alive++;
            if ((unsigned)slot >=
                atomic_load_explicit(&tern__pool_shape.overflow_slots, memory_order_relaxed))
                atomic_store_explicit(&tern__pool_shape.overflow_slots, (unsigned)slot + 1,
                                      memory_order_relaxed);
            atomic_fetch_add_explicit(&tern__pool_stats.overflow_now, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&tern__pool_stats.overflow_started, 1, memory_order_relaxed);
        } else {
            free(a);
        }
    } else if (slot >= 0) {
        rc = -ENOMEM;
    }
    tern__mutex_unlock(&p->park_lock);
    return rc;
}

/* Join the overflow workers still alive (the pool exits: none retires now). */
static void overflow_join(struct tern__pool *p)
{
    for (int i = 0; i < TERN__MAX_OVERFLOW; i++) {
        tern__mutex_lock(&p->park_lock);
        bool alive = p->overflow[i].alive;
        tern__mutex_unlock(&p->park_lock);
        if (!alive)
            continue;
        tern__thread_join(p->overflow[i].thread, NULL);
        tern__mutex_lock(&p->park_lock);
        p->overflow[i].alive = false;
        TERN_DECREMENT(p->overflow_alive);
        TERN_ATOMIC_DECREMENT(tern__pool_stats.overflow_now, memory_order_relaxed);
        tern__mutex_unlock(&p->park_lock);
    }
}

void tern__bounded_stop(struct tern__pool *p)
{
    atomic_store_explicit(&p->exiting, true, memory_order_release);
    tern__bounded_wake_all(p);
    for (unsigned i = 0; i < p->nthreads; i++)
        tern__thread_join(p->threads[i], NULL);
    overflow_join(p);
    p->nthreads = 0;
    tern__cond_destroy(&p->park_cond);
    tern__cond_destroy(&p->quiet_cond);
    tern__mutex_destroy(&p->park_lock);
    tern__ring_destroy(&p->queue);
    free(p->threads);
    p->threads = NULL;
}
