/*
 * The bounded class: a fixed set of workers and a bounded queue.
 *
 * The queue is backends/ring.h's ring, with consumers competing by CAS on the
 * head (a queue_capacity of 2^31 costs what is used). Admission is a
 * separate counter checked before the job is enqueued, so a full queue
 * refuses before the work exists anywhere, and the ring — sized to the
 * next power of two — is never full (ring.h's full-slot rule: a slot's
 * count is given back only after its cell was freed).
 *
 * Parking. A worker that finds nothing spins briefly (a job that arrives
 * during the spin is cheaper to catch than to be woken for: a cross-core
 * wake measured about 20 µs; docs/performance.md has the figures),
 * then parks on a condition variable after announcing itself in
 * `sleepers`. A submitter signals only when someone sleeps and no wake is
 * already on its way (`waking`); the woken worker clears `waking` and, if
 * it leaves work behind, wakes the next. A burst of submissions thus costs
 * one signal, not one per job.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <urcu/arch.h>

#include "pool_p.h"

/*
 * Before parking, a worker spins for a job within its adaptive budget
 * (backends/spin.h), but only if fewer than half the CPUs already have a
 * spinner: on a small machine the loop that feeds the pool shares the
 * cores, and every extra spinner takes its time. It checks the clock every
 * CLOCK_EVERY rounds and yields every YIELD_EVERY, so a feeder that shares
 * its core still runs.
 */
#define CLOCK_EVERY 16
#define YIELD_EVERY 256

struct worker_arg {
    struct tern__pool *pool;
    unsigned index;
};

struct worker {
    struct tern__pool *pool;
    struct tern__spin spin;
    /*
     * The last completion had to wake its loop with a syscall: that loop
     * was asleep, and its next submission is at least a wake away. Park
     * without spinning.
     */
    bool loop_slept;
};

/*
 * What leaving the queue does to the slot count: a job gives its slot
 * back, but a request of several steps keeps it as a reservation for its
 * next step (added with wrap-around, so one add does both halves).
 */
static void leave_queue(const struct tern__work *job)
{
    uint64_t delta = job->kind == TERN__WORK_STEPS ? TERN__SLOT_RESERVED - TERN__SLOT_QUEUED
                                                  : (uint64_t)0 - TERN__SLOT_QUEUED;
    uint64_t before = atomic_fetch_add_explicit(&tern__pool_stats.queued, delta,
                                                memory_order_relaxed);
    /* A checked counter (check.h): the queued half must not borrow. */
    if (TERN_UNLIKELY(tern__slots_queued(before) == 0))
        tern__check_failed(__FILE__, __LINE__, __func__, "COUNTER", "queued went below zero");
}

static struct tern__work *dequeue(struct tern__pool *p)
{
    struct tern__work *job = tern__ring_pop(&p->queue);
    if (job != NULL)
        leave_queue(job); /* after the cell is freed: ring.h's full-slot rule */
    return job;
}

/*
 * Whether a dequeue would find a job now. This reads the ring, not the
 * admission counter: lookups waiting for their cap still count as queued
 * there, and must not keep idle workers spinning.
 */
static bool queue_nonempty(struct tern__pool *p)
{
    return tern__ring_ready(&p->queue);
}

static void wake_one(struct tern__pool *p)
{
    /* Pairs with the seq_cst increment of `sleepers` in park(). */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&p->sleepers, memory_order_relaxed) == 0)
        return;
    /* A spinning worker will take the job, and wake the next if need be. */
    if (atomic_load_explicit(&p->spinners, memory_order_relaxed) > 0)
        return;
    if (atomic_exchange_explicit(&tern__pool_waking, true, memory_order_relaxed))
        return; /* a wake is on its way; that worker passes it on */
    /*
     * Under the lock, `sleepers` counts exactly the workers inside
     * pthread_cond_wait, so a signal sent here reaches one of them and that
     * worker clears `waking`. If they all left meanwhile, clear it here:
     * left set with nobody to clear it, no submission would wake again.
     */
    pthread_mutex_lock(&p->park_lock);
    if (atomic_load_explicit(&p->sleepers, memory_order_relaxed) > 0)
        pthread_cond_signal(&p->park_cond);
    else
        atomic_store_explicit(&tern__pool_waking, false, memory_order_relaxed);
    pthread_mutex_unlock(&p->park_lock);
}

void tern__bounded_wake_all(struct tern__pool *p)
{
    pthread_mutex_lock(&p->park_lock);
    pthread_cond_broadcast(&p->park_cond);
    pthread_mutex_unlock(&p->park_lock);
}

static void park(struct tern__pool *p)
{
    pthread_mutex_lock(&p->park_lock);
    atomic_fetch_add_explicit(&p->sleepers, 1, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
    if (!queue_nonempty(p) && !atomic_load_explicit(&p->exiting, memory_order_relaxed))
        pthread_cond_wait(&p->park_cond, &p->park_lock);
    atomic_fetch_sub_explicit(&p->sleepers, 1, memory_order_relaxed);
    pthread_mutex_unlock(&p->park_lock);
    /* `tern__pool_waking` is cleared by the caller, once it counts as busy. */
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
        found = queue_nonempty(p) || atomic_load_explicit(&p->exiting, memory_order_relaxed);
        if (found)
            break;
        /*
         * Yield now and then: if the thread that will feed us shares our
         * core (a busy or small machine, or valgrind, which runs one
         * thread at a time), a pure spin would only delay it.
         */
        if (i % YIELD_EVERY == 0)
            sched_yield();
        else
            caa_cpu_relax();
        if (i % CLOCK_EVERY == 0 && tern__clock_now() >= deadline)
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

static void *worker_main(void *argp)
{
    tern__thread_name("tern-pool");
    struct worker_arg a = *(struct worker_arg *)argp;
    free(argp);
    struct tern__pool *p = a.pool;
    struct worker w = {.pool = p};
    tern__spin_init(&w.spin);
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
        if (TERN_UNLIKELY(atomic_load_explicit(&tern__pool_holds, memory_order_relaxed) != 0))
            tern__bounded_hold(p, &busy);
        struct tern__work *job = dequeue(p);
        if (job != NULL) {
            if (!busy) {
                busy = true;
                atomic_fetch_add_explicit(&tern__pool_stats.busy, 1, memory_order_relaxed);
            }
            woken(&parked); /* before the pass-on: wake_one skips while it is set */
            if (queue_nonempty(p))
                wake_one(p); /* pass the wake on: more work than this worker */
            if (job->kind == TERN__WORK_LOOKUP) {
                tern__lookup_run(p, job, a.index); /* claims it under the cap */
                continue;
            }
            if (job->kind == TERN__WORK_STEPS) {
                /* One step, then requeued or done. */
                w.loop_slept = tern__steps_run(p, job, a.index);
                continue;
            }
            if (!tern__work_claim(job))
                continue;
            w.loop_slept = tern__work_run(job, a.index);
            continue;
        }
        woken(&parked);
        if (atomic_load_explicit(&p->exiting, memory_order_acquire)) {
            idle(&busy);
            break;
        }
        if (!spin(&w, &busy)) {
            park(p);
            parked = true;
        }
    }
    TERN_ATOMIC_DECREMENT(tern__pool_stats.threads, memory_order_relaxed);
    return NULL;
}

/*
 * Take one slot of kind `unit` (a queued job or a reservation) if queued +
 * reserved stays within capacity. A compare-and-swap rather than an add
 * and an undo: a refused submission must never make the count, even for an
 * instant, exceed what a reader may observe (SPEC §13).
 */
static bool take_slot(struct tern__pool *p, uint64_t unit, uint64_t *after)
{
    uint64_t cap = p->cfg.queue_capacity;
    uint64_t s = atomic_load_explicit(&tern__pool_stats.queued, memory_order_relaxed);
    do {
        if ((uint64_t)tern__slots_queued(s) + tern__slots_reserved(s) >= cap)
            return false; /* counted by the client (runtime/job.c, refuse) */
    } while (!atomic_compare_exchange_weak_explicit(&tern__pool_stats.queued, &s, s + unit,
                                                    memory_order_relaxed, memory_order_relaxed));
    *after = s + unit;
    return true;
}

static void note_peak(uint64_t slots)
{
    unsigned q = tern__slots_queued(slots);
    if (q > atomic_load_explicit(&tern__pool_stats.queued_peak, memory_order_relaxed))
        atomic_store_explicit(&tern__pool_stats.queued_peak, q, memory_order_relaxed);
}

/* Put an admitted job into the ring and wake a worker if one sleeps. */
static void enqueue(struct tern__pool *p, struct tern__work *job)
{
    tern__ring_push(&p->queue, job); /* admitted: never full (ring.h) */
    wake_one(p);
}

int tern__bounded_submit(struct tern__pool *p, struct tern__work *job, bool wake)
{
    uint64_t after;
    if (!take_slot(p, TERN__SLOT_QUEUED, &after))
        return -EAGAIN;
    note_peak(after);
    if (wake)
        enqueue(p, job);
    else
        tern__ring_push(&p->queue, job); /* the caller kicks later (pool.h) */
    return 0;
}

void tern__bounded_kick(struct tern__pool *p)
{
    if (queue_nonempty(p))
        wake_one(p);
}

void tern__bounded_submit_reserved(struct tern__pool *p, struct tern__work *job)
{
    /* The reservation becomes the queued slot in one add: never refused. */
    uint64_t before = atomic_fetch_add_explicit(&tern__pool_stats.queued,
                                                TERN__SLOT_QUEUED - TERN__SLOT_RESERVED,
                                                memory_order_relaxed);
    TERN_INSIST(tern__slots_reserved(before) > 0);
    note_peak(before + TERN__SLOT_QUEUED - TERN__SLOT_RESERVED);
    enqueue(p, job);
}

void tern__bounded_unreserve(void)
{
    uint64_t before = atomic_fetch_sub_explicit(&tern__pool_stats.queued, TERN__SLOT_RESERVED,
                                                memory_order_relaxed);
    TERN_INSIST(tern__slots_reserved(before) > 0);
}

void tern__bounded_drain(struct tern__pool *p, void (*fn)(struct tern__work *job))
{
    struct tern__work *job;
    while ((job = dequeue(p)) != NULL) {
        if (job->kind == TERN__WORK_STEPS)
            tern__bounded_unreserve(); /* no step of it will run again */
        fn(job);
    }
}

int tern__bounded_start(struct tern__pool *p)
{
    if (tern__ring_init(&p->queue, p->cfg.queue_capacity) < 0)
        return -ENOMEM;
    p->threads = tern__calloc(p->cfg.threads, sizeof(*p->threads));
    if (p->threads == NULL) {
        tern__ring_destroy(&p->queue);
        return -ENOMEM;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    p->max_spinners = cpus >= 4 ? (unsigned)cpus / 2 : 1;
    atomic_store_explicit(&tern__pool_waking, false, memory_order_relaxed);
    pthread_mutex_init(&p->park_lock, NULL);
    pthread_cond_init(&p->park_cond, NULL);

    int rc = 0;
    for (p->nthreads = 0; p->nthreads < p->cfg.threads; p->nthreads++) {
        struct worker_arg *a = tern__malloc(sizeof(*a));
        if (a == NULL) {
            rc = -ENOMEM;
            break;
        }
        *a = (struct worker_arg){p, p->nthreads};
        if ((rc = tern__thread_create(&p->threads[p->nthreads], worker_main, a)) < 0) {
            free(a);
            break;
        }
    }
    if (rc < 0)
        tern__bounded_stop(p); /* a partial pool leaves nothing behind */
    return rc;
}

void tern__bounded_stop(struct tern__pool *p)
{
    atomic_store_explicit(&p->exiting, true, memory_order_release);
    tern__bounded_wake_all(p);
    for (unsigned i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    p->nthreads = 0;
    pthread_cond_destroy(&p->park_cond);
    pthread_mutex_destroy(&p->park_lock);
    tern__ring_destroy(&p->queue);
    free(p->threads);
    p->threads = NULL;
}
