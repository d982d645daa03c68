/*
 * Descriptors epoll refuses (EPERM) that are always ready, as a
 * character device is (backends/epoll.c, the always-ready list): a watch
 * whose list cannot grow (an allocation failure at each step of the
 * start in turn) is refused with -ENOMEM and leaves nothing live and the
 * descriptor open; a pipe's watcher changed while a device is in the list
 * is changed in epoll, not in the list; and once the last device leaves
 * the list (which stays allocated, empty), only epoll's descriptors
 * report.
 */
#include "net_paths_helpers.h"

static void count_io(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    (void)loop, (void)id, (void)fd, (void)events;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

Test(io_always_ready, a_start_out_of_memory_at_any_step_leaves_nothing, .timeout = TEST_TIMEOUT)
{
    int dev = open("/dev/null", O_RDONLY | O_CLOEXEC);
    cr_assert_geq(dev, 0);
    bool done = false;
    for (uint64_t n = 1; n < 64 && !done; n++) {
        tern_loop *loop = loop_new_epoll_or_skip();
        atomic_uint seen = 0;
        tern_id id = 0;
        tern__fault_arm(TERN__FAULT_ALLOC, n);
        int rc = tern_io_start(loop, dev, TERN_READABLE, count_io, &seen, &id);
        bool fired = tern__fault_fired();
        tern__fault_arm(0, 0);
        if (fired) {
            cr_assert_eq(rc, -ENOMEM, "allocation %llu: %d", (unsigned long long)n, rc);
            cr_assert_eq(id, 0u);
            cr_assert_eq(loop_live(loop), 0u);
            tern_loop_run_once(loop, 0);
            cr_assert_eq(atomic_load(&seen), 0u, "a refused watch reported");
        } else {
            cr_assert_eq(rc, 0);
            cr_assert(run_until_count(loop, &seen, 1, 10 * MS, 100), "/dev/null never fired");
            cr_assert_eq(tern_io_stop(loop, id), 0);
            done = true;
        }
        loop_free_clean(loop);
        cr_assert_neq(fcntl(dev, F_GETFD), -1, "the descriptor was closed");
    }
    cr_assert(done, "the walk never reached a start that succeeds");
    close(dev);
}

Test(io_always_ready, a_pipe_changed_beside_a_device_is_changed_in_epoll, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_epoll_or_skip();
    int dev = open("/dev/null", O_RDONLY | O_CLOEXEC);
    cr_assert_geq(dev, 0);
    int p[2];
    make_pipe(p);
    atomic_uint on_dev = 0, on_pipe = 0;
    tern_id d = 0, r = 0;
    cr_assert_eq(tern_io_start(loop, dev, TERN_READABLE, count_io, &on_dev, &d), 0);
    cr_assert_eq(tern_io_start(loop, p[0], TERN_WRITABLE, count_io, &on_pipe, &r), 0);
    /* The read end is never writable: nothing for the pipe yet. */
    cr_assert(run_until_count(loop, &on_dev, 3, 10 * MS, 100));
    cr_assert_eq(atomic_load(&on_pipe), 0u);
    cr_assert_eq(tern_io_modify(loop, r, TERN_READABLE), 0);
    write_byte(p[1]);
    cr_assert(run_until_count(loop, &on_pipe, 1, 10 * MS, 100),
              "the pipe, changed to READABLE beside a device, never fired");
    cr_assert_eq(tern_io_stop(loop, r), 0);
    cr_assert_eq(tern_io_stop(loop, d), 0);
    loop_free_clean(loop);
    close(p[0]);
    close(p[1]);
    close(dev);
}

Test(io_always_ready, with_the_last_device_gone_only_epoll_reports, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_epoll_or_skip();
    int dev = open("/dev/null", O_RDONLY | O_CLOEXEC);
    cr_assert_geq(dev, 0);
    atomic_uint on_dev = 0, on_pipe = 0;
    tern_id d = 0, r = 0;
    cr_assert_eq(tern_io_start(loop, dev, TERN_READABLE, count_io, &on_dev, &d), 0);
    cr_assert(run_until_count(loop, &on_dev, 1, 10 * MS, 100));
    cr_assert_eq(tern_io_stop(loop, d), 0);
    unsigned dev_reports = atomic_load(&on_dev);
    int p[2];
    make_pipe(p);
    cr_assert_eq(tern_io_start(loop, p[0], TERN_READABLE, count_io, &on_pipe, &r), 0);
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&on_pipe), 0u, "an empty pipe reported");
    write_byte(p[1]);
    cr_assert(run_until_count(loop, &on_pipe, 1, 10 * MS, 100), "the pipe never reported");
    cr_assert_eq(atomic_load(&on_dev), dev_reports, "a stopped device still reported");
    cr_assert_eq(tern_io_stop(loop, r), 0);
    loop_free_clean(loop);
    close(p[0]);
    close(p[1]);
    close(dev);
}
