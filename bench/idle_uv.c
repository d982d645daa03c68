/*
 * Idle turns per second, libuv twin of idle.c: the loop_count shape, an
 * idle handle whose callback counts ticks and stops itself after `ticks`.
 * An active idle handle makes every uv_run iteration poll with a zero
 * timeout, so each tick is one loop iteration.
 *
 * Parameters: ticks=5000000
 * Figures: idle_turns (turns/s).
 */
#include "bench.h"

#include <uv.h>

static unsigned long ticks, target;

static void tick(uv_idle_t *idle)
{
    if (++ticks == target)
        uv_idle_stop(idle);
}

int main(int argc, char **argv)
{
    target = bench_arg(argc, argv, "ticks", 5000000);
    BENCH_CHECK(target > 0, "ticks=0");

    uv_loop_t *loop = uv_default_loop();
    uv_idle_t idle;
    uv_idle_init(loop, &idle);
    uv_idle_start(&idle, tick);

    uint64_t t0 = bench_now_ns();
    uv_run(loop, UV_RUN_DEFAULT);
    uint64_t t1 = bench_now_ns();
    BENCH_CHECK(ticks == target, "ticks %lu of %lu", ticks, target);

    bench_figure("idle_turns", (double)ticks / ((double)(t1 - t0) / 1e9), "turns/s");

    uv_close((uv_handle_t *)&idle, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_loop_close(loop);
    return 0;
}
