/*
 * The op model (loop_p.h lists its sibling headers), and the containers
 * the loop keeps ops in: the id map (idmap.c), the slab (slab.c) and the
 * deadline heap (heap.c).
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
#ifndef TERN_OP_TYPES_H
#define TERN_OP_TYPES_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "os_thread.h"
#include "tern.h"

struct tern__op;

/*
 * What an op's class says it is, for the kinds whose records are found by
 * an id from any of several files: those files ask the class's kind, so
 * they need not name the class, which lives with the hooks above them.
 */
enum tern__op_kind {
    TERN__KIND_OTHER = 0,
    TERN__KIND_STREAM, /* net/stream.c's tern__stream_class */
    TERN__KIND_UDP,    /* net/udp.c's tern__udp_class */
};

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
    /*
     * Step 4, for an op that handed an operation to a completion backend
     * with its id as the token: one completion (backend.h's struct
     * tern__done). The hook owns a completion's buffer from then on and
     * gives it back (backend ops->recycle) once its bytes are consumed.
     * NULL: the kind hands the backend nothing.
     */
    void (*completed)(tern_loop *loop, struct tern__op *op, const struct tern__done *d);
    /* The kind, where a lower file must recognise the class (see above). */
    enum tern__op_kind kind;
};

enum {
    TERN__OP_QUEUED = 1u << 0, /* on the ready queue */
    TERN__OP_DEAD = 1u << 1,   /* finished while queued: free when popped */
    TERN__OP_UNREF = 1u << 2,  /* does not keep tern_loop_run() alive */
    TERN__OP_ANON = 1u << 3,   /* has no id (a defer): not in the id map */
    TERN__OP_TABLED = 1u << 4, /* its id names its record's place (a job): not in the id map */
    TERN__OP_OWN = 1u << 5,    /* the kind's own (a job: its deadline took effect) */
    /* six bits in all (struct tern__op's flags) */
};

struct tern__op {
    tern_id id;
    const struct tern__op_class *cls;
    struct tern__op *ready_next;
    uint32_t flags : 6;
    uint32_t aux : 26; /* index in the deadline heap; TERN__OP_UNARMED when not armed */
    uint32_t born;     /* tern__op_stamp(loop->now) when registered (tern_loop_walk's age) */
};
/* Every kind's record embeds one: four words, so step 2 reads an op's id,
 * class and link from one line. The flags and the heap index share a
 * word (a heap holds fewer than TERN__OP_UNARMED entries, heap.c), and
 * the birth stamp is the loop's clock in 2^20 ns units (about a
 * millisecond; it wraps after 52 days), so a walk's ages are good to a
 * unit: a fifth word would make every job's record a word dearer. */
_Static_assert(sizeof(struct tern__op) == 32, "an op header is four words");
#define TERN__OP_UNARMED ((UINT32_C(1) << 26) - 1)
#define TERN__OP_BORN_SHIFT 20
static inline uint32_t tern__op_stamp(uint64_t now)
{
    return (uint32_t)(now >> TERN__OP_BORN_SHIFT);
}
/* The age in ns of an op stamped `born`, at loop time `now`: whole units,
 * within one unit of the exact age. */
static inline uint64_t tern__op_age(uint32_t born, uint64_t now)
{
    return (uint64_t)(uint32_t)(tern__op_stamp(now) - born) << TERN__OP_BORN_SHIFT;
}

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
/* The bytes of s's chunks (tern_loop_memory_bytes). */
uint64_t tern__slab_bytes(const struct tern__slab *s);

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
    uint32_t claims;            /* timers and ops holding a heap slot (tern__deadline_claim) */
    uint32_t op_claims;         /* of the claims, ops': `ops` has room for them all */
    uint32_t ops_cap, ops_free; /* ops_free: a free index + 1, 0 when none */
    uintptr_t *ops;             /* an armed op's pointer, or (next free index + 1) << 1 | 1 */
};

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

/*
 * `heap` and `next` share a word: a one-shot timer is either armed (on
 * the heap) or queued (it left the heap when it came due), and a free
 * slot is neither armed nor queued. A repeating timer is rearmed when it
 * comes due, so it can be armed and queued at once: while queued, its
 * link sits in its repeat entry (struct tern__timer_repeat), and the
 * word keeps its heap index. tern__timer_link says where the link is.
 */
struct tern__timer {
    tern_timer_cb cb; /* NULL: the slot is free, or stopped while queued */
    void *arg;
    union {
        uint32_t heap; /* armed: its heap entry's index; UINT32_MAX when not armed */
        uint32_t next; /* a queued one-shot or a free slot: the next slot */
    };
    uint32_t born; /* tern__op_stamp(loop->now) when started (tern_loop_walk's age) */
    uint32_t gen;  /* generation: the live timer's, or the next one's if free */
    uint32_t bits; /* TERN__TIMER_* flags | repeat index << 4 (0: one-shot) */
};
_Static_assert(sizeof(struct tern__timer) == 32, "a timer record is 32 bytes");
#define TERN__TIMER_REPEAT_SHIFT 4

/* A repeating timer's period, and its due-queue link while it is queued. */
struct tern__timer_repeat {
    uint64_t period;
    uint32_t next; /* the next slot on the due queue; the free list's (index + 1) if free */
};

enum {
    TERN__TIMER_QUEUED = 1u << 0, /* on the due queue */
    TERN__TIMER_UNREF = 1u << 1,  /* does not keep tern_loop_run() alive */
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
    uint32_t rec_cap;   /* slots allocated, a multiple of TERN__TIMER_CHUNK */
    uint32_t *chunk_no; /* each chunk's process-wide number (for ids) */
    uint32_t nchunks, chunk_no_cap;
    uint64_t *map; /* chunk number -> chunk index: (number + 1) << 32 | index */
    uint32_t map_mask;
    uint32_t used;                     /* slots ever handed out (they fill chunks in order) */
    uint32_t free;                     /* LIFO of free slots, TERN__SLOT_NONE when empty */
    uint32_t live;                     /* started and not finished */
    struct tern__timer_repeat *repeat; /* repeating timers' entries by repeat index - 1 */
    uint32_t repeat_cap, repeat_used, repeat_free; /* repeat_free: index + 1 of a free one */
    uint32_t due_head, due_tail; /* the due queue: expired timers, in firing order */
    uint32_t due_live;           /* queued timers that are still live */
    struct tern__op due;         /* stands for the due queue on the ready queue */
};

static inline struct tern__timer *tern__timer_at(const struct tern__timer_table *t, uint32_t slot)
{
    return &t->rec[slot];
}

/* The timer's repeat index: its entry is t->repeat[index - 1]; 0 for a one-shot. */
static inline uint32_t tern__timer_rep(const struct tern__timer *r)
{
    return r->bits >> TERN__TIMER_REPEAT_SHIFT;
}

/* Where the due-queue link of the queued timer r is (see struct tern__timer). */
static inline uint32_t *tern__timer_link(const struct tern__timer_table *t, struct tern__timer *r)
{
    uint32_t rep = tern__timer_rep(r);
    return rep != 0 ? &t->repeat[rep - 1].next : &r->next;
}

/* Whether the live timer r holds a heap entry (its word is `heap`, not `next`). */
static inline bool tern__timer_armed(const struct tern__timer *r)
{
    if ((r->bits & TERN__TIMER_QUEUED) && tern__timer_rep(r) == 0)
        return false; /* a queued one-shot left the heap; the word is its link */
    return r->heap != UINT32_MAX;
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

/* ------------------------------------------------------------------ */
/* Chunk numbers, for ids that name a record's place (numbers.c).     */
/* ------------------------------------------------------------------ */

/* A slot whose generation reaches this is retired (timers and jobs alike). */
#define TERN__GEN_LIMIT TERN__TIMER_GEN_LIMIT

struct tern__numbers_returned {
    uint32_t no, floor;
};

struct tern__numbers {
    tern__mutex_t lock;
    uint32_t fresh; /* numbers below it have been handed out */
    uint32_t limit; /* numbers stay below it */
    struct tern__numbers_returned *back;
    size_t back_len, back_cap;
};

extern struct tern__numbers tern__timer_numbers, tern__job_numbers;
/* A number for a new chunk and the generation its slots start at: 0 or -ENOMEM. */
int tern__numbers_take(struct tern__numbers *r, uint32_t *no, uint32_t *floor);
/* A freed chunk's number, with the highest generation any of its slots reached. */
void tern__numbers_give_back(struct tern__numbers *r, uint32_t no, uint32_t floor);

/*
 * Job ids (job_slab.c): bit 63 clear and bit 62 set, the chunk's number
 * (24 bits), the record's offset in it (8 bits) and the slot's generation
 * (30 bits), as timer ids are laid out below their tag.
 */
#define TERN__JOB_ID (UINT64_C(1) << 62)
#define TERN__JOB_NO_BITS 24
#define TERN__JOB_OFFSET_BITS 8
#define TERN__JOB_OFFSET_SHIFT TERN__TIMER_GEN_BITS
#define TERN__JOB_NO_SHIFT (TERN__TIMER_GEN_BITS + TERN__JOB_OFFSET_BITS)
static inline bool tern__job_id(tern_id id)
{
    return (id >> 62) == 1;
}

/* The table (timer_table.c). Ends the slot's generation (its ids go stale) and frees it. */
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

#endif
