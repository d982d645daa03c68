/*
 * Loop utilisation and lag in tern_loop_stats (tern.h): busy_ns counts the
 * time a run spends in turns without blocking, idle_ns the time blocked,
 * neither the time outside a run; lag_* say how late deadlines fired.
 */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <time.h>

#include "tern.h"

#define MS UINT64_C(1000000)

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void burn(uint64_t ns)
{
    uint64_t until = now_ns() + ns;
    while (now_ns() < until) {
    }
}

static void burn_50ms(tern_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
    burn(50 * MS);
}

static void on_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    (*(int *)arg)++;
}

static tern_loop_stats stats(tern_loop *loop)
{
    tern_loop_stats st;
    tern_loop_stats_get(loop, &st);
    return st;
}

Test(utilisation, a_callback_that_works_is_busy_a_timer_wait_is_idle)
{
    /*
     * The clock behind the statistics may be ticks scaled to ns: allow 10%.
     * The burn is 50 ms of wall time inside a turn, so busy is at least
     * that, and no time is counted both busy and idle, so together they
     * fit in the run's wall time: in every attempt. The wait for the
     * timer counts idle time, but only if the loop gets to wait: a thread
     * preempted between the burn and the wait (a loaded machine) books
     * that time busy, and one preempted past the deadline never waits at
     * all (idle once measured 36 ms, once 0, of the 100 ms left). So the
     * run is tried up to five times until one of them waited.
     */
    bool waited = false;
    for (int attempt = 0; attempt < 5 && !waited; attempt++) {
        tern_loop *loop = NULL;
        cr_assert_eq(tern_loop_new(&loop, NULL), 0);
        int fired = 0;
        cr_assert_eq(tern_post(loop, burn_50ms, NULL), 0);
        cr_assert_eq(tern_timer_start(loop, 150 * MS, 0, on_timer, &fired, NULL), 0);
        uint64_t t0 = now_ns();
        cr_assert_eq(tern_loop_run(loop), 0);
        uint64_t wall = now_ns() - t0;
        cr_assert_eq(fired, 1);
        tern_loop_stats st = stats(loop);
        cr_assert_geq(st.busy_ns, 45 * MS, "busy %llu ns", (unsigned long long)st.busy_ns);
        cr_assert_leq((st.busy_ns + st.idle_ns) * 10, wall * 11,
                      "busy %llu + idle %llu ns of a %llu ns run", (unsigned long long)st.busy_ns,
                      (unsigned long long)st.idle_ns, (unsigned long long)wall);
        waited = st.idle_ns > 0;
        tern_loop_free(loop);
    }
    cr_assert(waited, "no wait for the timer counted idle time in five runs");
}

Test(utilisation, time_between_runs_is_not_counted)
{
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    for (int i = 0; i < 3; i++) {
        cr_assert_geq(tern_loop_run_once(loop, 0), 0);
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL); /* the host's own time, 600 ms in all */
    }
    tern_loop_stats st = stats(loop);
    cr_assert_lt(st.busy_ns + st.idle_ns, 400 * MS, "busy %llu idle %llu ns",
                 (unsigned long long)st.busy_ns, (unsigned long long)st.idle_ns);
    tern_loop_free(loop);
}

Test(utilisation, a_deadline_held_up_by_a_callback_shows_as_lag)
{
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    tern_loop_stats st = stats(loop);
    cr_assert_eq(st.lag_count, 0u);
    cr_assert_eq(st.lag_max_ns, 0u);
    int fired = 0;
    /* Due in 1 ms, but the post in front of it holds the loop for 50 ms. */
    cr_assert_eq(tern_timer_start(loop, 1 * MS, 0, on_timer, &fired, NULL), 0);
    cr_assert_eq(tern_post(loop, burn_50ms, NULL), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(fired, 1);
    st = stats(loop);
    cr_assert_eq(st.lag_count, 1u);
    cr_assert_geq(st.lag_max_ns, 40 * MS, "max lag %llu ns", (unsigned long long)st.lag_max_ns);
    cr_assert_leq(st.lag_p50_ns, st.lag_max_ns);
    cr_assert_leq(st.lag_p99_ns, st.lag_max_ns);
    /* One sample: both percentiles are its bucket, within a factor of two. */
    cr_assert_geq(st.lag_p99_ns, st.lag_max_ns / 2);
    cr_assert_eq(st.lag_p50_ns, st.lag_p99_ns);
    tern_loop_free(loop);
}

Test(utilisation, many_timely_deadlines_keep_the_median_low)
{
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    int fired = 0;
    for (int i = 0; i < 100; i++)
        cr_assert_eq(tern_timer_start(loop, (uint64_t)(i + 1) * 100000, 0, on_timer, &fired, NULL),
                     0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(fired, 100);
    tern_loop_stats st = stats(loop);
    cr_assert_eq(st.lag_count, 100u);
    cr_assert_leq(st.lag_p50_ns, st.lag_p99_ns);
    cr_assert_leq(st.lag_p99_ns, st.lag_max_ns);
    tern_loop_free(loop);
}
