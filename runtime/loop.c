/*
 * Loop lifecycle, identity, options, operations bookkeeping, statistics.
 * The turn itself is in turn.c; the inbound queue and wake-ups in inbound.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "job_p.h"
#include "lag.h"
#include "loop_p.h"
#include "sized.h"
#include "testing.h"

/* ------------------------------------------------------------------ */
/* Thread identity                                                     */
/* ------------------------------------------------------------------ */

_Thread_local char tern__thread_anchor __attribute__((tls_model("initial-exec")));
static _Thread_local tern_loop *current_loop __attribute__((tls_model("initial-exec")));

void tern__loop_only_failed(const char *fn)
{
    TERN_FATAL(fn, "loop-only call from a thread that is not running this loop "
                   "(use tern_post to hand work to the loop)");
}

/*
 * The sealed-loop check is the loop's (admit.h): a group seals its loops
 * for the destroy phase, but the rule is about scheduling on a loop.
 */
noreturn void tern__loop_sealed_failed(void)
{
    TERN_FATAL("tern_group_shutdown",
               "work scheduled during a loop group's final drain (the destroy phase): "
               "teardown work belongs in the shutdown phase (tern_group_on_shutdown), "
               "while the loops still run");
}

tern_loop *tern_loop_current(void)
{
    return current_loop;
}

/*
 * Claim the loop for this thread (run/run_once/free). A second claim from
 * another thread, or from inside the loop's own callbacks, is a contract
 * violation: the loop has exactly one dequeuing thread (G1).
 */
tern_loop *tern__loop_claim(tern_loop *loop, const char *fn)
{
    uintptr_t expected = 0;
    if (!atomic_compare_exchange_strong_explicit(&loop->owner, &expected, tern__thread_token(),
                                                 memory_order_acquire, memory_order_relaxed)) {
        if (expected == tern__thread_token())
            TERN_FATAL(fn, "called from inside the loop's own callback (the loop is running)");
        TERN_FATAL(fn, "the loop is already running on another thread");
    }
    tern_loop *prev = current_loop;
    current_loop = loop;
    tern__loop_awake(loop);
    return prev;
}

void tern__loop_release(tern_loop *loop, tern_loop *prev)
{
    current_loop = prev;
    /* Unclaimed, the loop counts as asleep: producers must wake its fd. */
    atomic_store_explicit(&loop->wake_state, TERN__WAKE_PARKING, memory_order_seq_cst);
    /* Pairs with the acquire CAS in claim(): the next claimer sees our writes. */
    atomic_store_explicit(&loop->owner, 0, memory_order_release);
}

/* ------------------------------------------------------------------ */
/* Ids and operations                                                  */
/* ------------------------------------------------------------------ */

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
        /* Timer ids have the top bit (timer_table.c); 2^63 is centuries away. */
        TERN_INSIST(!tern__timer_id(loop->id_end));
    }
    return loop->id_next++;
}

int tern__op_add(tern_loop *loop, struct tern__op *op, const struct tern__op_class *cls)
{
    op->id = tern__id_next(loop);
    op->cls = cls;
    op->ready_next = NULL;
    op->flags = 0;
    op->aux = UINT32_MAX;
    op->born = loop->now;
    int rc = tern__idmap_insert(&loop->ids, op);
    if (rc < 0)
        return rc;
    loop->refs++; /* ops_local counted it at admission */
    return 0;
}

void tern__op_add_anon(tern_loop *loop, struct tern__op *op, const struct tern__op_class *cls)
{
    op->id = 0;
    op->cls = cls;
    op->ready_next = NULL;
    op->flags = TERN__OP_ANON;
    op->aux = UINT32_MAX;
    loop->anon++;
    loop->refs++; /* ops_local counted it at admission */
}

void tern__op_finish(tern_loop *loop, struct tern__op *op)
{
    TERN_INSIST(!(op->flags & TERN__OP_DEAD));
    if (!(op->flags & TERN__OP_ANON))
        tern__idmap_remove(&loop->ids, op);
    else
        TERN_DECREMENT(loop->anon);
    if (tern__deadline_armed(op))
        tern__deadline_disarm(loop, op);
    if (!(op->flags & TERN__OP_UNREF))
        TERN_DECREMENT(loop->refs);
    tern__op_unadmit(loop);
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
    /* Timers are not ops: their ids never reach the map. */
    return id == 0 || tern__timer_id(id) ? NULL : tern__idmap_find(&loop->ids, id);
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
    return loop->refs > 0 || (loop->flags & (TERN_LOOP_KEEPALIVE | TERN__LOOP_HELD)) ||
           tern__posts_pending(loop) != 0;
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
    if (o->max_operations < 1 || o->max_operations > (1u << 31))
        return -EINVAL;
    if (o->max_undelivered < 1 || o->max_undelivered > (1u << 31))
        return -EINVAL;
    if (o->flags & ~(unsigned)(TERN_LOOP_RCU | TERN_LOOP_KEEPALIVE))
        return -EINVAL;
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
    __cds_wfcq_init(&loop->in_head, &loop->in_tail);
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
    atomic_init(&loop->wake_state, TERN__WAKE_PARKING); /* unclaimed: asleep */
    loop->magic = TERN__LOOP_MAGIC;
    *loopp = loop;
    return 0;

fail:
    if (loop->backend.ops != NULL)
        loop->backend.ops->close(&loop->backend);
    tern__wake_close(&loop->wake);
    tern__idmap_destroy(&loop->ids);
    tern__cancel_reserve_destroy(&loop->cancels);
    free(loop);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Running                                                             */
/* ------------------------------------------------------------------ */

int tern_loop_run(tern_loop *loop)
{
    TERN__REQUIRE_LOOP(loop);
    tern_loop *prev = tern__loop_claim(loop, "tern_loop_run");
    tern__rcu_enter(loop);
    int result = 0;
    while (tern__loop_alive(loop)) {
        tern__loop_turn(loop, -1);
        if (atomic_exchange_explicit(&loop->stop_requested, false, memory_order_relaxed)) {
            result = tern__loop_alive(loop) ? 1 : 0;
            break;
        }
    }
    atomic_store_explicit(&loop->stop_requested, false, memory_order_relaxed);
    loop->busy_from = 0; /* time outside a run is neither busy nor idle */
    tern__rcu_leave(loop);
    tern__loop_release(loop, prev);
    return result;
}

int tern_loop_run_once(tern_loop *loop, int64_t max_wait_ns)
{
    TERN__REQUIRE_LOOP(loop);
    tern_loop *prev = tern__loop_claim(loop, "tern_loop_run_once");
    tern__rcu_enter(loop);
    /*
     * With nothing live the turn must not block, but it still runs (with
     * a zero wait) so a host pumping us fires unreferenced timers too.
     */
    tern__loop_turn(loop, tern__loop_alive(loop) ? max_wait_ns : 0);
    atomic_store_explicit(&loop->stop_requested, false, memory_order_relaxed);
    loop->busy_from = 0; /* the host's time between calls is not the loop's */
    int alive = tern__loop_alive(loop) ? 1 : 0;
    tern__rcu_leave(loop);
    tern__loop_release(loop, prev);
    return alive;
}

int tern_loop_stop(tern_loop *loop)
{
    TERN__REQUIRE_LOOP(loop);
    atomic_store_explicit(&loop->stop_requested, true, memory_order_relaxed);
    tern__loop_wake(loop);
    return 0;
}

uint64_t tern_loop_now(const tern_loop *loop)
{
    TERN__REQUIRE_LOOP(loop);
    return __atomic_load_n(&loop->now, __ATOMIC_RELAXED);
}

int tern_loop_backend_fd(const tern_loop *loop)
{
    TERN__REQUIRE_LOOP(loop);
    return loop->backend.fd >= 0 ? loop->backend.fd : loop->wake.fd;
}

int64_t tern_loop_next_timeout(const tern_loop *loop)
{
    TERN__REQUIRE_LOOP(loop);
    tern_loop *l = (tern_loop *)loop;
    TERN__LOOP_ONLY(l);
    if (l->ready_count > 0 || tern__inbound_pending(l) || tern__jobs_pending(l))
        return 0;
    const struct tern__heap_entry *top = tern__heap_top(&l->heap);
    if (top == NULL)
        return -1;
    uint64_t now = tern__clock_now();
    return top->deadline <= now ? 0 : (int64_t)(top->deadline - now);
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
        else if (loop->undelivered > 0)
            tern__loop_turn(loop, -1);
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
    TERN_INSIST(loop->ids.count == 0 && loop->timers.live == 0 && loop->ready_head == NULL &&
                loop->undelivered == 0);

    tern__loop_release(loop, prev);

    tern__jobs_destroy(loop); /* waits out pool threads still handing over */
    loop->backend.ops->close(&loop->backend);
    tern__wake_close(&loop->wake);
    free(loop->fds);
    tern__heap_destroy(&loop->heap);
    tern__idmap_destroy(&loop->ids);
    tern__cancel_reserve_destroy(&loop->cancels);
    tern__timers_destroy(loop);
    tern__slab_destroy(&loop->defers);
    loop->magic = 0;
    free(loop);
}

/* ------------------------------------------------------------------ */
/* The books                                                           */
/* ------------------------------------------------------------------ */

#define BOOKS(cond, what) \
    ((cond) ? (void)0 : tern__check_failed(__FILE__, __LINE__, __func__, "BOOKS", what))

void tern__loop_check_books(tern_loop *loop)
{
    BOOKS(loop->undelivered <= loop->max_undelivered, "undelivered > max_undelivered");
    BOOKS(loop->ops_local == loop->ids.count + loop->anon + loop->timers.live,
          "live operations (ops_local) != id map count + anonymous ops + live timers");
    BOOKS(atomic_load_explicit(&loop->ops_count, memory_order_relaxed) == loop->ops_local,
          "published ops_count != ops_local");
    BOOKS(loop->refs <= loop->ops_local, "refs > live operations");
    BOOKS(loop->heap.len <= loop->heap.claims, "heap entries > heap claims");
    BOOKS(loop->timers.due_live <= loop->timers.live, "due timers > live timers");
    unsigned queued = 0;
    for (struct tern__op *op = loop->ready_head; op != NULL; op = op->ready_next)
        queued += !(op->flags & TERN__OP_DEAD);
    BOOKS(queued == loop->ready_count, "ready_count != live ops on the ready queue");
    BOOKS(atomic_load_explicit(&loop->posted, memory_order_relaxed) >=
              atomic_load_explicit(&loop->posts_done, memory_order_relaxed),
          "posts_done > posted");
    tern__jobs_check_books(loop);
}

/* ------------------------------------------------------------------ */
/* Statistics and test seams                                           */
/* ------------------------------------------------------------------ */

void tern_loop_stats_read(const tern_loop *loop, tern_loop_stats *out, size_t size)
{
    TERN__REQUIRE_LOOP(loop);
    TERN_REQUIRE(out != NULL && size > 0);
    tern_loop *l = (tern_loop *)loop;
    tern_loop_stats full = {
        .turns = atomic_load_explicit(&l->st_turns, memory_order_relaxed),
        .posts = atomic_load_explicit(&l->st_posts, memory_order_relaxed),
        .wake_syscalls = atomic_load_explicit(&l->wake_syscalls, memory_order_relaxed),
        .events = atomic_load_explicit(&l->st_events, memory_order_relaxed),
        .idle_ns = atomic_load_explicit(&l->st_idle_ns, memory_order_relaxed),
        .live_operations = (unsigned)(atomic_load_explicit(&l->ops_count, memory_order_relaxed) +
                                      tern__posts_pending(l)),
        .undelivered = atomic_load_explicit(&l->st_undelivered, memory_order_relaxed),
        .undelivered_peak = atomic_load_explicit(&l->st_undelivered_peak, memory_order_relaxed),
        .busy_ns = atomic_load_explicit(&l->st_busy_ns, memory_order_relaxed),
    };
    tern__lag_read(loop, &full.lag_p50_ns, &full.lag_p99_ns, &full.lag_max_ns, &full.lag_count);
    tern__copy_sized(out, size, &full, sizeof full);
}

