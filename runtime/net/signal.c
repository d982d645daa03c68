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
 * One watcher per signal per process (a table under one mutex): two
 * sources for one signal race to read each instance, so sharing would
 * deliver each signal to one of them at random. tern refuses with -EEXIST.
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
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <urcu-qsbr.h>

#include "net_p.h"

#define SIGNALS_PER_READY 16 /* reads of the source per readiness */

struct tern__signal {
    struct tern__op op; /* first: the id, the class, the ready link */
    tern_loop *loop;
    int signo;
    struct tern__sigsource src;
    struct tern__io io; /* the source's descriptor (not for TERN__SIG_BACKEND) */
    tern_signal_cb cb;
    void *arg;
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static bool watched[_NSIG]; /* under table_lock */
static struct tern__signal *by_backend[_NSIG]; /* under table_lock: backend-read watchers */

/*
 * fork(): the table lock is held around the fork so the child never
 * inherits it locked; the child forgets the parent's watchers (their loops
 * are unusable there) so it may watch those signals itself.
 */
static void table_before_fork(void)
{
    pthread_mutex_lock(&table_lock);
}

static void table_after_fork_parent(void)
{
    pthread_mutex_unlock(&table_lock);
}

static void table_after_fork_child(void)
{
    for (size_t i = 0; i < sizeof(watched) / sizeof(watched[0]); i++)
        watched[i] = false;
    pthread_mutex_unlock(&table_lock);
}

__attribute__((constructor)) static void table_fork_handlers(void)
{
    pthread_atfork(table_before_fork, table_after_fork_parent, table_after_fork_child);
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

/*
 * Step 2. A backend-read watcher was queued by a fired entry: deliveries
 * since the last dispatch merge into one callback. Any other was queued by
 * its source turning readable: read it, one callback per read.
 */
static void signal_dispatch(tern_loop *loop, struct tern__op *op)
{
    struct tern__signal *w = (struct tern__signal *)op;
    if (w->src.kind == TERN__SIG_BACKEND) {
        w->cb(loop, op->id, w->signo, w->arg);
        return;
    }
    tern_id id = op->id;
    for (int i = 0; i < SIGNALS_PER_READY; i++) {
        /* One callback per read: deliveries one read takes are merged,
         * as the kernel merges a signal sent again while pending. */
        if (tern__sigsource_read(&w->src) == 0)
            return; /* nothing more pending (EINTR: the next turn retries) */
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
    struct tern__signal *w = caa_container_of(io, struct tern__signal, io);
    tern__op_ready(loop, &w->op);
}

void tern__signal_fired(tern_loop *loop, int signo, unsigned count)
{
    (void)count; /* merged into one callback, as the kernel merges them */
    if (signo <= 0 || signo >= _NSIG)
        return;
    pthread_mutex_lock(&table_lock);
    struct tern__signal *w = by_backend[signo];
    pthread_mutex_unlock(&table_lock);
    /* Stopped since, or another loop's: the table says who owns it now. */
    if (w != NULL && w->loop == loop)
        tern__op_ready(loop, &w->op);
}

static void signal_free(tern_loop *loop, struct tern__op *op)
{
    (void)loop;
    tern__free(op);
}

static void stop_watcher(tern_loop *loop, struct tern__signal *w)
{
    if (w->src.kind == TERN__SIG_BACKEND) {
        (void)loop->backend.ops->signal(&loop->backend, w->signo, false);
        loop->io_count--;
    } else {
        tern__io_stop(loop, &w->io);
    }
    tern__sigsource_close(&w->src);
    pthread_mutex_lock(&table_lock);
    watched[w->signo] = false;
    by_backend[w->signo] = NULL;
    pthread_mutex_unlock(&table_lock);
    tern__op_finish(loop, &w->op);
}

static int signal_cancel(tern_loop *loop, struct tern__op *op)
{
    stop_watcher(loop, (struct tern__signal *)op);
    return 0;
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

int tern_signal_start(tern_loop *loop, int signo, tern_signal_cb cb, void *arg, tern_id *idp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (cb == NULL || signo <= 0 || signo >= _NSIG || signo == SIGKILL || signo == SIGSTOP)
        return -EINVAL;
    pthread_mutex_lock(&table_lock);
    int rc = watched[signo] ? -EEXIST : 0;
    if (rc == 0)
        watched[signo] = true; /* reserved; released below on failure */
    pthread_mutex_unlock(&table_lock);
    if (rc < 0)
        return rc;

    struct tern__signal *w = NULL;
    if ((rc = tern__op_admit(loop)) < 0)
        goto unreserve;
    if ((w = tern__calloc(1, sizeof(*w))) == NULL) {
        rc = -ENOMEM;
        goto unadmit;
    }
    *w = (struct tern__signal){.loop = loop, .signo = signo, .cb = cb, .arg = arg};
    tern__io_init(&w->io, source_fired);
    rcu_helper_with_signals_blocked(loop);
    bool by_loop_backend = loop->backend.ops->signal != NULL;
    if ((rc = tern__sigsource_open(&w->src, signo, by_loop_backend)) < 0)
        goto free;
    if (by_loop_backend) {
        /* Blocked now (sigsource_open), so nothing is lost in between. */
        if ((rc = loop->backend.ops->signal(&loop->backend, signo, true)) < 0)
            goto close;
        if ((rc = tern__op_add(loop, &w->op, &signal_class)) < 0) {
            (void)loop->backend.ops->signal(&loop->backend, signo, false);
            goto close;
        }
        loop->io_count++; /* the kernel has something to report: ask it */
        pthread_mutex_lock(&table_lock);
        by_backend[signo] = w;
        pthread_mutex_unlock(&table_lock);
    } else {
        if ((rc = tern__io_start(loop, &w->io, w->src.fd, TERN_READABLE)) < 0)
            goto close;
        if ((rc = tern__op_add(loop, &w->op, &signal_class)) < 0) {
            tern__io_stop(loop, &w->io);
            goto close;
        }
    }
    if (idp != NULL)
        *idp = w->op.id;
    return 0;

close:
    tern__sigsource_close(&w->src);
free:
    tern__free(w);
unadmit:
    tern__op_unadmit(loop);
unreserve:
    pthread_mutex_lock(&table_lock);
    watched[signo] = false;
    pthread_mutex_unlock(&table_lock);
    return rc;
}

int tern_signal_stop(tern_loop *loop, tern_id id)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    struct tern__op *op = tern__op_find(loop, id);
    if (op == NULL || op->cls != &signal_class)
        return -ENOENT;
    stop_watcher(loop, (struct tern__signal *)op);
    return 0;
}
