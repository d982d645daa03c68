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
 * Worker threads, the queue, the long class, the lookup cap and the
 * shutdown are private to pool/ (pool_p.h). pool/ includes headers from
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

#include "check.h"
#include "tern.h"

/*
 * What a worker does with a header of the bounded class. LOOKUP runs under
 * the lookup cap (pool/lookup.c). STEPS runs one step per pass: fn returns
 * NULL while another step follows, and the header goes back into the
 * queue on its reservation (pool/steps.c).
 */
enum tern__work_kind { TERN__WORK_PLAIN = 0, TERN__WORK_LOOKUP = 1, TERN__WORK_STEPS = 2 };

struct tern__work;

/*
 * The hand-back: the client's, called by a pool thread at most once per
 * accepted header, and the pool never touches the header after it. Either
 * the work is done (tern__work_finished(w): result set, cancel latched if
 * it was), or w is a stopped header both sides have now let go of, which
 * the client frees (the pool does not know how it was allocated). A stopped
 * header the client still holds is not handed back: the client frees it
 * when tern__work_let_go says so.
 * Returns true when handing back woke a sleeping thread with a system
 * call (a worker then parks at once rather than spin for more work).
 */
typedef bool (*tern__handback_fn)(struct tern__work *w);
/*
 * Hand-back slots. Every bounded worker (fixed or overflow) has one word
 * of its own, reached through this thread-local pointer (NULL on every
 * other thread: a long thread, a shutdown's), where its hand-back names
 * what it must keep alive until it returns: a release store of the
 * object before the hand-back's push, and of NULL after its last touch.
 * Plain stores on the worker's own line, where a shared count would move
 * a line between workers twice per job. tern__pool_handing says whether
 * some worker's slot names target now (acquire loads): a client that has
 * taken every header handed back to target (each push acquired) and then
 * finds target named nowhere knows no worker will touch it again.
 */
extern _Thread_local _Atomic(const void *) *tern__pool_hand_slot
    __attribute__((tls_model("initial-exec")));
bool tern__pool_handing(const void *target);
/*
 * The client's one hand-back, for every header: it stores it (relaxed)
 * before its first tern__pool_accept, always the same function, and pool
 * threads load it (relaxed) as they hand a header back. One word for the
 * process rather than one in every header: the header's last word is the
 * client's (`client`).
 */
extern _Atomic(tern__handback_fn) tern__pool_handback;

/*
 * The work header. The client embeds it FIRST in its record: the public
 * `tern_job *` a work function receives is the header's address (so
 * tern_job_cancelled, defined here, reads it), and the client turns it
 * back into its record with a cast. The client writes every field before
 * tern__pool_accept (state zero); from then on the pool owns fn, arg,
 * result, t_submit and cancel_window until the hand-back. The three
 * `client_` fields are the client's alone (the runtime keeps a job's done,
 * generation and place in its chunk there): the pool never reads or
 * writes them, and the client may write them while the pool owns the rest. The state word
 * is the pool's alone (pool_p.h): the client never reads or writes it, it
 * asks the questions below (tern__work_stop, tern__work_finished,
 * tern__work_let_go).
 */
struct tern__work {
    _Atomic uint8_t state;  /* the pool's (pool_p.h, enum tern__work_state) */
    _Atomic bool cancel;    /* tern_job_cancelled(); latched, never cleared */
    uint8_t occupancy;      /* tern_occupancy: the class */
    uint8_t kind;           /* enum tern__work_kind */
    uint16_t cancel_window; /* pool: cancelling shutdowns begun when it started */
    _Atomic bool unrun;     /* pool: a cancelling shutdown stopped it before it ran */
    uint8_t client_byte;    /* the client's */
    tern_work_fn fn;
    void *arg;
    void *result;
    uint32_t t_submit;    /* tern__work_stamp() at acceptance, or 0: not timed */
    uint32_t client_word; /* the client's */
    void (*client_fn)(void); /* the client's (a function of its own type, cast) */
};
/*
 * Layout pin: 48 bytes, the state word first. The client's record wraps
 * this header and its own fields in two cache lines (pool/lookup.c says
 * why the header takes no queue link); a field added here takes every
 * job's record to a third line, and must move this pin knowingly.
 */
_Static_assert(offsetof(struct tern__work, state) == 0, "the state word comes first");
_Static_assert(offsetof(struct tern__work, fn) == 8, "the flags fit the first word");
_Static_assert(offsetof(struct tern__work, client_byte) == 7, "the client's byte ends the first word");
_Static_assert(sizeof(struct tern__work) == 48, "the work header is six words");

/*
 * A queue-wait stamp (t_submit): tern__ticks() in units of 2^8 ticks, in
 * 32 bits, never 0 (0 says "not timed"). A wait is the difference of two
 * stamps, so it is exact to 256 ticks (about 0.1 us) and wraps after 2^40
 * ticks (minutes): a job that waited longer is recorded as waiting the
 * remainder. A wait across threads is microseconds: the unit is well
 * below what the histograms tell apart there.
 */
#define TERN__STAMP_SHIFT 8
static inline uint32_t tern__work_stamp(uint64_t ticks)
{
    uint32_t s = (uint32_t)(ticks >> TERN__STAMP_SHIFT);
    return s != 0 ? s : 1;
}
/* Ticks from stamp `since` to `ticks`. */
static inline uint64_t tern__work_waited(uint32_t since, uint64_t ticks)
{
    return (uint64_t)(uint32_t)(tern__work_stamp(ticks) - since) << TERN__STAMP_SHIFT;
}

/*
 * What a stop did (tern__work_stop). Each names what the client owes:
 *   STOPPED_NOW      w was queued and is now stopped: its work never runs,
 *                    its result is NULL, and nothing more comes back for it
 *                    but, maybe, the final hand-back to free it. The client
 *                    delivers its outcome itself, now.
 *   STOPPED_BEFORE   an earlier stop stopped it, or a cancelling shutdown
 *                    did before its work ran; nothing changes.
 *   TOLD_NOW         w was running (or had just returned): its cancel flag
 *                    is now set, and its hand-back comes as usual.
 *   TOLD_BEFORE      the flag was set earlier (a stop, or a cancelling
 *                    shutdown), whether or not the work has returned since.
 *   FINISHED         the work returned before any stop; nothing changes.
 */
enum tern__stop {
    TERN__STOP_STOPPED_NOW,
    TERN__STOP_STOPPED_BEFORE,
    TERN__STOP_TOLD_NOW,
    TERN__STOP_TOLD_BEFORE,
    TERN__STOP_FINISHED,
};

/*
 * Ask the pool to stop w: tombstone it if still queued (one compare-and-
 * swap), else set its cancel flag. Requires: w accepted, and the client
 * has not let go of it (tern__work_let_go). Client's thread only (one
 * stopper per header).
 */
enum tern__stop tern__work_stop(struct tern__work *w);

/*
 * In the hand-back: whether w is finished work (true) or a stopped header
 * for the client to free (false). Acquire: pairs with the pool's release
 * of the state word, so the result and the cancel flag are final.
 */
bool tern__work_finished(struct tern__work *w);

/*
 * The client lets go of w after delivering its outcome. True: the record
 * is the client's to free or reuse now. False: w is a stopped header the
 * queue still holds; the pool hands it back (to be freed) when a worker or
 * a shutdown meets it. Client's thread only, once per accepted header.
 */
bool tern__work_let_go(struct tern__work *w);

/* Whether w's cancel flag is set (done reports it). The client's thread, after the hand-back. */
static inline bool tern__work_told(const struct tern__work *w)
{
    return atomic_load_explicit(&w->cancel, memory_order_relaxed);
}

/*
 * A submitter's lane: bounded headers it admitted while it owed a wake
 * decision anyway (a loop in steps 1 and 2 of its turn), held back from
 * the queue and pushed as one run at the kick, or when a worker's run of
 * them has gathered (decision 133). Admission is exact when a header
 * enters the lane (its slot is taken and its unit counted in); only the
 * push waits, so the loop writes the queue once per run instead of once
 * per job, and a worker finds a run waiting instead of a job at a time.
 * One thread at a time uses a lane, the thread that fills it; it is empty
 * whenever that thread is outside the window (the kick flushes it), and
 * a tern_pool_shutdown on a thread with lanes open flushes them first.
 * The client zeroes it before first use and never touches its fields.
 */
#define TERN__LANE_MAX 32
struct tern__lane {
    unsigned n;
    unsigned credit;          /* slots taken and units counted in ahead, unused (bounded.c) */
    unsigned want;            /* the credit to take next: the last run's length */
    struct tern__pool *pool;  /* where the held headers were admitted (n > 0) */
    struct tern__lane *next;  /* this thread's other open lanes (pool/bounded.c) */
    struct tern__work *held[TERN__LANE_MAX];
};

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
extern _Atomic bool tern__pool_closing;
/* Push what the lane holds as one run, without a wake (bounded.c). */
void tern__lane_flush(struct tern__lane *lane);
/*
 * Admit into an open lane on the credit it holds (lane->credit > 0: its
 * units and slots were taken from lane->pool, so the lane holds a job of
 * that pool or was just opened for one): no atomic step. A full lane is
 * pushed as one run.
 */
static inline void tern__lane_spend(struct tern__lane *lane, struct tern__work *w)
{
    TERN_INSIST(lane->credit > 0);
    lane->credit--;
    lane->held[lane->n++] = w;
    if (lane->n == TERN__LANE_MAX)
        tern__lane_flush(lane);
}
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

/* 0 or -EINVAL: whether cfg is a valid pool configuration. Any thread. */
int tern__pool_config_check(const tern_pool_config *cfg);
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

/* One counter slot per refusal cause, indexed by its value (slot 0, NONE, unused). */
#define TERN__REFUSAL_ONE_(name, short_name, value) +1
enum { TERN__REFUSAL_SLOTS = 1 TERN_REFUSAL_MAP(TERN__REFUSAL_ONE_) };
#undef TERN__REFUSAL_ONE_

/*
 * The counters behind tern_pool_stats_get. They live outside the pool so
 * a reader never races a free. The pool writes the gauges; the client
 * writes the outcomes (submitted, completed, cancelled, timed_out,
 * refused[cause]), so that every refusal is counted where admission
 * decides it. All relaxed.
 */
struct tern__pool_counters {
    /*
     * The bounded queue's slots: jobs queued in the low 32 bits (TERN__SLOT_QUEUED),
     * reservations in the high 32 (TERN__SLOT_RESERVED). One word, so admission
     * bounds queued + reserved exactly and a reader sees both at one instant.
     */
    alignas(TERN_CACHELINE) _Atomic uint64_t queued;
    _Atomic unsigned queued_peak;
    /*
     * Stopped jobs the queue still holds (bounded.c, "Tombstones"). Not
     * queued any more, but each holds a ring cell until a worker skips it.
     * On the slots word's line: admission reads both.
     */
    _Atomic uint64_t tombstones;
    alignas(TERN_CACHELINE) _Atomic unsigned threads, busy, long_threads, long_busy;
    /* Workers spinning for a job (as the pool's `spinners`, readable with no pool). */
    _Atomic unsigned spinning;
    alignas(TERN_CACHELINE) _Atomic uint64_t submitted;
    _Atomic uint64_t refused[TERN__REFUSAL_SLOTS]; /* by tern_refusal value */
    alignas(TERN_CACHELINE) _Atomic uint64_t completed, cancelled, timed_out;
    /*
     * The watchdog (pool/watchdog.c): stalled jobs seen, overflow workers.
     * One line for all four: written a few times a second at most.
     */
    alignas(TERN_CACHELINE) _Atomic uint64_t stalls;
    _Atomic uint64_t overflow_started, overflow_retired;
    _Atomic unsigned overflow_now;
};
/*
 * Layout pins. alignas on a declaration of several names aligns each of
 * them, so apart from the slot word's peak and `spinning` every counter
 * here owns a cache line: line 0, the slot word (every submission and
 * every take), its peak and the tombstones (which admission reads with
 * it); one line per gauge (workers as they go busy
 * and idle; `spinning` beside `long_busy`); acceptances and refusals (the
 * submitting loops); one line per outcome (the workers, as jobs end); one
 * line for the watchdog's counters. A
 * field added onto a line another thread writes, or a regrouping, fails
 * here. Offsets are in lines (TERN_CACHELINE).
 */
#define TERN__LINE(n) ((n) * TERN_CACHELINE)
#define TERN__LINES_FOR(bytes) (((bytes) + TERN_CACHELINE - 1) / TERN_CACHELINE * TERN_CACHELINE)
_Static_assert(offsetof(struct tern__pool_counters, queued) == 0 &&
                   offsetof(struct tern__pool_counters, queued_peak) == 8,
               "line 0: the slot word and its peak only");
_Static_assert(offsetof(struct tern__pool_counters, threads) == TERN__LINE(1) &&
                   offsetof(struct tern__pool_counters, busy) == TERN__LINE(2) &&
                   offsetof(struct tern__pool_counters, long_threads) == TERN__LINE(3) &&
                   offsetof(struct tern__pool_counters, long_busy) == TERN__LINE(4) &&
                   offsetof(struct tern__pool_counters, spinning) == TERN__LINE(4) + 4,
               "lines 1-4: a gauge each, spinning beside long_busy");
_Static_assert(offsetof(struct tern__pool_counters, submitted) == TERN__LINE(5) &&
                   offsetof(struct tern__pool_counters, refused) == TERN__LINE(5) + 8,
               "acceptances and refusals start line 5");
#define TERN__OUTCOMES_ (TERN__LINE(5) + TERN__LINES_FOR(8 * (1 + TERN__REFUSAL_SLOTS)))
_Static_assert(offsetof(struct tern__pool_counters, completed) == TERN__OUTCOMES_ &&
                   offsetof(struct tern__pool_counters, cancelled) == TERN__OUTCOMES_ + TERN__LINE(1) &&
                   offsetof(struct tern__pool_counters, timed_out) == TERN__OUTCOMES_ + TERN__LINE(2),
               "outcomes: a line each, after the refusals");
_Static_assert(offsetof(struct tern__pool_counters, tombstones) == 16,
               "line 0: the tombstones beside the slot word, which admission reads with them");
_Static_assert(offsetof(struct tern__pool_counters, stalls) == TERN__OUTCOMES_ + TERN__LINE(3) &&
                   sizeof(struct tern__pool_counters) == TERN__OUTCOMES_ + TERN__LINE(4),
               "the watchdog's line after the outcomes, and nothing after it");
#undef TERN__OUTCOMES_

extern struct tern__pool_counters tern__pool_stats;

/*
 * Outcomes a thread's loops have delivered but not yet added to the
 * counters above, by kind. A loop counts each done here, on its own
 * thread, and adds them once as the step that ran them ends
 * (tern__outcomes_settle); a statistics read settles its own thread's
 * first. The add per job this replaces waited, as every locked
 * instruction does, for the stores before it, and those were the misses
 * on the record just handed back. So a reader on another thread sees a
 * step's outcomes when the step ends, one step late at most.
 */
enum { TERN__OUTCOME_COMPLETED, TERN__OUTCOME_CANCELLED, TERN__OUTCOME_TIMED_OUT, TERN__OUTCOME_KINDS };
extern _Thread_local uint64_t tern__outcomes_due[TERN__OUTCOME_KINDS]
    __attribute__((tls_model("initial-exec")));
void tern__outcomes_add(void);
static inline void tern__outcomes_settle(void)
{
    if ((tern__outcomes_due[0] | tern__outcomes_due[1] | tern__outcomes_due[2]) != 0)
        tern__outcomes_add();
}

/*
 * The size of the client's record around a work header (runtime/jobs/job.c
 * stores it as it sets a loop up): the pool's memory figure counts one
 * per job in flight (tern_pool_stats.memory_bytes). 0: the header's size.
 */
extern _Atomic size_t tern__pool_record_bytes;

#endif
