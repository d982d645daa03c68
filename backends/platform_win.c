/*
 * The platform file on Windows (platform.h), chosen by meson in place of
 * platform.c. It provides what the loop, the pool and the timers use;
 * what needs sockets on the completion port refuses with a reason instead of
 * pretending.
 *
 * Quirks and decisions:
 * - The loop's wake-up is the IOCP backend's own (a packet posted to the
 *   loop's port, backends/iocp.c), so no wake descriptor exists:
 *   tern__wake_open refuses with -ENOSYS (only a backend that does not
 *   wake itself asks, and the only Windows backend does), and the other
 *   wake calls are never reached with an open object. An idle group
 *   member sleeps in the port's own wait (tern__wake_sleep): the port
 *   reports nothing but wake packets, so the wait takes nothing a turn
 *   would have needed.
 * - Only sockets can be watched (the IOCP backend polls them through
 *   AFD): tern__fd_watchable refuses anything else with -ENOTSOCK, so
 *   tern_io_start refuses before anything is admitted. The backend's
 *   modify checks again, for tern_wait_fd and the runtime's own watches.
 * - Memory: Windows has no MAP_POPULATE, so tern__map_populated is
 *   VirtualAlloc's committed pages, which are made present as they are
 *   touched (pages_win.c has the lazy pages and aligned blocks).
 * - File watching: no mechanism is built (watch_stat.c reads POSIX's
 *   nanosecond stat times); tern__watch_choose returns one whose open
 *   refuses with -ENOTSUP, so tern_watch_start fails honestly.
 * - No fork: tern__forks stays 0. No pidfds: -ENOSYS, as on a POSIX
 *   system without them.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <winsock2.h>
#include <windows.h>

#include "backend.h"
#include "check.h"
#include "error_win.h"
#include "platform.h"
#include "watch_ops.h"

int tern__wake_open(struct tern__wake *w)
{
    w->fd = w->wfd = -1;
    return -ENOSYS;
}

void tern__wake_close(struct tern__wake *w)
{
    w->fd = w->wfd = -1;
}

void tern__wake_signal(const struct tern__wake *w)
{
    (void)w; /* no object is ever open (tern__wake_open) */
}

bool tern__wake_take(const struct tern__wake *w)
{
    (void)w;
    return true; /* nothing to consume: never reached with an open object */
}

void tern__wake_sleep(const struct tern__wake *w, struct tern__backend *b)
{
    (void)w; /* never open: the port is the wake-up (tern__wake_open) */
    struct tern__fired none[1];
    /* -1 and room for nothing: until a wake packet. Socket reports that
     * come meanwhile stay in the backend for the loop's next wait. */
    int n = b->ops->wait(b, -1, none, 0);
    TERN_INSIST(n <= 0);
}

int tern__fd_watchable(int fd)
{
    if (fd < 0)
        return -EBADF;
    int type = 0, len = sizeof(type);
    SOCKET s = (SOCKET)(uintptr_t)(unsigned)fd;
    if (getsockopt(s, SOL_SOCKET, SO_TYPE, (char *)&type, &len) != 0)
        return tern__error_win((unsigned long)WSAGetLastError());
    return 0;
}

unsigned tern__cpu_count(void)
{
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    return si.dwNumberOfProcessors < 1 ? 1u : (unsigned)si.dwNumberOfProcessors;
}

int tern__current_cpu(void)
{
    return (int)GetCurrentProcessorNumber();
}

bool tern__tsc_invariant(void)
{
    return false; /* clock.c is built without TERN_HAVE_TSC here */
}

void *tern__map_populated(size_t size)
{
    return VirtualAlloc(NULL, size, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
}

void tern__unmap(void *p, size_t size)
{
    (void)size; /* MEM_RELEASE frees the whole reservation and wants 0 */
    VirtualFree(p, 0, MEM_RELEASE);
}

int tern__pidfd_open(pid_t pid)
{
    (void)pid;
    return -ENOSYS;
}

int tern__pidfd_probe(void)
{
    return -1;
}

/* File watching: refused until a Windows mechanism exists (see the top). */
static int none_open(struct tern__watch_src *src, const char *path)
{
    (void)src;
    (void)path;
    return -ENOTSUP;
}

static void none_close(struct tern__watch_src *src)
{
    (void)src;
}

static int none_note(struct tern__watch_src *src, unsigned fired)
{
    (void)src;
    (void)fired;
    return 0;
}

static void none_read(struct tern__watch_src *src, tern__watch_emit_fn emit, void *ctx)
{
    (void)src;
    (void)emit;
    (void)ctx;
}

static const struct tern__watch_ops watch_none = {
    .name = "none",
    .open = none_open,
    .close = none_close,
    .note = none_note,
    .read = none_read,
};

_Atomic bool tern__watch_stat_forced;

const struct tern__watch_ops *tern__watch_choose(bool backend_vnode)
{
    (void)backend_vnode;
    return &watch_none;
}

unsigned tern__forks;

/* Console control events (platform.h). The function is read on the
 * system's thread, so it is published atomically. */
static _Atomic(tern__console_fn) console_fn;

bool tern__console_event(unsigned long event)
{
    int signo;
    switch (event) {
    case CTRL_C_EVENT:
        signo = SIGINT;
        break;
    case CTRL_BREAK_EVENT:
        signo = SIGBREAK;
        break;
    case CTRL_CLOSE_EVENT:
        signo = 1; /* SIGHUP as tern.h defines it on Windows */
        break;
    default:
        /* Logoff and shutdown reach services only, which go on after a
         * logoff: holding the routine as for a close would be wrong
         * there, so they keep the system's default. */
        return false;
    }
    tern__console_fn fn = atomic_load(&console_fn);
    return fn != NULL && fn(signo);
}

static BOOL WINAPI console_routine(DWORD event)
{
    if (!tern__console_event(event))
        return FALSE;
    /* The system ends the process as soon as a close's routine returns,
     * whatever it answers, and otherwise only after its timeout (about
     * 5 s): holding this thread gives the loops that time to run their
     * callbacks and leave on their own. */
    if (event == CTRL_CLOSE_EVENT)
        Sleep(INFINITE);
    return TRUE;
}

int tern__console_watch(tern__console_fn fn)
{
    atomic_store(&console_fn, fn);
    if (SetConsoleCtrlHandler(console_routine, TRUE))
        return 0;
    int rc = tern__error_win(GetLastError());
    atomic_store(&console_fn, NULL);
    return rc;
}
