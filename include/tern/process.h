/*
 * Child processes: spawn a program, learn its exit exactly once, send it
 * signals. Included by tern.h.
 *
 * A process is an operation like any other: it has an id, counts against
 * max_operations, keeps tern_loop_run() going until it exits (unless
 * unreferenced with tern_unref), and ends exactly once — with its exit
 * callback. The narrative (how the child is launched without copying the
 * parent, how its exit is seen on each system, what cancel does to a
 * running child) is in docs/process.md.
 */
#ifndef TERN_PROCESS_H
#define TERN_PROCESS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What one of the child's descriptors 0..n-1 is (tern_process_options.stdio). */
typedef enum tern_stdio_kind {
    TERN_STDIO_INHERIT = 0, /* the parent's descriptor of the same number */
    TERN_STDIO_IGNORE = 1,  /* /dev/null, opened for reading and writing */
    TERN_STDIO_FD = 2,      /* the descriptor in `fd` (the parent keeps it) */
    TERN_STDIO_STREAM = 3,  /* a new connected socket pair: the child gets one end,
                               the other is a tern stream on the loop, its id in `stream` */
} tern_stdio_kind;

typedef struct tern_stdio {
    tern_stdio_kind kind;
    tern_os_fd_t fd; /* TERN_STDIO_FD: the descriptor the child gets */
    tern_id stream;  /* TERN_STDIO_STREAM: set by tern_process_spawn on success */
} tern_stdio;

enum {
    TERN_PROCESS_DETACHED = 1u << 0, /* the child leads a new session (setsid) */
    TERN_PROCESS_SETUID = 1u << 1,   /* the child runs as `uid` (supplementary groups dropped) */
    TERN_PROCESS_SETGID = 1u << 2,   /* the child runs as group `gid` */
};

/*
 * What to run. Zero-filled (tern_process_options_init) means: no program
 * yet, argv { file }, the parent's environment and directory, descriptors
 * 0, 1 and 2 inherited, nothing else inherited.
 *   file         a path, or a name without '/' searched in the parent's PATH
 *   argv         NULL-terminated; NULL means { file, NULL }
 *   envp         NULL-terminated; NULL means the parent's environ
 *   cwd          the child's working directory; NULL: the parent's
 *   stdio        the child's descriptors 0..stdio_count-1; every other
 *                descriptor of the parent is closed in the child. With
 *                stdio_count 0, descriptors 0, 1 and 2 are inherited.
 *   flags        TERN_PROCESS_* bits
 */
typedef struct tern_process_options {
    const char *file;
    char *const *argv;
    char *const *envp;
    const char *cwd;
    tern_stdio *stdio;
    unsigned stdio_count; /* 0..64 */
    unsigned flags;
    unsigned uid, gid;
} tern_process_options;

/*
 * The exit callback, exactly once per spawned process:
 *   status  0 when the child ended; -ECANCELED when the process operation
 *           was cancelled (tern_cancel) or its loop freed first — the child
 *           may still run, and tern reaps it in the background when it ends
 *   exit_code    the child's exit status (0..255) when it exited, else -1
 *   term_signal  the signal that ended it, else 0
 */
typedef void (*tern_exit_cb)(tern_loop *loop, tern_id id, int status, int exit_code,
                             int term_signal, void *arg);

/* tern_process_options_init: zero *opts. Requires: opts != NULL. Threads: any thread. */
TERN_EXTERN void tern_process_options_init(tern_process_options *opts);

/*
 * tern_process_spawn: start a child process running opts->file, then
 * cb(loop, id, status, exit_code, term_signal, arg) once in step 2 after
 * it ends. The call returns once the child has started the program (or
 * failed to): a program that cannot be run is an error of this call, never
 * a child exiting 127.
 * Requires: loop != NULL; opts != NULL with file != NULL; cb != NULL.
 * Returns: 0 and *idp (if idp != NULL); -EINVAL for a NULL file or cb,
 *          stdio_count over 64, an unknown stdio kind or flag, or a
 *          negative TERN_STDIO_FD descriptor; the program's exec error
 *          (-ENOENT, -EACCES, -ENOEXEC, ...), or the error of chdir,
 *          setuid, setgid or setsid in the child; -EAGAIN at max_operations
 *          or when the system refuses a process; -EMFILE, -ENOMEM;
 *          -ESHUTDOWN while the loop is being freed. On error no child is
 *          left behind, no stream is opened and cb never runs.
 * Ownership: opts and everything it points to is read during the call
 *          only. The streams set in opts->stdio are the caller's to close.
 * Threads: loop-only. Several loops may spawn at once.
 */
TERN_EXTERN int tern_process_spawn(tern_loop *loop, const tern_process_options *opts,
                                   tern_exit_cb cb, void *arg, tern_id *idp);

/*
 * tern_process_kill: send signo to the child.
 * Requires: loop != NULL.
 * Returns: 0; -EINVAL for id 0 or a bad signal number; -ENOENT for an
 *          unknown or stale id, a process whose exit is already seen (its
 *          callback pending), or an id that is not a process; -EPERM.
 *          signo 0 checks that the child is still there.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_process_kill(tern_loop *loop, tern_id id, int signo);

/*
 * tern_process_pid: the child's process id.
 * Requires: loop != NULL; pidp != NULL.
 * Returns: 0 and *pidp; -EINVAL for id 0; -ENOENT for an unknown or stale
 *          id, or an id that is not a process.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_process_pid(tern_loop *loop, tern_id id, int *pidp);

#ifdef __cplusplus
}
#endif

#endif
