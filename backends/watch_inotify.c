/*
 * File watching through inotify (watch_ops.h): one instance per watch, so
 * a watch's descriptor carries its news alone and closing it is the whole
 * of stopping.
 *
 * Quirks worth knowing:
 * - A watch on a file that loses its last link gets IN_DELETE_SELF and
 *   then IN_IGNORED; either one is the end.
 * - A full kernel queue arrives as IN_Q_OVERFLOW with no name: something
 *   changed, the caller has to look again.
 */
#include <errno.h>
#include <stdalign.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "fault.h"
#include "tern.h"
#include "watch_ops.h"

#define MASK                                                                          \
    (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_CREATE | IN_DELETE | IN_MOVED_FROM | \
     IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF)

static int inotify_open(struct tern__watch_src *src, const char *path)
{
    src->fd = -1;
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
    src->fd = fd;
    return 0;
}

static void inotify_close(struct tern__watch_src *src)
{
    if (src->fd >= 0)
        close(src->fd);
    src->fd = -1;
}

static int inotify_note(struct tern__watch_src *src, unsigned fired)
{
    (void)src;
    (void)fired;
    return 1; /* the descriptor holds the news: read takes it */
}

static void inotify_read(struct tern__watch_src *src, tern__watch_emit_fn emit, void *ctx)
{
    alignas(struct inotify_event) char buf[8192];
    /* One read per call; more stays readable for the next. */
    ssize_t n = read(src->fd, buf, sizeof(buf));
    if (n < 0) {
        if (errno != EAGAIN && errno != EINTR)
            (void)emit(ctx, &(struct tern__watch_news){.status = -errno});
        return;
    }
    for (ssize_t off = 0; off < n;) {
        const struct inotify_event *ev = (const struct inotify_event *)(buf + off);
        off += (ssize_t)(sizeof(*ev) + ev->len);
        uint32_t m = ev->mask;
        if (m & (IN_DELETE_SELF | IN_IGNORED)) {
            (void)emit(ctx,
                       &(struct tern__watch_news){.status = -ENOENT, .events = TERN_WATCH_GONE});
            return;
        }
        unsigned e = 0;
        if (m & IN_Q_OVERFLOW)
            e = TERN_WATCH_CHANGE | TERN_WATCH_RENAME;
        if (m & (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE))
            e |= TERN_WATCH_CHANGE;
        if (m & (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_MOVE_SELF))
            e |= TERN_WATCH_RENAME;
        struct tern__watch_news news = {.events = e, .name = ev->len > 0 ? ev->name : NULL};
        if (e != 0 && !emit(ctx, &news))
            return;
    }
}

const struct tern__watch_ops tern__watch_inotify = {
    .name = "inotify",
    .interest = TERN_READABLE,
    .open = inotify_open,
    .close = inotify_close,
    .note = inotify_note,
    .read = inotify_read,
};
