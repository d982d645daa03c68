/*
 * The fault walk over every call that adds an operation (backends/fault.h):
 * on a fresh loop, the nth allocation, thread or descriptor creation the
 * call makes fails, for n = 1, 2, ... until the call makes no more. Each
 * injected failure must come back from the call as -ENOMEM, -EAGAIN or
 * -EMFILE, with no id written, nothing left live (the loop's live
 * operations are back to what they were), no callback ever run for it,
 * and the loop still usable: a post then runs. The walk must inject at
 * least once, which proves the call reaches the seam.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "adding_calls.h"
#include "testing.h"

#define TEST_TIMEOUT 120
#define MAX_STEPS 200 /* a walk longer than this has lost its way */

static unsigned live(tern_loop *loop)
{
    tern_loop_stats s;
    tern_loop_stats_read(loop, &s, sizeof s);
    return s.live_operations;
}

static size_t call_index[N_CALLS];

ParameterizedTestParameters(fault_calls, walk)
{
    for (size_t i = 0; i < N_CALLS; i++)
        call_index[i] = i;
    return cr_make_param_array(size_t, call_index, N_CALLS);
}

ParameterizedTest(size_t *i, fault_calls, walk, .timeout = TEST_TIMEOUT)
{
    const struct call *c = &calls[*i];
    cr_assert_eq(pipe(pipe_fd), 0);
    unsigned injected = 0;
    uint64_t n;
    for (n = 1; n <= MAX_STEPS; n++) {
        tern_loop *loop = NULL;
        cr_assert_eq(tern_loop_new(&loop, NULL), 0);
        unsigned before = live(loop);
        called = 0;
        bool wrote = false;
        tern__fault_arm(TERN__FAULT_ALLOC | TERN__FAULT_THREAD | TERN__FAULT_FD, n);
        int rc = c->call(loop, &wrote);
        bool fired = tern__fault_fired();
        tern__fault_arm(0, 0);
        if (!fired) {
            cr_assert_geq(rc, 0, "%s returned %d with no failure injected", c->name, rc);
            tern_loop_free(loop); /* what was accepted is cancelled and freed */
            break;
        }
        injected++;
        if (rc >= 0) {
            /* The failure hit something the call recovers from (a cache,
             * a retry): it must then have worked. */
            tern_loop_free(loop);
            continue;
        }
        cr_assert(rc == -ENOMEM || rc == -EAGAIN || rc == -EMFILE,
                  "%s, failure %llu: returned %d (%s)", c->name, (unsigned long long)n, rc,
                  strerror(-rc));
        cr_assert(!wrote, "%s, failure %llu: refused, but an id was written", c->name,
                  (unsigned long long)n);
        cr_assert_eq(live(loop), before, "%s, failure %llu: %u operations left live", c->name,
                     (unsigned long long)n, live(loop) - before);
        cr_assert_eq(tern_post(loop, post_fn, NULL), 0, "%s, failure %llu: the loop is unusable",
                     c->name, (unsigned long long)n);
        cr_assert_eq(tern_loop_run(loop), 0);
        cr_assert_eq(called, 1, "%s, failure %llu: %d callbacks ran (only the post may)", c->name,
                     (unsigned long long)n, called);
        tern_loop_free(loop);
    }
    cr_assert_leq(n, MAX_STEPS, "%s: the walk did not end", c->name);
    cr_assert_gt(injected, 0, "%s reached no checked call", c->name);
    close(pipe_fd[0]);
    close(pipe_fd[1]);
}
