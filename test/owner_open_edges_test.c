/*
 * tern_owner_open's refusals (SPEC §12): -EAGAIN at max_operations and
 * -ENOMEM at each allocation it makes (its record, and the id map's growth
 * when the map is full), each leaving nothing behind: no live operation,
 * no admission held, so the next open succeeds.
 */
#include "loop_helpers.h"

static tern_loop *loop_with_max_ops(unsigned max_ops)
{
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.max_operations = max_ops;
    return loop_new_opts(&o);
}

Test(owner_open_edges, an_owner_at_max_operations_is_refused_and_holds_nothing,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_with_max_ops(2);
    tern_id a = 0, b = 0, c = 0;
    cr_assert_eq(tern_owner_open(loop, 4, &a), 0);
    cr_assert_eq(tern_owner_open(loop, 4, &b), 0);
    cr_assert_eq(tern_owner_open(loop, 4, &c), -EAGAIN, "the third open is over max_operations");
    cr_assert_eq(c, 0u, "a refused open writes no id");
    cr_assert_eq(loop_live(loop), 2u);
    cr_assert_eq(tern_owner_close(loop, a), 0);
    cr_assert_eq(tern_owner_open(loop, 4, &c), 0, "closing one makes room for exactly one");
    cr_assert_eq(tern_owner_open(loop, 4, &a), -EAGAIN);
    cr_assert_eq(tern_owner_close(loop, b), 0);
    cr_assert_eq(tern_owner_close(loop, c), 0);
    loop_free_clean(loop);
}

/*
 * Open many owners, each under a walk of injected allocation failures
 * (n = 1, 2, ... until an open makes no allocation fail): the id map
 * grows several times on the way, so the walk meets both the record's
 * allocation and the map's. Every failed open returns -ENOMEM and leaves
 * the live count as it was.
 */
#define OWNERS 300

Test(owner_open_edges, each_allocation_of_an_open_fails_cleanly, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    static tern_id ids[OWNERS];
    unsigned failures = 0;
    for (unsigned i = 0; i < OWNERS; i++) {
        for (uint64_t nth = 1;; nth++) {
            tern_id id = 0;
            tern__fault_arm(TERN__FAULT_ALLOC, nth);
            int rc = tern_owner_open(loop, 1, &id);
            bool fired = tern__fault_fired();
            tern__fault_arm(0, 0);
            if (!fired) {
                cr_assert_eq(rc, 0, "owner %u: %s without a failure", i, tern_strerror(rc));
                ids[i] = id;
                break;
            }
            failures++;
            cr_assert_eq(rc, -ENOMEM, "owner %u, allocation %llu: %s", i,
                         (unsigned long long)nth, tern_strerror(rc));
            cr_assert_eq(id, 0u);
            cr_assert_eq(loop_live(loop), i, "a failed open left an operation live");
        }
    }
    cr_assert_gt(failures, OWNERS, "the map grew at least once (%u failures)", failures);
    for (unsigned i = 0; i < OWNERS; i++) {
        tern_owner_stats st;
        cr_assert_eq(tern_owner_stats_get(loop, ids[i], &st), 0, "owner %u is findable", i);
        cr_assert_eq(st.cap, 1u);
        cr_assert_eq(tern_owner_close(loop, ids[i]), 0);
    }
    loop_free_clean(loop);
}
