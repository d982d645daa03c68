/*
 * The loop's private interface, by idea. Each header is one idea and says
 * what it declares; runtime files include this one, which includes them all:
 *
 *   op.h         the op model: what a loop tracks, and the containers of
 *                ops (the id map, the slab, the deadline heap)
 *   inbound.h    what other threads hand to the loop, and the wake word
 *   loop_p.h     the loop itself (this file): its struct, who may run it,
 *                the op lifecycle and the deadlines, the turn
 *   admit.h      whether a new op may start (closing, max_operations);
 *                after the struct it reads
 *   job_p.h      jobs, an op kind (included by the files that use jobs)
 */
#ifndef TERN_LOOP_P_H
#define TERN_LOOP_P_H

#include <stdalign.h>
#include <stdatomic.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdnoreturn.h>

#include "backend.h"
#include "check.h"
#include "clock.h"
#include "fault.h"
#include "inbound.h"
#include "op.h"
#include "platform.h"
#include "pool.h"
#include "spin.h"
#include "tern.h"

/* ------------------------------------------------------------------ */
/* The loop.                                                          */
/* ------------------------------------------------------------------ */

struct tern__ring; /* pool/ring.h: the result ring (runtime/job.c) */

#define TERN__LOOP_MAGIC 0x7465726eu /* "tern" */
#define TERN__FIRED_MAX 256

struct tern_loop {
    unsigned magic;
    /* ---- written by other threads (each group on its own line) ---- */
    alignas(TERN_CACHELINE) struct __cds_wfcq_head in_head;
    alignas(TERN_CACHELINE) struct cds_wfcq_tail in_tail;
    /*
     * Posts admitted, ever (less refused ones). On the tail's line, which a
     * producer holds anyway for its exchange: admission adds no miss.
     */
    _Atomic uint64_t posted;
    /* Foreign tern_cancel calls between their `closing` check and enqueue. */
    _Atomic unsigned foreign_inflight;
    alignas(TERN_CACHELINE) _Atomic unsigned wake_state;
    _Atomic bool stop_requested;
    _Atomic bool closing;        /* tern_loop_free has begun */
    _Atomic bool sealed;         /* a group's destroy phase: scheduling aborts (group.c) */
    _Atomic uint64_t wake_syscalls;
    alignas(TERN_CACHELINE) _Atomic uintptr_t owner; /* claiming thread's token */

    /* ---- loop thread only ---- */
    alignas(TERN_CACHELINE) uint64_t now;
    int step; /* 1..5 inside a turn, 0 outside */
    unsigned dispatch_batch;
    unsigned max_operations;
    unsigned max_undelivered;
    unsigned flags;
    unsigned ops_local;  /* the loop's own live ops (all but pending posts) */
    _Atomic unsigned ops_count;    /* ops_local, published for producers */
    _Atomic uint64_t posts_done;   /* posts taken off the inbound queue, ever */
    unsigned refs;       /* referenced ops (keep run() going) */
    unsigned anon;       /* live ops without an id (defers): ops_local - ids.count */
    bool check_books;    /* TERN_CHECK_BOOKS: audit the counters at every turn's end */
    unsigned internal;   /* >0: the runtime is calling the public API for itself */
    unsigned io_count;   /* fds (and signals the backend reads) registered besides the wake fd */
    uint64_t arm_seq;    /* arming sequence for the heap */
    uint32_t heap_claims; /* ops holding a heap slot (see tern__deadline_claim) */
    tern_id id_next, id_end; /* this loop's block of the process-wide id counter */
    int64_t last_wait;   /* step 3's timeout, for tests */
    struct tern__op *ready_head, *ready_tail;
    unsigned ready_count; /* queued ops that are not dead */
    struct tern__idmap ids;
    struct tern__heap heap;
    struct tern__slab timers, defers; /* records of timer.c and defer.c */
    struct tern__backend backend;
    struct tern__wake wake; /* -1s when the backend wakes itself (backend.ops->wake) */
    struct tern__op **fds; /* fd -> watcher op, grown on demand */
    unsigned fds_len;
    struct tern__fired fired[TERN__FIRED_MAX];

    /* jobs (runtime/job.c) */
    struct tern__ring *ring;
    unsigned undelivered; /* credits held: accepted jobs not yet popped */
    unsigned jobs_live;   /* accepted jobs whose done has not started (audit only) */
    unsigned long_undelivered; /* of the credits, those held by TERN_LONG jobs */
    unsigned last_refusal;  /* tern_refusal of the last submission (tern_loop_last_refusal) */
    struct tern__spin spin; /* step 4's spin budget for pool completions (turn.c) */
    struct tern_job *job_cache; /* freed job records kept for reuse */
    unsigned job_cache_len;
    unsigned submits; /* jobs submitted; every 4th has its queue wait timed */
    uint64_t pool_checked; /* the pool start (generation) this loop's config matched */
    bool has_pool_config;
    tern_pool_config pool_config;

    /* statistics (relaxed atomics: tern_loop_stats_get reads them from anywhere) */
    _Atomic uint64_t st_turns, st_posts, st_events, st_idle_ns;
    _Atomic unsigned st_undelivered, st_undelivered_peak;
};

/* ------------------------------------------------------------------ */
/* Internal calls.                                                    */
/* ------------------------------------------------------------------ */

tern_id tern__id_next(tern_loop *loop);

/* `owner` holds the claiming thread's token, 0 when unclaimed. */

/* Loop-only check: aborts naming fn when a foreign thread runs the loop. */
void tern__loop_only_failed(const char *fn);
/*
 * A thread's identity is the address of a thread-local byte: unique while
 * the thread lives, free to compute (initial-exec TLS, no call).
 */
extern _Thread_local char tern__thread_anchor __attribute__((tls_model("initial-exec")));
static inline uintptr_t tern__thread_token(void)
{
    return (uintptr_t)&tern__thread_anchor;
}
static inline void tern__loop_only(const tern_loop *loop, const char *fn)
{
    uintptr_t owner = atomic_load_explicit(&loop->owner, memory_order_relaxed);
    if (TERN_UNLIKELY(owner != 0 && owner != tern__thread_token()))
        tern__loop_only_failed(fn);
}
#define TERN__LOOP_ONLY(loop) tern__loop_only((loop), __func__)
#define TERN__REQUIRE_LOOP(loop) \
    TERN_REQUIRE((loop) != NULL && (loop)->magic == TERN__LOOP_MAGIC)

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
/* The op behind a public id; NULL for the runtime's own unless inside
 * tern__internal_begin/end. */
struct tern__op *tern__op_find(tern_loop *loop, tern_id id);

/*
 * The runtime using the public API for itself (a stream's fd watcher, a
 * connect's timeout timer and lookup): ops started between begin and end
 * are internal, and only calls made between begin and end can reach them
 * by id. A caller's stray or off-by-one id then gets -ENOENT, never the
 * runtime's own operation.
 */
static inline void tern__internal_begin(tern_loop *loop)
{
    loop->internal++;
}

static inline void tern__internal_end(tern_loop *loop)
{
    loop->internal--;
}

/*
 * Deadlines on the one heap (timers and internal deadlines alike). An op
 * that may be armed first claims a heap slot (the only step that can fail,
 * -ENOMEM); while it holds the claim, arming never fails, so a repeating
 * timer can always rearm. An armed op becomes ready in step 5 when due.
 */
int tern__deadline_claim(tern_loop *loop);
void tern__deadline_unclaim(tern_loop *loop);
void tern__deadline_arm(tern_loop *loop, struct tern__op *op, uint64_t deadline);
void tern__deadline_disarm(tern_loop *loop, struct tern__op *op);
static inline bool tern__deadline_armed(const struct tern__op *op)
{
    return op->aux != UINT32_MAX;
}

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
/* One turn; max_wait_ns < 0 waits as needed. */
void tern__loop_turn(tern_loop *loop, int64_t max_wait_ns);

/* Watchers (io.c): readiness from the backend into the ready queue. */
void tern__io_fired(tern_loop *loop, int fd, unsigned events);
/* Signals (net/signal.c): the backend itself reported count deliveries of
 * signo (a TERN__FIRED_SIGNAL entry). */
void tern__signal_fired(tern_loop *loop, int signo, unsigned count);
/* The process-wide fd registry behind G4. */
int tern__fd_claim(int fd, tern_loop *loop);
void tern__fd_release(int fd);

/* Record sizes of the slab-allocated kinds (timer.c, defer.c). */
extern const size_t tern__timer_size, tern__defer_size;

#include "admit.h"

#endif
