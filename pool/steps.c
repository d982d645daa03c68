/*
 * Requests of several steps (SPEC §13): one job, one id, one credit, run
 * as a sequence of passes through the bounded queue. Between passes the
 * worker is free for other work, so a large file read in chunks never
 * holds a worker for its whole length.
 *
 * The slot. A steps job holds exactly one slot of the bounded queue from
 * acceptance to its last step: queued while a step waits, reserved while
 * a step runs (a take, bounded.c, turns one into the other in one atomic add).
 * When a step says another follows, the reservation becomes the queued
 * slot again, so the next step can never be refused for a full queue; when
 * the request ends, the reservation is given back.
 *
 * Cancellation. Between passes the job is QUEUED again, so tern_cancel
 * tombstones it exactly as it does an ordinary queued job: the loop
 * delivers done at once with a NULL result (the request's done function
 * then closes what the finished steps opened), and the stop gives the
 * queued slot back at once (stats.h, tombstones). A cancel that lands
 * while a step runs is seen by the work function at the start of its next
 * pass.
 */
#include "bounded.h"
#include "pool_p.h"
#include "steps.h"
#include "probe.h"

bool tern__steps_run(struct tern__pool *p, struct tern__work *job, unsigned worker)
{
    /* Claimed by the worker (tern__queue_claim): its queued slot is now its reservation. */
    uint64_t start = tern__ticks();
    if (job->t_submit != 0)
        tern__hist_record(&tern__pool_wait_hist[worker], tern__work_waited(job->t_submit, start), 1,
                          false);
    /*
     * During a cancelling shutdown the step still runs: it sees
     * tern_job_cancelled() and undoes what earlier steps opened.
     */
    (void)tern__work_started(job);
    TERN_PROBE(job_started, job, (int)job->occupancy);
    void *result = job->fn((tern_job *)job, job->arg);
    tern__work_returned(job);
    uint64_t end = tern__ticks();
    tern__hist_record(&tern__pool_run_hist[worker], end - start, 1, false);
    if (result == NULL) {
        /*
         * Another step follows. Once the state says QUEUED (stored by
         * tern__bounded_submit_reserved, after the slot is queued again)
         * the loop may tombstone the job and free the request behind
         * job->arg, so nothing here reads the request after this call; the
         * job record itself stays ours until a worker claims it from the
         * queue. The store's release pairs with the acquire of
         * job_cancel()'s CAS (which reads what this step wrote into the
         * request) and of the claim.
         */
        job->t_submit = tern__work_stamp(end);
        tern__bounded_submit_reserved(p, job);
        return false; /* nothing handed back: the loop was not woken */
    }
    tern__bounded_unreserve();
    job->result = result;
    atomic_store_explicit(&job->state, TERN__WORK_FINISHED, memory_order_release);
    return tern__work_complete(job); /* and out of tern__pool_inflight: one accept, one leave */
}
