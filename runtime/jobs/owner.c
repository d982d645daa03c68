/*
 * Owners (include/tern/admission.h): a cap on the jobs and other accepted
 * operations one client has in flight, and the list of them, so closing
 * the owner cancels them all. job.c links its jobs here; other kinds
 * (external waits) hold a link of their own (job_p.h).
 */
#include <errno.h>
#include <stdlib.h>

#include "admit.h"
#include "job_p.h"
#include "sized.h"

/*
 * An owner is an operation of the loop (an id, one unit of
 * max_operations, never keeping tern_loop_run going) with a cap and the
 * list of its jobs in flight. Closing it retires the id at once; the
 * record lives on until its last job's done has started, since those jobs
 * still point at it.
 */
struct tern__owner {
    struct tern__op op;
    unsigned cap, in_flight;
    uint64_t accepted, refused;
    bool closed;
    tern_job *jobs;             /* in flight, doubly linked through their tern__job_owned */
    struct tern__owned *others; /* other kinds' ops in flight (external waits) */
};

static const struct tern__op_class owner_class;

void tern__owner_link(struct tern__owner *o, tern_job *job)
{
    struct tern__job_owned *l = tern__job_owned_of(job);
    l->owner = o;
    l->prev = NULL;
    l->next = o->jobs;
    if (o->jobs != NULL)
        tern__job_owned_of(o->jobs)->prev = job;
    o->jobs = job;
    o->in_flight++;
    o->accepted++;
}

void tern__owner_unlink(tern_job *job)
{
    struct tern__job_owned *l = tern__job_owned_of(job);
    struct tern__owner *o = l != NULL ? l->owner : NULL;
    if (o == NULL)
        return;
    if (l->prev != NULL)
        tern__job_owned_of(l->prev)->next = l->next;
    else
        o->jobs = l->next;
    if (l->next != NULL)
        tern__job_owned_of(l->next)->prev = l->prev;
    l->owner = NULL;
    TERN_DECREMENT(o->in_flight);
    if (o->closed && o->in_flight == 0)
        free(o);
}

/* Cancel every job in flight, then retire the id (the record may outlive it). */
static int owner_cancel(tern_loop *loop, struct tern__op *op)
{
    struct tern__owner *o = (struct tern__owner *)op;
    for (tern_job *job = o->jobs; job != NULL; job = tern__job_owned_of(job)->next)
        (void)job->op.cls->cancel(loop, &job->op);
    for (struct tern__owned *l = o->others; l != NULL; l = l->next)
        (void)l->op->cls->cancel(loop, l->op);
    tern__op_finish(loop, op);
    return TERN_CANCEL_STOPPED;
}

static void owner_free(tern_loop *loop, struct tern__op *op)
{
    (void)loop;
    struct tern__owner *o = (struct tern__owner *)op;
    o->closed = true;
    if (o->in_flight == 0)
        free(o);
}

static const struct tern__op_class owner_class = {
    .name = "owner",
    .cancel = owner_cancel,
    .free = owner_free,
    .refable = false,
};

static struct tern__owner *owner_find(tern_loop *loop, tern_id id)
{
    struct tern__op *op = tern__op_find(loop, id);
    return op != NULL && op->cls == &owner_class ? (struct tern__owner *)op : NULL;
}

int tern_owner_open(tern_loop *loop, unsigned cap, tern_id *ownerp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN_REQUIRE(ownerp != NULL);
    TERN__LOOP_ONLY(loop);
    if (cap == 0 || cap > TERN__COUNT_MAX)
        return -EINVAL;
    int rc = tern__op_admit(loop);
    if (rc < 0)
        return rc;
    struct tern__owner *o = tern__calloc(1, sizeof(*o));
    if (o == NULL) {
        tern__op_unadmit(loop);
        return -ENOMEM;
    }
    o->cap = cap;
    if ((rc = tern__op_add(loop, &o->op, &owner_class)) < 0) {
        free(o);
        tern__op_unadmit(loop);
        return rc;
    }
    tern__op_set_ref(loop, &o->op, false); /* an owner alone keeps nothing running */
    *ownerp = o->op.id;
    return 0;
}

int tern_owner_close(tern_loop *loop, tern_id owner)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (owner == 0)
        return -EINVAL;
    struct tern__owner *o = owner_find(loop, owner);
    if (o == NULL)
        return -ENOENT;
    (void)owner_cancel(loop, &o->op);
    return 0;
}

int tern_owner_stats_read(tern_loop *loop, tern_id owner, tern_owner_stats *out, size_t size)
{
    TERN__REQUIRE_LOOP(loop);
    TERN_REQUIRE(out != NULL && size > 0);
    TERN__LOOP_ONLY(loop);
    if (owner == 0)
        return -EINVAL;
    struct tern__owner *o = owner_find(loop, owner);
    if (o == NULL)
        return -ENOENT;
    tern_owner_stats full = {
        .cap = o->cap, .in_flight = o->in_flight, .accepted = o->accepted, .refused = o->refused};
    tern__copy_sized(out, size, &full, sizeof full);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Delivery, cancellation and deadlines                                */

int tern__owner_check_n(tern_loop *loop, tern_id id, unsigned n, struct tern__owner **ownerp)
{
    *ownerp = NULL;
    if (id == 0)
        return 0;
    struct tern__owner *o = owner_find(loop, id);
    if (o == NULL)
        return -EINVAL; /* unknown or closed */
    if (o->cap - o->in_flight < n) {
        o->refused += n;
        return tern__refuse_n(loop, TERN_REFUSED_OWNER_CAP, n);
    }
    *ownerp = o;
    return 0;
}

int tern__owner_check(tern_loop *loop, tern_id id, struct tern__owner **ownerp)
{
    return tern__owner_check_n(loop, id, 1, ownerp);
}

void tern__owner_hold(struct tern__owner *o, struct tern__owned *link, struct tern__op *op)
{
    *link = (struct tern__owned){.op = op, .owner = o, .next = o->others};
    if (o->others != NULL)
        o->others->prev = link;
    o->others = link;
    o->in_flight++;
    o->accepted++;
}

void tern__owner_drop(struct tern__owned *link)
{
    struct tern__owner *o = link->owner;
    if (o == NULL)
        return;
    if (link->prev != NULL)
        link->prev->next = link->next;
    else
        o->others = link->next;
    if (link->next != NULL)
        link->next->prev = link->prev;
    link->owner = NULL;
    TERN_DECREMENT(o->in_flight);
    if (o->closed && o->in_flight == 0)
        free(o);
}
