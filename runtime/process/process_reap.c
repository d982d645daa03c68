/*
 * The reaper: children whose operation ended before they did (cancelled,
 * or their loop freed) are still tern's to reap, or they would stay
 * zombies. One process-wide thread takes them: it sleeps in poll() on its
 * wake object and on the children's pidfds, and on each wake-up asks each
 * of them with waitpid(pid, WNOHANG) (never waitpid(-1)). Children seen
 * through the SIGCHLD fallback have no pidfd; the SIGCHLD handler signals
 * the reaper's wake object as it does the loops'. The thread starts when
 * the first child is handed over and ends when it has none left. When
 * there is no memory to list a child or no thread to wait for it, the
 * child is killed (SIGKILL) and reaped at once instead: never a zombie.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "os_thread.h"
#include "platform.h"
#include "process_p.h"

struct orphan {
    pid_t pid;
    int pidfd; /* -1: seen through SIGCHLD */
};

static tern__mutex_t lock = TERN__MUTEX_INIT;
static struct orphan *orphans; /* under lock */
static size_t n_orphans, cap_orphans;
static bool running;                      /* under lock: the thread exists */
static struct tern__wake wake = {-1, -1}; /* opened once, kept */
static _Atomic bool wake_open;

/* Whether the child ended (and is now reaped). */
static bool reaped(const struct orphan *o)
{
    int st;
    pid_t r = waitpid(o->pid, &st, WNOHANG);
    return r == o->pid || (r < 0 && errno == ECHILD);
}

static void *reaper_main(void *arg)
{
    (void)arg;
    tern__thread_name("tern-reaper");
    struct pollfd *pf = NULL;
    size_t pf_cap = 0;
    for (;;) {
        tern__mutex_lock(&lock);
        for (size_t i = 0; i < n_orphans;) {
            if (reaped(&orphans[i])) {
                if (orphans[i].pidfd >= 0)
                    close(orphans[i].pidfd);
                orphans[i] = orphans[--n_orphans];
            } else {
                i++;
            }
        }
        if (n_orphans == 0) {
            free(orphans);
            orphans = NULL;
            cap_orphans = 0;
            running = false;
            tern__mutex_unlock(&lock);
            free(pf);
            return NULL;
        }
        size_t n = 1;
        if (pf_cap < n_orphans + 1) {
            struct pollfd *p = tern__realloc(pf, (n_orphans + 1) * sizeof(*p));
            if (p != NULL) {
                pf = p;
                pf_cap = n_orphans + 1;
            }
        }
        bool polling = pf_cap >= n_orphans + 1;
        bool fallback = false;
        if (polling) {
            pf[0] = (struct pollfd){.fd = wake.fd, .events = POLLIN};
            for (size_t i = 0; i < n_orphans; i++) {
                if (orphans[i].pidfd >= 0)
                    pf[n++] = (struct pollfd){.fd = orphans[i].pidfd, .events = POLLIN};
                else
                    fallback = true;
            }
        }
        tern__mutex_unlock(&lock);
        /*
         * Out of memory for the poll set: look again in a while. With the
         * fallback a SIGCHLD that came before this wait already signalled
         * the wake object, so none is missed; the timeout only bounds a
         * child reaped by somebody else's waitpid(-1).
         */
        int timeout = !polling ? 10 : fallback ? 1000 : -1;
        if (polling)
            (void)poll(pf, n, timeout);
        else
            usleep(10000);
        while (tern__wake_take(&wake))
            ;
    }
}

void tern__reaper_adopt(pid_t pid, int pidfd)
{
    tern__mutex_lock(&lock);
    if (!atomic_load(&wake_open)) {
        /* Without a wake object the thread polls (below); no child is lost. */
        if (tern__wake_open(&wake) == 0)
            atomic_store(&wake_open, true);
    }
    if (n_orphans == cap_orphans) {
        size_t cap = cap_orphans ? cap_orphans * 2 : 16;
        struct orphan *o = tern__realloc(orphans, cap * sizeof(*o));
        if (o == NULL) {
            /* Nowhere to keep it: end it and reap it here. */
            tern__mutex_unlock(&lock);
            (void)kill(pid, SIGKILL);
            int st;
            while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
                ;
            if (pidfd >= 0)
                close(pidfd);
            return;
        }
        orphans = o;
        cap_orphans = cap;
    }
    orphans[n_orphans++] = (struct orphan){pid, pidfd};
    if (!running) {
        tern__thread_t t;
        if (tern__thread_create(&t, reaper_main, NULL) == 0) {
            tern__thread_detach(t);
            running = true;
        }
    }
    bool started = running;
    tern__mutex_unlock(&lock);
    if (!started) {
        /* No thread: end it and reap it now rather than leave a zombie. */
        tern__mutex_lock(&lock);
        for (size_t i = 0; i < n_orphans; i++) {
            if (orphans[i].pid == pid) {
                orphans[i] = orphans[--n_orphans];
                break;
            }
        }
        tern__mutex_unlock(&lock);
        (void)kill(pid, SIGKILL);
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        if (pidfd >= 0)
            close(pidfd);
        return;
    }
    if (atomic_load(&wake_open))
        tern__wake_signal(&wake);
}

void tern__reaper_sigchld(void)
{
    if (atomic_load(&wake_open))
        tern__wake_signal(&wake);
}

bool tern__reaper_running(void)
{
    tern__mutex_lock(&lock);
    bool r = running;
    tern__mutex_unlock(&lock);
    return r;
}
