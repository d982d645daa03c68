/*
 * Timers, libuv twin of timers.c: uv_timer_t handles in one array (the
 * caller owns libuv handles), armed with uv_timer_start, then uv_run.
 *
 * Parameters: timers=1000000 mode=spread|due
 * Figures: as timers.c.
 *
 * The handles are not closed afterwards: closing ten million handles would
 * cost seconds that neither twin measures, and the process exits anyway.
 */
#include "bench.h"

#include <uv.h>

static unsigned long fired, total;

static void on_timer(uv_timer_t *t)
{
    (void)t;
    fired++;
}

static void count_name(char *buf, size_t len, unsigned long n)
{
    if (n % 1000000 == 0)
        snprintf(buf, len, "%lum", n / 1000000);
    else if (n % 1000 == 0)
        snprintf(buf, len, "%luk", n / 1000);
    else
        snprintf(buf, len, "%lu", n);
}

int main(int argc, char **argv)
{
    total = bench_arg(argc, argv, "timers", 1000000);
    int due = strcmp(bench_arg_str(argc, argv, "mode", "spread"), "due") == 0;

    uv_loop_t *loop = uv_default_loop();
    uv_timer_t *timers = malloc(total * sizeof *timers);
    BENCH_CHECK(timers != NULL, "malloc");

    uint64_t t0 = bench_now_ns();
    for (unsigned long i = 0; i < total; i++) {
        uint64_t ms = due ? 1 : 1 + i / 1000;
        int rc = uv_timer_init(loop, &timers[i]);
        BENCH_CHECK(rc == 0, "uv_timer_init: %s", uv_strerror(rc));
        rc = uv_timer_start(&timers[i], on_timer, ms, 0);
        BENCH_CHECK(rc == 0, "uv_timer_start #%lu: %s", i, uv_strerror(rc));
    }
    uint64_t t1 = bench_now_ns();
    if (due) {
        struct timespec ts = {0, 5 * 1000000};
        nanosleep(&ts, NULL);
    }
    double cpu1 = bench_cpu_s();
    uint64_t t2 = bench_now_ns();
    uv_run(loop, UV_RUN_DEFAULT);
    uint64_t t3 = bench_now_ns();
    double cpu2 = bench_cpu_s();
    BENCH_CHECK(fired == total, "fired %lu of %lu", fired, total);

    char n[32], name[96];
    count_name(n, sizeof n, total);
    const char *prefix = due ? "timers_due_" : "timers_";
    snprintf(name, sizeof name, "%s%s_arm", prefix, n);
    bench_figure(name, (double)(t1 - t0) / 1e6, "ms");
    if (due) {
        snprintf(name, sizeof name, "%s%s_dispatch", prefix, n);
        bench_figure(name, (double)(t3 - t2) / 1e6, "ms");
    }
    else {
        /* From the first arm, not from the run's start: a side that arms
         * faster waits longer for the same deadlines. */
        snprintf(name, sizeof name, "%s%s_timeline", prefix, n);
        bench_figure(name, (double)(t3 - t0) / 1e6, "ms");
        snprintf(name, sizeof name, "%s%s_run_cpu", prefix, n);
        bench_figure(name, (cpu2 - cpu1) * 1e3, "ms");
    }
    snprintf(name, sizeof name, "%s%s_rss", prefix, n);
    bench_figure(name, bench_peak_rss_bytes() / (1024.0 * 1024.0), "MiB");
    return 0;
}
