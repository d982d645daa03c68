/*
 * tern_loop_stats_read: the loop's counters, read from any thread (each
 * is a relaxed atomic, so the figures are a snapshot, not a consistent
 * set), with the lag percentiles from lag.c.
 */
#include "admit.h"
#include "lag.h"
#include "loop_p.h"
#include "sized.h"

void tern_loop_stats_read(const tern_loop *loop, tern_loop_stats *out, size_t size)
{
    TERN__REQUIRE_LOOP(loop);
    TERN_REQUIRE(out != NULL && size > 0);
    tern_loop *l = (tern_loop *)loop;
    tern_loop_stats full = {
        .turns = atomic_load_explicit(&l->st_turns, memory_order_relaxed),
        .posts = atomic_load_explicit(&l->st_posts, memory_order_relaxed),
        .wake_syscalls = atomic_load_explicit(&l->wake_syscalls, memory_order_relaxed),
        .events = atomic_load_explicit(&l->st_events, memory_order_relaxed),
        .idle_ns = atomic_load_explicit(&l->st_idle_ns, memory_order_relaxed),
        .live_operations = (unsigned)(atomic_load_explicit(&l->ops_count, memory_order_relaxed) +
                                      tern__posts_pending(l)),
        .undelivered = atomic_load_explicit(&l->st_undelivered, memory_order_relaxed),
        .undelivered_peak = atomic_load_explicit(&l->st_undelivered_peak, memory_order_relaxed),
        .busy_ns = atomic_load_explicit(&l->st_busy_ns, memory_order_relaxed),
    };
    tern__lag_read(loop, &full.lag_p50_ns, &full.lag_p99_ns, &full.lag_max_ns, &full.lag_count);
    tern__copy_sized(out, size, &full, sizeof full);
}
