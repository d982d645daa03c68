/*
 * A loop's lifecycle: options, creation, and teardown (cancel everything,
 * drain, free). Running it is in run.c, the turn in turn.c, the op
 * lifecycle in op.c, the inbound queue and wake-ups in inbound.c.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>

#include "heap.h"
#include "job_p.h"
#include "loop_p.h"
#include "qsbr.h"
#include "testing.h"

/* ------------------------------------------------------------------ */
/* Options and creation                                                */
/* ------------------------------------------------------------------ */

void tern_loop_options_init(tern_loop_options *opts)
{
    TERN_REQUIRE(opts != NULL);
    *opts = (tern_loop_options){
        .dispatch_batch = 64,
        .max_operations = 65536,
        .max_undelivered = 4096,
        .pool = NULL,
        .backend = NULL,
        .flags = 0,
    };
}

static int check_options(const tern_loop_options *o)
{
    if (o->dispatch_batch < 1 || o->dispatch_batch > (1u << 20))
        return -EINVAL;
    if (o->max_operations < 1 || o->max_operations > TERN__COUNT_MAX)
        return -EINVAL;
    if (o->max_undelivered < 1 || o->max_undelivered > TERN__COUNT_MAX)
        return -EINVAL;
    if (o->flags & ~(unsigned)(TERN_LOOP_RCU | TERN_LOOP_KEEPALIVE))
        return -EINVAL;
    /* No urcu-qsbr on this system (Windows): no thread can be a reader. */
    if ((o->flags & TERN_LOOP_RCU) && !tern__qsbr_supported())
        return -ENOTSUP;
    if (tern__backend_find(o->backend) == NULL)
        return -EINVAL;
    if (o->pool != NULL) {
        int rc = tern__pool_config_check(o->pool);
        if (rc < 0)
            return rc;
        if (tern__pool_config_conflicts(o->pool))
            return -EINVAL;
    }
    return 0;
}

int tern_loop_new(tern_loop **loopp, const tern_loop_options *opts)
{
    TERN_REQUIRE(loopp != NULL);
    tern_loop_options o;
    tern_loop_options_init(&o);
    if (opts != NULL)
        o = *opts;
    int rc = check_options(&o);
    if (rc < 0)
        return rc;

    tern_loop *loop = tern__calloc_aligned(alignof(tern_loop), sizeof(*loop));
    if (loop == NULL)
        return -ENOMEM;
    tern__wfq_init(&loop->in_head, &loop->in_tail);
    loop->dispatch_batch = o.dispatch_batch;
    loop->max_operations = o.max_operations;
    loop->max_undelivered = o.max_undelivered;
    loop->flags = o.flags;
    if (o.pool != NULL) {
        loop->has_pool_config = true;
        loop->pool_config = *o.pool;
    }
    loop->now = tern__clock_now();
    loop->last_wait = -1;
    tern__spin_init(&loop->spin);
    tern__spin_init(&loop->post_yield);
    tern__spin_init(&loop->open_yield);
    const char *books = getenv("TERN_CHECK_BOOKS");
    loop->check_books = books != NULL && books[0] != '\0' && books[0] != '0';
    loop->wake = (struct tern__wake){-1, -1};
    loop->backend.fd = -1;

    tern__timers_init(loop);
    tern__slab_init(&loop->defers, tern__defer_size);
    if ((rc = tern__idmap_init(&loop->ids)) < 0)
        goto fail;
    if ((rc = tern__cancel_reserve_init(&loop->cancels)) < 0)
        goto fail;
    loop->backend.ops = tern__backend_find(o.backend);
    if ((rc = loop->backend.ops->init(&loop->backend)) < 0) {
        loop->backend.ops = NULL;
        goto fail;
    }
    /* A backend that wakes itself needs no wake descriptor. */
    if (!loop->backend.wakes_itself &&
        ((rc = tern__wake_open(&loop->wake)) < 0 ||
         (rc = loop->backend.ops->modify(&loop->backend, loop->wake.fd, 0, TERN_READABLE)) < 0))
        goto fail;
    if ((rc = tern__jobs_init(loop)) < 0)
        goto fail;
    loop->lookup_expired = tern__lookup_expired;
    loop->stream_class = &tern__stream_class;
    loop->stream_deadline_class = &tern__stream_deadline_class;
    atomic_init(&loop->wake_state, TERN__WAKE_PARKING); /* unclaimed: asleep */
    atomic_init(&loop->waker_cpu, -1);
    loop->forks = tern__forks;
    loop->magic = TERN__LOOP_MAGIC;
    *loopp = loop;
    return 0;

fail:
    if (loop->backend.ops != NULL)
        loop->backend.ops->close(&loop->backend);
    tern__wake_close(&loop->wake);
    tern__idmap_destroy(&loop->ids);
    tern__cancel_reserve_destroy(&loop->cancels);
    tern__free_aligned(loop);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Teardown                                                            */
/* ------------------------------------------------------------------ */

/*
 * Cancel every live op that has an id. Ops without one are not walked:
 * defers run in the drain, and a connect's lookup (anonymous)
 * is cancelled by the stream that holds it; what is embedded in a record
 * (watchers, internal deadlines) is stopped by its owner's cancel.
 * A cancel hook may finish its op, and the map's
 * backward-shift deletion can then move a later entry behind the walk; so
 * walk again while walks still finish ops. Hooks are idempotent (a job
 * already told to stop is told again), and ops that stay (running jobs)
 * stop the repetition once a walk changes nothing.
 */
static void cancel_all(tern_loop *loop)
{
    tern__timers_cancel_all(loop);
    /* Jobs: cancelling one finishes nothing at once (done comes in step 2). */
    for (struct tern__job_chunk *c = loop->job_chunks; c != NULL; c = c->next)
        for (uint32_t i = 0; i < c->cap; i++)
            if (c->recs[i].op.id != 0)
                c->recs[i].op.cls->cancel(loop, &c->recs[i].op);
    size_t before;
    do {
        before = loop->ids.count;
        for (size_t i = 0; i <= loop->ids.mask; i++) {
            struct tern__op *op = loop->ids.slots[i].op;
            if (op != NULL)
                op->cls->cancel(loop, op);
        }
    } while (loop->ids.count != 0 && loop->ids.count < before);
}

/*
 * Drain passes: turns that deliver what cancellation produced. While the
 * loop is closing nothing new is admitted (every start, post and defer
 * says -ESHUTDOWN), so the passes end: a pass blocks only while pool jobs
 * of this loop are still owed — they were told to stop and the loop waits
 * for them to return.
 */
static void drain(tern_loop *loop)
{
    for (;;) {
        cancel_all(loop);
        if (loop->ready_head != NULL || tern__inbound_pending(loop) || tern__jobs_pending(loop))
            tern__loop_turn(loop, 0);
        else if (loop->undelivered > 0 || loop->sends > 0)
            tern__loop_turn(loop, -1); /* a cancelled send's completion comes at once */
        else if (!tern__inbound_quiet(loop))
            sched_yield(); /* a producer counted in, a few instructions from its enqueue */
        else
            break;
    }
}

void tern_loop_free(tern_loop *loop)
{
    TERN__REQUIRE_LOOP(loop);
    if (atomic_load_explicit(&loop->owner, memory_order_relaxed) != 0)
        TERN_FATAL("tern_loop_free", "the loop is running: teardown must be serialised with "
                                     "dispatch (not from its own callback, not while another "
                                     "thread runs it)");
    tern_loop *prev = tern__loop_claim(loop, "tern_loop_free");
    tern__rcu_enter(loop); /* drain passes run callbacks: readers, as in run */
    atomic_store_explicit(&loop->stop_requested, true, memory_order_relaxed);
    /* Pairs with the seq_cst admission in tern_post() and tern_cancel(). */
    atomic_store_explicit(&loop->closing, true, memory_order_seq_cst);
    drain(loop);
    tern__rcu_leave(loop);
    /* Every kind's cancel must end its op or arrange its final callback. */
    TERN_INSIST(loop->ids.count == 0 && loop->tabled == 0 && loop->timers.live == 0 &&
                loop->ready_head == NULL && loop->undelivered == 0);

    tern__loop_release(loop, prev);

    tern__jobs_destroy(loop); /* waits out pool threads still handing over */
    loop->backend.ops->close(&loop->backend);
    tern__wake_close(&loop->wake);
    free(loop->fds);
    free(loop->landed);
    tern__heap_destroy(&loop->heap);
    tern__idmap_destroy(&loop->ids);
    tern__cancel_reserve_destroy(&loop->cancels);
    tern__timers_destroy(loop);
    tern__slab_destroy(&loop->defers);
    /* A store just before free is dead to the compiler, which may drop it;
     * volatile keeps it, so a later call on the freed loop fails its check
     * while the block is still unused instead of running on stale state. */
    *(volatile unsigned *)&loop->magic = 0;
    tern__free_aligned(loop);
}
