/*
 * The loop's record slab (runtime/core/slab.c) as tern_loop_memory_bytes shows
 * it, through tern_defer: chunks double from 64 records up to 65536 and
 * then stay at 65536; the memory figure counts each chunk at its own size
 * (so the cap shows in the figure too); records are reused, and the loop
 * keeps the memory of its peak after the deferred functions have run.
 */
#include "loop_helpers.h"

static void count_defer(tern_loop *loop, void *arg)
{
    (void)loop;
    (*(unsigned *)arg)++;
}

static void defer_up_to(tern_loop *loop, unsigned *made, unsigned want, unsigned *ran)
{
    for (; *made < want; (*made)++) {
        int rc = tern_defer(loop, count_defer, ran);
        cr_assert_eq(rc, 0, "defer %u: %s", *made, tern_strerror(rc));
    }
}

/* Records held by the first k chunks: 64 + 128 + ... + (64 << (k-1)). */
#define HELD(k) (UINT64_C(64) * ((UINT64_C(1) << (k)) - 1))

Test(defer_slab, chunks_grow_to_65536_records_and_are_counted_at_their_size,
     .timeout = TEST_TIMEOUT)
{
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.max_operations = 1u << 20;
    tern_loop *loop = loop_new_opts(&o);
    unsigned made = 0, ran = 0;
    uint64_t m0 = tern_loop_memory_bytes(loop);

    /* One past ten chunks' worth: the 11th chunk, of 65536 records. */
    defer_up_to(loop, &made, (unsigned)HELD(10) + 1, &ran);
    uint64_t m11 = tern_loop_memory_bytes(loop);
    /* Up to what 11 chunks hold: no chunk more. */
    defer_up_to(loop, &made, (unsigned)HELD(11), &ran);
    cr_assert_eq(tern_loop_memory_bytes(loop), m11, "the 11th chunk had room");
    /* One more: a 12th chunk, of 65536 records again, not 131072. */
    defer_up_to(loop, &made, (unsigned)HELD(11) + 1, &ran);
    uint64_t m12 = tern_loop_memory_bytes(loop);

    uint64_t chunk12 = m12 - m11;
    uint64_t first11 = m11 - m0;
    /* chunk12 = header + 65536 * size; first11 = 11 headers + HELD(11) * size. */
    cr_assert_gt(chunk12, UINT64_C(65536) * 16, "a 65536-record chunk: %llu bytes",
                 (unsigned long long)chunk12);
    uint64_t header = chunk12 % 65536;
    uint64_t size = chunk12 / 65536;
    cr_assert_eq(first11, 11 * header + HELD(11) * size,
                 "11 chunks of 64..65536 records of %llu bytes (+%llu each): %llu bytes",
                 (unsigned long long)size, (unsigned long long)header,
                 (unsigned long long)first11);

    /* Every deferred function runs once; the loop keeps its peak. */
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(ran, made, "ran %u of %u", ran, made);
    cr_assert_eq(tern_loop_memory_bytes(loop), m12, "a loop keeps the memory of its peak");
    /* The records are reused: as many again need no chunk more. */
    made = 0;
    ran = 0;
    defer_up_to(loop, &made, (unsigned)HELD(11) + 1, &ran);
    cr_assert_eq(tern_loop_memory_bytes(loop), m12, "freed records are reused");
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(ran, made);
    loop_free_clean(loop);
}
