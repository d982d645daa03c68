/*
 * Waiting, libuv twin of waiting.c: a repeating 1 ms timer for `ms`
 * milliseconds, with nothing else or with one uv_queue_work job that
 * blocks on a pipe until the timer phase ends; the figure is the loop
 * thread's CPU time per second of wall time.
 *
 * Parameters: ms=2000 mode=none|long
 * Figures: waiting_cpu_none or waiting_cpu_long (µs of loop CPU per s).
 */
#include "bench.h"

#include <stdbool.h>

#include <uv.h>

static unsigned long ticks, target;
static int hold[2] = {-1, -1};

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void held(uv_work_t *req)
{
    (void)req;
    char c;
    ssize_t r = read(hold[0], &c, 1);
    (void)r;
}

static void held_done(uv_work_t *req, int status)
{
    (void)req;
    BENCH_CHECK(status == 0, "long job: %s", uv_strerror(status));
}

static void tick(uv_timer_t *timer)
{
    if (++ticks == target) {
        uv_timer_stop(timer);
        if (hold[1] >= 0) {
            ssize_t w = write(hold[1], "x", 1);
            (void)w;
        }
    }
}

int main(int argc, char **argv)
{
    unsigned long ms = bench_arg(argc, argv, "ms", 2000);
    bool with_long = strcmp(bench_arg_str(argc, argv, "mode", "none"), "long") == 0;
    target = ms;
    BENCH_CHECK(target > 0, "ms=0");

    uv_loop_t *loop = uv_default_loop();
    uv_work_t work;
    if (with_long) {
        BENCH_CHECK(pipe(hold) == 0, "pipe");
        int rc = uv_queue_work(loop, &work, held, held_done);
        BENCH_CHECK(rc == 0, "uv_queue_work: %s", uv_strerror(rc));
    }
    uv_timer_t timer;
    uv_timer_init(loop, &timer);
    uv_timer_start(&timer, tick, 1, 1);

    uint64_t c0 = thread_cpu_ns(), t0 = bench_now_ns();
    uv_run(loop, UV_RUN_DEFAULT);
    uint64_t c1 = thread_cpu_ns(), t1 = bench_now_ns();
    BENCH_CHECK(ticks == target, "ticks %lu of %lu", ticks, target);

    bench_figure(with_long ? "waiting_cpu_long" : "waiting_cpu_none",
                 (double)(c1 - c0) / 1e3 / ((double)(t1 - t0) / 1e9), "us/s");
    uv_close((uv_handle_t *)&timer, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_loop_close(loop);
    if (with_long) {
        close(hold[0]);
        close(hold[1]);
    }
    return 0;
}
