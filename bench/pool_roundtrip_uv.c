/*
 * Pool round trip, libuv twin of pool_roundtrip.c: one uv_queue_work
 * request in flight; each after-work callback records the time since its
 * submission and queues the next.
 *
 * Parameters: trips=100000 warmup=1000 threads=4
 * Figures: roundtrip_p50, roundtrip_p99, roundtrip_p999, roundtrip_cpu,
 * roundtrip_wall (µs).
 */
#include "bench.h"

#include <uv.h>

static unsigned long trips, warmup, done_count;
static uint64_t *samples;
static uint64_t submitted_at;
static double cpu0;
static uint64_t wall0;

static void empty_work(uv_work_t *req)
{
    (void)req;
}

static void on_done(uv_work_t *req, int status);

static void submit_one(uv_loop_t *loop, uv_work_t *req)
{
    submitted_at = bench_now_ns();
    int rc = uv_queue_work(loop, req, empty_work, on_done);
    BENCH_CHECK(rc == 0, "uv_queue_work: %s", uv_strerror(rc));
}

static void on_done(uv_work_t *req, int status)
{
    uint64_t now = bench_now_ns();
    BENCH_CHECK(status == 0, "job status %s", uv_strerror(status));
    if (done_count >= warmup)
        samples[done_count - warmup] = now - submitted_at;
    done_count++;
    if (done_count == warmup) {
        cpu0 = bench_cpu_s();
        wall0 = bench_now_ns();
    }
    if (done_count < warmup + trips)
        submit_one(req->loop, req);
}

int main(int argc, char **argv)
{
    trips = bench_arg(argc, argv, "trips", 100000);
    warmup = bench_arg(argc, argv, "warmup", 1000);
    unsigned long threads = bench_arg(argc, argv, "threads", 4);
    samples = calloc(trips, sizeof *samples);
    BENCH_CHECK(samples != NULL && warmup > 0, "calloc or warmup=0");

    char size[32];
    snprintf(size, sizeof size, "%lu", threads);
    bench_setenv("UV_THREADPOOL_SIZE", size);

    uv_loop_t *loop = uv_default_loop();
    uv_work_t req;

    submit_one(loop, &req);
    uv_run(loop, UV_RUN_DEFAULT);
    double cpu1 = bench_cpu_s();
    uint64_t wall1 = bench_now_ns();
    BENCH_CHECK(done_count == warmup + trips, "done %lu", done_count);

    bench_sort(samples, trips);
    bench_figure("roundtrip_p50", (double)bench_quantile(samples, trips, 0.50) / 1e3, "us");
    bench_figure("roundtrip_p99", (double)bench_quantile(samples, trips, 0.99) / 1e3, "us");
    bench_figure("roundtrip_p999", (double)bench_quantile(samples, trips, 0.999) / 1e3, "us");
    bench_figure("roundtrip_cpu", (cpu1 - cpu0) / (double)trips * 1e6, "us");
    bench_figure("roundtrip_wall", (double)(wall1 - wall0) / (double)trips / 1e3, "us");

    uv_loop_close(loop);
    free(samples);
    return 0;
}
