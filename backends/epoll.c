/*
 * The epoll backend (Linux).
 *
 * Quirks worth knowing:
 * - epoll registers the open file description, not the descriptor: a
 *   closed fd that was dup()ed elsewhere keeps reporting. Watchers must be
 *   stopped before their fd is closed (the header says so).
 * - Regular files cannot be added (EPERM); the error is passed on.
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

static void epoll_close_backend(struct tern__backend *b)
{
    close(b->fd);
    b->fd = -1;
}

static uint32_t to_epoll(unsigned events)
{
    return ((events & TERN_READABLE) ? EPOLLIN : 0) | ((events & TERN_WRITABLE) ? EPOLLOUT : 0);
}

static int epoll_modify(struct tern__backend *b, int fd, unsigned old_events, unsigned new_events)
{
    struct epoll_event ev = {.events = to_epoll(new_events), .data.fd = fd};
    int op = old_events == 0 ? EPOLL_CTL_ADD : new_events == 0 ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;
    if (epoll_ctl(b->fd, op, fd, &ev) < 0)
        return -errno;
    return 0;
}

static int epoll_wait_backend(struct tern__backend *b, int64_t timeout_ns,
                              struct tern__fired *out, int max)
{
    struct epoll_event evs[max];
    int ms = -1;
    if (timeout_ns >= 0) {
        int64_t r = timeout_ns / 1000000 + (timeout_ns % 1000000 != 0); /* up, never past INT64_MAX */
        ms = r > INT_MAX ? INT_MAX : (int)r;
    }
    int n = epoll_wait(b->fd, evs, max, ms);
    if (n < 0)
        return errno == EINTR ? 0 : -errno;
    for (int i = 0; i < n; i++) {
        uint32_t e = evs[i].events;
        out[i].fd = evs[i].data.fd;
        out[i].events = ((e & EPOLLIN) ? TERN_READABLE : 0) | ((e & EPOLLOUT) ? TERN_WRITABLE : 0) |
                        ((e & EPOLLHUP) ? TERN_HANGUP : 0) |
                        ((e & EPOLLERR) ? TERN_ERROR : 0);
    }
    return n;
}

const struct tern__backend_ops tern__backend_epoll = {
    .name = "epoll",
    .init = epoll_init,
    .close = epoll_close_backend,
    .modify = epoll_modify,
    .wait = epoll_wait_backend,
};
