/*
 * The due queue of timers (runtime/core/timer.c): every timer whose deadline
 * passed waits behind one entry of the ready queue. When the only due
 * timer is stopped before its callback runs, that entry stays queued but
 * counts as no work; a timer expiring while it is still queued so must
 * bring it back to life, or its callback would never run. And a timer
 * stopped in the middle of the queue, one-shot or repeating (which is
 * armed again while it waits), leaves the queue whole behind it, and its
 * slot fit for the next timer.
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

struct order {
    unsigned n;
    char ran[16];
};

static void note(tern_loop *loop, tern_id id, void *arg, char name)
{
    (void)loop, (void)id;
    struct order *o = arg;
    if (o->n < sizeof o->ran - 1)
        o->ran[o->n] = name;
    o->n++;
}

static void ran_a(tern_loop *loop, tern_id id, void *arg)
{
    note(loop, id, arg, 'a');
}

static void ran_b(tern_loop *loop, tern_id id, void *arg)
{
    note(loop, id, arg, 'b');
}

static void ran_c(tern_loop *loop, tern_id id, void *arg)
{
    note(loop, id, arg, 'c');
}

static void ran_d(tern_loop *loop, tern_id id, void *arg)
{
    note(loop, id, arg, 'd');
}

static void ran_e(tern_loop *loop, tern_id id, void *arg)
{
    note(loop, id, arg, 'e');
}

Test(timer_due, the_queue_runs_on_past_timers_stopped_in_its_middle, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    struct order o = {0};
    tern_id a, rep, one, d, e, late;
    /* Equal deadlines: they come due in one step 5 and queue in arming order. */
    cr_assert_eq(tern_timer_start(loop, 0, 0, ran_a, &o, &a), 0);
    cr_assert_eq(tern_timer_start(loop, 0, HOUR, ran_b, &o, &rep), 0);
    cr_assert_eq(tern_timer_start(loop, 0, 0, ran_c, &o, &one), 0);
    cr_assert_eq(tern_timer_start(loop, 0, 0, ran_d, &o, &d), 0);
    cr_assert_eq(tern_timer_start(loop, 0, HOUR, ran_e, &o, &e), 0);
    tern_loop_run_once(loop, 0);
    cr_assert_eq(tern_loop_next_timeout(loop), 0, "all five wait on the due queue");
    cr_assert_eq(o.n, 0u);
    /* The repeating one is armed again (its next firing is an hour out) and queued. */
    cr_assert_eq(tern_timer_stop(loop, rep), 0);
    cr_assert_eq(tern_timer_stop(loop, one), 0);
    cr_assert_eq(loop_live(loop), 3);
    tern_loop_run_once(loop, 0);
    cr_assert_eq(o.n, 3u, "ran %u callbacks (\"%s\"), want a, d and e", o.n, o.ran);
    cr_assert_str_eq(o.ran, "ade", "the queue behind the stopped timers ran out of order");
    cr_assert_eq(tern_timer_stop(loop, a), -ENOENT);
    cr_assert_eq(tern_timer_stop(loop, d), -ENOENT);
    cr_assert_eq(loop_live(loop), 1, "the repeating e stays, armed for its next firing");

    /* The freed slots take new timers, which fire once each, in order, and stop cleanly. */
    o = (struct order){0};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(tern_timer_start(loop, 0, 0, i % 2 ? ran_b : ran_a, &o, NULL), 0);
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, ran_c, &o, &late), 0);
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (o.n < 4 && mono_ns() < end)
        tern_loop_run_once(loop, 0);
    cr_assert_str_eq(o.ran, "abab");
    cr_assert_eq(tern_timer_stop(loop, late), 0);
    cr_assert_eq(tern_timer_stop(loop, e), 0);
    cr_assert_eq(loop_live(loop), 0);
    loop_free_clean(loop);
}
