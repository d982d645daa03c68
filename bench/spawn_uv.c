/*
 * libuv twin of spawn.c: uv_spawn of /bin/true, the same two shapes.
 * mode=rate: `inflight` children at a time until `procs` are reaped
 * (spawn_rate, procs/s). mode=big: `mib` MiB resident, then `procs`
 * spawns one after another, each uv_spawn call timed (spawn_big_p50,
 * spawn_big_p99, us).
 */
#include "bench.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

static unsigned long target, started, reaped, inflight;
static bool respawn;

static void spawn_next(uv_loop_t *loop);

static void on_close(uv_handle_t *h)
{
    free(h);
}

static void on_exit_cb(uv_process_t *p, int64_t status, int sig)
{
    BENCH_CHECK(status == 0 && sig == 0, "child: status %lld sig %d", (long long)status, sig);
    reaped++;
    uv_close((uv_handle_t *)p, on_close);
    if (respawn && started < target)
        spawn_next(p->loop);
}

static void spawn_next(uv_loop_t *loop)
{
    char *args[] = {"/bin/true", NULL};
    uv_process_options_t o;
    memset(&o, 0, sizeof(o));
    o.file = "/bin/true";
    o.args = args;
    o.exit_cb = on_exit_cb;
    uv_process_t *p = malloc(sizeof(*p));
    BENCH_CHECK(p != NULL, "malloc");
    int rc = uv_spawn(loop, p, &o);
    BENCH_CHECK(rc == 0, "uv_spawn: %s", uv_strerror(rc));
    started++;
}

int main(int argc, char **argv)
{
    const char *mode = bench_arg_str(argc, argv, "mode", "rate");
    target = bench_arg(argc, argv, "procs", 2000);
    inflight = bench_arg(argc, argv, "inflight", 8);
    unsigned long mib = bench_arg(argc, argv, "mib", 1024);
    BENCH_CHECK(target > 0 && inflight > 0, "procs and inflight must be > 0");
    uv_loop_t *loop = uv_default_loop();

    if (strcmp(mode, "rate") == 0) {
        respawn = true;
        uint64_t t0 = bench_now_ns();
        for (unsigned long i = 0; i < inflight && started < target; i++)
            spawn_next(loop);
        uv_run(loop, UV_RUN_DEFAULT);
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
            uv_run(loop, UV_RUN_DEFAULT);
        }
        bench_sort(lat, target);
        bench_figure("spawn_big_p50", (double)bench_quantile(lat, target, 0.5) / 1e3, "us");
        bench_figure("spawn_big_p99", (double)bench_quantile(lat, target, 0.99) / 1e3, "us");
        free(lat);
        free(big);
    }
    uv_loop_close(loop);
    return 0;
}
