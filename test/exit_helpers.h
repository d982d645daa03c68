/*
 * Helpers the tests of children's ends share: an exit callback that
 * records what it was told, a pipe children block on, and a bounded wait
 * for a child to be reaped.
 */
#ifndef TERN_TEST_EXIT_HELPERS_H
#define TERN_TEST_EXIT_HELPERS_H

#include "loop_helpers.h"

/* What a process's exit callback was told, and how often. */
struct exit_seen {
    atomic_uint n;
    int status, code, sig;
};

/* An exit callback that records into the struct exit_seen at arg. */
static inline void on_exit_cb(tern_loop *loop, tern_id id, int status, int code, int sig,
                              void *arg)
{
    (void)loop, (void)id;
    struct exit_seen *e = arg;
    e->status = status;
    e->code = code;
    e->sig = sig;
    atomic_fetch_add(&e->n, 1);
}

/* A pipe the children block on: they end when its write end closes. */
static inline void blocking_pipe(int fds[2])
{
    cr_assert_eq(pipe2(fds, O_CLOEXEC), 0);
}

/* Whether pid is gone entirely (reaped): not even a zombie. Waits until
 * it is, bounded by LIVENESS_NS. */
static inline bool wait_gone(pid_t pid)
{
    uint64_t end = mono_ns() + LIVENESS_NS;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d", (int)pid);
    while (mono_ns() < end) {
        if (access(path, F_OK) < 0)
            return true;
        sleep_ns(2 * MS);
    }
    return false;
}

#endif
