/*
 * The IOCP backend (Windows): one I/O completion port per loop, and
 * socket readiness through the AFD driver's poll request.
 *
 * Quirks worth knowing:
 * - A completion port reports completions, not readiness. Readiness of a
 *   socket is asked of the AFD driver (the kernel side of Winsock) with
 *   IOCTL_AFD_POLL, issued through NtDeviceIoControlFile on a helper
 *   handle (\\Device\\Afd\\tern, one per loop, opened at the first watch)
 *   that is associated with the port. The request names the socket's base
 *   handle (SIO_BASE_HANDLE: the provider's own socket under any layered
 *   one) and completes on the port when one of the asked conditions holds.
 *   The user's socket itself is never associated with the port, so its
 *   overlapped I/O elsewhere is untouched.
 * - One poll in flight per watched socket, held in a record of the
 *   backend's own (struct sock): the kernel writes into the record until
 *   the poll's completion is retrieved, so a record lives until then,
 *   whatever the core did meanwhile.
 * - Level-triggered, as the core expects. A poll reports once; after its
 *   report is handed to the core the socket is polled again at the start
 *   of the next wait, and a condition that still holds (bytes left
 *   unread) completes that poll at once. So a condition is reported every
 *   wait for as long as it holds, as under epoll.
 * - modify() queues: an add or a change arms the socket at the next wait.
 *   A change that asks for a condition the poll in flight does not cover
 *   cancels that poll (CancelIoEx on the helper, NtCancelIoFileEx
 *   underneath); its cancelled completion re-arms it with the new
 *   interest. A delete cancels the poll in flight and drops the record
 *   from the table at once; the record is freed when the cancelled
 *   completion is retrieved (a later wait, or close()). close() cancels
 *   every poll and waits in the port until each one's completion has come
 *   back, so no request outlives the memory it writes.
 * - A watch on something that is not a socket is refused with -ENOTSOCK
 *   before anything is made (getsockopt(SO_TYPE): wine's SIO_BASE_HANDLE
 *   answers for any handle).
 * - Events: AFD's receive, accept and disconnect (the peer's FIN) are
 *   TERN_READABLE, and a disconnect is TERN_HANGUP too (AFD does not tell
 *   a half-close from a close; kqueue's EV_EOF is the same); send is
 *   TERN_WRITABLE; abort (a reset) is TERN_HANGUP | TERN_ERROR; a failed
 *   connect TERN_WRITABLE | TERN_ERROR. The disconnect is asked for only
 *   with read interest, so a write-only watch is not told of a half-close
 *   every turn. A socket closed while watched (AFD's local close) reports
 *   nothing and is not polled again, as epoll forgets a closed descriptor.
 *   A poll the driver refuses (the socket went bad) is TERN_ERROR once,
 *   and the socket is not polled again until its interest changes.
 * - Reports that do not fit the caller's array stay in their records and
 *   go out with the next wait; a wait with max 0 (the idle group member's
 *   sleep, tern__wake_sleep) takes completions into the records and
 *   returns only for a wake-up.
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
 *   only stale packets (or completions that report nothing) waits again
 *   instead of returning.
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
#include <stdint.h>
#include <stdlib.h>
#include <winsock2.h>
#include <windows.h>
#include <winternl.h>
#include <mswsock.h>

#include "backend.h"
#include "error_win.h"
#include "fault.h"
#include "tern.h"

/* The key of the loop's wake-up packets. */
#define WAKE_KEY ((ULONG_PTR)0)
/* The key of the AFD helper's completions; each one's overlapped pointer is its record. */
#define POLL_KEY ((ULONG_PTR)1)

/* Packets retrieved per call. */
#define ENTRIES 64

/* The AFD driver's poll request, as the driver defines it (not in the SDK). */
#define AFD_IOCTL_POLL 0x00012024u
enum {
    AFD_RECEIVE = 0x0001,
    AFD_SEND = 0x0004,
    AFD_DISCONNECT = 0x0008,
    AFD_ABORT = 0x0010,
    AFD_LOCAL_CLOSE = 0x0020,
    AFD_ACCEPT = 0x0080,
    AFD_CONNECT_FAIL = 0x0100,
};
struct afd_poll_entry {
    HANDLE socket;
    ULONG events;
    NTSTATUS status;
};
struct afd_poll {
    LARGE_INTEGER timeout; /* absolute; the largest value: never */
    ULONG count;
    ULONG exclusive;
    struct afd_poll_entry entry[1];
};

#ifndef STATUS_CANCELLED
#define STATUS_CANCELLED ((NTSTATUS)0xC0000120L)
#endif

/* One watched socket. The kernel owns iosb and poll while in_flight. */
struct sock {
    IO_STATUS_BLOCK iosb;
    struct afd_poll poll;
    struct sock *next_arm;   /* on the arm list (armq) */
    struct sock *next_ready; /* on the ready list */
    HANDLE base;
    int fd;
    unsigned interest; /* TERN_READABLE | TERN_WRITABLE; 0 once deleted */
    ULONG polled;      /* the AFD conditions of the poll in flight */
    unsigned report;   /* events waiting to be handed to the core */
    bool in_flight, on_arm, on_ready;
    bool dead;   /* deleted: freed once off every list and out of the kernel */
    bool parked; /* not polled again until its interest changes */
};

struct iocp_state {
    HANDLE port;
    HANDLE afd; /* the poll helper, or NULL before the first watch */
    /* Set (release) by wake() after its packet was posted; taken (acquire)
     * by wake_take(): the packet is in the port once this is true. */
    _Atomic bool wake_landed;
    unsigned seen;       /* wake packets a wait retrieved that no wake_take has taken */
    unsigned stale;      /* wakes taken before a wait retrieved their packet */
    struct sock **table; /* fd -> live record */
    unsigned table_len;
    struct sock *armq;                    /* to be polled at the next wait */
    struct sock *ready_head, *ready_tail; /* reports not yet handed out, oldest first */
    unsigned in_flight;                   /* polls the kernel holds */
};

/* Test seam (backend.h): completions the last close() waited for. */
static unsigned close_drained;

unsigned tern__iocp_close_drained(void)
{
    return close_drained;
}

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

static int nt_error(NTSTATUS st)
{
    return tern__error_win(RtlNtStatusToDosError(st));
}

/* The poll helper: a handle on the AFD device, its completions on the port. */
static int open_helper(struct iocp_state *s)
{
    if (s->afd != NULL)
        return 0;
    int rc = tern__fd_fault();
    if (rc < 0)
        return rc;
    UNICODE_STRING name;
    RtlInitUnicodeString(&name, L"\\Device\\Afd\\tern");
    OBJECT_ATTRIBUTES attr;
    InitializeObjectAttributes(&attr, &name, 0, NULL, NULL);
    IO_STATUS_BLOCK io;
    HANDLE h = NULL;
    NTSTATUS st = NtCreateFile(&h, SYNCHRONIZE, &attr, &io, NULL, 0,
                               FILE_SHARE_READ | FILE_SHARE_WRITE, FILE_OPEN, 0, NULL, 0);
    if (st != 0)
        return nt_error(st);
    if (CreateIoCompletionPort(h, s->port, POLL_KEY, 0) == NULL) {
        rc = tern__error_win(GetLastError());
        CloseHandle(h);
        return rc;
    }
    /* The completion is the only news wanted: no event on the handle. */
    (void)SetFileCompletionNotificationModes(h, FILE_SKIP_SET_EVENT_ON_HANDLE);
    s->afd = h;
    return 0;
}

static void free_if_done(struct sock *k)
{
    if (k->dead && !k->in_flight && !k->on_arm && !k->on_ready)
        free(k);
}

static void push_arm(struct iocp_state *s, struct sock *k)
{
    if (k->on_arm || k->dead)
        return;
    k->on_arm = true;
    k->next_arm = s->armq;
    s->armq = k;
}

static void push_ready(struct iocp_state *s, struct sock *k, unsigned events)
{
    k->report |= events;
    if (k->on_ready)
        return;
    k->on_ready = true;
    k->next_ready = NULL;
    if (s->ready_tail != NULL)
        s->ready_tail->next_ready = k;
    else
        s->ready_head = k;
    s->ready_tail = k;
}

static ULONG afd_interest(unsigned interest)
{
    ULONG m = AFD_ABORT | AFD_LOCAL_CLOSE | AFD_CONNECT_FAIL;
    if (interest & TERN_READABLE)
        m |= AFD_RECEIVE | AFD_ACCEPT | AFD_DISCONNECT;
    if (interest & TERN_WRITABLE)
        m |= AFD_SEND;
    return m;
}

static unsigned tern_events(ULONG afd)
{
    unsigned ev = 0;
    if (afd & (AFD_RECEIVE | AFD_ACCEPT))
        ev |= TERN_READABLE;
    if (afd & AFD_DISCONNECT)
        ev |= TERN_READABLE | TERN_HANGUP;
    if (afd & AFD_SEND)
        ev |= TERN_WRITABLE;
    if (afd & AFD_ABORT)
        ev |= TERN_HANGUP | TERN_ERROR;
    if (afd & AFD_CONNECT_FAIL)
        ev |= TERN_WRITABLE | TERN_ERROR;
    return ev;
}

/* Issue k's poll. A refusal is reported once, and the socket is parked. */
static void arm(struct iocp_state *s, struct sock *k)
{
    ULONG want = afd_interest(k->interest);
    k->poll = (struct afd_poll){.count = 1};
    k->poll.timeout.QuadPart = INT64_MAX;
    k->poll.entry[0].socket = k->base;
    k->poll.entry[0].events = want;
    k->iosb.Status = STATUS_PENDING;
    /* The record is the packet's overlapped pointer (the APC context). */
    NTSTATUS st = NtDeviceIoControlFile(s->afd, NULL, NULL, k, &k->iosb, AFD_IOCTL_POLL, &k->poll,
                                        sizeof(k->poll), &k->poll, sizeof(k->poll));
    if (NT_ERROR(st)) {
        /* Refused at once: no packet comes. */
        k->parked = true;
        push_ready(s, k, TERN_ERROR);
        return;
    }
    /* Pending, or done already: either way its packet is queued or will be. */
    k->in_flight = true;
    k->polled = want;
    s->in_flight++;
}

static void arm_queued(struct iocp_state *s)
{
    while (s->armq != NULL) {
        struct sock *k = s->armq;
        s->armq = k->next_arm;
        k->on_arm = false;
        if (k->dead) {
            free_if_done(k);
            continue;
        }
        if (!k->in_flight && !k->parked && !k->on_ready)
            arm(s, k);
    }
}

/* A poll's packet: the record is the kernel's no more. */
static void completed(struct iocp_state *s, struct sock *k)
{
    k->in_flight = false;
    k->polled = 0;
    s->in_flight--;
    if (k->dead) {
        free_if_done(k);
        return;
    }
    NTSTATUS st = k->iosb.Status;
    if (st == STATUS_CANCELLED) { /* a change asked for more: poll again */
        push_arm(s, k);
        return;
    }
    if (NT_ERROR(st)) {
        k->parked = true;
        push_ready(s, k, TERN_ERROR);
        return;
    }
    ULONG afd = k->poll.count >= 1 ? k->poll.entry[0].events : 0;
    if (afd & AFD_LOCAL_CLOSE) {
        k->parked = true; /* closed under the watch: nothing more to say */
        return;
    }
    unsigned ev = tern_events(afd) & (k->interest | TERN_HANGUP | TERN_ERROR);
    if (ev != 0)
        push_ready(s, k, ev);
    else
        push_arm(s, k);
}

static void cancel_poll(struct iocp_state *s, struct sock *k)
{
    /* Fails only when the poll has completed already: its packet is on its way. */
    (void)CancelIoEx(s->afd, (OVERLAPPED *)&k->iosb);
}

static int grow_table(struct iocp_state *s, int fd)
{
    if ((unsigned)fd < s->table_len)
        return 0;
    unsigned n = s->table_len ? s->table_len : 256;
    while (n <= (unsigned)fd)
        n *= 2;
    struct sock **t = tern__realloc(s->table, n * sizeof(*t));
    if (t == NULL)
        return -ENOMEM;
    for (unsigned i = s->table_len; i < n; i++)
        t[i] = NULL;
    s->table = t;
    s->table_len = n;
    return 0;
}

static int add(struct iocp_state *s, int fd, unsigned events)
{
    SOCKET sk = (SOCKET)(uintptr_t)(unsigned)fd;
    int type = 0, len = sizeof(type);
    if (getsockopt(sk, SOL_SOCKET, SO_TYPE, (char *)&type, &len) != 0)
        return tern__error_win((unsigned long)WSAGetLastError());
    SOCKET base = INVALID_SOCKET;
    DWORD got = 0;
    if (WSAIoctl(sk, SIO_BASE_HANDLE, NULL, 0, &base, sizeof(base), &got, NULL, NULL) != 0)
        return tern__error_win((unsigned long)WSAGetLastError());
    int rc;
    if ((rc = grow_table(s, fd)) < 0)
        return rc;
    if (s->table[fd] != NULL)
        return -EEXIST;
    struct sock *k = tern__calloc(1, sizeof(*k));
    if (k == NULL)
        return -ENOMEM;
    if ((rc = open_helper(s)) < 0) {
        free(k);
        return rc;
    }
    k->fd = fd;
    k->base = (HANDLE)base;
    k->interest = events;
    s->table[fd] = k;
    push_arm(s, k);
    return 0;
}

static void unwatch(struct iocp_state *s, struct sock *k)
{
    s->table[k->fd] = NULL;
    k->dead = true;
    k->interest = 0;
    if (k->in_flight)
        cancel_poll(s, k);
    free_if_done(k);
}

static int iocp_modify(struct tern__backend *b, int fd, unsigned old_events, unsigned new_events)
{
    struct iocp_state *s = b->state;
    if (fd < 0)
        return -EBADF;
    new_events &= TERN_READABLE | TERN_WRITABLE;
    struct sock *k = (unsigned)fd < s->table_len ? s->table[fd] : NULL;
    if (old_events == 0 || k == NULL)
        return new_events == 0 ? 0 : add(s, fd, new_events);
    if (new_events == 0) {
        unwatch(s, k);
        return 0;
    }
    k->interest = new_events;
    k->report &= new_events | TERN_HANGUP | TERN_ERROR;
    k->parked = false;
    if (k->in_flight) {
        if (afd_interest(new_events) & ~k->polled)
            cancel_poll(s, k); /* its completion arms it again */
    } else {
        push_arm(s, k);
    }
    return 0;
}

/* Hand out queued reports, oldest first; what is handed out is polled again next wait. */
static int emit(struct iocp_state *s, struct tern__fired *out, int max)
{
    int n = 0;
    while (n < max && s->ready_head != NULL) {
        struct sock *k = s->ready_head;
        s->ready_head = k->next_ready;
        if (s->ready_head == NULL)
            s->ready_tail = NULL;
        k->on_ready = false;
        unsigned ev = k->report & (k->interest | TERN_HANGUP | TERN_ERROR);
        k->report = 0;
        if (k->dead) {
            free_if_done(k);
            continue;
        }
        if (ev != 0)
            out[n++] = (struct tern__fired){.fd = k->fd, .events = ev};
        push_arm(s, k);
    }
    return n;
}

static void iocp_close(struct tern__backend *b)
{
    struct iocp_state *s = b->state;
    for (unsigned fd = 0; fd < s->table_len; fd++)
        if (s->table[fd] != NULL)
            unwatch(s, s->table[fd]);
    /* Every poll still in the kernel writes its record until its packet is
     * retrieved: wait for each one (cancelled, they come promptly). */
    close_drained = 0;
    while (s->in_flight > 0) {
        OVERLAPPED_ENTRY entries[ENTRIES];
        ULONG n = 0;
        if (!GetQueuedCompletionStatusEx(s->port, entries, ENTRIES, &n, INFINITE, FALSE))
            continue;
        for (ULONG i = 0; i < n; i++) {
            if (entries[i].lpCompletionKey != POLL_KEY)
                continue; /* a wake nobody will take */
            completed(s, (struct sock *)entries[i].lpOverlapped);
            close_drained++;
        }
    }
    while (s->armq != NULL) {
        struct sock *k = s->armq;
        s->armq = k->next_arm;
        k->on_arm = false;
        free_if_done(k);
    }
    while (s->ready_head != NULL) {
        struct sock *k = s->ready_head;
        s->ready_head = k->next_ready;
        k->on_ready = false;
        free_if_done(k);
    }
    free(s->table);
    if (s->afd != NULL)
        CloseHandle(s->afd);
    CloseHandle(s->port);
    free(s);
    b->state = NULL;
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
    DWORD ms = to_ms(timeout_ns);
    for (;;) {
        arm_queued(s);
        /* Reports already waiting: collect what else is there, without sleeping. */
        DWORD now = max > 0 && s->ready_head != NULL ? 0 : ms;
        OVERLAPPED_ENTRY entries[ENTRIES];
        ULONG n = 0;
        if (!GetQueuedCompletionStatusEx(s->port, entries, ENTRIES, &n, now, FALSE)) {
            DWORD err = GetLastError();
            if (err != WAIT_TIMEOUT)
                return tern__error_win(err);
            n = 0;
        }
        bool fresh = false;
        for (ULONG i = 0; i < n; i++) {
            if (entries[i].lpCompletionKey == POLL_KEY) {
                completed(s, (struct sock *)entries[i].lpOverlapped);
            } else if (s->stale > 0) {
                s->stale--;
            } else {
                s->seen++;
                fresh = true;
            }
        }
        int got = emit(s, out, max);
        /* Only stale packets or silent completions, with no deadline to return for: wait on. */
        if (got > 0 || fresh || ms != INFINITE)
            return got;
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
