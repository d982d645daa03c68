/*
 * The backend interface. A backend turns kernel readiness into a neutral
 * array of {fd, events}; it never calls user code and never touches the
 * loop's containers — the core dispatches.
 *
 * Events use the public bits (TERN_READABLE, TERN_WRITABLE, TERN_HANGUP,
 * TERN_ERROR). modify() sees both the old and the new interest so each
 * backend can pick add, change or delete without keeping its own copy:
 * old == 0 means add, new == 0 means delete.
 */
#ifndef TERN_BACKEND_H
#define TERN_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

struct tern__fired {
    int fd;
    unsigned events;
};

/*
 * What a completion backend performs itself, beside reporting readiness
 * (struct tern__backend's `completes`, set once the backend can).
 */
enum {
    TERN__DO_RECV = 1u << 0,       /* ops->recv: a stream socket's multishot receive */
    TERN__DO_SEND = 1u << 1,       /* ops->send: a stream socket's send of its queued writes */
    TERN__DO_ACCEPT = 1u << 2,     /* ops->accept: a listening socket's multishot accept */
    TERN__DO_UDP_RECV = 1u << 3,   /* ops->dgram_recv: a UDP socket's multishot receive */
    TERN__DO_UDP_SEND = 1u << 4,   /* ops->send_dgrams: a UDP socket's queued datagrams */
    TERN__DO_FILE = 1u << 5,       /* ops->file: one file system call (struct tern__file_op) */
    TERN__DO_FILE_PATHS = 1u << 6, /* ...and the path calls: unlink, rmdir, mkdir, rename */
};

/*
 * One file system call a completion backend makes for the core
 * (TERN__DO_FILE): the core chains them itself, one in flight per token,
 * each taking the previous one's result (runtime/fs/fs_ring.c). Every
 * pointer stays the caller's, untouched and valid, until the one
 * completion {token, res, final, file} comes (both, for a read with
 * then_close). Each gives what the system call of its line gives (its
 * result, or -errno), so a request made through them answers as the
 * pool's call would.
 */
enum {
    TERN__FILE_STAT,      /* stat(2) of path, or fstat(2) of fd when path is NULL */
    TERN__FILE_LSTAT,     /* lstat(2) of path */
    TERN__FILE_OPEN,      /* open(2) of path with flags | O_CLOEXEC, mode: res is the descriptor */
    TERN__FILE_READ,      /* pread(2) of len bytes at off into buf: res is the bytes read */
    TERN__FILE_CLOSE,     /* close(2) of fd */
    TERN__FILE_READV,     /* preadv(2) of fd: iov, len entries, at off */
    TERN__FILE_WRITEV,    /* pwritev(2) of fd: iov, len entries, at off */
    TERN__FILE_FSYNC,     /* fsync(2) of fd */
    TERN__FILE_FDATASYNC, /* fdatasync(2) of fd */
    /* Only with TERN__DO_FILE_PATHS: */
    TERN__FILE_UNLINK, /* unlink(2) of path */
    TERN__FILE_RMDIR,  /* rmdir(2) of path */
    TERN__FILE_MKDIR,  /* mkdir(2) of path with mode */
    TERN__FILE_RENAME, /* rename(2) of path to path2 */
};
struct stat;
struct iovec;
struct tern__file_op {
    uint8_t kind;
    int fd;
    int flags;
    unsigned mode;
    unsigned len;
    uint64_t off;
    const char *path, *path2;
    void *buf;
    const struct iovec *iov;
    /* TERN__FILE_READ: close(2) fd right after the read, whatever the read
     * did (a cancelled or failed one too), in the same trip to the kernel.
     * Two completions then come: the read's, and the close's (`closed`). */
    bool then_close;
    /* TERN__FILE_STAT, _LSTAT: where the kernel writes its answer (the
     * system's own record, a struct statx on Linux), read with tern__file_stat. */
    _Alignas(8) unsigned char stat_room[256];
};

/*
 * The call op describes, made at once on the caller's thread, for one a
 * backend's queue refused: its result, or -errno, as the kernel's call
 * through the ring gives it (a close's -EINTR too: the caller takes it
 * as success for both). Only where a backend sets TERN__DO_FILE.
 */
int tern__file_call(struct tern__file_op *op);
/* A TERN__FILE_STAT call's answer, once it succeeded, as a struct stat. */
void tern__file_stat(const struct tern__file_op *op, struct stat *st);

/*
 * One completion, as a wait reports it (struct tern__backend's `done`).
 * `token` is what the submitter handed over (the core passes an op's id);
 * the backend never reads it.
 */
struct tern__done {
    uint64_t token;
    int32_t res;      /* bytes received (> 0), 0 at the end of the stream, or -errno;
                       * an accept's: the new descriptor (>= 0, the core's), or -errno */
    uint32_t buf;     /* res > 0: the provided buffer holding the bytes... */
    const void *data; /* ...at this address, until ops->recycle(buf) */
    const void *ctl;  /* a receive with room for control data: what came (cmsghdrs)... */
    uint32_t ctllen;  /* ...this many bytes of it, in the same buffer */
    const void *from; /* a datagram's (res >= 0: its length, maybe 0): its source address... */
    uint32_t fromlen; /* ...this long, in the same buffer */
    bool truncated;   /* a datagram longer than the buffer's room: data holds its head */
    bool final;       /* the operation ended: nothing more comes for this submission */
    bool sent;        /* a send's completion (res: bytes the kernel took, or -errno) */
    bool file;        /* a file operation's completion (res: its result, or -errno) */
    bool closed;      /* ...of the close a read's then_close asked for (res: close's) */
};

struct msghdr;

/*
 * A backend with a signal operation reports a delivery of signo as a
 * fired entry with this fd (never -1, which is "no descriptor"), its
 * events holding how many deliveries the kernel merged into it (>= 1).
 */
#define TERN__FIRED_SIGNAL(signo) (-1 - (signo))
#define TERN__FIRED_SIGNO(fd) (-1 - (fd))

struct tern__backend;

struct tern__backend_ops {
    const char *name;
    /* 0 or -errno. May set b->ops to another backend and return its init's result. */
    int (*init)(struct tern__backend *b);
    void (*close)(struct tern__backend *b);
    int (*modify)(struct tern__backend *b, int fd, unsigned old_events, unsigned new_events);
    /*
     * Wait up to timeout_ns (-1: forever, 0: poll) and fill out[0..max).
     * Returns the number of entries, 0 on timeout or EINTR, or -errno.
     * Timeouts are rounded up, never down, so a deadline is never missed.
     */
    int (*wait)(struct tern__backend *b, int64_t timeout_ns, struct tern__fired *out, int max);
    /*
     * Used only when init set wakes_itself: a wake-up of the backend's own
     * (kqueue's EVFILT_USER) instead of a wake descriptor registered like
     * any other. wake makes a wait return and the backend fd readable; any
     * thread may call it. wake_take consumes one wake on the loop's
     * thread, returning false while that wake has not landed yet (the
     * caller retries: the waker is committed to it).
     */
    void (*wake)(struct tern__backend *b);
    bool (*wake_take)(struct tern__backend *b);
    /*
     * Optional (NULL: the core reads signals through a descriptor of its
     * own): start (on) or stop reporting signal signo, at once rather
     * than batched, so no delivery after a successful start is missed.
     * Returns 0 or -errno. The caller has blocked signo in its thread.
     */
    int (*signal)(struct tern__backend *b, int signo, bool on);
    /*
     * Optional (NULL: the runtime learns of exits some other way, a pidfd
     * or SIGCHLD): start (on) or stop reporting the end of child process
     * pid as a fired entry {fd, TERN_READABLE}, once, from the first wait
     * after it ended (also when it ended before the start). fd is a
     * descriptor the caller watches for TERN_READABLE; the backend only
     * names it and never reads it or reaps the child. Applied at once.
     * Returns 0 or -errno (-ESRCH: no such child); stopping a report
     * already made or never started returns 0.
     */
    int (*proc)(struct tern__backend *b, int pid, int fd, bool on);
    bool vnode; /* modify() takes TERN__VNODE (below) */
    /*
     * Optional (b->completes & TERN__DO_RECV): start (on) or cancel the
     * multishot receive on stream socket fd, queued like modify's changes.
     * Each batch of bytes comes back in order as a completion {token, res,
     * buf, data}, not final; the end of the stream or an error comes as a
     * final one and ends the receive. With ctl_room > 0 it receives as
     * recvmsg does with that much room for control data (descriptors
     * passed on a Unix-domain socket), reported as {ctl, ctllen}.
     * A receive the kernel pauses (its buffers all out) the backend
     * resumes by itself. After a cancel the bytes the kernel had already
     * taken still come (not final), then nothing more. At most one receive
     * per fd. Returns 0 or -errno (-EOPNOTSUPP: the backend cannot, after
     * all; the caller reads by readiness instead); a cancel is never
     * refused (one the queue cannot take goes with the next wait).
     */
    int (*recv)(struct tern__backend *b, int fd, uint64_t token, bool on, size_t ctl_room);
    /* Give back a completion's buffer once its bytes are consumed. */
    void (*recycle)(struct tern__backend *b, uint32_t buf);
    /*
     * Optional (b->completes & TERN__DO_SEND): queue one send of msg's
     * iovecs (and its control data: descriptors passed on a Unix-domain
     * socket) on stream socket fd, as sendmsg with MSG_NOSIGNAL; it goes
     * to the kernel with the next wait. msg, its iovecs, its control data
     * and the bytes stay the caller's to keep untouched until the send's
     * one completion {token, res: bytes taken (maybe fewer than asked) or
     * -errno, final, sent}. The caller has at most one send per token in
     * flight. Returns 0, or -EBUSY when the queue takes no entry (nothing
     * was queued: the caller sends by itself).
     */
    int (*send)(struct tern__backend *b, int fd, uint64_t token, const struct msghdr *msg);
    /*
     * Cancel the send in flight for token on fd, at once (the socket may
     * be closed next). Its completion still comes: -ECANCELED, or what
     * the kernel had taken. Never refused: a cancel the queue cannot take
     * goes with the next wait.
     */
    void (*send_cancel)(struct tern__backend *b, int fd, uint64_t token);
    /*
     * Optional (b->completes & TERN__DO_ACCEPT): start (on) or cancel the
     * multishot accept on listening socket fd, queued like modify's
     * changes. Each connection comes as a completion {token, res = its new
     * descriptor, non-blocking and close-on-exec, now the caller's}, not
     * final; a failure comes as a final one {res = -errno} and ends the
     * accept (the caller starts it again, or backs off). The kernel ending
     * it by itself for no failure is not reported: the backend submits it
     * again. A kernel that refuses multishot accept ends the first with
     * -EOPNOTSUPP and clears TERN__DO_ACCEPT: the caller accepts by
     * readiness from then on. A connection the kernel accepted after the
     * cancel is closed by the backend, never reported (nor leaked); nothing
     * comes after a cancel. At most one accept (or receive) per fd.
     * Returns 0 or -errno; a cancel is never refused (one the queue
     * cannot take goes with the next wait).
     */
    int (*accept)(struct tern__backend *b, int fd, uint64_t token, bool on);
    /*
     * Optional (b->completes & TERN__DO_UDP_RECV): start (on) or cancel
     * the multishot receive on UDP socket fd, queued like modify's
     * changes. Each datagram comes in order as a completion {token, res =
     * its length (0 for an empty one), buf, data, from, fromlen,
     * truncated}, not final: the first b->dgram_room bytes of it, and
     * `truncated` when it was longer. An error comes as a final one {res
     * = -errno} and ends the receive (the caller starts it again: an
     * error is not a datagram socket's end). Otherwise as ops->recv: a
     * pause for want of buffers is the backend's to resume, datagrams
     * taken before a cancel still come, the cancel's end does not, at
     * most one receive (or accept) per fd. Returns 0 or -errno (the
     * caller receives by readiness instead); a cancel is never refused.
     */
    int (*dgram_recv)(struct tern__backend *b, int fd, uint64_t token, bool on);
    /*
     * Optional (b->completes & TERN__DO_UDP_SEND): queue the sends of
     * msgs[0..n) on UDP socket fd, each as sendmsg with MSG_NOSIGNAL (its
     * msg_name the destination, or NULL on a connected socket), made by
     * the kernel one after the other in that order. Each has one
     * completion {token, res: bytes sent or -errno, final, sent}, in the
     * same order; one that failed makes those after it in the same call
     * complete -ECANCELED, unsent. What msgs point at stays the caller's
     * to keep untouched until its completion. The caller has at most one
     * call's sends per token in flight; send_cancel cancels them all.
     * Returns how many it queued (1..n: the rest go in a later call), or
     * -EBUSY when the queue takes none (the caller sends by itself).
     */
    int (*send_dgrams)(struct tern__backend *b, int fd, uint64_t token, const struct msghdr *msgs,
                       unsigned n);
    /*
     * Optional (b->completes & TERN__DO_FILE): queue file operation *op
     * for token (the caller has one per token in flight); it goes to the
     * kernel with the next wait, and its one completion {token, res,
     * final, file} comes from a wait after that, never from this call.
     * Returns 0, or -EBUSY when the queue takes no entry (nothing was
     * queued: the caller makes the call by itself, and the close of a
     * then_close too), or another negative errno: the call's own failure,
     * found before it was queued, where the kernel's call would not say it
     * as the system call does (nothing was queued; the caller takes it as
     * the call's result). A token is below 1 << 61.
     */
    int (*file)(struct tern__backend *b, uint64_t token, struct tern__file_op *op);
    /*
     * Ask the kernel to cancel token's file operation, with the next wait
     * (a read's, not the close its then_close asked for, which runs all
     * the same). Its completion still comes: -ECANCELED if the call had not started,
     * else what the call did (a call under way is not interrupted). A
     * cancel the queue cannot take is dropped: the operation just ends as
     * it would have.
     */
    void (*file_cancel)(struct tern__backend *b, uint64_t token);
};

/*
 * File changes, where the backend has a filter for them (ops->vnode:
 * kqueue's EVFILT_VNODE). modify() with new_events == TERN__VNODE watches
 * the file or directory open as fd; old_events == TERN__VNODE with
 * new_events == 0 stops. Unlike descriptor interest both are applied at
 * once (an add's failure is modify's -errno). Edge-triggered: each change
 * is reported once, as a fired entry {fd, the TERN__VNODE_* bits that
 * happened}.
 */
enum {
    TERN__VNODE = 1u << 4,        /* the interest */
    TERN__VNODE_WRITE = 1u << 5,  /* written; a directory: an entry came, went or moved */
    TERN__VNODE_ATTRIB = 1u << 6, /* attributes or the link count changed */
    TERN__VNODE_RENAME = 1u << 7, /* the file itself was renamed */
    TERN__VNODE_DELETE = 1u << 8, /* a link to it was removed, or access revoked */
};

struct tern__backend {
    const struct tern__backend_ops *ops;
    int fd;                  /* the descriptor a host loop can watch, or -1 */
    void *state;             /* backend-private */
    bool wakes_itself;       /* set by init: use ops->wake, not a wake descriptor */
    unsigned completes;      /* TERN__DO_* the backend performs (0: readiness only) */
    bool owes;               /* changes wait that only a wait sends: wait even with no fd */
    unsigned nbufs;          /* provided buffers: a buffer id is below this */
    unsigned dgram_room;     /* TERN__DO_UDP_RECV: the bytes of a datagram a buffer holds */
    struct tern__done *done; /* set by each wait: the completions it reaped... */
    int ndone;               /* ...this many, consumed before the next wait */
};

#ifndef TERN_HAVE_IOCP
extern const struct tern__backend_ops tern__backend_poll;
#else
/* Windows: the only backend there (poll.c is POSIX). */
extern const struct tern__backend_ops tern__backend_iocp;
/* Test seam: how many socket polls the last iocp close() cancelled and
 * waited for (their completions drained before the records were freed). */
unsigned tern__iocp_close_drained(void);
#endif
#ifdef TERN_HAVE_EPOLL
extern const struct tern__backend_ops tern__backend_epoll;
#endif
#ifdef TERN_HAVE_KQUEUE
extern const struct tern__backend_ops tern__backend_kqueue;
#endif
#ifdef TERN_HAVE_IO_URING
/* Its init hands the loop to epoll (setting ops) where the kernel refuses io_uring. */
extern const struct tern__backend_ops tern__backend_uring;
#endif

/*
 * Test seam: whether kqueue loops created from now on wake through
 * EVFILT_USER (the default where the system has it) or through the core's
 * wake descriptor (the default under libkqueue, whose kqueue descriptor a
 * host cannot watch). Returns false when EVFILT_USER is not built in (no
 * kqueue, no EVFILT_USER, or a portable build); the setting then has no
 * effect.
 */
bool tern__kqueue_user_wake(bool on);

/*
 * Test seam: the io_uring backend's next n requests for a submission entry
 * find the queue full and its submit refused (-EBUSY), as a completion
 * queue in overflow makes the kernel refuse it. No effect without io_uring.
 */
void tern__uring_refuse_entries(unsigned n);

/*
 * Test seam: the io_uring backend's next n multishot accepts carry a flag
 * this kernel does not know, so the kernel refuses them (-EINVAL) as one
 * without multishot accept does. No effect without io_uring.
 */
void tern__uring_refuse_accepts(unsigned n);

/* Look a backend up by name; NULL picks the best built one. */
const struct tern__backend_ops *tern__backend_find(const char *name);

#endif
