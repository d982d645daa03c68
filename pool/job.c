/*
 * Jobs, seen from the loop: submission with admission, cancellation by
 * tombstone, the hand-back through the result ring, and delivery of done
 * in step 2. Also the small worker-side helpers every class shares.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>

#include "pool_p.h"

/* ------------------------------------------------------------------ */
/* Worker side                                                         */
/* ------------------------------------------------------------------ */

bool tern__job_claim(tern_job *job)
{
    uint8_t expected = TERN__JOB_QUEUED;
    if (atomic_compare_exchange_strong_explicit(&job->state, &expected, TERN__JOB_RUNNING,
                                                memory_order_acq_rel, memory_order_acquire))
        return true;
    /*
     * A tombstone: the loop has (or will have) delivered its done. Let go
     * of it; if the loop already let go, we are last and free it.
     */
    TERN_INSIST(expected == TERN__JOB_TOMBSTONED || expected == TERN__JOB_LOOP_DONE);
    if (expected != TERN__JOB_TOMBSTONED ||
        !atomic_compare_exchange_strong_explicit(&job->state, &expected, TERN__JOB_POOL_DONE,
                                                 memory_order_acq_rel, memory_order_acquire))
        free(job);
    tern__pool_leave(); /* the tombstone's pool life ends here */
    return false;
}

bool tern__job_complete(tern_job *job)
{
    tern_loop *loop = job->loop;
    /*
     * Pin the loop across push + wake: once the job is on the ring the loop
     * may deliver it and tern_loop_free may run; the free waits for pins
     * to drop to zero before it releases anything we touch here.
     */
    struct tern__ring *ring = loop->ring;
    atomic_fetch_add_explicit(&ring->pins, 1, memory_order_acquire);
    tern__ring_push(ring, job);
    bool woke = tern__loop_wake(loop);
    /* Pairs with the acquire load in tern__loop_pool_destroy(). */
    atomic_fetch_sub_explicit(&ring->pins, 1, memory_order_release);
    tern__pool_leave(); /* handed back: the job's pool life ends here */
    return woke;
}

bool tern__job_run(tern_job *job, unsigned worker)
{
    bool shared = worker == TERN__MAX_THREADS; /* the long class's pair */
    uint64_t start = tern__ticks();
    if (job->t_submit != 0)
        tern__hist_record(&tern__pool_wait_hist[worker], start - job->t_submit, shared);
    job->result = job->work(job, job->arg);
    tern__hist_record(&tern__pool_run_hist[worker], tern__ticks() - start, shared);
    atomic_store_explicit(&job->state, TERN__JOB_FINISHED, memory_order_release);
    return tern__job_complete(job);
}

bool tern_job_cancelled(const tern_job *job)
{
    TERN_REQUIRE(job != NULL);
    return atomic_load_explicit(&((tern_job *)job)->cancel, memory_order_relaxed);
}

tern_id tern_job_id(const tern_job *job)
{
    TERN_REQUIRE(job != NULL);
    return job->op.id;
}

/* ------------------------------------------------------------------ */
/* Loop side                                                           */
/* ------------------------------------------------------------------ */

static void release_credit(tern_loop *loop, const tern_job *job)
{
    if (job->occupancy == TERN_LONG)
        TERN_DECREMENT(loop->long_undelivered);
    TERN_DECREMENT(loop->undelivered);
    atomic_store_explicit(&loop->st_undelivered, loop->undelivered, memory_order_relaxed);
}

/*
 * Job records are malloc'd (a worker may be the one to free a tombstone),
 * and the loop keeps the ones it frees on a small cache of its own, so a
 * steady stream of jobs costs no malloc or free.
 */
#define JOB_CACHE_MAX 1024

static tern_job *job_alloc(tern_loop *loop)
{
    tern_job *job = loop->job_cache;
    if (job != NULL) {
        loop->job_cache = (tern_job *)job->op.ready_next;
        loop->job_cache_len--;
        return job;
    }
    return tern__malloc(sizeof(*job));
}

static void job_release(tern_loop *loop, tern_job *job)
{
    if (loop->job_cache_len >= JOB_CACHE_MAX) {
        free(job);
        return;
    }
    job->op.ready_next = (struct tern__op *)loop->job_cache;
    loop->job_cache = job;
    loop->job_cache_len++;
}

static void job_dispatch(tern_loop *loop, struct tern__op *op)
{
    tern_job *job = (tern_job *)op;
    tern_id id = op->id;
    int status = atomic_load_explicit(&job->cancel, memory_order_relaxed) ? -ECANCELED : 0;
    tern__op_finish(loop, op); /* the id is stale once done starts */
    TERN_DECREMENT(loop->jobs_live);
    /* submitted == completed + cancelled + jobs whose done is still owed */
    atomic_fetch_add_explicit(status ? &tern__pool_stats.cancelled : &tern__pool_stats.completed,
                              1, memory_order_relaxed);
    job->done(loop, id, status, job->result, job->arg);
    uint8_t state = atomic_load_explicit(&job->state, memory_order_acquire);
    if (state == TERN__JOB_TOMBSTONED &&
        atomic_compare_exchange_strong_explicit(&job->state, &state, TERN__JOB_LOOP_DONE,
                                                memory_order_acq_rel, memory_order_acquire))
        return; /* the queue still holds it; the pool frees it */
    job_release(loop, job);
}

static int job_cancel(tern_loop *loop, struct tern__op *op)
{
    tern_job *job = (tern_job *)op;
    uint8_t state = atomic_load_explicit(&job->state, memory_order_acquire);
    if (state != TERN__JOB_QUEUED && state != TERN__JOB_RUNNING)
        return 0; /* finished (its done is on the way) or already a tombstone */
    /* A worker finishing right now may still report this as cancelled. */
    atomic_store_explicit(&job->cancel, true, memory_order_relaxed);
    uint8_t expected = TERN__JOB_QUEUED;
    if (atomic_compare_exchange_strong_explicit(&job->state, &expected, TERN__JOB_TOMBSTONED,
                                                memory_order_acq_rel, memory_order_acquire)) {
        /* Never runs: deliver in the next step 2, without its credit. */
        job->result = NULL;
        release_credit(loop, job);
        tern__op_ready(loop, op);
    }
    /* Running: it sees tern_job_cancelled(). Finished: no effect. */
    return 0;
}

static void job_free(tern_loop *loop, struct tern__op *op)
{
    (void)loop;
    (void)op; /* job_dispatch owns the memory: a job is never finished while queued */
}

static const struct tern__op_class job_class = {
    .name = "job",
    .dispatch = job_dispatch,
    .cancel = job_cancel,
    .free = job_free,
    .refable = false,
};

int tern__loop_pool_init(tern_loop *loop)
{
    loop->ring = NULL; /* allocated by the first submission */
    return 0;
}

void tern__loop_pool_destroy(tern_loop *loop)
{
    TERN_INSIST(loop->undelivered == 0);
    /* Pool threads may still be inside a hand-over to us; wait them out. */
    while (loop->ring != NULL && atomic_load_explicit(&loop->ring->pins, memory_order_acquire) != 0)
        sched_yield();
    while (loop->job_cache != NULL) {
        tern_job *job = loop->job_cache;
        loop->job_cache = (tern_job *)job->op.ready_next;
        free(job);
    }
    loop->job_cache_len = 0;
    tern__ring_free(loop->ring);
    loop->ring = NULL;
}

void tern__loop_pool_check_books(tern_loop *loop)
{
    struct tern__ring *ring = loop->ring;
    if (ring == NULL) {
        if (loop->undelivered != 0)
            tern__check_failed(__FILE__, __LINE__, __func__, "BOOKS",
                               "credits held (undelivered) with no result ring");
        return;
    }
    uint64_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
    if (ring->head > tail)
        tern__check_failed(__FILE__, __LINE__, __func__, "BOOKS", "result ring head > tail");
    /* A credit belongs to a live job: more credits than jobs is a leak. */
    if (loop->long_undelivered > loop->undelivered)
        tern__check_failed(__FILE__, __LINE__, __func__, "BOOKS",
                           "long jobs' credits > all credits");
    if (loop->undelivered > loop->jobs_live)
        tern__check_failed(__FILE__, __LINE__, __func__, "BOOKS",
                           "undelivered credits > accepted jobs not yet done");
    /* Every completion on the ring still holds its credit. */
    if (tail - ring->head > loop->undelivered)
        tern__check_failed(__FILE__, __LINE__, __func__, "BOOKS",
                           "completions on the ring > undelivered credits");
}

bool tern__loop_pool_pending(tern_loop *loop)
{
    return loop->ring != NULL && tern__ring_ready(loop->ring);
}

void tern__loop_pool_collect(tern_loop *loop)
{
    if (loop->ring == NULL)
        return;
    tern_job *job;
    while ((job = tern__ring_pop(loop->ring)) != NULL) {
        release_credit(loop, job);
        tern__op_ready(loop, &job->op);
    }
}

static int ensure_ring(tern_loop *loop)
{
    if (loop->ring != NULL)
        return 0;
    uint64_t n = loop->max_undelivered < loop->max_operations ? loop->max_undelivered
                                                              : loop->max_operations;
    return tern__ring_new(&loop->ring, n);
}

/*
 * Accept or refuse a job. Every refusal happens before the work exists
 * anywhere the pool can see it, and changes only its own counter.
 */
int tern__submit_job(tern_loop *loop, tern_occupancy occ, enum tern__job_kind kind,
                     tern_work_fn work, tern_done_fn done, void *arg, tern_id *idp)
{
    int rc;
    if ((rc = ensure_ring(loop)) < 0)
        return rc;
    if (loop->undelivered >= loop->max_undelivered) {
        atomic_fetch_add_explicit(&tern__pool_stats.refused_undelivered, 1, memory_order_relaxed);
        return -EAGAIN;
    }
    if ((rc = tern__op_admit(loop)) < 0) {
        if (rc == -EAGAIN)
            atomic_fetch_add_explicit(&tern__pool_stats.refused_operations, 1,
                                      memory_order_relaxed);
        return rc;
    }
    tern_job *job = job_alloc(loop);
    if (job == NULL) {
        tern__op_unadmit(loop);
        return -ENOMEM;
    }
    *job = (tern_job){.occupancy = (uint8_t)occ, .kind = (uint8_t)kind, .loop = loop,
                      .work = work, .done = done, .arg = arg};
    if ((rc = tern__op_add(loop, &job->op, &job_class)) < 0) {
        job_release(loop, job);
        tern__op_unadmit(loop);
        return rc;
    }
    tern_id id = job->op.id;
    /*
     * The job is registered; hand it over. Stamp the queue-wait start here,
     * not from the loop's cached clock, which a long step 2 leaves stale —
     * for one job in four: reading the clock was a twentieth of the loop's
     * cost per job, and a quarter of recent jobs is sample enough for
     * percentiles. (Run times are measured for every job, on the worker.)
     */
    job->t_submit = (loop->submits++ & 3) == 0 ? tern__ticks() : 0;
    loop->undelivered++;
    rc = tern__pool_accept(loop->has_pool_config ? &loop->pool_config : NULL, &loop->pool_checked,
                           job);
    if (rc < 0) {
        TERN_DECREMENT(loop->undelivered);
        /*
         * Never enqueued: retire the op without a trace (no done, no
         * stats). It is neither queued nor armed, so finishing it only
         * unregisters it; job_free leaves the record to us.
         */
        tern__op_finish(loop, &job->op);
        job_release(loop, job);
        return rc;
    }
    loop->jobs_live++;
    loop->long_undelivered += occ == TERN_LONG;
    atomic_fetch_add_explicit(&tern__pool_stats.submitted, 1, memory_order_relaxed);
    atomic_store_explicit(&loop->st_undelivered, loop->undelivered, memory_order_relaxed);
    if (loop->undelivered > atomic_load_explicit(&loop->st_undelivered_peak, memory_order_relaxed))
        atomic_store_explicit(&loop->st_undelivered_peak, loop->undelivered, memory_order_relaxed);
    if (idp != NULL)
        *idp = id;
    return 0;
}

int tern_submit(tern_loop *loop, tern_occupancy occupancy, tern_work_fn work, tern_done_fn done,
                void *arg, tern_id *idp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (work == NULL || done == NULL || (occupancy != TERN_BOUNDED && occupancy != TERN_LONG))
        return -EINVAL;
    if (atomic_load_explicit(&loop->closing, memory_order_relaxed))
        return -ESHUTDOWN;
    return tern__submit_job(loop, occupancy, TERN__JOB_WORK, work, done, arg, idp);
}
