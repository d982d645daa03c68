/*
 * Helpers shared by the pool tests (criterion) and the pool stress test
 * (standalone). Nothing here depends on criterion: the helpers report
 * through return values and the caller asserts.
 *
 * Every wait in here is a liveness bound (PH_LIVENESS_NS), never a timing
 * check: a test that hits it has found a hang, not a slow machine. The
 * part that needs nothing of Linux (clocks, waits, the configuration and
 * statistics shorthands) is pool_basics.h, which Windows builds too.
 */
#ifndef TERN_POOL_HELPERS_H
#define TERN_POOL_HELPERS_H

#include <errno.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pool_basics.h"
#include "proc_helpers.h"
#include "tern.h"
#include "testing.h"

/* ------------------------------------------------------------------ */
/* Is a worker parked?                                                 */
/* ------------------------------------------------------------------ */

/*
 * Whether thread `tid` of this process is blocked in a futex wait with a
 * timeout, read from /proc/self/task/<tid>/syscall ("nr arg0 arg1 ...",
 * or "running"). A pool worker waits that way only when it parks (a long
 * worker's idle wait has the idle timeout), while a contended mutex waits
 * without a timeout and valgrind's scheduler lock is a read() on a pipe,
 * so this tells "parked" from "on its way to park" on any build.
 * `what` receives the line read (or why nothing was), for failure messages.
 */
static inline bool ph_thread_parked(pid_t tid, char *what, size_t what_len)
{
    char line[256];
    bool got = task_syscall_line(tid, line, sizeof line, what, what_len);
    long nr;
    uint64_t addr, op, val, timeout;
    if (!got || sscanf(line, "%ld %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64, &nr, &addr, &op,
                       &val, &timeout) != 5)
        return false;
    unsigned cmd = (unsigned)op & FUTEX_CMD_MASK;
    return nr == SYS_futex && (cmd == FUTEX_WAIT || cmd == FUTEX_WAIT_BITSET) && timeout != 0;
}

/* Wait (bounded) until thread `tid` is parked; false, with what its
 * syscall file last said in `what`, when the liveness bound passes. */
static inline bool ph_wait_parked(pid_t tid, char *what, size_t what_len)
{
    bool ok;
    PH_WAIT_UNTIL(ok, ph_thread_parked(tid, what, what_len));
    return ok;
}

/* ------------------------------------------------------------------ */
/* A gate: work functions block on it until the test opens it.         */
/* ------------------------------------------------------------------ */

typedef struct ph_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool open;
    atomic_uint entered; /* work functions that reached the gate */
    atomic_uint inside;  /* of those, how many are still waiting on it */
} ph_gate;

static inline void ph_gate_init(ph_gate *g)
{
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->open = false;
    atomic_init(&g->entered, 0);
    atomic_init(&g->inside, 0);
}

static inline void ph_gate_open(ph_gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static inline void ph_gate_destroy(ph_gate *g)
{
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
}

static inline unsigned ph_gate_entered(ph_gate *g)
{
    return atomic_load(&g->entered);
}

static inline unsigned ph_gate_inside(ph_gate *g)
{
    return atomic_load(&g->inside);
}

/* Wait until at least n work functions have reached the gate. */
static inline bool ph_gate_wait_entered(ph_gate *g, unsigned n)
{
    bool ok;
    PH_WAIT_UNTIL(ok, atomic_load(&g->entered) >= n);
    return ok;
}

/*
 * Block until the gate opens or, when job is non-NULL, until the job is
 * cancelled. Returns true if the job saw its cancellation. The wait is
 * bounded by the liveness limit so a failing test still lets its workers
 * go rather than hang the process forever.
 */
static inline bool ph_gate_pass(ph_gate *g, const tern_job *job)
{
    uint64_t deadline = ph_now() + PH_LIVENESS_NS;
    bool cancelled = false;

    atomic_fetch_add(&g->inside, 1);
    atomic_fetch_add(&g->entered, 1);
    pthread_mutex_lock(&g->mu);
    while (!g->open && ph_now() < deadline) {
        if (job != NULL && tern_job_cancelled(job)) {
            cancelled = true;
            break;
        }
        /* A one-millisecond timed wait lets the cancel flag be polled. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    }
    pthread_mutex_unlock(&g->mu);
    atomic_fetch_sub(&g->inside, 1);
    return cancelled;
}

/* ------------------------------------------------------------------ */
/* A job record: the arg of ph_work / ph_done, recording what happened. */
/* ------------------------------------------------------------------ */

typedef struct ph_job {
    /* What the work should do. */
    ph_gate *gate;     /* block on this gate first (NULL: do not) */
    bool poll_cancel;  /* leave the gate early when the job is cancelled */
    uint64_t sleep_ns; /* then sleep this long */
    void *result;      /* what the work returns (NULL: the record itself) */

    /* What the work saw. */
    atomic_int ran;         /* times the work started */
    atomic_int returned;    /* times the work returned */
    atomic_bool saw_cancel; /* tern_job_cancelled() was true at some point */
    tern_id work_id;        /* tern_job_id() inside the work */
    tern_loop *work_current;
    pthread_t work_thread;
    pid_t work_tid; /* the worker's kernel thread id (for ph_thread_parked) */

    /* What done saw. */
    atomic_int done_calls;
    int status;
    void *done_result;
    tern_id done_id;
    tern_loop *done_loop;
    tern_loop *done_current;
    int done_step;
    int ran_at_done; /* value of ran when done ran */
    pthread_t done_thread;

    /* Set by the test. */
    tern_id id;
} ph_job;

static inline void ph_job_init(ph_job *j, ph_gate *gate)
{
    memset(j, 0, sizeof *j);
    j->gate = gate;
    atomic_init(&j->ran, 0);
    atomic_init(&j->returned, 0);
    atomic_init(&j->saw_cancel, false);
    atomic_init(&j->done_calls, 0);
    j->status = 1; /* neither 0 nor a negative errno: "never set" */
}

static inline void *ph_work(tern_job *job, void *arg)
{
    ph_job *j = arg;

    j->work_id = tern_job_id(job);
    j->work_current = tern_loop_current();
    j->work_thread = pthread_self();
    j->work_tid = (pid_t)syscall(SYS_gettid);
    atomic_fetch_add(&j->ran, 1);
    if (j->gate != NULL && ph_gate_pass(j->gate, j->poll_cancel ? job : NULL))
        atomic_store(&j->saw_cancel, true);
    if (j->sleep_ns > 0)
        ph_sleep_ns(j->sleep_ns);
    if (tern_job_cancelled(job))
        atomic_store(&j->saw_cancel, true);
    atomic_fetch_add(&j->returned, 1);
    return j->result != NULL ? j->result : j;
}

static inline void ph_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    ph_job *j = arg;

    j->status = status;
    j->done_result = result;
    j->done_id = id;
    j->done_loop = loop;
    j->done_current = tern_loop_current();
    j->done_step = tern__loop_step(loop);
    j->ran_at_done = atomic_load(&j->ran);
    j->done_thread = pthread_self();
    atomic_fetch_add(&j->done_calls, 1);
}

/* Submit one recorded job; returns what tern_submit returned. */
static inline int ph_submit(tern_loop *loop, tern_occupancy occ, ph_job *j)
{
    return tern_submit(loop, occ, ph_work, ph_done, j, &j->id);
}

/* Sum of done calls over an array of records. */
static inline int ph_done_total(ph_job *jobs, size_t n)
{
    int total = 0;
    for (size_t i = 0; i < n; i++)
        total += atomic_load(&jobs[i].done_calls);
    return total;
}

/* ------------------------------------------------------------------ */
/* Refusal counters (the shorthands are in pool_basics.h).             */
/* ------------------------------------------------------------------ */

/*
 * The process-wide counter of one refusal cause, written out by hand
 * (not from TERN_REFUSAL_MAP), so a cause the library forgets to count,
 * or counts in another cause's field, fails the test that provokes it.
 */
static inline uint64_t ph_refused(const tern_pool_stats *s, tern_refusal cause)
{
    switch (cause) {
    case TERN_REFUSED_QUEUE_FULL: return s->refused_queue_full;
    case TERN_REFUSED_LONG_CEILING: return s->refused_long_ceiling;
    case TERN_REFUSED_UNDELIVERED: return s->refused_undelivered;
    case TERN_REFUSED_OPERATIONS: return s->refused_operations;
    case TERN_REFUSED_OWNER_CAP: return s->refused_owner_cap;
    case TERN_REFUSED_SHUTDOWN: return s->refused_shutdown;
    case TERN_REFUSED_THREADS: return s->refused_threads;
    case TERN_REFUSED_NONE: break;
    }
    return UINT64_MAX;
}

/* Whether after - before is exactly one refusal, of cause and of no other. */
static inline bool ph_refused_once(const tern_pool_stats *before, const tern_pool_stats *after,
                                   tern_refusal cause)
{
    for (int c = TERN_REFUSED_QUEUE_FULL; c <= TERN_REFUSED_THREADS; c++) {
        uint64_t d = ph_refused(after, (tern_refusal)c) - ph_refused(before, (tern_refusal)c);
        if (d != (c == (int)cause ? 1u : 0u))
            return false;
    }
    return true;
}

/* The four refusal counters, for "only this one moved" checks. */
typedef struct ph_refusals {
    uint64_t queue_full, long_ceiling, undelivered, operations;
} ph_refusals;

static inline ph_refusals ph_refusals_now(void)
{
    tern_pool_stats s = ph_stats();
    return (ph_refusals){s.refused_queue_full, s.refused_long_ceiling, s.refused_undelivered,
                         s.refused_operations};
}

#endif
