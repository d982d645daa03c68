/*
 * tern_loop_memory_bytes (runtime/loop/memory.c): the figure grows with what
 * the loop holds, here its timer table (records and the chunk map) and
 * its descriptor table, and posts waiting for it; a NULL or freed loop
 * aborts naming the call and the rule.
 */
#include "loop_helpers.h"

#include <stdalign.h>

#include "abort_helpers.h"

static void never(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id, (void)arg;
    cr_assert_fail("a timer an hour out ran");
}

static void on_readable(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    (void)loop, (void)id, (void)fd, (void)events, (void)arg;
}

static void noop_post(tern_loop *loop, void *arg)
{
    (void)loop;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

Test(loop_memory, the_figure_grows_with_what_the_loop_holds, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    uint64_t bare = tern_loop_memory_bytes(loop);
    cr_assert_gt(bare, 0);

    tern_id timer;
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, never, NULL, &timer), 0);
    uint64_t with_timer = tern_loop_memory_bytes(loop);
    cr_assert_gt(with_timer, bare, "a timer's table is not counted");

    int fds[2];
    make_pipe(fds);
    tern_id w;
    cr_assert_eq(tern_io_start(loop, fds[0], TERN_READABLE, on_readable, NULL, &w), 0);
    uint64_t with_watch = tern_loop_memory_bytes(loop);
    cr_assert_gt(with_watch, with_timer, "the descriptor table is not counted");

    atomic_uint ran = 0;
    cr_assert_eq(tern_post(loop, noop_post, &ran), 0);
    cr_assert_gt(tern_loop_memory_bytes(loop), with_watch, "a waiting post is not counted");
    cr_assert(run_until_count(loop, &ran, 1, 0, 10));
    cr_assert_eq(tern_loop_memory_bytes(loop), with_watch, "a post that ran is still counted");

    cr_assert_eq(tern_timer_stop(loop, timer), 0);
    cr_assert_eq(tern__test_cancel_now(loop, w), 0);
    close(fds[0]);
    close(fds[1]);
    loop_free_clean(loop);
}

/* What a freed loop reads as: its magic word cleared (see require_test.c). */
static alignas(64) unsigned char freed_block[1 << 16];

static void memory_of(void *ctx)
{
    (void)tern_loop_memory_bytes(ctx);
}

Test(loop_memory, a_null_or_freed_loop_aborts_naming_the_rule, .timeout = TEST_TIMEOUT)
{
    expect_abort(memory_of, NULL, "tern_loop_memory_bytes", "REQUIRE failed: NULL or freed loop");
    expect_abort(memory_of, freed_block, "tern_loop_memory_bytes",
                 "REQUIRE failed: NULL or freed loop");
}
