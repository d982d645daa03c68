/*
 * The statistics structs grow at their end (docs/api.md, "How the ABI
 * grows"): a *_stats_read fills exactly the size its caller knows. A
 * caller compiled against an older, shorter struct gets its prefix and
 * nothing written past it; one compiled against a newer, longer struct
 * gets zeros where the library has no field.
 */
#include <criterion/criterion.h>
#include <stddef.h>
#include <string.h>

#include "tern.h"

#define FILL 0xAB
#define EXTRA 24

static void assert_bytes(const unsigned char *p, size_t from, size_t to, int value)
{
    for (size_t i = from; i < to; i++)
        cr_assert_eq(p[i], value, "byte %zu is 0x%02x, expected 0x%02x", i, p[i], value);
}

Test(stats_size, loop_stats_shorter_caller_gets_its_prefix_only)
{
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    cr_assert_geq(tern_loop_run_once(loop, 0), 0);
    tern_loop_stats full;
    tern_loop_stats_get(loop, &full);
    cr_assert_gt(full.turns, 0u);

    unsigned char buf[sizeof(tern_loop_stats) + EXTRA];
    memset(buf, FILL, sizeof buf);
    size_t old = offsetof(tern_loop_stats, events); /* an older, shorter struct */
    tern_loop_stats_read(loop, (tern_loop_stats *)buf, old);
    assert_bytes(buf, old, sizeof buf, FILL);
    cr_assert_eq(memcmp(buf, &full, offsetof(tern_loop_stats, posts)), 0); /* turns */
    tern_loop_free(loop);
}

Test(stats_size, loop_stats_longer_caller_gets_zeros_past_the_library)
{
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    unsigned char buf[sizeof(tern_loop_stats) + EXTRA];
    memset(buf, FILL, sizeof buf);
    tern_loop_stats_read(loop, (tern_loop_stats *)buf, sizeof buf);
    assert_bytes(buf, sizeof(tern_loop_stats), sizeof buf, 0);
    tern_loop_free(loop);
}

Test(stats_size, pool_stats_prefix_and_zero_tail)
{
    unsigned char buf[sizeof(tern_pool_stats) + EXTRA];
    memset(buf, FILL, sizeof buf);
    size_t old = offsetof(tern_pool_stats, submitted);
    tern_pool_stats_read((tern_pool_stats *)buf, old);
    assert_bytes(buf, old, sizeof buf, FILL);
    memset(buf, FILL, sizeof buf);
    tern_pool_stats_read((tern_pool_stats *)buf, sizeof buf);
    assert_bytes(buf, sizeof(tern_pool_stats), sizeof buf, 0);
}

Test(stats_size, owner_stats_prefix_and_zero_tail)
{
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    tern_id owner = 0;
    cr_assert_eq(tern_owner_open(loop, 3, &owner), 0);

    unsigned char buf[sizeof(tern_owner_stats) + EXTRA];
    memset(buf, FILL, sizeof buf);
    size_t old = offsetof(tern_owner_stats, in_flight);
    cr_assert_eq(tern_owner_stats_read(loop, owner, (tern_owner_stats *)buf, old), 0);
    unsigned cap;
    memcpy(&cap, buf, sizeof cap);
    cr_assert_eq(cap, 3u);
    assert_bytes(buf, old, sizeof buf, FILL);

    memset(buf, FILL, sizeof buf);
    cr_assert_eq(tern_owner_stats_read(loop, owner, (tern_owner_stats *)buf, sizeof buf), 0);
    assert_bytes(buf, sizeof(tern_owner_stats), sizeof buf, 0);
    cr_assert_eq(tern_owner_close(loop, owner), 0);
    tern_loop_free(loop);
}
