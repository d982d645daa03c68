/*
 * The epoll backend (Linux).
 *
 * Quirks worth knowing:
 * - epoll registers the open file description, not the descriptor: a
 *   closed fd that was dup()ed elsewhere keeps reporting. Watchers must be
 *   stopped before their fd is closed (the header says so).
 * - Regular files cannot be added (EPERM); the error is passed on.
 *   Character devices without a poll method (/dev/null, /dev/zero) fail
 *   the same way, though a stream may hold one: those are kept on a list
 *   of their own and reported ready for their whole interest on every
 *   wait, as poll and kqueue report them, and a wait with one on the list
 *   does not block.
 * - EPOLLHUP and EPOLLERR are always reported, whatever the interest.
 * - A peer's half-close (shutdown(SHUT_WR)) is EPOLLRDHUP, reported only
 *   when asked for, and tern never asks: a reading stream learns end of
 *   stream from recv() returning 0 (the fd turns readable anyway), and a
 *   writer learns of a gone peer from EPOLLERR/EPOLLHUP or its send. Asked
 *   for, it would only add a bit no caller reads, and on a watcher that
 *   waits for writability alone it would report on every turn after the
 *   half-close (level-triggered), spinning the loop. So TERN_HANGUP here
 *   is EPOLLHUP: both directions are down. (kqueue's EV_EOF differs; see
 *   kqueue.c.)
 * - The timeout is in milliseconds; nanoseconds are rounded up so a wait
 *   never ends before the deadline it was computed from. Waits longer than
 *   INT_MAX ms are clamped (the loop simply turns again).
 */
#include <errno.h>
#include <limits.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "fault.h"
#include "tern.h"

static int epoll_init(struct tern__backend *b)
{
    int rc = tern__fd_fault();
    if (rc < 0)
        return rc;
    int fd = epoll_create1(EPOLL_CLOEXEC);
    if (fd < 0)
        return -errno;
    b->fd = fd;
    b->state = NULL;
    return 0;
}

/* The descriptors epoll refused but that are always ready (b->state). */
struct always_ready {
    unsigned n, cap;
    unsigned next; /* where the next wait starts reporting, so none is left out */
    struct tern__fired fd[];
};

static void epoll_close_backend(struct tern__backend *b)
{
    close(b->fd);
    b->fd = -1;
    tern__free(b->state);
    b->state = NULL;
}

static struct tern__fired *always_ready_find(struct tern__backend *b, int fd)
{
    struct always_ready *a = b->state;
    for (unsigned i = 0; a != NULL && i < a->n; i++)
        if (a->fd[i].fd == fd)
            return &a->fd[i];
    return NULL;
}

/* Only a character device: a regular file stays refused, since epoll's
 * refusal is what tells a caller to use file requests for it. */
static int always_ready_add(struct tern__backend *b, int fd, unsigned events)
{
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISCHR(st.st_mode))
        return -EPERM;
    struct always_ready *a = b->state;
    if (a == NULL || a->n == a->cap) {
        unsigned cap = a == NULL ? 4 : a->cap * 2;
        struct always_ready *g = tern__realloc(a, sizeof(*a) + cap * sizeof(a->fd[0]));
        if (g == NULL)
            return -ENOMEM;
        if (a == NULL)
            g->n = g->next = 0;
        g->cap = cap;
        b->state = a = g;
    }
    a->fd[a->n++] = (struct tern__fired){.fd = fd, .events = events};
    return 0;
}

static uint32_t to_epoll(unsigned events)
{
    return ((events & TERN_READABLE) ? EPOLLIN : 0) | ((events & TERN_WRITABLE) ? EPOLLOUT : 0);
}

static int epoll_modify(struct tern__backend *b, int fd, unsigned old_events, unsigned new_events)
{
    struct epoll_event ev = {.events = to_epoll(new_events), .data.fd = fd};
    int op = old_events == 0 ? EPOLL_CTL_ADD : new_events == 0 ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;
    struct tern__fired *ready = op == EPOLL_CTL_ADD ? NULL : always_ready_find(b, fd);
    if (ready != NULL) {
        struct always_ready *a = b->state;
        if (new_events != 0)
            ready->events = new_events;
        else
            *ready = a->fd[--a->n];
        return 0;
    }
    if (epoll_ctl(b->fd, op, fd, &ev) < 0)
        return op == EPOLL_CTL_ADD && errno == EPERM ? always_ready_add(b, fd, new_events) : -errno;
    return 0;
}

/* Fill out[] from what epoll reported. */
static inline __attribute__((always_inline)) void from_epoll(const struct epoll_event *evs, int n,
                                                             struct tern__fired *out)
{
    for (int i = 0; i < n; i++) {
        uint32_t e = evs[i].events;
        out[i].fd = evs[i].data.fd;
        out[i].events = ((e & EPOLLIN) ? TERN_READABLE : 0) | ((e & EPOLLOUT) ? TERN_WRITABLE : 0) |
                        ((e & EPOLLHUP) ? TERN_HANGUP : 0) | ((e & EPOLLERR) ? TERN_ERROR : 0);
    }
}

/* Always-ready descriptors first; those the array cannot hold now lead
 * the next wait, which does not block either. Off the common path. */
__attribute__((noinline)) static int wait_with_always_ready(struct tern__backend *b,
                                                            struct tern__fired *out, int max)
{
    struct epoll_event evs[max];
    struct always_ready *a = b->state;
    int k = 0;
    for (; k < (int)a->n && k < max; k++)
        out[k] = a->fd[(a->next + (unsigned)k) % a->n];
    a->next = (a->next + (unsigned)k) % a->n;
    int n = k < max ? epoll_wait(b->fd, evs, max - k, 0) : 0;
    if (n < 0)
        return errno == EINTR ? k : -errno;
    from_epoll(evs, n, out + k);
    return k + n;
}

static int epoll_wait_backend(struct tern__backend *b, int64_t timeout_ns, struct tern__fired *out,
                              int max)
{
    struct always_ready *a = b->state;
    if (__builtin_expect(a != NULL && a->n != 0, 0))
        return wait_with_always_ready(b, out, max);
    struct epoll_event evs[max];
    int ms = -1;
    if (timeout_ns >= 0) {
        int64_t r =
            timeout_ns / 1000000 + (timeout_ns % 1000000 != 0); /* up, never past INT64_MAX */
        ms = r > INT_MAX ? INT_MAX : (int)r;
    }
    int n = epoll_wait(b->fd, evs, max, ms);
    if (n < 0)
        return errno == EINTR ? 0 : -errno;
    from_epoll(evs, n, out);
    return n;
}

const struct tern__backend_ops tern__backend_epoll = {
    .name = "epoll",
    .init = epoll_init,
    .close = epoll_close_backend,
    .modify = epoll_modify,
    .wait = epoll_wait_backend,
};
