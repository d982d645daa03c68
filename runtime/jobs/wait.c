/*
 * External waits (tern/wait.h), an operation kind of the loop. A descriptor
 * wait is an op embedding an io watcher (io.c): the backend reports the
 * descriptor once, the watcher is stopped at once, and the op is queued for
 * step 2, where done runs. Its credit, owner and deadline are a job's
 * (job_p.h), so waits and jobs share max_undelivered and an owner's cap.
 * A blocking wait is a long-class job: the long class is the helper
 * thread that is not a bounded worker, and its ceiling is the wait's.
 * The claims such an op holds (tern__outside_*, job_p.h) are here too:
 * the ring's file requests (fs/fs_ring.c) take them the same way.
 */
#include <errno.h>
#include <stdlib.h>

#include "admit.h"
#include "container.h"
#include "heap.h"
#include "job_p.h"

/* Not yet settled; every other value is the status done will get. */
#define WAIT_PENDING 1

struct fd_wait {
    struct tern__op op; /* first */
    struct tern__io io;
    struct tern__owned owned;
    tern_done_fn done;
    void *arg;
    int status;      /* WAIT_PENDING, 0, -ECANCELED or -ETIMEDOUT */
    unsigned events; /* what the backend reported */
    bool has_deadline;
};

/* The wait's status is decided: stop watching and queue done for step 2. */
static void settle(tern_loop *loop, struct fd_wait *w, int status)
{
    tern__io_stop(loop, &w->io);
    w->status = status;
    tern__op_ready(loop, &w->op);
}

static void wait_fired(tern_loop *loop, struct tern__io *io, unsigned events)
{
    struct fd_wait *w = tern__container_of(io, struct fd_wait, io);
    if (w->status != WAIT_PENDING)
        return;
    w->events = events;
    settle(loop, w, 0);
}

static void wait_dispatch(tern_loop *loop, struct tern__op *op)
{
    struct fd_wait *w = (struct fd_wait *)op;
    TERN_INSIST(w->status != WAIT_PENDING);
    tern_id id = op->id;
    int status = w->status;
    void *result = status == 0 ? (void *)(uintptr_t)w->events : NULL;
    tern_done_fn done = w->done;
    void *arg = w->arg;
    tern__outside_finish(loop, op, &w->owned, w->has_deadline); /* w is freed */
    done(loop, id, status, result, arg);
}

/* Before the event: STOPPED (done gets -ECANCELED). After it: FINISHED. */
static int wait_cancel(tern_loop *loop, struct tern__op *op)
{
    struct fd_wait *w = (struct fd_wait *)op;
    if (w->status == WAIT_PENDING)
        settle(loop, w, -ECANCELED);
    return w->status == 0 ? TERN_CANCEL_FINISHED : TERN_CANCEL_STOPPED;
}

/* Step 5: the timeout came (an event already in leaves the status alone). */
static void wait_expired(tern_loop *loop, struct tern__op *op)
{
    struct fd_wait *w = (struct fd_wait *)op;
    if (w->status == WAIT_PENDING)
        settle(loop, w, -ETIMEDOUT);
}

static void wait_free(tern_loop *loop, struct tern__op *op)
{
    (void)loop;
    free(op);
}

static const struct tern__op_class wait_class = {
    .name = "wait",
    .dispatch = wait_dispatch,
    .cancel = wait_cancel,
    .expired = wait_expired,
    .free = wait_free,
    .refable = false,
};

/*
 * Every refusal and error happens before the descriptor is watched or any
 * count moves, so a refused wait leaves nothing behind.
 */
int tern_wait_fd(tern_loop *loop, tern_os_sock_t fd, tern_done_fn done, void *arg,
                 const tern_job_options *opts, tern_id *idp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    loop->last_refusal = TERN_REFUSED_NONE;
    if (fd < 0 || done == NULL)
        return -EINVAL;
    struct tern__outside claims;
    int rc = tern__outside_admit(loop, opts != NULL ? opts->timeout_ns : 0,
                                 opts != NULL ? opts->owner : 0, &claims);
    if (rc < 0)
        return rc;
    struct fd_wait *w = tern__calloc(1, sizeof(*w));
    if (w == NULL) {
        rc = -ENOMEM;
        goto unadmit;
    }
    w->done = done;
    w->arg = arg;
    w->status = WAIT_PENDING;
    w->has_deadline = claims.timeout_ns != 0;
    tern__io_init(&w->io, wait_fired);
    if ((rc = tern__io_start(loop, &w->io, fd, TERN_READABLE)) < 0) {
        free(w);
        goto unadmit;
    }
    if ((rc = tern__op_add(loop, &w->op, &wait_class)) < 0) {
        tern__io_stop(loop, &w->io);
        free(w);
        goto unadmit;
    }
    tern__outside_bind(loop, &claims, &w->op, &w->owned, idp);
    return 0;

unadmit:
    tern__outside_unadmit(loop, &claims);
    return rc;
}

int tern__outside_admit(tern_loop *loop, uint64_t timeout_ns, tern_id owner,
                        struct tern__outside *o)
{
    if (tern__loop_closing(loop))
        return -ESHUTDOWN;
    if (timeout_ns > TERN__DURATION_MAX_NS)
        return -EINVAL;
    o->timeout_ns = timeout_ns;
    int rc;
    if ((rc = tern__owner_check(loop, owner, &o->owner)) < 0 || (rc = tern__credit_check(loop)) < 0)
        return rc;
    /* Closing was answered above: the only refusal left is the cap. */
    if (tern__op_admit(loop) < 0)
        return tern__refuse_operations(loop);
    if (timeout_ns != 0 && (rc = tern__deadline_claim(loop)) < 0) {
        tern__op_unadmit(loop);
        return rc;
    }
    return 0;
}

void tern__outside_unadmit(tern_loop *loop, const struct tern__outside *o)
{
    if (o->timeout_ns != 0)
        tern__deadline_unclaim(loop);
    tern__op_unadmit(loop);
}

void tern__outside_bind(tern_loop *loop, const struct tern__outside *o, struct tern__op *op,
                        struct tern__owned *owned, tern_id *idp)
{
    tern__credit_take(loop);
    if (o->owner != NULL)
        tern__owner_hold(o->owner, owned, op);
    if (o->timeout_ns != 0)
        tern__deadline_arm(loop, op, loop->now + o->timeout_ns);
    if (idp != NULL)
        *idp = op->id;
}

void tern__outside_finish(tern_loop *loop, struct tern__op *op, struct tern__owned *owned,
                          bool had_deadline)
{
    tern__owner_drop(owned);
    tern__op_finish(loop, op); /* stale id, deadline disarmed, record freed */
    if (had_deadline)
        tern__deadline_unclaim(loop);
    tern__credit_give(loop);
}

int tern_wait_call(tern_loop *loop, tern_work_fn wait, tern_done_fn done, void *arg,
                   const tern_job_options *opts, tern_id *idp)
{
    TERN__REQUIRE_LOOP(loop);
    return tern_submit_with(loop, TERN_LONG, wait, done, arg, opts, idp);
}
