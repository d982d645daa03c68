/*
 * The platform file: with the rest of backends/ (the pollers, backend.h;
 * file watching, watch_ops.h; the child launcher, child_launch.h; clocks
 * and the fault seam) it is tern's one seam with the operating system.
 * Every question about the system is asked and answered on this side: a
 * TERN_HAVE_* define from meson.build picks a fast path, a POSIX fallback
 * stands beside it, and -Dportable=true builds the fallbacks only, so
 * Linux CI runs them. runtime/ asks the seam, never which system it is on
 * (test/layers_test.sh fails on a TERN_HAVE_* there). Every call returns 0
 * or a negative errno unless it says otherwise and leaves nothing open
 * when it fails; every descriptor it hands out is close-on-exec, passed
 * the fault seam (tern__fd_fault) first, and is non-blocking if a loop
 * waits on it; any thread may call it unless it names one. A new platform
 * provides all of it: docs/design.md, "The OS seam", is the list.
 *
 * Windows (backends/platform_win.c, chosen by meson in place of
 * platform.c) provides what the loop, the pool and the timers use, and
 * the console's control events for the signal watchers; the signal
 * sources and the datagram batches are declared for POSIX only (what
 * calls them, runtime/net/, does not build there yet), and the
 * socket, pidfd and wake-descriptor calls are refusals with a reason.
 */
#ifndef TERN_PLATFORM_H
#define TERN_PLATFORM_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#ifndef _WIN32
#include <sys/socket.h>
#endif
#include <time.h>

#include "errno_os.h"
#include "os_thread.h"

/* ------------------------------------------------------------------ */
/* The wake-up object                                                  */
/* ------------------------------------------------------------------ */

/*
 * What a producer writes to get a sleeping loop out of its backend wait:
 * an eventfd (fd == wfd) where there is one, a pipe elsewhere. fd is the
 * end the backend watches for readability.
 */
struct tern__wake {
    int fd;  /* read end, registered with the backend */
    int wfd; /* write end (the same descriptor for an eventfd) */
};

/*
 * tern__wake_open: create the object, both ends non-blocking.
 * Returns: 0, or -EMFILE (also injected by the fault seam), -ENFILE...
 * On failure *w holds -1 in both fields.
 */
int tern__wake_open(struct tern__wake *w);

/* tern__wake_close: close what tern__wake_open created (either may be -1). */
void tern__wake_close(struct tern__wake *w);

/*
 * tern__wake_signal: make fd readable. Any thread. A full eventfd or pipe
 * means it is readable already, which is all a signal has to achieve.
 */
void tern__wake_signal(const struct tern__wake *w);

/*
 * tern__wake_take: consume one tern__wake_signal. Returns false when
 * there was none to consume (the signal is still on its way).
 * Threads: the loop's thread only (one consumer).
 */
bool tern__wake_take(const struct tern__wake *w);

struct tern__backend;

/*
 * tern__wake_sleep: block until the loop's wake-up arrives, without a
 * turn (an idle group member, runtime/group/group.c): on the wake
 * object's fd, or on backend b's own where the backend wakes itself
 * (w->fd == -1). POSIX polls the descriptor and consumes nothing, so any
 * readiness stays for the next turn; Windows waits on the completion
 * port, which holds nothing but wake packets (no descriptor is watched
 * there), each accounted as any wait's. Either way the caller takes the
 * wake-up as a turn does (tern__loop_awake) and rechecks why it woke.
 * Threads: the loop's thread, between turns.
 */
void tern__wake_sleep(const struct tern__wake *w, struct tern__backend *b);

/* ------------------------------------------------------------------ */
/* Descriptors and sockets                                             */
/* ------------------------------------------------------------------ */

/*
 * tern__fd_watchable: whether fd can be handed to the backend for
 * readiness (tern_io_start). Returns 0; -EBADF for a negative fd or one
 * that is not open (fcntl's F_GETFD); on Windows -ENOTSOCK for anything
 * but a socket (the IOCP backend watches sockets only).
 */
int tern__fd_watchable(int fd);

/* tern__fd_nonblock_cloexec: set O_NONBLOCK and FD_CLOEXEC through fcntl. */
int tern__fd_nonblock_cloexec(int fd);

/*
 * tern__socket: socket(family, type, 0) born non-blocking and
 * close-on-exec (SOCK_NONBLOCK | SOCK_CLOEXEC where the system has them,
 * fcntl right after creation elsewhere), with SIGPIPE suppressed on the
 * socket where the system needs that (SO_NOSIGPIPE).
 * Returns: the descriptor, or a negative errno.
 */
int tern__socket(int family, int type);

/*
 * tern__accept: take one connection from listening socket lfd, with the
 * same flags as tern__socket (accept4 where it exists, accept + fcntl
 * elsewhere). Returns: the descriptor, or a negative errno (-EAGAIN when
 * the queue is empty).
 */
int tern__accept(int lfd);

/*
 * tern__socket_nosigpipe: where sendmsg has no MSG_NOSIGNAL but the socket
 * has SO_NOSIGPIPE (macOS), set it; elsewhere nothing to do.
 */
int tern__socket_nosigpipe(int fd);

/* ------------------------------------------------------------------ */
/* Threads and clocks                                                  */
/* ------------------------------------------------------------------ */

/* tern__cond_init and tern__cond_deadline: backends/os_thread.h. */

/* tern__cpu_count: the CPUs online now (at least 1). */
unsigned tern__cpu_count(void);

/* tern__thread_name, tern__cpus_usable, tern__thread_pin: os_thread.h. */

/*
 * tern__current_cpu: the CPU the calling thread runs on (it may move at
 * any moment: a hint, never a fact to rely on), or -1 where the system
 * cannot say and in portable builds.
 */
int tern__current_cpu(void);

/*
 * tern__tsc_invariant: whether the CPU's time-stamp counter ticks at a
 * constant rate through frequency changes and sleep states (CPUID
 * 0x80000007, EDX bit 8), which is what makes it a clock. False on
 * anything but x86 and in portable builds.
 */
bool tern__tsc_invariant(void);

/*
 * tern__prefetch_write: ask for the line holding p in a state fit for
 * writing, ahead of the write. A hint: it changes no memory and never
 * faults. For a line another core has just read, the write's request for
 * ownership is a cross-core exchange; asked for early it overlaps the
 * writer's work, where a write that waits for it (as every store before a
 * locked instruction does) stalls for the whole exchange. x86 has its own
 * instruction for this (PREFETCHW, where CPUID 0x80000001 ECX bit 8 says
 * the CPU has it; tern__have_prefetchw, read at startup, else nothing);
 * elsewhere, and in portable builds, the compiler's prefetch-for-store,
 * which may be nothing.
 */
#ifdef TERN_HAVE_PREFETCHW
extern bool tern__have_prefetchw;
static inline void tern__prefetch_write(const void *p)
{
    if (tern__have_prefetchw)
        __asm__ volatile("prefetchw %0" : : "m"(*(const char *)p));
}
#else
static inline void tern__prefetch_write(const void *p)
{
    __builtin_prefetch(p, 1, 3);
}
#endif

/*
 * tern__map_populated: size bytes (a multiple of the page size) of zeroed,
 * page-aligned anonymous memory, NULL on failure. Where the system can
 * (Linux's MAP_POPULATE), its pages are made present by this one call: a
 * page fault on a virtual machine costs microseconds, and one call that
 * fills sixteen pages costs less than sixteen faults. Elsewhere, and in
 * portable builds, each page is made present when first touched.
 * tern__unmap gives it back (the same size).
 */
void *tern__map_populated(size_t size);
void tern__unmap(void *p, size_t size);

/* ------------------------------------------------------------------ */
/* Signal sources                                                      */
/* ------------------------------------------------------------------ */

/*
 * How a watched signal reaches the loop: a signalfd (Linux), the loop's
 * own backend (kqueue's EVFILT_SIGNAL: no descriptor, fd stays -1), or
 * the read end of a pipe that a signal handler writes (anything else, and
 * portable builds).
 *
 * signalfd and the backend read the signal while it is blocked in the
 * loop's thread; the handler of the pipe needs it unblocked there. Either
 * way close hands the thread's mask and the signal's disposition back as
 * they were found.
 */
#ifndef _WIN32 /* POSIX signals; Windows watches console control events */
enum tern__sigsource_kind { TERN__SIG_SIGNALFD, TERN__SIG_BACKEND, TERN__SIG_PIPE };

struct tern__sigsource {
    enum tern__sigsource_kind kind;
    int signo;
    int fd;            /* watched for readability */
    int wfd;           /* the pipe's write end (TERN__SIG_PIPE only) */
    bool mask_changed; /* we blocked (or, for the pipe, unblocked) it in `owner` */
    tern__thread_t owner;
    struct sigaction old_action; /* TERN__SIG_PIPE: the disposition to restore */
};

/*
 * tern__sigsource_open: start catching signo. by_backend: the loop's
 * backend will report it (only blocks the signal here). Requires: no
 * other open source for signo in the process (signal.c's table sees to
 * it); called on the thread that will run the loop.
 * Returns: 0, or -EMFILE and other descriptor errors.
 */
int tern__sigsource_open(struct tern__sigsource *s, int signo, bool by_backend);

/*
 * tern__sigsource_read: take what arrived on fd (not for the backend
 * kind). Returns how many deliveries were taken (signals the kernel merged
 * count once), 0 when none.
 */
unsigned tern__sigsource_read(struct tern__sigsource *s);

/*
 * tern__sigsource_close: stop catching. Instances still pending are
 * consumed, not delivered, before the mask is restored, so stopping never
 * turns an already-sent signal into its default action.
 */
void tern__sigsource_close(struct tern__sigsource *s);

/* The kind tern__sigsource_open picks (for tests and docs). */
enum tern__sigsource_kind tern__sigsource_kind_for(bool by_backend);
#else /* Windows: console control events (backends/platform_win.c) */

/*
 * A console control event as the signal number tern names it by: Ctrl-C
 * is SIGINT, Ctrl-Break SIGBREAK, the console's close SIGHUP (tern.h
 * defines it there); logoff and shutdown, which reach only services, are
 * not watched (the routine leaves them to the next one).
 * The system runs the console's control routine on a thread of its own;
 * the routine calls fn(signo) there, and fn says whether some watcher took
 * it: if none did, the system's default action (ending the process) runs.
 */
typedef bool (*tern__console_fn)(int signo);

/*
 * tern__console_watch: install the control routine calling fn (!= NULL),
 * for the rest of the process: signal_win.c calls it once, on its first
 * watcher's start (fn then takes no event while no watcher exists).
 * Returns: 0, or the system's error (-ENOMEM), and then installs nothing.
 */
int tern__console_watch(tern__console_fn fn);

/*
 * tern__console_event: what the routine does with a control event (a
 * CTRL_*_EVENT number), short of the close's wait: maps it and calls fn.
 * Returns whether some watcher took it. The test seam for wine, which
 * does not deliver GenerateConsoleCtrlEvent to a console-less process.
 */
bool tern__console_event(unsigned long event);
#endif

/* ------------------------------------------------------------------ */
/* Child processes                                                     */
/* ------------------------------------------------------------------ */

/*
 * Launching is child_launch.h's (tern__launch). Learning of an exit:
 *
 * tern__pidfd_open: a descriptor for child pid that turns readable once
 * the child ends (Linux's pidfd), non-blocking and close-on-exec. It names
 * that child alone and does not reap it.
 * Returns: the descriptor, or a negative errno: -ENOSYS where the build has
 * no pidfds (and in portable builds), -EMFILE (also from the fault seam),
 * -ESRCH... Threads: any.
 */
int tern__pidfd_open(pid_t pid);

/*
 * tern__pidfd_probe: whether tern__pidfd_open works on this system, asked
 * of the kernel once for the calling process and never through the fault
 * seam (a test's injection must not decide it). Returns 1: it works; -1:
 * it never will here (not built, or the kernel refuses it); 0: cannot tell
 * now (out of descriptors): ask again later. Threads: any.
 */
int tern__pidfd_probe(void);

/* ------------------------------------------------------------------ */
/* File watching                                                       */
/* ------------------------------------------------------------------ */

/*
 * tern__watch_choose: the mechanism a loop's file watches use
 * (watch_ops.h): the backend's file-change filter when backend_vnode (its
 * ops->vnode) says it has one, else inotify where the build has it, else
 * stat polling. Never NULL. Threads: any.
 */
struct tern__watch_ops;
const struct tern__watch_ops *tern__watch_choose(bool backend_vnode);
/*
 * While set (by the tests' seam, tern__set_watch_stat), loops created from
 * now on without a file-change filter poll with stat, as a build without
 * inotify does, so the normal build's suite runs the portable mechanism.
 */
extern __attribute__((visibility("hidden"))) _Atomic bool tern__watch_stat_forced;

/*
 * Datagrams in batches, one code path for UDP: where the system has
 * recvmmsg and sendmmsg, one system call moves up to n; elsewhere one
 * recvmsg or sendmsg each. The UDP fault site (tern__net_fault) is asked
 * before each system call. Receive (non-blocking) fills d[i].len and each
 * header's msg_flags, returns how many arrived, and sets *err to 0 or to
 * the -errno that ended the batch (-EAGAIN: the socket is empty), so an
 * error met after some datagrams is told after them, not lost. Send
 * returns how many the kernel took, or the head datagram's -errno; a
 * failure after the first is the next call's to report. Loop thread only
 * (the socket's).
 */
#ifndef _WIN32 /* POSIX sockets: runtime/net/udp*.c */
struct tern__dgram {
    struct msghdr hdr;
    unsigned len;
};
int tern__recv_dgrams(int fd, struct tern__dgram *d, unsigned n, int *err);
int tern__send_dgrams(int fd, struct tern__dgram *d, unsigned n);
#endif

/*
 * How many forks led to this process: a fork handler bumps it in every
 * child, before the child's first other thread, so no thread reads it
 * while it changes. What records the count it was made under (a loop, a
 * ring) knows with one load that a forked child reaches for it.
 */
extern unsigned tern__forks;

#endif
