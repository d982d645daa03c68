/*
 * tern_loop_next_timeout (runtime/loop/run.c), what an embedding host sleeps
 * for: -1 with nothing armed (a watcher alone never times out), 0 for a
 * deadline already passed but not fired yet, and 0 for a job the pool
 * finished whose completion waits for the next turn.
 */
#include "loop_helpers.h"

static void on_readable(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    (void)loop, (void)id, (void)fd, (void)events, (void)arg;
}

static void on_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

static void *work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

static void on_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)result;
    cr_assert_eq(status, 0);
    atomic_fetch_add((atomic_uint *)arg, 1);
}

Test(next_timeout, nothing_armed_a_passed_deadline_and_a_finished_job, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    int fds[2];
    make_pipe(fds);
    tern_id w;
    cr_assert_eq(tern_io_start(loop, fds[0], TERN_READABLE, on_readable, NULL, &w), 0);
    cr_assert_eq(tern_loop_next_timeout(loop), -1, "a watcher alone has no deadline");

    /*
     * A deadline not yet due: far enough out that no slow start (the
     * loop's clock is read at its last turn, here its creation) can have
     * passed it, as a 1 ms one could on a loaded machine.
     */
    atomic_uint fired = 0;
    tern_id later;
    cr_assert_eq(tern_timer_start(loop, 10000 * MS, 0, on_timer, &fired, &later), 0);
    cr_assert_gt(tern_loop_next_timeout(loop), 0, "a deadline not yet due");
    cr_assert_eq(tern_timer_stop(loop, later), 0);
    cr_assert_eq(tern_loop_next_timeout(loop), -1);

    tern_id timer;
    cr_assert_eq(tern_timer_start(loop, 1 * MS, 0, on_timer, &fired, &timer), 0);
    uint64_t past = mono_ns() + 2 * MS;
    while (mono_ns() < past)
        sched_yield();
    cr_assert_eq(tern_loop_next_timeout(loop), 0, "a passed deadline is due now");
    cr_assert(run_until_count(loop, &fired, 1, 10 * (int64_t)MS, 100));
    cr_assert_eq(tern_loop_next_timeout(loop), -1);

    atomic_uint done = 0;
    tern_id job;
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, work, on_done, &done, &job), 0);
    /* The pool wakes the loop when the completion is in its ring. */
    cr_assert(fd_readable_now(tern_loop_backend_fd(loop), (int)(LIVENESS_NS / MS)));
    cr_assert_eq(atomic_load(&done), 0);
    cr_assert_eq(tern_loop_next_timeout(loop), 0, "a finished job waits for the next turn");
    cr_assert(run_until_count(loop, &done, 1, 10 * (int64_t)MS, 100));

    cr_assert_eq(tern__test_cancel_now(loop, w), 0);
    close(fds[0]);
    close(fds[1]);
    loop_free_clean(loop);
}
