/*
 * Stop points: places where a test holds a pool thread, to open a race
 * window on purpose and keep it open as long as it likes (the pause
 * gate's windows, test/pause_window_test.c). Each point is one bit of
 * `tern__stops_armed`; a thread that reaches an armed point waits there,
 * counted, until the test releases the point. Nothing arms a point
 * outside the tests (pool/seams.c, runtime/core/testing.h).
 *
 * Cost while disarmed: each point is tern__stop_point (stops.h), inline,
 * one relaxed load of a word nothing writes outside the tests and a
 * branch laid out as not taken; the wait is out of line. The worker's
 * point past the gate pays that once per job, the pool start's once per
 * start, the repayment's once per run a worker repays, and its waiter's
 * only when a repayment is met on its way. The pause gate's own word
 * carries holds only.
 *
 * Lock: stops_lock is a leaf, held by the stopped thread only while it
 * waits on stops_cond (never across a call into the pool).
 */

#include "os_thread.h"
#include "stops.h"

_Atomic unsigned tern__stops_armed;

static tern__mutex_t stops_lock = TERN__MUTEX_INIT;
static tern__cond_t stops_cond = TERN__COND_INIT;
static unsigned stopped[TERN__STOP_COUNT]; /* threads waiting at each point, under stops_lock */

void tern__stop_at(enum tern__stop_point point)
{
    unsigned bit = 1u << point;
    tern__mutex_lock(&stops_lock);
    if (atomic_load_explicit(&tern__stops_armed, memory_order_relaxed) & bit) {
        stopped[point]++;
        tern__cond_broadcast(&stops_cond);
        while (atomic_load_explicit(&tern__stops_armed, memory_order_relaxed) & bit)
            tern__cond_wait(&stops_cond, &stops_lock);
        stopped[point]--;
    }
    tern__mutex_unlock(&stops_lock);
}

void tern__stop_arm(enum tern__stop_point point)
{
    tern__mutex_lock(&stops_lock);
    atomic_fetch_or_explicit(&tern__stops_armed, 1u << point, memory_order_relaxed);
    tern__mutex_unlock(&stops_lock);
}

void tern__stop_release(enum tern__stop_point point)
{
    tern__mutex_lock(&stops_lock);
    atomic_fetch_and_explicit(&tern__stops_armed, ~(1u << point), memory_order_relaxed);
    tern__cond_broadcast(&stops_cond);
    tern__mutex_unlock(&stops_lock);
}

unsigned tern__stop_waiting(enum tern__stop_point point)
{
    tern__mutex_lock(&stops_lock);
    unsigned n = stopped[point];
    tern__mutex_unlock(&stops_lock);
    return n;
}
