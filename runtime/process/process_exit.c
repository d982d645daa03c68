/*
 * How a loop learns that one of its children ended.
 *
 * A pidfd (Linux 5.3 and later; the platform's tern__pidfd_open): a
 * descriptor that turns readable when the child ends. It is watched like
 * any descriptor, so it works on every backend the loop may have (epoll,
 * poll, and kqueue through EVFILT_READ), and it names one child: no other
 * child is ever touched.
 *
 * The SIGCHLD fallback (no pidfd in the build, or a kernel that refuses
 * pidfd_open): a process-wide SIGCHLD handler, installed once, signals the
 * wake object of every loop that has children, then calls whatever handler
 * was installed before it. A loop woken that way asks each of its own
 * children with waitpid(pid, WNOHANG) — never waitpid(-1), which would
 * reap another library's children. The handler runs on whichever thread
 * has SIGCHLD unblocked (tern's own threads block every signal), so an
 * application that blocks SIGCHLD in every thread gets no exits through the
 * fallback. A loop takes its slot in the table before it launches, so the
 * SIGCHLD of a child that ends at once is not missed.
 *
 * The backend's process filter (kqueue's EVFILT_PROC), where the loop's
 * backend has one and there is no pidfd (the BSDs, macOS; on Linux only
 * when a test asks, through tern__child_native): the loop keeps the same
 * list and wake object as the fallback, but the backend reports each
 * child's end on that wake object's descriptor, so no signal is involved
 * in the loop's own exits. The SIGCHLD handler is still installed, for the
 * reaper's sake alone (an abandoned child has no loop to report it).
 *
 * Either way the child is reaped before `exited` runs (step 4), so its pid
 * cannot be reused while tern still holds it.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "container.h"
#include "os_thread.h"
#include "platform.h"
#include "process_p.h"

/* ------------------------------------------------------------------ */
/* pidfd                                                               */
/* ------------------------------------------------------------------ */

/* 1: pidfd_open works; 0: not yet known; -1: use the fallback. */
static _Atomic int pidfd_works;

/* Whether loops prefer the backend's process filter to a pidfd (test seam). */
static _Atomic bool native_first;
static _Atomic unsigned long native_watches;

bool tern__child_native(bool on)
{
    atomic_store_explicit(&native_first, on, memory_order_relaxed);
    return true;
}

unsigned long tern__child_native_count(void)
{
    return atomic_load_explicit(&native_watches, memory_order_relaxed);
}

static bool use_pidfd(void)
{
    int w = atomic_load_explicit(&pidfd_works, memory_order_relaxed);
    if (w != 0)
        return w > 0;
    w = tern__pidfd_probe();
    if (w != 0)
        atomic_store_explicit(&pidfd_works, w, memory_order_relaxed);
    return w > 0;
}

/* ------------------------------------------------------------------ */
/* The SIGCHLD fallback                                                */
/* ------------------------------------------------------------------ */

#define SLOTS 1024 /* loops with children at once, in the fallback */

struct tern__children {
    struct tern__wake wake;
    struct tern__io io;
    struct tern__child *head; /* children not yet reaped */
    unsigned users;           /* prepared launches and watched children */
    int slot;                 /* -1: the backend reports exits (native) */
};

static _Atomic(const struct tern__wake *) slot_wake[SLOTS];
static _Atomic int in_handler; /* handlers between their first and last slot read */
static tern__mutex_t table_lock = TERN__MUTEX_INIT;
static bool installed; /* under table_lock */
static struct sigaction previous;

static void on_sigchld(int signo, siginfo_t *info, void *ctx)
{
    int saved = errno;
    atomic_fetch_add(&in_handler, 1);
    for (int i = 0; i < SLOTS; i++) {
        const struct tern__wake *w = atomic_load(&slot_wake[i]);
        if (w != NULL)
            tern__wake_signal(w);
    }
    atomic_fetch_sub(&in_handler, 1);
    tern__reaper_sigchld();
    errno = saved;
    if (previous.sa_flags & SA_SIGINFO) {
        if (previous.sa_sigaction != NULL)
            previous.sa_sigaction(signo, info, ctx);
    } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(signo);
    }
}

/* Install the handler once; under table_lock. 0 or -errno. */
static int install_locked(void)
{
    if (installed)
        return 0;
    struct sigaction sa = {0};
    sa.sa_sigaction = on_sigchld;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NOCLDSTOP;
    sigfillset(&sa.sa_mask);
    if (sigaction(SIGCHLD, &sa, &previous) < 0)
        return -errno;
    installed = true;
    return 0;
}

/* A slot for w (w NULL: only the handler, for the reaper). */
static int table_join(const struct tern__wake *w)
{
    tern__mutex_lock(&table_lock);
    int slot = install_locked();
    if (slot < 0 || w == NULL)
        goto out;
    slot = -EAGAIN;
    for (int i = 0; i < SLOTS; i++) {
        if (atomic_load(&slot_wake[i]) == NULL) {
            atomic_store(&slot_wake[i], w);
            slot = i;
            break;
        }
    }
out:
    tern__mutex_unlock(&table_lock);
    return slot;
}

static void table_leave(int slot)
{
    if (slot < 0)
        return; /* native: only the handler, which stays */
    atomic_store(&slot_wake[slot], NULL);
    /* A handler may still hold the pointer it read: let it finish. */
    while (atomic_load(&in_handler) != 0)
        sched_yield();
}

static void children_put(tern_loop *loop);

static void reap_fallback(tern_loop *loop, struct tern__io *io, unsigned events)
{
    (void)events;
    struct tern__children *ch = tern__container_of(io, struct tern__children, io);
    while (tern__wake_take(&ch->wake))
        ;
    ch->users++; /* `exited` may release the last user */
    struct tern__child *c = ch->head;
    while (c != NULL) {
        struct tern__child *next = c->next;
        int st;
        pid_t r = waitpid(c->pid, &st, WNOHANG);
        if (r == c->pid) {
            if (ch->slot < 0)
                (void)loop->backend.ops->proc(&loop->backend, c->pid, ch->wake.fd, false);
            if (c->prev != NULL)
                c->prev->next = c->next;
            else
                ch->head = c->next;
            if (c->next != NULL)
                c->next->prev = c->prev;
            c->prev = c->next = NULL;
            c->pid = 0;
            c->exited(loop, c, st);
        }
        c = next;
    }
    children_put(loop);
}

int tern__child_prepare(tern_loop *loop, struct tern__child *c)
{
    *c = (struct tern__child){.pidfd = -1};
    tern__io_init(&c->io, NULL);
    bool can_native = loop->backend.ops->proc != NULL;
    bool native = can_native && atomic_load_explicit(&native_first, memory_order_relaxed);
    c->fallback = native || !use_pidfd();
    if (!c->fallback)
        return 0;
    native = native || can_native;
    struct tern__children *ch = loop->children;
    if (ch == NULL) {
        ch = tern__calloc(1, sizeof(*ch));
        if (ch == NULL)
            return -ENOMEM;
        int rc = tern__wake_open(&ch->wake);
        if (rc < 0) {
            free(ch);
            return rc;
        }
        tern__io_init(&ch->io, reap_fallback);
        if ((rc = tern__io_start(loop, &ch->io, ch->wake.fd, TERN_READABLE)) < 0) {
            tern__wake_close(&ch->wake);
            free(ch);
            return rc;
        }
        if ((rc = table_join(native ? NULL : &ch->wake)) < 0) {
            tern__io_stop(loop, &ch->io);
            tern__wake_close(&ch->wake);
            free(ch);
            return rc;
        }
        ch->slot = native ? -1 : rc;
        loop->children = ch;
    }
    ch->users++;
    return 0;
}

void tern__child_release(tern_loop *loop, struct tern__child *c)
{
    if (c->fallback)
        children_put(loop);
    c->fallback = false;
}

static void children_put(tern_loop *loop)
{
    struct tern__children *ch = loop->children;
    TERN_DECREMENT(ch->users);
    if (ch->users != 0)
        return;
    TERN_INSIST(ch->head == NULL);
    table_leave(ch->slot);
    tern__io_stop(loop, &ch->io);
    tern__wake_close(&ch->wake);
    free(ch);
    loop->children = NULL;
}

/* ------------------------------------------------------------------ */
/* Watching one child                                                  */
/* ------------------------------------------------------------------ */

static void pidfd_fired(tern_loop *loop, struct tern__io *io, unsigned events)
{
    (void)events;
    struct tern__child *c = tern__container_of(io, struct tern__child, io);
    int st;
    pid_t r = waitpid(c->pid, &st, WNOHANG);
    if (r != c->pid)
        return; /* not yet (or someone else's waitpid(-1) took it: then never) */
    tern__io_stop(loop, &c->io);
    close(c->pidfd);
    c->pidfd = -1;
    c->pid = 0;
    c->exited(loop, c, st);
}

int tern__child_watch(tern_loop *loop, struct tern__child *c, pid_t pid,
                      tern__child_exited_fn exited)
{
    c->pid = pid;
    c->exited = exited;
    tern__io_init(&c->io, pidfd_fired);
    if (!c->fallback) {
        int fd = tern__pidfd_open(pid);
        if (fd < 0)
            return fd;
        int rc = tern__io_start(loop, &c->io, fd, TERN_READABLE);
        if (rc < 0) {
            close(fd);
            return rc;
        }
        c->pidfd = fd;
        return 0;
    }
    struct tern__children *ch = loop->children;
    c->next = ch->head;
    if (ch->head != NULL)
        ch->head->prev = c;
    ch->head = c;
    if (ch->slot < 0) {
        int rc = loop->backend.ops->proc(&loop->backend, pid, ch->wake.fd, true);
        if (rc < 0 && rc != -ESRCH) { /* -ESRCH: ended already; the look below sees it */
            ch->head = c->next;
            if (c->next != NULL)
                c->next->prev = NULL;
            c->next = NULL;
            return rc;
        }
        atomic_fetch_add_explicit(&native_watches, 1, memory_order_relaxed);
    }
    /* It may have ended before it was listed: look once more in step 4. */
    tern__wake_signal(&ch->wake);
    return 0;
}

void tern__child_abandon(tern_loop *loop, struct tern__child *c)
{
    if (c->pid == 0)
        return; /* already reaped */
    if (c->pidfd >= 0) {
        tern__io_stop(loop, &c->io);
        tern__reaper_adopt(c->pid, c->pidfd);
        c->pidfd = -1;
    } else {
        struct tern__children *ch = loop->children;
        if (ch->slot < 0)
            (void)loop->backend.ops->proc(&loop->backend, c->pid, ch->wake.fd, false);
        if (c->prev != NULL)
            c->prev->next = c->next;
        else
            ch->head = c->next;
        if (c->next != NULL)
            c->next->prev = c->prev;
        c->prev = c->next = NULL;
        tern__reaper_adopt(c->pid, -1);
    }
    c->pid = 0;
}
