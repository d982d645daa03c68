/*
 * Pool round trip: one job in flight at a time; each done records the
 * time since its submission and submits the next job.
 * Twin: pool_roundtrip_uv.c.
 *
 * Parameters: trips=100000 warmup=1000 threads=4
 * Figures: roundtrip_p50, roundtrip_p99, roundtrip_p999 (µs, submit to
 * done), roundtrip_cpu (CPU µs per round trip, every thread of the
 * process, so a runtime that spins to cut latency pays for it here).
 */
#include "bench.h"

#include <tern.h>

static unsigned long trips, warmup, done_count;
static uint64_t *samples;
static uint64_t submitted_at;
static double cpu0;
static uint64_t wall0;

static void *empty_work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

static void on_done(tern_loop *loop, tern_id id, int status, void *result, void *arg);

static void submit_one(tern_loop *loop)
{
    submitted_at = bench_now_ns();
    int rc = tern_submit(loop, TERN_BOUNDED, empty_work, on_done, NULL, NULL);
    BENCH_CHECK(rc == 0, "tern_submit: %s", tern_strerror(rc));
}

static void on_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    uint64_t now = bench_now_ns();
    (void)id, (void)result, (void)arg;
    BENCH_CHECK(status == 0, "job status %s", tern_strerror(status));
    if (done_count >= warmup)
        samples[done_count - warmup] = now - submitted_at;
    done_count++;
    if (done_count == warmup) {
        cpu0 = bench_cpu_s();
        wall0 = bench_now_ns();
    }
    if (done_count < warmup + trips)
        submit_one(loop);
}

int main(int argc, char **argv)
{
    trips = bench_arg(argc, argv, "trips", 100000);
    warmup = bench_arg(argc, argv, "warmup", 1000);
    unsigned long threads = bench_arg(argc, argv, "threads", 4);
    samples = calloc(trips, sizeof *samples);
    BENCH_CHECK(samples != NULL && warmup > 0, "calloc or warmup=0");

    tern_pool_config cfg;
    tern_pool_config_init(&cfg);
    cfg.threads = (unsigned)threads;
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.pool = &cfg;

    tern_loop *loop;
    int rc = tern_loop_new(&loop, &opts);
    BENCH_CHECK(rc == 0, "tern_loop_new: %s", tern_strerror(rc));

    submit_one(loop);
    tern_loop_run(loop);
    double cpu1 = bench_cpu_s();
    uint64_t wall1 = bench_now_ns();
    BENCH_CHECK(done_count == warmup + trips, "done %lu", done_count);

    bench_sort(samples, trips);
    bench_figure("roundtrip_p50", (double)bench_quantile(samples, trips, 0.50) / 1e3, "us");
    bench_figure("roundtrip_p99", (double)bench_quantile(samples, trips, 0.99) / 1e3, "us");
    bench_figure("roundtrip_p999", (double)bench_quantile(samples, trips, 0.999) / 1e3, "us");
    bench_figure("roundtrip_cpu", (cpu1 - cpu0) / (double)trips * 1e6, "us");
    bench_figure("roundtrip_wall", (double)(wall1 - wall0) / (double)trips / 1e3, "us");

    tern_loop_free(loop);
    tern_pool_shutdown(TERN_POOL_DRAIN, 1000000000u);
    free(samples);
    return 0;
}
