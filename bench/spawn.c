/*
 * Child processes spawned and reaped per second, and how long a spawn
 * takes in a large parent. Twin: spawn_uv.c (uv_spawn, same shapes).
 *
 * mode=rate: keep `inflight` children of /bin/true running; each exit
 * callback spawns the next until `procs` have been reaped.
 * Figure: spawn_rate (procs/s).
 *
 * mode=big: first make `mib` MiB of this process resident (written), then
 * spawn /bin/true `procs` times one after another, timing each spawn call
 * (the call returns once the child runs the program, so this is the
 * launch's cost with a large parent: no page tables are copied).
 * Figures: spawn_big_p50, spawn_big_p99 (us).
 *
 * Parameters: mode=rate|big procs=2000 inflight=8 mib=1024
 */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

#include <tern.h>

static unsigned long target, started, reaped, inflight;

static void spawn_next(tern_loop *loop);

static void on_exit_rate(tern_loop *loop, tern_id id, int status, int code, int sig, void *arg)
{
    (void)id;
    (void)arg;
    BENCH_CHECK(status == 0 && code == 0 && sig == 0, "child: status %d code %d sig %d", status,
                code, sig);
    reaped++;
    if (started < target)
        spawn_next(loop);
}

static void spawn_next(tern_loop *loop)
{
    tern_process_options o;
    tern_process_options_init(&o);
    o.file = "/bin/true";
    int rc = tern_process_spawn(loop, &o, on_exit_rate, NULL, NULL);
    BENCH_CHECK(rc == 0, "tern_process_spawn: %s", tern_strerror(rc));
    started++;
}

int main(int argc, char **argv)
{
    const char *mode = bench_arg_str(argc, argv, "mode", "rate");
    target = bench_arg(argc, argv, "procs", 2000);
    inflight = bench_arg(argc, argv, "inflight", 8);
    unsigned long mib = bench_arg(argc, argv, "mib", 1024);
    BENCH_CHECK(target > 0 && inflight > 0, "procs and inflight must be > 0");

    tern_loop *loop;
    int rc = tern_loop_new(&loop, NULL);
    BENCH_CHECK(rc == 0, "tern_loop_new: %s", tern_strerror(rc));

    if (strcmp(mode, "rate") == 0) {
        uint64_t t0 = bench_now_ns();
        for (unsigned long i = 0; i < inflight && started < target; i++)
            spawn_next(loop);
        tern_loop_run(loop);
        uint64_t t1 = bench_now_ns();
        BENCH_CHECK(reaped == target, "reaped %lu of %lu", reaped, target);
        bench_figure("spawn_rate", (double)target / ((double)(t1 - t0) / 1e9), "procs/s");
    } else {
        size_t bytes = (size_t)mib << 20;
        char *big = malloc(bytes);
        BENCH_CHECK(big != NULL, "cannot allocate %lu MiB", mib);
        memset(big, 1, bytes);
        uint64_t *lat = calloc(target, sizeof(*lat));
        BENCH_CHECK(lat != NULL, "calloc");
        for (unsigned long i = 0; i < target; i++) {
            uint64_t t0 = bench_now_ns();
            spawn_next(loop);
            lat[i] = bench_now_ns() - t0;
            unsigned long was = started;
            started = target; /* so the exit callback spawns no more */
            tern_loop_run(loop);
            started = was;
        }
        bench_sort(lat, target);
        bench_figure("spawn_big_p50", (double)bench_quantile(lat, target, 0.5) / 1e3, "us");
        bench_figure("spawn_big_p99", (double)bench_quantile(lat, target, 0.99) / 1e3, "us");
        free(lat);
        free(big);
    }
    tern_loop_free(loop);
    return 0;
}
