/*
 * Signal watchers on Windows: the console's control events, Windows'
 * subset of signals. Ctrl-C is SIGINT, Ctrl-Break SIGBREAK, the console's
 * close SIGHUP; any other number is refused. The platform file
 * (tern__console_watch) installs one control routine for the process
 * with the first watcher; the system runs it on a thread of its own,
 * where no user code may run, so it only counts the event on every
 * watcher of its signal and posts to each watcher's loop (tern_post, the
 * runtime's one cross-thread path); the post queues the watcher, whose
 * dispatch calls back once per counted event in step 2 on its loop's
 * thread. The routine reports the event taken when some post was accepted,
 * so the process is not ended; with none, the system's default runs.
 *
 * The per-signal lists live under one mutex, held by the routine while it
 * posts: a watcher's stop (and so a loop's free, which cancels its
 * watchers first) unlinks it under the same mutex, so the routine never
 * touches a freed watcher, and a post that finds its watcher gone does
 * nothing: no callback after stop. Unlike POSIX there is no source to
 * read and hand over: every watcher is fed by the routine directly.
 *
 * The routine is installed with the first watcher and stays for the
 * process: with no watcher it takes no event, which is the system's
 * default already. Removing it would call into the system's handler list
 * under the mutex the routine waits for, while the system may hold that
 * list's lock around the routine's call: the two could wait on each other.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>

#include "admit.h"
#include "loop_p.h"
#include "platform.h"

enum { SLOT_INT, SLOT_BREAK, SLOT_HUP, SLOTS };

struct tern__signal {
    struct tern__op op; /* first: the id, the class, the ready link */
    tern_loop *loop;
    int signo;
    atomic_uint pending;       /* events counted, not yet called back */
    struct tern__signal *next; /* under table_lock: the signal's other watchers */
    tern_signal_cb cb;
    void *arg;
};

static tern__mutex_t table_lock = TERN__MUTEX_INIT;
static struct tern__signal *watchers[SLOTS]; /* under table_lock */
static bool routine_installed;               /* under table_lock */

/* The list a signal number is watched in, or -1 for one Windows cannot raise. */
static int slot_of(int signo)
{
    switch (signo) {
    case SIGINT:
        return SLOT_INT;
    case SIGBREAK:
        return SLOT_BREAK;
    case SIGHUP:
        return SLOT_HUP;
    default:
        return -1;
    }
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

/* Posted by the routine: the watcher has events counted (unless stopped since). */
static void wake_watcher(tern_loop *loop, void *arg)
{
    struct tern__signal *w = signal_of(loop, (tern_id)(uintptr_t)arg);
    if (w != NULL)
        tern__op_ready(loop, &w->op);
}

/* The control routine's part, on the system's thread. */
static bool console_event(int signo)
{
    int slot = slot_of(signo);
    if (slot < 0)
        return false;
    bool taken = false;
    tern__mutex_lock(&table_lock);
    for (struct tern__signal *w = watchers[slot]; w != NULL; w = w->next) {
        atomic_fetch_add(&w->pending, 1);
        if (tern_post(w->loop, wake_watcher, (void *)(uintptr_t)w->op.id) == 0)
            taken = true;
        else
            atomic_fetch_sub(&w->pending, 1); /* that loop is going away */
    }
    tern__mutex_unlock(&table_lock);
    return taken;
}

/* Step 2: one callback per event counted. */
static void signal_dispatch(tern_loop *loop, struct tern__op *op)
{
    struct tern__signal *w = (struct tern__signal *)op;
    tern_id id = op->id;
    for (unsigned n = atomic_exchange(&w->pending, 0); n > 0; n--) {
        w->cb(loop, id, w->signo, w->arg);
        /* The callback may have stopped this watcher and freed it. */
        if (tern__op_find(loop, id) != op)
            return;
    }
}

static void signal_free(tern_loop *loop, struct tern__op *op)
{
    (void)loop;
    tern__free(op);
}

static void stop_watcher(tern_loop *loop, struct tern__signal *w)
{
    tern__mutex_lock(&table_lock);
    struct tern__signal **p = &watchers[slot_of(w->signo)];
    while (*p != w)
        p = &(*p)->next;
    *p = w->next;
    tern__mutex_unlock(&table_lock);
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
    int slot = slot_of(signo);
    if (cb == NULL || slot < 0)
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
    tern__mutex_lock(&table_lock);
    if (!routine_installed && (rc = tern__console_watch(console_event)) == 0)
        routine_installed = true;
    if (rc == 0 && (rc = tern__op_add(loop, &w->op, &signal_class)) == 0) {
        w->next = watchers[slot];
        watchers[slot] = w;
    }
    tern__mutex_unlock(&table_lock);
    if (rc < 0) {
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
