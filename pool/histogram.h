/*
 * The statistics' latency histograms (histogram.c) and the per-worker
 * pairs the workers record into.
 */
#ifndef TERN_POOL_HISTOGRAM_H
#define TERN_POOL_HISTOGRAM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "sizes.h"

#define TERN__HIST_BUCKETS 304
#define TERN__HIST_DECAY 4096 /* halve every this many samples: "recent jobs" */

struct tern__hist {
    _Atomic uint64_t count;
    _Atomic uint64_t buckets[TERN__HIST_BUCKETS];
};

/*
 * Record value as `weight` samples: a job timed as one of several chosen
 * at random stands for them all (worker.c, "Timing"). shared: several
 * threads record into h (the long class); else one does.
 */
void tern__hist_record(struct tern__hist *h, uint64_t value, unsigned weight, bool shared);
/* Percentile q (0..1) over the sum of n histograms, in recorded units. */
uint64_t tern__hist_percentile(struct tern__hist *const *hs, unsigned n, double q);
/* Per worker histograms; index TERN__MAX_THREADS is shared by long workers. */
extern __attribute__((
    visibility("hidden"))) struct tern__hist tern__pool_wait_hist[TERN__MAX_THREADS + 1];
extern __attribute__((
    visibility("hidden"))) struct tern__hist tern__pool_run_hist[TERN__MAX_THREADS + 1];

#endif
