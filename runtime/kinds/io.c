/*
 * fd watchers, in two layers. `struct tern__io` (loop_p.h) is one fd's
 * registration with the backend, embedded in the record that owns the fd
 * and driven by pointer: streams and signal watchers use it directly, so
 * the runtime never creates a public operation for itself. The public
 * watcher (tern_io_start) is an op that embeds one, plus a callback.
 *
 * Level-triggered: the backend reports a condition for as long as it
 * holds; each report reaches the owner's `fired` hook in step 4, which
 * queues the owner for the next step 2 (reports that arrive while it is
 * still queued merge into one callback).
 *
 * G4 — one fd, one loop — is kept by a process-wide registry, because two
 * loops watching one fd would each consume readiness meant for the other.
 */
#include <errno.h>
#include <stdlib.h>

#include "admit.h"
#include "container.h"
#include "loop_p.h"
#include "os_thread.h"

struct watcher {
    struct tern__op op;
    struct tern__io io;
    unsigned revents; /* reported since the last callback */
    tern_io_cb cb;
    void *arg;
};

/* ------------------------------------------------------------------ */
/* The process-wide registry (G4)                                      */
/* ------------------------------------------------------------------ */

static tern__mutex_t registry_lock = TERN__MUTEX_INIT;
static tern_loop **registry; /* fd -> owning loop; guarded by registry_lock */
static unsigned registry_len;
static unsigned registry_used; /* freed when it drops to 0, so exits are valgrind-clean */

static int fd_claim(int fd, tern_loop *loop)
{
    int rc = 0;
    tern__mutex_lock(&registry_lock);
    if ((unsigned)fd >= registry_len) {
        unsigned n = registry_len ? registry_len : 256;
        while (n <= (unsigned)fd)
            n *= 2;
        tern_loop **r = tern__realloc(registry, n * sizeof(*r));
        if (r == NULL) {
            rc = -ENOMEM;
            goto out;
        }
        for (unsigned i = registry_len; i < n; i++)
            r[i] = NULL;
        registry = r;
        registry_len = n;
    }
    if (registry[fd] != NULL) {
        rc = -EEXIST;
    } else {
        registry[fd] = loop;
        registry_used++;
    }
out:
    tern__mutex_unlock(&registry_lock);
    return rc;
}

static void fd_release(int fd)
{
    tern__mutex_lock(&registry_lock);
    TERN_INSIST((unsigned)fd < registry_len && registry[fd] != NULL);
    registry[fd] = NULL;
    if (--registry_used == 0) {
        free(registry);
        registry = NULL;
        registry_len = 0;
    }
    tern__mutex_unlock(&registry_lock);
}

/*
 * fork(): a thread of the parent may hold the lock at that moment and does
 * not exist in the child, so the lock is taken around the fork. The
 * parent's loops are unusable in the child (their threads are gone), so
 * the child forgets their registrations: its own loops may watch the
 * descriptors it inherited.
 */
static void registry_before_fork(void)
{
    tern__mutex_lock(&registry_lock);
}

static void registry_after_fork_parent(void)
{
    tern__mutex_unlock(&registry_lock);
}

static void registry_after_fork_child(void)
{
    free(registry);
    registry = NULL;
    registry_len = registry_used = 0;
    tern__mutex_unlock(&registry_lock);
}

__attribute__((constructor)) static void registry_fork_handlers(void)
{
    tern__atfork(registry_before_fork, registry_after_fork_parent, registry_after_fork_child);
}

/* ------------------------------------------------------------------ */
/* Embedded watchers                                                   */
/* ------------------------------------------------------------------ */

static int grow_fds(tern_loop *loop, int fd)
{
    if ((unsigned)fd < loop->fds_len)
        return 0;
    unsigned n = loop->fds_len ? loop->fds_len : 64;
    while (n <= (unsigned)fd)
        n *= 2;
    struct tern__io **f = tern__realloc(loop->fds, n * sizeof(*f));
    if (f == NULL)
        return -ENOMEM;
    for (unsigned i = loop->fds_len; i < n; i++)
        f[i] = NULL;
    loop->fds = f;
    loop->fds_len = n;
    return 0;
}

int tern__io_start(tern_loop *loop, struct tern__io *io, int fd, unsigned events)
{
    TERN_INSIST(!tern__io_active(io) && fd >= 0 && events != 0);
    if (fd == loop->wake.fd || fd == loop->backend.fd)
        return -EEXIST;
    int rc = grow_fds(loop, fd);
    if (rc < 0)
        return rc;
    if (loop->fds[fd] != NULL)
        return -EEXIST;
    if ((rc = fd_claim(fd, loop)) < 0)
        return rc;
    if ((rc = loop->backend.ops->modify(&loop->backend, fd, 0, events)) < 0) {
        fd_release(fd);
        return rc;
    }
    io->fd = fd;
    io->events = events;
    loop->fds[fd] = io;
    loop->io_count++;
    return 0;
}

int tern__io_modify(tern_loop *loop, struct tern__io *io, unsigned events)
{
    TERN_INSIST(tern__io_active(io) && events != 0);
    if (events == io->events)
        return 0;
    int rc = loop->backend.ops->modify(&loop->backend, io->fd, io->events, events);
    if (rc < 0)
        return rc;
    io->events = events;
    return 0;
}

void tern__io_stop(tern_loop *loop, struct tern__io *io)
{
    TERN_INSIST(tern__io_active(io) && loop->fds[io->fd] == io);
    /*
     * The delete may fail if the caller already closed the fd (epoll then
     * forgot it by itself); either way the kernel no longer reports it.
     */
    (void)loop->backend.ops->modify(&loop->backend, io->fd, io->events, 0);
    loop->fds[io->fd] = NULL;
    TERN_DECREMENT(loop->io_count);
    fd_release(io->fd);
    io->fd = -1;
    io->events = 0;
}

void tern__io_fired(tern_loop *loop, int fd, unsigned events)
{
    if ((unsigned)fd >= loop->fds_len || loop->fds[fd] == NULL)
        return; /* stopped after the kernel reported it */
    struct tern__io *io = loop->fds[fd];
    io->fired(loop, io, events);
}

/* ------------------------------------------------------------------ */
/* Public watchers                                                     */
/* ------------------------------------------------------------------ */

static void stop_watcher(tern_loop *loop, struct watcher *w)
{
    tern__io_stop(loop, &w->io);
    tern__op_finish(loop, &w->op);
}

static void watcher_fired(tern_loop *loop, struct tern__io *io, unsigned events)
{
    struct watcher *w = tern__container_of(io, struct watcher, io);
    w->revents |= events;
    tern__op_ready(loop, &w->op);
}

static void watcher_dispatch(tern_loop *loop, struct tern__op *op)
{
    struct watcher *w = (struct watcher *)op;
    unsigned ev = w->revents & (w->io.events | TERN_HANGUP | TERN_ERROR);
    w->revents = 0;
    if (ev != 0)
        w->cb(loop, op->id, w->io.fd, ev, w->arg);
}

static int watcher_cancel(tern_loop *loop, struct tern__op *op)
{
    stop_watcher(loop, (struct watcher *)op);
    return 0;
}

static void watcher_free(tern_loop *loop, struct tern__op *op)
{
    (void)loop;
    free(op);
}

static const struct tern__op_class watcher_class = {
    .name = "io",
    .dispatch = watcher_dispatch,
    .cancel = watcher_cancel,
    .free = watcher_free,
    .refable = true,
};

static bool valid_events(unsigned events)
{
    return events != 0 && (events & ~(unsigned)(TERN_READABLE | TERN_WRITABLE)) == 0;
}

int tern_io_start(tern_loop *loop, tern_os_sock_t fd, unsigned events, tern_io_cb cb, void *arg,
                  tern_id *idp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    int rc = tern__fd_watchable((int)fd);
    if (rc < 0)
        return rc;
    if (cb == NULL || !valid_events(events))
        return -EINVAL;
    /* Refused before admission, so a busy fd never reads as -EAGAIN. */
    if (fd == loop->wake.fd || fd == loop->backend.fd ||
        ((unsigned)fd < loop->fds_len && loop->fds[fd] != NULL))
        return -EEXIST;
    rc = tern__op_admit(loop);
    if (rc < 0)
        return rc;
    struct watcher *w = tern__malloc(sizeof(*w));
    if (w == NULL) {
        tern__op_unadmit(loop);
        return -ENOMEM;
    }
    *w = (struct watcher){.cb = cb, .arg = arg};
    tern__io_init(&w->io, watcher_fired);
    if ((rc = tern__io_start(loop, &w->io, fd, events)) < 0)
        goto fail;
    if ((rc = tern__op_add(loop, &w->op, &watcher_class)) < 0) {
        tern__io_stop(loop, &w->io);
        goto fail;
    }
    if (idp != NULL)
        *idp = w->op.id;
    return 0;

fail:
    free(w);
    tern__op_unadmit(loop);
    return rc;
}

static struct watcher *find_watcher(tern_loop *loop, tern_id id)
{
    struct tern__op *op = tern__op_find(loop, id);
    return op != NULL && op->cls == &watcher_class ? (struct watcher *)op : NULL;
}

int tern_io_modify(tern_loop *loop, tern_id id, unsigned events)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (id == 0)
        return -EINVAL;
    struct watcher *w = find_watcher(loop, id);
    if (w == NULL)
        return -ENOENT;
    if (!valid_events(events))
        return -EINVAL;
    return tern__io_modify(loop, &w->io, events);
}

int tern_io_stop(tern_loop *loop, tern_id id)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (id == 0)
        return -EINVAL;
    struct watcher *w = find_watcher(loop, id);
    if (w == NULL)
        return -ENOENT;
    stop_watcher(loop, w);
    return 0;
}
