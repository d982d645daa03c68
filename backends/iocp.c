/*
 * The IOCP backend (Windows): one I/O completion port per loop.
 *
 * Quirks worth knowing:
 * - A completion port reports completions, not readiness, and this first
 *   version has nothing that completes yet: no descriptor can be watched.
 *   modify() refuses every interest with -EOPNOTSUPP (a watch, a wait on
 *   a socket) until sockets are registered with the port: the refusal is the
 *   truth, not a placeholder that pretends to watch. A wait therefore
 *   returns only for the loop's own wake-up or its timeout.
 * - The loop wakes through the port itself (wakes_itself, like kqueue's
 *   EVFILT_USER): wake() posts one packet with WAKE_KEY as its key
 *   (PostQueuedCompletionStatus), so the loop needs no wake descriptor.
 *   Packets do not merge (kqueue's EV_CLEAR does): every wake() is one
 *   packet, and each is retrieved once. The wake protocol makes at most
 *   one wake() per park (wake.h), which wake_take() consumes.
 * - wake_take() cannot pull one packet out of the port without pulling
 *   whatever completions come before it. So a wake the loop takes before
 *   any wait retrieved its packet is counted as owed (`stale`) and the
 *   wait that later retrieves that packet drops it: a wait may then
 *   return 0 early, which the core treats as any early return (it
 *   computes its timers again). A wait with no deadline that retrieves
 *   only stale packets waits again instead of returning.
 * - The timeout is in milliseconds, rounded up (never down, so a deadline
 *   is never missed), and capped just below INFINITE so a long finite
 *   wait never becomes an endless one; the core waits again after it.
 * - There is no descriptor a host loop could watch (a port is a HANDLE,
 *   and no other thread may wait on it without stealing the loop's
 *   packets): b->fd is -1.
 * - GetQueuedCompletionStatusEx is asked for non-alertable waits: no APC
 *   runs inside the loop's wait (tern queues none).
 */
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <windows.h>

#include "backend.h"
#include "error_win.h"
#include "fault.h"
#include "tern.h"

/* The key of the loop's wake-up packets; sockets will use their own record's address. */
#define WAKE_KEY ((ULONG_PTR)0)

/* Packets retrieved per wait: wake-ups only for now, so few are needed. */
#define ENTRIES 16

struct iocp_state {
    HANDLE port;
    /* Set (release) by wake() after its packet was posted; taken (acquire)
     * by wake_take(): the packet is in the port once this is true. */
    _Atomic bool wake_landed;
    unsigned seen;  /* wake packets a wait retrieved that no wake_take has taken */
    unsigned stale; /* wakes taken before a wait retrieved their packet */
};

static int iocp_init(struct tern__backend *b)
{
    struct iocp_state *s = tern__calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    /* One thread runs the loop: concurrency 1. */
    s->port = CreateIoCompletionPort(INVALID_HANDLE_VALUE, NULL, 0, 1);
    if (s->port == NULL) {
        int rc = tern__error_win(GetLastError());
        free(s);
        return rc;
    }
    atomic_init(&s->wake_landed, false);
    b->state = s;
    b->fd = -1;
    b->wakes_itself = true;
    return 0;
}

static void iocp_close(struct tern__backend *b)
{
    struct iocp_state *s = b->state;
    CloseHandle(s->port);
    free(s);
    b->state = NULL;
}

static int iocp_modify(struct tern__backend *b, int fd, unsigned old_events, unsigned new_events)
{
    (void)b;
    (void)fd;
    (void)old_events;
    /* Dropping an interest that could never have been added cannot fail. */
    return new_events == 0 ? 0 : -EOPNOTSUPP;
}

/* The wait's timeout in milliseconds: -1 forever, rounded up, below INFINITE. */
static DWORD to_ms(int64_t timeout_ns)
{
    if (timeout_ns < 0)
        return INFINITE;
    int64_t ms = timeout_ns / 1000000 + (timeout_ns % 1000000 != 0);
    return ms >= (int64_t)INFINITE ? INFINITE - 1 : (DWORD)ms;
}

static int iocp_wait(struct tern__backend *b, int64_t timeout_ns, struct tern__fired *out, int max)
{
    struct iocp_state *s = b->state;
    (void)out;
    (void)max;
    DWORD ms = to_ms(timeout_ns);
    for (;;) {
        OVERLAPPED_ENTRY entries[ENTRIES];
        ULONG n = 0;
        if (!GetQueuedCompletionStatusEx(s->port, entries, ENTRIES, &n, ms, FALSE)) {
            DWORD err = GetLastError();
            return err == WAIT_TIMEOUT ? 0 : tern__error_win(err);
        }
        bool fresh = false;
        for (ULONG i = 0; i < n; i++) {
            if (entries[i].lpCompletionKey != WAKE_KEY)
                continue; /* nothing else is posted yet */
            if (s->stale > 0) {
                s->stale--;
            } else {
                s->seen++;
                fresh = true;
            }
        }
        /* Only stale packets, with no deadline to return for: wait on. */
        if (fresh || ms != INFINITE)
            return 0;
    }
}

static void iocp_wake(struct tern__backend *b)
{
    struct iocp_state *s = b->state;
    /*
     * It fails only when the system is out of memory for the packet; the
     * loop would then sleep through this wake, and there is no one to
     * tell (any thread calls this). Windows does not fail it in practice.
     */
    (void)PostQueuedCompletionStatus(s->port, 0, WAKE_KEY, NULL);
    /* Pairs with the acquire load in iocp_wake_take(). */
    atomic_store_explicit(&s->wake_landed, true, memory_order_release);
}

static bool iocp_wake_take(struct tern__backend *b)
{
    struct iocp_state *s = b->state;
    /* Pairs with the release store in iocp_wake(): the packet is posted. */
    if (!atomic_load_explicit(&s->wake_landed, memory_order_acquire))
        return false;
    atomic_store_explicit(&s->wake_landed, false, memory_order_relaxed);
    if (s->seen > 0)
        s->seen--; /* a wait already retrieved it */
    else
        s->stale++; /* still in the port: the wait that retrieves it drops it */
    return true;
}

const struct tern__backend_ops tern__backend_iocp = {
    .name = "iocp",
    .init = iocp_init,
    .close = iocp_close,
    .modify = iocp_modify,
    .wait = iocp_wait,
    .wake = iocp_wake,
    .wake_take = iocp_wake_take,
};
