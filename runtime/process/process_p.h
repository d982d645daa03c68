/*
 * Child processes, inside the runtime: the launcher (process_launch.c, on
 * the platform's backends/child_launch.h), the exit sources
 * (process_exit.c: a pidfd, or the SIGCHLD fallback), the background
 * reaper of children whose operation ended first (process_reap.c), and
 * the operation (process.c), which uses them all.
 */
#ifndef TERN_PROCESS_P_H
#define TERN_PROCESS_P_H

#include <stdbool.h>
#include <sys/types.h>

#include "child_launch.h"
#include "loop_p.h"

/*
 * Start the child s describes (the PATH search and the descriptor limit
 * are filled in here): 0 and *pidp once it runs the program, or the
 * negative errno of the step that failed in the child (the child is
 * reaped then) or of the launch itself. The caller's signal mask is
 * unchanged.
 */
int tern__spawn(struct tern__spawn *s, pid_t *pidp);

/*
 * How a loop learns that its child ended (process_exit.c). A pidfd when the
 * system has one (Linux: readable once the child ends), watched through the
 * loop's backend like any descriptor; otherwise the loop's share of the
 * SIGCHLD fallback: a wake object every SIGCHLD signals, after which the
 * loop polls each of its own children with waitpid(pid, WNOHANG).
 */
struct tern__child;
typedef void (*tern__child_exited_fn)(tern_loop *loop, struct tern__child *c, int wstatus);
struct tern__child {
    pid_t pid;
    int pidfd;                       /* -1 with the fallback */
    struct tern__io io;              /* the pidfd's watcher */
    struct tern__child *prev, *next; /* the loop's fallback children */
    tern__child_exited_fn exited;
    bool fallback; /* seen through the SIGCHLD fallback: holds a share of it */
};

/*
 * tern__child_prepare runs before the launch (0 or -errno): it picks the
 * source, and for the fallback takes the loop's share of it then, so the
 * SIGCHLD of a child that ends at once is not missed. tern__child_watch
 * begins watching the launched child: `exited` runs in step 4 with the
 * wait status, once; the child is reaped by then. tern__child_release
 * gives the share back: once per prepared child, after its launch failed,
 * its exit was seen, or it was abandoned. The loop's fallback state lives
 * while any child holds a share (loop->children).
 */
int tern__child_prepare(tern_loop *loop, struct tern__child *c);
int tern__child_watch(tern_loop *loop, struct tern__child *c, pid_t pid,
                      tern__child_exited_fn exited);
void tern__child_release(tern_loop *loop, struct tern__child *c);
/* Whether the reaper's thread exists (process_reap.c; the test seam's
 * source, runtime/loop/seams.c). */
bool tern__reaper_running(void);
/* Stop watching a child that has not exited; it goes to the reaper. */
void tern__child_abandon(tern_loop *loop, struct tern__child *c);

/*
 * The reaper (process_reap.c): a process-wide thread that waits for the
 * children handed to it (pid, and its pidfd or -1) and reaps them, so a
 * child whose operation was cancelled never stays a zombie.
 */
void tern__reaper_adopt(pid_t pid, int pidfd);
/* SIGCHLD fallback: the handler tells the reaper too. */
void tern__reaper_sigchld(void);

/*
 * Child-exit seam: whether loops prepared from now on prefer their
 * backend's process filter (kqueue's EVFILT_PROC) to a pidfd, as a system
 * without pidfds does (on libkqueue, Linux, that is the only way to reach
 * the filter). Returns true (the setting always takes). A backend without
 * the filter is unaffected. tern__child_native_count: how many children
 * have been watched through a backend's filter, process-wide, so far.
 */
bool tern__child_native(bool on);
unsigned long tern__child_native_count(void);

#endif
