/*
 * Jobs, an operation kind of the loop (job_p.h): submission with admission
 * (owners are in owner.c, refusal causes in refusal.c), cancellation by
 * tombstone, the hand-back through the result ring, and delivery of done
 * in step 2. The pool (pool/pool.h) runs the
 * work and calls job_handback, below, once per job.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>

#include "admit.h"
#include "container.h"
#include "heap.h"
#include "job_p.h"
#include "probe.h"
#include "sized.h"
#include "testing.h"

static inline tern_job *job_of(struct tern__op *op)
{
    return tern__container_of(op, tern_job, op);
}

/* The test seam inside a hand-back (testing.h); NULL outside tern's tests. */
_Atomic(tern__handback_pushed_hook) tern__handback_pushed;

/*
 * The pool's one call into the loop (pool.h): a finished job goes onto its
 * loop's result ring, and the loop is woken; a stopped job both sides have
 * let go of is freed. Any thread.
 *
 * The two-party hand-off of a stopped job is the pool's state word, not a
 * urcu_ref: a reference count would cost an atomic read-modify-write on
 * every job (the pool's reference dropped at hand-back), where the state
 * word costs one CAS per side only on the rare stopped-in-queue path, and
 * the word is needed anyway for claim against cancel. (Reasoned, not
 * measured: the figure to watch is bench/pool_throughput's jobs per
 * second.)
 */
static bool job_handback(struct tern__work *w)
{
    tern_job *job = (tern_job *)w; /* the header comes first */
    if (!tern__work_finished(w)) {
        tern__job_returned(job); /* stopped, and the loop let go first: never touch the loop */
        return false;
    }
    tern_loop *loop = tern__job_chunk(job)->loop;
    /*
     * Pin the loop across push + wake: once the job is on the ring the loop
     * may deliver it and tern_loop_free may run; the free waits until no
     * pin is left before it releases anything we touch here. A bounded
     * worker pins in its own slot (pool.h: two plain stores on its own
     * line); any other thread adds to the loop's count.
     */
    _Atomic(const void *) *slot = tern__pool_hand_slot;
    if (TERN_LIKELY(slot != NULL))
        atomic_store_explicit(slot, loop, memory_order_release);
    else
        atomic_fetch_add_explicit(&loop->result_pins, 1, memory_order_acquire);
    tern__ring_push(loop->ring, job);
    bool woke = tern__loop_wake(loop);
    tern__handback_pushed_hook hook =
        atomic_load_explicit(&tern__handback_pushed, memory_order_relaxed);
    if (TERN_UNLIKELY(hook != NULL))
        hook(loop);
    /* Pairs with the acquire loads in tern__jobs_destroy(). */
    if (TERN_LIKELY(slot != NULL))
        atomic_store_explicit(slot, NULL, memory_order_release);
    else
        atomic_fetch_sub_explicit(&loop->result_pins, 1, memory_order_release);
    return woke;
}

tern_id tern_job_id(const tern_job *job)
{
    TERN_REQUIRE(job != NULL);
    return job->op.id;
}

/* Give back n undelivered credits, of which `longs` were TERN_LONG jobs'. */
static void release_credits(tern_loop *loop, unsigned n, unsigned longs)
{
    TERN_INSIST(loop->undelivered >= n && loop->long_undelivered >= longs);
    loop->undelivered -= n;
    loop->long_undelivered -= longs;
    atomic_store_explicit(&loop->st_undelivered, loop->undelivered, memory_order_relaxed);
}

/* Job records come from the loop's chunks (job_slab.c). */
static tern_job *job_alloc(tern_loop *loop)
{
    return tern__job_alloc(loop);
}

static void job_release(tern_loop *loop, tern_job *job)
{
    tern__job_release(loop, job);
}

/* ------------------------------------------------------------------ */
/* Delivery, cancellation and deadlines                                */
/* ------------------------------------------------------------------ */

static TERN_ALWAYS_INLINE void deliver(tern_loop *loop, tern_job *job)
{
    struct tern__op *op = &job->op;
    tern_id id = op->id;
    int status = !tern__work_told(&job->work) ? 0
                 : tern__job_timed_out(job)   ? -ETIMEDOUT
                                              : -ECANCELED;
    /*
     * The id is stale once done starts (disarms any deadline). Off the
     * ready queue by now, and the record is ours to free below: the op's
     * retirement is all of tern__op_finish a job needs (job_free is empty).
     */
    TERN_INSIST(!(op->flags & TERN__OP_QUEUED));
    tern__op_retire(loop, op);
    if (tern__job_has_deadline(job))
        tern__deadline_unclaim(loop);
    if (loop->jobs_owned) /* else no job of this loop has owner links to look up */
        tern__owner_unlink(job);
    TERN_DECREMENT(loop->jobs_live);
    /*
     * submitted == completed + cancelled + timed_out + jobs whose done is
     * still owed: counted on this thread, added as the step ends (pool.h).
     */
    tern__outcomes_due[status == 0            ? TERN__OUTCOME_COMPLETED
                       : status == -ETIMEDOUT ? TERN__OUTCOME_TIMED_OUT
                                              : TERN__OUTCOME_CANCELLED]++;
    TERN_PROBE(job_done, loop, id, job, status);
    ((tern_done_fn)job->work.client_fn)(loop, id, status, job->work.result, job->work.arg);
    if (tern__work_let_go(&job->work))
        job_release(loop, job);
    else
        tern__job_held(loop, job); /* the queue still holds it; the pool hands it back */
}

/*
 * Step 2, for a job queued on its own: a stop's done, or a result taken
 * while `results` waited with other ops behind it (tern__jobs_collect).
 */
static void job_dispatch(tern_loop *loop, struct tern__op *op)
{
    deliver(loop, job_of(op));
}

/*
 * Stop a job: the pool tombstones it if still queued (its work never runs;
 * done in the next step 2, without its credit) or flags it if running.
 * Returns what happened (TERN_CANCEL_*), the same answer again on a second
 * call; done comes exactly once either way.
 */
/* The first stop's reason stands: a later one comes after a STOPPED or TOLD answer. */
static void mark_timed_out(tern_job *job, bool timeout)
{
    if (timeout)
        job->op.flags |= TERN__OP_OWN;
}

static int stop_job(tern_loop *loop, tern_job *job, bool timeout)
{
    switch (tern__work_stop(&job->work)) {
    case TERN__STOP_STOPPED_NOW:
        mark_timed_out(job, timeout);
        release_credits(loop, 1, job->work.occupancy == TERN_LONG);
        tern__op_ready(loop, &job->op);
        return TERN_CANCEL_STOPPED;
    case TERN__STOP_STOPPED_BEFORE:
        return TERN_CANCEL_STOPPED;
    case TERN__STOP_TOLD_NOW:
        mark_timed_out(job, timeout);
        return TERN_CANCEL_RUNNING;
    case TERN__STOP_TOLD_BEFORE:
        return TERN_CANCEL_RUNNING; /* the first reason stands */
    case TERN__STOP_FINISHED:
        return TERN_CANCEL_FINISHED; /* done gets 0 and the result */
    }
    TERN_UNREACHABLE();
}

static int job_cancel(tern_loop *loop, struct tern__op *op)
{
    return stop_job(loop, job_of(op), false);
}

/* Step 5: the job's timeout came. Not started: never runs; running: flagged. */
static void job_expired(tern_loop *loop, struct tern__op *op)
{
    tern_job *job = job_of(op);
    if (stop_job(loop, job, true) == TERN_CANCEL_RUNNING && job->work.kind == TERN__WORK_LOOKUP &&
        tern__job_timed_out(job))
        loop->lookup_expired(loop, job); /* getaddrinfo cannot be interrupted */
}

static void job_free(tern_loop *loop, struct tern__op *op)
{
    (void)loop;
    (void)op; /* delivery owns the memory: a job is never finished while queued */
}

/* Step 2: the done of up to `budget` jobs waiting behind `results`, in order. */
static unsigned results_drain(tern_loop *loop, struct tern__op *op, unsigned budget, bool *more)
{
    (void)op;
    unsigned ran = 0;
    struct tern__op *next;
    while (ran < budget && (next = loop->results_head) != NULL) {
        loop->results_head = next->ready_next;
        ran++;
        deliver(loop, job_of(next));
    }
    *more = loop->results_head != NULL;
    if (!*more)
        loop->results_tail = NULL;
    return ran;
}

/* Only a dead op is freed by step 2, and `results` never dies. */
static void results_free(tern_loop *loop, struct tern__op *op)
{
    (void)loop, (void)op;
    TERN_UNREACHABLE();
}

static const struct tern__op_class results_class = {
    .name = "job results",
    .drain = results_drain,
    .free = results_free,
};

static const struct tern__op_class job_class = {
    .name = "job",
    .dispatch = job_dispatch,
    .cancel = job_cancel,
    .expired = job_expired,
    .free = job_free,
    .refable = false,
};

int tern__jobs_init(tern_loop *loop)
{
    loop->ring = NULL; /* allocated by the first submission */
    loop->results = (struct tern__op){.cls = &results_class, .aux = TERN__OP_UNARMED};
    loop->results_head = loop->results_tail = NULL;
    /* The pool's memory figure counts a record per job in flight. */
    atomic_store_explicit(&tern__pool_record_bytes, sizeof(struct tern_job), memory_order_relaxed);
    /* Every job's hand-back, before this loop's first submission. */
    atomic_store_explicit(&tern__pool_handback, job_handback, memory_order_relaxed);
    return 0;
}

void tern__jobs_destroy(tern_loop *loop)
{
    TERN_INSIST(loop->undelivered == 0 && loop->lane.n == 0);
    /*
     * Pool threads may still be inside a hand-over to us; wait them out.
     * Every job was delivered, so each pin taken for one was seen with it.
     */
    while (atomic_load_explicit(&loop->result_pins, memory_order_acquire) != 0 ||
           tern__pool_handing(loop))
        sched_yield();
    tern__job_records_destroy(loop);
    if (loop->ring != NULL) {
        tern__ring_destroy(loop->ring);
        tern__free_aligned(loop->ring);
        loop->ring = NULL;
    }
}

void tern__jobs_check_books(tern_loop *loop)
{
    struct tern__ring *ring = loop->ring;
    if (ring == NULL) {
        if (loop->undelivered != 0)
            tern__check_failed(__FILE__, __LINE__, __func__, "BOOKS",
                               "credits held (undelivered) with no result ring");
        return;
    }
    uint64_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&ring->head, memory_order_relaxed);
    if (head > tail)
        tern__check_failed(__FILE__, __LINE__, __func__, "BOOKS", "result ring head > tail");
    /* A credit belongs to a live job: more credits than jobs is a leak. */
    if (loop->long_undelivered > loop->undelivered)
        tern__check_failed(__FILE__, __LINE__, __func__, "BOOKS",
                           "long jobs' credits > all credits");
    if (loop->undelivered > loop->jobs_live)
        tern__check_failed(__FILE__, __LINE__, __func__, "BOOKS",
                           "undelivered credits > accepted jobs not yet done");
    /* Results wait behind `results` exactly while it is queued. */
    bool waiting = loop->results_head != NULL;
    if (waiting != (loop->results_tail != NULL) ||
        waiting != ((loop->results.flags & TERN__OP_QUEUED) != 0))
        tern__check_failed(__FILE__, __LINE__, __func__, "BOOKS",
                           "job results and their ready-queue entry disagree");
    /* Every completion on the ring still holds its credit. */
    if (tail - head > loop->undelivered)
        tern__check_failed(__FILE__, __LINE__, __func__, "BOOKS",
                           "completions on the ring > undelivered credits");
}

void tern__jobs_kick(tern_loop *loop)
{
    if (loop->kick_owed) {
        loop->kick_owed = false;
        tern__pool_kick(&loop->lane);
    }
    /* Once a turn, after its dones: records beyond the kept ones go back. */
    if (TERN_UNLIKELY(tern__job_records_trim_due(loop)))
        tern__job_records_trim(loop);
}

bool tern__jobs_pending(tern_loop *loop)
{
    return loop->ring != NULL && tern__ring_ready(loop->ring);
}

/* Results are taken off the ring TERN__COLLECT_RUN at a time, each run
 * before any of it is touched (job_p.h). */

/*
 * Step 1's take of finished jobs: a run of results off the ring first,
 * each record's lines asked for as it is popped, the run linked behind
 * `results`, the ready queue's one entry for them (step 2 runs their
 * dones through it, results_drain: no queue link and no class call per
 * job); then the credits of all runs given back at once. A record was
 * last written by the worker that ran it, on another core; fetched one at
 * a time, each miss waited in turn, which was most of this function's time.
 */
void tern__jobs_collect(tern_loop *loop)
{
    if (loop->ring == NULL)
        return;
    /*
     * The jobs taken wait behind `results`, unless it waits in the ready
     * queue with other ops behind it (a turn's budget ran out before it):
     * then each is queued as it comes, after those.
     */
    bool behind = !(loop->results.flags & TERN__OP_QUEUED) || loop->ready_tail == &loop->results;
    struct tern__op **link =
        loop->results_tail != NULL ? &loop->results_tail->ready_next : &loop->results_head;
    void *run[TERN__COLLECT_RUN];
    unsigned n, longs = 0;
    loop->jobs_taken = 0;
    do {
        n = tern__ring_pop_single_many(loop->ring, run, TERN__COLLECT_RUN);
        if (n == 0)
            break;
        for (unsigned i = 0; i < n; i++) {
            tern_job *job = run[i];
            tern__prefetch_write(&job->work.occupancy);
            tern__prefetch_write(&job->op);
        }
        for (unsigned i = 0; i < n; i++) {
            tern_job *job = run[i];
            longs += job->work.occupancy == TERN_LONG;
            if (!behind) {
                tern__op_ready(loop, &job->op);
            } else {
                *link = &job->op;
                link = &job->op.ready_next;
            }
        }
        loop->jobs_taken += n;
    } while (n == TERN__COLLECT_RUN);
    if (loop->jobs_taken == 0)
        return;
    release_credits(loop, loop->jobs_taken, longs);
    if (behind) {
        *link = NULL;
        loop->results_tail = tern__container_of(link, struct tern__op, ready_next);
        tern__op_ready(loop, &loop->results); /* nothing when it waits already */
    }
}

static int ensure_ring(tern_loop *loop)
{
    if (loop->ring != NULL)
        return 0;
    uint64_t n =
        loop->max_undelivered < loop->max_operations ? loop->max_undelivered : loop->max_operations;
    struct tern__ring *ring = tern__calloc_aligned(alignof(struct tern__ring), sizeof(*ring));
    if (ring == NULL)
        return -ENOMEM;
    int rc = tern__ring_init(ring, n);
    if (rc < 0) {
        tern__free_aligned(ring);
        return rc;
    }
    loop->ring = ring;
    return 0;
}

/*
 * Accept or refuse a job. Every refusal happens before the work exists
 * anywhere the pool can see it, and changes only its own counter.
 */
int tern__submit_job_with(tern_loop *loop, tern_occupancy occ, enum tern__work_kind kind,
                          tern_work_fn work, tern_done_fn done, void *arg,
                          const tern_job_options *opts, tern_id *idp, tern_job **jobp)
{
    TERN_INSIST(jobp == NULL || idp == NULL);
    loop->last_refusal = TERN_REFUSED_NONE;
    struct tern__owner *owner = NULL;
    uint64_t timeout = 0;
    int rc;
    if (opts != NULL) {
        if (opts->timeout_ns > TERN__DURATION_MAX_NS)
            return -EINVAL;
        timeout = opts->timeout_ns;
        if ((rc = tern__owner_check(loop, opts->owner, &owner)) < 0)
            return rc;
    }
    if ((rc = ensure_ring(loop)) < 0)
        return rc;
    if (loop->undelivered >= loop->max_undelivered)
        return tern__refuse(loop, TERN_REFUSED_UNDELIVERED);
    if ((rc = tern__op_admit(loop)) < 0)
        return rc == -EAGAIN ? tern__refuse(loop, TERN_REFUSED_OPERATIONS) : rc;
    if (timeout != 0 && (rc = tern__deadline_claim(loop)) < 0) {
        tern__op_unadmit(loop);
        return rc;
    }
    tern_job *job = job_alloc(loop);
    if (job == NULL) {
        rc = -ENOMEM;
        goto unadmit;
    }
    /* An owned job's links live beside its record: room for them first. */
    if (owner != NULL && (rc = tern__job_owned_reserve(loop, job)) < 0) {
        job_release(loop, job);
        goto unadmit;
    }
    job->work = (struct tern__work){.occupancy = (uint8_t)occ,
                                    .kind = (uint8_t)kind,
                                    .fn = work,
                                    .arg = arg,
                                    .client_byte = job->work.client_byte,
                                    .client_fn = (void (*)(void))done,
                                    .client_word = tern__job_gen(job) |
                                                   (timeout != 0 ? TERN__JOB_DEADLINE : 0)};
    if (jobp != NULL)
        tern__op_add_anon(loop, &job->op, &job_class);
    else
        tern__op_add_tabled(loop, &job->op, &job_class, tern__job_id_issue(job));
    tern_id id = job->op.id;
    /*
     * The job is registered; hand it over. Stamp the queue-wait start here,
     * not from the loop's cached clock, which a long step 2 leaves stale —
     * for one job in four: reading the clock was a twentieth of the loop's
     * cost per job, and a quarter of recent jobs is sample enough for
     * percentiles. (Run times are measured for every job, on the worker.)
     */
    job->work.t_submit = (loop->submits++ & 3) == 0 ? tern__work_stamp(tern__ticks()) : 0;
    loop->undelivered++;
    tern_refusal cause = TERN_REFUSED_NONE;
    /*
     * Inside steps 1 and 2 the push and the wake decision wait for the end
     * of the batch (tern__jobs_kick, after step 2): the jobs a turn's
     * callbacks submit go to the workers as runs from the loop's lane, not
     * one by one, and cost one wake check. Outside a turn
     * the caller may block next, so the job is pushed and wakes a worker
     * at once.
     */
    bool defer = loop->step == TERN__STEP_TAKE || loop->step == TERN__STEP_DISPATCH;
    if (defer && occ == TERN_BOUNDED && tern__lane_accept_held(&loop->lane, &job->work))
        rc = 0;
    else
        rc = tern__pool_accept(loop->has_pool_config ? &loop->pool_config : NULL,
                               &loop->pool_checked, &job->work, defer ? &loop->lane : NULL, &cause);
    if (rc < 0) {
        TERN_DECREMENT(loop->undelivered);
        /*
         * Never enqueued: retire the op without a trace (no done, no
         * stats). It is neither queued nor armed, so finishing it only
         * unregisters it; job_free leaves the record to us.
         */
        tern__op_finish(loop, &job->op);
        job_release(loop, job);
        if (timeout != 0)
            tern__deadline_unclaim(loop);
        return rc == -EAGAIN ? tern__refuse(loop, cause) : rc;
    }
    loop->jobs_live++;
    loop->kick_owed |= defer;
    loop->long_undelivered += occ == TERN_LONG;
    if (owner != NULL)
        tern__owner_link(owner, job);
    if (timeout != 0)
        tern__deadline_arm(loop, &job->op, loop->now + timeout);
    TERN_PROBE(job_submitted, loop, id, job, (int)occ);
    atomic_store_explicit(&loop->st_undelivered, loop->undelivered, memory_order_relaxed);
    if (loop->undelivered > atomic_load_explicit(&loop->st_undelivered_peak, memory_order_relaxed))
        atomic_store_explicit(&loop->st_undelivered_peak, loop->undelivered, memory_order_relaxed);
    if (idp != NULL)
        *idp = id;
    if (jobp != NULL)
        *jobp = job;
    return 0;

unadmit:
    if (timeout != 0)
        tern__deadline_unclaim(loop);
    tern__op_unadmit(loop);
    return rc;
}

int tern__submit_job(tern_loop *loop, tern_occupancy occ, enum tern__work_kind kind,
                     tern_work_fn work, tern_done_fn done, void *arg, tern_id *idp)
{
    return tern__submit_job_with(loop, occ, kind, work, done, arg, NULL, idp, NULL);
}

static int check_submit(tern_loop *loop, tern_occupancy occupancy, tern_work_fn work,
                        tern_done_fn done)
{
    loop->last_refusal = TERN_REFUSED_NONE; /* whatever this call returns, it is its own */
    if (work == NULL || done == NULL || (occupancy != TERN_BOUNDED && occupancy != TERN_LONG))
        return -EINVAL;
    if (tern__loop_closing(loop))
        return -ESHUTDOWN;
    return 0;
}

int tern_submit_with(tern_loop *loop, tern_occupancy occupancy, tern_work_fn work,
                     tern_done_fn done, void *arg, const tern_job_options *opts, tern_id *idp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    int rc = check_submit(loop, occupancy, work, done);
    if (rc < 0)
        return rc;
    return tern__submit_job_with(loop, occupancy, TERN__WORK_PLAIN, work, done, arg, opts, idp,
                                 NULL);
}

void tern_job_options_init(tern_job_options *opts)
{
    TERN_REQUIRE(opts != NULL);
    *opts = (tern_job_options){0};
}

int tern_submit(tern_loop *loop, tern_occupancy occupancy, tern_work_fn work, tern_done_fn done,
                void *arg, tern_id *idp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    int rc = check_submit(loop, occupancy, work, done);
    if (rc < 0)
        return rc;
    return tern__submit_job(loop, occupancy, TERN__WORK_PLAIN, work, done, arg, idp);
}

/* ------------------------------------------------------------------ */
/* Credits for other kinds (job_p.h)                                  */
/* ------------------------------------------------------------------ */

int tern__credit_check(tern_loop *loop)
{
    int rc = ensure_ring(loop);
    if (rc < 0)
        return rc;
    return loop->undelivered >= loop->max_undelivered ? tern__refuse(loop, TERN_REFUSED_UNDELIVERED)
                                                      : 0;
}

void tern__credit_take(tern_loop *loop)
{
    loop->undelivered++;
    loop->jobs_live++;
    atomic_store_explicit(&loop->st_undelivered, loop->undelivered, memory_order_relaxed);
    if (loop->undelivered > atomic_load_explicit(&loop->st_undelivered_peak, memory_order_relaxed))
        atomic_store_explicit(&loop->st_undelivered_peak, loop->undelivered, memory_order_relaxed);
}

void tern__credit_give(tern_loop *loop)
{
    TERN_DECREMENT(loop->undelivered);
    TERN_DECREMENT(loop->jobs_live);
    atomic_store_explicit(&loop->st_undelivered, loop->undelivered, memory_order_relaxed);
}

/* ------------------------------------------------------------------ */
/* Batches                                                             */
/* ------------------------------------------------------------------ */

/* Up to this many jobs, a batch's list for the pool lives on the stack. */
#define BATCH_ON_STACK 64

/*
 * Give back what a batch took before the pool refused it or memory ran
 * out: its first `made` jobs are registered ops (finishing one retires
 * its id and its operation unit), the other n - made operation units are
 * only admitted, and `claimed` deadline claims are held.
 */
static void batch_undo(tern_loop *loop, struct tern__work **works, unsigned made, unsigned n,
                       unsigned claimed)
{
    for (unsigned i = 0; i < made; i++) {
        tern_job *job = (tern_job *)works[i]; /* the header comes first */
        tern__op_finish(loop, &job->op);
        job_release(loop, job);
    }
    for (unsigned i = made; i < n; i++)
        tern__op_unadmit(loop);
    for (unsigned i = 0; i < claimed; i++)
        tern__deadline_unclaim(loop);
}

/*
 * Admission of a whole batch, every limit checked for all n at once and
 * in tern_submit's order, so a refused batch changes nothing but the
 * refusal counters. Returns 0 with n operation units and, with a
 * timeout, n deadline claims held, and the owner (or NULL) in *ownerp.
 * A loop being freed never gets here: check_submit refused the call.
 */
static int batch_admit(tern_loop *loop, unsigned n, const tern_job_options *opts,
                       struct tern__owner **ownerp)
{
    *ownerp = NULL;
    if (opts != NULL) {
        if (opts->timeout_ns > TERN__DURATION_MAX_NS)
            return -EINVAL;
        int rc = tern__owner_check_n(loop, opts->owner, n, ownerp);
        if (rc < 0)
            return rc;
    }
    int rc = ensure_ring(loop);
    if (rc < 0)
        return rc;
    if (loop->max_undelivered - loop->undelivered < n)
        return tern__refuse_n(loop, TERN_REFUSED_UNDELIVERED, n);
    /* tern__op_admit for n units at once: the room is checked for all of them. */
    uint64_t room = loop->ops_local + tern__posts_pending(loop);
    if (room >= loop->max_operations || loop->max_operations - room < n)
        return tern__refuse_n(loop, TERN_REFUSED_OPERATIONS, n);
    tern__ops_set(loop, loop->ops_local + n);
    if (opts != NULL && opts->timeout_ns != 0) {
        for (unsigned claimed = 0; claimed < n; claimed++) {
            if ((rc = tern__deadline_claim(loop)) < 0) {
                for (unsigned i = 0; i < n; i++)
                    tern__op_unadmit(loop);
                for (unsigned i = 0; i < claimed; i++)
                    tern__deadline_unclaim(loop);
                return rc;
            }
        }
    }
    return 0;
}

/*
 * Accept or refuse n bounded jobs as one (tern/batch.h). Records and ids
 * are made first, on the loop alone; then the pool takes the n queue
 * slots in one step and the jobs in one run of its ring, or refuses them
 * all, and everything made is undone.
 */
static int submit_batch(tern_loop *loop, tern_work_fn work, tern_done_fn done, void *const *args,
                        unsigned n, const tern_job_options *opts, tern_id *ids)
{
    struct tern__owner *owner;
    int rc = batch_admit(loop, n, opts, &owner);
    if (rc < 0)
        return rc;
    uint64_t timeout = opts != NULL ? opts->timeout_ns : 0;
    unsigned claimed = timeout != 0 ? n : 0;
    struct tern__work *on_stack[BATCH_ON_STACK];
    struct tern__work **works = n <= BATCH_ON_STACK ? on_stack : tern__malloc(n * sizeof(*works));
    if (works == NULL) {
        batch_undo(loop, NULL, 0, n, claimed);
        return -ENOMEM;
    }
    unsigned made = 0;
    for (; made < n; made++) {
        tern_job *job = job_alloc(loop);
        if (job == NULL) {
            rc = -ENOMEM;
            goto undo;
        }
        if (owner != NULL && (rc = tern__job_owned_reserve(loop, job)) < 0) {
            job_release(loop, job);
            goto undo;
        }
        job->work = (struct tern__work){.occupancy = TERN_BOUNDED,
                                        .kind = TERN__WORK_PLAIN,
                                        .fn = work,
                                        .arg = args[made],
                                        .client_byte = job->work.client_byte,
                                        .client_fn = (void (*)(void))done,
                                        .client_word = tern__job_gen(job) |
                                                       (timeout != 0 ? TERN__JOB_DEADLINE : 0)};
        tern__op_add_tabled(loop, &job->op, &job_class, tern__job_id_issue(job));
        /* The queue-wait stamp of one job in four, as tern__submit_job_with. */
        job->work.t_submit = (loop->submits++ & 3) == 0 ? tern__work_stamp(tern__ticks()) : 0;
        works[made] = &job->work;
    }
    /*
     * As a single submission: inside steps 1 and 2 the turn makes the wake
     * decision (the lane's jobs, submitted earlier, are pushed first).
     */
    bool defer = loop->step == TERN__STEP_TAKE || loop->step == TERN__STEP_DISPATCH;
    tern_refusal cause = TERN_REFUSED_NONE;
    rc = tern__pool_accept_batch(loop->has_pool_config ? &loop->pool_config : NULL,
                                 &loop->pool_checked, works, n, defer ? &loop->lane : NULL, &cause);
    if (rc < 0) {
        batch_undo(loop, works, n, n, claimed);
        if (works != on_stack)
            free(works);
        return rc == -EAGAIN ? tern__refuse_n(loop, cause, n) : rc;
    }
    loop->undelivered += n;
    loop->jobs_live += n;
    loop->kick_owed |= defer;
    for (unsigned i = 0; i < n; i++) {
        tern_job *job = (tern_job *)works[i];
        if (owner != NULL)
            tern__owner_link(owner, job);
        if (timeout != 0)
            tern__deadline_arm(loop, &job->op, loop->now + timeout);
        if (ids != NULL)
            ids[i] = job->op.id;
        TERN_PROBE(job_submitted, loop, job->op.id, job, (int)TERN_BOUNDED);
    }
    atomic_store_explicit(&loop->st_undelivered, loop->undelivered, memory_order_relaxed);
    if (loop->undelivered > atomic_load_explicit(&loop->st_undelivered_peak, memory_order_relaxed))
        atomic_store_explicit(&loop->st_undelivered_peak, loop->undelivered, memory_order_relaxed);
    if (works != on_stack)
        free(works);
    return 0;

undo:
    batch_undo(loop, works, made, n, claimed);
    if (works != on_stack)
        free(works);
    return rc;
}

int tern_submit_batch(tern_loop *loop, tern_occupancy occupancy, tern_work_fn work,
                      tern_done_fn done, void *const *args, size_t n, const tern_job_options *opts,
                      tern_id *ids)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    int rc = check_submit(loop, occupancy, work, done);
    if (rc < 0)
        return rc;
    if (occupancy != TERN_BOUNDED || args == NULL || n == 0 || n > TERN_BATCH_MAX)
        return -EINVAL;
    return submit_batch(loop, work, done, args, (unsigned)n, opts, ids);
}
