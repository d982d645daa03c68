/*
 * The allocation seam's own failures (backends/fault.c), apart from the
 * injected ones: a lazily zeroed array whose byte count overflows, or
 * that no mapping can hold, and an aligned block no allocator can give,
 * each come back NULL (the callers' -ENOMEM), never a short block; and a
 * ring whose slots could not be had is destroyed as a no-op.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdalign.h>
#include <stdint.h>
#include <string.h>

#include "ring.h"
#include "testing.h"

/*
 * A size no allocator can give is the point of one test below: under
 * AddressSanitizer the allocator must answer NULL, as libc's does, not
 * abort the process (the environment's ASAN_OPTIONS still apply on top).
 */
#if defined(__SANITIZE_ADDRESS__)
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1";
}
#endif

static bool all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0)
            return false;
    return true;
}

Test(fault_alloc_edges, a_lazy_array_whose_size_overflows_is_refused)
{
    /* n * size wraps to 1 MiB: a mapping that small would succeed. */
    cr_assert_null(tern__calloc_lazy((SIZE_MAX >> 20) + 2, (size_t)1 << 20),
                   "n * size wraps: no short block");
    cr_assert_null(tern__calloc_lazy(SIZE_MAX / 8 + 2, 8));
    cr_assert_null(tern__calloc_lazy(SIZE_MAX, SIZE_MAX));
    cr_assert(!tern__fault_fired(), "a real refusal, not an injected one");
}

Test(fault_alloc_edges, a_lazy_array_no_mapping_can_hold_is_refused)
{
    /* 2^60 bytes: past any address space a process has. */
    cr_assert_null(tern__calloc_lazy((size_t)1 << 56, 16));
}

Test(fault_alloc_edges, lazy_arrays_small_and_large_come_zeroed)
{
    size_t small = 1000, large = (size_t)1 << 20;
    unsigned char *a = tern__calloc_lazy(small, 1);
    unsigned char *b = tern__calloc_lazy(large, 1);
    cr_assert_not_null(a);
    cr_assert_not_null(b);
    cr_assert(all_zero(a, small));
    cr_assert(all_zero(b, large));
    tern__free_lazy(a, small, 1);
    tern__free_lazy(b, large, 1);
    tern__free_lazy(NULL, large, 1); /* as free(NULL) */
    /* Zero-sized elements: calloc's answer, freed as calloc's. */
    void *z = tern__calloc_lazy(10, 0);
    tern__free_lazy(z, 10, 0);
}

Test(fault_alloc_edges, an_aligned_block_no_allocator_can_give_is_refused)
{
    cr_assert_null(tern__calloc_aligned(64, SIZE_MAX - 4096));
    unsigned char *p = tern__calloc_aligned(64, 100);
    cr_assert_not_null(p);
    cr_assert_eq((uintptr_t)p % 64, 0u);
    cr_assert(all_zero(p, 128), "zeroed up to the rounded size");
    tern__free_aligned(p);
}

Test(fault_alloc_edges, a_ring_without_slots_is_destroyed_as_a_no_op)
{
    alignas(TERN_CACHELINE) static struct tern__ring ring;
    tern__fault_arm(TERN__FAULT_ALLOC, 1);
    int rc = tern__ring_init(&ring, 100);
    bool fired = tern__fault_fired();
    tern__fault_arm(0, 0);
    cr_assert(fired);
    cr_assert_eq(rc, -ENOMEM);
    cr_assert_null(ring.slots);
    tern__ring_destroy(&ring);
    cr_assert_null(ring.slots);

    /* A ring that was set up works, and its destroy may be repeated. */
    cr_assert_eq(tern__ring_init(&ring, 100), 0);
    cr_assert_eq(ring.mask, 127u, "rounded up to a power of two");
    alignas(8) int item = 7; /* a ring item is 8-aligned (ring.h) */
    tern__ring_push(&ring, &item);
    cr_assert_eq(tern__ring_pop(&ring), &item);
    tern__ring_destroy(&ring);
    cr_assert_null(ring.slots);
    tern__ring_destroy(&ring);
}
