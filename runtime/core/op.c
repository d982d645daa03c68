/*
 * The op lifecycle (op_types.h has the model, loop_p.h the calls): ids, adding
 * an op to the loop's books, finishing it, and its reference (tern_ref,
 * tern_unref, and whether anything keeps tern_loop_run going).
 */
#include <errno.h>

#include "admit.h"
#include "loop_p.h"

#define ID_BLOCK 4096u
static _Atomic uint64_t id_counter = 1;

/*
 * Ids come from one process-wide counter, taken in blocks so the common
 * case touches no shared cache line. 64 bits never wrap in practice.
 */
tern_id tern__id_next(tern_loop *loop)
{
    if (TERN_UNLIKELY(loop->id_next == loop->id_end)) {
        loop->id_next = atomic_fetch_add_explicit(&id_counter, ID_BLOCK, memory_order_relaxed);
        loop->id_end = loop->id_next + ID_BLOCK;
        /* Timer ids have the top bit (timer_table.c) and job ids the next
         * (job_slab.c); 2^62 is centuries away. */
        TERN_INSIST(loop->id_end < TERN__JOB_ID);
    }
    return loop->id_next++;
}

int tern__op_add(tern_loop *loop, struct tern__op *op, const struct tern__op_class *cls)
{
    op->id = tern__id_next(loop);
    op->cls = cls;
    op->ready_next = NULL;
    op->flags = 0;
    op->aux = TERN__OP_UNARMED;
    op->born = tern__op_stamp(loop->now);
    int rc = tern__idmap_insert(&loop->ids, op);
    if (rc < 0)
        return rc;
    loop->refs++; /* ops_local counted it at admission */
    return 0;
}

void tern__op_add_tabled(tern_loop *loop, struct tern__op *op, const struct tern__op_class *cls,
                         tern_id id)
{
    op->id = id;
    op->cls = cls;
    op->ready_next = NULL;
    op->flags = TERN__OP_TABLED;
    op->aux = TERN__OP_UNARMED;
    op->born = tern__op_stamp(loop->now);
    loop->tabled++;
    loop->refs++; /* ops_local counted it at admission */
}

void tern__op_add_anon(tern_loop *loop, struct tern__op *op, const struct tern__op_class *cls)
{
    op->id = 0;
    op->cls = cls;
    op->ready_next = NULL;
    op->flags = TERN__OP_ANON;
    op->aux = TERN__OP_UNARMED;
    loop->anon++;
    loop->refs++; /* ops_local counted it at admission */
}

void tern__op_finish(tern_loop *loop, struct tern__op *op)
{
    tern__op_retire(loop, op); /* admit.h */
    if (op->flags & TERN__OP_QUEUED) {
        op->flags |= TERN__OP_DEAD; /* step 2 frees it when popped */
        TERN_DECREMENT(loop->ready_count);
    } else
        op->cls->free(loop, op);
}

void tern__op_set_ref(tern_loop *loop, struct tern__op *op, bool ref)
{
    bool is_ref = !(op->flags & TERN__OP_UNREF);
    if (ref == is_ref)
        return;
    if (ref) {
        op->flags &= ~TERN__OP_UNREF;
        loop->refs++;
    } else {
        op->flags |= TERN__OP_UNREF;
        TERN_DECREMENT(loop->refs);
    }
}

struct tern__op *tern__op_find(tern_loop *loop, tern_id id)
{
    /* Timers are not ops, and jobs' ids name their records: neither is in the map. */
    if (id == 0 || tern__timer_id(id))
        return NULL;
    return tern__job_id(id) ? tern__job_find(loop, id) : tern__idmap_find(&loop->ids, id);
}

void tern__op_completed(tern_loop *loop, const struct tern__done *d)
{
    struct tern__op *op = tern__op_find(loop, d->token);
    if (op != NULL && op->cls->completed != NULL) {
        op->cls->completed(loop, op, d);
        return;
    }
    /* Only bytes (or a datagram, maybe empty) can outlive their op: an op
     * cancels its operation (whose end then goes unreported) before it can
     * be freed. */
    TERN_INSIST(d->data != NULL);
    loop->backend.ops->recycle(&loop->backend, d->buf);
}

static int ref_common(tern_loop *loop, tern_id id, bool ref)
{
    if (id == 0)
        return -EINVAL;
    if (tern__timer_id(id))
        return tern__timer_set_ref(loop, id, ref);
    struct tern__op *op = tern__op_find(loop, id);
    if (op == NULL)
        return -ENOENT;
    if (!op->cls->refable)
        return -EINVAL;
    tern__op_set_ref(loop, op, ref);
    return 0;
}

int tern_ref(tern_loop *loop, tern_id id)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    return ref_common(loop, id, true);
}

int tern_unref(tern_loop *loop, tern_id id)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    return ref_common(loop, id, false);
}

bool tern__loop_alive(tern_loop *loop)
{
    /* A run held open may still grow: only a turn can close it (inbound.c). */
    return loop->refs > 0 || (loop->flags & (TERN_LOOP_KEEPALIVE | TERN__LOOP_HELD)) ||
           tern__posts_pending(loop) != 0 || loop->open_n != 0;
}

int tern_loop_keepalive(tern_loop *loop, bool on)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (on)
        loop->flags |= TERN_LOOP_KEEPALIVE;
    else
        loop->flags &= ~(unsigned)TERN_LOOP_KEEPALIVE;
    return 0;
}
