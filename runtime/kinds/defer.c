/*
 * Defers: a function appended straight to the ready queue (no inbound
 * queue, no wake). A defer has no id — nobody can name it to cancel it —
 * so teardown lets it run in a drain pass rather than dropping it.
 */
#include <errno.h>
#include <stdlib.h>

#include "admit.h"
#include "loop_p.h"

struct defer {
    struct tern__op op;
    tern_fn fn;
    void *arg;
};

static void defer_dispatch(tern_loop *loop, struct tern__op *op)
{
    struct defer *d = (struct defer *)op;
    tern_fn fn = d->fn;
    void *arg = d->arg;
    tern__op_finish(loop, op);
    fn(loop, arg);
}

static int defer_cancel(tern_loop *loop, struct tern__op *op)
{
    (void)loop;
    (void)op;
    return 0; /* it runs in the next step 2 regardless */
}

static void defer_free(tern_loop *loop, struct tern__op *op)
{
    tern__slab_free(&loop->defers, op);
}

const size_t tern__defer_size = sizeof(struct defer);

static const struct tern__op_class defer_class = {
    .name = "defer",
    .dispatch = defer_dispatch,
    .cancel = defer_cancel,
    .free = defer_free,
    .refable = false,
};

int tern_defer(tern_loop *loop, tern_fn fn, void *arg)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (fn == NULL)
        return -EINVAL;
    int rc = tern__op_admit(loop);
    if (rc < 0)
        return rc;
    struct defer *d = tern__slab_alloc(&loop->defers);
    if (d == NULL) {
        tern__op_unadmit(loop);
        return -ENOMEM;
    }
    d->fn = fn;
    d->arg = arg;
    tern__op_add_anon(loop, &d->op, &defer_class);
    tern__op_ready(loop, &d->op);
    return 0;
}
