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
 * Figures: idle_turns (turns/s). It also reports on stderr the turns the
 * loop counted per tick, which must be 1 for the comparison to hold.
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

    bench_figure("idle_turns", (double)ticks / ((double)(t1 - t0) / 1e9), "turns/s");
    fprintf(stderr, "turns per tick: %.3f\n",
            (double)(after.turns - before.turns) / (double)ticks);

    tern_loop_free(loop);
    return 0;
}
