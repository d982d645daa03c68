/*
 * Signal watchers. A loop whose backend reports signals itself (kqueue:
 * EVFILT_SIGNAL in the loop's kqueue) gets them as fired entries, which
 * make the watcher ready; any other loop reads a signal source (platform.c:
 * a signalfd on Linux, a handler-written pipe elsewhere) through a watcher
 * embedded in the record (struct tern__io), which queues the watcher when
 * the source turns readable; its dispatch reads the source.
 *
 * Why the signal must be blocked (signalfd, kqueue): a signalfd only reads
 * signals that are pending, and a signal is left pending only in threads
 * that block it; kqueue merely records a delivery, which would still run
 * the signal's action. tern_signal_start blocks it in the calling thread
 * (the loop thread); every thread tern creates starts with all signals
 * blocked (tern__thread_create), so liburcu's helpers and the pool never
 * take a signal meant for the loop. A process-directed signal (kill) then
 * stays pending for the process and the loop's source reads it; a thread-
 * directed one (raise on the loop thread) is read just the same. The pipe
 * source is the other way round: its handler must run, so the signal is
 * unblocked in the loop thread and the handler's write wakes the loop.
 *
 * Several watchers per signal, on one loop or several: two sources for one
 * signal would race to read each instance, so one watcher (the reader,
 * the first) owns the signal's one source and hands each delivery it reads
 * to every watcher of the signal (a list per signal under one mutex): a
 * watcher on the reader's loop is queued, one on another loop is woken by
 * a post. A watcher on another loop blocks the signal in its own thread
 * (except for the pipe source, whose handler runs anywhere), so a signal
 * sent to the process is never taken there by its default action. When
 * the reader stops, its source moves to a watcher on the same loop, or
 * moves to another watcher (see stop_watcher); the last watcher's stop
 * hands the signal back.
 *
 * liburcu's helper: liburcu starts its call_rcu thread lazily, from
 * whichever thread first calls call_rcu, and that thread inherits the
 * caller's mask (liburcu 0.13 blocks nothing in it). A helper started from
 * an application thread with an open mask would take the loop's signal and
 * run its default action. So for a loop that declares itself an RCU reader
 * (TERN_LOOP_RCU), tern_signal_start has the default helper created first,
 * with every signal blocked. A helper the application started earlier, or
 * per-CPU helpers, are the application's to create with signals blocked.
 *
 * Stopping consumes what is still pending before unblocking, so stopping a
 * watcher never turns an already-delivered signal into its default action
 * (for SIGTERM, death) a moment later.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <urcu-qsbr.h>

#include "admit.h"
#include "container.h"
#include "net_p.h"
#include "os_thread.h"

#define SIGNALS_PER_READY 16 /* reads of the source per readiness */

struct tern__signal {
    struct tern__op op; /* first: the id, the class, the ready link */
    tern_loop *loop;
    int signo;
    bool reader;      /* under table_lock: this watcher reads the signal for all */
    bool has_src;     /* under table_lock: the reader's source is open */
    bool watching;    /* its loop watches the source (loop thread only) */
    bool fired;       /* TERN__SIG_BACKEND: the backend reported it (loop thread) */
    bool masked_here; /* it blocked the signal in its loop's thread (or took that over) */
    struct tern__sigsource src;
    struct tern__io io;        /* the source's descriptor (not for TERN__SIG_BACKEND) */
    atomic_uint pending;       /* deliveries not yet called back */
    struct tern__signal *next; /* under table_lock: the signal's other watchers */
    tern_signal_cb cb;
    void *arg;
};

static tern__mutex_t table_lock = TERN__MUTEX_INIT;
static struct tern__signal *watchers[_NSIG];   /* under table_lock: each signal's watchers */
static struct tern__signal *by_backend[_NSIG]; /* under table_lock: backend-read readers */

/*
 * fork(): the table lock is held around the fork so the child never
 * inherits it locked; the child forgets the parent's watchers (their loops
 * are unusable there) so it may watch those signals itself.
 */
static void table_before_fork(void)
{
    tern__mutex_lock(&table_lock);
}

static void table_after_fork_parent(void)
{
    tern__mutex_unlock(&table_lock);
}

static void table_after_fork_child(void)
{
    for (size_t i = 0; i < sizeof(watchers) / sizeof(watchers[0]); i++) {
        watchers[i] = NULL;
        by_backend[i] = NULL;
    }
    tern__mutex_unlock(&table_lock);
}

__attribute__((constructor)) static void table_fork_handlers(void)
{
    tern__atfork(table_before_fork, table_after_fork_parent, table_after_fork_child);
}

static void signal_dispatch(tern_loop *loop, struct tern__op *op);
static int signal_cancel(tern_loop *loop, struct tern__op *op);
static void signal_free(tern_loop *loop, struct tern__op *op);

static const struct tern__op_class signal_class = {
    .name = "signal",
    .dispatch = signal_dispatch,
    .cancel = signal_cancel,
    .free = signal_free,
    .refable = true,
};

static struct tern__signal *signal_of(tern_loop *loop, tern_id id)
{
    struct tern__op *op = tern__op_find(loop, id);
    return op != NULL && op->cls == &signal_class ? (struct tern__signal *)op : NULL;
}

/* Posted to another loop: one of its watchers has deliveries pending. */
static void wake_watcher(tern_loop *loop, void *arg)
{
    struct tern__signal *w = signal_of(loop, (tern_id)(uintptr_t)arg);
    if (w != NULL)
        tern__op_ready(loop, &w->op);
}

/*
 * One delivery read by the reader (on loop): every watcher of the signal
 * gets one callback, on its own loop. Under table_lock, so no watcher is
 * freed meanwhile (a loop cancels its watchers before it goes).
 */
static void fan_out(tern_loop *loop, struct tern__signal *reader)
{
    tern__mutex_lock(&table_lock);
    for (struct tern__signal *w = watchers[reader->signo]; w != NULL; w = w->next) {
        atomic_fetch_add(&w->pending, 1);
        if (w == reader)
            continue; /* its dispatch delivers right after */
        if (w->loop == loop)
            tern__op_ready(loop, &w->op);
        else if (tern_post(w->loop, wake_watcher, (void *)(uintptr_t)w->op.id) < 0)
            atomic_fetch_sub(&w->pending, 1); /* that loop is going away */
    }
    tern__mutex_unlock(&table_lock);
}

/*
 * Step 2. The reader first takes what its source holds (a backend-read
 * reader: one merged delivery per report; any other: one per read) and
 * hands each to every watcher; then any watcher calls back once per
 * delivery it was handed.
 */
static void signal_dispatch(tern_loop *loop, struct tern__op *op)
{
    struct tern__signal *w = (struct tern__signal *)op;
    tern_id id = op->id;
    if (w->watching && w->src.kind == TERN__SIG_BACKEND) {
        if (w->fired) {
            w->fired = false;
            fan_out(loop, w);
        }
    } else if (w->watching) {
        /* One delivery per read: deliveries one read takes are merged,
         * as the kernel merges a signal sent again while pending. */
        for (int i = 0; i < SIGNALS_PER_READY && tern__sigsource_read(&w->src) != 0; i++)
            fan_out(loop, w);
    }
    for (unsigned n = atomic_exchange(&w->pending, 0); n > 0; n--) {
        w->cb(loop, id, w->signo, w->arg);
        /* The callback may have stopped this watcher and freed it. */
        if (tern__op_find(loop, id) != op)
            return;
    }
}

/* Step 4: the source is readable; the dispatch reads it. */
static void source_fired(tern_loop *loop, struct tern__io *io, unsigned events)
{
    (void)events;
    struct tern__signal *w = tern__container_of(io, struct tern__signal, io);
    tern__op_ready(loop, &w->op);
}

void tern__signal_fired(tern_loop *loop, int signo, unsigned count)
{
    (void)count; /* merged into one callback, as the kernel merges them */
    if (signo <= 0 || signo >= _NSIG)
        return;
    tern__mutex_lock(&table_lock);
    struct tern__signal *w = by_backend[signo];
    tern__mutex_unlock(&table_lock);
    /* Stopped since, or another loop's: the table says who reads it now. */
    if (w != NULL && w->loop == loop) {
        w->fired = true;
        tern__op_ready(loop, &w->op);
    }
}

static void signal_free(tern_loop *loop, struct tern__op *op)
{
    (void)loop;
    tern__free(op);
}

static void rcu_helper_with_signals_blocked(tern_loop *loop)
{
    if (!(loop->flags & TERN_LOOP_RCU))
        return;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    (void)get_default_call_rcu_data(); /* creates it if it does not exist yet */
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/*
 * Watch w's open source from its loop (the calling thread); locked: the
 * caller holds table_lock.
 */
static int watch_source(tern_loop *loop, struct tern__signal *w, bool locked)
{
    int rc;
    if (w->src.kind == TERN__SIG_BACKEND) {
        if ((rc = loop->backend.ops->signal(&loop->backend, w->signo, true)) < 0)
            return rc;
        loop->io_count++; /* the kernel has something to report: ask it */
        if (!locked)
            tern__mutex_lock(&table_lock);
        by_backend[w->signo] = w;
        if (!locked)
            tern__mutex_unlock(&table_lock);
    } else if ((rc = tern__io_start(loop, &w->io, w->src.fd, TERN_READABLE)) < 0) {
        return rc;
    }
    w->watching = true;
    return 0;
}

static void unwatch_source(tern_loop *loop, struct tern__signal *w, bool locked)
{
    if (!w->watching)
        return;
    w->watching = false;
    if (w->src.kind != TERN__SIG_BACKEND) {
        tern__io_stop(loop, &w->io);
        return;
    }
    (void)loop->backend.ops->signal(&loop->backend, w->signo, false);
    loop->io_count--;
    if (!locked)
        tern__mutex_lock(&table_lock);
    if (by_backend[w->signo] == w)
        by_backend[w->signo] = NULL;
    if (!locked)
        tern__mutex_unlock(&table_lock);
}

/* Open w's source on its loop's thread (the one calling) and watch it. */
static int open_source(tern_loop *loop, struct tern__signal *w, bool locked)
{
    rcu_helper_with_signals_blocked(loop);
    /* Blocked by sigsource_open before the backend is told: nothing lost. */
    int rc = tern__sigsource_open(&w->src, w->signo, loop->backend.ops->signal != NULL);
    if (rc < 0)
        return rc;
    if ((rc = watch_source(loop, w, locked)) < 0) {
        tern__sigsource_close(&w->src);
        return rc;
    }
    w->has_src = true;
    return 0;
}

static void close_source(tern_loop *loop, struct tern__signal *w, bool locked)
{
    unwatch_source(loop, w, locked);
    tern__sigsource_close(&w->src);
    w->has_src = false;
}

/*
 * Posted to the loop of a watcher that became the reader (it was a
 * follower, so it watches nothing yet; readers stay readers), unless it
 * stopped meanwhile: its stop handed the part on again.
 */
static void take_over(tern_loop *loop, void *arg)
{
    struct tern__signal *w = signal_of(loop, (tern_id)(uintptr_t)arg);
    if (w == NULL)
        return;
    /* On failure the signal goes unread until this watcher stops. */
    if (!w->has_src)
        (void)open_source(loop, w, false);
    else if (watch_source(loop, w, false) < 0)
        close_source(loop, w, false);
}

static bool signal_pending_anywhere(int signo)
{
    sigset_t p;
    return sigpending(&p) == 0 && sigismember(&p, signo);
}

/*
 * Stop w. A reader hands its part to another watcher, one on the same loop
 * first. Its source moves as it is (nothing lost), to be watched from the
 * heir's loop: a signalfd reads what is pending for the process and for
 * the thread reading it, a pipe what the handler wrote. Only a backend
 * registration (kqueue) cannot move: it closes and the heir registers its
 * own, and instances sent in between may be lost. A loop thread whose
 * source moved away keeps the signal blocked. The last watcher's stop
 * hands the signal back as the first one found it.
 */
static void stop_watcher(tern_loop *loop, struct tern__signal *w)
{
    tern__mutex_lock(&table_lock);
    struct tern__signal **p = &watchers[w->signo];
    while (*p != w)
        p = &(*p)->next;
    *p = w->next;
    struct tern__signal *heir = NULL, *same_loop = NULL;
    for (struct tern__signal *o = watchers[w->signo]; o != NULL; o = o->next) {
        if (o->loop == loop)
            same_loop = o;
        if (heir == NULL || (o->loop == loop && heir->loop != loop))
            heir = o;
    }
    bool loop_still_watches = same_loop != NULL;
    /* The block this watcher added is the loop thread's while the loop
     * watches: it passes to a watcher still on the loop, whose stop (the
     * last) gives it back. */
    if (w->masked_here && loop_still_watches)
        same_loop->masked_here = true;
    if (!w->reader)
        heir = NULL;
    if (heir != NULL) {
        heir->reader = true;
        unwatch_source(loop, w, true);
        if (w->has_src && (heir->loop == loop || w->src.kind != TERN__SIG_BACKEND)) {
            heir->src = w->src;
            heir->has_src = true;
            w->has_src = false;
        } else if (w->has_src) {
            w->src.mask_changed = false; /* this thread keeps it blocked */
            close_source(loop, w, true);
        }
        if (heir->loop == loop) {
            if (heir->has_src && watch_source(loop, heir, true) < 0)
                close_source(loop, heir, true); /* the signal goes unread */
        } else {
            (void)tern_post(heir->loop, take_over, (void *)(uintptr_t)heir->op.id);
        }
    }
    tern__mutex_unlock(&table_lock);
    if (w->has_src)
        close_source(loop, w, false);
    /* A pending instance would take its default action once unblocked:
     * then the block stays. */
    if (w->masked_here && !loop_still_watches && !signal_pending_anywhere(w->signo)) {
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, w->signo);
        pthread_sigmask(SIG_UNBLOCK, &one, NULL);
    }
    tern__op_finish(loop, &w->op);
}

static int signal_cancel(tern_loop *loop, struct tern__op *op)
{
    stop_watcher(loop, (struct tern__signal *)op);
    return 0;
}

int tern_signal_start(tern_loop *loop, int signo, tern_signal_cb cb, void *arg, tern_id *idp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (cb == NULL || signo <= 0 || signo >= _NSIG || signo == SIGKILL || signo == SIGSTOP)
        return -EINVAL;
    int rc = tern__op_admit(loop);
    if (rc < 0)
        return rc;
    struct tern__signal *w = tern__calloc(1, sizeof(*w));
    if (w == NULL) {
        tern__op_unadmit(loop);
        return -ENOMEM;
    }
    *w = (struct tern__signal){.loop = loop, .signo = signo, .cb = cb, .arg = arg};
    tern__io_init(&w->io, source_fired);

    /* Under the lock throughout, so two first watchers cannot both open. */
    tern__mutex_lock(&table_lock);
    bool first = watchers[signo] == NULL;
    if (first) {
        rc = open_source(loop, w, true);
    } else if (tern__sigsource_kind_for(loop->backend.ops->signal != NULL) != TERN__SIG_PIPE) {
        /* Read elsewhere, but this thread must not take it either. */
        sigset_t one, cur;
        sigemptyset(&one);
        sigaddset(&one, signo);
        pthread_sigmask(SIG_BLOCK, &one, &cur);
        w->masked_here = !sigismember(&cur, signo);
    }
    if (rc == 0 && (rc = tern__op_add(loop, &w->op, &signal_class)) < 0 && first)
        close_source(loop, w, true);
    if (rc == 0) {
        w->reader = first;
        w->next = watchers[signo];
        watchers[signo] = w;
    }
    tern__mutex_unlock(&table_lock);
    if (rc < 0) {
        if (w->masked_here) {
            sigset_t one;
            sigemptyset(&one);
            sigaddset(&one, signo);
            pthread_sigmask(SIG_UNBLOCK, &one, NULL);
        }
        tern__free(w);
        tern__op_unadmit(loop);
        return rc;
    }
    if (idp != NULL)
        *idp = w->op.id;
    return 0;
}

int tern_signal_stop(tern_loop *loop, tern_id id)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    struct tern__signal *w = signal_of(loop, id);
    if (w == NULL)
        return -ENOENT;
    stop_watcher(loop, w);
    return 0;
}
