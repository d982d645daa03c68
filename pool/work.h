/*
 * A job's work header and its state word (work.c): the protocol between
 * the client, which may stop a header still queued, and the workers,
 * which claim, run and hand it back; the units in flight that end with a
 * job's pool life; the cancelling shutdown's words a running job reads.
 * The worker's path per job (tern__work_execute) is inline here, beside
 * the state it changes.
 *
 * Ownership of a work header. The client (runtime/jobs/job.c) allocates the
 * record around it and holds it until its done has run. The pool borrows
 * it from tern__pool_accept to its hand-back: a worker claims it, runs it,
 * marks it FINISHED and calls its hand-back. A header stopped while still
 * queued is TOMBSTONED (tern__work_stop); the worker (or shutdown) that
 * later meets it lets go of it, and the client frees it when both sides
 * have let go (enum tern__work_state, below).
 */
#ifndef TERN_POOL_WORK_H
#define TERN_POOL_WORK_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "check.h"
#include "clock.h"
#include "histogram.h"
#include "probe.h"
#include "tern.h"

struct tern__work;

/*
 * What a worker does with a header of the bounded class. LOOKUP runs under
 * the lookup cap (pool/lookup.c). STEPS runs one step per pass: fn returns
 * NULL while another step follows, and the header goes back into the
 * queue on its reservation (pool/steps.c).
 */
enum tern__work_kind { TERN__WORK_PLAIN = 0, TERN__WORK_LOOKUP = 1, TERN__WORK_STEPS = 2 };
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
 * The client's one hand-back, for every header: it stores it (relaxed)
 * before its first tern__pool_accept, always the same function, and pool
 * threads load it (relaxed) as they hand a header back. One word for the
 * process rather than one in every header: the header's last word is the
 * client's (`client`).
 */
extern __attribute__((visibility("hidden"))) _Atomic(tern__handback_fn) tern__pool_handback;
/*
 * The work header. The client embeds it FIRST in its record: the public
 * `tern_job *` a work function receives is the header's address (so
 * tern_job_cancelled, defined here, reads it), and the client turns it
 * back into its record with a cast. The client writes every field before
 * tern__pool_accept (state zero); from then on the pool owns fn, arg,
 * result, t_submit and cancel_window until the hand-back. The three
 * `client_` fields are the client's alone (the runtime keeps a job's done,
 * generation and place in its chunk there): the pool never reads or
 * writes them, and the client may write them while the pool owns the rest.
 * The state word is the pool's alone (below): the client never reads or writes it, it
 * asks the questions below (tern__work_stop, tern__work_finished,
 * tern__work_let_go).
 */
struct tern__work {
    _Atomic uint8_t state;  /* the pool's (enum tern__work_state) */
    _Atomic bool cancel;    /* tern_job_cancelled(); latched, never cleared */
    uint8_t occupancy;      /* tern_occupancy: the class */
    uint8_t kind;           /* enum tern__work_kind */
    uint16_t cancel_window; /* pool: cancelling shutdowns begun when it started */
    _Atomic bool unrun;     /* pool: a cancelling shutdown stopped it before it ran */
    uint8_t client_byte;    /* the client's */
    tern_work_fn fn;
    void *arg;
    void *result;
    uint32_t t_submit;       /* tern__work_stamp() at acceptance, or 0: not timed */
    uint32_t client_word;    /* the client's */
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
_Static_assert(offsetof(struct tern__work, client_byte) == 7,
               "the client's byte ends the first word");
_Static_assert(sizeof(struct tern__work) == 48, "the work header is six words");
/*
 * A queue-wait stamp (t_submit): tern__ticks() in units of 2^8 ticks, in
 * 32 bits, never 0 (0 says "not timed"). A wait is the difference of two
 * stamps, so it is exact to 256 ticks and wraps after 2^40
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
 * A header's state word: the protocol between the client, which may stop
 * a header still queued (tern__work_stop), and the workers, which claim
 * it. Only pool/ names these; the client asks the questions below.
 *
 * QUEUED -> RUNNING -> FINISHED by a worker (claim, then hand-back);
 * QUEUED -> FINISHED by a cancelling shutdown (never started);
 * QUEUED -> TOMBSTONED by the client's stop (one CAS). The record stays
 * in the queue until a worker or shutdown meets it; LOOP_DONE and
 * POOL_DONE say which side let go of a tombstone first, so the last one
 * frees it (the client, in tern__work_let_go's answer or in the hand-back)
 * and neither waits for the other. A steps header goes RUNNING -> QUEUED
 * between its steps.
 */
enum tern__work_state {
    TERN__WORK_QUEUED = 0,     /* accepted, not yet taken by a worker */
    TERN__WORK_RUNNING = 1,    /* a worker runs fn */
    TERN__WORK_FINISHED = 2,   /* fn returned (or never will): being handed back */
    TERN__WORK_TOMBSTONED = 3, /* stopped while queued; the queue still holds it */
    TERN__WORK_LOOP_DONE = 4,  /* tombstone: the client has let go */
    TERN__WORK_POOL_DONE = 5,  /* tombstone: the pool has let go */
};

/*
 * Hand finished work back (its state already FINISHED) and end its pool
 * life. True when the hand-back woke a sleeping thread with a syscall.
 */
bool tern__work_complete(struct tern__work *w);
/*
 * A worker found this header: true if it now runs (RUNNING), false if it
 * was a tombstone, which the pool then lets go of (handing it back to be
 * freed if the client let go first) and must not touch again.
 */
bool tern__work_claim(struct tern__work *w);
/* Run a claimed header and complete it (stats recorded); as complete. */
bool tern__work_run(struct tern__work *w, unsigned worker_index);
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
 * Jobs in flight, process-wide: from the moment a submitter counts itself
 * in (before it looks at the pool) until the job's pool life ends — its
 * completion handed back, or its tombstone dropped. tern_pool_shutdown
 * waits for this to reach zero with its `closing` word set, so nothing
 * it frees is still reachable by a submitter or a job.
 *
 * Two counters on two cache lines, units in and units out, rather than
 * one count: submitters add to `entered`, pool threads to `left`, and
 * neither side's add pulls the other's line across: a shared count's
 * locked add would move one line between every submitter and every
 * worker. Both only grow; what is in flight is their difference (tern__pool_in_flight).
 */
struct tern__pool_presence {
    alignas(TERN_CACHELINE) _Atomic uint64_t entered;
    alignas(TERN_CACHELINE) _Atomic uint64_t left;
};
/* Layout pin: `entered` and `left` on two lines, nothing else on either. */
_Static_assert(offsetof(struct tern__pool_presence, left) == TERN_CACHELINE &&
                   sizeof(struct tern__pool_presence) == 2 * TERN_CACHELINE,
               "the two presence counters own a line each");
extern __attribute__((visibility("hidden"))) struct tern__pool_presence tern__pool_inflight;
/*
 * A TERN_POOL_CANCEL shutdown is under way: every running job reads as
 * cancelled (tern_job_cancelled) and completes -ECANCELED. A flag the jobs
 * read, rather than a write into each running job, so shutdown never
 * touches a job record a loop may already have delivered and reused.
 */
extern __attribute__((visibility("hidden"))) _Atomic bool tern__pool_cancel_all;
/*
 * Cancelling shutdowns begun, ever. A job that finds it moved between its
 * start and its end ran while one was under way, even if that shutdown
 * timed out and cleared tern__pool_cancel_all before the job returned.
 */
extern __attribute__((visibility("hidden"))) _Atomic unsigned tern__pool_cancel_windows;
/*
 * Whether a cancelling pool shutdown has been under way while the job ran:
 * one is now, or one began since the job started. (Shutdown never writes
 * into a running job: its client may already have delivered and reused it.)
 */
static inline bool tern__work_shutdown_cancelled(const struct tern__work *w)
{
    return atomic_load_explicit(&tern__pool_cancel_all, memory_order_relaxed) ||
           (uint16_t)atomic_load_explicit(&tern__pool_cancel_windows, memory_order_relaxed) !=
               w->cancel_window;
}

/*
 * Around a claimed header's work (or each step of one): note the cancelling
 * shutdowns begun so far, and latch a cancel if one ran meanwhile.
 * started is false when a cancelling shutdown is under way: the job counts
 * as queued and its work (or its next step) must not start.
 */
static inline bool tern__work_started(struct tern__work *w)
{
    w->cancel_window =
        (uint16_t)atomic_load_explicit(&tern__pool_cancel_windows, memory_order_relaxed);
    if (TERN_LIKELY(!atomic_load_explicit(&tern__pool_cancel_all, memory_order_relaxed)))
        return true;
    /*
     * Taken off the queue during a cancelling shutdown (its drain had not
     * reached it yet): it counts as queued, so its work never starts.
     */
    atomic_store_explicit(&w->unrun, true, memory_order_relaxed);
    atomic_store_explicit(&w->cancel, true, memory_order_relaxed);
    return false;
}

static inline void tern__work_returned(struct tern__work *w)
{
    /* Ran during a cancelling shutdown: its done says so, seen or not. */
    if (TERN_UNLIKELY(tern__work_shutdown_cancelled(w)))
        atomic_store_explicit(&w->cancel, true, memory_order_relaxed);
}

/* The client's hand-back (above): the one call the pool makes into it. */
static inline bool tern__work_hand_back(struct tern__work *w)
{
    return atomic_load_explicit(&tern__pool_handback, memory_order_relaxed)(w);
}

/*
 * tern__work_run without the unit's leave: the caller owes it to
 * tern__pool_inflight and gives it back after the hand-back (a bounded
 * worker, once per run). weight: 0 leaves the work function untimed;
 * else its run time goes into the run histogram as that many samples
 * and *ran is set to it (worker.c, "Timing"). *ran is 0 otherwise.
 * Forced inline: it is a bounded worker's whole path per job, and a call
 * (with the two above) would add its frame and spills to every job.
 */
static TERN_ALWAYS_INLINE bool tern__work_execute(struct tern__work *w, unsigned worker,
                                                  unsigned weight, uint64_t *ran)
{
    *ran = 0;
    if (TERN_UNLIKELY(!tern__work_started(w))) {
        w->result = NULL;
    } else {
        bool shared = worker == TERN__MAX_THREADS; /* the long class's pair */
        /* A clock reading only for a figure that wants one: the wait's
         * sample (its loop's choice), the run's (the worker's). */
        uint64_t start = w->t_submit != 0 || weight != 0 ? tern__ticks() : 0;
        if (w->t_submit != 0)
            tern__hist_record(&tern__pool_wait_hist[worker], tern__work_waited(w->t_submit, start),
                              1, shared);
        /* The public handle is the header's address (above). */
        TERN_PROBE(job_started, w, (int)w->occupancy);
        w->result = w->fn((tern_job *)w, w->arg);
        if (weight != 0) {
            *ran = tern__ticks() - start;
            tern__hist_record(&tern__pool_run_hist[worker], *ran, weight, shared);
        }
        tern__work_returned(w);
    }
    atomic_store_explicit(&w->state, TERN__WORK_FINISHED, memory_order_release);
    return tern__work_hand_back(w);
}

/* Count n units in: before looking at the pool (pairs with `closing`). */
static inline void tern__pool_enter(unsigned n)
{
    atomic_fetch_add_explicit(&tern__pool_inflight.entered, n, memory_order_seq_cst);
}

static inline void tern__pool_leave_n(unsigned n)
{
    /* Pairs with the acquire load in tern__pool_in_flight(). */
    atomic_fetch_add_explicit(&tern__pool_inflight.left, n, memory_order_release);
}
static inline void tern__pool_leave(void)
{
    tern__pool_leave_n(1);
}

/*
 * Units in flight now. `left` is read first: it only grows, so the
 * difference can only overstate what is in flight at the second read,
 * never understate it, and a 0 is exact.
 */
static inline uint64_t tern__pool_in_flight(void)
{
    uint64_t left = atomic_load_explicit(&tern__pool_inflight.left, memory_order_acquire);
    uint64_t entered = atomic_load_explicit(&tern__pool_inflight.entered, memory_order_seq_cst);
    /* A checked counter (check.h): more units out than in is a lost count. */
    if (TERN_UNLIKELY(left > entered))
        tern__check_failed(__FILE__, __LINE__, __func__, "COUNTER", "pool units left > entered");
    return entered - left;
}

#endif
