/*
 * What is still alive: the loop's live operations, listed for a person or
 * a program (tern_loop_walk, tern_loop_print_live), as libuv's uv_walk and
 * uv_print_active_handles.
 *
 * A loop keeps its ops in three places: jobs sit in their loop's chunks
 * of records (a live one holds its id), every other op with an id sits
 * in the id map, and timers, which are no ops, sit in the timer table (a
 * live one has a callback). The walk reads all three and changes none, so
 * its cost is one pass over the records, the map's slots and the table's
 * used slots; it is
 * meant for diagnosis (a shutdown that does not finish), not a hot path.
 *
 * The age of an op is loop time since it was registered (op->born, set by
 * tern__op_add) and a timer's since it started (its record's `born`, set
 * by tern_timer_start): both stamps count the loop's clock in 2^20 ns
 * units, so an age is within a unit, about a millisecond, of the exact
 * one. The loop's clock is refreshed twice a turn, so an age is as late
 * as the turn's clock.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "job_p.h"
#include "loop_p.h"

/* Deferred functions (anonymous ops) have no id: tern_defer's records. */
static bool shown(const struct tern__op *op)
{
    return op != NULL && !(op->flags & (TERN__OP_ANON | TERN__OP_DEAD));
}

int tern_loop_walk(tern_loop *loop, tern_walk_cb cb, void *arg)
{
    TERN__REQUIRE_LOOP(loop);
    TERN_REQUIRE(cb != NULL);
    TERN__LOOP_ONLY(loop);
    uint64_t now = loop->now;
    size_t ids_before = loop->ids.count + loop->tabled;
    uint32_t timers_before = loop->timers.live;
    int n = 0;
    /*
     * The callback must leave the containers alone: a start could grow the
     * map under this pass, and an end could free the record it reads. The
     * counts catch it right after the callback that did it.
     */
#define WALK_UNCHANGED()                                                         \
    TERN_REQUIRE_SAID(loop->ids.count + loop->tabled == ids_before &&            \
                          loop->timers.live == timers_before,                    \
                      "tern_loop_walk's callback started or ended an operation " \
                      "(collect ids and act after the walk)")

#define WALK_OP(op)                                        \
    do {                                                   \
        tern_op_info info = {                              \
            .id = (op)->id,                                \
            .kind = (op)->cls->name,                       \
            .age_ns = tern__op_age((op)->born, now),       \
            .referenced = !((op)->flags & TERN__OP_UNREF), \
        };                                                 \
        cb(loop, &info, arg);                              \
        WALK_UNCHANGED();                                  \
        n++;                                               \
    } while (0)

    for (const struct tern__job_chunk *c = loop->job_chunks; c != NULL; c = c->next)
        for (uint32_t i = 0; i < c->cap; i++)
            if (c->recs[i].op.id != 0 && shown(&c->recs[i].op))
                WALK_OP(&c->recs[i].op);
    const struct tern__idmap *m = &loop->ids;
    for (size_t i = 0; m->slots != NULL && i <= m->mask; i++) {
        const struct tern__op *op = m->slots[i].op;
        if (shown(op))
            WALK_OP(op);
    }
#undef WALK_OP
    const struct tern__timer_table *t = &loop->timers;
    for (uint32_t slot = 0; slot < t->used; slot++) {
        const struct tern__timer *r = tern__timer_at(t, slot);
        if (r->cb == NULL)
            continue;
        tern_op_info info = {
            .id = tern__timer_id_of(t, slot),
            .kind = "timer",
            .age_ns = tern__op_age(r->born, now),
            .referenced = !(r->bits & TERN__TIMER_UNREF),
        };
        cb(loop, &info, arg);
        WALK_UNCHANGED();
        n++;
    }
#undef WALK_UNCHANGED
    return n;
}

struct print_state {
    FILE *out;
    bool failed;
};

static void print_one(tern_loop *loop, const tern_op_info *op, void *arg)
{
    (void)loop;
    struct print_state *p = arg;
    uint64_t us = op->age_ns / 1000;
    if (fprintf(p->out, "  %-10s id %-20" PRIu64 " age %" PRIu64 ".%03" PRIu64 " ms  %s\n",
                op->kind, (uint64_t)op->id, us / 1000, us % 1000,
                op->referenced ? "referenced" : "unreferenced") < 0)
        p->failed = true;
}

int tern_loop_print_live(tern_loop *loop, FILE *out)
{
    TERN__REQUIRE_LOOP(loop);
    TERN_REQUIRE(out != NULL);
    TERN__LOOP_ONLY(loop);
    struct print_state p = {.out = out, .failed = false};
    int n = tern_loop_walk(loop, print_one, &p);
    return p.failed || ferror(out) ? -EIO : n;
}
