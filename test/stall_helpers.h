/*
 * The stalled-job set-up the watchdog tests share (docs/pool.md, "Stalled
 * work"): a bounded job that blocks on a pipe the test holds (it ends when
 * the test writes one byte for it, or closes the pipe, never on a sleep),
 * and a pool started with the watchdog set.
 */
#ifndef TERN_TEST_STALL_HELPERS_H
#define TERN_TEST_STALL_HELPERS_H

#include "pool_helpers.h"

/* The stall bound every test here sets. */
#define STALL_NS (20 * PH_MS)

static int stall_pipe[2];
static atomic_uint blocked_started;

/* Blocks until the test writes a byte into stall_pipe (or closes it). */
static inline void *block_work(tern_job *job, void *arg)
{
    (void)job, (void)arg;
    atomic_fetch_add(&blocked_started, 1);
    char c;
    while (read(stall_pipe[0], &c, 1) < 0 && errno == EINTR) {
    }
    return NULL;
}

/* Done callback: the job succeeded; counts it in the atomic_int at arg. */
static inline void count_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)result;
    cr_assert_eq(status, 0);
    atomic_fetch_add((atomic_int *)arg, 1);
}

/*
 * Make the pipe, set the watchdog (stall bound STALL_NS, at most
 * overflow_max overflow workers, each retiring after idle_ns idle), start
 * the pool (threads bounded workers, queue of 64, long_max long workers)
 * and return a new loop.
 */
static inline tern_loop *stall_setup(unsigned threads, unsigned long_max, unsigned overflow_max,
                                     uint64_t idle_ns)
{
    cr_assert_eq(pipe(stall_pipe), 0);
    atomic_init(&blocked_started, 0);
    tern_pool_watch w;
    tern_pool_watch_init(&w);
    w.stall_ns = STALL_NS;
    w.overflow_max = overflow_max;
    w.overflow_idle_ns = idle_ns;
    cr_assert_eq(tern_pool_watch_set(&w), 0);
    tern_pool_config cfg = ph_config(threads, 64, long_max);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    return loop;
}

/* Let n blocked jobs go, one byte each. */
static inline void unblock(unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        cr_assert_eq(write(stall_pipe[1], "x", 1), 1);
}

static inline void stall_close_pipe(void)
{
    close(stall_pipe[0]);
    close(stall_pipe[1]);
}

#endif
