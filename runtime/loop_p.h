/*
 * The loop's private layout and the internal interface between the loop
 * core, the operation kinds (timers, watchers, jobs, streams) and the pool.
 *
 * Operations. Everything a loop tracks is a `struct tern__op` embedded at
 * the start of a kind-specific record. The op carries the id, the kind's
 * class (dispatch/cancel/free hooks) and a link for the ready queue. The
 * core owns the id map, the ready queue and the live counts; each kind
 * owns its record's memory and decides what cancel means for it.
 *
 * Lifetime of an op: tern__op_add() gives it an id and counts it live;
 * tern__op_ready() queues it for step 2, where the core calls
 * class->dispatch(); tern__op_finish() retires the id and uncounts it, and
 * frees the record through class->free() — at once, or when step 2 next
 * pops it if it is still queued (the ready queue is singly linked, so a
 * queued op is marked dead rather than unlinked).
 */
#ifndef TERN_LOOP_P_H
#define TERN_LOOP_P_H

#include <stdalign.h>
#include <stdatomic.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdnoreturn.h>

#include <urcu/wfcqueue.h>

#include "backend.h"
#include "check.h"
#include "clock.h"
#include "spin.h"
#include "fault.h"
#include "platform.h"
#include "pool.h"
#include "tern.h"

struct tern__op;

struct tern__op_class {
    const char *name;
    /* Step 2: run the op's callback. The op is no longer queued. */
    void (*dispatch)(tern_loop *loop, struct tern__op *op);
    /*
     * tern_cancel (on the loop thread, or in step 1 for a foreign request)
     * and teardown. Returns 0, or -ENOENT when there is nothing left to
     * cancel. May finish the op or arrange a final callback.
     */
    int (*cancel)(tern_loop *loop, struct tern__op *op);
    /*
     * Step 5: the op's deadline came and it has left the heap. NULL means
     * "queue it for step 2"; a timer also rearms itself here.
     */
    void (*expired)(tern_loop *loop, struct tern__op *op);
    /* Release the record's memory; the op is unregistered and unqueued. */
    void (*free)(tern_loop *loop, struct tern__op *op);
    /* Whether tern_ref/tern_unref apply (false: always referenced). */
    bool refable;
};

enum {
    TERN__OP_QUEUED = 1u << 0, /* on the ready queue */
    TERN__OP_DEAD = 1u << 1,   /* finished while queued: free when popped */
    TERN__OP_UNREF = 1u << 2,  /* does not keep tern_loop_run() alive */
    TERN__OP_ANON = 1u << 3,   /* has no id (a defer): not in the id map */
    TERN__OP_INTERNAL = 1u << 4, /* the runtime's own (a stream's watcher): no public call reaches it */
};

struct tern__op {
    tern_id id;
    const struct tern__op_class *cls;
    struct tern__op *ready_next;
    uint32_t flags;
    uint32_t aux; /* index in the deadline heap; UINT32_MAX when not armed */
};

/* ------------------------------------------------------------------ */
/* The id map: id -> op, open addressing over (id, op) pairs.         */
/* ------------------------------------------------------------------ */

struct tern__idmap_slot {
    tern_id id;
    struct tern__op *op; /* NULL: empty */
};

struct tern__idmap {
    struct tern__idmap_slot *slots;
    size_t mask;  /* capacity - 1; capacity is a power of two */
    size_t count; /* entries in use */
};

int tern__idmap_init(struct tern__idmap *m);
void tern__idmap_destroy(struct tern__idmap *m);
int tern__idmap_insert(struct tern__idmap *m, struct tern__op *op); /* 0 or -ENOMEM */
struct tern__op *tern__idmap_find(const struct tern__idmap *m, tern_id id);
void tern__idmap_remove(struct tern__idmap *m, struct tern__op *op);
/* Grow ahead of an insert so the insert itself cannot fail. */
int tern__idmap_reserve(struct tern__idmap *m, size_t extra);

/* ------------------------------------------------------------------ */
/* A loop-local allocator for fixed-size records (slab.c).             */
/* ------------------------------------------------------------------ */

struct tern__slab_chunk;
struct tern__slab {
    size_t size;
    void *free;
    struct tern__slab_chunk *chunks;
    size_t next_chunk;
};

void tern__slab_init(struct tern__slab *s, size_t size);
void *tern__slab_alloc(struct tern__slab *s); /* NULL: out of memory */
void tern__slab_free(struct tern__slab *s, void *p);
void tern__slab_destroy(struct tern__slab *s);

/* ------------------------------------------------------------------ */
/* The deadline heap, ordered by (deadline, arming sequence).         */
/* ------------------------------------------------------------------ */

struct tern__heap_entry {
    uint64_t deadline;
    uint64_t seq;
    struct tern__op *op; /* op->aux holds the entry's index */
};

struct tern__heap {
    struct tern__heap_entry *v;
    uint32_t len, cap;
};

void tern__heap_destroy(struct tern__heap *h);
/* Make room for n entries in all, so pushes up to n cannot fail. */
int tern__heap_reserve(struct tern__heap *h, size_t n);
void tern__heap_push(struct tern__heap *h, uint64_t deadline, uint64_t seq, struct tern__op *op);
void tern__heap_remove(struct tern__heap *h, uint32_t index);
static inline const struct tern__heap_entry *tern__heap_top(const struct tern__heap *h)
{
    return h->len ? &h->v[0] : NULL;
}

/* ------------------------------------------------------------------ */
/* The inbound queue: what other threads hand to the loop.            */
/* ------------------------------------------------------------------ */

enum tern__inbound_kind { TERN__IN_POST = 1, TERN__IN_CANCEL = 2 };

struct tern__inbound {
    struct cds_wfcq_node node;
    enum tern__inbound_kind kind;
    union {
        struct {
            tern_fn fn;
            void *arg;
        } post;
        tern_id cancel_id;
    } u;
};

/* ------------------------------------------------------------------ */
/* The loop.                                                          */
/* ------------------------------------------------------------------ */

/* The wake word: see inbound.c for the protocol. */
enum { TERN__WAKE_RUNNING = 0, TERN__WAKE_PARKING = 1, TERN__WAKE_NOTIFIED = 2 };

struct tern__ring; /* runtime/job_p.h, runtime/ring.c */

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
 * Whether the loop is being freed, for every call that schedules work
 * (starts, posts, defers, submissions): they answer -ESHUTDOWN. A loop of
 * a group in its destroy phase is also sealed, and there scheduling is a
 * contract violation, not a refusal: it aborts naming the rule (group.c).
 */
noreturn void tern__loop_sealed_failed(void);
static inline bool tern__loop_closing(tern_loop *loop)
{
    if (TERN_LIKELY(!atomic_load_explicit(&loop->closing, memory_order_relaxed)))
        return false;
    if (atomic_load_explicit(&loop->sealed, memory_order_relaxed))
        tern__loop_sealed_failed();
    return true;
}

/*
 * Claim the loop for the calling thread (run, run_once, free; a group's
 * thread for the group's lifetime) and give it back. claim returns the
 * loop the thread was running before, for release to restore.
 */
tern_loop *tern__loop_claim(tern_loop *loop, const char *fn);
void tern__loop_release(tern_loop *loop, tern_loop *prev);

/*
 * Admission for a new op on the loop thread: -ESHUTDOWN while closing,
 * -EAGAIN at max_operations; 0 means one unit of `live` is now held and
 * must be handed to tern__op_add or returned with tern__op_unadmit.
 */
/* Posts admitted and not yet run (any thread; a snapshot). */
static inline uint64_t tern__posts_pending(const tern_loop *loop)
{
    return atomic_load_explicit(&((tern_loop *)loop)->posted, memory_order_relaxed) -
           atomic_load_explicit(&((tern_loop *)loop)->posts_done, memory_order_relaxed);
}

static inline void tern__ops_set(tern_loop *loop, unsigned n)
{
    loop->ops_local = n;
    atomic_store_explicit(&loop->ops_count, n, memory_order_relaxed);
}

/*
 * Admission of a loop-thread op. Counted against max_operations with the
 * pending posts; the loop's own count is a plain store, so an op costs no
 * atomic read-modify-write. (Posts are exact among themselves; a start on
 * the loop racing a post can exceed the bound by that one op.)
 */
static inline int tern__op_admit(tern_loop *loop)
{
    if (tern__loop_closing(loop))
        return -ESHUTDOWN;
    if (TERN_UNLIKELY(loop->ops_local + tern__posts_pending(loop) >= loop->max_operations))
        return -EAGAIN;
    tern__ops_set(loop, loop->ops_local + 1);
    return 0;
}

static inline void tern__op_unadmit(tern_loop *loop)
{
    unsigned n = loop->ops_local;
    TERN_DECREMENT(n);
    tern__ops_set(loop, n);
}

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

/*
 * Wake the loop if it is parking or asleep (any thread, after publishing).
 * True when this call wrote the wake fd: the loop was asleep.
 */
bool tern__loop_wake(tern_loop *loop);
/*
 * The loop's side of a wake: set the word to RUNNING and, if a producer
 * had notified, consume its wake-up (an eventfd or pipe write, or the
 * backend's own). Called when a thread claims the loop and after every
 * backend wait.
 */
void tern__loop_awake(tern_loop *loop);
/* Whether the inbound queue has anything (any thread; a snapshot). */
bool tern__inbound_pending(tern_loop *loop);
/* Step 1's first half: run posts, then resolve cancels. */
void tern__inbound_drain(tern_loop *loop);
/* Nothing queued and no producer on its way in (teardown's last check). */
bool tern__inbound_quiet(tern_loop *loop);
/* Resolve a cancel by id on the thread that holds the loop. */
int tern__cancel_local(tern_loop *loop, tern_id id);

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

#endif
