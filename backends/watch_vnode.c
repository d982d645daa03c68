/*
 * File watching through the backend's file-change filter (watch_ops.h):
 * the watched file or directory is opened and the backend reports what
 * happens to that descriptor (backend.h, TERN__VNODE). Built everywhere,
 * chosen only for a loop whose backend has the filter.
 *
 * Quirks worth knowing:
 * - The filter says a link was removed, not that the last one was: the
 *   open descriptor's link count tells the end from a link among several.
 * - A write to a directory is an entry coming, going or moving, so it is
 *   reported as a RENAME there and a CHANGE on a file.
 * - macOS's O_EVTONLY opens for events only, so a watch does not keep
 *   the volume from being unmounted.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "fault.h"
#include "tern.h"
#include "watch_ops.h"

static int vnode_open(struct tern__watch_src *src, const char *path)
{
    src->fd = -1;
    int rc = tern__fd_fault();
    if (rc < 0)
        return rc;
#ifdef O_EVTONLY
    int flags = O_EVTONLY;
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
    src->fd = fd;
    src->u.vnode.seen = 0;
    src->u.vnode.dir = S_ISDIR(st.st_mode);
    return 0;
}

static void vnode_close(struct tern__watch_src *src)
{
    if (src->fd >= 0)
        close(src->fd);
    src->fd = -1;
}

static int vnode_note(struct tern__watch_src *src, unsigned fired)
{
    src->u.vnode.seen |= fired;
    return 1;
}

static void vnode_read(struct tern__watch_src *src, tern__watch_emit_fn emit, void *ctx)
{
    unsigned m = src->u.vnode.seen;
    src->u.vnode.seen = 0;
    unsigned written = src->u.vnode.dir ? TERN_WATCH_RENAME : TERN_WATCH_CHANGE;
    unsigned e = 0;
    if (m & TERN__VNODE_DELETE) {
        struct stat st;
        if (fstat(src->fd, &st) < 0 || st.st_nlink == 0) {
            (void)emit(ctx,
                       &(struct tern__watch_news){.status = -ENOENT, .events = TERN_WATCH_GONE});
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
        (void)emit(ctx, &(struct tern__watch_news){.events = e});
}

const struct tern__watch_ops tern__watch_vnode = {
    .name = "vnode",
    .interest = TERN__VNODE,
    .open = vnode_open,
    .close = vnode_close,
    .note = vnode_note,
    .read = vnode_read,
};
