/*
 * Batch submission: many bounded jobs handed to the pool in one call,
 * with one admission step and at most one wake-up. Included by tern.h.
 *
 * The narrative is in docs/pool.md ("Batches"); why a batch is all or
 * nothing is in docs/decisions.md.
 */
#ifndef TERN_BATCH_H
#define TERN_BATCH_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The most jobs one tern_submit_batch call may carry. */
#define TERN_BATCH_MAX 65536

/*
 * tern_submit_batch: submit n bounded jobs at once, job i running
 * work(job, args[i]) and then done(loop, ids[i], status, result,
 * args[i]), each exactly as a tern_submit_with job with opts (the same
 * owner and timeout for every job of the batch). The batch is admitted in
 * one step: the owner's cap, the loop's credits and operations, and the
 * bounded queue's slots are checked for all n together, and a sleeping
 * worker is woken at most once for the whole batch (inside a turn's
 * steps 1 and 2, not at all until the turn's one wake decision).
 * All or nothing: either every job is accepted, or none is and the call
 * leaves nothing behind (no id, no done, no credit, no slot, no owner
 * count; only the refusal counters move).
 * Requires: loop != NULL.
 * Returns: 0 and, if ids != NULL, ids[0..n-1]; -EINVAL for NULL work,
 *          done or args, n == 0 or n > TERN_BATCH_MAX, an occupancy other
 *          than TERN_BOUNDED (long jobs have no queue to batch into), or
 *          opts as tern_submit_with; -EAGAIN when the whole batch does
 *          not fit (tern_loop_last_refusal names the limit; the pool's
 *          refused_<cause> counter and the owner's refused count grow by
 *          n, one per job refused); -ESHUTDOWN while the loop is being
 *          freed; -ENOMEM; an errno from starting the pool.
 * Ownership: args (the array) is read during the call only; each args[i]
 *          stays the caller's, as tern_submit's arg. ids, if not NULL,
 *          has room for n ids and is written only on success.
 * Threads: loop-only (from another thread, tern_post to the loop first).
 */
TERN_EXTERN int tern_submit_batch(tern_loop *loop, tern_occupancy occupancy, tern_work_fn work,
                                  tern_done_fn done, void *const *args, size_t n,
                                  const tern_job_options *opts, tern_id *ids);

#ifdef __cplusplus
}
#endif

#endif
