/*
 * The pool's test seam (declared in pool/pool.h and runtime/testing.h),
 * built only into the tests' library (meson.build, tern-seams), never into
 * the installed ones.
 */
#include "pool_p.h"

unsigned tern__test_pool_sleepers(void)
{
    struct tern__pool *p = tern__pool_current();
    return p != NULL ? atomic_load_explicit(&p->sleepers, memory_order_relaxed) : 0;
}

uint64_t tern__test_pool_wake_checks(void)
{
    return atomic_load_explicit(&tern__pool_wake_checks, memory_order_relaxed);
}
