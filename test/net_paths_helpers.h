/*
 * Helpers the tests of the network calls' less travelled paths share:
 * turning the network fault seams (backends/fault.h) off, and the loop on
 * the backend whose watcher changes a test makes the kernel refuse.
 */
#ifndef TERN_TEST_NET_PATHS_HELPERS_H
#define TERN_TEST_NET_PATHS_HELPERS_H

#include "loop_helpers.h"

/* Disarm the fault seam and put back the network seam's default errno. */
static inline void fault_off(void)
{
    tern__fault_arm(0, 0);
    tern__fault_net_errno(-ENOBUFS);
}

/*
 * A new loop on the epoll backend, whose EPOLL_CTL_MOD a test makes fail
 * by replacing a watched descriptor under it (dup2 drops the
 * registration). Skips the test where epoll is not built.
 */
static inline tern_loop *loop_new_epoll_or_skip(void)
{
    bool built = false;
    for (const char *const *n = tern__backend_names; *n != NULL; n++)
        if (strcmp(*n, "epoll") == 0)
            built = true;
    if (!built)
        cr_skip_test("the backend that refuses a changed watcher (epoll) is not built");
    return loop_new_backend("epoll");
}

#endif
