/*
 * File watches. Two sources, chosen when the library is built:
 *
 * inotify (Linux, TERN_HAVE_INOTIFY): one inotify instance per watch,
 * its descriptor watched like any other (so it works on every backend,
 * kqueue through EVFILT_READ included). Reports carry the entry's name in
 * a watched directory. The watch follows the inode: a watched file that is
 * renamed reports TERN_WATCH_RENAME and goes on; one that is removed (its
 * last link gone and no one holding it open) ends the watch with
 * TERN_WATCH_GONE. A full kernel queue (IN_Q_OVERFLOW) is reported as
 * CHANGE | RENAME with no name: look again.
 *
 * EVFILT_VNODE (a loop whose backend has file-change filters: kqueue,
 * TERN_HAVE_KQUEUE): the watched file or directory is opened (read-only,
 * close-on-exec) and the backend reports each change to that descriptor
 * (backend.h, TERN__VNODE). It follows the inode as inotify does, but
 * knows no names: a directory's entries coming, going or moving are a
 * RENAME without a name, and a file inside it being written is not seen
 * (libkqueue, on inotify, reports that too, as a RENAME). The system says
 * a link was removed, not that the last one was, so the link count of the
 * open descriptor decides GONE. It takes precedence over inotify where
 * both are built (libkqueue on Linux), so the code the BSDs and macOS run
 * is the code the kqueue conformance suite tests.
 *
 * stat polling (every other build): a repeating internal deadline on the
 * loop's heap; each time it comes, step 5 stats the path on the loop
 * thread and compares what it sees (device and inode, size, mode, link
 * count, modification and change times) with last time. It follows the
 * path, not the inode: a path that no longer exists ends the watch (GONE),
 * a path now naming another file is a RENAME, anything else that moved is
 * a CHANGE. It never knows names: in a directory it sees that an entry
 * came, went or moved (the directory's times change: RENAME), not which,
 * and it does not see a file inside being written.
 *
 * Dispatch reads and reports in step 2. A callback may stop its own watch,
 * so each report first checks by id that the watch still lives (ids are
 * never reused).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef TERN_HAVE_INOTIFY
#include <sys/inotify.h>
#endif

#include "admit.h"
#include "heap.h"
#include "loop_p.h"

#define DEFAULT_INTERVAL_NS UINT64_C(1000000000)

#if defined(TERN_HAVE_INOTIFY) || defined(TERN_HAVE_KQUEUE)
#define HAVE_DESCRIPTOR_SOURCE 1
#endif

enum source { SOURCE_STAT, SOURCE_INOTIFY, SOURCE_VNODE };

struct watch {
    struct tern__op op;
    tern_watch_cb cb;
    void *arg;
    enum source source;
#ifdef HAVE_DESCRIPTOR_SOURCE
    struct tern__io io; /* inotify's descriptor, or the watched file's (vnode) */
#endif
#ifdef TERN_HAVE_KQUEUE
    unsigned seen; /* TERN__VNODE_* bits reported since the last dispatch */
    bool dir;
#endif
#ifndef TERN_HAVE_INOTIFY
    uint64_t interval;
    struct stat last;
    unsigned pending; /* events seen by the last look, not yet reported */
    int error;        /* the look that ended it (-ENOENT: gone) */
    char *path;
#endif
};

/* The source a watch on this loop uses (the file's header says why). */
static enum source source_for(const tern_loop *loop)
{
#ifdef TERN_HAVE_KQUEUE
    if (loop->backend.ops->vnode)
        return SOURCE_VNODE;
#else
    (void)loop;
#endif
#ifdef TERN_HAVE_INOTIFY
    return SOURCE_INOTIFY;
#else
    return SOURCE_STAT;
#endif
}

const char *tern__watch_source(const tern_loop *loop)
{
    static const char *const names[] = {
        [SOURCE_STAT] = "stat",
        [SOURCE_INOTIFY] = "inotify",
        [SOURCE_VNODE] = "vnode",
    };
    return names[source_for(loop)];
}

static struct watch *find_watch(tern_loop *loop, tern_id id);

static void watch_free(tern_loop *loop, struct tern__op *op)
{
    (void)loop;
#ifndef TERN_HAVE_INOTIFY
    free(((struct watch *)op)->path);
#endif
    free(op);
}

/* Undo a source_start that succeeded: nothing is reported any more. */
static void source_stop(tern_loop *loop, struct watch *w)
{
#ifdef HAVE_DESCRIPTOR_SOURCE
    if (w->source != SOURCE_STAT) {
        int fd = w->io.fd;
        tern__io_stop(loop, &w->io);
        close(fd);
        return;
    }
#endif
#ifndef TERN_HAVE_INOTIFY
    if (tern__deadline_armed(&w->op))
        tern__deadline_disarm(loop, &w->op);
    tern__deadline_unclaim(loop);
#endif
}

/* End the watch (no callback). */
static void watch_end(tern_loop *loop, struct watch *w)
{
    source_stop(loop, w);
    tern__op_finish(loop, &w->op);
}

/* Report one piece of news; false when the watch ended during it. */
static bool report(tern_loop *loop, tern_id id, int status, unsigned events, const char *name)
{
    struct watch *w = find_watch(loop, id);
    if (w == NULL)
        return false; /* stopped by an earlier callback */
    tern_watch_cb cb = w->cb;
    void *arg = w->arg;
    if (status != 0)
        watch_end(loop, w); /* the last callback: the id is stale in it */
    cb(loop, id, status, events, name, arg);
    return status == 0;
}

#ifdef TERN_HAVE_INOTIFY

#define MASK (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_CREATE | IN_DELETE | IN_MOVED_FROM | \
              IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF)

static void inotify_fired(tern_loop *loop, struct tern__io *io, unsigned events)
{
    (void)events;
    struct watch *w = caa_container_of(io, struct watch, io);
    tern__op_ready(loop, &w->op);
}

static void inotify_dispatch(tern_loop *loop, struct watch *w)
{
    tern_id id = w->op.id;
    alignas(struct inotify_event) char buf[8192];
    /* One read per turn; more stays readable for the next. */
    ssize_t n = read(w->io.fd, buf, sizeof(buf));
    if (n < 0) {
        if (errno != EAGAIN && errno != EINTR)
            (void)report(loop, id, -errno, 0, NULL);
        return;
    }
    for (ssize_t off = 0; off < n;) {
        const struct inotify_event *ev = (const struct inotify_event *)(buf + off);
        off += (ssize_t)(sizeof(*ev) + ev->len);
        const char *name = ev->len > 0 ? ev->name : NULL;
        uint32_t m = ev->mask;
        if (m & (IN_DELETE_SELF | IN_IGNORED)) {
            (void)report(loop, id, -ENOENT, TERN_WATCH_GONE, NULL);
            return;
        }
        unsigned e = 0;
        if (m & IN_Q_OVERFLOW)
            e = TERN_WATCH_CHANGE | TERN_WATCH_RENAME;
        if (m & (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE))
            e |= TERN_WATCH_CHANGE;
        if (m & (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_MOVE_SELF))
            e |= TERN_WATCH_RENAME;
        if (e != 0 && !report(loop, id, 0, e, name))
            return;
    }
}

static int inotify_start(tern_loop *loop, struct watch *w, const char *path)
{
    int rc = tern__fd_fault();
    if (rc < 0)
        return rc;
    int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (inotify_add_watch(fd, path, MASK) < 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    tern__io_init(&w->io, inotify_fired);
    if ((rc = tern__io_start(loop, &w->io, fd, TERN_READABLE)) < 0) {
        close(fd);
        return rc;
    }
    return 0;
}

#endif /* TERN_HAVE_INOTIFY */

#ifdef TERN_HAVE_KQUEUE

static void vnode_fired(tern_loop *loop, struct tern__io *io, unsigned events)
{
    struct watch *w = caa_container_of(io, struct watch, io);
    w->seen |= events;
    tern__op_ready(loop, &w->op);
}

static void vnode_dispatch(tern_loop *loop, struct watch *w)
{
    unsigned m = w->seen;
    w->seen = 0;
    /* In a directory a write is an entry coming, going or moving. */
    unsigned written = w->dir ? TERN_WATCH_RENAME : TERN_WATCH_CHANGE;
    unsigned e = 0;
    if (m & TERN__VNODE_DELETE) {
        struct stat st;
        if (fstat(w->io.fd, &st) < 0 || st.st_nlink == 0) {
            (void)report(loop, w->op.id, -ENOENT, TERN_WATCH_GONE, NULL);
            return;
        }
        e |= TERN_WATCH_CHANGE; /* another link is left: the link count changed */
    }
    if (m & TERN__VNODE_WRITE)
        e |= written;
    if (m & TERN__VNODE_ATTRIB)
        e |= TERN_WATCH_CHANGE;
    if (m & TERN__VNODE_RENAME)
        e |= TERN_WATCH_RENAME;
    if (e != 0)
        (void)report(loop, w->op.id, 0, e, NULL);
}

static int vnode_start(tern_loop *loop, struct watch *w, const char *path)
{
    int rc = tern__fd_fault();
    if (rc < 0)
        return rc;
#ifdef O_EVTONLY
    int flags = O_EVTONLY; /* macOS: does not keep the volume from unmounting */
#else
    int flags = O_RDONLY;
#endif
    /* O_NONBLOCK: opening a FIFO must not wait for a writer. */
    int fd = open(path, flags | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    w->dir = S_ISDIR(st.st_mode);
    tern__io_init(&w->io, vnode_fired);
    if ((rc = tern__io_start(loop, &w->io, fd, TERN__VNODE)) < 0) {
        close(fd);
        return rc;
    }
    return 0;
}

#endif /* TERN_HAVE_KQUEUE */

#ifndef TERN_HAVE_INOTIFY /* stat polling */

static bool same_time(struct timespec a, struct timespec b)
{
    return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

static void watch_expired(tern_loop *loop, struct tern__op *op)
{
    struct watch *w = (struct watch *)op;
    struct stat st;
    if (stat(w->path, &st) < 0) {
        w->error = -errno;
        tern__op_ready(loop, op); /* reported and ended in step 2 */
        return;
    }
    unsigned e = 0;
    if (st.st_dev != w->last.st_dev || st.st_ino != w->last.st_ino) {
        e |= TERN_WATCH_RENAME;
    } else if (S_ISDIR(st.st_mode)) {
        if (!same_time(st.st_mtim, w->last.st_mtim) || st.st_nlink != w->last.st_nlink)
            e |= TERN_WATCH_RENAME;
        else if (!same_time(st.st_ctim, w->last.st_ctim) || st.st_mode != w->last.st_mode)
            e |= TERN_WATCH_CHANGE;
    } else if (!same_time(st.st_mtim, w->last.st_mtim) || !same_time(st.st_ctim, w->last.st_ctim) ||
               st.st_size != w->last.st_size || st.st_mode != w->last.st_mode ||
               st.st_nlink != w->last.st_nlink) {
        e |= TERN_WATCH_CHANGE;
    }
    w->last = st;
    tern__deadline_arm(loop, op, loop->now + w->interval);
    if (e != 0) {
        w->pending |= e;
        tern__op_ready(loop, op);
    }
}

static void stat_dispatch(tern_loop *loop, struct watch *w)
{
    tern_id id = w->op.id;
    unsigned e = w->pending;
    w->pending = 0;
    if (e != 0 && !report(loop, id, 0, e, NULL))
        return;
    if (w->error != 0)
        (void)report(loop, id, w->error, w->error == -ENOENT ? TERN_WATCH_GONE : 0, NULL);
}

static int stat_start(tern_loop *loop, struct watch *w, const char *path, uint64_t interval)
{
    w->interval = interval != 0 ? interval : DEFAULT_INTERVAL_NS;
    if (stat(path, &w->last) < 0)
        return -errno;
    size_t len = strlen(path) + 1;
    if ((w->path = tern__malloc(len)) == NULL)
        return -ENOMEM;
    memcpy(w->path, path, len);
    int rc = tern__deadline_claim(loop);
    if (rc < 0) {
        free(w->path);
        w->path = NULL;
        return rc;
    }
    return 0;
}

#endif /* stat polling */

static int source_start(tern_loop *loop, struct watch *w, const char *path, uint64_t interval)
{
    (void)interval;
    switch (w->source) {
#ifdef TERN_HAVE_KQUEUE
    case SOURCE_VNODE:
        return vnode_start(loop, w, path);
#endif
#ifdef TERN_HAVE_INOTIFY
    case SOURCE_INOTIFY:
        return inotify_start(loop, w, path);
#else
    case SOURCE_STAT:
        return stat_start(loop, w, path, interval);
#endif
    default:
        TERN_UNREACHABLE();
    }
}

static void watch_dispatch(tern_loop *loop, struct tern__op *op)
{
    struct watch *w = (struct watch *)op;
    switch (w->source) {
#ifdef TERN_HAVE_KQUEUE
    case SOURCE_VNODE:
        vnode_dispatch(loop, w);
        break;
#endif
#ifdef TERN_HAVE_INOTIFY
    case SOURCE_INOTIFY:
        inotify_dispatch(loop, w);
        break;
#else
    case SOURCE_STAT:
        stat_dispatch(loop, w);
        break;
#endif
    default:
        TERN_UNREACHABLE();
    }
}

static int watch_cancel(tern_loop *loop, struct tern__op *op)
{
    watch_end(loop, (struct watch *)op);
    return TERN_CANCEL_STOPPED;
}

static const struct tern__op_class watch_class = {
    .name = "watch",
    .dispatch = watch_dispatch,
    .cancel = watch_cancel,
#ifndef TERN_HAVE_INOTIFY
    .expired = watch_expired,
#endif
    .free = watch_free,
    .refable = true,
};

static struct watch *find_watch(tern_loop *loop, tern_id id)
{
    struct tern__op *op = tern__op_find(loop, id);
    return op != NULL && op->cls == &watch_class ? (struct watch *)op : NULL;
}

int tern_watch_start(tern_loop *loop, const char *path, uint64_t interval_ns, tern_watch_cb cb,
                     void *arg, tern_id *idp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (path == NULL || cb == NULL || interval_ns > TERN__DURATION_MAX_NS)
        return -EINVAL;
    int rc = tern__op_admit(loop);
    if (rc < 0)
        return rc;
    struct watch *w = tern__calloc(1, sizeof(*w));
    if (w == NULL) {
        tern__op_unadmit(loop);
        return -ENOMEM;
    }
    w->cb = cb;
    w->arg = arg;
    w->source = source_for(loop);
    if ((rc = source_start(loop, w, path, interval_ns)) < 0)
        goto fail;
    if ((rc = tern__op_add(loop, &w->op, &watch_class)) < 0) {
        source_stop(loop, w);
        goto fail;
    }
#ifndef TERN_HAVE_INOTIFY
    if (w->source == SOURCE_STAT)
        tern__deadline_arm(loop, &w->op, loop->now + w->interval);
#endif
    if (idp != NULL)
        *idp = w->op.id;
    return 0;

fail:
    watch_free(loop, &w->op);
    tern__op_unadmit(loop);
    return rc;
}

int tern_watch_stop(tern_loop *loop, tern_id id)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (id == 0)
        return -EINVAL;
    struct watch *w = find_watch(loop, id);
    if (w == NULL)
        return -ENOENT;
    watch_end(loop, w);
    return 0;
}
