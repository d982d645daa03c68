/*
 * Per-worker figures of the pool's bounded class: what each worker ran,
 * how often it parked and was woken, how long it was busy, and how long
 * a wake took to reach it. Included by tern.h.
 *
 * The figures are written by each worker alone, on its own cache lines,
 * with no lock and no locked instruction, and read by any thread with
 * relaxed loads: a snapshot, each field a moment apart. A build with
 * -Dfigures=false compiles the writes out; the calls stay and say so
 * (docs/pool.md, "Per-worker figures").
 */
#ifndef TERN_FIGURES_H
#define TERN_FIGURES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Buckets of the wake-latency histogram: bucket i counts latencies of
 * [2^i, 2^(i+1)) ns (bucket 0 also 0 ns); the last bucket counts the rest. */
#define TERN_POOL_WAKE_BUCKETS 32

/* Which kind of worker an index names. */
enum { TERN_POOL_WORKER_BOUNDED = 0, TERN_POOL_WORKER_OVERFLOW = 1 };

typedef struct tern_pool_worker_stats {
    unsigned kind; /* TERN_POOL_WORKER_BOUNDED or TERN_POOL_WORKER_OVERFLOW */
    unsigned slot; /* its index among workers of its kind */
    /*
     * Queue entries run: a job, one step of a request of several steps,
     * or a name lookup (counted by the worker that took it off the queue);
     * tombstones skipped are not counted.
     */
    uint64_t jobs;
    uint64_t parks; /* times it parked (slept on the pool's condition) */
    uint64_t wakes; /* parks ended by a submitter's wake signal */
    /* Time spent running what it took off the queue (a job's work
     * function, a lookup, a request's step) and its own steps between
     * them: from finding work to running dry, added run by run. */
    uint64_t busy_ns;
    /* Wake latency, from the wake signal to the worker running again. */
    uint64_t wake_latency[TERN_POOL_WAKE_BUCKETS];
    /* New fields go at the end (docs/api.md, "How the ABI grows"). */
} tern_pool_worker_stats;

/*
 * tern_pool_worker_count: how many worker indexes tern_pool_worker_stats_read
 * answers for: the running pool's bounded workers (indexes 0..threads-1),
 * then every overflow worker slot used since the pool started (indexes
 * threads.., in slot order; a slot is reused by a later overflow worker
 * and its figures carry on). 0 when no pool runs. Never blocks.
 * Threads: any thread.
 */
TERN_EXTERN unsigned tern_pool_worker_count(void);

/*
 * tern_pool_worker_stats_read: worker index's figures since the pool
 * started, read without a lock (relaxed loads; fields a moment apart).
 * Fills the first size bytes of out, as tern_pool_stats_read. Callers
 * use tern_pool_worker_stats_get.
 * Requires: out != NULL; size > 0.
 * Returns: 0; -ENOENT if index >= tern_pool_worker_count() (out is
 *          zeroed); -ENOTSUP when the library was built with
 *          -Dfigures=false (out is zeroed but for kind and slot).
 * Threads: any thread.
 */
TERN_EXTERN int tern_pool_worker_stats_read(unsigned index, tern_pool_worker_stats *out,
                                            size_t size);

/* tern_pool_worker_stats_get: tern_pool_worker_stats_read with this
 * header's struct size. Requires: out != NULL. Threads: any thread. */
TERN_INLINE int tern_pool_worker_stats_get(unsigned index, tern_pool_worker_stats *out)
{
    return tern_pool_worker_stats_read(index, out, sizeof *out);
}

#ifdef __cplusplus
}
#endif

#endif /* TERN_FIGURES_H */
