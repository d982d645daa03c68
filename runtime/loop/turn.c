/*
 * The turn: exactly five steps, in this order.
 *
 *   1. splice the inbound queue: run posts, resolve cancels; move pool
 *      completions from the result ring to the ready queue
 *   2. drain the ready queue, at most dispatch_batch callbacks (check
 *      hooks run just before it; idle, then prepare hooks just after)
 *   3. refresh the clock, compute the wait
 *   4. wait on the backend (readiness goes to the ready queue)
 *   5. refresh the clock, fire expired deadlines into the ready queue
 *
 * Step 2 is the only place user callbacks run, posted functions aside
 * (they run in step 1). Readiness and deadlines found in steps 4 and 5
 * are dispatched in the next turn's step 2.
 */
#define _LGPL_SOURCE /* liburcu's inline fast paths: the empty check, the quiescent state */
#include <errno.h>
#include <sched.h>
#include <unistd.h>

#include "heap.h"
#include "job_p.h"
#include "loop_p.h"
#include "probe.h"
#include "qsbr.h"
#include "spin.h"

static void unqueue_head(tern_loop *loop)
{
    struct tern__op *op = loop->ready_head;
    loop->ready_head = op->ready_next;
    if (loop->ready_head == NULL)
        loop->ready_tail = NULL;
    op->flags &= ~TERN__OP_QUEUED;
}

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
        bool was_last = op == last;
        if (op->cls->drain != NULL && !(op->flags & TERN__OP_DEAD)) {
            /* A queue behind one op (due timers): it stays at the head
             * until drained, so what waits keeps its place. */
            bool more;
            unsigned n = op->cls->drain(loop, op, budget, &more);
            budget -= n;
            ran += n;
            if (more)
                break;
            unqueue_head(loop);
            if (op->flags & TERN__OP_DEAD)
                op->flags &= ~TERN__OP_DEAD; /* went dead while draining: already uncounted */
            else
                TERN_DECREMENT(loop->ready_count);
            if (was_last)
                break;
            continue;
        }
        unqueue_head(loop);
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
    tern__outcomes_settle(); /* the dones this step ran, in one add per kind */
}

static int64_t compute_wait(tern_loop *loop, int64_t max_wait)
{
    int64_t wait = -1;
    /* Nothing live (step 1 may have run the last post): nothing to wait for. */
    if (loop->ready_count > 0 || !tern__loop_alive(loop) ||
        atomic_load_explicit(&loop->stop_requested, memory_order_relaxed))
        wait = 0;
    else if (tern__inbound_pending(loop) || tern__jobs_pending(loop) || loop->hook_idle > 0)
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
 * Before parking with a few bounded jobs in flight, look for their
 * completions for a while: waking a thread asleep on the other core costs
 * far more than a short spin when a completion is only microseconds away.
 * Never for long jobs (no round trip to win) nor for many (completions then
 * come in batches and the spin would take the workers' core); only while a
 * worker is on a CPU, and only while spinning pays (backends/spin.h), so a
 * busy machine runs the credit out and the loop parks at once.
 */
#define SPIN_MAX_INFLIGHT 4
/* A yield for posts paid if the next turn ran at least this many: a run
 * from a producer that went on posting (work_came_after_yield). */
#define YIELD_POSTS_PAID 16

static bool spin_for_work(tern_loop *loop)
{
    unsigned bounded = loop->undelivered - loop->long_undelivered;
    if (bounded == 0 || bounded > SPIN_MAX_INFLIGHT || !tern__pool_active())
        return false;
    uint32_t budget = tern__spin_budget(&loop->spin);
    if (budget == 0)
        return false;
    uint64_t deadline = tern__clock_now() + budget;
    bool found = false;
    for (unsigned i = 1;; i++) {
        found = tern__jobs_pending(loop) || tern__inbound_pending(loop);
        if (found)
            break;
        tern__spin_pause();
        if (i % TERN__SPIN_CLOCK_EVERY == 0 &&
            (tern__clock_now() >= deadline || !tern__pool_active())) {
            /* The last worker may have handed back just before it went quiet. */
            found = tern__jobs_pending(loop) || tern__inbound_pending(loop);
            break;
        }
    }
    tern__spin_result(&loop->spin, found);
    if (!found)
        TERN_PROBE(stall, loop, bounded, budget);
    return found;
}

/*
 * Step 5: every deadline due at loop->now leaves the heap, soonest first
 * (arming order on a tie), and moves into the ready queue: a timer through
 * its table (timer.c), an op through its class's `expired` hook, or queued
 * as it is.
 */
static void fire_deadlines(tern_loop *loop)
{
    struct tern__op *op;
    uint32_t slot;
    while (tern__deadline_pop_due(loop, &op, &slot)) {
        if (op == NULL)
            tern__timer_expired(loop, slot);
        else if (op->cls->expired != NULL)
            op->cls->expired(loop, op);
        else
            tern__op_ready(loop, op);
    }
}

/*
 * A loop woken by a thread on its own CPU took that CPU from it; parking
 * would hand it back only until the next post or hand-back wakes the loop
 * again, two context switches a post. Yield once instead and take what
 * the waker made meanwhile. For jobs only while a few are in flight beyond
 * what the spin serves; for posts only while yielding pays (the next turn
 * ran a burst: settle_yields). Not synchronisation: whatever arrives after
 * the yield finds the loop parking and wakes it.
 */
static bool work_came_after_yield(tern_loop *loop)
{
    unsigned bounded = loop->undelivered - loop->long_undelivered;
    bool for_jobs =
        loop->jobs_taken > 0 && loop->jobs_taken < TERN__COLLECT_RUN && bounded > SPIN_MAX_INFLIGHT;
    if (!(for_jobs || loop->posts_ran > 0) ||
        atomic_load_explicit(&loop->waker_cpu, memory_order_relaxed) < 0)
        return false;
    int waker = atomic_exchange_explicit(&loop->waker_cpu, -1, memory_order_relaxed);
    if (waker != tern__current_cpu())
        return false;
    if (!for_jobs) {
        if (tern__spin_budget(&loop->post_yield) == 0)
            return false;
        loop->post_yield_owed = true; /* judged by the next turn's posts */
    }
    sched_yield();
    return tern__inbound_pending(loop) || tern__jobs_pending(loop);
}

/*
 * A turn whose only work is a run held open (inbound.c) must not park, and
 * reading the run again at once would take its line from the producer after
 * every post. While yielding pays, yield once so the run can grow; when it
 * does not (a producer that waits for each post's effect), close the runs
 * and let the turn park. Only when the caller lets the turn wait, and never
 * with anything else to do. Returns the wait.
 */
static int64_t open_runs_only(tern_loop *loop, int64_t wait, int64_t max_wait, bool *yielded)
{
    if (wait != 0 || max_wait == 0 || loop->open_n == 0 || loop->ready_count != 0 ||
        !tern__wfq_empty(&loop->in_head, &loop->in_tail) || tern__jobs_pending(loop) ||
        atomic_load_explicit(&loop->stop_requested, memory_order_relaxed))
        return wait;
    if (tern__spin_budget(&loop->open_yield) != 0) {
        loop->open_yield_owed = true; /* judged by the next turn's posts */
        sched_yield();
        *yielded = true;
        return wait;
    }
    tern__inbound_release(loop);
    return compute_wait(loop, max_wait);
}

/* Announce the park, then re-check: see inbound.c for the protocol. */
static bool park(tern_loop *loop)
{
    atomic_store_explicit(&loop->wake_state, TERN__WAKE_PARKING, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
    if (tern__inbound_pending(loop) || tern__jobs_pending(loop) ||
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

/*
 * Step 4's completions (a completion backend's): each to its op. Out of
 * line, so a readiness backend's turn keeps its code as it was.
 */
__attribute__((noinline)) static void take_completions(tern_loop *loop)
{
    for (int i = 0; i < loop->backend.ndone; i++)
        tern__op_completed(loop, &loop->backend.done[i]);
    loop->backend.ndone = 0;
}

/*
 * Step 4. Returns when the wait (if any) began, after any spin: a spin is
 * the loop working, and is booked as busy time, never idle.
 */
static uint64_t wait_backend(tern_loop *loop, int64_t wait)
{
    if (wait != 0 && (spin_for_work(loop) || work_came_after_yield(loop)))
        wait = 0;
    uint64_t began = wait != 0 ? tern__clock_now() : 0;
    bool parked = wait != 0 && park(loop);
    if (!parked) {
        /* Nothing to sleep for: only ask the kernel if there are fds (or
         * the backend has changes only a wait sends). */
        if (loop->io_count == 0 && !loop->backend.owes)
            return 0;
        wait = 0;
        began = 0;
    }
    if (parked && (loop->flags & TERN_LOOP_RCU))
        tern__qsbr_offline();
    int n = loop->backend.ops->wait(&loop->backend, wait, loop->fired, TERN__FIRED_MAX);
    if (parked) {
        if (loop->flags & TERN_LOOP_RCU)
            tern__qsbr_online();
        tern__loop_awake(loop);
    }
    if (n < 0)
        TERN_FATAL("tern_loop_run", "the backend wait failed");
    /* The wake fd is consumed by tern__loop_awake(), not here. */
    for (int i = 0; i < n; i++) {
        int fd = loop->fired[i].fd;
        if (fd == loop->wake.fd)
            continue;
        if (fd < 0) /* the backend itself read a signal's deliveries (net/signal.c) */
            tern__signal_fired(loop, TERN__FIRED_SIGNO(fd), loop->fired[i].events);
        else
            tern__io_fired(loop, fd, loop->fired[i].events);
    }
    if (loop->backend.ndone != 0)
        take_completions(loop);
    return began;
}

/* Step 1's judgement of the previous turn's yields: did a burst follow? */
static void settle_yields(tern_loop *loop)
{
    if (loop->post_yield_owed) {
        loop->post_yield_owed = false;
        tern__spin_result(&loop->post_yield, loop->posts_ran >= YIELD_POSTS_PAID);
    }
    if (loop->open_yield_owed) {
        loop->open_yield_owed = false;
        tern__spin_result(&loop->open_yield, loop->posts_ran >= YIELD_POSTS_PAID);
    }
}

/* Step 1: posts, cancels and runs from other threads, then pool results. */
static void take(tern_loop *loop)
{
    loop->step = TERN__STEP_TAKE;
    loop->posts_ran = 0;
    /* Most turns find the queue empty and no run open: loads, not a call. */
    if (loop->open_n != 0 || !tern__wfq_empty(&loop->in_head, &loop->in_tail))
        tern__inbound_drain(loop);
    settle_yields(loop);
    tern__jobs_collect(loop);
}

/* Step 2: the ready queue between the check hooks and the idle and
 * prepare hooks; then the jobs this step submitted go to the pool. */
static void run_ready(tern_loop *loop)
{
    loop->step = TERN__STEP_DISPATCH;
    if (loop->hook_head[TERN_HOOK_CHECK] != NULL)
        tern__hooks_run(loop, TERN_HOOK_CHECK);
    dispatch(loop);
    if (loop->hook_head[TERN_HOOK_IDLE] != NULL)
        tern__hooks_run(loop, TERN_HOOK_IDLE);
    if (loop->hook_head[TERN_HOOK_PREPARE] != NULL)
        tern__hooks_run(loop, TERN_HOOK_PREPARE);
    tern__jobs_kick(loop);
}

/* Step 3. Sets *yielded when the loop gave its CPU to an open run. */
static int64_t decide_wait(tern_loop *loop, int64_t max_wait, bool *yielded)
{
    loop->step = TERN__STEP_DECIDE;
    __atomic_store_n(&loop->now, tern__clock_now(), __ATOMIC_RELAXED);
    int64_t wait = open_runs_only(loop, compute_wait(loop, max_wait), max_wait, yielded);
    loop->last_wait = wait;
    return wait;
}

/*
 * Step 5's books: the time since the last step 5 is busy but for the wait
 * that began at idle_from (0: none). Only the loop writes these counters,
 * so a load and a store are enough; readers on other threads see either.
 */
static void account_time(tern_loop *loop, uint64_t idle_from)
{
    uint64_t idle = idle_from != 0 && loop->now > idle_from ? loop->now - idle_from : 0;
    if (idle != 0)
        atomic_fetch_add_explicit(&loop->st_idle_ns, idle, memory_order_relaxed);
    if (loop->now > loop->busy_from + idle)
        atomic_store_explicit(&loop->st_busy_ns,
                              atomic_load_explicit(&loop->st_busy_ns, memory_order_relaxed) +
                                  (loop->now - loop->busy_from - idle),
                              memory_order_relaxed);
    loop->busy_from = loop->now;
}

/* Step 5. step4_empty: step 4 did nothing at all, so step 3's clock holds. */
static void fire(tern_loop *loop, bool step4_empty, uint64_t idle_from)
{
    loop->step = TERN__STEP_FIRE;
    if (!step4_empty)
        __atomic_store_n(&loop->now, tern__clock_now(), __ATOMIC_RELAXED);
    account_time(loop, idle_from);
    fire_deadlines(loop);
}

static void turn_end(tern_loop *loop)
{
    loop->step = TERN__STEP_NONE;
    if (TERN_UNLIKELY(loop->check_books))
        tern__loop_check_books(loop);
    atomic_fetch_add_explicit(&loop->st_turns, 1, memory_order_relaxed);
    TERN_PROBE(turn_end, loop, atomic_load_explicit(&loop->st_turns, memory_order_relaxed));
    if (loop->flags & TERN_LOOP_RCU)
        tern__qsbr_quiescent();
}

void tern__loop_turn(tern_loop *loop, int64_t max_wait)
{
    /* The first turn of a run (or of each tern_loop_run_once) starts the
     * busy clock; later turns continue from the previous step 5. */
    if (loop->busy_from == 0)
        loop->busy_from = tern__clock_now();
    TERN_PROBE(turn_start, loop);

    take(loop);
    run_ready(loop);
    bool yielded = false;
    int64_t wait = decide_wait(loop, max_wait, &yielded);
    /* A zero wait with no descriptor to ask about makes step 4 do nothing
     * (wait_backend) unless the loop yielded, which is time passing. */
    bool step4_empty = wait == 0 && loop->io_count == 0 && !yielded;
    loop->step = TERN__STEP_WAIT;
    uint64_t idle_from = wait_backend(loop, wait);
    fire(loop, step4_empty, idle_from);
    turn_end(loop);
}
