/*
 * Timers: arm `timers` one-shot timers, then run the loop until all fired.
 * Twin: timers_uv.c. Run each shape in its own process: the peak RSS
 * figure is the process's high-water mark.
 *
 * Parameters: timers=1000000 mode=spread|due
 *   spread  timer i times out after 1 + i/1000 ms (libuv's million_timers
 *           shape: a thousand share each millisecond). Figures:
 *           timers_<N>_arm (ms to arm all), timers_<N>_timeline (wall ms
 *           from the first arm until the last fired: 1 + (N-1)/1000 ms when
 *           every timer fires on time, more when dispatch falls behind),
 *           timers_<N>_run_cpu (CPU ms from the last arm until the last
 *           fired), timers_<N>_rss (MiB).
 *   due     every timer times out after 1 ms and the benchmark waits until
 *           all are overdue before running the loop. Figures:
 *           timers_due_<N>_arm, timers_due_<N>_dispatch (ms from the start
 *           of the run until the last callback returned), timers_due_<N>_rss.
 * <N> is the count in a short form (1m, 10m, or the plain number).
 */
#include "bench.h"

#include <tern.h>

static unsigned long fired, total;

static void on_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id, (void)arg;
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

    /* Every armed timer is a live operation; max_operations defaults to
     * 65536, so raise it to hold them all. */
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.max_operations = (unsigned)(total + 1024);
    tern_loop *loop;
    int rc = tern_loop_new(&loop, &opts);
    BENCH_CHECK(rc == 0, "tern_loop_new: %s", tern_strerror(rc));

    uint64_t t0 = bench_now_ns();
    for (unsigned long i = 0; i < total; i++) {
        uint64_t ms = due ? 1 : 1 + i / 1000;
        rc = tern_timer_start(loop, ms * 1000000u, 0, on_timer, NULL, NULL);
        BENCH_CHECK(rc == 0, "tern_timer_start #%lu: %s", i, tern_strerror(rc));
    }
    uint64_t t1 = bench_now_ns();
    if (due) {
        /* Let every deadline pass (the last was armed 1 ms before t1 at the
         * latest), so the run measures dispatch, not waiting. */
        struct timespec ts = {0, 5 * 1000000};
        nanosleep(&ts, NULL);
    }
    double cpu1 = bench_cpu_s();
    uint64_t t2 = bench_now_ns();
    tern_loop_run(loop);
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

    tern_loop_free(loop);
    return 0;
}
