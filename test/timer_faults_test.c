/*
 * A repeating timer started on a fresh loop, with each of its
 * allocations failing in turn (the fault seam, backends/fault.h): the
 * heap slot, the repeat record and the timer table's first chunk are all
 * made by this start, so a failure after the repeat record was taken
 * gives it back. Each refused start returns -ENOMEM, leaves nothing live
 * (no operation, no repeat record: the one check that reads the loop's
 * private timer table) and never calls back; the start after the walk
 * runs and repeats.
 */
#include "loop_helpers.h"

#include <inttypes.h>

#include "loop_p.h"

/* Repeat records taken and not on the free list (the table's own count:
 * no public figure shows a record a refused start kept). */
static unsigned repeats_held(const tern_loop *loop)
{
    const struct tern__timer_table *t = &loop->timers;
    unsigned free = 0;
    for (uint32_t ix = t->repeat_free; ix != 0; ix = t->repeat[ix - 1].next)
        free++;
    return t->repeat_used - free;
}

static void count_fire(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

Test(timer_faults, a_repeating_start_out_of_memory_at_any_step_leaves_nothing,
     .timeout = TEST_TIMEOUT)
{
    bool done = false;
    unsigned refused = 0;
    for (uint64_t n = 1; n < 64 && !done; n++) {
        tern_loop *loop = loop_new_default();
        atomic_uint fired = 0;
        tern_id id = 0;
        tern__fault_arm(TERN__FAULT_ALLOC, n);
        int rc = tern_timer_start(loop, MS, MS, count_fire, &fired, &id);
        bool hit = tern__fault_fired();
        tern__fault_arm(0, 0);
        if (hit) {
            refused++;
            cr_assert_eq(rc, -ENOMEM, "allocation %" PRIu64 ": %d", n, rc);
            cr_assert_eq(id, 0u, "a refused start wrote an id");
            cr_assert_eq(loop_live(loop), 0u, "allocation %" PRIu64 ": something is live", n);
            cr_assert_eq(repeats_held(loop), 0u, "allocation %" PRIu64 ": a repeat record kept",
                         n);
            cr_assert_eq(tern_loop_run_once(loop, 0), 0);
            /* A second start on the same loop, unhindered, repeats. */
            cr_assert_eq(tern_timer_start(loop, MS, MS, count_fire, &fired, &id), 0);
        } else {
            cr_assert_eq(rc, 0);
            done = true;
        }
        cr_assert(run_until_count(loop, &fired, 3, 10 * MS, 1000), "the timer did not repeat");
        cr_assert_eq(tern_timer_stop(loop, id), 0);
        loop_free_clean(loop);
    }
    cr_assert(done, "the walk never reached a start that succeeds");
    cr_assert_geq(refused, 2u, "fewer allocations than the start makes were walked");
}
