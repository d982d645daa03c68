/*
 * The pause gate: how exclusive mode (runtime/group/group.c) stops the bounded
 * class between jobs. This is the holder's side; the worker's side, the
 * wait itself, is worker.c's (it sits below the pool, which starts the
 * workers, and the gate sits above it, as it asks for the running pool).
 *
 * A holder adds one to `tern__pool_holds` and waits until no bounded
 * worker runs a job. Each worker reads the count once per job, before it
 * dequeues (worker.c); finding it non-zero, it holds there, counted in
 * `held`, until the count falls back to zero. Long workers are not held:
 * a long job may run for a connection's lifetime, and exclusive mode
 * cannot wait for that (docs/design.md says what such jobs may touch).
 *
 * When is "no job runs" true? Under park_lock, every worker is then either
 * holding or asleep in park() (`sleepers` is exact under that lock).
 * A sleeper that wakes — a submission, a spurious wake-up — takes
 * park_lock on its way out, so it sees the count the holder raised before
 * it took the lock, and holds before its next job. A worker that goes to
 * sleep does not announce it to us (park() is worker.c's), so the holder
 * counts again every millisecond as well as whenever a worker arrives.
 * Every other worker is counted as running: one that read the count just
 * before our add and has not yet taken its job (or is spinning, or runs
 * a job, or a chain of waiting lookups, lookup.c) is waited for, and it
 * runs what it took to the end before it holds. So the hold returns only
 * after every job taken before it has finished, and none starts after.
 *
 * The pool that is starting. Finding no pool is not enough to return: a
 * start may have created its workers (one may have read the count open
 * already) without having published the pool yet. The holder therefore
 * asks for the pool under start_lock (tern__pool_current_settled): either
 * the start is over and its workers are counted here, or it begins after
 * our add and its workers, created after it, read the hold first.
 *
 * Cost while the gate is open: the one relaxed load per job in worker.c.
 * Each hold takes start_lock once. Limits: a pool shut down while a hold
 * is taken cannot drain (its workers hold); a pool started while a hold is
 * taken has its workers hold before their first job.
 */
#include <time.h>

#include "platform.h"
#include "pool.h"
#include "pool_p.h"
#include "worker.h"

#define RECOUNT_NS 1000000 /* see the top comment: parking is silent */

void tern__pool_hold(void)
{
    /*
     * seq_cst, then park_lock: a worker that has not read the count yet
     * either reads it before its next job or is counted asleep under the
     * lock, and leaves its sleep through the same lock (top comment).
     */
    atomic_fetch_add_explicit(&tern__pool_holds, 1, memory_order_seq_cst);
    /*
     * Settled, not merely current: a pool being started has workers that
     * may have read the count before our add and be about to take a job,
     * and the plain load would find no pool and wait for none of them.
     * Through start_lock, either that start has finished (we count its
     * workers below) or it begins after our add (its workers are created
     * after it, so they read the hold before their first job).
     */
    struct tern__pool *p = tern__pool_current_settled();
    if (p == NULL)
        return; /* no worker runs anything, and any started from now on holds */
    tern__mutex_lock(&p->park_lock);
    /* Overflow workers are bounded workers too, counted under the same lock. */
    while (p->held + atomic_load_explicit(&p->sleepers, memory_order_relaxed) <
               p->nthreads + p->overflow_alive &&
           !atomic_load_explicit(&p->exiting, memory_order_relaxed)) {
        tern__deadline_t until = tern__cond_deadline(RECOUNT_NS);
        (void)tern__cond_timedwait(&p->quiet_cond, &p->park_lock, &until);
    }
    tern__mutex_unlock(&p->park_lock);
}

void tern__pool_unhold(void)
{
    unsigned before = atomic_fetch_sub_explicit(&tern__pool_holds, 1, memory_order_seq_cst);
    TERN_INSIST(before > 0);
    if (before != 1)
        return; /* another holder still holds */
    struct tern__pool *p = tern__pool_current();
    if (p == NULL)
        return;
    tern__bounded_wake_all(p);
}

bool tern__pool_on_bounded_worker(void)
{
    struct tern__pool *p = tern__pool_current();
    if (p == NULL)
        return false;
    /* A scan, not a thread-local: it runs once per pause, never per job. */
    tern__thread_t self = tern__thread_self();
    for (unsigned i = 0; i < p->nthreads; i++)
        if (tern__thread_equal(p->threads[i], self))
            return true;
    tern__mutex_lock(&p->park_lock);
    bool found = false;
    for (unsigned i = 0; i < TERN__MAX_OVERFLOW && !found; i++)
        found = p->overflow[i].alive && tern__thread_equal(p->overflow[i].thread, self);
    tern__mutex_unlock(&p->park_lock);
    return found;
}
