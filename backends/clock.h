/*
 * Clocks (backends/clock.c): the loop's monotonic clock and the cheaper
 * tick counter the pool's latency figures use. Any thread.
 */
#ifndef TERN_CLOCK_H
#define TERN_CLOCK_H

#include <stdint.h>

/*
 * The longest duration tern accepts (a timer's delay or period, a job's
 * or a connect's timeout, a watch's interval, the long class's idle
 * timeout): 2^62 ns, about 146 years. A deadline is the monotonic clock
 * plus such a duration, and the clock (time since boot) stays far below
 * 2^63, so the sum never wraps 64 bits and needs no overflow check.
 */
#define TERN__DURATION_MAX_NS (UINT64_C(1) << 62)

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t tern__clock_now(void);
/* A cheap monotonic tick for latency figures, and its rate (see clock.c). */
uint64_t tern__ticks(void);
double tern__ticks_per_ns(void);

#endif
