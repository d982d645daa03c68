/*
 * What pool/ exports: the process-wide blocking pool, which runs work and
 * knows nothing of loops. The runtime (runtime/jobs/job.c) is its one client.
 *
 * The interface is four things:
 *   - a work header (struct tern__work) the client embeds first in its own
 *     record of a job;
 *   - tern__pool_accept, which admits a header into a class (bounded or
 *     long) and starts the pool on demand;
 *   - the client's hand-back function (tern__pool_handback), the one call
 *     the pool makes into its client: once per accepted header, when the
 *     work is finished (or, for a tombstone, when the pool lets go of it);
 *   - configuration checks, the exclusive-mode hold, and the statistics
 *     counters the client writes its own outcomes into.
 * It includes the headers of the parts the client touches directly: the
 * work header and its state word's questions (work.h), the counters
 * (stats.h), the lane (bounded.h), the configuration check (env.h) and
 * the hand-back slots (worker.h). Worker threads, the queue's insides,
 * the long class, the lookup cap and the shutdown are private to pool/
 * (pool_p.h and each file's header). pool/ includes headers from
 * backends/ and include/ only, and this is the one header of pool/ a
 * higher layer may include; test/layers_test.sh checks both.
 */
#ifndef TERN_POOL_H
#define TERN_POOL_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bounded.h"
#include "check.h"
#include "env.h"
#include "stats.h"
#include "tern.h"
#include "work.h"
#include "worker.h"

/*
 * Admit w into its class and hand it to the pool, starting the pool with
 * cfg if none runs (NULL cfg adopts any). *checked caches the generation
 * whose configuration was last found equal to cfg, so the comparison is
 * paid once per pool start.
 * Requires: w's fields written, state QUEUED.
 * Returns 0 (w now belongs to the pool until its hand-back), -EINVAL
 * (cfg conflicts with the running pool), -EAGAIN with *cause set
 * (TERN_REFUSED_QUEUE_FULL, _LONG_CEILING, _SHUTDOWN while a shutdown
 * runs, or _THREADS when pthread_create refused the pool's start or a long
 * thread), -ENOMEM; on failure w was never seen
 * by a worker. Statistics of refusals are the client's to count.
 * With a lane (non-NULL), a bounded header is admitted into the lane, not
 * yet the queue, and no sleeping worker is woken: the caller owes a
 * tern__pool_kick(lane) before it waits for anything (a loop makes one
 * push and one wake decision per turn's submissions this way). A header
 * in a lane can be stopped (tern__work_stop) as a queued one. Long
 * headers ignore the lane: they are handed to a thread at once.
 * Any thread.
 */
int tern__pool_accept(const tern_pool_config *cfg, uint64_t *checked, struct tern__work *w,
                      struct tern__lane *lane, tern_refusal *cause);

/* A shutdown has begun (pool.c). Read by the lane's admission below. */
extern __attribute__((visibility("hidden"))) _Atomic bool tern__pool_closing;
/*
 * tern__pool_accept's common case with a lane, inline in the submitter:
 * a bounded header admitted on credit the lane already holds. That
 * credit was taken from the lane's pool against the caller's
 * configuration, and its units keep that pool current (a shutdown waits
 * for them), so only a shutdown begun since refuses it. False when the
 * lane holds no credit or a shutdown has begun: tern__pool_accept decides.
 */
static inline bool tern__lane_accept_held(struct tern__lane *lane, struct tern__work *w)
{
    if (lane->credit == 0 ||
        TERN_UNLIKELY(atomic_load_explicit(&tern__pool_closing, memory_order_seq_cst)))
        return false;
    tern__lane_spend(lane, w);
    return true;
}

/*
 * Admit n bounded headers as one batch: one count-in, one step that takes
 * n queue slots or none (queued + reserved + n within queue_capacity),
 * one run of ring positions, and one wake decision (none with a lane,
 * whose held headers are pushed first so the queue keeps the caller's
 * order: the caller then owes a tern__pool_kick(lane), as for
 * tern__pool_accept).
 * All or nothing: on failure no header was seen by a worker and nothing
 * is left counted.
 * Requires: n > 0; every header's fields written, state QUEUED, class
 * TERN_BOUNDED, kind TERN__WORK_PLAIN.
 * Returns: as tern__pool_accept (causes QUEUE_FULL, SHUTDOWN, THREADS).
 * Any thread.
 */
int tern__pool_accept_batch(const tern_pool_config *cfg, uint64_t *checked,
                            struct tern__work *const *jobs, unsigned n, struct tern__lane *lane,
                            tern_refusal *cause);

/* Wake decisions the pool made for submissions, ever: one per single
 * submission, one per batch, one per kick that found work queued (a test
 * seam, reached through runtime/core/testing.h). */
uint64_t tern__test_pool_wake_checks(void);

/*
 * Push what the lane holds into the queue as one run, then wake a
 * sleeping bounded worker if the queue holds work: the one wake decision
 * owed for a run of accepts into a lane. Harmless when nothing is owed.
 * During a shutdown it only pushes; the shutdown wakes the workers
 * itself. The lane's thread.
 */
void tern__pool_kick(struct tern__lane *lane);

/* Whether cfg differs from the running pool's (false when none runs). Any thread. */
bool tern__pool_config_conflicts(const tern_pool_config *cfg);
/* Whether any pool worker is on a CPU now (running a job, or spinning for one). A snapshot. */
bool tern__pool_active(void);
/* Whether the process-wide pool is running now (a test seam too). */
bool tern__pool_running(void);
/* Bounded workers parked now (inside park, asleep or about to be); 0 with
 * no pool (a test seam, reached through runtime/core/testing.h). */
unsigned tern__test_pool_sleepers(void);
/*
 * The pause gate's windows, held open by a test (pool/stops.c). Hold a
 * window, let a thread walk into it (the count of threads waiting there
 * says when), then release it:
 *   past gate:  the next bounded workers to pass the pause gate stop as
 *               if they had read it open, before they take their job;
 *   pool start: the next pool start stops with its workers running and
 *               the pool not yet published (start_lock held).
 * tern__test_pool_holds: exclusive-mode holds taken now.
 */
void tern__test_hold_past_gate(void);
void tern__test_release_past_gate(void);
unsigned tern__test_waiting_past_gate(void);
void tern__test_hold_pool_start(void);
void tern__test_release_pool_start(void);
unsigned tern__test_waiting_pool_start(void);
unsigned tern__test_pool_holds(void);
/* Entries taken in runs by bounded workers, not yet started or put back (batch take). */
unsigned tern__test_pool_run_left(void);
/*
 * The repayment's windows (pool/stops.c). Hold both: a bounded worker
 * that repays its run's owed slots stops after it has marked them and
 * before the queued count has them back (repaying), and a thread that
 * meets such a mark stops before it waits it out (repayment waited).
 * Release each on its own; the counts say who waits where.
 */
void tern__test_hold_repaying(void);
void tern__test_release_repaying(void);
void tern__test_release_repayment_waited(void);
unsigned tern__test_waiting_repaying(void);
unsigned tern__test_waiting_repayment_waited(void);

/*
 * Exclusive mode's hold on the pool (pool/gate.c). tern__pool_hold makes
 * every bounded worker stop before its next job and returns once none
 * runs one (long workers are not held); tern__pool_unhold lets them go.
 * Holds nest and may come from several threads; each hold is given back
 * by one unhold. Any thread but a bounded pool worker.
 */
void tern__pool_hold(void);
void tern__pool_unhold(void);
/* Whether the calling thread is a bounded worker of the running pool. */
bool tern__pool_on_bounded_worker(void);

/*
 * The size of the client's record around a work header (runtime/jobs/job.c
 * stores it as it sets a loop up): the pool's memory figure counts one
 * per job in flight (tern_pool_stats.memory_bytes). 0: the header's size.
 */
extern __attribute__((visibility("hidden"))) _Atomic size_t tern__pool_record_bytes;

#endif
