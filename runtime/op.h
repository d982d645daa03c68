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
#ifndef TERN_OP_H
#define TERN_OP_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

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

#endif
