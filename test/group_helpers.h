/*
 * Helpers the loop-group tests share: ending a group and waiting, bounded
 * by LIVENESS_NS, for a counter the group's members move.
 */
#ifndef TERN_TEST_GROUP_HELPERS_H
#define TERN_TEST_GROUP_HELPERS_H

#include "loop_helpers.h"

/* Shut the group down, wait for it and free it, each step succeeding. */
static inline void group_end(tern_group *g)
{
    cr_assert_eq(tern_group_shutdown(g), 0);
    cr_assert_eq(tern_group_wait(g), 0);
    tern_group_free(g);
}

/* Wait (bounded) until *v >= want; fail naming what with the value seen. */
static inline void wait_at_least(atomic_uint *v, unsigned want, const char *what)
{
    uint64_t deadline = mono_ns() + LIVENESS_NS;
    while (atomic_load(v) < want) {
        if (mono_ns() > deadline)
            cr_assert_fail("%s: %u of %u after the deadline", what, atomic_load(v), want);
        sched_yield();
    }
}

#endif
