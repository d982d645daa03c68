/*
 * File watching by looking (watch_ops.h): the portable mechanism, which
 * needs nothing beyond stat(2). The runtime sets the pace; each look
 * compares what stat says with the last look.
 *
 * Quirks worth knowing:
 * - It follows the path, not the inode: a path that comes to name another
 *   file is a RENAME, and one that stops existing ends the watch.
 * - Two changes within one interval, or within the file system's time
 *   granularity, are one CHANGE or none: only a difference is news.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fault.h"
#include "tern.h"
#include "watch_ops.h"

static bool same_time(struct timespec a, struct timespec b)
{
    return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

static int stat_open(struct tern__watch_src *src, const char *path)
{
    src->fd = -1;
    src->u.stat.pending = 0;
    src->u.stat.error = 0;
    src->u.stat.path = NULL;
    if (stat(path, &src->u.stat.last) < 0)
        return -errno;
    size_t len = strlen(path) + 1;
    if ((src->u.stat.path = tern__malloc(len)) == NULL)
        return -ENOMEM;
    memcpy(src->u.stat.path, path, len);
    return 0;
}

static void stat_close(struct tern__watch_src *src)
{
    free(src->u.stat.path);
    src->u.stat.path = NULL;
}

/* What differs between two looks at one path, as TERN_WATCH_* bits. */
static unsigned difference(const struct stat *was, const struct stat *st)
{
    if (st->st_dev != was->st_dev || st->st_ino != was->st_ino)
        return TERN_WATCH_RENAME;
    if (S_ISDIR(st->st_mode)) {
        if (!same_time(st->st_mtim, was->st_mtim) || st->st_nlink != was->st_nlink)
            return TERN_WATCH_RENAME;
        if (!same_time(st->st_ctim, was->st_ctim) || st->st_mode != was->st_mode)
            return TERN_WATCH_CHANGE;
        return 0;
    }
    if (!same_time(st->st_mtim, was->st_mtim) || !same_time(st->st_ctim, was->st_ctim) ||
        st->st_size != was->st_size || st->st_mode != was->st_mode || st->st_nlink != was->st_nlink)
        return TERN_WATCH_CHANGE;
    return 0;
}

static int stat_note(struct tern__watch_src *src, unsigned fired)
{
    (void)fired;
    struct stat st;
    if (stat(src->u.stat.path, &st) < 0) {
        src->u.stat.error = -errno;
        return src->u.stat.error;
    }
    unsigned e = difference(&src->u.stat.last, &st);
    src->u.stat.last = st;
    src->u.stat.pending |= e;
    return e != 0;
}

static void stat_read(struct tern__watch_src *src, tern__watch_emit_fn emit, void *ctx)
{
    unsigned e = src->u.stat.pending;
    src->u.stat.pending = 0;
    if (e != 0 && !emit(ctx, &(struct tern__watch_news){.events = e}))
        return;
    int error = src->u.stat.error;
    if (error != 0)
        (void)emit(ctx, &(struct tern__watch_news){
                            .status = error, .events = error == -ENOENT ? TERN_WATCH_GONE : 0});
}

const struct tern__watch_ops tern__watch_stat = {
    .name = "stat",
    .interest = 0,
    .open = stat_open,
    .close = stat_close,
    .note = stat_note,
    .read = stat_read,
};
