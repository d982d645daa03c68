/*
 * The process-wide pool: configuration, lazy start, shutdown, statistics,
 * fork. One pool serves every loop; it is started by the first submission
 * (or tern_pool_start) and its configuration is fixed by whoever starts it.
 *
 * Lock order: start_lock, then the class locks (park_lock, long_lock,
 * lookup_lock), never the reverse. Submissions do not take start_lock once
 * the pool runs: they read `current` with an acquire load. start_lock is
 * only ever held for a start or a pointer swap, never across a wait, so
 * fork() (whose prepare handler takes it) and loop creation never queue
 * behind a shutdown that waits for jobs.
 *
 * Shutdown racing submissions from other loops is defined: a submitter
 * counts itself in tern__pool_inflight before it looks at the pool, and
 * shutdown sets `closing` and then waits for that count to reach zero.
 * Either shutdown sees the submitter (and waits for it and its job), or
 * the submitter sees `closing` (and gets -ESHUTDOWN); after shutdown
 * returns, a submission starts a fresh pool. Nobody ever holds a pointer
 * to a freed pool.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "fault.h"
#include "long.h"
#include "lookup.h"
#include "os_thread.h"
#include "platform.h"
#include "pool.h"
#include "pool_p.h"
#include "stops.h"
#include "watchdog.h"
#include "worker.h"
#include "sized.h"

_Atomic size_t tern__pool_record_bytes;

/* Shutdown waits by polling, every 200 µs: it is not a hot path. */
#define SHUTDOWN_POLL_NS 200000

static tern__mutex_t start_lock = TERN__MUTEX_INIT;
static struct tern__pool *_Atomic current;
static _Atomic unsigned hist_workers; /* bounded histograms in use */
static uint64_t generation;           /* pool starts, ever; under start_lock */
static _Atomic bool ever_started;     /* the statistics have been written */
/*
 * A shutdown is under way. A word, not a mutex: a forked child must be
 * able to reset it (the thread that held it does not exist there), and a
 * second shutdown waits for the first one with a bounded poll anyway.
 */
_Atomic bool tern__pool_closing;

static bool same_config(const tern_pool_config *a, const tern_pool_config *b)
{
    return a->threads == b->threads && a->queue_capacity == b->queue_capacity &&
           a->long_threads_max == b->long_threads_max &&
           a->long_idle_timeout_ns == b->long_idle_timeout_ns;
}

/* Whether cfg differs from the running pool's (false when none runs). */
bool tern__pool_config_conflicts(const tern_pool_config *cfg)
{
    tern__mutex_lock(&start_lock);
    struct tern__pool *p = atomic_load_explicit(&current, memory_order_relaxed);
    bool conflict = p != NULL && !same_config(&p->cfg, cfg);
    tern__mutex_unlock(&start_lock);
    return conflict;
}

static void reset_stats(void)
{
    memset(&tern__pool_stats, 0, sizeof(tern__pool_stats));
    memset(tern__pool_wait_hist, 0, sizeof(tern__pool_wait_hist));
    memset(tern__pool_run_hist, 0, sizeof(tern__pool_run_hist));
}

/*
 * Publish a started pool's shape (bounded.h), or its end (p NULL). The
 * fixed bytes: the pool record, the bounded queue's cells, the worker
 * table and the lookups' waiting array, all allocated at start.
 */
static void shape_set(const struct tern__pool *p)
{
    uint64_t fixed = 0;
    if (p != NULL)
        fixed = sizeof(*p) + (p->queue.mask + 1) * sizeof(struct tern__ring_slot) +
                p->cfg.threads * sizeof(*p->threads) +
                p->lookups_cap_alloc * sizeof(*p->lookups_waiting);
    atomic_store_explicit(&tern__pool_shape.fixed_bytes, fixed, memory_order_relaxed);
    atomic_store_explicit(&tern__pool_shape.threads, p == NULL ? 0 : p->cfg.threads,
                          memory_order_relaxed);
}

/* Called with start_lock held. */
static int start_locked(const tern_pool_config *cfg, struct tern__pool **poolp)
{
    int rc = tern__pool_env_check();
    if (rc < 0)
        return rc;
    struct tern__pool *p = tern__calloc_aligned(alignof(struct tern__pool), sizeof(*p));
    if (p == NULL)
        return -ENOMEM;
    p->cfg = *cfg;
    p->gen = ++generation;
    atomic_store_explicit(&ever_started, true, memory_order_relaxed);
    if ((rc = tern__lookup_init(p)) < 0) {
        tern__free_aligned(p);
        return rc;
    }
    tern__long_init(p);
    if (cfg->threads > atomic_load_explicit(&hist_workers, memory_order_relaxed))
        atomic_store_explicit(&hist_workers, cfg->threads, memory_order_relaxed);
    if ((rc = tern__bounded_start(p)) < 0) {
        tern__long_destroy(p);
        tern__lookup_destroy(p);
        tern__free_aligned(p);
        return rc;
    }
    if ((rc = tern__watch_start(p)) < 0) {
        tern__bounded_stop(p);
        tern__long_destroy(p);
        tern__lookup_destroy(p);
        tern__free_aligned(p);
        return rc;
    }
    shape_set(p);
    tern__stop_point(TERN__STOP_START_UNPUBLISHED); /* a test holds the start here */
    /* Pairs with the acquire load in pool_get(). */
    atomic_store_explicit(&current, p, memory_order_release);
    *poolp = p;
    return 0;
}

struct tern__pool *tern__pool_current(void)
{
    /* Pairs with the release store in start_locked(). */
    return atomic_load_explicit(&current, memory_order_acquire);
}

struct tern__pool *tern__pool_current_settled(void)
{
    /* Rare (once per exclusive-mode hold): start_lock is never held across a wait. */
    tern__mutex_lock(&start_lock);
    struct tern__pool *p = atomic_load_explicit(&current, memory_order_relaxed);
    tern__mutex_unlock(&start_lock);
    return p;
}

static int pool_get(const tern_pool_config *cfg, struct tern__pool **poolp)
{
    struct tern__pool *p = atomic_load_explicit(&current, memory_order_acquire);
    if (TERN_LIKELY(p != NULL)) {
        if (cfg != NULL && !same_config(&p->cfg, cfg))
            return -EINVAL;
        *poolp = p;
        return 0;
    }
    tern_pool_config defaults;
    if (cfg == NULL) {
        tern_pool_config_init(&defaults);
        cfg = &defaults;
    }
    tern__mutex_lock(&start_lock);
    int rc = 0;
    p = atomic_load_explicit(&current, memory_order_relaxed);
    if (p == NULL)
        rc = start_locked(cfg, &p);
    else if (!same_config(&p->cfg, cfg))
        rc = -EINVAL;
    tern__mutex_unlock(&start_lock);
    if (rc == 0)
        *poolp = p;
    return rc;
}

/*
 * The pool to admit into, once the caller has counted itself in: NULL
 * with *cause and *rc set when it is closing or cannot start.
 */
static struct tern__pool *accepting(const tern_pool_config *cfg, uint64_t *checked, int *rc,
                                    tern_refusal *cause)
{
    *rc = -EAGAIN;
    *cause = TERN_REFUSED_SHUTDOWN; /* transient: after shutdown a fresh pool starts */
    if (TERN_UNLIKELY(atomic_load_explicit(&tern__pool_closing, memory_order_seq_cst)))
        return NULL;
    struct tern__pool *p = tern__pool_current();
    if (TERN_UNLIKELY(p == NULL || p->gen != *checked)) {
        if ((*rc = pool_get(cfg, &p)) < 0) {
            /* -EAGAIN here is pthread_create's: the pool could not start. */
            *cause = TERN_REFUSED_THREADS;
            return NULL;
        }
        *checked = p->gen;
    }
    return p;
}

/*
 * A bounded accept into a lane spends the lane's credit (pool.h): units
 * counted in and slots taken ahead for the rest of its run, so a loop
 * resubmitting from its callbacks makes one locked step on each shared
 * word per run, not per job. The held jobs' units cover the lane's push;
 * the credit left at the push is given back with it.
 */
static int lane_accept(const tern_pool_config *cfg, uint64_t *checked, struct tern__work *job,
                       struct tern__lane *lane, tern_refusal *cause)
{
    /* Most of a turn's submissions are taken inline by the submitter (pool.h). */
    if (tern__lane_accept_held(lane, job))
        return 0;
    if (lane->credit > 0) { /* held, but a shutdown has begun */
        *cause = TERN_REFUSED_SHUTDOWN;
        return -EAGAIN;
    }
    unsigned fresh = tern__lane_credit_wanted(lane);
    if (fresh > 0)
        tern__pool_enter(fresh); /* count in first (pairs with `closing`) */
    int rc;
    struct tern__pool *p = accepting(cfg, checked, &rc, cause);
    if (p != NULL) {
        *cause = TERN_REFUSED_QUEUE_FULL;
        if ((rc = tern__bounded_submit_lane(p, job, lane, fresh)) == 0)
            return 0;
    }
    if (fresh > 0)
        tern__pool_leave_n(fresh);
    return rc;
}

int tern__pool_accept(const tern_pool_config *cfg, uint64_t *checked, struct tern__work *job,
                      struct tern__lane *lane, tern_refusal *cause)
{
    bool bounded = job->occupancy == TERN_BOUNDED;
    if (bounded && lane != NULL)
        return lane_accept(cfg, checked, job, lane, cause);
    /*
     * Count in first (pairs with the seq_cst store of `closing` in
     * shutdown): once for the job, and once for this call, which may still
     * touch the pool (a wake, a long thread) after the job has run and
     * counted itself out. The call's unit is given back as it leaves.
     */
    tern__pool_enter(2);
    int rc;
    struct tern__pool *p = accepting(cfg, checked, &rc, cause);
    if (p != NULL) {
        *cause = bounded ? TERN_REFUSED_QUEUE_FULL : TERN_REFUSED_LONG_CEILING;
        rc = bounded ? tern__bounded_submit(p, job) : tern__long_submit(p, job, cause);
        if (rc == 0) {
            atomic_fetch_add_explicit(&tern__pool_stats.submitted, 1, memory_order_relaxed);
            tern__pool_leave(); /* this call's unit; the job keeps its own */
            return 0;
        }
    }
    tern__pool_leave_n(2);
    return rc;
}

int tern__pool_accept_batch(const tern_pool_config *cfg, uint64_t *checked,
                            struct tern__work *const *jobs, unsigned n, struct tern__lane *lane,
                            tern_refusal *cause)
{
    TERN_REQUIRE(n > 0);
    /* Count in first, as an accept: n units for the jobs, one for the call's wake. */
    unsigned call_unit = lane == NULL;
    tern__pool_enter(n + call_unit);
    int rc;
    struct tern__pool *p = accepting(cfg, checked, &rc, cause);
    if (p != NULL) {
        *cause = TERN_REFUSED_QUEUE_FULL;
        if ((rc = tern__bounded_submit_batch(p, jobs, n, lane)) == 0) {
            atomic_fetch_add_explicit(&tern__pool_stats.submitted, n, memory_order_relaxed);
            if (call_unit)
                tern__pool_leave();
            return 0;
        }
    }
    /* Nothing was queued: every unit counted in goes out again. */
    tern__pool_leave_n(n + call_unit);
    return rc;
}

void tern__pool_kick(struct tern__lane *lane)
{
    /* The held jobs' own units cover their push (it ends before any shutdown can). */
    tern__lane_flush(lane);
    /* The same count-in as an accept: shutdown either waits for us or we see it. */
    tern__pool_enter(1);
    if (!atomic_load_explicit(&tern__pool_closing, memory_order_seq_cst)) {
        struct tern__pool *p = tern__pool_current();
        if (p != NULL)
            tern__bounded_kick(p);
    }
    tern__pool_leave();
}

int tern_pool_start(const tern_pool_config *cfg)
{
    tern_pool_config defaults;
    if (cfg == NULL) {
        tern_pool_config_init(&defaults);
        cfg = &defaults;
    }
    int rc = tern__pool_config_check(cfg);
    if (rc < 0)
        return rc;
    struct tern__pool *p;
    return pool_get(cfg, &p);
}

bool tern__pool_active(void)
{
    /*
     * A snapshot of three gauges: workers between taking a job and running
     * dry, workers spinning for one, and a worker signalled and waking up.
     * Any may be a moment old; the caller only uses it to decide whether
     * a short spin can pay.
     */
    return atomic_load_explicit(&tern__pool_stats.busy, memory_order_relaxed) != 0 ||
           atomic_load_explicit(&tern__pool_stats.spinning, memory_order_relaxed) != 0 ||
           atomic_load_explicit(&tern__pool_waking, memory_order_relaxed);
}

bool tern__pool_running(void)
{
    return atomic_load_explicit(&current, memory_order_acquire) != NULL;
}

/* ------------------------------------------------------------------ */
/* Shutdown                                                            */
/* ------------------------------------------------------------------ */

/* A queued job that will not run: complete it as cancelled, and settle its slot. */
static void cancel_queued(struct tern__work *job)
{
    uint8_t expected = TERN__WORK_QUEUED;
    /* Both before the swap: a cancel that sees FINISHED then sees them. */
    atomic_store_explicit(&job->unrun, true, memory_order_relaxed);
    atomic_store_explicit(&job->cancel, true, memory_order_relaxed);
    if (!atomic_compare_exchange_strong_explicit(&job->state, &expected, TERN__WORK_FINISHED,
                                                 memory_order_acq_rel, memory_order_acquire)) {
        /* A tombstone: drop it (and count it out of the tombstones and the pool). */
        bool claimed = tern__queue_claim(job);
        TERN_INSIST(!claimed);
        return;
    }
    tern__slots_unqueue(); /* a queued job (of several steps or not) gives its slot back */
    job->result = NULL;
    (void)tern__work_complete(job);
}

/* Wait (without a lock) until no job is in flight; false at the deadline. */
static bool wait_idle(struct tern__pool *p, bool cancel, uint64_t timeout_ns)
{
    uint64_t deadline = tern__clock_now() + timeout_ns;
    if (deadline < timeout_ns)
        deadline = UINT64_MAX;
    while (tern__pool_in_flight() != 0) {
        /* Repeated each poll: a submitter counted in before `closing` may enqueue late. */
        if (cancel) {
            tern__bounded_drain(p, cancel_queued);
            tern__lookup_drain(p, cancel_queued);
        }
        /* A submitter's deferred wake may have met `closing` (tern__pool_kick). */
        tern__bounded_kick(p);
        if (tern__clock_now() >= deadline)
            return false;
        tern__sleep_ns(SHUTDOWN_POLL_NS);
    }
    return true;
}

int tern_pool_shutdown(int mode, uint64_t timeout_ns)
{
    if (mode != TERN_POOL_DRAIN && mode != TERN_POOL_CANCEL)
        return -EINVAL;
    /*
     * A loop's callback may shut the pool down with jobs still in its
     * lane: they are accepted and counted in, and only this thread would
     * ever push them. Before the wait for `closing`, which another
     * shutdown holds while it waits for those very units.
     */
    tern__lanes_flush_open();
    /* One shutdown at a time; a second waits for the first (bounded polls). */
    bool expected = false;
    while (!atomic_compare_exchange_weak_explicit(&tern__pool_closing, &expected, true,
                                                  memory_order_seq_cst, memory_order_relaxed)) {
        expected = false;
        tern__sleep_ns(SHUTDOWN_POLL_NS);
    }
    struct tern__pool *p = tern__pool_current();
    if (p == NULL) {
        atomic_store_explicit(&tern__pool_closing, false, memory_order_seq_cst);
        return 0;
    }
    bool cancel = mode == TERN_POOL_CANCEL;
    if (cancel) {
        /* Queued jobs first, so none is taken by a worker freed by the flag. */
        tern__bounded_drain(p, cancel_queued);
        tern__lookup_drain(p, cancel_queued);
        atomic_fetch_add_explicit(&tern__pool_cancel_windows, 1, memory_order_seq_cst);
    }
    atomic_store_explicit(&tern__pool_cancel_all, cancel, memory_order_seq_cst);
    if (!wait_idle(p, cancel, timeout_ns)) {
        /* Running jobs keep their threads and the pool goes on as it was. */
        atomic_store_explicit(&tern__pool_cancel_all, false, memory_order_relaxed);
        atomic_store_explicit(&tern__pool_closing, false, memory_order_seq_cst);
        return -ETIMEDOUT;
    }
    tern__mutex_lock(&start_lock);
    atomic_store_explicit(&current, NULL, memory_order_release);
    shape_set(NULL);
    tern__mutex_unlock(&start_lock);
    tern__watch_stop(p); /* first: it starts overflow workers, which the bounded stop joins */
    tern__bounded_stop(p);
    tern__long_stop(p);
    tern__long_destroy(p);
    tern__lookup_destroy(p);
    tern__free_aligned(p);
    atomic_store_explicit(&tern__pool_cancel_all, false, memory_order_relaxed);
    atomic_store_explicit(&tern__pool_closing, false, memory_order_seq_cst);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Statistics                                                          */
/* ------------------------------------------------------------------ */

/* Every cause has its counter slot (the list's values are 1..N, in order). */
#define SLOT_FITS(name, short_name, value) \
    _Static_assert(value > 0 && value < TERN__REFUSAL_SLOTS, #name " has a counter slot");
TERN_REFUSAL_MAP(SLOT_FITS)
#undef SLOT_FITS

/*
 * The bytes the pool holds (tern_pool_stats.memory_bytes): what it
 * allocated at start (shape_set), the long class's worker records, and
 * the record of every job in flight. Thread stacks and the static
 * statistics are not counted (docs/pool.md, "Memory figures").
 */
static uint64_t memory_bytes(unsigned long_threads)
{
    uint64_t fixed = atomic_load_explicit(&tern__pool_shape.fixed_bytes, memory_order_relaxed);
    size_t record = atomic_load_explicit(&tern__pool_record_bytes, memory_order_relaxed);
    if (record == 0)
        record = sizeof(struct tern__work);
    return fixed + (uint64_t)long_threads * sizeof(struct tern__long_worker) +
           tern__pool_in_flight() * record;
}

void tern_pool_stats_read(tern_pool_stats *out, size_t size)
{
    TERN_REQUIRE(out != NULL && size > 0);
    tern__outcomes_settle(); /* a done reading them counts itself and those before it */
    struct tern__pool_counters *c = &tern__pool_stats;
#define LOAD(x) atomic_load_explicit(&c->x, memory_order_relaxed)
    uint64_t slots; /* queued and reserved at one instant */
    unsigned queued = (unsigned)tern__bounded_queued(&slots);
    tern_pool_stats full = {
        .threads = LOAD(threads),
        .busy = LOAD(busy),
        .queued = queued,
        .queued_peak = LOAD(queued_peak),
        .reserved = tern__slots_reserved(slots),
        .long_threads = LOAD(long_threads),
        .long_busy = LOAD(long_busy),
        .submitted = LOAD(submitted),
        .completed = LOAD(completed),
        .cancelled = LOAD(cancelled),
        .timed_out = LOAD(timed_out),
        .stalls = LOAD(stalls),
        .overflow_started = LOAD(overflow_started),
        .overflow_retired = LOAD(overflow_retired),
        .overflow_now = LOAD(overflow_now),
        .tombstones = (unsigned)LOAD(tombstones),
        .memory_bytes = memory_bytes(LOAD(long_threads)),
    };
#define COPY_REFUSED(name, short_name, value) full.refused_##short_name = LOAD(refused[value]);
    TERN_REFUSAL_MAP(COPY_REFUSED)
#undef COPY_REFUSED
#undef LOAD
    /* Only the histograms of workers that ever ran, plus the long class's. */
    unsigned n = atomic_load_explicit(&hist_workers, memory_order_relaxed);
    struct tern__hist *w[TERN__MAX_THREADS + 1], *r[TERN__MAX_THREADS + 1];
    for (unsigned i = 0; i < n; i++) {
        w[i] = &tern__pool_wait_hist[i];
        r[i] = &tern__pool_run_hist[i];
    }
    w[n] = &tern__pool_wait_hist[TERN__MAX_THREADS];
    r[n] = &tern__pool_run_hist[TERN__MAX_THREADS];
    /* The histograms hold ticks (see backends/clock.c). */
    double per_ns = tern__ticks_per_ns();
    full.wait_p50_ns = (uint64_t)((double)tern__hist_percentile(w, n + 1, 0.50) / per_ns);
    full.wait_p99_ns = (uint64_t)((double)tern__hist_percentile(w, n + 1, 0.99) / per_ns);
    full.run_p50_ns = (uint64_t)((double)tern__hist_percentile(r, n + 1, 0.50) / per_ns);
    full.run_p99_ns = (uint64_t)((double)tern__hist_percentile(r, n + 1, 0.99) / per_ns);
    tern__copy_sized(out, size, &full, sizeof full);
}

/* ------------------------------------------------------------------ */
/* fork()                                                              */
/* ------------------------------------------------------------------ */

/*
 * The child has none of the parent's threads, so the parent's pool is
 * unusable there: forget it (its memory is the parent's, left as it was)
 * and let the first submission start a fresh one. Loops created before the
 * fork must not be used in the child. start_lock was taken by the prepare
 * handler on this very thread, so the child unlocks it (re-initialising a
 * locked mutex would be undefined). The statistics are reset only if a
 * pool ever wrote them: a fork+exec of a program that never used the pool
 * should not fault in megabytes of histograms.
 */
static void after_fork_child(void)
{
    atomic_store_explicit(&current, NULL, memory_order_relaxed);
    atomic_store_explicit(&tern__pool_closing, false, memory_order_relaxed);
    atomic_store_explicit(&tern__pool_inflight.entered, 0, memory_order_relaxed);
    atomic_store_explicit(&tern__pool_inflight.left, 0, memory_order_relaxed);
    atomic_store_explicit(&tern__pool_waking, false, memory_order_relaxed);
    atomic_store_explicit(&tern__pool_cancel_all, false, memory_order_relaxed);
    tern__lanes_forget_open();
    shape_set(NULL);
    if (atomic_load_explicit(&ever_started, memory_order_relaxed)) {
        reset_stats();
        atomic_store_explicit(&hist_workers, 0, memory_order_relaxed);
        atomic_store_explicit(&ever_started, false, memory_order_relaxed);
    }
    tern__mutex_unlock(&start_lock);
}

static void before_fork(void)
{
    tern__mutex_lock(&start_lock);
}

static void after_fork_parent(void)
{
    tern__mutex_unlock(&start_lock);
}

__attribute__((constructor)) static void install_fork_handlers(void)
{
    tern__atfork(before_fork, after_fork_parent, after_fork_child);
}
