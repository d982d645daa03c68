/*
 * The pause gate: how exclusive mode (runtime/group.c) stops the bounded
 * class between jobs.
 *
 * A holder adds one to `tern__pool_holds` and waits until no bounded
 * worker runs a job. Each worker reads the count once per job, before it
 * dequeues (bounded.c); finding it non-zero, it holds here, counted in
 * `held`, until the count falls back to zero. Long workers are not held:
 * a long job may run for a connection's lifetime, and exclusive mode
 * cannot wait for that (docs/design.md says what such jobs may touch).
 *
 * When is "no job runs" true? Under park_lock, every worker is then either
 * holding here or asleep in park() (`sleepers` is exact under that lock).
 * A sleeper that wakes — a submission, a spurious wake-up — takes
 * park_lock on its way out, so it sees the count the holder raised before
 * it took the lock, and holds before its next job. A worker that goes to
 * sleep does not announce it to us (park() is bounded.c's), so the holder
 * counts again every millisecond as well as whenever a worker arrives.
 *
 * RCU: a worker the application registered as a urcu-qsbr reader (tern
 * never does) is taken offline while it holds, so a synchronize_rcu() made
 * inside exclusive mode does not wait for it.
 *
 * Cost while the gate is open: the one relaxed load per job in bounded.c.
 * Limits: a pool shut down while a hold is taken cannot drain (its workers
 * hold); a pool started while a hold is taken has its workers hold before
 * their first job.
 */
#define _LGPL_SOURCE /* the reader's `registered` flag, as in runtime/rcu.c */
#include <errno.h>
#include <time.h>

#include <urcu-qsbr.h>

#include "pool_p.h"

_Atomic unsigned tern__pool_holds;

/*
 * Holders wait here, with the running pool's park_lock (one pool runs at a
 * time). Held workers wait on park_cond, beside the parked ones, so that
 * the pool's own wake-all (release, exit) reaches them too; a submission's
 * signal that lands on a held worker is not lost: the release wakes all.
 */
static pthread_cond_t quiet_cond = PTHREAD_COND_INITIALIZER;

#define RECOUNT_NS 1000000 /* see the top comment: parking is silent */

static bool held_by_rcu(void)
{
    return URCU_TLS(urcu_qsbr_reader).registered && urcu_qsbr_read_ongoing();
}

void tern__bounded_hold(struct tern__pool *p, bool *busy)
{
    if (*busy) {
        *busy = false; /* a held worker is not busy: the statistics say so */
        TERN_ATOMIC_DECREMENT(tern__pool_stats.busy, memory_order_relaxed);
    }
    bool online = held_by_rcu();
    if (online)
        urcu_qsbr_thread_offline();
    pthread_mutex_lock(&p->park_lock);
    p->held++;
    pthread_cond_broadcast(&quiet_cond);
    while (atomic_load_explicit(&tern__pool_holds, memory_order_relaxed) != 0 &&
           !atomic_load_explicit(&p->exiting, memory_order_relaxed))
        pthread_cond_wait(&p->park_cond, &p->park_lock);
    p->held--;
    pthread_mutex_unlock(&p->park_lock);
    if (online)
        urcu_qsbr_thread_online();
}

void tern__pool_hold(void)
{
    /*
     * seq_cst, then park_lock: a worker that has not read the count yet
     * either reads it before its next job or is counted asleep under the
     * lock, and leaves its sleep through the same lock (top comment).
     */
    atomic_fetch_add_explicit(&tern__pool_holds, 1, memory_order_seq_cst);
    struct tern__pool *p = tern__pool_current();
    if (p == NULL)
        return; /* no worker runs anything */
    pthread_mutex_lock(&p->park_lock);
    while (p->held + atomic_load_explicit(&p->sleepers, memory_order_relaxed) < p->nthreads &&
           !atomic_load_explicit(&p->exiting, memory_order_relaxed)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += RECOUNT_NS;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&quiet_cond, &p->park_lock, &ts);
    }
    pthread_mutex_unlock(&p->park_lock);
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
    pthread_t self = pthread_self();
    for (unsigned i = 0; i < p->nthreads; i++)
        if (pthread_equal(p->threads[i], self))
            return true;
    return false;
}
