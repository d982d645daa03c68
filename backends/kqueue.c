/*
 * The kqueue backend (FreeBSD, OpenBSD, NetBSD, DragonFly, macOS; on
 * Linux through libkqueue, which is how CI checks it).
 *
 * Quirks worth knowing:
 * - Interest changes are not system calls. modify() appends to a
 *   changelist that the next wait hands to kevent together with the
 *   wait itself, so a turn that starts and stops a hundred watchers makes
 *   one syscall. The price: until that wait, the kernel has not seen the
 *   change, so a host that embeds the loop sees a new watcher's readiness
 *   on the kqueue descriptor only after one tern_loop_run_once.
 * - Read and write interest are two filters (EVFILT_READ, EVFILT_WRITE),
 *   so one descriptor can come back as two events; wait() merges them
 *   into one fired entry, as the core expects one per descriptor.
 * - A change that fails comes back as an EV_ERROR entry in the event
 *   list, one per change, provided the list has room for it; without
 *   room kevent would fail the whole call and skip the rest of the
 *   batch. The list therefore has room for every queued change plus the
 *   fired array, allocated when the change is queued, never in the wait. FreeBSD rewrites
 *   the flags of an error entry to EV_ERROR alone, so the failed change
 *   is told by its errno: ENOENT is a delete of a filter that closing the
 *   descriptor already removed (expected, ignored); anything else is
 *   reported to the descriptor's watcher, if it still has one, as
 *   TERN_ERROR (a delete of a closed fd says EBADF, but then no watcher
 *   is left to hear it).
 * - Because of that sizing kevent may return more descriptor events than
 *   the fired array holds. The surplus is dropped: every filter tern sets
 *   is level-triggered, so the next wait reports it again.
 * - EV_EOF replaces epoll's HANGUP: on the read filter it means the peer
 *   will send nothing more, which kqueue also reports for a half-close
 *   (shutdown(SHUT_WR)) where epoll reports only readability. Its fflags
 *   carry a socket error, surfaced as TERN_ERROR.
 * - kqueue watches the descriptor, not the open file: closing an fd
 *   removes its filters (unlike epoll, where a dup keeps it registered).
 *   Regular files are accepted and always readable, as under poll.
 * - The loop's wake-up is an EVFILT_USER event (NOTE_TRIGGER) where the
 *   system has it, so the loop needs no wake descriptor of its own; where
 *   it does not (OpenBSD before 7.x), and in portable builds, the core
 *   registers its wake pipe like on poll.
 * - libkqueue (Linux) hands out the write end of a private pipe as the
 *   kqueue descriptor: it never turns readable, so a host cannot watch
 *   it. There the backend offers no descriptor (the core then gives the
 *   host its wake descriptor, as under poll) and wakes through that wake
 *   descriptor, unless a test asks for EVFILT_USER
 *   (tern__kqueue_user_wake) to exercise that path.
 * - Signals are EVFILT_SIGNAL filters in the loop's own kqueue, reported
 *   as TERN__FIRED_SIGNAL entries. The filter only records deliveries
 *   made after it is added: a signal already pending when a watcher
 *   starts is not reported (signalfd would read it); stopping consumes it.
 *   It needs the signal blocked or ignored besides, or its action still
 *   runs (signal.c blocks it in the loop's thread).
 * - A child's exit is an EVFILT_PROC filter (NOTE_EXIT, one shot) whose
 *   udata names the descriptor to report it on; the runtime reaps. It is
 *   retrieved in the same first pass as signals, since retrieving it
 *   consumed it.
 * - File changes are EVFILT_VNODE filters (EV_CLEAR: each change once)
 *   on a descriptor the caller opened on the file. They are added and
 *   deleted at once, not through the changelist: an add's failure is the
 *   caller's to hear, and a delete queued behind a new add on a reused
 *   descriptor number would remove the new filter. Like the process
 *   filter they are retrieved in the first pass, since retrieving them
 *   consumed them; more changes than the fired array holds in one wait
 *   would lose the surplus (a watch per fired entry would be needed).
 *   NOTE_DELETE says a link was removed, not that the last one was: the
 *   caller looks at the link count. libkqueue builds the filter on
 *   inotify and reports NOTE_DELETE only when the count reaches 0, and a
 *   directory's NOTE_WRITE also for a file inside it being written.
 * - The timeout is a timespec: nanoseconds pass through exactly.
 * - A kqueue is not inherited across fork() on the BSDs and macOS.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/event.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "fault.h"
#include "tern.h"

#if defined(EVFILT_USER) && !defined(TERN_PORTABLE)
#define USE_USER_WAKE 1
#define WAKE_IDENT 0 /* EVFILT_USER idents are ours; no descriptor involved */
#ifdef TERN_LIBKQUEUE
static _Atomic bool user_wake = false;
#else
static _Atomic bool user_wake = true;
#endif

bool tern__kqueue_user_wake(bool on)
{
    atomic_store_explicit(&user_wake, on, memory_order_relaxed);
    return true;
}
#else
bool tern__kqueue_user_wake(bool on)
{
    (void)on;
    return false;
}
#endif

/* Events a wait can retrieve beyond its changes' errors (the fired array's size). */
#define EVENTS_SPARE 256

struct merge_slot {
    uint32_t seq; /* the wait that last reported this fd */
    int pos;      /* its entry in that wait's fired array */
};

struct kq_state {
    int kq;
    struct kevent *changes; /* applied by the next kevent call */
    int nchanges, changes_cap;
    struct kevent *events; /* changes_cap + EVENTS_SPARE: room for every EV_ERROR */
    int events_cap;
    struct merge_slot *merge; /* fd -> slot, to merge READ and WRITE */
    unsigned merge_len;
    uint32_t seq;
#ifdef USE_USER_WAKE
    /* Set (release) by wake() after its kevent returned; taken (acquire)
     * by wake_take(): the trigger is in the kqueue once this is true. */
    _Atomic bool wake_landed;
    bool wake_seen; /* a wait retrieved the trigger (EV_CLEAR consumed it) */
#endif
};

static int grow_merge(struct kq_state *s, int fd)
{
    if ((unsigned)fd < s->merge_len)
        return 0;
    unsigned n = s->merge_len ? s->merge_len : 64;
    while (n <= (unsigned)fd)
        n *= 2;
    struct merge_slot *m = tern__realloc(s->merge, n * sizeof(*m));
    if (m == NULL)
        return -ENOMEM;
    memset(m + s->merge_len, 0, (n - s->merge_len) * sizeof(*m));
    s->merge = m;
    s->merge_len = n;
    return 0;
}

/*
 * Make room for `more` changes now, and for their errors in the event
 * list, so that neither queueing them nor the wait that applies them
 * needs memory (the core cannot handle a failing wait).
 */
static int reserve_changes(struct kq_state *s, int more)
{
    if (s->nchanges + more <= s->changes_cap)
        return 0;
    int n = s->changes_cap ? s->changes_cap * 2 : 64;
    while (n < s->nchanges + more)
        n *= 2;
    struct kevent *e = tern__realloc(s->events, (size_t)(n + EVENTS_SPARE) * sizeof(*e));
    if (e == NULL)
        return -ENOMEM;
    s->events = e;
    s->events_cap = n + EVENTS_SPARE;
    struct kevent *c = tern__realloc(s->changes, (size_t)n * sizeof(*c));
    if (c == NULL)
        return -ENOMEM; /* the larger event list is kept, harmlessly */
    s->changes = c;
    s->changes_cap = n;
    return 0;
}

static int kq_init(struct tern__backend *b)
{
    int rc = tern__fd_fault();
    if (rc < 0)
        return rc;
    struct kq_state *s = tern__calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    if ((rc = reserve_changes(s, 1)) < 0) {
        free(s->events);
        free(s);
        return rc;
    }
    int kq = kqueue();
    if (kq < 0) {
        rc = -errno;
        free(s->changes);
        free(s->events);
        free(s);
        return rc;
    }
    /* A kqueue does not survive fork on the BSDs anyway; exec must not
     * inherit it either where it would (libkqueue's is an epoll fd). */
    int fl = fcntl(kq, F_GETFD);
    if (fl >= 0)
        (void)fcntl(kq, F_SETFD, fl | FD_CLOEXEC);
    s->kq = kq;
    s->seq = 1;
    b->state = s;
#ifdef TERN_LIBKQUEUE
    b->fd = -1; /* libkqueue's descriptor never turns readable */
#else
    b->fd = kq;
#endif
#ifdef USE_USER_WAKE
    if (atomic_load_explicit(&user_wake, memory_order_relaxed)) {
        struct kevent ev;
        EV_SET(&ev, WAKE_IDENT, EVFILT_USER, EV_ADD | EV_CLEAR, 0, 0, NULL);
        if (kevent(kq, &ev, 1, NULL, 0, NULL) < 0) {
            rc = -errno;
            close(kq);
            free(s->changes);
            free(s->events);
            free(s);
            return rc;
        }
        atomic_init(&s->wake_landed, false);
        b->wakes_itself = true;
        b->fd = kq; /* the wake-up can only be seen here now */
    }
#endif
    return 0;
}

static void kq_close(struct tern__backend *b)
{
    struct kq_state *s = b->state;
    close(s->kq);
    b->fd = -1;
    free(s->changes);
    free(s->events);
    free(s->merge);
    free(s);
    b->state = NULL;
}

static void queue_change(struct kq_state *s, int fd, short filter, unsigned short flags)
{
    EV_SET(&s->changes[s->nchanges], fd, filter, flags, 0, 0, NULL);
    s->nchanges++;
}

#ifndef NOTE_REVOKE
#define NOTE_REVOKE 0 /* libkqueue has none */
#endif
#define VNODE_NOTES \
    (NOTE_WRITE | NOTE_EXTEND | NOTE_ATTRIB | NOTE_LINK | NOTE_RENAME | NOTE_DELETE | NOTE_REVOKE)

/* Start or stop a file-change filter at once (backend.h, TERN__VNODE). */
static int vnode_modify(struct kq_state *s, int fd, bool on)
{
    int rc;
    if (on && (rc = grow_merge(s, fd)) < 0)
        return rc;
    struct kevent ev;
    EV_SET(&ev, fd, EVFILT_VNODE, on ? EV_ADD | EV_CLEAR : EV_DELETE, on ? VNODE_NOTES : 0, 0,
           NULL);
    if (kevent(s->kq, &ev, 1, NULL, 0, NULL) == 0)
        return 0;
    return !on && (errno == ENOENT || errno == EBADF) ? 0 : -errno;
}

static unsigned vnode_to_tern(unsigned fflags)
{
    unsigned e = 0;
    if (fflags & (NOTE_WRITE | NOTE_EXTEND))
        e |= TERN__VNODE_WRITE;
    if (fflags & (NOTE_ATTRIB | NOTE_LINK))
        e |= TERN__VNODE_ATTRIB;
    if (fflags & NOTE_RENAME)
        e |= TERN__VNODE_RENAME;
    if (fflags & (NOTE_DELETE | NOTE_REVOKE))
        e |= TERN__VNODE_DELETE;
    return e;
}

static int kq_modify(struct tern__backend *b, int fd, unsigned old_events, unsigned new_events)
{
    struct kq_state *s = b->state;
    int rc;
    if ((old_events | new_events) & TERN__VNODE) /* alone, never with READ or WRITE */
        return vnode_modify(s, fd, new_events != 0);
    if (new_events != 0 && (rc = grow_merge(s, fd)) < 0)
        return rc;
    if ((rc = reserve_changes(s, 2)) < 0)
        return rc;
    static const struct {
        unsigned bit;
        short filter;
    } filters[] = {{TERN_READABLE, EVFILT_READ}, {TERN_WRITABLE, EVFILT_WRITE}};
    for (size_t i = 0; i < sizeof(filters) / sizeof(filters[0]); i++) {
        bool was = old_events & filters[i].bit, is = new_events & filters[i].bit;
        if (was && !is)
            queue_change(s, fd, filters[i].filter, EV_DELETE);
        else if (!was && is)
            queue_change(s, fd, filters[i].filter, EV_ADD);
    }
    return 0;
}

static unsigned to_tern(const struct kevent *ev)
{
    unsigned e = ev->filter == EVFILT_READ ? TERN_READABLE : TERN_WRITABLE;
    if (ev->flags & EV_EOF) {
        e |= TERN_HANGUP;
        if (ev->fflags != 0)
            e |= TERN_ERROR; /* fflags holds the socket's error */
    }
    return e;
}

/* Add one descriptor's events to out[], merging with an earlier entry. */
static int fire(struct kq_state *s, int fd, unsigned events, struct tern__fired *out, int k,
                int max)
{
    struct merge_slot *m = (unsigned)fd < s->merge_len ? &s->merge[fd] : NULL;
    if (m != NULL && m->seq == s->seq) {
        out[m->pos].events |= events;
        return k;
    }
    if (k == max)
        return k; /* surplus: level-triggered, reported again next wait */
    out[k] = (struct tern__fired){.fd = fd, .events = events};
    if (m != NULL)
        *m = (struct merge_slot){.seq = s->seq, .pos = k};
    return k + 1;
}

static int kq_wait(struct tern__backend *b, int64_t timeout_ns, struct tern__fired *out, int max)
{
    struct kq_state *s = b->state;
    /* At least nchanges + EVENTS_SPARE (reserve_changes sees to it). */
    int want = s->nchanges + max < s->events_cap ? s->nchanges + max : s->events_cap;
    struct timespec ts, *tsp = NULL;
    if (timeout_ns >= 0) {
        ts.tv_sec = (time_t)(timeout_ns / 1000000000);
        ts.tv_nsec = (long)(timeout_ns % 1000000000);
        tsp = &ts;
    }
    int n = kevent(s->kq, s->changes, s->nchanges, s->events, want, tsp);
    if (n < 0) {
        /*
         * With room for every change's error, kevent fails only outside
         * the changes: EINTR in the wait (the changes were applied), or
         * ENOMEM/EFAULT before them. They stay queued either way: applying
         * an add twice changes nothing, and a repeated delete's ENOENT is
         * ignored below.
         */
        return errno == EINTR ? 0 : -errno;
    }
    s->nchanges = 0;
    if (++s->seq == 0) { /* wrapped: forget every slot, start again */
        memset(s->merge, 0, s->merge_len * sizeof(*s->merge));
        s->seq = 1;
    }
    /*
     * Signals and the wake-up first: retrieving them consumed them, so
     * they must never be the surplus dropped for lack of room (there are
     * fewer signal numbers than fired entries).
     */
    int k = 0;
    for (int i = 0; i < n; i++) {
        const struct kevent *ev = &s->events[i];
        if (ev->filter == EVFILT_SIGNAL && !(ev->flags & EV_ERROR) && k < max)
            out[k++] = (struct tern__fired){.fd = TERN__FIRED_SIGNAL((int)ev->ident),
                                            .events = ev->data > 0 ? (unsigned)ev->data : 1};
        if (ev->filter == EVFILT_PROC && !(ev->flags & EV_ERROR))
            k = fire(s, (int)(intptr_t)ev->udata, TERN_READABLE, out, k, max);
        if (ev->filter == EVFILT_VNODE && !(ev->flags & EV_ERROR) && ev->fflags != 0)
            k = fire(s, (int)ev->ident, vnode_to_tern(ev->fflags), out, k, max);
#ifdef USE_USER_WAKE
        if (ev->filter == EVFILT_USER)
            s->wake_seen = true;
#endif
    }
    for (int i = 0; i < n; i++) {
        const struct kevent *ev = &s->events[i];
        if (ev->filter != EVFILT_READ && ev->filter != EVFILT_WRITE)
            continue;
        int fd = (int)ev->ident;
        if (ev->flags & EV_ERROR) {
            /* data is the change's errno (0 would be a mere receipt). */
            if (ev->data != 0 && ev->data != ENOENT)
                k = fire(s, fd, TERN_ERROR, out, k, max);
            continue;
        }
        k = fire(s, fd, to_tern(ev), out, k, max);
    }
    return k;
}

#ifdef USE_USER_WAKE
static void kq_wake(struct tern__backend *b)
{
    struct kq_state *s = b->state;
    struct kevent ev;
    EV_SET(&ev, WAKE_IDENT, EVFILT_USER, 0, NOTE_TRIGGER, 0, NULL);
    (void)kevent(s->kq, &ev, 1, NULL, 0, NULL);
    /* Pairs with the acquire load in kq_wake_take(). */
    atomic_store_explicit(&s->wake_landed, true, memory_order_release);
}

static bool kq_wake_take(struct tern__backend *b)
{
    struct kq_state *s = b->state;
    /* Pairs with the release store in kq_wake(): the trigger is queued. */
    if (!atomic_load_explicit(&s->wake_landed, memory_order_acquire))
        return false;
    atomic_store_explicit(&s->wake_landed, false, memory_order_relaxed);
    if (s->wake_seen) {
        s->wake_seen = false; /* a wait already took it */
        return true;
    }
    /*
     * Still queued (the wait returned for something else, or there was no
     * wait): only deleting and re-adding resets a user event without
     * retrieving it, and retrieving would take descriptor events with it.
     * One syscall, only on this path.
     */
    struct kevent ev[2];
    EV_SET(&ev[0], WAKE_IDENT, EVFILT_USER, EV_DELETE, 0, 0, NULL);
    EV_SET(&ev[1], WAKE_IDENT, EVFILT_USER, EV_ADD | EV_CLEAR, 0, 0, NULL);
    (void)kevent(s->kq, ev, 2, NULL, 0, NULL);
    return true;
}
#endif

static int kq_signal(struct tern__backend *b, int signo, bool on)
{
    struct kq_state *s = b->state;
    struct kevent ev;
    EV_SET(&ev, signo, EVFILT_SIGNAL, on ? EV_ADD : EV_DELETE, 0, 0, NULL);
    return kevent(s->kq, &ev, 1, NULL, 0, NULL) < 0 ? -errno : 0;
}

static int kq_proc(struct tern__backend *b, int pid, int fd, bool on)
{
    struct kq_state *s = b->state;
    int rc;
    if (on && (rc = grow_merge(s, fd)) < 0)
        return rc;
    struct kevent ev;
    EV_SET(&ev, pid, EVFILT_PROC, on ? EV_ADD | EV_ONESHOT : EV_DELETE, NOTE_EXIT, 0,
           (void *)(intptr_t)fd);
    if (kevent(s->kq, &ev, 1, NULL, 0, NULL) == 0)
        return 0;
    return !on && (errno == ENOENT || errno == ESRCH) ? 0 : -errno;
}

const struct tern__backend_ops tern__backend_kqueue = {
    .name = "kqueue",
    .init = kq_init,
    .close = kq_close,
    .modify = kq_modify,
    .wait = kq_wait,
    .signal = kq_signal,
    .proc = kq_proc,
    .vnode = true,
#ifdef USE_USER_WAKE
    .wake = kq_wake,
    .wake_take = kq_wake_take,
#endif
};
