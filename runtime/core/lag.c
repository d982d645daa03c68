/*
 * Reading the loop's lag histogram (runtime/core/lag.h): percentiles as the
 * upper bound of the bucket that holds them, so within a factor of two,
 * and never above the largest lateness seen.
 */
#include "lag.h"

static uint64_t bucket_top(unsigned b)
{
    return b >= 63 ? UINT64_MAX : (UINT64_C(2) << b) - 1;
}

void tern__lag_read(const tern_loop *loop, uint64_t *p50, uint64_t *p99, uint64_t *max,
                    uint64_t *count)
{
    tern_loop *l = (tern_loop *)loop;
    uint64_t n[TERN__LAG_BUCKETS], total = 0;
    for (unsigned b = 0; b < TERN__LAG_BUCKETS; b++) {
        n[b] = atomic_load_explicit(&l->st_lag_hist[b], memory_order_relaxed);
        total += n[b];
    }
    *max = atomic_load_explicit(&l->st_lag_max_ns, memory_order_relaxed);
    *count = total;
    *p50 = *p99 = 0;
    if (total == 0)
        return;
    uint64_t seen = 0, want50 = (total + 1) / 2, want99 = total - total / 100;
    bool got50 = false;
    for (unsigned b = 0; b < TERN__LAG_BUCKETS; b++) {
        seen += n[b];
        if (!got50 && seen >= want50) {
            *p50 = bucket_top(b) < *max ? bucket_top(b) : *max;
            got50 = true;
        }
        if (seen >= want99) {
            *p99 = bucket_top(b) < *max ? bucket_top(b) : *max;
            return;
        }
    }
}
