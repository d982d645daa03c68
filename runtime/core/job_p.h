/*
 * Jobs, an operation kind of the loop beside timers and defers
 * (runtime/jobs/job.c): submission and admission (every limit in one place),
 * credits, cancellation and its outcomes, the result ring, dispatch of
 * done, and the books audit; owners (owner.c) and refusal causes
 * (refusal.c) below them. The pool (pool/pool.h) runs the
 * work; a job touches it at accept, at a worker's claim and run, and at
 * the hand-back, which pushes the job onto its loop's result ring.
 */
#ifndef TERN_JOB_P_H
#define TERN_JOB_P_H

#include "loop_p.h"
#include "pool.h"
#include "ring.h"

struct tern__owner;

struct tern__job_chunk;

/*
 * A job record, from its loop's chunks (job_slab.c): the loop reuses it
 * once done has run, unless a pool thread still holds it (a tombstone the
 * queue has not yet dropped), which then hands it back to the chunk.
 *
 * It is the two headers and nothing else; what is the job's own sits in
 * their spare room:
 *   work.client_fn    its done (a tern_done_fn);
 *   work.client_byte  its offset in its chunk, which finds the chunk, and
 *                     through it the loop (tern__job_chunk);
 *   work.client_word  the generation its next id gets (job_slab.c), and
 *                     TERN__JOB_DEADLINE: it holds a heap claim (a timeout);
 *   op.flags          TERN__OP_OWN: its deadline took effect (timed out).
 */
struct tern_job {
    struct tern__work work; /* first: the pool's view, and the public tern_job * */
    struct tern__op op;     /* id, ready link, deadline */
};
/* The header first: the pool's tern__work * and the public tern_job * are
 * the record's address (job_handback and tern_job_cancelled cast it). */
_Static_assert(offsetof(struct tern_job, work) == 0, "the work header comes first");
/* The work header (what a worker touches) and the op header: 80 bytes. An
 * owner's links are kept beside the chunk's records (struct
 * tern__job_owned), for owned jobs only; a further field here makes every
 * job (in their millions) dearer. */
_Static_assert(sizeof(struct tern_job) == 80, "a job record is 80 bytes");

#define TERN__JOB_DEADLINE (UINT32_C(1) << 31)
#define TERN__JOB_GEN_MASK (TERN__JOB_DEADLINE - 1)
/* The generation goes up to TERN__GEN_LIMIT (retired there): it fits below the flag. */
_Static_assert(TERN__GEN_LIMIT <= TERN__JOB_GEN_MASK, "the generation fits its bits");

static inline uint32_t tern__job_gen(const tern_job *job)
{
    return job->work.client_word & TERN__JOB_GEN_MASK;
}
static inline bool tern__job_has_deadline(const tern_job *job)
{
    return (job->work.client_word & TERN__JOB_DEADLINE) != 0;
}
static inline bool tern__job_timed_out(const tern_job *job)
{
    return (job->op.flags & TERN__OP_OWN) != 0;
}

/* An owned job's place on its owner's list (owner.c), beside its record. */
struct tern__job_owned {
    struct tern__owner *owner; /* whose cap it counts against, or NULL */
    tern_job *prev, *next;     /* the owner's jobs in flight */
};

/*
 * A chunk of a loop's job records (job_slab.c). `returned` and `held` are
 * the only fields a pool thread touches: the records it hands back, and
 * twice the count of records it still holds, bit 0 set once the loop is
 * gone (the last hand-back then frees the chunk).
 */
struct tern__job_chunk {
    struct tern__job_chunk *next; /* the loop's chunks */
    tern_loop *loop;
    uint32_t cap;                  /* records in recs, at most 256 (an offset is a byte) */
    uint32_t no;                   /* its number, in its records' ids (numbers.c) */
    struct tern__job_owned *owned; /* by record; NULL until one is owned */
    _Atomic uint32_t held;
    uint32_t nfree; /* of its records on the loop's free list, as a trim counts them */
    _Atomic(tern_job *) returned;
    tern_job recs[];
};

/* The chunk job lives in: its offset back to recs[0], then the header. */
static inline struct tern__job_chunk *tern__job_chunk(const tern_job *job)
{
    uintptr_t first = (uintptr_t)(job - job->work.client_byte);
    return (struct tern__job_chunk *)(first - offsetof(struct tern__job_chunk, recs));
}

/*
 * The records (job_slab.c), loop thread unless said: alloc takes a free
 * one (NULL: out of memory); release gives one back for reuse; held
 * says the loop let go of one the pool still holds (tern__work_let_go
 * said false); returned is the hand-back of such a one, on a pool
 * thread; bytes is what the chunks take; records_destroy frees the
 * chunks, leaving any still held to the hand-back of their last record.
 */
tern_job *tern__job_alloc(tern_loop *loop);
void tern__job_release(tern_loop *loop, tern_job *job);
void tern__job_held(tern_loop *loop, tern_job *job);
/* Room for job's owner links: 0 or -ENOMEM. Then tern__job_owned_of finds them. */
int tern__job_owned_reserve(tern_loop *loop, tern_job *job);
/* job's owner links, or NULL when none of its chunk's jobs was ever owned. */
static inline struct tern__job_owned *tern__job_owned_of(const tern_job *job)
{
    struct tern__job_chunk *c = tern__job_chunk(job);
    return c->owned != NULL ? &c->owned[job->work.client_byte] : NULL;
}
/* A new id for job, which names its place (op_types.h, TERN__JOB_ID). */
tern_id tern__job_id_issue(tern_job *job);
void tern__job_returned(tern_job *job);
uint64_t tern__job_bytes(const tern_loop *loop);
void tern__job_records_destroy(tern_loop *loop);
/*
 * Give back the chunks whose records are all free, beyond the free
 * records a loop keeps for reuse (TERN__JOB_FREE_KEPT). It walks the free
 * list, so it is due only when that can pay: once the free records have
 * doubled since the last trim left them, or when the loop holds no credit
 * (every job it had is delivered, so its free records fill whole chunks)
 * and the count has moved since. The loop's thread, between steps (the
 * turn's kick, job.c).
 */
#define TERN__JOB_FREE_KEPT 1024u
void tern__job_records_trim(tern_loop *loop);
static inline bool tern__job_records_trim_due(const tern_loop *loop)
{
    if (loop->job_nfree < 2 * TERN__JOB_FREE_KEPT)
        return false;
    return loop->job_nfree >= loop->job_trim_at ||
           (loop->undelivered == 0 && loop->job_nfree != loop->job_trim_left);
}

/*
 * Admit and hand over a job of any kind (tern_submit, tern_resolve, file
 * requests), with an owner and a timeout when opts is not NULL.
 * Returns 0 and the id in *idp (if not NULL), or -EINVAL, -ESHUTDOWN,
 * -ENOMEM, or -EAGAIN with the cause kept for tern_loop_last_refusal.
 * With jobp not NULL (and idp NULL) the job is the runtime's own: it gets
 * no id, so no public call can reach it, and *jobp is the record, valid
 * until its done has run (resolve.c's lookups for connects).
 * On failure nothing of the job exists: arg still belongs to the caller.
 * Loop thread.
 */
int tern__submit_job_with(tern_loop *loop, tern_occupancy occ, enum tern__work_kind kind,
                          tern_work_fn work, tern_done_fn done, void *arg,
                          const tern_job_options *opts, tern_id *idp, tern_job **jobp);
int tern__submit_job(tern_loop *loop, tern_occupancy occ, enum tern__work_kind kind,
                     tern_work_fn work, tern_done_fn done, void *arg, tern_id *idp);

/*
 * A name lookup the runtime starts for itself (resolve.c): as
 * tern_resolve, but the job has no public id (an anonymous op, never in
 * the id map); *jobp is the only way to reach it, valid until cb has run
 * (cb is given id 0). cancel asks
 * it to stop (cb then comes with -ECANCELED unless the result was in);
 * calling it again changes nothing. Loop thread.
 */
int tern__lookup_start(tern_loop *loop, const char *host, const char *service,
                       const struct addrinfo *hints, tern_resolve_cb cb, void *arg,
                       tern_job **jobp);
void tern__lookup_cancel(tern_loop *loop, tern_job *job);

/* A lookup's deadline passed while it runs: answer its caller now (resolve.c;
 * job.c calls it through loop->lookup_expired). Loop thread. */
void tern__lookup_expired(tern_loop *loop, tern_job *job);

/*
 * The loop's hooks (loop.c, turn.c), loop thread: init and destroy the
 * loop's job state (destroy waits out pool threads still handing a job
 * back); collect moves completions from the result ring to the ready
 * queue (step 1); pending says whether the ring holds any now; check_books
 * is the jobs' share of the TERN_CHECK_BOOKS audit; kick pushes the jobs
 * submitted in steps 1 and 2 from the loop's lane and makes the one wake
 * decision owed for them (turn.c, after step 2: tern__pool_accept's lane).
 */
int tern__jobs_init(tern_loop *loop);
void tern__jobs_destroy(tern_loop *loop);
/* Step 1 takes finished jobs off the ring in runs of this many; it sets
 * loop->jobs_taken to how many it took (turn.c reads it). */
#define TERN__COLLECT_RUN 16
void tern__jobs_collect(tern_loop *loop);
bool tern__jobs_pending(tern_loop *loop);
void tern__jobs_check_books(tern_loop *loop);
void tern__jobs_kick(tern_loop *loop);

/*
 * Credits and owners for operations that are not jobs but are accepted and
 * delivered like them (external waits, wait.c). Loop thread.
 *   owner_check: for owner id (0: none) *ownerp, 0; -EINVAL for an unknown
 *     or closed owner; -EAGAIN with TERN_REFUSED_OWNER_CAP (counted).
 *   owner_hold: op now counts against o until owner_drop (when its done is
 *     about to start); closing o cancels op through its class.
 *   credit_check: 0, -ENOMEM, or -EAGAIN with TERN_REFUSED_UNDELIVERED;
 *     credit_take / credit_give hold one max_undelivered credit (and count
 *     the op among the accepted-not-done the books compare it with).
 *   refuse_operations: -EAGAIN with TERN_REFUSED_OPERATIONS (counted).
 * (Owners are owner.c's, refusals refusal.c's, credits job.c's.)
 */
struct tern__owned {
    struct tern__op *op;
    struct tern__owner *owner; /* NULL once dropped */
    struct tern__owned *prev, *next;
};
int tern__owner_check(tern_loop *loop, tern_id id, struct tern__owner **ownerp);
void tern__owner_hold(struct tern__owner *o, struct tern__owned *link, struct tern__op *op);
void tern__owner_drop(struct tern__owned *link);
int tern__credit_check(tern_loop *loop);
void tern__credit_take(tern_loop *loop);
void tern__credit_give(tern_loop *loop);
int tern__refuse_operations(tern_loop *loop);

/*
 * The claims of an op that is not a job but is accepted and delivered like
 * one (external waits; the ring's file requests, fs/fs_ring.c), taken and
 * given back in one place (wait.c). Loop thread.
 *   outside_admit: the refusals in a job's order, closing (-ESHUTDOWN),
 *     timeout_ns past TERN__DURATION_MAX_NS (-EINVAL), the owner's, the
 *     credit's, max_operations, a deadline slot; nothing held when it
 *     fails. 0 holds an admission and, with a timeout, a deadline claim.
 *   outside_unadmit: gives them back (the op could not be made).
 *   outside_bind: once tern__op_add gave op its id: takes the credit,
 *     holds the owner, arms the deadline, stores the id in *idp.
 *   outside_finish: in dispatch, before done runs: the op is retired (its
 *     id stale, its record freed) and every claim is given back.
 */
struct tern__outside {
    struct tern__owner *owner;
    uint64_t timeout_ns;
};
int tern__outside_admit(tern_loop *loop, uint64_t timeout_ns, tern_id owner,
                        struct tern__outside *o);
void tern__outside_unadmit(tern_loop *loop, const struct tern__outside *o);
void tern__outside_bind(tern_loop *loop, const struct tern__outside *o, struct tern__op *op,
                        struct tern__owned *owned, tern_id *idp);
void tern__outside_finish(tern_loop *loop, struct tern__op *op, struct tern__owned *owned,
                          bool had_deadline);

/*
 * A job's link to its owner (owner.c), for job.c: link counts the job
 * against o at acceptance; unlink, when its done is about to start, stops
 * counting it (and frees a closed owner whose last job this was).
 */
void tern__owner_link(struct tern__owner *o, tern_job *job);
void tern__owner_unlink(tern_job *job);
/*
 * A resource refusal (refusal.c): -EAGAIN, with cause kept for
 * tern_loop_last_refusal and counted in the pool's statistics.
 */
int tern__refuse(tern_loop *loop, tern_refusal cause);
/* The same for n jobs refused at once (a batch), and an owner's check for
 * n (tern__owner_check is n = 1). */
int tern__refuse_n(tern_loop *loop, tern_refusal cause, unsigned n);
int tern__owner_check_n(tern_loop *loop, tern_id id, unsigned n, struct tern__owner **ownerp);

/*
 * The result ring is backends/ring.h's ring with one consumer, the loop: a
 * credit (undelivered) is taken at submission and given back only after
 * the job's slot was freed, so it is never full (ring.h's full-slot rule).
 * Its `pins` word counts pool threads inside job_handback's push + wake.
 */

#endif
