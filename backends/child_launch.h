/*
 * The platform's way to start a child process. The runtime prepares a
 * description (struct tern__spawn) in the parent, every string and number
 * the child will need; tern__launch makes the child, which applies the
 * description with system calls only and runs the program. What differs
 * between systems (clone or vfork, raw system calls or libc, close_range
 * or one close per descriptor) stays in child_launch.c.
 */
#ifndef TERN_CHILD_LAUNCH_H
#define TERN_CHILD_LAUNCH_H

#include <sys/types.h>

#define TERN__STDIO_MAX 64

/*
 * What the launcher needs, prepared by the parent so the child only makes
 * system calls: fds[i] is the parent descriptor the child gets as i.
 */
struct tern__spawn {
    const char *file;
    char *const *argv;
    char *const *envp;
    const char *cwd;
    const char *path;  /* the parent's PATH, for a file without '/' */
    char **candidates; /* what execve tries, in order, NULL-terminated */
    int fds[TERN__STDIO_MAX];
    unsigned nfds;
    unsigned flags; /* TERN_PROCESS_* */
    unsigned uid, gid;
    int max_fd;       /* descriptors below it are closed when close_range is missing */
    volatile int err; /* set by the child before it gives up */
    int report_fd;    /* where a copied child writes err; -1 when memory is shared */
};

/*
 * tern__launch: make the child s describes. The child resets every signal
 * disposition to the default, applies s (session, descriptors 0..nfds-1,
 * every other descriptor closed whatever its close-on-exec flag, cwd,
 * group, user), opens its signal mask and execve's each candidate in
 * turn. The calling thread is suspended until the child has started the
 * program or given up; one that gave up has stored its errno (positive)
 * in s->err and exited with status 127, and is not reaped.
 * Requires: every signal blocked in the calling thread (a handler running
 * in a child that shares the parent's memory would act on the parent's
 * state); s->candidates, s->max_fd prepared and s->err zero.
 * Returns: the child's pid, or a negative errno when no child was made.
 * Threads: any.
 */
pid_t tern__launch(struct tern__spawn *s);

#endif
