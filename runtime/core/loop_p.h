/*
 * The loop's private interface. Each header is one idea and says what it
 * declares; the loop's headers, bottom first:
 *
 *   op_types.h   the op model: what a loop tracks, and the containers of
 *                ops (the id map, the slab, the deadline heap's layout)
 *   inbound.h    what other threads hand to the loop, and the wake word
 *   thread.h     who may run a loop, and the aborts for those who may not
 *   loop_p.h     the loop itself (this file): its struct, who may run it,
 *                the op lifecycle, the turn; it includes the three above
 *   heap.h       the deadlines: claiming, arming, disarming (above the
 *                struct, whose heap they read)
 *   admit.h      whether a new op may start (closing, max_operations),
 *                and an op's retirement
 *   job_p.h      jobs, an op kind (included by the files that use jobs)
 *
 * A file includes the ones whose names it uses.
 */
#ifndef TERN_LOOP_P_H
#define TERN_LOOP_P_H

#include <stdalign.h>
#include <stdatomic.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdnoreturn.h>

#include "backend.h"
#include "check.h"
#include "clock.h"
#include "fault.h"
#include "inbound.h"
#include "op_types.h"
#include "platform.h"
#include "pool.h"
#include "spin.h"
#include "thread.h"
#include "tern.h"

/* ------------------------------------------------------------------ */
/* The loop.                                                          */
/* ------------------------------------------------------------------ */

struct tern__ring;     /* backends/ring.h: the result ring (runtime/jobs/job.c) */
struct tern__children; /* the loop's share of the SIGCHLD fallback (process_exit.c) */

/*
 * The turn's five steps, in order (turn.c; docs/design.md, "The turn"),
 * numbered as the docs number them, and 0 between turns. What a call may
 * do depends on the step: a submission inside steps 1 and 2 defers its
 * pool wake to the end of step 2 (job.c).
 */
enum tern__step {
    TERN__STEP_NONE = 0,     /* outside a turn */
    TERN__STEP_TAKE = 1,     /* posts, foreign cancels, pool completions */
    TERN__STEP_DISPATCH = 2, /* ready callbacks, framed by the hooks */
    TERN__STEP_DECIDE = 3,   /* read the clock, compute the wait */
    TERN__STEP_WAIT = 4,     /* spin, park, backend wait */
    TERN__STEP_FIRE = 5,     /* read the clock, fire due deadlines */
};

#define TERN__LOOP_MAGIC 0x7465726eu /* "tern" */
#define TERN__FIRED_MAX 256
#define TERN__LAG_BUCKETS 64 /* lag histogram: bucket i holds lateness in [2^i, 2^(i+1)) ns */

struct tern_loop {
    unsigned magic;
    /* tern__forks when the loop was made: read beside magic by every call. */
    unsigned forks;
    /* ---- written by other threads (each group on its own line) ---- */
    alignas(TERN_CACHELINE) tern__wfq_head in_head;
    alignas(TERN_CACHELINE) tern__wfq_tail in_tail;
    /*
     * Posts admitted, ever (less refused ones). On the tail's line, which a
     * producer holds anyway for its exchange: admission adds no miss.
     */
    _Atomic uint64_t posted;
    /* Foreign tern_cancel calls between their `closing` check and enqueue. */
    _Atomic unsigned foreign_inflight;
    /* Records for those calls, so none allocates (inbound.c). */
    alignas(TERN_CACHELINE) struct tern__cancel_reserve cancels;
    alignas(TERN_CACHELINE) _Atomic unsigned wake_state;
    _Atomic bool stop_requested;
    _Atomic bool closing; /* tern_loop_free has begun */
    _Atomic bool sealed;  /* a group's destroy phase: scheduling aborts (group.c) */
    _Atomic uint64_t wake_syscalls;
    _Atomic int waker_cpu; /* the CPU of the last wake's maker, or -1 (turn.c) */
    /* Bumped by a drain before it closes a run that had stopped growing
     * (or by the loop's release): a producer that sees it moved since its
     * run began starts a new run without touching the old one's line
     * (inbound_block.c). */
    _Atomic unsigned runs_closed;
    /*
     * Pool threads other than bounded workers (which pin in a slot of
     * their own, pool.h) inside job_handback's push + wake (runtime/jobs/job.c);
     * tern_loop_free waits for zero. On a line of its own: added to and
     * subtracted from for every job it pins, and on the wake word's line
     * those writes took from the loop the line holding `closing`, which
     * every submission reads.
     */
    alignas(TERN_CACHELINE) _Atomic unsigned result_pins;
    alignas(TERN_CACHELINE) _Atomic uintptr_t owner; /* claiming thread's token */

    /* ---- loop thread only ---- */
    alignas(TERN_CACHELINE) uint64_t now;
    enum tern__step step;
    unsigned dispatch_batch;
    unsigned max_operations;
    unsigned max_undelivered;
    unsigned flags;
    unsigned ops_local;          /* the loop's own live ops (all but pending posts) */
    _Atomic unsigned ops_count;  /* ops_local, published for producers */
    _Atomic uint64_t posts_done; /* posts taken off the inbound queue, ever */
    unsigned refs;               /* referenced ops (keep run() going) */
    unsigned anon;               /* live ops without an id (defers) */
    unsigned tabled;             /* live ops whose id names their record, not in the map (jobs) */
    bool check_books;            /* TERN_CHECK_BOOKS: audit the counters at every turn's end */
    unsigned io_count; /* fds (and signals the backend reads) registered besides the wake fd */
    unsigned sends;    /* sends in the kernel (streams', datagrams): loop free waits for them */
    tern_id id_next, id_end; /* this loop's block of the process-wide id counter */
    int64_t last_wait;       /* step 3's timeout, for tests */
    struct tern__op *ready_head, *ready_tail;
    unsigned ready_count; /* queued ops that are not dead */
    struct tern__idmap ids;
    struct tern__heap heap;
    struct tern__timer_table timers; /* timer.c, timer_table.c */
    struct tern__slab defers;        /* records of defer.c */
    struct tern__backend backend;
    struct tern__wake wake; /* -1s when the backend wakes itself (backend.ops->wake) */
    struct tern__io **fds;  /* fd -> its watcher (io.c), grown on demand */
    unsigned fds_len;
    struct tern__fired fired[TERN__FIRED_MAX];
    /* Per provided buffer (backend.nbufs of them), where a completion's
     * bytes wait for their op's dispatch (net/stream_recv.c); NULL until
     * the first receive. */
    struct tern__landed *landed;
    struct tern__children *children; /* NULL unless a child is seen through SIGCHLD */

    /* jobs (runtime/jobs/job.c) */
    struct tern__ring *ring;
    unsigned undelivered;      /* credits held: accepted jobs not yet popped */
    unsigned jobs_live;        /* accepted jobs whose done has not started (audit only) */
    unsigned long_undelivered; /* of the credits, those held by TERN_LONG jobs */
    unsigned last_refusal;     /* tern_refusal of the last submission (tern_loop_last_refusal) */
    struct tern__spin spin;    /* step 4's spin budget for pool completions (turn.c) */
    unsigned posts_ran;        /* posts this turn's step 1 ran (step 4 reads it: turn.c) */
    unsigned open_n;           /* runs kept open (inbound.c), oldest first */
    struct tern__open_run open_runs[TERN__OPEN_RUNS];
    unsigned jobs_taken; /* finished jobs this turn's step 1 took off the ring (the same) */
    /*
     * Step 2's one entry for the finished jobs step 1 took (job.c): they
     * wait behind it, in the order taken, linked through op.ready_next.
     */
    struct tern__op results;
    struct tern__op *results_head, *results_tail;
    struct tern__spin post_yield;       /* whether yielding after posts has been paying (turn.c) */
    bool post_yield_owed;               /* a yield after posts awaits the next turn's judgement */
    struct tern__spin open_yield;       /* whether yielding to open runs has been paying (turn.c) */
    bool open_yield_owed;               /* such a yield awaits the next turn's judgement */
    struct tern__job_chunk *job_chunks; /* the job records (job_slab.c) */
    struct tern_job *job_free;          /* free records, linked through op.ready_next */
    uint64_t job_bytes;                 /* the chunks' bytes */
    bool jobs_owned;         /* a chunk has owner links (job_slab.c): a done must unlink its job */
    uint32_t job_chunk_next; /* records in the next chunk (0: the first) */
    struct tern__job_chunk **job_map; /* chunk number -> chunk, at most half full */
    uint32_t job_map_mask, job_nchunks;
    unsigned jobs_held;     /* records let go by the loop that the pool still holds */
    unsigned job_nfree;     /* records on job_free */
    unsigned job_trim_at;   /* free records at which a trim walks again (job_slab.c) */
    unsigned job_trim_left; /* free records the last trim left */
    unsigned submits;       /* jobs submitted; every 4th has its queue wait timed */
    bool kick_owed; /* a job accepted in this turn without a wake (job.c, tern__jobs_kick) */
    struct tern__lane lane; /* bounded jobs accepted in steps 1-2, pushed at the kick (pool.h) */
    uint64_t pool_checked;  /* the pool start (generation) this loop's config matched */
    bool has_pool_config;
    tern_pool_config pool_config;
    /*
     * A running lookup's deadline passed: answer its caller now
     * (resolve.c's tern__lookup_expired). job.c sits below resolve.c and
     * reaches it only through this, set by tern_loop_new.
     */
    void (*lookup_expired)(tern_loop *loop, tern_job *job);

    /* prepare, check and idle hooks by kind (hooks.c) */
    struct tern__hook *hook_head[3], *hook_tail[3];
    unsigned hook_idle;    /* idle hooks started: step 3 does not wait */
    unsigned hook_running; /* inside tern__hooks_run: stopped hooks wait to be unlinked */

    /* statistics (relaxed atomics: tern_loop_stats_get reads them from anywhere) */
    _Atomic uint64_t st_turns, st_posts, st_events, st_idle_ns;
    _Atomic unsigned st_undelivered, st_undelivered_peak;
    /* utilisation: busy time counts from busy_from (0: outside a run; the
     * next turn reads the clock once to start it) to each step 5 */
    _Atomic uint64_t st_busy_ns;
    uint64_t busy_from;
    /* lag: how late each deadline fired, in log2 buckets of ns (runtime/core/lag.h) */
    _Atomic uint64_t st_lag_max_ns;
    _Atomic uint32_t st_lag_hist[TERN__LAG_BUCKETS];

    /*
     * The classes of a stream and of its internal deadline (net/stream.c,
     * net/tcp.c), set by tern_loop_new. The stream's record (net/
     * stream_record.c) sits below the files whose hooks fill them, and
     * they below it, so it reads them here, as job.c reads lookup_expired.
     */
    const struct tern__op_class *stream_class, *stream_deadline_class;
};

/*
 * The layout the comments above rely on, pinned: a field added in the
 * wrong place fails the build instead of costing a cache miss per post,
 * cancel or hand-back.
 */
#define TERN__LINE_OF(f) (offsetof(struct tern_loop, f) / TERN_CACHELINE)
/* The queue's head (the loop splices it) and tail (every producer
 * exchanges it) on lines of their own: a post never pulls the line the
 * loop is draining. */
_Static_assert(offsetof(struct tern_loop, in_head) % TERN_CACHELINE == 0 &&
                   TERN__LINE_OF(in_tail) > TERN__LINE_OF(in_head),
               "the inbound head and tail sit on separate lines");
/* A post's admission count rides on the tail's line, which the producer
 * holds anyway for its exchange. */
_Static_assert(TERN__LINE_OF(posted) == TERN__LINE_OF(in_tail) &&
                   TERN__LINE_OF(foreign_inflight) == TERN__LINE_OF(in_tail),
               "posted and foreign_inflight share the inbound tail's line");
/* The cancel reserve's lock on a line of its own, between the tail and
 * the wake word. */
_Static_assert(TERN__LINE_OF(cancels) > TERN__LINE_OF(in_tail) &&
                   TERN__LINE_OF(wake_state) > TERN__LINE_OF(cancels),
               "the cancel reserve is between the tail's and the wake word's lines");
/* The flags every producer checks (stop, closing, sealed) are on the wake
 * word's line, which the loop writes only to park and wake; the
 * hand-back's pin, written for every job, is alone on the next. */
_Static_assert(TERN__LINE_OF(sealed) == TERN__LINE_OF(wake_state) &&
                   TERN__LINE_OF(wake_syscalls) == TERN__LINE_OF(wake_state) &&
                   TERN__LINE_OF(waker_cpu) == TERN__LINE_OF(wake_state) &&
                   TERN__LINE_OF(runs_closed) == TERN__LINE_OF(wake_state) &&
                   TERN__LINE_OF(result_pins) == TERN__LINE_OF(wake_state) + 1 &&
                   TERN__LINE_OF(owner) == TERN__LINE_OF(result_pins) + 1,
               "the producers' flags share the wake word's line; the pin has its own");
/* The owner token (read by every loop-only check) alone on its line, and
 * the loop thread's own fields from the next line on: no field another
 * thread writes shares a line with them. */
_Static_assert(offsetof(struct tern_loop, owner) % TERN_CACHELINE == 0 &&
                   offsetof(struct tern_loop, now) ==
                       offsetof(struct tern_loop, owner) + TERN_CACHELINE,
               "the owner token has its line; the loop thread's fields start on the next");
#undef TERN__LINE_OF

/* ------------------------------------------------------------------ */
/* Internal calls.                                                    */
/* ------------------------------------------------------------------ */

tern_id tern__id_next(tern_loop *loop);

/* `owner` holds the claiming thread's token, 0 when unclaimed. */

static inline void tern__loop_only(const tern_loop *loop, const char *fn)
{
    uintptr_t owner = atomic_load_explicit(&loop->owner, memory_order_relaxed);
    if (TERN_UNLIKELY(owner != 0 && owner != tern__thread_token()))
        tern__loop_only_failed(fn);
}
#define TERN__LOOP_ONLY(loop) tern__loop_only((loop), __func__)

/*
 * A loop records the fork count it was made under (tern__forks, platform.h);
 * a call that finds another is a forked child reaching for its parent's
 * loop, whose backend and wake descriptors it shares with the parent. One
 * load and a compare, no system call.
 */
static inline void tern__loop_this_process(const tern_loop *loop, const char *fn)
{
    if (TERN_UNLIKELY(loop->forks != tern__forks))
        tern__loop_forked_failed(fn);
}
#define TERN__REQUIRE_LOOP(loop)                                                                   \
    (TERN_REQUIRE_SAID((loop) != NULL && (loop)->magic == TERN__LOOP_MAGIC, "NULL or freed loop"), \
     tern__loop_this_process((loop), __func__))

/*
 * A group keeps its loops alive with this bit in `flags` (beside the
 * public TERN_LOOP_* bits, which never reach it), so the application's own
 * TERN_LOOP_KEEPALIVE stays the application's to set and clear.
 */
#define TERN__LOOP_HELD (1u << 30)

/*
 * Claim the loop for the calling thread (run, run_once, free; a group's
 * thread for the group's lifetime) and give it back. claim returns the
 * loop the thread was running before, for release to restore.
 */
tern_loop *tern__loop_claim(tern_loop *loop, const char *fn);
void tern__loop_release(tern_loop *loop, tern_loop *prev);

/* Register an admitted op (id assigned, referenced). 0 or -ENOMEM. */
int tern__op_add(tern_loop *loop, struct tern__op *op, const struct tern__op_class *cls);
/* Register an admitted op whose id its kind's table resolves (a job:
 * tern__job_find), never in the map; finishing it zeroes op->id. */
void tern__op_add_tabled(tern_loop *loop, struct tern__op *op, const struct tern__op_class *cls,
                         tern_id id);
/* The live job a job id names in this loop, or NULL (job_slab.c). */
struct tern__op *tern__job_find(const tern_loop *loop, tern_id id);
/* Register an admitted op that has no id (never in the map). */
void tern__op_add_anon(tern_loop *loop, struct tern__op *op, const struct tern__op_class *cls);
static inline void tern__op_ready(tern_loop *loop, struct tern__op *op)
{
    if (op->flags & TERN__OP_QUEUED)
        return;
    op->flags |= TERN__OP_QUEUED;
    op->ready_next = NULL;
    loop->ready_count++;
    if (loop->ready_tail)
        loop->ready_tail->ready_next = op;
    else
        loop->ready_head = op;
    loop->ready_tail = op;
}
void tern__op_finish(tern_loop *loop, struct tern__op *op);
void tern__op_set_ref(tern_loop *loop, struct tern__op *op, bool ref);
/* The op behind a public id, or NULL. */
struct tern__op *tern__op_find(tern_loop *loop, tern_id id);
/* Step 4: hand a backend's completion to the op whose id is its token;
 * one whose op is gone takes its bytes with it (the buffer goes back). */
void tern__op_completed(tern_loop *loop, const struct tern__done *d);

/* Bytes a completion left in a provided buffer: a link in its op's list. */
struct tern__landed {
    const unsigned char *data;
    const void *ctl; /* control data that came with the bytes (passed descriptors) */
    uint32_t ctllen;
    uint32_t len;
    uint32_t next;  /* the next buffer id in the list, or TERN__LANDED_NONE */
    bool truncated; /* a datagram's (net/udp.c, where ctl is its source address): it was longer */
};
#define TERN__LANDED_NONE UINT32_MAX

/* TERN_LOOP_RCU: make the calling thread an online qsbr reader, and back. */
void tern__rcu_enter(tern_loop *loop);
void tern__rcu_leave(tern_loop *loop);

/*
 * Audit the loop's books (TERN_CHECK_BOOKS=1 in the environment when the
 * loop is created; the stress suite sets it): aborts naming the counter
 * that disagrees with what it counts. Loop thread, between turns.
 */
void tern__loop_check_books(tern_loop *loop);

/* Whether anything keeps tern_loop_run() going. */
bool tern__loop_alive(tern_loop *loop);

/* Step 2: run the started hooks of one kind, in the order they started (hooks.c). */
void tern__hooks_run(tern_loop *loop, int kind);
/* One turn; max_wait_ns < 0 waits as needed. */
void tern__loop_turn(tern_loop *loop, int64_t max_wait_ns);

/*
 * Watchers (io.c). A `struct tern__io` is the registration of one fd with
 * the backend, embedded in whatever record owns the fd (a public watcher,
 * a stream, a signal watcher's descriptor), as libuv embeds uv__io_t. It
 * has no id and is no op: the owner starts, modifies and stops it by
 * pointer, so nothing outside the owner can reach it.
 *
 * `fired` runs in step 4 for each report with the events the backend saw
 * (its own interest plus TERN_HANGUP and TERN_ERROR, unmasked). It runs
 * no user code: it records what it was told and queues its owner's op,
 * whose dispatch acts on it in step 2.
 */
struct tern__io;
typedef void (*tern__io_fired_fn)(tern_loop *loop, struct tern__io *io, unsigned events);
struct tern__io {
    int fd;          /* -1 while stopped */
    unsigned events; /* the interest the backend holds, 0 while stopped */
    tern__io_fired_fn fired;
};
static inline void tern__io_init(struct tern__io *io, tern__io_fired_fn fired)
{
    *io = (struct tern__io){.fd = -1, .fired = fired};
}
static inline bool tern__io_active(const struct tern__io *io)
{
    return io->fd >= 0;
}
/*
 * Register fd for events (not 0) and claim it in the process-wide
 * registry (G4). 0; -EEXIST when this or another loop watches fd (or it
 * is the loop's own wake or backend fd); -ENOMEM; the backend's -errno.
 * Requires: io stopped.
 */
int tern__io_start(tern_loop *loop, struct tern__io *io, int fd, unsigned events);
/* Change the interest (not 0). 0 or the backend's -errno (nothing changed). */
int tern__io_modify(tern_loop *loop, struct tern__io *io, unsigned events);
/* Stop watching (before the fd is closed). A report not yet delivered by
 * `fired` is dropped; one `fired` already recorded is the owner's to drop. */
void tern__io_stop(tern_loop *loop, struct tern__io *io);
/* Step 4: readiness of fd (not a signal entry) from the backend, handed to its watcher. */
void tern__io_fired(tern_loop *loop, int fd, unsigned events);
/* The class of a stream's internal deadline (net/tcp.c), and of a stream
 * (net/stream.c: its dispatch, cancel and free hooks), which tern_loop_new
 * puts in the loop (stream_class above); net/net_win.c where net/ is not
 * built. */
extern const struct tern__op_class tern__stream_deadline_class;
extern const struct tern__op_class tern__stream_class;
/* Signals (net/signal.c): the backend itself reported count deliveries of
 * signo (a TERN__FIRED_SIGNAL entry). */
void tern__signal_fired(tern_loop *loop, int signo, unsigned count);

/* The source file watches on this loop use: "inotify", "vnode" or "stat"
 * (watch.c; also a test seam, testing.h). */
const char *tern__watch_source(const tern_loop *loop);

/* Record size of the slab-allocated defers (defer.c). */
extern const size_t tern__defer_size;

#endif
