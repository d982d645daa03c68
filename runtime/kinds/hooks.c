/*
 * Prepare, check and idle hooks: callbacks run once per turn at fixed
 * points of step 2 (turn.c calls tern__hooks_run; include/tern.h gives
 * the order).
 *
 * A hook is an op with an id (so tern_cancel, tern_ref and teardown reach
 * it) on its kind's list in the loop, never on the ready queue.
 *
 * Hazard: a hook's callback may stop any hook, itself or the next one the
 * run would call. Stopping retires the id at once (tern__op_finish), but
 * while a run is under way the record stays linked, marked dead, and is
 * unlinked and freed when the run ends: the run's `next` pointers never
 * dangle.
 */
#include <errno.h>

#include "admit.h"
#include "loop_p.h"

struct tern__hook {
    struct tern__op op; /* first */
    struct tern__hook *next, *prev;
    tern_hook_cb cb;
    void *arg;
    int kind;
    bool dead; /* stopped; unlinked once no run is walking the list */
};

static void hook_unlink_free(tern_loop *loop, struct tern__hook *h)
{
    if (h->prev != NULL)
        h->prev->next = h->next;
    else
        loop->hook_head[h->kind] = h->next;
    if (h->next != NULL)
        h->next->prev = h->prev;
    else
        loop->hook_tail[h->kind] = h->prev;
    tern__free(h);
}

static void hook_free(tern_loop *loop, struct tern__op *op)
{
    struct tern__hook *h = (struct tern__hook *)op;
    if (loop->hook_running == 0)
        hook_unlink_free(loop, h);
}

static int hook_stop(tern_loop *loop, struct tern__hook *h)
{
    if (h->dead)
        return -ENOENT;
    h->dead = true;
    if (h->kind == TERN_HOOK_IDLE)
        loop->hook_idle--;
    tern__op_finish(loop, &h->op); /* the id is stale from here */
    return 0;
}

static int hook_cancel(tern_loop *loop, struct tern__op *op)
{
    return hook_stop(loop, (struct tern__hook *)op);
}

static void hook_dispatch(tern_loop *loop, struct tern__op *op)
{
    (void)loop;
    (void)op;
    TERN_INSIST(!"a hook is never on the ready queue");
}

static const struct tern__op_class hook_class = {
    .name = "hook",
    .dispatch = hook_dispatch,
    .cancel = hook_cancel,
    .free = hook_free,
    .refable = true,
};

void tern__hooks_run(tern_loop *loop, int kind)
{
    struct tern__hook *last = loop->hook_tail[kind];
    loop->hook_running++;
    for (struct tern__hook *h = loop->hook_head[kind]; h != NULL; h = h->next) {
        if (!h->dead)
            h->cb(loop, h->op.id, h->arg);
        if (h == last)
            break;
    }
    if (--loop->hook_running > 0)
        return;
    for (int k = 0; k < 3; k++) {
        for (struct tern__hook *h = loop->hook_head[k], *next; h != NULL; h = next) {
            next = h->next;
            if (h->dead)
                hook_unlink_free(loop, h);
        }
    }
}

int tern_hook_start(tern_loop *loop, int kind, tern_hook_cb cb, void *arg, tern_id *idp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (cb == NULL || kind < TERN_HOOK_PREPARE || kind > TERN_HOOK_IDLE)
        return -EINVAL;
    int rc = tern__op_admit(loop);
    if (rc < 0)
        return rc;
    struct tern__hook *h = tern__calloc(1, sizeof(*h));
    if (h == NULL) {
        tern__op_unadmit(loop);
        return -ENOMEM;
    }
    h->cb = cb;
    h->arg = arg;
    h->kind = kind;
    if ((rc = tern__op_add(loop, &h->op, &hook_class)) < 0) {
        tern__op_unadmit(loop);
        tern__free(h);
        return rc;
    }
    h->prev = loop->hook_tail[kind];
    if (h->prev != NULL)
        h->prev->next = h;
    else
        loop->hook_head[kind] = h;
    loop->hook_tail[kind] = h;
    if (kind == TERN_HOOK_IDLE)
        loop->hook_idle++;
    if (idp != NULL)
        *idp = h->op.id;
    return 0;
}

int tern_hook_stop(tern_loop *loop, tern_id id)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    struct tern__op *op = tern__op_find(loop, id);
    if (op == NULL || op->cls != &hook_class)
        return -ENOENT;
    return hook_stop(loop, (struct tern__hook *)op);
}
