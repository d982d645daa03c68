/*
 * What tern_io_start refuses (runtime/kinds/io.c): the loop's own descriptor
 * (-EEXIST: watching it would swallow the loop's wake-ups; the public
 * call refuses it before the internal start's own check), and a start
 * failing at any allocation, also the id map's growth, returns -ENOMEM
 * and leaves the descriptor unclaimed, so a later start on it works.
 */
#include "alloc_walk.h"
#include "loop_helpers.h"

static void on_readable(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    (void)loop, (void)id, (void)events;
    drain_fd(fd);
    atomic_fetch_add((atomic_uint *)arg, 1);
}

BACKEND_TEST(io_refusals, the_loops_own_descriptor_is_refused)
{
    tern_loop *loop = loop_new_backend(backend);
    atomic_uint n = 0;
    tern_id id;
    cr_assert_eq(tern_io_start(loop, tern_loop_backend_fd(loop), TERN_READABLE, on_readable, &n,
                               &id),
                 -EEXIST);
    cr_assert_eq(loop_live(loop), 0);
    loop_free_clean(loop);
}

static void nothing_hook(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id, (void)arg;
}

struct io_start {
    int fd;
    atomic_uint *calls;
};

/* The start the walk refuses: fd watched for reading, counting into calls. */
static int start_readable(tern_loop *loop, void *arg, tern_id *id)
{
    struct io_start *st = arg;
    return tern_io_start(loop, st->fd, TERN_READABLE, on_readable, st->calls, id);
}

Test(io_refusals, a_start_failing_at_any_allocation_leaves_the_descriptor_free,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    int fds[2];
    make_pipe(fds);
    atomic_uint n = 0;
    struct io_start st = {fds[0], &n};
    struct alloc_walk w = {start_readable, &st, nothing_hook, NULL};
    tern_id fill[ALLOC_WALK_FILL];
    cr_assert(alloc_walk(loop, &w, fill));
    for (unsigned k = 0; k < ALLOC_WALK_FILL; k++)
        cr_assert_eq(tern__test_cancel_now(loop, fill[k]), 0);
    /* The descriptor is free: a start on it works and is called. */
    tern_id id;
    cr_assert_eq(tern_io_start(loop, fds[0], TERN_READABLE, on_readable, &n, &id), 0);
    write_byte(fds[1]);
    cr_assert(run_until_count(loop, &n, 1, 10 * (int64_t)MS, 100));
    cr_assert_eq(tern__test_cancel_now(loop, id), 0);
    close(fds[0]);
    close(fds[1]);
    loop_free_clean(loop);
}
