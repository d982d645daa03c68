/*
 * The poll backend: the portable fallback, and a second implementation
 * that keeps the conformance suite honest about what is backend-specific.
 *
 * Quirks worth knowing:
 * - Each wait costs O(registered fds): fine for a fallback, not for 10k
 *   connections.
 * - There is no kernel object to hand to a host loop, so tern_loop_backend_fd
 *   returns the loop's wake descriptor instead (readable on wake-ups only).
 * - poll reports POLLNVAL for a closed fd; it is surfaced as TERN_ERROR.
 * - Regular files are always "ready"; they are accepted, unlike epoll.
 * - The timeout is in milliseconds and rounded up, as in epoll.c.
 * - poll reports readiness in array order, and a wait may hand back fewer
 *   than are ready (the caller's fired array is bounded). Scanning from
 *   index 0 every time would starve the entries late in the array for as
 *   long as the early ones stay ready, so each scan starts where the last
 *   truncated one stopped (epoll gets this from the kernel, which moves a
 *   reported level-triggered entry to the back of its ready list).
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>

#include "backend.h"
#include "fault.h"
#include "tern.h"

struct poll_state {
    struct pollfd *pfds; /* dense array of registered fds */
    unsigned len, cap;
    unsigned *index; /* fd -> position in pfds + 1 (0: absent) */
    unsigned index_len;
    unsigned next; /* where the next scan starts; may be >= len after deletes */
};

static int poll_init(struct tern__backend *b)
{
    struct poll_state *s = tern__calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    b->state = s;
    b->fd = -1;
    return 0;
}

static void poll_close_backend(struct tern__backend *b)
{
    struct poll_state *s = b->state;
    free(s->pfds);
    free(s->index);
    free(s);
    b->state = NULL;
}

static short to_poll(unsigned events)
{
    return (short)(((events & TERN_READABLE) ? POLLIN : 0) |
                   ((events & TERN_WRITABLE) ? POLLOUT : 0));
}

static int grow(struct poll_state *s, int fd)
{
    if ((unsigned)fd >= s->index_len) {
        unsigned n = s->index_len ? s->index_len : 64;
        while (n <= (unsigned)fd)
            n *= 2;
        unsigned *idx = tern__realloc(s->index, n * sizeof(*idx));
        if (idx == NULL)
            return -ENOMEM;
        for (unsigned i = s->index_len; i < n; i++)
            idx[i] = 0;
        s->index = idx;
        s->index_len = n;
    }
    if (s->len == s->cap) {
        unsigned n = s->cap ? s->cap * 2 : 16;
        struct pollfd *p = tern__realloc(s->pfds, n * sizeof(*p));
        if (p == NULL)
            return -ENOMEM;
        s->pfds = p;
        s->cap = n;
    }
    return 0;
}

static int poll_modify(struct tern__backend *b, int fd, unsigned old_events, unsigned new_events)
{
    struct poll_state *s = b->state;
    if (old_events == 0) {
        int rc = grow(s, fd);
        if (rc < 0)
            return rc;
        s->pfds[s->len] = (struct pollfd){.fd = fd, .events = to_poll(new_events)};
        s->index[fd] = ++s->len;
        return 0;
    }
    unsigned pos = s->index[fd] - 1;
    if (new_events != 0) {
        s->pfds[pos].events = to_poll(new_events);
        return 0;
    }
    /* Delete: move the last entry into the hole to keep the array dense. */
    s->len--;
    if (pos != s->len) {
        s->pfds[pos] = s->pfds[s->len];
        s->index[s->pfds[pos].fd] = pos + 1;
    }
    s->index[fd] = 0;
    return 0;
}

static int poll_wait_backend(struct tern__backend *b, int64_t timeout_ns, struct tern__fired *out,
                             int max)
{
    struct poll_state *s = b->state;
    int ms = -1;
    if (timeout_ns >= 0) {
        int64_t r =
            timeout_ns / 1000000 + (timeout_ns % 1000000 != 0); /* up, never past INT64_MAX */
        ms = r > INT_MAX ? INT_MAX : (int)r;
    }
    int n = poll(s->pfds, s->len, ms);
    if (n < 0)
        return errno == EINTR ? 0 : -errno;
    /*
     * Visit every entry once, starting at `next` and wrapping. When `out`
     * fills before the ready ones run out, the next scan starts just after
     * the last one reported, so every ready fd is reported within
     * ceil(ready / max) waits however long the others stay ready.
     */
    int k = 0;
    unsigned start = s->len > 0 ? s->next % s->len : 0;
    for (unsigned seen = 0; seen < s->len && n > 0; seen++) {
        unsigned i = start + seen < s->len ? start + seen : start + seen - s->len;
        short r = s->pfds[i].revents;
        if (r == 0)
            continue;
        if (k == max) {
            s->next = i; /* ready but left out: first in line next time */
            return k;
        }
        n--;
        out[k].fd = s->pfds[i].fd;
        out[k].events = ((r & POLLIN) ? TERN_READABLE : 0) | ((r & POLLOUT) ? TERN_WRITABLE : 0) |
                        ((r & POLLHUP) ? TERN_HANGUP : 0) |
                        ((r & (POLLERR | POLLNVAL)) ? TERN_ERROR : 0);
        k++;
    }
    return k;
}

const struct tern__backend_ops tern__backend_poll = {
    .name = "poll",
    .init = poll_init,
    .close = poll_close_backend,
    .modify = poll_modify,
    .wait = poll_wait_backend,
};
