/*
 * The long class: work that holds its thread for a connection's or a
 * stream's lifetime. There is no queue — a job never waits behind another
 * long job. A submission goes to a parked worker (the most recently parked
 * first, so the coldest retire), or starts a new thread, or is refused at
 * the ceiling. The ceiling check and the thread count change under the
 * same lock, so racing submitters from several loops cannot overshoot.
 * Idle workers retire after long_idle_timeout: the pool has no loop of
 * its own, so the deadline is the parked worker's timed wait.
 *
 * The worker lists are intrusive (backends/list.h), so a retiring worker
 * unlinks itself in O(1) rather than walking the lists under long_lock.
 *
 * Lock order: long_lock is a leaf among tern's locks. A new worker is
 * created while it is held, so that it is on `long_all` before it can run
 * and shutdown always finds it; pthread_create takes only glibc's own
 * locks.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "fault.h"
#include "list.h"
#include "long.h"
#include "platform.h"
#include "pool_p.h"
#include "stats.h"
#include "work.h"

struct long_arg {
    struct tern__pool *pool;
    struct tern__long_worker *w;
};

static void *long_main(void *argp)
{
    tern__thread_name("tern-long");
    struct long_arg a = *(struct long_arg *)argp;
    free(argp);
    struct tern__pool *p = a.pool;
    struct tern__long_worker *w = a.w;

    tern__mutex_lock(&p->long_lock);
    for (;;) {
        struct tern__work *job = w->job;
        if (job != NULL) {
            /*
             * The job is ours from the hand-over (under long_lock, which
             * also counted it in long_busy) until we re-park, so long_busy
             * never reads 0 while a job is on its way to a worker.
             */
            w->job = NULL;
            tern__mutex_unlock(&p->long_lock);
            if (tern__work_claim(job))
                tern__work_run(job, TERN__MAX_THREADS);
            tern__mutex_lock(&p->long_lock);
            TERN_ATOMIC_DECREMENT(tern__pool_stats.long_busy, memory_order_relaxed);
            /* A worker told to exit (shutdown took the lists) must not re-park. */
            if (!w->exit)
                tern__list_add(&w->parked_node, &p->long_parked); /* most recent first */
            continue;
        }
        if (w->exit)
            break;
        tern__deadline_t until = tern__cond_deadline(p->cfg.long_idle_timeout_ns);
        bool timed_out = tern__cond_timedwait(&w->cond, &p->long_lock, &until);
        if (timed_out && w->job == NULL && !w->exit) {
            /* Retire: nobody will join us, so detach and free ourselves. */
            tern__list_del(&w->parked_node); /* idle, so parked */
            tern__list_del(&w->all_node);
            TERN_DECREMENT(p->long_count);
            TERN_ATOMIC_DECREMENT(tern__pool_stats.long_threads, memory_order_relaxed);
            tern__mutex_unlock(&p->long_lock);
            tern__thread_detach(tern__thread_self());
            tern__cond_destroy(&w->cond);
            free(w);
            return NULL;
        }
    }
    tern__mutex_unlock(&p->long_lock);
    return NULL; /* joined by tern__long_stop */
}

int tern__long_init(struct tern__pool *p)
{
    tern__mutex_init(&p->long_lock);
    tern__list_init(&p->long_parked);
    tern__list_init(&p->long_all);
    p->long_count = 0;
    return 0;
}

/* With long_lock held: the job is w's, and counted busy from now. */
static void hand_over(struct tern__long_worker *w, struct tern__work *job)
{
    w->job = job;
    atomic_fetch_add_explicit(&tern__pool_stats.long_busy, 1, memory_order_relaxed);
}

int tern__long_submit(struct tern__pool *p, struct tern__work *job, tern_refusal *cause)
{
    tern__mutex_lock(&p->long_lock);
    if (!tern__list_empty(&p->long_parked)) {
        struct tern__long_worker *w =
            tern__list_first(&p->long_parked, struct tern__long_worker, parked_node);
        tern__list_del(&w->parked_node);
        hand_over(w, job);
        tern__cond_signal(&w->cond);
        tern__mutex_unlock(&p->long_lock);
        return 0;
    }
    if (p->long_count >= p->cfg.long_threads_max) {
        tern__mutex_unlock(&p->long_lock);
        return -EAGAIN; /* counted by the client (runtime/jobs/job.c, refuse) */
    }
    p->long_count++; /* hold the place under the lock (the ceiling holds) */
    tern__mutex_unlock(&p->long_lock);

    int rc = -ENOMEM;
    struct tern__long_worker *w = tern__calloc(1, sizeof(*w));
    struct long_arg *a = tern__malloc(sizeof(*a));
    if (w != NULL && a != NULL) {
        (void)tern__cond_init(&w->cond);
        *a = (struct long_arg){p, w};
        /* Link before the thread exists so shutdown can always find it. */
        tern__mutex_lock(&p->long_lock);
        tern__list_add(&w->all_node, &p->long_all);
        hand_over(w, job);
        rc = tern__thread_create(&w->thread, long_main, a);
        if (rc < 0) {
            tern__list_del(&w->all_node);
            TERN_ATOMIC_DECREMENT(tern__pool_stats.long_busy, memory_order_relaxed);
        } else {
            /*
             * Counted under the lock: once it is released the job may run
             * and complete, and a shutdown join this thread and count it
             * out — before we could have counted it in.
             */
            atomic_fetch_add_explicit(&tern__pool_stats.long_threads, 1, memory_order_relaxed);
        }
        tern__mutex_unlock(&p->long_lock);
        if (rc == 0)
            return 0;
        *cause = TERN_REFUSED_THREADS; /* below the ceiling, but no thread */
        tern__cond_destroy(&w->cond);
    }
    free(w);
    free(a);
    tern__mutex_lock(&p->long_lock);
    TERN_DECREMENT(p->long_count);
    tern__mutex_unlock(&p->long_lock);
    return rc;
}

void tern__long_stop(struct tern__pool *p)
{
    /* Take every worker; their parked links die with the list (none re-parks). */
    struct tern__list all;
    tern__list_init(&all);
    tern__mutex_lock(&p->long_lock);
    tern__list_splice(&p->long_all, &all);
    tern__list_init(&p->long_parked);
    struct tern__long_worker *w, *next;
    tern__list_for_each(w, &all, struct tern__long_worker, all_node)
    {
        w->exit = true;
        tern__cond_signal(&w->cond);
    }
    tern__mutex_unlock(&p->long_lock);
    tern__list_for_each_safe(w, next, &all, struct tern__long_worker, all_node)
    {
        tern__thread_join(w->thread, NULL);
        tern__cond_destroy(&w->cond);
        free(w);
        TERN_DECREMENT(p->long_count);
        TERN_ATOMIC_DECREMENT(tern__pool_stats.long_threads, memory_order_relaxed);
    }
}

void tern__long_destroy(struct tern__pool *p)
{
    tern__mutex_destroy(&p->long_lock);
}
