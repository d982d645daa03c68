/*
 * A start refused for memory at each of its allocations in turn, with
 * more and more other operations live so that one walk meets the loop's
 * id map growing: the walk the loop-edge and io-refusal tests share.
 */
#ifndef TERN_TEST_ALLOC_WALK_H
#define TERN_TEST_ALLOC_WALK_H

#include "fault.h"
#include "loop_helpers.h"

/* How many other operations the walk ends with live. */
#define ALLOC_WALK_FILL 48

struct alloc_walk {
    /* The start under test: its result, and on 0 the new operation's id. */
    int (*start)(tern_loop *loop, void *arg, tern_id *id);
    void *arg;
    /* The hook (of the CHECK kind) added after each round to fill the loop. */
    tern_hook_cb filler;
    void *filler_arg;
};

/*
 * For 0, 1, ... ALLOC_WALK_FILL - 1 filler hooks live, arm the allocation
 * fault at the start's 1st, 2nd, ... allocation (at most 15) until a start
 * meets none: each start refused returns -ENOMEM and leaves as many
 * operations live as before; a start that succeeds is cancelled at once.
 * Leaves the ALLOC_WALK_FILL fillers live, their ids in fill. Returns
 * whether any start was refused.
 */
static inline bool alloc_walk(tern_loop *loop, const struct alloc_walk *w,
                              tern_id fill[ALLOC_WALK_FILL])
{
    bool failed = false;
    for (unsigned f = 0; f < ALLOC_WALK_FILL; f++) {
        for (uint64_t k = 1; k < 16; k++) {
            tern_id id;
            tern__fault_arm(TERN__FAULT_ALLOC, k);
            int rc = w->start(loop, w->arg, &id);
            bool fired = tern__fault_fired();
            tern__fault_arm(0, 0);
            if (rc == 0) {
                cr_assert_eq(tern__test_cancel_now(loop, id), 0);
                if (!fired)
                    break;
                continue;
            }
            failed = true;
            cr_assert_eq(rc, -ENOMEM);
            cr_assert_eq(loop_live(loop), f);
        }
        cr_assert_eq(tern_hook_start(loop, TERN_HOOK_CHECK, w->filler, w->filler_arg, &fill[f]),
                     0);
    }
    return failed;
}

#endif
