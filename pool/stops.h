/*
 * Stop points (stops.c): places where a test holds a pool thread. One
 * list, one bit each in tern__stops_armed.
 *   WORKER_PAST_GATE  a bounded worker has read the pause gate open and
 *                     not yet taken its job;
 *   START_UNPUBLISHED a pool start has its workers running and is not
 *                     yet the running pool (start_lock held);
 *   WORKER_REPAYING   a bounded worker has marked its settled count and
 *                     not yet given the slots back (bounded.c, settle);
 *   REPAYMENT_WAITED  a thread found such a repayment on its way and has
 *                     not yet waited it out.
 */
#ifndef TERN_POOL_STOPS_H
#define TERN_POOL_STOPS_H

#include <stdatomic.h>
#include <stdbool.h>

#include "check.h"

#define TERN__STOP_POINTS(X) \
    X(WORKER_PAST_GATE)      \
    X(START_UNPUBLISHED)     \
    X(WORKER_REPAYING)       \
    X(REPAYMENT_WAITED)

enum tern__stop_point {
#define TERN__STOP_ENUM(name) TERN__STOP_##name,
    TERN__STOP_POINTS(TERN__STOP_ENUM)
#undef TERN__STOP_ENUM
        TERN__STOP_COUNT
};

extern __attribute__((visibility("hidden"))) _Atomic unsigned tern__stops_armed;
/* Wait here while the point is armed (any pool thread). */
void tern__stop_at(enum tern__stop_point point);
/*
 * A stop point in a product path: disarmed, one relaxed load and a branch
 * the compiler lays out as not taken; the wait itself is out of line.
 */
static inline void tern__stop_point(enum tern__stop_point point)
{
    if (TERN_UNLIKELY(atomic_load_explicit(&tern__stops_armed, memory_order_relaxed) &
                      (1u << point)))
        tern__stop_at(point);
}
/* The test's side (pool/seams.c): arm, release, count the threads stopped. */
void tern__stop_arm(enum tern__stop_point point);
void tern__stop_release(enum tern__stop_point point);
unsigned tern__stop_waiting(enum tern__stop_point point);

#endif
