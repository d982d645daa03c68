/*
 * Helpers the tests of signal watchers over several loops share: a
 * watcher's call count, and what the calling thread's mask and the
 * process's pending set hold.
 */
#ifndef TERN_TEST_SIGNAL_HELPERS_H
#define TERN_TEST_SIGNAL_HELPERS_H

#include "loop_helpers.h"

#include <signal.h>

#include "platform.h"

struct seen {
    atomic_uint n;
};

/* A signal watcher's callback: counts its calls in the struct seen at arg. */
static inline void on_signal(tern_loop *loop, tern_id id, int signo, void *arg)
{
    (void)loop, (void)id, (void)signo;
    atomic_fetch_add(&((struct seen *)arg)->n, 1);
}

/* Whether signo is blocked in the calling thread. */
static inline bool blocked_here(int signo)
{
    sigset_t cur;
    cr_assert_eq(pthread_sigmask(SIG_BLOCK, NULL, &cur), 0);
    return sigismember(&cur, signo);
}

/* Whether an instance of signo is pending for the process or this thread. */
static inline bool pending_here(int signo)
{
    sigset_t p;
    cr_assert_eq(sigpending(&p), 0);
    return sigismember(&p, signo);
}

/* Whether the default backend's signal source blocks a watched signal in
 * the watching thread (signalfd does; the self-pipe of portable builds,
 * whose handler must run, does not). */
static inline bool source_masks(void)
{
    return tern__sigsource_kind_for(false) != TERN__SIG_PIPE;
}

#endif
