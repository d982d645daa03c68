/*
 * The pool's test seam (declared in pool/pool.h, which the tests reach
 * through runtime/core/testing.h), built only into the tests' library
 * (meson.build, tern-seams), never into the installed ones.
 */
#include "bounded.h"
#include "pool.h"
#include "pool_p.h"
#include "stops.h"
#include "worker.h"

unsigned tern__test_pool_sleepers(void)
{
    struct tern__pool *p = tern__pool_current();
    return p != NULL ? atomic_load_explicit(&p->sleepers, memory_order_relaxed) : 0;
}

uint64_t tern__test_pool_wake_checks(void)
{
    return atomic_load_explicit(&tern__pool_wake_checks, memory_order_relaxed);
}

void tern__test_hold_past_gate(void)
{
    tern__stop_arm(TERN__STOP_WORKER_PAST_GATE);
}

void tern__test_release_past_gate(void)
{
    tern__stop_release(TERN__STOP_WORKER_PAST_GATE);
}

unsigned tern__test_waiting_past_gate(void)
{
    return tern__stop_waiting(TERN__STOP_WORKER_PAST_GATE);
}

void tern__test_hold_pool_start(void)
{
    tern__stop_arm(TERN__STOP_START_UNPUBLISHED);
}

void tern__test_release_pool_start(void)
{
    tern__stop_release(TERN__STOP_START_UNPUBLISHED);
}

unsigned tern__test_waiting_pool_start(void)
{
    return tern__stop_waiting(TERN__STOP_START_UNPUBLISHED);
}

unsigned tern__test_pool_holds(void)
{
    return atomic_load_explicit(&tern__pool_holds, memory_order_relaxed);
}

unsigned tern__test_pool_run_left(void)
{
    unsigned fixed, n = tern__runs_in_use(&fixed), left = 0;
    for (unsigned i = 0; i < n; i++) {
        uint64_t word = atomic_load_explicit(&tern__run_at(i, fixed)->word, memory_order_relaxed);
        if (TERN__RUN_NEXT(word) < TERN__RUN_LEN(word))
            left += TERN__RUN_LEN(word) - TERN__RUN_NEXT(word);
    }
    return left;
}

void tern__test_hold_repaying(void)
{
    tern__stop_arm(TERN__STOP_WORKER_REPAYING);
    tern__stop_arm(TERN__STOP_REPAYMENT_WAITED);
}

void tern__test_release_repaying(void)
{
    tern__stop_release(TERN__STOP_WORKER_REPAYING);
}

void tern__test_release_repayment_waited(void)
{
    tern__stop_release(TERN__STOP_REPAYMENT_WAITED);
}

unsigned tern__test_waiting_repaying(void)
{
    return tern__stop_waiting(TERN__STOP_WORKER_REPAYING);
}

unsigned tern__test_waiting_repayment_waited(void)
{
    return tern__stop_waiting(TERN__STOP_REPAYMENT_WAITED);
}
