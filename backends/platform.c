/*
 * The platform file (see platform.h): fast paths where the system has
 * them, POSIX fallbacks elsewhere. Hazards are noted where they live.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#if defined(TERN_HAVE_GETCPU) || defined(TERN_HAVE_AFFINITY)
#include <sched.h>
#endif

#ifdef TERN_HAVE_EVENTFD
#include <sys/eventfd.h>
#endif
#ifdef TERN_HAVE_PIDFD
#include <sys/syscall.h>
#endif
#ifdef TERN_HAVE_SIGNALFD
#include <sys/signalfd.h>
#endif
#if defined(TERN_HAVE_TSC) || defined(TERN_HAVE_PREFETCHW)
#include <cpuid.h>
#endif

#include "backend.h"
#include "fault.h"
#include "platform.h"
#include "watch_ops.h"

/* ------------------------------------------------------------------ */
/* Descriptors                                                         */
/* ------------------------------------------------------------------ */

int tern__fd_watchable(int fd)
{
    return fd < 0 || fcntl(fd, F_GETFD) < 0 ? -EBADF : 0;
}

unsigned tern__cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1u : (unsigned)n;
}

int tern__fd_nonblock_cloexec(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -errno;
    int fdfl = fcntl(fd, F_GETFD);
    if (fdfl < 0 || fcntl(fd, F_SETFD, fdfl | FD_CLOEXEC) < 0)
        return -errno;
    return 0;
}

/* A pipe, both ends non-blocking and close-on-exec. */
static int make_pipe(int fds[2])
{
    int rc = tern__fd_fault();
    if (rc < 0)
        return rc;
#ifdef TERN_HAVE_PIPE2
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) < 0)
        return -errno;
#else
    /*
     * Between pipe() and the fcntls a fork+exec on another thread inherits
     * both ends. That leak is the price of systems without pipe2; the
     * descriptors are the loop's own and nothing in the child reads them.
     */
    if (pipe(fds) < 0)
        return -errno;
    if ((rc = tern__fd_nonblock_cloexec(fds[0])) < 0 ||
        (rc = tern__fd_nonblock_cloexec(fds[1])) < 0) {
        close(fds[0]);
        close(fds[1]);
        return rc;
    }
#endif
    return 0;
}

int tern__socket_nosigpipe(int fd)
{
#if defined(SO_NOSIGPIPE) && !defined(MSG_NOSIGNAL)
    /* Where sendmsg has no MSG_NOSIGNAL, the socket itself must not raise SIGPIPE. */
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof(one)) < 0)
        return -errno;
#else
    (void)fd;
#endif
    return 0;
}

/* Finish a descriptor born without the flags: set them, or close it. */
static int finish_socket(int fd)
{
    int rc = 0;
#ifndef TERN_HAVE_SOCK_FLAGS
    rc = tern__fd_nonblock_cloexec(fd);
#endif
    if (rc == 0)
        rc = tern__socket_nosigpipe(fd);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

int tern__socket(int family, int type)
{
    int rc = tern__fd_fault();
    if (rc < 0)
        return rc;
#ifdef TERN_HAVE_SOCK_FLAGS
    type |= SOCK_NONBLOCK | SOCK_CLOEXEC;
#endif
    int fd = socket(family, type, 0);
    return fd < 0 ? -errno : finish_socket(fd);
}

int tern__accept(int lfd)
{
    int rc = tern__fd_fault();
    if (rc < 0)
        return rc;
#ifdef TERN_HAVE_ACCEPT4
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
#else
    /*
     * Whether an accepted socket inherits O_NONBLOCK differs between
     * systems (the BSDs: yes; Linux: no), so it is set either way.
     */
    int fd = accept(lfd, NULL, NULL);
#endif
    if (fd < 0)
        return -errno;
#ifdef TERN_HAVE_ACCEPT4
    return finish_socket(fd);
#else
    if ((rc = tern__fd_nonblock_cloexec(fd)) < 0) {
        close(fd);
        return rc;
    }
    return finish_socket(fd);
#endif
}

/* ------------------------------------------------------------------ */
/* The wake-up object                                                  */
/* ------------------------------------------------------------------ */

int tern__wake_open(struct tern__wake *w)
{
    w->fd = w->wfd = -1;
#ifdef TERN_HAVE_EVENTFD
    int rc = tern__fd_fault();
    if (rc < 0)
        return rc;
    int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0)
        return -errno;
    w->fd = w->wfd = fd;
    return 0;
#else
    int fds[2];
    int rc = make_pipe(fds);
    if (rc < 0)
        return rc;
    w->fd = fds[0];
    w->wfd = fds[1];
    return 0;
#endif
}

void tern__wake_close(struct tern__wake *w)
{
    if (w->wfd >= 0 && w->wfd != w->fd)
        close(w->wfd);
    if (w->fd >= 0)
        close(w->fd);
    w->fd = w->wfd = -1;
}

void tern__wake_signal(const struct tern__wake *w)
{
#ifdef TERN_HAVE_EVENTFD
    uint64_t one = 1;
    ssize_t n = write(w->wfd, &one, sizeof(one));
#else
    char one = 1;
    ssize_t n = write(w->wfd, &one, 1);
#endif
    (void)n; /* EAGAIN: full, so readable already */
}

bool tern__wake_take(const struct tern__wake *w)
{
#ifdef TERN_HAVE_EVENTFD
    uint64_t value;
    return read(w->fd, &value, sizeof(value)) == (ssize_t)sizeof(value);
#else
    char byte;
    return read(w->fd, &byte, 1) == 1;
#endif
}

void tern__wake_sleep(const struct tern__wake *w, struct tern__backend *b)
{
    struct pollfd pfd = {.fd = w->fd >= 0 ? w->fd : b->fd, .events = POLLIN};
    while (poll(&pfd, 1, -1) < 0 && errno == EINTR)
        ;
}

/* ------------------------------------------------------------------ */
/* Threads and clocks                                                  */
/* ------------------------------------------------------------------ */

int tern__cond_init(tern__cond_t *c)
{
#ifdef TERN_HAVE_CONDATTR_SETCLOCK
    pthread_condattr_t attr;
    int rc = pthread_condattr_init(&attr);
    if (rc != 0)
        return -rc;
    rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(c, &attr);
    pthread_condattr_destroy(&attr);
    return -rc;
#else
    return -pthread_cond_init(c, NULL);
#endif
}

tern__deadline_t tern__cond_deadline(uint64_t ns)
{
    struct timespec t;
#ifdef TERN_HAVE_CONDATTR_SETCLOCK
    clock_gettime(CLOCK_MONOTONIC, &t);
#else
    /* The realtime clock may be stepped during the wait: a deadline can
     * then come early or late. Callers only use timed waits for idling. */
    clock_gettime(CLOCK_REALTIME, &t);
#endif
    uint64_t nsec = (uint64_t)t.tv_nsec + ns;
    t.tv_sec += (time_t)(nsec / 1000000000u);
    t.tv_nsec = (long)(nsec % 1000000000u);
    return t;
}

void tern__thread_name(const char *name)
{
#ifdef TERN_HAVE_SETNAME_NP
    (void)pthread_setname_np(pthread_self(), name);
#else
    (void)name;
#endif
}

unsigned tern__cpus_usable(int *cpus, unsigned cap)
{
    unsigned n = 0;
#ifdef TERN_HAVE_AFFINITY
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        for (int c = 0; c < CPU_SETSIZE && c < TERN__CPUS_MAX && n < cap; c++)
            if (CPU_ISSET(c, &set))
                cpus[n++] = c;
#endif
    if (n == 0)
        cpus[n++] = 0;
    return n;
}

int tern__thread_pin(int cpu)
{
#ifdef TERN_HAVE_AFFINITY
    /* A CPU outside the set's range is not set (CPU_SET checks it), and
     * the kernel refuses the empty set with EINVAL, as a CPU outside the
     * process's mask. */
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return -pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
#else
    (void)cpu;
    return -ENOTSUP;
#endif
}

int tern__current_cpu(void)
{
#ifdef TERN_HAVE_GETCPU
    return sched_getcpu();
#else
    return -1;
#endif
}

bool tern__tsc_invariant(void)
{
#ifdef TERN_HAVE_TSC
    unsigned a, b, c, d;
    if ((unsigned)__get_cpuid_max(0x80000000u, NULL) < 0x80000007u)
        return false;
    __cpuid(0x80000007u, a, b, c, d);
    (void)a;
    (void)b;
    (void)c;
    return (d >> 8) & 1u;
#else
    return false;
#endif
}

#ifdef TERN_HAVE_PREFETCHW
bool tern__have_prefetchw;

__attribute__((constructor)) static void prefetchw_probe(void)
{
    unsigned a, b, c, d;
    if ((unsigned)__get_cpuid_max(0x80000000u, NULL) < 0x80000001u)
        return;
    __cpuid(0x80000001u, a, b, c, d);
    (void)a;
    (void)b;
    (void)d;
    tern__have_prefetchw = (c & bit_PRFCHW) != 0;
}
#endif

void *tern__map_populated(size_t size)
{
    int flags = MAP_PRIVATE | MAP_ANONYMOUS;
#ifdef TERN_HAVE_MAP_POPULATE
    flags |= MAP_POPULATE;
#endif
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, flags, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void tern__unmap(void *p, size_t size)
{
    munmap(p, size);
}

/* ------------------------------------------------------------------ */
/* Signal sources                                                      */
/* ------------------------------------------------------------------ */

/*
 * The pipe kind's handler finds its pipe here, by signal number (stored
 * + 1 so zero-initialisation means "none"). `in_handler` counts handlers
 * between loading a descriptor and finishing their write, so close can
 * wait them out before the descriptor number may be reused: without it a
 * handler on another thread could write into whatever file next got that
 * number.
 */
static _Atomic int pipe_of[NSIG];
static _Atomic unsigned in_handler[NSIG];

static void pipe_handler(int signo)
{
    int saved = errno;
    /* seq_cst, both: pairs with the store and load in close_pipe(). */
    atomic_fetch_add(&in_handler[signo], 1);
    int fd = atomic_load(&pipe_of[signo]) - 1;
    if (fd >= 0) {
        unsigned char b = (unsigned char)signo;
        ssize_t n = write(fd, &b, 1);
        (void)n; /* a full pipe already says "arrived" */
    }
    atomic_fetch_sub(&in_handler[signo], 1);
    errno = saved;
}

static void set_mask(int how, int signo)
{
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, signo);
    pthread_sigmask(how, &one, NULL);
}

static bool blocked_here(int signo)
{
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    return sigismember(&cur, signo);
}

static int open_pipe(struct tern__sigsource *s)
{
    int fds[2];
    int rc = make_pipe(fds);
    if (rc < 0)
        return rc;
    s->fd = fds[0];
    s->wfd = fds[1];
    atomic_store(&pipe_of[s->signo], s->wfd + 1);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = pipe_handler;
    sigfillset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* the application's own slow calls go on */
    if (sigaction(s->signo, &sa, &s->old_action) < 0) {
        rc = -errno;
        atomic_store(&pipe_of[s->signo], 0);
        close(s->fd);
        close(s->wfd);
        return rc;
    }
    /* The handler must be able to run on this thread, the one that runs
     * the loop (tern's own threads block every signal). */
    s->mask_changed = blocked_here(s->signo);
    if (s->mask_changed)
        set_mask(SIG_UNBLOCK, s->signo);
    return 0;
}

static void close_pipe(struct tern__sigsource *s)
{
    /* Re-block first, so this thread cannot take the signal (and die by
     * its default action) between the two steps below. */
    if (s->mask_changed && tern__thread_equal(s->owner, tern__thread_self()))
        set_mask(SIG_BLOCK, s->signo);
    sigaction(s->signo, &s->old_action, NULL);
    atomic_store(&pipe_of[s->signo], 0);
    while (atomic_load(&in_handler[s->signo]) != 0)
        ; /* a handler mid-write: a few instructions */
    close(s->wfd);
    close(s->fd);
}

enum tern__sigsource_kind tern__sigsource_kind_for(bool by_backend)
{
    if (by_backend)
        return TERN__SIG_BACKEND;
#ifdef TERN_HAVE_SIGNALFD
    return TERN__SIG_SIGNALFD;
#else
    return TERN__SIG_PIPE;
#endif
}

int tern__sigsource_open(struct tern__sigsource *s, int signo, bool by_backend)
{
    *s = (struct tern__sigsource){.kind = tern__sigsource_kind_for(by_backend),
                                  .signo = signo,
                                  .fd = -1,
                                  .wfd = -1,
                                  .owner = tern__thread_self()};
    if (s->kind == TERN__SIG_PIPE)
        return open_pipe(s);
    /*
     * signalfd and EVFILT_SIGNAL both want the signal blocked: signalfd
     * reads only pending signals, and on the BSDs kqueue merely records a
     * delivery, which then still runs the signal's action (for SIGTERM,
     * death) unless the signal is blocked or ignored. Blocking, unlike
     * ignoring, is per thread and leaves the application's disposition
     * alone.
     */
    s->mask_changed = !blocked_here(signo);
    set_mask(SIG_BLOCK, signo);
    int rc = 0;
#ifdef TERN_HAVE_SIGNALFD
    if (s->kind == TERN__SIG_SIGNALFD) {
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, signo);
        rc = tern__fd_fault();
        int fd = rc < 0 ? rc : signalfd(-1, &one, SFD_NONBLOCK | SFD_CLOEXEC);
        if (fd >= 0)
            s->fd = fd;
        rc = fd < 0 ? (rc < 0 ? rc : -errno) : 0;
    }
#endif
    if (rc < 0 && s->mask_changed)
        set_mask(SIG_UNBLOCK, signo);
    return rc;
}

unsigned tern__sigsource_read(struct tern__sigsource *s)
{
    switch (s->kind) {
#ifdef TERN_HAVE_SIGNALFD
    case TERN__SIG_SIGNALFD: {
        struct signalfd_siginfo si;
        return read(s->fd, &si, sizeof(si)) == (ssize_t)sizeof(si) ? 1 : 0;
    }
#endif
    case TERN__SIG_PIPE: {
        unsigned char buf[64];
        ssize_t n = read(s->fd, buf, sizeof(buf));
        return n > 0 ? (unsigned)n : 0;
    }
    default:
        return 0;
    }
}

/* Take every pending instance of signo off the thread and the process. */
static void consume_pending(int signo)
{
#ifdef TERN_HAVE_SIGTIMEDWAIT
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, signo);
    const struct timespec zero = {0, 0};
    while (sigtimedwait(&one, NULL, &zero) == signo)
        ;
#else
    /*
     * macOS has no sigtimedwait. POSIX says setting SIG_IGN discards a
     * pending signal, so ignore it for a moment and put the action back.
     * An instance sent in that moment is discarded too, which is what
     * stopping asked for anyway.
     */
    sigset_t pending;
    if (sigpending(&pending) < 0 || !sigismember(&pending, signo))
        return;
    struct sigaction ign, old;
    memset(&ign, 0, sizeof(ign));
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    if (sigaction(signo, &ign, &old) == 0)
        sigaction(signo, &old, NULL);
#endif
}

void tern__sigsource_close(struct tern__sigsource *s)
{
    if (s->kind == TERN__SIG_PIPE) {
        close_pipe(s);
        return;
    }
    if (s->fd >= 0)
        close(s->fd);
    consume_pending(s->signo);
    /* Only the thread that blocked the signal can unblock it for itself;
     * a loop freed from another thread leaves that thread's mask alone. */
    if (s->mask_changed && tern__thread_equal(s->owner, tern__thread_self()))
        set_mask(SIG_UNBLOCK, s->signo);
}

/* ------------------------------------------------------------------ */
/* Child processes                                                     */
/* ------------------------------------------------------------------ */

int tern__pidfd_open(pid_t pid)
{
#ifdef TERN_HAVE_PIDFD
    int rc = tern__fd_fault();
    if (rc < 0)
        return rc;
    long fd = syscall(SYS_pidfd_open, pid, 0u);
    if (fd < 0)
        return -errno;
    rc = tern__fd_nonblock_cloexec((int)fd); /* pidfds are close-on-exec already */
    if (rc < 0) {
        close((int)fd);
        return rc;
    }
    return (int)fd;
#else
    (void)pid;
    return -ENOSYS;
#endif
}

int tern__pidfd_probe(void)
{
#ifdef TERN_HAVE_PIDFD
    long fd = syscall(SYS_pidfd_open, getpid(), 0u);
    int w = fd >= 0 ? 1 : errno == ENOSYS || errno == EPERM ? -1 : 0;
    if (fd >= 0)
        close((int)fd);
    return w;
#else
    return -1;
#endif
}

/* ------------------------------------------------------------------ */
/* File watching                                                       */
/* ------------------------------------------------------------------ */

_Atomic bool tern__watch_stat_forced;

const struct tern__watch_ops *tern__watch_choose(bool backend_vnode)
{
    /*
     * The backend's filter first, also where inotify is built too
     * (libkqueue on Linux), so the kqueue conformance suite runs the code
     * the BSDs and macOS run.
     */
#ifdef TERN_HAVE_KQUEUE
    if (backend_vnode)
        return &tern__watch_vnode;
#else
    (void)backend_vnode; /* only kqueue has the filter */
#endif
#ifdef TERN_HAVE_INOTIFY
    if (atomic_load_explicit(&tern__watch_stat_forced, memory_order_relaxed))
        return &tern__watch_stat;
    return &tern__watch_inotify;
#else
    return &tern__watch_stat;
#endif
}

/* ------------------------------------------------------------------ */
/* Datagrams                                                           */
/* ------------------------------------------------------------------ */

#ifdef TERN_HAVE_MMSG
/* The kernel's own batch: tern__dgram is laid out as struct mmsghdr. */
_Static_assert(sizeof(struct tern__dgram) == sizeof(struct mmsghdr) &&
                   offsetof(struct tern__dgram, len) == offsetof(struct mmsghdr, msg_len),
               "tern__dgram must match struct mmsghdr");

int tern__recv_dgrams(int fd, struct tern__dgram *d, unsigned n, int *err)
{
    int rc = tern__net_fault();
    if (rc == 0) {
        do
            rc = recvmmsg(fd, (struct mmsghdr *)d, n, MSG_DONTWAIT, NULL);
        while (rc < 0 && errno == EINTR);
        if (rc < 0)
            rc = -errno;
    }
    /* An error after some datagrams the kernel keeps for the next call. */
    *err = rc < 0 ? rc : 0;
    return rc < 0 ? 0 : rc;
}

int tern__send_dgrams(int fd, struct tern__dgram *d, unsigned n)
{
    int rc = tern__net_fault();
    if (rc < 0)
        return rc;
    rc = sendmmsg(fd, (struct mmsghdr *)d, n, MSG_NOSIGNAL);
    return rc < 0 ? -errno : rc;
}
#else
int tern__recv_dgrams(int fd, struct tern__dgram *d, unsigned n, int *err)
{
    unsigned got = 0;
    *err = 0;
    for (; got < n; got++) {
        ssize_t r = tern__net_fault();
        if (r == 0) {
            do
                r = recvmsg(fd, &d[got].hdr, MSG_DONTWAIT);
            while (r < 0 && errno == EINTR);
            if (r < 0)
                r = -errno;
        }
        if (r < 0) {
            *err = (int)r; /* consumed here: told after the datagrams before it */
            break;
        }
        d[got].len = (unsigned)r;
    }
    return (int)got;
}

int tern__send_dgrams(int fd, struct tern__dgram *d, unsigned n)
{
    unsigned sent = 0;
    for (; sent < n; sent++) {
        int rc = tern__net_fault();
        if (rc == 0 && sendmsg(fd, &d[sent].hdr, MSG_NOSIGNAL) < 0)
            rc = -errno;
        if (rc < 0)
            return sent > 0 ? (int)sent : rc;
    }
    return (int)sent;
}
#endif

/* ------------------------------------------------------------------ */
/* Forks                                                               */
/* ------------------------------------------------------------------ */

unsigned tern__forks;

static void forks_count_child(void)
{
    tern__forks++;
}

__attribute__((constructor)) static void forks_handler(void)
{
    tern__atfork(NULL, NULL, forks_count_child);
}
