/*
 * Timers: an op on the deadline heap plus a callback. A repeating timer
 * is rearmed in step 5 when it fires (now + repeat), so it keeps its heap
 * slot and a slow callback cannot cause a burst of catch-up calls; if it
 * fires again before its callback ran, the two firings merge into one.
 */
#include <errno.h>
#include <stdlib.h>

#include "loop_p.h"

#define MAX_DELAY (UINT64_C(1) << 62)

struct timer {
    struct tern__op op;
    uint64_t repeat;
    tern_timer_cb cb;
    void *arg;
};

static void timer_dispatch(tern_loop *loop, struct tern__op *op)
{
    struct timer *t = (struct timer *)op;
    tern_id id = op->id;
    tern_timer_cb cb = t->cb;
    void *arg = t->arg;
    if (t->repeat == 0)
        tern__op_finish(loop, op); /* a one-shot id is stale once its callback starts */
    cb(loop, id, arg);
}

static int timer_cancel(tern_loop *loop, struct tern__op *op)
{
    tern__op_finish(loop, op);
    return 0;
}

static void timer_free(tern_loop *loop, struct tern__op *op)
{
    tern__deadline_unclaim(loop);
    tern__slab_free(&loop->timers, op);
}

const size_t tern__timer_size = sizeof(struct timer);

static void timer_expired(tern_loop *loop, struct tern__op *op)
{
    struct timer *t = (struct timer *)op;
    if (t->repeat != 0)
        tern__deadline_arm(loop, op, loop->now + t->repeat);
    tern__op_ready(loop, op);
}

static const struct tern__op_class timer_class = {
    .name = "timer",
    .dispatch = timer_dispatch,
    .expired = timer_expired,
    .cancel = timer_cancel,
    .free = timer_free,
    .refable = true,
};

int tern_timer_start(tern_loop *loop, uint64_t delay_ns, uint64_t repeat_ns, tern_timer_cb cb,
                     void *arg, tern_id *idp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (cb == NULL || delay_ns > MAX_DELAY || repeat_ns > MAX_DELAY)
        return -EINVAL;
    int rc = tern__op_admit(loop);
    if (rc < 0)
        return rc;
    struct timer *t = tern__slab_alloc(&loop->timers);
    if (t == NULL) {
        rc = -ENOMEM;
        goto fail;
    }
    if ((rc = tern__deadline_claim(loop)) < 0)
        goto fail;
    if ((rc = tern__op_add(loop, &t->op, &timer_class)) < 0) {
        tern__deadline_unclaim(loop);
        goto fail;
    }
    t->repeat = repeat_ns;
    t->cb = cb;
    t->arg = arg;
    tern__deadline_arm(loop, &t->op, loop->now + delay_ns);
    if (idp != NULL)
        *idp = t->op.id;
    return 0;

fail:
    if (t != NULL)
        tern__slab_free(&loop->timers, t);
    tern__op_unadmit(loop);
    return rc;
}

int tern_timer_stop(tern_loop *loop, tern_id id)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (id == 0)
        return -EINVAL;
    struct tern__op *op = tern__op_find(loop, id);
    if (op == NULL || op->cls != &timer_class)
        return -ENOENT;
    tern__op_finish(loop, op);
    return 0;
}
