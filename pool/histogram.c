/*
 * Latency histograms for the pool's percentiles: log-bucketed with eight
 * linear sub-buckets per power of two (so a bucket is at most 1/8 of its
 * value wide), relaxed atomic counters, no locks, no allocation. Each
 * bounded worker writes only its own pair, so recording costs no shared
 * cache line. "Recent" means decayed: every TERN__HIST_DECAY samples the
 * writer halves its counters, so old jobs fade geometrically.
 */
#include "histogram.h"

struct tern__hist tern__pool_wait_hist[TERN__MAX_THREADS + 1];
struct tern__hist tern__pool_run_hist[TERN__MAX_THREADS + 1];

#define SUB_BITS 3
#define SUB (1u << SUB_BITS)

static unsigned bucket_of(uint64_t v)
{
    if (v < SUB)
        return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v); /* floor(log2 v) >= SUB_BITS */
    unsigned idx = SUB + (e - SUB_BITS) * SUB + (unsigned)((v >> (e - SUB_BITS)) & (SUB - 1));
    return idx < TERN__HIST_BUCKETS ? idx : TERN__HIST_BUCKETS - 1;
}

/* The middle of a bucket's range, as the value it stands for. */
static uint64_t value_of(unsigned idx)
{
    if (idx < SUB)
        return idx;
    unsigned e = (idx - SUB) / SUB + SUB_BITS;
    uint64_t m = (idx - SUB) % SUB;
    uint64_t low = (UINT64_C(1) << e) + (m << (e - SUB_BITS));
    return low + (UINT64_C(1) << (e - SUB_BITS)) / 2;
}

/* A single writer needs no read-modify-write (no lock prefix); readers
 * may see a count a moment old either way. */
static uint64_t bump(_Atomic uint64_t *c, unsigned by, bool shared)
{
    if (shared)
        return atomic_fetch_add_explicit(c, by, memory_order_relaxed) + by;
    uint64_t v = atomic_load_explicit(c, memory_order_relaxed) + by;
    atomic_store_explicit(c, v, memory_order_relaxed);
    return v;
}

void tern__hist_record(struct tern__hist *h, uint64_t value, unsigned weight, bool shared)
{
    bump(&h->buckets[bucket_of(value)], weight, shared);
    uint64_t n = bump(&h->count, weight, shared);
    /* The count crossed a multiple of the decay period. */
    if (n % TERN__HIST_DECAY < weight) {
        for (unsigned i = 0; i < TERN__HIST_BUCKETS; i++) {
            uint64_t b = atomic_load_explicit(&h->buckets[i], memory_order_relaxed);
            if (b != 0)
                atomic_fetch_sub_explicit(&h->buckets[i], b / 2, memory_order_relaxed);
        }
    }
}

uint64_t tern__hist_percentile(struct tern__hist *const *hs, unsigned n, double q)
{
    uint64_t sums[TERN__HIST_BUCKETS] = {0};
    uint64_t total = 0;
    for (unsigned k = 0; k < n; k++)
        for (unsigned i = 0; i < TERN__HIST_BUCKETS; i++) {
            uint64_t b = atomic_load_explicit(&hs[k]->buckets[i], memory_order_relaxed);
            sums[i] += b;
            total += b;
        }
    if (total == 0)
        return 0;
    uint64_t rank = (uint64_t)(q * (double)total);
    if (rank >= total)
        rank = total - 1;
    uint64_t seen = 0;
    for (unsigned i = 0; i < TERN__HIST_BUCKETS; i++) {
        seen += sums[i];
        if (seen > rank)
            return value_of(i);
    }
    return value_of(TERN__HIST_BUCKETS - 1);
}
