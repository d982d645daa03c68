/*
 * Running a loop: which thread holds it (claim and release, and the
 * thread's current loop), tern_loop_run and run_once around the turn
 * (turn.c), the stop request, and what a host reads between turns.
 */
#include <errno.h>

#include "heap.h"
#include "job_p.h"
#include "loop_p.h"

static _Thread_local tern_loop *current_loop __attribute__((tls_model("initial-exec")));

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
    tern__inbound_release(loop);
    /* Unclaimed, the loop counts as asleep: producers must wake its fd. */
    atomic_store_explicit(&loop->wake_state, TERN__WAKE_PARKING, memory_order_seq_cst);
    /* Pairs with the acquire CAS in claim(): the next claimer sees our writes. */
    atomic_store_explicit(&loop->owner, 0, memory_order_release);
}

int tern_loop_run(tern_loop *loop)
{
    TERN__REQUIRE_LOOP(loop);
    tern_loop *prev = tern__loop_claim(loop, "tern_loop_run");
    tern__rcu_enter(loop);
    int result = 0;
    while (tern__loop_alive(loop)) {
        tern__loop_turn(loop, -1);
        if (atomic_exchange_explicit(&loop->stop_requested, false, memory_order_relaxed)) {
            tern__inbound_release(loop); /* as in run_once: before the answer */
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
    /* Before the answer: a run this turn kept open is alive only while
     * posts added to it wait (the release would close it anyway). */
    tern__inbound_release(loop);
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

const char *tern_loop_backend_name(const tern_loop *loop)
{
    TERN__REQUIRE_LOOP(loop);
    return loop->backend.ops->name;
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
