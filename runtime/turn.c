/*
 * The turn: exactly five steps, in this order.
 *
 *   1. splice the inbound queue: run posts, resolve cancels; move pool
 *      completions from the result ring to the ready queue
 *   2. drain the ready queue, at most dispatch_batch callbacks
 *   3. refresh the clock, compute the wait
 *   4. wait on the backend (readiness goes to the ready queue)
 *   5. refresh the clock, fire expired deadlines into the ready queue
 *
 * Step 2 is the only place user callbacks run, posted functions aside
 * (they run in step 1). Readiness and deadlines found in steps 4 and 5
 * are dispatched in the next turn's step 2.
 */
#include <errno.h>
#include <unistd.h>

#include <urcu-qsbr.h>
#include <urcu/arch.h>

#include "loop_p.h"

static void dispatch(tern_loop *loop)
{
    /*
     * What is queued while we dispatch (a defer, a rearmed timer) waits
     * for the next turn: stop after the op that was last on entry.
     */
    struct tern__op *last = loop->ready_tail;
    unsigned budget = loop->dispatch_batch;
    uint64_t ran = 0;
    while (budget > 0 && loop->ready_head != NULL) {
        struct tern__op *op = loop->ready_head;
        loop->ready_head = op->ready_next;
        if (loop->ready_head == NULL)
            loop->ready_tail = NULL;
        op->flags &= ~TERN__OP_QUEUED;
        bool was_last = op == last;
        if (op->flags & TERN__OP_DEAD) {
            op->cls->free(loop, op);
        } else {
            TERN_DECREMENT(loop->ready_count);
            budget--;
            ran++;
            op->cls->dispatch(loop, op);
        }
        if (was_last)
            break;
    }
    atomic_fetch_add_explicit(&loop->st_events, ran, memory_order_relaxed);
}

static int64_t compute_wait(tern_loop *loop, int64_t max_wait)
{
    int64_t wait = -1;
    /* Nothing live (step 1 may have run the last post): nothing to wait for. */
    if (loop->ready_count > 0 || !tern__loop_alive(loop) ||
        atomic_load_explicit(&loop->stop_requested, memory_order_relaxed))
        wait = 0;
    else if (tern__inbound_pending(loop) || tern__loop_pool_pending(loop))
        wait = 0;
    else {
        const struct tern__heap_entry *top = tern__heap_top(&loop->heap);
        if (top != NULL)
            wait = top->deadline <= loop->now ? 0 : (int64_t)(top->deadline - loop->now);
    }
    if (max_wait >= 0 && (wait < 0 || wait > max_wait))
        wait = max_wait;
    return wait;
}

/*
 * How long to look for a pool completion before parking, when jobs are in
 * flight: a wake across cores costs ~20 µs here, so a completion due within
 * a few µs is cheaper to catch spinning than sleeping.
 */
#define SPIN_ROUNDS 2000
#define SPIN_MAX_INFLIGHT 4

static bool spin_for_work(tern_loop *loop)
{
    /*
     * Only with a few jobs in flight: that is where a round trip's latency
     * is won. With many, completions come in batches anyway, and a spin
     * would take the core from the very workers that produce them.
     */
    if (loop->undelivered == 0 || loop->undelivered > SPIN_MAX_INFLIGHT)
        return false;
    for (unsigned i = 0; i < SPIN_ROUNDS; i++) {
        if (tern__loop_pool_pending(loop) || tern__inbound_pending(loop))
            return true;
        caa_cpu_relax();
    }
    return false;
}

/* Announce the park, then re-check: see inbound.c for the protocol. */
static bool park(tern_loop *loop)
{
    atomic_store_explicit(&loop->wake_state, TERN__WAKE_PARKING, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
    if (tern__inbound_pending(loop) || tern__loop_pool_pending(loop) ||
        atomic_load_explicit(&loop->stop_requested, memory_order_relaxed)) {
        /*
         * Not sleeping after all. A producer may have notified us in the
         * meantime and owes the eventfd one write: tern__loop_awake takes
         * the word back and consumes that write, or the fd would stay
         * readable and every later park would return at once.
         */
        tern__loop_awake(loop);
        return false;
    }
    return true;
}

static void wait_backend(tern_loop *loop, int64_t wait)
{
    if (wait != 0 && spin_for_work(loop))
        wait = 0;
    bool parked = wait != 0 && park(loop);
    if (!parked) {
        /* Nothing to sleep for: only ask the kernel if there are fds. */
        if (loop->io_count == 0)
            return;
        wait = 0;
    }
    if (parked && (loop->flags & TERN_LOOP_RCU))
        rcu_thread_offline();
    int n = loop->backend.ops->wait(&loop->backend, wait, loop->fired, TERN__FIRED_MAX);
    if (parked) {
        if (loop->flags & TERN_LOOP_RCU)
            rcu_thread_online();
        tern__loop_awake(loop);
    }
    if (n < 0)
        TERN_FATAL("tern_loop_run", "the backend wait failed");
    /* The wake fd is consumed by tern__loop_awake(), not here. */
    for (int i = 0; i < n; i++)
        if (loop->fired[i].fd != loop->wake_fd)
            tern__io_fired(loop, loop->fired[i].fd, loop->fired[i].events);
}

static void fire_deadlines(tern_loop *loop)
{
    const struct tern__heap_entry *top;
    while ((top = tern__heap_top(&loop->heap)) != NULL && top->deadline <= loop->now) {
        struct tern__op *op = top->op;
        tern__heap_remove(&loop->heap, 0);
        if (op->cls->expired != NULL)
            op->cls->expired(loop, op);
        else
            tern__op_ready(loop, op);
    }
}

void tern__loop_turn(tern_loop *loop, int64_t max_wait)
{
    loop->step = 1;
    tern__inbound_drain(loop);
    tern__loop_pool_collect(loop);

    loop->step = 2;
    dispatch(loop);

    loop->step = 3;
    __atomic_store_n(&loop->now, tern__clock_now(), __ATOMIC_RELAXED);
    uint64_t before = loop->now;
    int64_t wait = compute_wait(loop, max_wait);
    loop->last_wait = wait;

    loop->step = 4;
    wait_backend(loop, wait);

    loop->step = 5;
    __atomic_store_n(&loop->now, tern__clock_now(), __ATOMIC_RELAXED);
    if (wait != 0)
        atomic_fetch_add_explicit(&loop->st_idle_ns, loop->now - before, memory_order_relaxed);
    fire_deadlines(loop);

    loop->step = 0;
    if (TERN_UNLIKELY(loop->check_books))
        tern__loop_check_books(loop);
    atomic_fetch_add_explicit(&loop->st_turns, 1, memory_order_relaxed);
    if (loop->flags & TERN_LOOP_RCU)
        rcu_quiescent_state();
}
