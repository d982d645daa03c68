/*
 * The due queue of timers (runtime/timer.c): every timer whose deadline
 * passed waits behind one entry of the ready queue. When the only due
 * timer is stopped before its callback runs, that entry stays queued but
 * counts as no work; a timer expiring while it is still queued so must
 * bring it back to life, or its callback would never run.
 */
#include "loop_helpers.h"

struct due {
    tern_id first, second;
    atomic_uint first_n, second_n, reads;
    tern_loop *loop;
};

static void on_first(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id;
    atomic_fetch_add(&((struct due *)arg)->first_n, 1);
}

static void on_second(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id;
    atomic_fetch_add(&((struct due *)arg)->second_n, 1);
}

/* Dispatched ahead of the due timers (one callback per turn): stops the
 * first timer, whose expiry is queued behind this watcher. */
static void on_readable(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    (void)id, (void)events;
    struct due *d = arg;
    drain_fd(fd);
    if (atomic_fetch_add(&d->reads, 1) == 0)
        cr_assert_eq(tern_timer_stop(loop, d->first), 0);
}

Test(timer_due, a_timer_expiring_behind_a_stopped_due_timer_still_runs, .timeout = TEST_TIMEOUT)
{
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.dispatch_batch = 1;
    tern_loop *loop = loop_new_opts(&opts);
    struct due d = {.loop = loop};
    int fds[2];
    make_pipe(fds);
    tern_id w;
    cr_assert_eq(tern_io_start(loop, fds[0], TERN_READABLE, on_readable, &d, &w), 0);
    cr_assert_eq(tern_timer_start(loop, 1 * MS, 0, on_first, &d, &d.first), 0);
    cr_assert_eq(tern_timer_start(loop, 30 * MS, 0, on_second, &d, &d.second), 0);
    uint64_t past = mono_ns() + 2 * MS;
    while (mono_ns() < past)
        sched_yield(); /* the first deadline is behind us: the next turn fires it */
    write_byte(fds[1]);
    /* Step 4 queues the watcher, step 5 the due timers behind it. */
    tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&d.reads), 0);
    /* Step 2 runs the watcher only (it stops the first timer); step 5
     * fires the second while the due entry is still queued. */
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (atomic_load(&d.second_n) == 0 && mono_ns() < end)
        tern_loop_run_once(loop, 100 * (int64_t)MS);
    cr_assert_eq(atomic_load(&d.second_n), 1, "the second timer's callback never ran");
    cr_assert_eq(atomic_load(&d.first_n), 0, "a stopped timer was called");
    cr_assert_eq(tern_timer_stop(loop, d.second), -ENOENT);
    cr_assert_eq(tern__test_cancel_now(loop, w), 0);
    close(fds[0]);
    close(fds[1]);
    loop_free_clean(loop);
}
