/*
 * File watches. The system's side (which mechanism, what it reads, how it
 * decides what changed) is a table of operations in backends/watch_ops.h,
 * chosen per loop by the platform: inotify on Linux, the backend's
 * file-change filter where it has one, stat polling elsewhere. This file
 * keeps what every mechanism shares: the handle and its operation, the
 * registration of the mechanism's descriptor or, without one, the
 * repeating internal deadline on the loop's heap whose expiry (step 5)
 * asks the mechanism to look, and the callbacks.
 *
 * News that arrives between two dispatches is kept by the mechanism and
 * read once: an operation already queued is not queued again, so many
 * changes before step 2 become one dispatch, which reads and reports. A
 * callback may stop its own watch, so each report first checks by id that
 * the watch still lives (ids are never reused).
 */
#include <errno.h>
#include <stdlib.h>

#include "admit.h"
#include "container.h"
#include "heap.h"
#include "loop_p.h"
#include "platform.h"
#include "watch_ops.h"

#define DEFAULT_INTERVAL_NS UINT64_C(1000000000)

struct watch {
    struct tern__op op;
    tern_watch_cb cb;
    void *arg;
    const struct tern__watch_ops *ops;
    struct tern__watch_src src;
    struct tern__io io; /* src.fd's registration, when the mechanism has one */
    uint64_t interval;  /* between looks, when it has none */
};

/* The mechanism a watch on this loop uses (backends/watch_ops.h says why). */
static const struct tern__watch_ops *ops_for(const tern_loop *loop)
{
    return tern__watch_choose(loop->backend.ops->vnode);
}

const char *tern__watch_source(const tern_loop *loop)
{
    return ops_for(loop)->name;
}

static struct watch *find_watch(tern_loop *loop, tern_id id);

static void watch_free(tern_loop *loop, struct tern__op *op)
{
    (void)loop;
    free(op);
}

/* Undo a source_start that succeeded: nothing is reported any more. */
static void source_stop(tern_loop *loop, struct watch *w)
{
    if (w->ops->interest != 0) {
        tern__io_stop(loop, &w->io);
    } else {
        if (tern__deadline_armed(&w->op))
            tern__deadline_disarm(loop, &w->op);
        tern__deadline_unclaim(loop);
    }
    w->ops->close(&w->src);
}

/* End the watch (no callback). */
static void watch_end(tern_loop *loop, struct watch *w)
{
    source_stop(loop, w);
    tern__op_finish(loop, &w->op);
}

/* Report one piece of news; false when the watch ended during it. */
static bool report(tern_loop *loop, tern_id id, int status, unsigned events, const char *name)
{
    struct watch *w = find_watch(loop, id);
    if (w == NULL)
        return false; /* stopped by an earlier callback */
    tern_watch_cb cb = w->cb;
    void *arg = w->arg;
    if (status != 0)
        watch_end(loop, w); /* the last callback: the id is stale in it */
    cb(loop, id, status, events, name, arg);
    return status == 0;
}

/* The loop and watch a mechanism's read reports to. */
struct reporting {
    tern_loop *loop;
    tern_id id;
};

static bool emit(void *ctx, const struct tern__watch_news *news)
{
    struct reporting *r = ctx;
    return report(r->loop, r->id, news->status, news->events, news->name);
}

/* The backend saw something on the mechanism's descriptor (step 4). */
static void watch_fired(tern_loop *loop, struct tern__io *io, unsigned events)
{
    struct watch *w = tern__container_of(io, struct watch, io);
    if (w->ops->note(&w->src, events) != 0)
        tern__op_ready(loop, &w->op);
}

/* A descriptor-less mechanism's interval came (step 5): it looks. */
static void watch_expired(tern_loop *loop, struct tern__op *op)
{
    struct watch *w = (struct watch *)op;
    int rc = w->ops->note(&w->src, 0);
    if (rc >= 0)
        tern__deadline_arm(loop, op, loop->now + w->interval);
    if (rc != 0)
        tern__op_ready(loop, op); /* reported, and for an error ended, in step 2 */
}

static int source_start(tern_loop *loop, struct watch *w, const char *path, uint64_t interval)
{
    int rc = w->ops->open(&w->src, path);
    if (rc < 0)
        return rc;
    if (w->ops->interest != 0) {
        tern__io_init(&w->io, watch_fired);
        rc = tern__io_start(loop, &w->io, w->src.fd, w->ops->interest);
    } else {
        w->interval = interval != 0 ? interval : DEFAULT_INTERVAL_NS;
        rc = tern__deadline_claim(loop);
    }
    if (rc < 0)
        w->ops->close(&w->src);
    return rc;
}

static void watch_dispatch(tern_loop *loop, struct tern__op *op)
{
    struct watch *w = (struct watch *)op;
    struct reporting r = {loop, w->op.id};
    w->ops->read(&w->src, emit, &r);
}

static int watch_cancel(tern_loop *loop, struct tern__op *op)
{
    watch_end(loop, (struct watch *)op);
    return TERN_CANCEL_STOPPED;
}

static const struct tern__op_class watch_class = {
    .name = "watch",
    .dispatch = watch_dispatch,
    .cancel = watch_cancel,
    .expired = watch_expired,
    .free = watch_free,
    .refable = true,
};

static struct watch *find_watch(tern_loop *loop, tern_id id)
{
    struct tern__op *op = tern__op_find(loop, id);
    return op != NULL && op->cls == &watch_class ? (struct watch *)op : NULL;
}

int tern_watch_start(tern_loop *loop, const char *path, uint64_t interval_ns, tern_watch_cb cb,
                     void *arg, tern_id *idp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (path == NULL || cb == NULL || interval_ns > TERN__DURATION_MAX_NS)
        return -EINVAL;
    int rc = tern__op_admit(loop);
    if (rc < 0)
        return rc;
    struct watch *w = tern__calloc(1, sizeof(*w));
    if (w == NULL) {
        tern__op_unadmit(loop);
        return -ENOMEM;
    }
    w->cb = cb;
    w->arg = arg;
    w->ops = ops_for(loop);
    if ((rc = source_start(loop, w, path, interval_ns)) < 0)
        goto fail;
    if ((rc = tern__op_add(loop, &w->op, &watch_class)) < 0) {
        source_stop(loop, w);
        goto fail;
    }
    if (w->ops->interest == 0)
        tern__deadline_arm(loop, &w->op, loop->now + w->interval);
    if (idp != NULL)
        *idp = w->op.id;
    return 0;

fail:
    watch_free(loop, &w->op);
    tern__op_unadmit(loop);
    return rc;
}

int tern_watch_stop(tern_loop *loop, tern_id id)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (id == 0)
        return -EINVAL;
    struct watch *w = find_watch(loop, id);
    if (w == NULL)
        return -ENOENT;
    watch_end(loop, w);
    return 0;
}
