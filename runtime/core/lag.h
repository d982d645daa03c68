/*
 * Loop lag: how late the loop fires its deadlines. At step 5 every expired
 * deadline is recorded as (the turn's clock - its deadline), with the clock
 * step 5 already read, into a per-loop histogram of log2 buckets; the
 * statistics read percentiles from it (runtime/core/lag.c).
 */
#ifndef TERN_LAG_H
#define TERN_LAG_H

#include "loop_p.h"

static inline void tern__lag_record(tern_loop *loop, uint64_t deadline)
{
    uint64_t late = loop->now > deadline ? loop->now - deadline : 0;
    unsigned b = late < 2 ? 0 : 63u - (unsigned)__builtin_clzll(late);
    /* Only the loop's thread writes: a relaxed load and store, no lock prefix. */
    atomic_store_explicit(&loop->st_lag_hist[b],
                          atomic_load_explicit(&loop->st_lag_hist[b], memory_order_relaxed) + 1,
                          memory_order_relaxed);
    if (late > atomic_load_explicit(&loop->st_lag_max_ns, memory_order_relaxed))
        atomic_store_explicit(&loop->st_lag_max_ns, late, memory_order_relaxed);
}

/* The lag percentiles (upper bounds of their buckets, at most the maximum)
 * and the count of deadlines fired, from any thread. */
void tern__lag_read(const tern_loop *loop, uint64_t *p50, uint64_t *p99, uint64_t *max,
                    uint64_t *count);

#endif
