/*
 * File watching: news of a file or a directory changing, being renamed or
 * removed. Included by tern.h. How each system reports (inotify, EVFILT_VNODE, stat
 * polling) and what each can tell is in docs/process.md ("File watching").
 */
#ifndef TERN_WATCH_H
#define TERN_WATCH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    TERN_WATCH_CHANGE = 1u << 0, /* contents or attributes changed */
    TERN_WATCH_RENAME = 1u << 1, /* a name appeared, went away or moved */
    TERN_WATCH_GONE = 1u << 2,   /* the watched path itself was removed: the watch ended */
};

/*
 * A watch's news, in step 2:
 *   status 0: `events` (TERN_WATCH_CHANGE and/or TERN_WATCH_RENAME)
 *     happened to the watched file, or, in a watched directory, to the
 *     entry `name` (NULL when the system does not say which, and for the
 *     watched path itself). The watch goes on.
 *   status -ENOENT, events TERN_WATCH_GONE: the watched file or directory
 *     was removed. This is the watch's last callback; its id is stale.
 *   another negative status: the watch failed (reading the system's
 *     reports, -ENOMEM...) and ended; its last callback.
 * `name` is valid only during the callback.
 */
typedef void (*tern_watch_cb)(tern_loop *loop, tern_id id, int status, unsigned events,
                              const char *name, void *arg);

/*
 * tern_watch_start: watch path (a file or a directory; not its
 * subdirectories) until stopped or removed. interval_ns is how often the
 * stat-polling fallback looks (0: one second); systems with change
 * notification ignore it.
 * Requires: loop != NULL; path != NULL; cb != NULL.
 * Returns: 0 and *idp (if idp != NULL); -EINVAL for a NULL path or cb or an
 *          interval over 2^62 ns; the error of looking at path (-ENOENT,
 *          -EACCES, -ENOTDIR...); -EMFILE, -ENOSPC (the system's watch
 *          limit), -ENOMEM; -ENOTSUP on Windows, which has no
 *          file-watching mechanism yet; -EAGAIN at max_operations;
 *          -ESHUTDOWN while the loop is being freed. On error cb never
 *          runs.
 * Ownership: path is copied.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_watch_start(tern_loop *loop, const char *path, uint64_t interval_ns,
                                 tern_watch_cb cb, void *arg, tern_id *idp);

/*
 * tern_watch_stop: stop watching; no callback runs after it returns (news
 * already read is dropped). Same as tern_cancel on the id. A watch is
 * referenced like a timer (tern_unref applies); teardown stops it the same
 * way, without a callback.
 * Requires: loop != NULL.
 * Returns: 0; -EINVAL for id 0; -ENOENT for an unknown, stale or ended id,
 *          or an id that is not a watch.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_watch_stop(tern_loop *loop, tern_id id);

#ifdef __cplusplus
}
#endif

#endif
