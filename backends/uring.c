/*
 * The io_uring backend (Linux), in readiness mode: one multishot
 * IORING_OP_POLL_ADD per watched descriptor, and every interest change
 * queued as a submission entry that the next wait submits in the same
 * io_uring_enter that waits. It reports through the same neutral fired
 * array as epoll, so the core cannot tell the two apart.
 *
 * Quirks worth knowing:
 * - A multishot poll reports wake-ups, not levels: a descriptor that stays
 *   readable is reported once. The core expects level-triggered readiness
 *   (a callback may read part of what is there), so each descriptor
 *   reported is re-armed by a poll update on the next wait, and an update
 *   looks at the descriptor at once: still ready, it is reported again.
 * - The kernel may end a multishot poll (a full completion queue, a waitqueue
 *   freed under it, the submitting thread's exit — a loop may be run by one
 *   thread after another): its last completion lacks IORING_CQE_F_MORE, and
 *   the poll is added again on the next wait. An end with another error
 *   (the descriptor was closed before the add was submitted) is reported
 *   once as TERN_ERROR and the descriptor stays unarmed until modified.
 * - Completions may arrive for a poll that was since removed, or removed
 *   and added again for a new file under the same number. Each add carries
 *   a generation in its user_data, bumped by every add and delete, and a
 *   completion whose generation is not the descriptor's current one is
 *   dropped unread.
 * - A poll is removed by a cancel, submitted at once: IORING_OP_POLL_REMOVE
 *   fails with -EALREADY when it meets the poll while a wake-up of it is
 *   being handled, and leaves the multishot poll armed; and until the
 *   request goes it holds the file, so a socket the core closed would stay
 *   open (its peer seeing no end) until the next wait, or for good.
 * - Changes are queued, so a failure the kernel finds at submission (a bad
 *   descriptor) comes back as an event, not as modify's return. Regular
 *   files are accepted and always ready, as under poll(2); epoll refuses
 *   them.
 * - The timeout is a __kernel_timespec in nanoseconds, exact, so nothing
 *   is rounded; the ring must offer IORING_FEAT_EXT_ARG (5.11) so the
 *   timeout rides on the enter itself rather than as a timeout request.
 * - The ring's descriptor is pollable, but it turns readable only for
 *   polls already submitted, and changes (a watcher started in a callback
 *   or by the host between pumps, a level re-check) wait in the queue for
 *   the next wait: a host sleeping on it would miss them. So the backend
 *   offers no descriptor, and a host watches the wake descriptor and its
 *   own descriptors, as under poll.
 * - The wake-up is the core's wake descriptor, watched like any other: a
 *   cross-thread wake then needs nothing of the ring (a waker with a ring of
 *   its own could send IORING_OP_MSG_RING, but a waker is any thread).
 * - fork(): the ring's memory is shared with the kernel and would be
 *   shared with a child too, so it is not inherited (MADV_DONTFORK); a
 *   child that uses its parent's loop at all (freeing it too) aborts.
 * - io_uring_setup refused (ENOSYS; EPERM under seccomp or with
 *   io_uring_disabled; ENOMEM when locked memory is short; a kernel without
 *   the features above): init hands the loop to epoll instead, silently.
 *
 * Beside readiness it performs one operation itself (TERN__DO_RECV): a
 * stream socket's multishot receive into a ring of provided buffers, so a
 * read costs no system call of its own. What to know of it:
 * - Each receive is an entry of a table that outlives its descriptor: the
 *   entry ends only with the kernel's last completion for it (one without
 *   IORING_CQE_F_MORE), so a late completion always finds whose it was.
 *   Bytes taken before a cancel are still reported; a cancelled entry's
 *   final completion is not (the core asked for the end).
 * - The kernel ends a multishot receive by itself when it finds no buffer
 *   (-ENOBUFS) or for reasons of its own (a completion with bytes but no
 *   "more"). Neither is the stream's end: the entry is submitted again, at
 *   once after a plain end, and after the core gives a buffer back when
 *   all were out, so a starved receive never spins.
 * - The buffers (NBUFS of BUF_SIZE) and their ring are mapped at the first
 *   receive, so a loop that never reads a socket pays nothing for them.
 *   Where the kernel refuses the buffer ring, recv says -EOPNOTSUPP and the
 *   core reads by readiness from then on.
 * - The kernel writes into tern's memory until an entry's last completion,
 *   so close cancels every entry left and reaps until none is, before the
 *   buffers are unmapped and the ring closed.
 *
 * And a listener's accept (TERN__DO_ACCEPT): a listener's multishot accept, an entry
 * of the same table (no buffers). Each connection is a completion with its
 * new descriptor; one the kernel accepted after the core's cancel is
 * closed here when reaped, and a wait is owed until the cancelled entry's
 * last completion is, so nothing accepted stays open. A failure ends it
 * (the core backs off or starts it again); an end that is not one is
 * submitted again here. -EINVAL is a kernel without multishot accept: the
 * capability is cleared and the core accepts by readiness.
 *
 * And a stream's sends (TERN__DO_SEND): one IORING_OP_SEND or SENDMSG per
 * call, its user_data the caller's token under the SEND tag, reported once
 * in the done array (`sent`). The backend keeps no table for them: the
 * caller keeps the message and has one send per token in flight, so a
 * completion needs no lookup and a cancel names the token. The probe at
 * init decides the capability. A cancel the queue cannot take is owed
 * per descriptor, beside a poll's removal.
 *
 * And UDP (TERN__DO_UDP_RECV, TERN__DO_UDP_SEND): a socket's multishot
 * recvmsg, an entry of the receives' table whose msghdr reserves room for
 * a source address in each buffer (the kernel writes a header, the name,
 * then as much of the datagram as fits, and says MSG_TRUNC when it did
 * not all fit); and its sends, a batch of SENDMSGs linked so the kernel
 * makes them in order, all under one token. A link chain split across two
 * submits would run as two chains side by side, so a batch goes into the
 * queue whole, after a submit if need be. A send's cancel names every
 * request of its token (IORING_ASYNC_CANCEL_ALL), as a batch is several.
 * Both need 6.0; the probe's IORING_OP_SEND_ZC, also 6.0's, stands for it.
 *
 * And file system calls (TERN__DO_FILE): statx, openat, read, readv,
 * writev, fsync and close (and unlinkat, mkdirat, renameat where the
 * probe finds them: TERN__DO_FILE_PATHS), one per call, its user_data
 * the caller's token under the CONTROL tag alone (a token is never 0, so
 * it never meets a cancel's own user_data, which is CONTROL with nothing
 * under it). The core chains them (a whole
 * file's read, runtime/fs/fs_ring.c); the backend keeps no table, only a
 * count, since the core keeps each call's arguments until its completion.
 * Each answers as the system call it stands for: statx is asked not to
 * automount (stat(2) does not), and a readv or writev of a descriptor
 * that cannot seek is refused -ESPIPE before it is queued, as preadv(2)
 * refuses it (the ring's would use the stream's position): the call is
 * made with no bytes first, which checks what the call checks. An open
 * without O_NONBLOCK goes to io-wq at once (IOSQE_ASYNC): the kernel's
 * first try adds O_NONBLOCK, under which a FIFO opens without its peer.
 * - The kernel runs a call that may block (a read past the page cache, an
 *   open on a slow file system) on a worker of its own (io-wq): the loop
 *   never waits on one, and a cancel cannot end one already running.
 * - A descriptor opened with O_NONBLOCK stays so for the reads: io_uring
 *   reads a regular file of a file system that supports it as if it were
 *   blocking; elsewhere a read may end -EAGAIN, which the core handles.
 * - A read with then_close is linked to its close (IOSQE_IO_HARDLINK:
 *   the close runs whatever the read did), so the file's last read and
 *   its close are one trip. Both go in one submit, as a chain must.
 * - Nothing here outlives the loop: its teardown waits for every file
 *   call's completion (each holds a credit), so close finds none.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#else
#define VALGRIND_MAKE_MEM_DEFINED(p, n) ((void)(p), (void)(n))
#endif

#include "backend.h"
#include "check.h"
#include "fault.h"
#include "os_thread.h"
#include "platform.h"
#include "tern.h"

/* Submission entries: enough for a turn's changes without a mid-turn
 * submit; the completion queue is larger so a burst of readiness from
 * many descriptors fits before the wait reaps it. */
#define SQ_ENTRIES 256u
#define CQ_ENTRIES 4096u

/* user_data: generation << 32 | fd for a poll; CONTROL for an update or a
 * remove, whose completions come only on failure and are dropped; RECV |
 * generation << 32 | entry for a receive; SEND | token for a send (a
 * stream's op id, always below 1 << 62: op_types.h). */
#define CONTROL (1ull << 63)
#define RECV (1ull << 62)
#define SEND (CONTROL | RECV)
/* CONTROL | token (never 0) for a file system call (TERN__DO_FILE), and
 * FILE_OP | CLOSED | token for the close a read's then_close links to it
 * (a token is below CLOSED), so a cancel of the read never names it. */
#define FILE_OP CONTROL
#define CLOSED (1ull << 61)
#define GEN_MASK 0x3fffffffu

/* The provided buffers of the receives: their count (a power of two, as
 * the buffer ring needs) and size, and the ring's group id. */
#define NBUFS 512u
#define BUF_SIZE 16384u
#define BGID 0
/* A datagram's buffer: the kernel's header, room for any source address,
 * then the bytes. */
#define DGRAM_ROOM                                              \
    (BUF_SIZE - (unsigned)sizeof(struct io_uring_recvmsg_out) - \
     (unsigned)sizeof(struct sockaddr_storage))
/* Completions one wait reports, beside the readiness entries. */
#define DONE_MAX 1024
#define NONE UINT32_MAX

/* A multishot receive, from its submission to its last completion. */
struct rentry {
    uint64_t token;
    struct msghdr msg; /* a receive with control data: its room (msg_controllen) */
    int fd;
    uint32_t gen;     /* in its user_data, bumped at each submission */
    uint32_t next;    /* the free list, a resubmit list, or the rcancel list */
    bool live;        /* submitted, its last completion not yet reaped */
    bool cancelled;   /* the core stopped it: its end is not reported */
    bool waiting;     /* in the resubmit list */
    bool cancel_owed; /* in the rcancel list: its cancel waits for room in the queue */
    bool accept;      /* a multishot accept (TERN__DO_ACCEPT), not a receive */
    bool dgram;       /* a UDP socket's receive (TERN__DO_UDP_RECV): msg holds the name's room */
};

struct slot {
    uint32_t gen;    /* of the live (or queued) poll; completions of others are stale */
    unsigned events; /* the interest, TERN_READABLE | TERN_WRITABLE; 0: not watched */
    bool armed;      /* a poll of this generation is in the kernel or queued */
    bool noted;      /* in the re-check list (at idx_noted), so there at most once */
    bool owed;       /* a removal the queue could not take: owed_gen's poll, in owed_fds */
    uint32_t owed_gen;
    uint64_t owed_send; /* a send's cancel the queue could not take (its token), in owed_fds */
    size_t idx_noted;
    uint32_t mark; /* the wait that last reported this fd... */
    int idx;       /* ...at this index of its fired array */
};

/* A descriptor to look at again on the next wait: re-check its level, or
 * add its poll again after the kernel ended it. */
struct recheck {
    int fd;
    uint32_t gen;
};

struct uring {
    struct io_uring ring;
    struct slot *slots;
    size_t nslots;
    struct recheck *rechecks; /* nslots long: each fd noted at most once */
    int *owed_fds;            /* nslots long: removals and send cancels waiting for room */
    size_t nowed;
    size_t nrechecks;
    uint32_t wait_seq;
    unsigned forks; /* the process's fork count when the ring was made */

    /* receives (TERN__DO_RECV) */
    struct rentry *rentries;
    uint32_t nrentries, rfree; /* table size, free list head */
    uint32_t rlive;            /* entries whose last completion is still to come */
    uint32_t rwait;            /* submit again on the next wait (list head) */
    uint32_t rstarved;         /* submit again once a buffer is back (list head) */
    uint32_t rcancel;          /* cancels the queue could not take (list head) */
    uint32_t astopped;         /* cancelled accepts whose last completion is still to come */
    unsigned cancel_flags;     /* a send's cancel: IORING_ASYNC_CANCEL_ALL where datagrams go */
    bool *owes;                /* the backend's `owes`: set while either list is not empty */
    uint32_t *recv_of;         /* per fd (nslots): its current receive entry, or NONE */
    struct io_uring_buf_ring *br;
    unsigned char *bufs;
    size_t br_bytes;
    unsigned held;  /* buffers reported to the core and not yet given back */
    uint32_t flive; /* file system calls submitted, their completion not yet reaped */
    struct tern__done done[DONE_MAX];
};

static void require_not_forked(const struct uring *u)
{
    TERN_REQUIRE_SAID(u->forks == tern__forks,
                      "a forked child must not use a loop created before the fork");
}

static uint64_t poll_data(int fd, uint32_t gen)
{
    return (uint64_t)(gen & GEN_MASK) << 32 | (uint32_t)fd;
}

static unsigned to_poll(unsigned events)
{
    return ((events & TERN_READABLE) ? POLLIN : 0) | ((events & TERN_WRITABLE) ? POLLOUT : 0);
}

/* Test seam (backend.h): the next so many entries asked for find the
 * queue full and its submit refused, as a completion queue in overflow
 * makes the kernel refuse it. */
static _Atomic unsigned sq_refusals;

void tern__uring_refuse_entries(unsigned n)
{
    atomic_store_explicit(&sq_refusals, n, memory_order_relaxed);
}

/* An entry to fill, submitting what is queued when the queue is full. */
static struct io_uring_sqe *next_sqe(struct uring *u, int *rc)
{
    /* The seam is a single-threaded test's: a load, and a store when set. */
    unsigned refuse = atomic_load_explicit(&sq_refusals, memory_order_relaxed);
    bool refused = __builtin_expect(refuse != 0, 0);
    if (refused)
        atomic_store_explicit(&sq_refusals, refuse - 1, memory_order_relaxed);
    struct io_uring_sqe *sqe = refused ? NULL : io_uring_get_sqe(&u->ring);
    if (sqe == NULL) {
        int n = refused ? -EBUSY : io_uring_submit(&u->ring);
        if (n < 0) {
            *rc = n;
            return NULL;
        }
        sqe = io_uring_get_sqe(&u->ring);
    }
    if (sqe == NULL) /* the kernel stopped part way (an entry it refused) */
        *rc = -EAGAIN;
    return sqe;
}

static int queue_add(struct uring *u, int fd)
{
    int rc = 0;
    struct slot *s = &u->slots[fd];
    struct io_uring_sqe *sqe = next_sqe(u, &rc);
    if (sqe == NULL)
        return rc;
    s->gen = (s->gen + 1) & GEN_MASK;
    io_uring_prep_poll_multishot(sqe, fd, to_poll(s->events));
    io_uring_sqe_set_data64(sqe, poll_data(fd, s->gen));
    s->armed = true;
    return 0;
}

/* A cancel of the request whose user_data is target; its own completion
 * comes only on failure (the target is gone already), and is dropped. */
static void prep_cancel(struct io_uring_sqe *sqe, uint64_t target, unsigned flags)
{
    io_uring_prep_cancel64(sqe, target, (int)flags);
    io_uring_sqe_set_data64(sqe, CONTROL);
    sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
}

/* A poll update: the new mask, and a fresh look at the descriptor. */
static int queue_update(struct uring *u, int fd)
{
    int rc = 0;
    struct slot *s = &u->slots[fd];
    struct io_uring_sqe *sqe = next_sqe(u, &rc);
    if (sqe == NULL)
        return rc;
    /* Without ADD_MULTI an update turns the poll into a one-shot one. */
    io_uring_prep_poll_update(sqe, poll_data(fd, s->gen), 0, to_poll(s->events),
                              IORING_POLL_UPDATE_EVENTS | IORING_POLL_ADD_MULTI);
    io_uring_sqe_set_data64(sqe, CONTROL);
    sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
    return 0;
}

/*
 * Submit what is queued at once, not with the next wait. For a poll's
 * removal or a receive's cancel: the request holds its own reference to
 * the file, so the caller's close of the descriptor would not close the
 * socket (the peer would see no end) until the request goes, and a loop
 * that is not run again would keep it open. The kernel acts on both
 * within the enter. A refused submit leaves them for the next wait.
 */
static void submit_now(struct uring *u)
{
    (void)io_uring_submit(&u->ring);
}

static void queue_remove(struct uring *u, int fd)
{
    int rc = 0;
    struct slot *s = &u->slots[fd];
    struct io_uring_sqe *sqe = next_sqe(u, &rc);
    if (sqe == NULL) {
        /* Owed, not failed: the next wait sends it, and the fd is not
         * watched again before then (modify says -EBUSY). */
        if (s->owed_send == 0)
            u->owed_fds[u->nowed++] = fd;
        s->owed = true;
        *u->owes = true;
        s->owed_gen = s->gen;
        s->gen = (s->gen + 1) & GEN_MASK;
        s->armed = false;
        return;
    }
    /* A cancel, not IORING_OP_POLL_REMOVE: a remove that meets the poll
     * while a wake-up of it is being handled fails with -EALREADY and
     * leaves a multishot poll armed, holding the file open; a cancel marks
     * it and it ends (-ECANCELED, a stale completion by then). */
    prep_cancel(sqe, poll_data(fd, s->gen), 0);
    s->gen = (s->gen + 1) & GEN_MASK; /* whatever the old poll still posts is stale */
    s->armed = false;
}

/* io_uring_setup's refusals that mean "this kernel or process offers no
 * io_uring", as opposed to a shortage epoll would meet too. */
static bool refused(int rc)
{
    return rc == -ENOSYS || rc == -EPERM || rc == -EACCES || rc == -ENOMEM || rc == -EINVAL ||
           rc == -EOPNOTSUPP;
}

/*
 * What the kernel performs beyond readiness, as its probe says: sends
 * (IORING_OP_SEND, and so SENDMSG, which came before it); the file calls
 * on paths (unlinkat, renameat, mkdirat). A probe refused
 * (a filter on io_uring_register) says no: streams then write by
 * readiness. The file calls need no probe (uring_init).
 */
static unsigned ops_offered(struct io_uring *ring)
{
    struct io_uring_probe *p = io_uring_get_probe_ring(ring);
    unsigned yes = 0;
    if (p != NULL && io_uring_opcode_supported(p, IORING_OP_SEND))
        yes |= TERN__DO_SEND;
    /* What UDP needs came by 6.0: multishot recvmsg (6.0) and a cancel of
     * every request of one key (IORING_ASYNC_CANCEL_ALL, 5.19). Neither is
     * an opcode a probe names; IORING_OP_SEND_ZC, also 6.0's, stands for them. */
    if (p != NULL && io_uring_opcode_supported(p, IORING_OP_SEND_ZC))
        yes |= TERN__DO_UDP_RECV | TERN__DO_UDP_SEND;
    /* The path calls: unlinkat and renameat are 5.11's, mkdirat 5.15's. */
    if (p != NULL && io_uring_opcode_supported(p, IORING_OP_UNLINKAT) &&
        io_uring_opcode_supported(p, IORING_OP_RENAMEAT) &&
        io_uring_opcode_supported(p, IORING_OP_MKDIRAT))
        yes |= TERN__DO_FILE_PATHS;
    io_uring_free_probe(p);
    return yes;
}

static int uring_init(struct tern__backend *b)
{
    int rc = tern__fd_fault();
    if (rc < 0)
        return rc;
    struct uring *u = tern__calloc(1, sizeof(*u));
    if (u == NULL)
        return -ENOMEM;
    struct io_uring_params p = {.flags = IORING_SETUP_CQSIZE, .cq_entries = CQ_ENTRIES};
    rc = io_uring_queue_init_params(SQ_ENTRIES, &u->ring, &p);
    if (rc == 0 && (p.features & (IORING_FEAT_EXT_ARG | IORING_FEAT_NODROP)) !=
                       (IORING_FEAT_EXT_ARG | IORING_FEAT_NODROP)) {
        io_uring_queue_exit(&u->ring);
        rc = -EOPNOTSUPP;
    }
    if (rc == 0 && (rc = io_uring_ring_dontfork(&u->ring)) < 0)
        io_uring_queue_exit(&u->ring);
    if (rc < 0) {
        tern__free(u);
        if (!refused(rc))
            return rc;
        b->ops = &tern__backend_epoll;
        return b->ops->init(b);
    }
    u->forks = tern__forks;
    u->rfree = u->rwait = u->rstarved = u->rcancel = NONE;
    b->fd = -1;
    b->state = u;
    /* The file calls are 5.6's at the latest (statx, openat, read, close;
     * readv, writev and fsync are 5.1's): a ring with IORING_FEAT_EXT_ARG
     * (5.11), which this one has, makes them all. */
    b->completes = TERN__DO_RECV | TERN__DO_ACCEPT | TERN__DO_FILE | ops_offered(&u->ring);
    if (b->completes & TERN__DO_UDP_SEND)
        u->cancel_flags = IORING_ASYNC_CANCEL_ALL;
    b->dgram_room = DGRAM_ROOM;
    u->owes = &b->owes;
    b->nbufs = NBUFS;
    b->done = u->done;
    return 0;
}

static int grow_slots(struct uring *u, int fd)
{
    if ((size_t)fd < u->nslots)
        return 0;
    size_t n = u->nslots ? u->nslots : 64;
    while (n <= (size_t)fd)
        n *= 2;
    /* The list grows first, so a wait never allocates (and never fails) to note a re-check. */
    struct recheck *r = tern__realloc(u->rechecks, n * sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    u->rechecks = r;
    int *o = tern__realloc(u->owed_fds, n * sizeof(*o));
    if (o == NULL)
        return -ENOMEM;
    u->owed_fds = o;
    uint32_t *r_of = tern__realloc(u->recv_of, n * sizeof(*r_of));
    if (r_of == NULL)
        return -ENOMEM;
    u->recv_of = r_of;
    for (size_t i = u->nslots; i < n; i++)
        r_of[i] = NONE;
    struct slot *s = tern__realloc(u->slots, n * sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    memset(s + u->nslots, 0, (n - u->nslots) * sizeof(*s));
    u->slots = s;
    u->nslots = n;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Receives into provided buffers                                      */
/* ------------------------------------------------------------------ */

static void *buf_at(const struct uring *u, uint32_t bid)
{
    return u->bufs + (size_t)bid * BUF_SIZE;
}

static void buf_give(struct uring *u, uint32_t bid)
{
    io_uring_buf_ring_add(u->br, buf_at(u, bid), BUF_SIZE, (unsigned short)bid,
                          io_uring_buf_ring_mask(NBUFS), 0);
    io_uring_buf_ring_advance(u->br, 1);
}

/* The buffers and their ring, at the first receive. */
static int bufs_setup(struct uring *u)
{
    if (u->br != NULL)
        return 0;
    /* One mapping: the ring's page(s), then the buffers. An allocation
     * site of the fault seam, like the heap's. */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    u->br_bytes = (NBUFS * sizeof(struct io_uring_buf) + page - 1) / page * page;
    size_t bytes = u->br_bytes + (size_t)NBUFS * BUF_SIZE;
    void *m = tern__fault_hit(TERN__FAULT_ALLOC)
                  ? MAP_FAILED
                  : mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return -ENOMEM;
    /* Like the ring itself, memory the kernel writes is not a child's. */
    (void)madvise(m, bytes, MADV_DONTFORK);
    struct io_uring_buf_ring *br = m;
    io_uring_buf_ring_init(br);
    struct io_uring_buf_reg reg = {.ring_addr = (uintptr_t)br, .ring_entries = NBUFS, .bgid = BGID};
    /* Refused (seccomp, an old kernel, or short of memory for it): the
     * caller clears the capability and reads by readiness from then on. */
    if (io_uring_register_buf_ring(&u->ring, &reg, 0) < 0) {
        munmap(m, bytes);
        return -EOPNOTSUPP;
    }
    u->br = br;
    u->bufs = (unsigned char *)m + u->br_bytes;
    for (uint32_t bid = 0; bid < NBUFS; bid++)
        buf_give(u, bid);
    return 0;
}

static int rentry_new(struct uring *u, uint32_t *idx)
{
    if (u->rfree == NONE) {
        uint32_t n = u->nrentries ? u->nrentries * 2 : 64;
        struct rentry *r = tern__realloc(u->rentries, n * sizeof(*r));
        if (r == NULL)
            return -ENOMEM;
        for (uint32_t i = u->nrentries; i < n; i++)
            r[i] = (struct rentry){.next = i + 1 < n ? i + 1 : NONE};
        u->rentries = r;
        u->rfree = u->nrentries;
        u->nrentries = n;
    }
    *idx = u->rfree;
    u->rfree = u->rentries[*idx].next;
    return 0;
}

static void rentry_free(struct uring *u, uint32_t idx)
{
    struct rentry *e = &u->rentries[idx];
    TERN_INSIST(e->live && !e->waiting);
    e->live = false;
    e->next = u->rfree;
    u->rfree = idx;
    u->rlive--;
}

static uint64_t recv_data(uint32_t idx, uint32_t gen)
{
    return RECV | (uint64_t)(gen & GEN_MASK) << 32 | idx;
}

/* Test seam (backend.h): the next so many accepts carry a flag the kernel
 * does not know, which it refuses as one without multishot accept does. */
static _Atomic unsigned accept_refusals;

void tern__uring_refuse_accepts(unsigned n)
{
    atomic_store_explicit(&accept_refusals, n, memory_order_relaxed);
}

/* Accepted sockets are made as accept4 makes them today (platform.c). */
static void prep_accept(struct io_uring_sqe *sqe, int fd)
{
    io_uring_prep_multishot_accept(sqe, fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    unsigned refuse = atomic_load_explicit(&accept_refusals, memory_order_relaxed);
    if (__builtin_expect(refuse != 0, 0)) {
        atomic_store_explicit(&accept_refusals, refuse - 1, memory_order_relaxed);
        sqe->ioprio |= 1u << 15; /* no accept flag yet */
    }
}

static int queue_recv(struct uring *u, uint32_t idx)
{
    int rc = 0;
    struct rentry *e = &u->rentries[idx];
    struct io_uring_sqe *sqe = next_sqe(u, &rc);
    if (sqe == NULL)
        return rc;
    e->gen = (e->gen + 1) & GEN_MASK;
    if (e->accept) {
        prep_accept(sqe, e->fd);
        io_uring_sqe_set_data64(sqe, recv_data(idx, e->gen));
        return 0;
    }
    if (e->dgram)
        io_uring_prep_recvmsg_multishot(sqe, e->fd, &e->msg, 0);
    else if (e->msg.msg_controllen > 0)
        io_uring_prep_recvmsg_multishot(sqe, e->fd, &e->msg, MSG_CMSG_CLOEXEC);
    else
        io_uring_prep_recv_multishot(sqe, e->fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = BGID;
    io_uring_sqe_set_data64(sqe, recv_data(idx, e->gen));
    return 0;
}

static void rentry_wait(struct uring *u, uint32_t idx, uint32_t *list)
{
    struct rentry *e = &u->rentries[idx];
    e->waiting = true;
    e->next = *list;
    *list = idx;
}

/* Submit again what the kernel ended without an end of stream: at once
 * after a plain end, and after a buffer came back for a starved one. */
static int queue_resubmits(struct uring *u)
{
    if (u->held < NBUFS)
        while (u->rstarved != NONE) {
            uint32_t idx = u->rstarved;
            u->rstarved = u->rentries[idx].next;
            rentry_wait(u, idx, &u->rwait);
        }
    while (u->rwait != NONE) {
        uint32_t idx = u->rwait;
        struct rentry *e = &u->rentries[idx];
        if (!e->cancelled) {
            int rc = queue_recv(u, idx);
            if (rc < 0)
                return rc;
        }
        u->rwait = e->next;
        e->waiting = false;
        if (e->cancelled)
            rentry_free(u, idx); /* stopped while it waited: nothing of it is in the kernel */
    }
    return 0;
}

static void queue_cancel(struct uring *u, uint32_t idx)
{
    int rc = 0;
    struct rentry *e = &u->rentries[idx];
    if (e->accept && !e->cancelled && !e->waiting) {
        /* What it accepted meanwhile is closed when reaped: a wait is owed
         * even with nothing else to wait for. */
        u->astopped++;
        *u->owes = true;
    }
    e->cancelled = true;
    if (e->waiting)
        return; /* not in the kernel: freed where the wait list is walked */
    struct io_uring_sqe *sqe = next_sqe(u, &rc);
    if (sqe == NULL) {
        if (!e->cancel_owed) { /* owed, not failed: the next wait sends it */
            e->cancel_owed = true;
            e->next = u->rcancel;
            u->rcancel = idx;
            *u->owes = true;
        }
        return;
    }
    e->cancel_owed = false;
    prep_cancel(sqe, recv_data(idx, e->gen), 0);
}

/* Cancel fd's receive or accept, at once. */
static void entry_stop(struct uring *u, int fd)
{
    TERN_INSIST((size_t)fd < u->nslots && u->recv_of[fd] != NONE);
    queue_cancel(u, u->recv_of[fd]);
    u->recv_of[fd] = NONE;
    submit_now(u);
}

static int entry_start(struct uring *u, int fd, uint64_t token, size_t ctl_room, bool accept,
                       bool dgram)
{
    int rc;
    TERN_INSIST(u->recv_of[fd] == NONE);
    uint32_t idx;
    if ((rc = rentry_new(u, &idx)) < 0)
        return rc;
    u->rentries[idx] = (struct rentry){.token = token,
                                       .fd = fd,
                                       .gen = u->rentries[idx].gen,
                                       .next = NONE,
                                       .live = true,
                                       .accept = accept,
                                       .dgram = dgram};
    u->rentries[idx].msg.msg_controllen = ctl_room;
    if (dgram)
        u->rentries[idx].msg.msg_namelen = sizeof(struct sockaddr_storage);
    if ((rc = queue_recv(u, idx)) < 0) {
        u->rentries[idx].next = u->rfree;
        u->rfree = idx;
        u->rentries[idx].live = false;
        return rc;
    }
    u->rlive++;
    u->recv_of[fd] = idx;
    return 0;
}

/* A stream's receive or a datagram socket's: the buffers are mapped at the
 * first, and a kernel that refuses them takes the kind's bit away. */
static int receive(struct tern__backend *b, int fd, uint64_t token, bool on, size_t ctl_room,
                   bool dgram)
{
    struct uring *u = b->state;
    require_not_forked(u);
    int rc;
    if (!on) {
        entry_stop(u, fd);
        return 0;
    }
    if ((rc = grow_slots(u, fd)) < 0 || (rc = bufs_setup(u)) < 0) {
        if (rc == -EOPNOTSUPP)
            b->completes &= dgram ? ~(unsigned)TERN__DO_UDP_RECV : ~(unsigned)TERN__DO_RECV;
        return rc;
    }
    return entry_start(u, fd, token, ctl_room, false, dgram);
}

static int uring_recv(struct tern__backend *b, int fd, uint64_t token, bool on, size_t ctl_room)
{
    return receive(b, fd, token, on, ctl_room, false);
}

static int uring_accept(struct tern__backend *b, int fd, uint64_t token, bool on)
{
    struct uring *u = b->state;
    require_not_forked(u);
    if (!on) {
        entry_stop(u, fd);
        return 0;
    }
    int rc = grow_slots(u, fd);
    return rc < 0 ? rc : entry_start(u, fd, token, 0, true, false);
}

static int uring_dgram_recv(struct tern__backend *b, int fd, uint64_t token, bool on)
{
    return receive(b, fd, token, on, 0, true);
}

static void uring_recycle(struct tern__backend *b, uint32_t bid)
{
    struct uring *u = b->state;
    TERN_INSIST(bid < NBUFS && u->held > 0);
    buf_give(u, bid);
    u->held--;
}

/*
 * A recvmsg-style completion's buffer: a header, then the control data,
 * then the bytes. Point d at the parts; false when it carries no bytes
 * (how a multishot recvmsg may report the end of the stream).
 */
static bool decode_msg(struct rentry *e, struct tern__done *d)
{
    struct io_uring_recvmsg_out *o = io_uring_recvmsg_validate((void *)d->data, d->res, &e->msg);
    TERN_INSIST(o != NULL); /* the kernel writes the header with every buffer */
    size_t len = io_uring_recvmsg_payload_length(o, d->res, &e->msg);
    d->data = io_uring_recvmsg_payload(o, &e->msg);
    d->res = (int32_t)len;
    d->ctl = (const unsigned char *)io_uring_recvmsg_name(o) + e->msg.msg_namelen;
    d->ctllen = o->controllen;
    return len > 0;
}

/* A datagram's buffer: a header, the source address's room, then the
 * bytes (as many as fit: the header says whether more came). */
static void decode_dgram(struct rentry *e, struct tern__done *d)
{
    struct io_uring_recvmsg_out *o = io_uring_recvmsg_validate((void *)d->data, d->res, &e->msg);
    TERN_INSIST(o != NULL); /* the kernel writes the header with every buffer */
    d->from = io_uring_recvmsg_name(o);
    d->fromlen = o->namelen < e->msg.msg_namelen ? o->namelen : e->msg.msg_namelen;
    d->truncated = (o->flags & MSG_TRUNC) != 0;
    d->data = io_uring_recvmsg_payload(o, &e->msg);
    d->res = (int32_t)io_uring_recvmsg_payload_length(o, d->res, &e->msg);
}

/*
 * An accept's completion: a connection, or the accept's end. A connection
 * accepted after the core's cancel is nobody's: closed here. An end with
 * no failure, or cancelled by no one (the submitting thread exited), is
 * submitted again; -EINVAL is a kernel without multishot accept (a tern
 * listener always listens).
 */
static bool take_accept(struct uring *u, const struct io_uring_cqe *cqe, struct tern__backend *b,
                        uint32_t idx)
{
    struct rentry *e = &u->rentries[idx];
    bool more = (cqe->flags & IORING_CQE_F_MORE) != 0;
    int32_t res = cqe->res;
    bool retry = res >= 0 || res == -ECANCELED;
    if (e->cancelled) {
        if (res >= 0)
            close(res);
    } else if ((res >= 0 || !retry) && b->ndone == DONE_MAX) {
        return false; /* left in the queue for the next wait */
    } else if (res >= 0) {
        u->done[b->ndone++] = (struct tern__done){.token = e->token, .res = res};
    }
    if (more)
        return true;
    if (e->cancelled) {
        u->astopped--;
        rentry_free(u, idx);
    } else if (retry) {
        rentry_wait(u, idx, &u->rwait);
    } else {
        if (res == -EINVAL) {
            b->completes &= ~TERN__DO_ACCEPT;
            res = -EOPNOTSUPP;
        }
        u->done[b->ndone++] = (struct tern__done){.token = e->token, .res = res, .final = true};
        u->recv_of[e->fd] = NONE;
        rentry_free(u, idx);
    }
    return true;
}

/* A receive's completion: into the done array; false when that is full. */
static bool take_recv(struct uring *u, const struct io_uring_cqe *cqe, struct tern__backend *b)
{
    uint32_t idx = (uint32_t)cqe->user_data;
    uint32_t gen = (uint32_t)(cqe->user_data >> 32) & GEN_MASK;
    struct rentry *e = &u->rentries[idx];
    TERN_INSIST(idx < u->nrentries && e->live && e->gen == gen);
    if (e->accept)
        return take_accept(u, cqe, b, idx);
    bool more = (cqe->flags & IORING_CQE_F_MORE) != 0;
    bool filled = cqe->res > 0 && (cqe->flags & IORING_CQE_F_BUFFER);
    if ((filled || (!more && !e->cancelled)) && b->ndone == DONE_MAX)
        return false; /* left in the queue for the next wait */
    struct tern__done d = {.token = e->token, .res = cqe->res};
    if (filled) {
        d.buf = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
        d.data = buf_at(u, d.buf);
        /* The kernel wrote them: memcheck cannot see that by itself. */
        (void)VALGRIND_MAKE_MEM_DEFINED(buf_at(u, d.buf), (size_t)cqe->res);
        if (e->dgram)
            decode_dgram(e, &d);
        else if (e->msg.msg_controllen > 0 && !decode_msg(e, &d)) {
            buf_give(u, d.buf); /* no bytes in it: the end of the stream */
            d.res = 0;
        }
    }
    bool data = d.res > 0 || (filled && e->dgram); /* a datagram may be empty */
    if (data) {
        u->held++;
        u->done[b->ndone++] = d;
    }
    if (more)
        return true;
    /* The kernel's last word on this submission. */
    if (e->cancelled) {
        rentry_free(u, idx);
    } else if (data || d.res == -ENOBUFS || d.res == -ECANCELED) {
        /* Not the stream's end (-ECANCELED, not asked for: the thread that
         * submitted it exited): submit it again, once a buffer is back if
         * starved. */
        rentry_wait(u, idx, d.res == -ENOBUFS && u->held >= NBUFS ? &u->rstarved : &u->rwait);
    } else {
        u->done[b->ndone++] = (struct tern__done){.token = e->token, .res = d.res, .final = true};
        u->recv_of[e->fd] = NONE;
        rentry_free(u, idx);
    }
    return true;
}

/* Send the removals and cancels the queue could not take when asked. */
static int queue_owed(struct uring *u)
{
    int rc = 0;
    while (u->nowed > 0) {
        int fd = u->owed_fds[u->nowed - 1];
        struct slot *s = &u->slots[fd];
        struct io_uring_sqe *sqe = next_sqe(u, &rc);
        if (sqe == NULL)
            return rc;
        /* A descriptor may owe both: the poll's removal, then the send's cancel. */
        if (s->owed)
            prep_cancel(sqe, poll_data(fd, s->owed_gen), 0);
        else
            prep_cancel(sqe, SEND | s->owed_send, u->cancel_flags);
        if (s->owed)
            s->owed = false;
        else
            s->owed_send = 0;
        if (!s->owed && s->owed_send == 0)
            u->nowed--;
    }
    while (u->rcancel != NONE) {
        uint32_t idx = u->rcancel;
        struct rentry *e = &u->rentries[idx];
        u->rcancel = e->next;
        e->cancel_owed = false;
        queue_cancel(u, idx);
        if (e->cancel_owed)
            return -EBUSY; /* back on the list */
    }
    *u->owes = u->astopped > 0;
    return 0;
}

static int uring_modify(struct tern__backend *b, int fd, unsigned old_events, unsigned new_events)
{
    struct uring *u = b->state;
    require_not_forked(u);
    int rc;
    if (old_events == 0) {
        if ((rc = grow_slots(u, fd)) < 0)
            return rc;
        if (u->slots[fd].owed && queue_owed(u) < 0)
            return -EBUSY; /* the old poll's removal has not gone out yet */
        u->slots[fd].events = new_events;
        if ((rc = queue_add(u, fd)) < 0)
            u->slots[fd].events = 0;
        return rc;
    }
    struct slot *s = &u->slots[fd];
    if (new_events == 0) {
        s->events = 0;
        queue_remove(u, fd);
        submit_now(u);
        return 0;
    }
    unsigned was = s->events;
    s->events = new_events;
    rc = s->armed ? queue_update(u, fd) : queue_add(u, fd);
    if (rc < 0)
        s->events = was;
    return rc;
}

/* ------------------------------------------------------------------ */
/* Sends                                                               */
/* ------------------------------------------------------------------ */

/*
 * One send, queued for the next wait's enter: a plain send for one buffer
 * without control data (the kernel copies no msghdr), sendmsg otherwise.
 * Refused (-EBUSY) while this descriptor still owes an earlier send's
 * cancel the queue cannot take yet: a descriptor owes one at a time.
 */
static int uring_send(struct tern__backend *b, int fd, uint64_t token, const struct msghdr *msg)
{
    struct uring *u = b->state;
    require_not_forked(u);
    int rc = grow_slots(u, fd);
    if (rc == 0 && u->slots[fd].owed_send != 0 && queue_owed(u) < 0)
        rc = -EBUSY;
    struct io_uring_sqe *sqe = rc == 0 ? next_sqe(u, &rc) : NULL;
    if (sqe == NULL)
        return rc;
    if (msg->msg_iovlen == 1 && msg->msg_controllen == 0)
        io_uring_prep_send(sqe, fd, msg->msg_iov[0].iov_base, msg->msg_iov[0].iov_len,
                           MSG_NOSIGNAL);
    else
        io_uring_prep_sendmsg(sqe, fd, msg, MSG_NOSIGNAL);
    io_uring_sqe_set_data64(sqe, SEND | token);
    return 0;
}

/*
 * A UDP socket's datagrams: one SENDMSG each, linked so the kernel makes
 * them in order (unlinked, one waiting for room would let the next pass
 * it). A link chain must go to the kernel in one submit, so the queue is
 * emptied first when it lacks room for all, and what still does not fit
 * waits for the caller's next call.
 */
static int uring_send_dgrams(struct tern__backend *b, int fd, uint64_t token,
                             const struct msghdr *msgs, unsigned n)
{
    struct uring *u = b->state;
    require_not_forked(u);
    int rc = grow_slots(u, fd);
    if (rc == 0 && u->slots[fd].owed_send != 0 && queue_owed(u) < 0)
        rc = -EBUSY;
    if (rc == 0 && io_uring_sq_space_left(&u->ring) < n)
        submit_now(u);
    struct io_uring_sqe *sqe = rc == 0 ? next_sqe(u, &rc) : NULL;
    if (sqe == NULL)
        return rc;
    unsigned room = io_uring_sq_space_left(&u->ring) + 1;
    if (n > room)
        n = room;
    for (unsigned i = 0; i < n; i++) {
        if (i > 0)
            sqe = io_uring_get_sqe(&u->ring);
        io_uring_prep_sendmsg(sqe, fd, &msgs[i], MSG_NOSIGNAL);
        io_uring_sqe_set_data64(sqe, SEND | token);
        if (i + 1 < n)
            sqe->flags |= IOSQE_IO_LINK;
    }
    return (int)n;
}

/* At once, as a receive's cancel: the caller closes the socket next. */
static void uring_send_cancel(struct tern__backend *b, int fd, uint64_t token)
{
    struct uring *u = b->state;
    int rc = 0;
    struct io_uring_sqe *sqe = next_sqe(u, &rc);
    if (sqe == NULL) { /* owed, not failed: the next wait sends it */
        struct slot *s = &u->slots[fd];
        if (!s->owed)
            u->owed_fds[u->nowed++] = fd;
        s->owed_send = token;
        *u->owes = true;
        return;
    }
    prep_cancel(sqe, SEND | token, u->cancel_flags);
    submit_now(u);
}

/* ------------------------------------------------------------------ */
/* File system calls                                                   */
/* ------------------------------------------------------------------ */

_Static_assert(sizeof(struct statx) <= sizeof(((struct tern__file_op *)0)->stat_room),
               "a statx fits the call's room");

static struct statx *stx_of(struct tern__file_op *op)
{
    return (struct statx *)(void *)op->stat_room;
}

/* stat(2) and lstat(2) never automount (statx does unless told). */
static int stat_flags(const struct tern__file_op *op)
{
    if (op->path == NULL)
        return AT_EMPTY_PATH;
    return AT_NO_AUTOMOUNT | (op->kind == TERN__FILE_LSTAT ? AT_SYMLINK_NOFOLLOW : 0);
}

static const char *stat_path(const struct tern__file_op *op)
{
    return op->path != NULL ? op->path : "";
}

static int stat_dir(const struct tern__file_op *op)
{
    return op->path != NULL ? AT_FDCWD : op->fd;
}

int tern__file_call(struct tern__file_op *op)
{
    ssize_t rc;
    switch (op->kind) {
    case TERN__FILE_STAT:
    case TERN__FILE_LSTAT:
        rc = statx(stat_dir(op), stat_path(op), stat_flags(op), STATX_BASIC_STATS, stx_of(op));
        break;
    case TERN__FILE_OPEN:
        rc = open(op->path, op->flags | O_CLOEXEC, (mode_t)op->mode);
        break;
    case TERN__FILE_READ:
        rc = pread(op->fd, op->buf, op->len, (off_t)op->off);
        break;
    case TERN__FILE_READV:
        rc = preadv(op->fd, op->iov, (int)op->len, (off_t)op->off);
        break;
    case TERN__FILE_WRITEV:
        rc = pwritev(op->fd, op->iov, (int)op->len, (off_t)op->off);
        break;
    case TERN__FILE_FSYNC:
        rc = fsync(op->fd);
        break;
    case TERN__FILE_FDATASYNC:
        rc = fdatasync(op->fd);
        break;
    case TERN__FILE_UNLINK:
        rc = unlink(op->path);
        break;
    case TERN__FILE_RMDIR:
        rc = rmdir(op->path);
        break;
    case TERN__FILE_MKDIR:
        rc = mkdir(op->path, (mode_t)op->mode);
        break;
    case TERN__FILE_RENAME:
        rc = rename(op->path, op->path2);
        break;
    default:
        TERN_INSIST(op->kind == TERN__FILE_CLOSE);
        return close(op->fd) == 0 ? 0 : -errno;
    }
    return rc >= 0 ? (int)rc : -errno;
}

void tern__file_stat(const struct tern__file_op *op, struct stat *st)
{
    const struct statx *x = (const struct statx *)(const void *)op->stat_room;
    *st = (struct stat){
        .st_dev = makedev(x->stx_dev_major, x->stx_dev_minor),
        .st_ino = x->stx_ino,
        .st_mode = x->stx_mode,
        .st_nlink = x->stx_nlink,
        .st_uid = x->stx_uid,
        .st_gid = x->stx_gid,
        .st_rdev = makedev(x->stx_rdev_major, x->stx_rdev_minor),
        .st_size = (off_t)x->stx_size,
        .st_blksize = (blksize_t)x->stx_blksize,
        .st_blocks = (blkcnt_t)x->stx_blocks,
        .st_atim = {.tv_sec = x->stx_atime.tv_sec, .tv_nsec = x->stx_atime.tv_nsec},
        .st_mtim = {.tv_sec = x->stx_mtime.tv_sec, .tv_nsec = x->stx_mtime.tv_nsec},
        .st_ctim = {.tv_sec = x->stx_ctime.tv_sec, .tv_nsec = x->stx_ctime.tv_nsec},
    };
}

static int uring_file(struct tern__backend *b, uint64_t token, struct tern__file_op *op)
{
    struct uring *u = b->state;
    require_not_forked(u);
    TERN_INSIST(token != 0 && token < CLOSED);
    /* preadv(2) and pwritev(2) refuse a descriptor that cannot seek (a
     * pipe, a socket, a terminal: -ESPIPE); the ring's would read or write
     * it at its position, offset ignored. Their checks are made here, by
     * the call itself with no bytes to move, so it fails as they fail. */
    if (op->kind == TERN__FILE_READV || op->kind == TERN__FILE_WRITEV) {
        /* No bytes: every check of the call (the descriptor, its mode,
         * the offset), then nothing done. */
        ssize_t ok = op->kind == TERN__FILE_READV ? preadv(op->fd, NULL, 0, (off_t)op->off)
                                                  : pwritev(op->fd, NULL, 0, (off_t)op->off);
        if (ok < 0)
            return -errno;
    }
    unsigned need = op->then_close ? 2 : 1;
    /* A chain goes into the queue whole: the queue is emptied first when
     * it lacks room, and one the kernel will not empty takes none. */
    if (io_uring_sq_space_left(&u->ring) < need)
        submit_now(u);
    int rc = 0;
    struct io_uring_sqe *sqe = io_uring_sq_space_left(&u->ring) >= need ? next_sqe(u, &rc) : NULL;
    if (sqe == NULL)
        return -EBUSY;
    switch (op->kind) {
    case TERN__FILE_STAT:
    case TERN__FILE_LSTAT:
        io_uring_prep_statx(sqe, stat_dir(op), stat_path(op), stat_flags(op), STATX_BASIC_STATS,
                            stx_of(op));
        break;
    case TERN__FILE_OPEN:
        io_uring_prep_openat(sqe, AT_FDCWD, op->path, op->flags | O_CLOEXEC, op->mode);
        /* Tried at once, the kernel opens with O_NONBLOCK added: a FIFO
         * would open without its peer (or fail -ENXIO). An open that
         * may wait goes to the kernel's worker, which waits as open(2). */
        if (!(op->flags & O_NONBLOCK))
            sqe->flags |= IOSQE_ASYNC;
        break;
    case TERN__FILE_READ:
        io_uring_prep_read(sqe, op->fd, op->buf, op->len, op->off);
        break;
    case TERN__FILE_READV:
        io_uring_prep_readv(sqe, op->fd, op->iov, op->len, op->off);
        break;
    case TERN__FILE_WRITEV:
        io_uring_prep_writev(sqe, op->fd, op->iov, op->len, op->off);
        break;
    case TERN__FILE_FSYNC:
    case TERN__FILE_FDATASYNC:
        io_uring_prep_fsync(sqe, op->fd,
                            op->kind == TERN__FILE_FDATASYNC ? IORING_FSYNC_DATASYNC : 0);
        break;
    case TERN__FILE_UNLINK:
    case TERN__FILE_RMDIR:
        io_uring_prep_unlinkat(sqe, AT_FDCWD, op->path,
                               op->kind == TERN__FILE_RMDIR ? AT_REMOVEDIR : 0);
        break;
    case TERN__FILE_MKDIR:
        io_uring_prep_mkdirat(sqe, AT_FDCWD, op->path, op->mode);
        break;
    case TERN__FILE_RENAME:
        io_uring_prep_renameat(sqe, AT_FDCWD, op->path, AT_FDCWD, op->path2, 0);
        break;
    default:
        TERN_INSIST(op->kind == TERN__FILE_CLOSE);
        io_uring_prep_close(sqe, op->fd);
        break;
    }
    io_uring_sqe_set_data64(sqe, FILE_OP | token);
    u->flive++;
    if (op->then_close) {
        TERN_INSIST(op->kind == TERN__FILE_READ);
        sqe->flags |= IOSQE_IO_HARDLINK;
        sqe = io_uring_get_sqe(&u->ring); /* room was made above */
        io_uring_prep_close(sqe, op->fd);
        io_uring_sqe_set_data64(sqe, FILE_OP | CLOSED | token);
        u->flive++;
    }
    return 0;
}

/* With the next wait: a file call holds no socket open for a peer to see. */
static void uring_file_cancel(struct tern__backend *b, uint64_t token)
{
    struct uring *u = b->state;
    int rc = 0;
    struct io_uring_sqe *sqe = next_sqe(u, &rc);
    if (sqe != NULL)
        prep_cancel(sqe, FILE_OP | token, 0);
}

/* A file call's one completion, into the done array; false when that is full. */
static bool take_file(struct uring *u, const struct io_uring_cqe *cqe, struct tern__backend *b)
{
    if (b->ndone == DONE_MAX)
        return false; /* left in the queue for the next wait */
    /* A call the kernel's worker was making when a cancel reached it
     * (an open waiting for a FIFO's peer) ends with the kernel's own
     * restart code, ERESTARTSYS (512), which no system call returns: it
     * was interrupted, as EINTR says. */
    int32_t res = cqe->res == -512 ? -EINTR : cqe->res;
    b->done[b->ndone++] = (struct tern__done){.token = cqe->user_data & ~(FILE_OP | CLOSED),
                                              .res = res,
                                              .final = true,
                                              .file = true,
                                              .closed = (cqe->user_data & CLOSED) != 0};
    u->flive--;
    return true;
}

static void note_recheck(struct uring *u, int fd, uint32_t gen)
{
    struct slot *s = &u->slots[fd];
    if (s->noted) {
        u->rechecks[s->idx_noted].gen = gen;
        return;
    }
    s->noted = true;
    s->idx_noted = u->nrechecks;
    u->rechecks[u->nrechecks++] = (struct recheck){fd, gen};
}

/*
 * Queue what the last wait noted: an update for each descriptor reported
 * (is it still ready?) and an add for each poll the kernel ended. A note
 * whose generation has moved on was overtaken by a modify.
 */
static int queue_rechecks(struct uring *u)
{
    size_t i = 0;
    int rc = 0;
    for (; i < u->nrechecks; i++) {
        struct recheck r = u->rechecks[i];
        struct slot *s = &u->slots[r.fd];
        if (s->gen == r.gen && s->events != 0 &&
            (rc = s->armed ? queue_update(u, r.fd) : queue_add(u, r.fd)) < 0)
            break;
        s->noted = false;
    }
    memmove(u->rechecks, u->rechecks + i, (u->nrechecks - i) * sizeof(*u->rechecks));
    u->nrechecks -= i;
    for (size_t j = 0; j < u->nrechecks; j++)
        u->slots[u->rechecks[j].fd].idx_noted = j;
    return rc;
}

/*
 * Before the buffers go: cancel every receive still in the kernel and
 * reap until each has made its last completion. Nothing is reported (the
 * loop is gone); the kernel answers a cancel at once, so this ends.
 */
static void drain_receives(struct uring *u, struct tern__backend *b)
{
    while (u->rwait != NONE || u->rstarved != NONE) {
        uint32_t *list = u->rwait != NONE ? &u->rwait : &u->rstarved;
        uint32_t idx = *list;
        *list = u->rentries[idx].next;
        u->rentries[idx].waiting = false;
        rentry_free(u, idx);
    }
    int owed = queue_owed(u);
    TERN_ENSURE(owed == 0);
    for (uint32_t idx = 0; idx < u->nrentries; idx++)
        if (u->rentries[idx].live && !u->rentries[idx].cancelled) {
            queue_cancel(u, idx);
            TERN_ENSURE(!u->rentries[idx].cancel_owed); /* next_sqe submits a full queue */
        }
    while (u->rlive > 0) {
        int rc = io_uring_submit_and_wait(&u->ring, 1);
        TERN_ENSURE(rc >= 0 || rc == -EINTR);
        unsigned head, seen = 0;
        struct io_uring_cqe *cqe;
        io_uring_for_each_cqe(&u->ring, head, cqe)
        {
            seen++;
            if (!(cqe->user_data & RECV) || (cqe->user_data & CONTROL))
                continue;
            struct rentry *e = &u->rentries[(uint32_t)cqe->user_data];
            if (e->accept) { /* cancelled: what it accepted is closed there */
                (void)take_accept(u, cqe, b, (uint32_t)cqe->user_data);
                continue;
            }
            if (cqe->flags & IORING_CQE_F_MORE)
                continue;
            e->cancelled = true;
            rentry_free(u, (uint32_t)cqe->user_data);
        }
        io_uring_cq_advance(&u->ring, seen);
    }
    b->ndone = 0;
}

static void uring_close(struct tern__backend *b)
{
    struct uring *u = b->state;
    /* Never in a forked child: tern_loop_free aborts there, as every call does. */
    TERN_INSIST(u->flive == 0); /* the loop's teardown waited for each file call */
    drain_receives(u, b);
    io_uring_queue_exit(&u->ring); /* cancels every poll still in the kernel */
    if (u->br != NULL)
        munmap(u->br, u->br_bytes + (size_t)NBUFS * BUF_SIZE);
    tern__free(u->slots);
    tern__free(u->rechecks);
    tern__free(u->owed_fds);
    tern__free(u->recv_of);
    tern__free(u->rentries);
    tern__free(u);
    b->state = NULL;
}

static unsigned from_poll(unsigned res)
{
    return ((res & POLLIN) ? TERN_READABLE : 0) | ((res & POLLOUT) ? TERN_WRITABLE : 0) |
           ((res & POLLHUP) ? TERN_HANGUP : 0) | ((res & POLLERR) ? TERN_ERROR : 0);
}

/* A send's one completion, into the done array; false when that is full. */
static bool take_send(const struct io_uring_cqe *cqe, struct tern__backend *b)
{
    if (b->ndone == DONE_MAX)
        return false; /* left in the queue for the next wait */
    b->done[b->ndone++] = (struct tern__done){
        .token = cqe->user_data & ~SEND, .res = cqe->res, .final = true, .sent = true};
    return true;
}

/* One completion into out; false when out is full and it needs a new entry. */
static bool take(struct uring *u, const struct io_uring_cqe *cqe, struct tern__fired *out, int *n,
                 int max, struct tern__backend *b)
{
    uint64_t data = cqe->user_data;
    if ((data & SEND) == SEND)
        return take_send(cqe, b);
    if (data & CONTROL) /* a file call's, or a failed update, remove or cancel (dropped) */
        return data == CONTROL ? true : take_file(u, cqe, b);
    if (data & RECV)
        return take_recv(u, cqe, b);
    int fd = (int)(uint32_t)data;
    uint32_t gen = (uint32_t)(data >> 32);
    if ((size_t)fd >= u->nslots || u->slots[fd].gen != gen)
        return true; /* stale: the poll was removed or replaced since */
    struct slot *s = &u->slots[fd];
    unsigned events = 0;
    if (cqe->res >= 0)
        events = from_poll((unsigned)cqe->res) &
                 (s->events | TERN_HANGUP | TERN_ERROR); /* not what an update took away */
    else if (cqe->res != -ECANCELED)
        events = TERN_ERROR;
    bool merge = s->mark == u->wait_seq && *n > 0;
    if (events != 0 && !merge && *n == max)
        return false;
    if (!(cqe->flags & IORING_CQE_F_MORE)) {
        s->armed = false;
        if (cqe->res >= 0 || cqe->res == -ECANCELED)
            note_recheck(u, fd, gen); /* added again on the next wait */
    } else if (events != 0 && !merge) {
        note_recheck(u, fd, gen); /* is it still ready on the next wait? */
    }
    if (events == 0)
        return true;
    if (merge) {
        out[s->idx].events |= events;
    } else {
        s->mark = u->wait_seq;
        s->idx = *n;
        out[*n] = (struct tern__fired){fd, events};
        (*n)++;
    }
    return true;
}

static int reap(struct uring *u, struct tern__fired *out, int max, struct tern__backend *b)
{
    unsigned head, seen = 0;
    struct io_uring_cqe *cqe;
    int n = 0;
    u->wait_seq += 1 + (u->wait_seq == UINT32_MAX); /* never 0, a fresh slot's mark */
    io_uring_for_each_cqe(&u->ring, head, cqe)
    {
        if (!take(u, cqe, out, &n, max, b))
            break;
        seen++;
    }
    io_uring_cq_advance(&u->ring, seen);
    return n;
}

static int uring_wait(struct tern__backend *b, int64_t timeout_ns, struct tern__fired *out, int max)
{
    struct uring *u = b->state;
    require_not_forked(u);
    int rc;
    b->ndone = 0;
    /* The queue was full and would not submit: queue the rest on the next
     * wait, and do not sleep before then, since those re-checks may be due. */
    if (queue_owed(u) < 0 || queue_rechecks(u) < 0 || queue_resubmits(u) < 0)
        timeout_ns = 0;
    if (timeout_ns == 0 || io_uring_cq_ready(&u->ring) > 0) {
        /* Never blocks. With completions already there and nothing to
         * submit, no enter at all; with neither, the enter runs any
         * completion still pending as task work. */
        if (io_uring_sq_ready(&u->ring) > 0)
            rc = io_uring_submit(&u->ring);
        else
            rc = io_uring_cq_ready(&u->ring) > 0 ? 0 : io_uring_get_events(&u->ring);
    } else if (timeout_ns < 0) {
        rc = io_uring_submit_and_wait(&u->ring, 1);
    } else {
        struct __kernel_timespec ts = {.tv_sec = timeout_ns / 1000000000,
                                       .tv_nsec = timeout_ns % 1000000000};
        struct io_uring_cqe *cqe;
        rc = io_uring_submit_and_wait_timeout(&u->ring, &cqe, 1, &ts, NULL);
    }
    /* A timeout, a signal, or a queue too full to submit into until this
     * wait reaps it: reap what is there. */
    if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EBUSY && rc != -EAGAIN)
        return rc;
    return reap(u, out, max, b);
}

const struct tern__backend_ops tern__backend_uring = {
    .name = "io_uring",
    .init = uring_init,
    .close = uring_close,
    .modify = uring_modify,
    .wait = uring_wait,
    .recv = uring_recv,
    .recycle = uring_recycle,
    .send = uring_send,
    .send_cancel = uring_send_cancel,
    .accept = uring_accept,
    .dgram_recv = uring_dgram_recv,
    .send_dgrams = uring_send_dgrams,
    .file = uring_file,
    .file_cancel = uring_file_cancel,
};
