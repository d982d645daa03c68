/*
 * Helpers the tests of children's ends share: an exit callback that
 * records what it was told, a pipe children block on, a bounded wait for
 * a child to be reaped, and a child's state as /proc shows it.
 */
#ifndef TERN_TEST_EXIT_HELPERS_H
#define TERN_TEST_EXIT_HELPERS_H

#include "loop_helpers.h"

/* What a process's exit callback was told, and how often. */
struct exit_seen {
    atomic_uint n;
    int status, code, sig;
    tern_id id;
};

/* An exit callback that records into the struct exit_seen at arg. */
static inline void on_exit_cb(tern_loop *loop, tern_id id, int status, int code, int sig,
                              void *arg)
{
    (void)loop;
    struct exit_seen *e = arg;
    e->status = status;
    e->code = code;
    e->sig = sig;
    e->id = id;
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

/* The state letter of pid in /proc/<pid>/stat ('R', 'S', 'Z', ...), or 0
 * when there is none (reaped). */
static inline char proc_state(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[len] = '\0';
    char *rp = strrchr(buf, ')');
    return rp != NULL && rp[1] == ' ' ? rp[2] : 0;
}

#endif
