/*
 * The per-worker figures' reader (include/tern/figures.h): which index
 * names which worker, and a relaxed snapshot of its figures. The writers
 * are the workers themselves (worker.c); nothing here takes a lock.
 */
#include <errno.h>
#include <string.h>

#include "bounded.h"
#include "sized.h"

unsigned tern_pool_worker_count(void)
{
    /* The overflow slots first: a moment apart, a new pool's reads as none. */
    unsigned overflow =
        atomic_load_explicit(&tern__pool_shape.overflow_slots, memory_order_relaxed);
    unsigned threads = atomic_load_explicit(&tern__pool_shape.threads, memory_order_relaxed);
    return threads == 0 ? 0 : threads + overflow;
}

int tern_pool_worker_stats_read(unsigned index, tern_pool_worker_stats *out, size_t size)
{
    TERN_REQUIRE(out != NULL && size > 0);
    tern_pool_worker_stats full;
    memset(&full, 0, sizeof full);
    unsigned threads = atomic_load_explicit(&tern__pool_shape.threads, memory_order_relaxed);
    if (threads == 0 || index >= tern_pool_worker_count()) {
        tern__copy_sized(out, size, &full, sizeof full);
        return -ENOENT;
    }
    /* Bounded workers use slots 0..threads-1, overflow workers from TERN__MAX_THREADS. */
    bool overflow = index >= threads;
    full.kind = overflow ? TERN_POOL_WORKER_OVERFLOW : TERN_POOL_WORKER_BOUNDED;
    full.slot = overflow ? index - threads : index;
#ifdef TERN_FIGURES
    const struct tern__worker_figures *f =
        &tern__pool_workers[overflow ? TERN__MAX_THREADS + full.slot : full.slot];
#define LOAD(x) atomic_load_explicit(&f->x, memory_order_relaxed)
    full.jobs = LOAD(jobs);
    full.parks = LOAD(parks);
    full.wakes = LOAD(wakes);
    full.busy_ns = (uint64_t)((double)LOAD(busy_ticks) / tern__ticks_per_ns());
    for (unsigned b = 0; b < TERN_POOL_WAKE_BUCKETS; b++)
        full.wake_latency[b] = LOAD(wake_hist[b]);
#undef LOAD
    tern__copy_sized(out, size, &full, sizeof full);
    return 0;
#else
    tern__copy_sized(out, size, &full, sizeof full);
    return -ENOTSUP;
#endif
}
