/*
 * Waiting: the CPU a loop thread spends while it only waits — with nothing
 * in flight, and with one long job holding a pool thread (a connection's
 * lifetime). Pool work in flight with nothing ready must cost no more
 * than an idle loop; spinning pays only for short bounded round
 * trips, never for long jobs. Twin: waiting_uv.c (uv_queue_work holding a
 * pool thread, the same 1 ms timer).
 *
 * The loop runs a repeating 1 ms timer for `ms` milliseconds; the figure
 * is the loop thread's own CPU time (CLOCK_THREAD_CPUTIME_ID) per second
 * of wall time. The long job blocks on a pipe until the timer phase ends,
 * so it costs its worker nothing.
 *
 * Parameters: ms=2000 mode=none|long|pool
 * Figures: waiting_cpu_none or waiting_cpu_long (µs of loop CPU per s);
 * mode=pool (a diagnostic, not in bench/run) starts the pool and submits
 * nothing, so its figure, waiting_cpu_pool, separates the cost of the
 * pool's threads existing from that of a job in flight.
 */
#include "bench.h"

#include <stdbool.h>

#include <tern.h>

static unsigned long ticks, target;
static int hold[2] = {-1, -1};

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *held(tern_job *job, void *arg)
{
    (void)job, (void)arg;
    char c;
    ssize_t r = read(hold[0], &c, 1); /* blocks until the timer phase ends */
    (void)r;
    return NULL;
}

static void held_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)result, (void)arg;
    BENCH_CHECK(status == 0, "long job: %s", tern_strerror(status));
}

static void tick(tern_loop *loop, tern_id id, void *arg)
{
    (void)arg;
    if (++ticks == target) {
        tern_timer_stop(loop, id);
        if (hold[1] >= 0) {
            ssize_t w = write(hold[1], "x", 1);
            (void)w;
        }
    }
}

int main(int argc, char **argv)
{
    unsigned long ms = bench_arg(argc, argv, "ms", 2000);
    const char *mode = bench_arg_str(argc, argv, "mode", "none");
    bool with_long = strcmp(mode, "long") == 0;
    bool with_pool = strcmp(mode, "pool") == 0;
    target = ms;
    BENCH_CHECK(target > 0, "ms=0");

    tern_loop *loop;
    int rc = tern_loop_new(&loop, NULL);
    BENCH_CHECK(rc == 0, "tern_loop_new: %s", tern_strerror(rc));
    if (with_pool)
        BENCH_CHECK(tern_pool_start(NULL) == 0, "tern_pool_start");
    if (with_long) {
        BENCH_CHECK(pipe(hold) == 0, "pipe");
        rc = tern_submit(loop, TERN_LONG, held, held_done, NULL, NULL);
        BENCH_CHECK(rc == 0, "tern_submit: %s", tern_strerror(rc));
    }
    rc = tern_timer_start(loop, 1000000, 1000000, tick, NULL, NULL);
    BENCH_CHECK(rc == 0, "tern_timer_start: %s", tern_strerror(rc));

    uint64_t c0 = thread_cpu_ns(), t0 = bench_now_ns();
    tern_loop_run(loop);
    uint64_t c1 = thread_cpu_ns(), t1 = bench_now_ns();
    BENCH_CHECK(ticks == target, "ticks %lu of %lu", ticks, target);

    bench_figure(with_long   ? "waiting_cpu_long"
                 : with_pool ? "waiting_cpu_pool"
                             : "waiting_cpu_none",
                 (double)(c1 - c0) / 1e3 / ((double)(t1 - t0) / 1e9), "us/s");
    tern_loop_free(loop);
    if (with_long) {
        close(hold[0]);
        close(hold[1]);
    }
    return 0;
}
