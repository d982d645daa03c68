/*
 * The watchdog for stalled bounded work (tern_pool_watch, SPEC §18).
 *
 * One bounded job that blocks (a slow disk, a hung server) takes a worker
 * away; enough of them freeze the class. The watchdog is one thread per
 * pool that sleeps on a condition variable with a timeout, a quarter of
 * the stall bound (1 ms to 250 ms), and each time looks at every bounded
 * worker's `seq` (bounded.h): odd and unchanged since a look at least the
 * stall bound ago means the same job is still running, so it is stalled,
 * counted once per job. While any worker is stalled and jobs wait in the
 * queue, it starts one overflow worker per look (worker.c), until as
 * many are alive as workers are stalled, or the ceiling. An overflow
 * worker takes jobs from the same queue, and retires after it has idled
 * for overflow_idle_ns.
 *
 * Why a thread of its own: the pool has no loop (it knows nothing of
 * loops), and the bounded workers are exactly what may be stuck. The
 * workers pay nothing for it but two relaxed stores per job to a line of
 * their own; the watchdog's reads are relaxed, a look may be a moment
 * stale, and a stall is seen between one and one and a quarter bounds
 * after the job started. Cost when idle: four wake-ups a second at the
 * default bound of 1 s (docs/decisions.md).
 *
 * Lock order: watch_lock is a leaf; the watchdog never holds it while it
 * looks (tern__bounded_overflow_start takes park_lock).
 */
#include <errno.h>
#include <stdlib.h>

#include "bounded.h"
#include "env.h"
#include "fault.h"
#include "platform.h"
#include "pool_p.h"
#include "watchdog.h"
#include "worker.h"

#define LOOK_MIN_NS UINT64_C(1000000)   /* 1 ms */
#define LOOK_MAX_NS UINT64_C(250000000) /* 250 ms: how soon a changed setting is seen */

/* What the watchdog last saw of one worker. Its own, never shared. */
struct sample {
    uint64_t seq;     /* the worker's seq at the last change seen */
    uint64_t since;   /* when that change was seen (tern__clock_now) */
    uint64_t counted; /* the seq of the last job counted as stalled, + 1 (0: none) */
};

/* Look at one worker; true if it is stalled now. */
static bool stalled(struct sample *s, unsigned figures, uint64_t now, uint64_t stall_ns)
{
    uint64_t seq = atomic_load_explicit(&tern__pool_workers[figures].seq, memory_order_relaxed);
    if (seq != s->seq || (seq & 1) == 0) {
        s->seq = seq;
        s->since = now;
        return false;
    }
    if (now - s->since < stall_ns)
        return false;
    if (s->counted != seq + 1) {
        s->counted = seq + 1;
        atomic_fetch_add_explicit(&tern__pool_stats.stalls, 1, memory_order_relaxed);
    }
    return true;
}

static void look(struct tern__pool *p, struct sample *samples, uint64_t stall_ns)
{
    uint64_t now = tern__clock_now();
    unsigned n = 0;
    for (unsigned i = 0; i < p->nthreads; i++)
        n += stalled(&samples[i], i, now, stall_ns);
    for (unsigned i = 0; i < TERN__MAX_OVERFLOW; i++)
        n += stalled(&samples[TERN__MAX_THREADS + i], TERN__MAX_THREADS + i, now, stall_ns);
    unsigned max = atomic_load_explicit(&tern__pool_watch_now.overflow_max, memory_order_relaxed);
    /* Work waiting: in the queue, or in the run of a worker (stalled, perhaps). */
    if (n > 0 && (tern__bounded_ready(p) || tern__runs_left()))
        (void)tern__bounded_overflow_start(p, n < max ? n : max); /* -EAGAIN at the ceiling */
}

static uint64_t look_every(uint64_t stall_ns)
{
    uint64_t every = stall_ns / 4;
    if (stall_ns == 0 || every > LOOK_MAX_NS)
        return LOOK_MAX_NS;
    return every < LOOK_MIN_NS ? LOOK_MIN_NS : every;
}

/* What the watchdog's thread is given: its pool and its samples, allocated by the start. */
struct watch_arg {
    struct tern__pool *pool;
    struct sample samples[TERN__WORKER_SLOTS];
};

static void *watch_main(void *argp)
{
    tern__thread_name("tern-watchdog");
    struct watch_arg *a = argp;
    struct tern__pool *p = a->pool;
    struct sample *samples = a->samples;
    tern__mutex_lock(&p->watch_lock);
    while (!p->watch_exit) {
        uint64_t stall_ns =
            atomic_load_explicit(&tern__pool_watch_now.stall_ns, memory_order_relaxed);
        tern__deadline_t until = tern__cond_deadline(look_every(stall_ns));
        bool timed_out = tern__cond_timedwait(&p->watch_cond, &p->watch_lock, &until);
        if (!timed_out || p->watch_exit || stall_ns == 0)
            continue;
        tern__mutex_unlock(&p->watch_lock);
        look(p, samples, stall_ns);
        tern__mutex_lock(&p->watch_lock);
    }
    tern__mutex_unlock(&p->watch_lock);
    free(a);
    return NULL;
}

int tern__watch_start(struct tern__pool *p)
{
    tern__pool_watch_load();
    /* Allocated here, so a failure fails the start rather than the thread. */
    struct watch_arg *a = tern__calloc(1, sizeof(*a));
    if (a == NULL)
        return -ENOMEM;
    a->pool = p;
    tern__mutex_init(&p->watch_lock);
    (void)tern__cond_init(&p->watch_cond);
    p->watch_exit = false;
    int rc = tern__thread_create(&p->watch_thread, watch_main, a);
    if (rc < 0) {
        free(a);
        tern__cond_destroy(&p->watch_cond);
        tern__mutex_destroy(&p->watch_lock);
    }
    return rc;
}

void tern__watch_stop(struct tern__pool *p)
{
    tern__mutex_lock(&p->watch_lock);
    p->watch_exit = true;
    tern__cond_signal(&p->watch_cond);
    tern__mutex_unlock(&p->watch_lock);
    tern__thread_join(p->watch_thread, NULL);
    tern__cond_destroy(&p->watch_cond);
    tern__mutex_destroy(&p->watch_lock);
}
