/*
 * Clocks (backends/clock.c): the loop's monotonic clock and the cheaper
 * tick counter the pool's latency figures use. Any thread.
 */
#ifndef TERN_CLOCK_H
#define TERN_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t tern__clock_now(void);
/* A cheap monotonic tick for latency figures, and its rate (see clock.c). */
uint64_t tern__ticks(void);
double tern__ticks_per_ns(void);

#endif
