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
#include "spin.h"
#include "fault.h"
#include "platform.h"
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
    /*
     * Step 2, for an op that stands for a queue of callbacks (the loop's
     * due timers, timer.c) instead of being one: run at most `budget` of
     * them and return how many ran; *more says whether any still wait, and
     * then the op stays at the head of the ready queue for the next step 2.
     * NULL: the op is one callback, run through dispatch.
     */
    unsigned (*drain)(tern_loop *loop, struct tern__op *op, unsigned budget, bool *more);
};

enum {
    TERN__OP_QUEUED = 1u << 0, /* on the ready queue */
    TERN__OP_DEAD = 1u << 1,   /* finished while queued: free when popped */
    TERN__OP_UNREF = 1u << 2,  /* does not keep tern_loop_run() alive */
    TERN__OP_ANON = 1u << 3,   /* has no id (a defer): not in the id map */
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
/* The deadline heap, ordered by (deadline, arming sequence) (heap.c). */
/* ------------------------------------------------------------------ */

/*
 * 16 bytes: a million timers cost 16 MB of heap, and a sift moves 4
 * entries per cache line. `ref` names what is armed: a timer's slot
 * (timer.c), or, with TERN__HEAP_OP set, an index into `ops`, the armed
 * ops that live outside the timer table (a job's timeout, a stream's
 * deadline). The armed thing remembers its entry's index (a timer's
 * `heap`, an op's `aux`), so removal needs no search.
 */
#define TERN__HEAP_OP (UINT32_C(1) << 31)

struct tern__heap_entry {
    uint64_t deadline;
    uint32_t seq; /* arming order among equal deadlines; renumbered before it wraps */
    uint32_t ref;
};

struct tern__heap {
    struct tern__heap_entry *v;
    uint32_t len, cap;
    uint32_t next_seq;
    uint32_t claims;    /* timers and ops holding a heap slot (tern__deadline_claim) */
    uint32_t op_claims; /* of the claims, ops': `ops` has room for them all */
    uint32_t ops_cap, ops_free; /* ops_free: a free index + 1, 0 when none */
    uintptr_t *ops; /* an armed op's pointer, or (next free index + 1) << 1 | 1 */
};

void tern__heap_destroy(struct tern__heap *h);
static inline const struct tern__heap_entry *tern__heap_top(const struct tern__heap *h)
{
    return h->len ? &h->v[0] : NULL;
}
/* Step 5: every entry due at loop->now leaves the heap, soonest first. */
void tern__deadline_fire(tern_loop *loop);

/* ------------------------------------------------------------------ */
/* Timers (timer.c, timer_table.c): compact records, not ops.          */
/* ------------------------------------------------------------------ */

/*
 * A timer is a 32-byte record in the loop's timer table, named by its
 * slot, plus one heap entry: no op header and no id-map entry. Its id
 * encodes where the record is (see timer_table.c), so a lookup is a probe
 * of a small per-chunk map, an index and a compare. Slots are dense; the
 * 256 slots of a chunk share a process-wide chunk number: chunk = slot >> 8.
 */
#define TERN__TIMER_CHUNK_BITS 8
#define TERN__TIMER_CHUNK (1u << TERN__TIMER_CHUNK_BITS)
#define TERN__SLOT_NONE UINT32_MAX

struct tern__timer {
    tern_timer_cb cb; /* NULL: the slot is free, or stopped while queued */
    void *arg;
    uint32_t heap;    /* index of its heap entry; UINT32_MAX when not armed */
    uint32_t next;    /* the next slot on the due queue or the free list */
    uint32_t gen;     /* generation: the live timer's, or the next one's if free */
    uint32_t bits;    /* TERN__TIMER_* flags | repeat index << 4 (0: one-shot) */
};
_Static_assert(sizeof(struct tern__timer) == 32, "a timer record is 32 bytes");

enum {
    TERN__TIMER_QUEUED = 1u << 0,   /* on the due queue */
    TERN__TIMER_UNREF = 1u << 1,    /* does not keep tern_loop_run() alive */
    TERN__TIMER_FLAGS = 15u,
};

struct tern__timer_table {
    /*
     * The records, by slot, in one array: the heap updates a record's
     * index at every move of its entry, so the address must be one index
     * away. It grows by doubling (realloc: mremap once it is large, so
     * growing copies nothing); records are named by slot, never by
     * pointer, so they may move.
     */
    struct tern__timer *rec;
    uint32_t rec_cap;            /* slots allocated, a multiple of TERN__TIMER_CHUNK */
    uint32_t *chunk_no;          /* each chunk's process-wide number (for ids) */
    uint32_t nchunks, chunk_no_cap;
    uint64_t *map;   /* chunk number -> chunk index: (number + 1) << 32 | index */
    uint32_t map_mask;
    uint32_t used;   /* slots ever handed out (they fill chunks in order) */
    uint32_t free;   /* LIFO of free slots, TERN__SLOT_NONE when empty */
    uint32_t live;   /* started and not finished */
    uint64_t *repeat; /* periods of repeating timers by repeat index - 1 */
    uint32_t repeat_cap, repeat_used, repeat_free; /* repeat_free: index + 1 of a free one */
    uint32_t due_head, due_tail; /* the due queue: expired timers, in firing order */
    uint32_t due_live; /* queued timers that are still live */
    struct tern__op due; /* stands for the due queue on the ready queue */
};

static inline struct tern__timer *tern__timer_at(const struct tern__timer_table *t, uint32_t slot)
{
    return &t->rec[slot];
}

/* Ids with this bit are timers'; the process-wide counter never reaches it. */
#define TERN__TIMER_ID (UINT64_C(1) << 63)
static inline bool tern__timer_id(tern_id id)
{
    return (id & TERN__TIMER_ID) != 0;
}

/* The id layout; see timer_table.c. */
#define TERN__TIMER_GEN_BITS 30
#define TERN__TIMER_GEN_LIMIT (UINT32_C(1) << TERN__TIMER_GEN_BITS) /* retired at this */
#define TERN__TIMER_NO_BITS 25
#define TERN__TIMER_OFFSET_SHIFT TERN__TIMER_GEN_BITS
#define TERN__TIMER_NO_SHIFT (TERN__TIMER_GEN_BITS + TERN__TIMER_CHUNK_BITS)

/* The table (timer_table.c). slot_alloc: 0 or -ENOMEM. */
int tern__timer_slot_alloc_slow(struct tern__timer_table *t, uint32_t *slot);
static inline int tern__timer_slot_alloc(struct tern__timer_table *t, uint32_t *slot)
{
    if (TERN_LIKELY(t->free != TERN__SLOT_NONE)) {
        *slot = t->free;
        t->free = t->rec[*slot].next;
        return 0;
    }
    if (TERN_LIKELY(t->used < t->nchunks * TERN__TIMER_CHUNK)) {
        *slot = t->used++;
        return 0;
    }
    return tern__timer_slot_alloc_slow(t, slot);
}

/* Ends the slot's generation (its ids go stale) and frees it. */
static inline void tern__timer_slot_free(struct tern__timer_table *t, uint32_t slot)
{
    struct tern__timer *r = &t->rec[slot];
    r->cb = NULL;
    r->bits = 0;
    r->heap = UINT32_MAX;
    if (++r->gen == TERN__TIMER_GEN_LIMIT)
        return; /* retired: its ids would come round again */
    r->next = t->free;
    t->free = slot;
}

static inline tern_id tern__timer_id_of(const struct tern__timer_table *t, uint32_t slot)
{
    uint32_t chunk = slot >> TERN__TIMER_CHUNK_BITS;
    uint32_t offset = slot & (TERN__TIMER_CHUNK - 1);
    return TERN__TIMER_ID | (uint64_t)t->chunk_no[chunk] << TERN__TIMER_NO_SHIFT |
           (uint64_t)offset << TERN__TIMER_OFFSET_SHIFT | t->rec[slot].gen;
}
/* The live timer an id names here, or TERN__SLOT_NONE. */
uint32_t tern__timer_slot_of(const struct tern__timer_table *t, tern_id id);
/* A repeating timer's period: its index (1-based), or 0 when out of memory. */
uint32_t tern__timer_repeat_alloc(struct tern__timer_table *t, uint64_t period);
void tern__timer_repeat_free(struct tern__timer_table *t, uint32_t ix);
void tern__timer_table_destroy(struct tern__timer_table *t);

void tern__timers_init(tern_loop *loop);
/* Finish every live timer (teardown), internal ones included. */
void tern__timers_cancel_all(tern_loop *loop);
/* Give the table's memory back and its chunk numbers to the process. */
void tern__timers_destroy(tern_loop *loop);
/* tern_cancel and tern_ref/unref for a timer id: 0 or -ENOENT. */
int tern__timer_cancel(tern_loop *loop, tern_id id);
int tern__timer_set_ref(tern_loop *loop, tern_id id, bool ref);
/* Step 5: the timer in `slot` left the heap, due. */
void tern__timer_expired(tern_loop *loop, uint32_t slot);

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

struct tern__ring; /* pool/pool_p.h, pool/ring.c */

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
    unsigned io_count;   /* fds (and signals the backend reads) registered besides the wake fd */
    tern_id id_next, id_end; /* this loop's block of the process-wide id counter */
    int64_t last_wait;   /* step 3's timeout, for tests */
    struct tern__op *ready_head, *ready_tail;
    unsigned ready_count; /* queued ops that are not dead */
    struct tern__idmap ids;
    struct tern__heap heap;
    struct tern__timer_table timers; /* timer.c, timer_table.c */
    struct tern__slab defers;        /* records of defer.c */
    struct tern__backend backend;
    struct tern__wake wake; /* -1s when the backend wakes itself (backend.ops->wake) */
    struct tern__io **fds; /* fd -> its watcher (io.c), grown on demand */
    unsigned fds_len;
    struct tern__fired fired[TERN__FIRED_MAX];

    /* pool side (pool/job.c) */
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

uint64_t tern__clock_now(void);
/* A cheap monotonic tick for latency figures, and its rate (see clock.c). */
uint64_t tern__ticks(void);
double tern__ticks_per_ns(void);
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
/* The op behind a public id, or NULL. */
struct tern__op *tern__op_find(tern_loop *loop, tern_id id);
/*
 * Take a registered op out of the id map: it stays live (counted, still
 * dispatched and finished as before) but no public by-id call reaches it
 * any more. For an op the runtime starts for itself through a path that
 * registers an id (a connect's name lookup, a job): it is then reachable
 * only through the pointer its owner keeps. Loop thread, right after
 * registration, before any callback could learn the id.
 */
void tern__op_withdraw_id(tern_loop *loop, struct tern__op *op);

/*
 * Deadlines on the one heap (timers and internal deadlines alike). An op
 * that may be armed first claims a heap slot (the only step that can fail,
 * -ENOMEM); while it holds the claim, arming never fails, so a repeating
 * timer can always rearm. An armed op becomes ready in step 5 when due
 * (or its class's `expired` runs). Any op may be armed, embedded anywhere.
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
 * An internal deadline (a connect's timeout, a listener's back-off): an op
 * embedded in its owner's record that lives only on the heap. It has no
 * id, is never registered, counted or queued, so no public call can reach
 * it; its class needs only an `expired` hook, which runs in step 5 (after
 * the heap let go of it) and must not call user code. The owner claims a
 * heap slot before arming it and gives the claim back when it disarms it
 * or it expires.
 */
static inline void tern__deadline_init(struct tern__op *op, const struct tern__op_class *cls)
{
    *op = (struct tern__op){.cls = cls, .aux = UINT32_MAX};
}
/* The same for a timer's slot (timer.c); its record keeps the index. */
int tern__deadline_claim_timer_slow(tern_loop *loop);
static inline int tern__deadline_claim_timer(tern_loop *loop)
{
    if (TERN_LIKELY(loop->heap.claims < loop->heap.cap)) {
        loop->heap.claims++;
        return 0;
    }
    return tern__deadline_claim_timer_slow(loop);
}
static inline void tern__deadline_unclaim_timer(tern_loop *loop)
{
    TERN_DECREMENT(loop->heap.claims);
}
void tern__deadline_arm_timer(tern_loop *loop, uint32_t slot, uint64_t deadline);
void tern__deadline_remove_timer(tern_loop *loop, uint32_t slot);
static inline void tern__deadline_disarm_timer(tern_loop *loop, uint32_t slot)
{
    if (loop->timers.rec[slot].heap != UINT32_MAX)
        tern__deadline_remove_timer(loop, slot);
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

/* TERN_LOOP_RCU: make the calling thread an online qsbr reader, and back. */
void tern__rcu_enter(tern_loop *loop);
void tern__rcu_leave(tern_loop *loop);

/*
 * Audit the loop's books (TERN_CHECK_BOOKS=1 in the environment when the
 * loop is created; the stress suite sets it): aborts naming the counter
 * that disagrees with what it counts. Loop thread, between turns.
 */
void tern__loop_check_books(tern_loop *loop);
/* The result ring's share of the audit (pool/job.c). */
void tern__loop_pool_check_books(tern_loop *loop);

/* Whether anything keeps tern_loop_run() going. */
bool tern__loop_alive(tern_loop *loop);
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
/* Step 4: readiness from the backend, handed to the fd's watcher. */
void tern__io_fired(tern_loop *loop, int fd, unsigned events);
/* Signals (net/signal.c): the backend itself reported count deliveries of
 * signo (a TERN__FIRED_SIGNAL entry). */
void tern__signal_fired(tern_loop *loop, int signo, unsigned count);

/* Record size of the slab-allocated defers (defer.c). */
extern const size_t tern__defer_size;

/* Pool configuration checks the loop calls (pool/pool.c). */
int tern__pool_config_check(const tern_pool_config *cfg);     /* 0 or -EINVAL */
bool tern__pool_config_conflicts(const tern_pool_config *cfg); /* differs from the running pool's */

/* Whether any pool worker is on a CPU now (running a job, or spinning for one). */
bool tern__pool_active(void);

/*
 * A name lookup the runtime starts for itself (pool/resolve.c): as
 * tern_resolve, but the job has no public id (see tern__op_withdraw_id);
 * *jobp is the only way to reach it, valid until cb has run. cancel asks
 * it to stop (cb then comes with -ECANCELED unless the result was in);
 * calling it again changes nothing. Loop thread.
 */
int tern__lookup_start(tern_loop *loop, const char *host, const char *service,
                       const struct addrinfo *hints, tern_resolve_cb cb, void *arg,
                       tern_job **jobp);
void tern__lookup_cancel(tern_loop *loop, tern_job *job);

/* Pool hooks the loop calls (pool/job.c). */
void tern__loop_pool_collect(tern_loop *loop); /* step 1: ring -> ready */
bool tern__loop_pool_pending(tern_loop *loop); /* anything on the ring now */
void tern__loop_pool_destroy(tern_loop *loop);
int tern__loop_pool_init(tern_loop *loop);

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

#endif
