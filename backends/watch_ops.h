/*
 * How the system tells tern that a file or directory changed: one table of
 * operations per mechanism, as the pollers have theirs in backend.h. The
 * runtime's watch (runtime/kinds/watch.c) keeps the handle, its operation, the
 * interval and the callbacks; a mechanism opens, reads and closes what the
 * system offers and turns it into news the runtime can report, with no
 * loop and no user code in sight. tern__watch_choose (platform.h) picks
 * the mechanism for a loop.
 *
 * inotify (Linux): an instance per watch, its descriptor watched for
 * TERN_READABLE on any backend. Its news carries the entry's name in a
 * watched directory. It follows the inode: a watched file renamed is a
 * RENAME and goes on; one removed (its last link gone and nobody holding
 * it open) is GONE. A full kernel queue is CHANGE | RENAME with no name.
 *
 * vnode (a backend with file-change filters: kqueue's EVFILT_VNODE): the
 * watched file or directory opened read-only, watched for TERN__VNODE
 * (backend.h). It follows the inode too but knows no names: a directory's
 * entries coming, going or moving are a RENAME without a name, and a file
 * inside it being written is not seen. The system says a link was
 * removed, not that the last one was, so the open descriptor's link count
 * decides GONE. Where both are built (libkqueue on Linux) vnode wins, so
 * the kqueue conformance suite runs the code the BSDs and macOS run.
 *
 * stat (everything else, and portable builds): no descriptor. The runtime
 * asks for a look each interval; the look stats the path and compares
 * device and inode, size, mode, link count and the modification and
 * change times with the last look. It follows the path: a path that no
 * longer exists is GONE, one now naming another file is a RENAME, any
 * other difference a CHANGE. A directory's times changing is a RENAME
 * (an entry came, went or moved; which one it cannot say), and a file
 * inside being written is not seen.
 *
 * Every operation runs on the loop's thread, returns 0 or a negative
 * errno where it returns an int, and any descriptor it opens is
 * close-on-exec and non-blocking.
 */
#ifndef TERN_WATCH_OPS_H
#define TERN_WATCH_OPS_H

#include <stdbool.h>
#include <sys/stat.h>

/* One piece of news, in the public callback's terms. */
struct tern__watch_news {
    int status;       /* 0, or the negative errno that ends the watch */
    unsigned events;  /* TERN_WATCH_* */
    const char *name; /* an entry of a watched directory, or NULL */
};

/*
 * Hands one piece of news to the runtime. Returns false when the watch
 * ended in it (a status, or the callback stopped it): the mechanism's
 * state is freed by then, so read returns at once without touching it.
 */
typedef bool (*tern__watch_emit_fn)(void *ctx, const struct tern__watch_news *news);

/* A mechanism's state, embedded in the runtime's watch. */
struct tern__watch_src {
    int fd; /* what the loop watches for the ops' interest; -1 when looked at */
    union {
        struct {
            unsigned seen; /* TERN__VNODE_* bits noted since the last read */
            bool dir;
        } vnode;
        struct {
            struct stat last;
            unsigned pending; /* found by the last looks, not yet read */
            int error;        /* the look that failed (-ENOENT: gone) */
            char *path;
        } stat;
    } u;
};

struct tern__watch_ops {
    const char *name; /* "inotify", "vnode", "stat" */
    /*
     * What the runtime registers src->fd with the backend for after open:
     * TERN_READABLE, TERN__VNODE, or 0: no descriptor, the runtime calls
     * note(src, 0) on a timer instead.
     */
    unsigned interest;
    /*
     * Start watching path. Returns 0, or a negative errno (the path's
     * own, or -EMFILE and -ENOMEM, also from the fault seam) with nothing
     * left open.
     */
    int (*open)(struct tern__watch_src *src, const char *path);
    /* Release what open took. The runtime has unregistered src->fd. */
    void (*close)(struct tern__watch_src *src);
    /*
     * The backend reported `fired` on src->fd, or (interest 0) the
     * interval came. Returns 1 when there is news to read, 0 when there
     * is none, a negative errno when the news ends the watch: nothing more
     * to look at, though read still has it to tell.
     */
    int (*note)(struct tern__watch_src *src, unsigned fired);
    /*
     * Tell what changed, in order, through emit; stop at once when emit
     * returns false. Takes one batch: what is left stays readable.
     */
    void (*read)(struct tern__watch_src *src, tern__watch_emit_fn emit, void *ctx);
};

#ifdef TERN_HAVE_INOTIFY
extern const struct tern__watch_ops tern__watch_inotify;
#endif
extern const struct tern__watch_ops tern__watch_vnode;
extern const struct tern__watch_ops tern__watch_stat;

#endif
