/*
 * Idle turns per second: how fast an otherwise empty loop turns over.
 * Twin: idle_uv.c (libuv's loop_count shape: an idle handle whose callback
 * counts ticks and stops itself after `ticks`).
 *
 * tern has no idle handle. The fair equivalent is a callback that re-defers
 * itself with tern_defer(): a defer made during step 2 runs in the next
 * turn's step 2, so each tick is one full turn of the loop driving itself,
 * exactly as each libuv idle callback is one uv_run iteration. (Pumping
 * tern_loop_run_once(loop, 0) from outside would add a call boundary per
 * turn that libuv's shape does not have.)
 *
 * Parameters: ticks=5000000
 * Figures: idle_turns (turns/s); idle_turns_per_tick (turns/tick), the
 * loop's own count of turns (tern_loop_stats) over the ticks. The
 * comparison is fair only if each tick is exactly one turn, as each libuv
 * tick is one iteration: if the loop ran two ticks in one turn, turns/s
 * would be overstated, if a tick took two turns, understated. So the
 * benchmark fails (exit 1, no turns/s figure) unless the loop counted
 * exactly as many turns as ticks.
 */
#include "bench.h"

#include <tern.h>

static unsigned long ticks, target;

static void tick(tern_loop *loop, void *arg)
{
    if (++ticks < target) {
        int rc = tern_defer(loop, tick, arg);
        BENCH_CHECK(rc == 0, "tern_defer: %s", tern_strerror(rc));
    }
}

int main(int argc, char **argv)
{
    target = bench_arg(argc, argv, "ticks", 5000000);
    BENCH_CHECK(target > 0, "ticks=0");

    tern_loop *loop;
    int rc = tern_loop_new(&loop, NULL);
    BENCH_CHECK(rc == 0, "tern_loop_new: %s", tern_strerror(rc));
    rc = tern_defer(loop, tick, NULL);
    BENCH_CHECK(rc == 0, "tern_defer: %s", tern_strerror(rc));

    tern_loop_stats before, after;
    tern_loop_stats_get(loop, &before);
    uint64_t t0 = bench_now_ns();
    tern_loop_run(loop);
    uint64_t t1 = bench_now_ns();
    tern_loop_stats_get(loop, &after);
    BENCH_CHECK(ticks == target, "ticks %lu of %lu", ticks, target);

    uint64_t turns = after.turns - before.turns;
    bench_figure("idle_turns_per_tick", (double)turns / (double)ticks, "turns/tick");
    BENCH_CHECK(turns == ticks,
                "one turn per tick does not hold: %llu turns for %lu ticks",
                (unsigned long long)turns, ticks);
    bench_figure("idle_turns", (double)ticks / ((double)(t1 - t0) / 1e9), "turns/s");

    tern_loop_free(loop);
    return 0;
}
