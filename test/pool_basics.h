/*
 * The pool helpers that need nothing of Linux: the clock, a sleep, the
 * bounded waits, the configuration and statistics shorthands. Included by
 * pool_helpers.h (the criterion pool tests) and by test/stress/
 * pool_stress.c, which Windows builds too (test/win/meson.build). Only
 * C11, POSIX clocks and tern.h (mingw-w64's winpthreads has the clocks).
 *
 * Every wait in here is a liveness bound (PH_LIVENESS_NS), never a timing
 * check: a test that hits it has found a hang, not a slow machine.
 */
#ifndef TERN_POOL_BASICS_H
#define TERN_POOL_BASICS_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "tern.h"

#define PH_MS 1000000ull
#define PH_SEC (1000ull * PH_MS)
/* How long a wait may last before the test calls it a hang. Generous so a
 * loaded CI machine (criterion runs tests in parallel) never trips it. */
#define PH_LIVENESS_NS (20ull * PH_SEC)

static inline uint64_t ph_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * PH_SEC + (uint64_t)ts.tv_nsec;
}

static inline void ph_sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / PH_SEC), .tv_nsec = (long)(ns % PH_SEC)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/*
 * Pump `loop` one bounded turn at a time until `cond` holds, or give up at
 * the liveness bound. Sets `ok` to whether cond held. A turn that finds
 * nothing live returns at once, so the helper then sleeps a millisecond
 * rather than spin.
 */
#define PH_PUMP_UNTIL(ok, loop, cond)                                  \
    do {                                                               \
        uint64_t ph_deadline_ = ph_now() + PH_LIVENESS_NS;             \
        (ok) = false;                                                  \
        for (;;) {                                                     \
            if (cond) {                                                \
                (ok) = true;                                           \
                break;                                                 \
            }                                                          \
            if (ph_now() > ph_deadline_)                               \
                break;                                                 \
            if (tern_loop_run_once((loop), (int64_t)(5 * PH_MS)) == 0) \
                ph_sleep_ns(PH_MS);                                    \
        }                                                              \
    } while (0)

/* Poll `cond` every millisecond without touching any loop. */
#define PH_WAIT_UNTIL(ok, cond)                            \
    do {                                                   \
        uint64_t ph_deadline_ = ph_now() + PH_LIVENESS_NS; \
        (ok) = false;                                      \
        for (;;) {                                         \
            if (cond) {                                    \
                (ok) = true;                               \
                break;                                     \
            }                                              \
            if (ph_now() > ph_deadline_)                   \
                break;                                     \
            ph_sleep_ns(PH_MS);                            \
        }                                                  \
    } while (0)

/* ------------------------------------------------------------------ */
/* Pool configuration and statistics shorthands.                       */
/* ------------------------------------------------------------------ */

static inline tern_pool_config ph_config(unsigned threads, unsigned queue_capacity,
                                         unsigned long_threads_max)
{
    tern_pool_config cfg;
    tern_pool_config_init(&cfg);
    cfg.threads = threads;
    cfg.queue_capacity = queue_capacity;
    cfg.long_threads_max = long_threads_max;
    return cfg;
}

static inline tern_pool_stats ph_stats(void)
{
    tern_pool_stats s;
    memset(&s, 0xa5, sizeof s); /* so a field the call forgets shows up */
    tern_pool_stats_get(&s);
    return s;
}

static inline tern_loop_stats ph_loop_stats(const tern_loop *loop)
{
    tern_loop_stats s;
    memset(&s, 0xa5, sizeof s);
    tern_loop_stats_get(loop, &s);
    return s;
}

#endif
