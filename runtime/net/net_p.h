/*
 * Streams, listeners and signal watchers: the private layout shared by
 * stream.c (closing, reading, the dispatch of owed callbacks), tcp.c
 * (listen, accept, connect), unix.c, tty.c, write.c (the write queue and
 * the watcher's interest), stream_recv.c (reading through a completion
 * backend's receive), stream_record.c (the record itself) and signal.c.
 * They call top-down in that order: a file calls only files after it in
 * the list.
 *
 * A stream is a loop operation (struct tern__op first, so the id map and
 * the ready queue hold it), and the only one: what it runs for itself is
 * embedded in the record and reached by pointer, never by id. Its
 * descriptor is watched through an embedded `struct tern__io` (io.c), a
 * connect's timeout and a listener's back-off are an embedded internal
 * deadline (`deadline`, on the loop's heap with no id), and a connect's
 * name lookup is held by its record (tern__lookup_start). So no public
 * call can reach them, and whether the stream keeps the loop alive is
 * decided by the stream op's own reference alone.
 *
 * Callbacks the stream owes (connect, write, shutdown, drain, close) are
 * recorded in the record and delivered by the op's dispatch hook in step
 * 2: the stream queues itself on the ready queue (no allocation, so a
 * completion can never be lost to ENOMEM or max_operations). Readiness
 * from the watcher queues the stream the same way (`io_revents`); its
 * dispatch then reads, accepts or flushes first, calling read and accept
 * callbacks straight from there.
 *
 * Closing marks the record CLOSING at once, so every API call treats the
 * id as stale, but the op stays registered until the close callback has
 * run (and any resolve it started has come back): that keeps the loop,
 * and tern_loop_free's drain, turning until the stream owes nothing.
 */
#ifndef TERN_NET_P_H
#define TERN_NET_P_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <netdb.h>

#include "loop_p.h"
#include "tern.h"

enum tern__stream_kind { TERN__STREAM = 1, TERN__LISTENER = 2 };

enum {
    TERN__S_CONNECTING = 1u << 0, /* tern_tcp_connect or tern_tcp_listen_name has not finished */
    TERN__S_READING = 1u << 1,    /* read_start is in force */
    TERN__S_READ_DONE = 1u << 2,  /* end of stream or a read error seen */
    TERN__S_SHUT_ASKED = 1u << 3, /* tern_stream_shutdown called */
    TERN__S_SHUT_DONE = 1u << 4,  /* shutdown(SHUT_WR) performed */
    TERN__S_CLOSING = 1u << 5,    /* closed: the id is stale to callers */
    TERN__S_CLOSE_RAN = 1u << 6,  /* the close callback has run */
    TERN__S_DRAIN_OWED = 1u << 7, /* a write returned 1: drain_cb owed on low water */
    TERN__S_BACKOFF = 1u << 8,    /* listener paused after EMFILE and friends */
};

/* One tern_stream_write: its own copy of the iovec array. */
struct tern__wreq {
    struct tern__wreq *next;
    tern_stream_cb cb;
    void *arg;
    int status; /* set when it completes */
    unsigned nbufs;
    unsigned nfds;  /* descriptors to pass with the first byte (unix.c) */
    int *fds;       /* tern's duplicates, closed once sent or failed; NULL when none */
    unsigned first; /* first iov entry not fully written */
    size_t left;    /* bytes not yet written */
    struct iovec iov[];
};

struct tern__stream {
    struct tern__op op; /* first: the id, the class, the ready link */
    tern_loop *loop;
    enum tern__stream_kind kind;
    unsigned state;
    int fd;              /* -1 while resolving and after close */
    struct tern__io io;  /* the fd's watcher; io.events is what it waits for now */
    unsigned io_revents; /* reported by the watcher since the last dispatch */

    /* reading */
    tern_read_cb read_cb;
    void *read_arg;
    int read_status; /* a failure found outside the read path, owed to read_cb */
    bool read_due;
    /* reading through the backend's receive (stream_recv.c) */
    bool recv_on;      /* a receive is submitted for fd */
    bool accept_on;    /* a listener: the backend's accept is submitted for fd (tcp.c) */
    bool recv_end_due; /* its end came (recv_end: 0 or -errno), owed after the bytes */
    int recv_end;
    uint32_t land_head; /* the bytes it brought, in order: buffer ids (loop->landed) */
    uint32_t land_tail;
    uint32_t land_off; /* of the head, bytes already delivered (into a caller's memory) */

    /* writing (write.c) */
    struct tern__wreq *wq, **wq_tail;     /* queued, in order */
    struct tern__wreq *done, **done_tail; /* completed, callbacks owed */
    size_t queued;                        /* bytes queued, not yet written */
    size_t high_water;
    int write_error; /* first failure, sticky */
    /* A send in the kernel (the backend's TERN__DO_SEND): the queue's head
     * requests are its bytes, so nothing completes or fails before its
     * completion, which then fails the queue with send_fail if that was
     * asked meanwhile (a close, a watcher that failed). */
    bool send_on;
    int send_fail;
    struct tern__send_area *send_area; /* what it points at, kept until then */
    tern_drain_cb drain_cb;
    void *drain_arg;
    bool drain_due;

    /* shutdown */
    tern_stream_cb shut_cb;
    void *shut_arg;
    int shut_status;
    bool shut_due;

    /* connect (tcp.c) */
    tern_stream_cb connect_cb;
    void *connect_arg;
    int connect_status;
    bool connect_due;
    tern_job *lookup; /* the lookup in flight, NULL when none */
    /* The connect timeout or the listener's back-off: an internal deadline
     * (tcp.c), armed while it holds a heap claim. */
    struct tern__op deadline;
    struct addrinfo *addrs; /* what the lookup returned */
    struct addrinfo *next_addr;
    bool addrs_resolved;     /* from tern_resolve (else the inline numeric one) */
    struct addrinfo numeric; /* a numeric host needs no lookup */
    struct sockaddr_storage numeric_addr;

    /* listening (tcp.c) */
    tern_accept_cb accept_cb;
    void *accept_arg;
    bool backoff_logged;
    int backoff_status;
    bool backoff_due;
    /* listening on a name (tcp.c): the bind waits for the lookup */
    int listen_backlog;
    unsigned listen_flags;

    /* closing */
    tern_close_cb close_cb;
    void *close_arg;

    /* What the descriptor is: a socket is read with recv and written with
     * sendmsg; a pipe, FIFO or character device with read and writev. */
    bool not_socket;
    /* reading into the caller's memory (tern_stream_read_start_alloc) */
    tern_alloc_cb alloc_cb;
    /* Unix-domain (unix.c): reads take SCM_RIGHTS descriptors, which wait
     * in `rfds` for tern_unix_take_fd; the rest are closed at close. */
    bool unix_sock;
    int *rfds;
    unsigned rfds_head, rfds_len, rfds_cap;
    /* A TTY's mode before tern_tty_set_mode first changed it (tty.c). */
    void *tty_saved;
};

#define TERN__HIGH_WATER_DEFAULT ((size_t)1 << 20)
#define TERN__WRITE_BUFS_MAX 1024u

/* stream_record.c */
int tern__stream_new(tern_loop *loop, enum tern__stream_kind kind, int fd,
                     struct tern__stream **sp);
/* Undo tern__stream_new before the stream reached the caller (no callbacks). */
void tern__stream_discard(struct tern__stream *s);
/* Free the record once the close callback ran and no lookup holds it. */
void tern__stream_maybe_finish(struct tern__stream *s);
/* The open stream named id, or NULL (unknown, stale, not a stream, closing). */
struct tern__stream *tern__stream_get(tern_loop *loop, tern_id id);
/* Watch the descriptor for exactly `events` (0 stops the watcher, which
 * never fails). 0, or -ENOMEM and the backend's errors. */
int tern__stream_watch(struct tern__stream *s, unsigned events);
/* The events the stream's state asks for (0: none); inline: every
 * readiness dispatch asks it. */
static inline unsigned tern__stream_wanted(const struct tern__stream *s)
{
    if ((s->state & TERN__S_CLOSING) || s->fd < 0)
        return 0;
    if (s->kind == TERN__LISTENER)
        return (s->state & TERN__S_BACKOFF) || s->accept_on ? 0 : TERN_READABLE;
    if (s->state & TERN__S_CONNECTING)
        return TERN_WRITABLE;
    unsigned ev = 0;
    if ((s->state & TERN__S_READING) && !s->recv_on)
        ev |= TERN_READABLE;
    if (s->wq != NULL && !s->send_on)
        ev |= TERN_WRITABLE;
    return ev;
}
/* Queue the stream so its dispatch delivers what it owes. */
void tern__stream_owe(struct tern__stream *s);
/* Stop the connect timeout or the back-off; cancel a lookup in flight. */
void tern__stream_stop_aux(struct tern__stream *s);
/* Free the addresses a connect or a listen on a name tries. */
void tern__stream_free_addrs(struct tern__stream *s);

/* Room for one write's SCM_RIGHTS message, aligned for cmsghdr. */
union tern__fds_cmsg {
    char buf[CMSG_SPACE(sizeof(int) * TERN_UNIX_FDS_MAX)];
    struct cmsghdr align;
};

/* iovec entries gathered per send, across requests (stack cost 2 KiB). */
#define TERN__GATHER_MAX 128

/* One send's message, built on the stack for a system call of the loop's
 * own, or in the stream's send_area for a send in the kernel. */
struct tern__send_area {
    struct msghdr msg;
    union tern__fds_cmsg cbuf;
    struct iovec iov[TERN__GATHER_MAX];
};

/* write.c */
void tern__write_flush(struct tern__stream *s);
/* A send's completion (stream.c's completed hook hands it over). */
void tern__write_sent(struct tern__stream *s, const struct tern__done *d);
void tern__write_fail(struct tern__stream *s, int status);
void tern__write_deliver(struct tern__stream *s, unsigned budget);
/* The body of tern_stream_write; with nfds > 0, fill() supplies w->fds. */
int tern__write_queue(tern_loop *loop, tern_id id, const tern_buf *bufs, unsigned nbufs,
                      unsigned nfds,
                      int (*fill)(struct tern__stream *, struct tern__wreq *, const void *),
                      const void *fill_arg, tern_stream_cb cb, void *arg);
/* The shutdown step once the queue is empty. */
void tern__write_maybe_shutdown(struct tern__stream *s);
/* Recompute the interest from the stream's state; a failure fails the
 * queued writes and reading with it. Here, beside the queue it fails. */
void tern__stream_rewatch(struct tern__stream *s);
/* Attach the head request's descriptors to msg (for its sendmsg). */
void tern__wreq_attach_fds(struct msghdr *msg, const struct tern__wreq *w,
                           union tern__fds_cmsg *cbuf);
/* Close a request's duplicates (sent, failed or cancelled) exactly once. */
void tern__wreq_fds_close(struct tern__wreq *w);

/* unix.c: read once with recvmsg, keeping passed descriptors: bytes
 * read, 0 at the end, or a negative errno. Close every descriptor still
 * held. */
ssize_t tern__unix_recv(struct tern__stream *s, void *buf, size_t len);
/* Keep the descriptors a receive brought (ctl: its control data) for
 * tern_unix_take_fd: 0, or -ENOMEM when some had to be closed. */
int tern__unix_keep_fds(struct tern__stream *s, const void *ctl, size_t ctllen);
/* stream_recv.c: keep fd at the tail of the stream's `rfds` ring; false
 * (not kept) when out of memory. */
bool tern__fds_push(struct tern__stream *s, int fd);
void tern__unix_close_fds(struct tern__stream *s);

/* tty.c: put a TTY back the way tern_tty_set_mode found it. */
void tern__tty_restore(struct tern__stream *s);

/*
 * stream_recv.c: reading through a completion backend's receive. The
 * backend receives into its own buffers while the stream reads; the bytes
 * wait in the stream's list (land_*) until its dispatch hands them to the
 * read callback, and the end of the stream after them.
 */
/* Start or cancel the receive so it matches the state (reading, not
 * closing, not ended). 0, or -errno from starting one; a backend that
 * cannot receive after all leaves the stream reading by readiness. */
int tern__stream_recv_sync(struct tern__stream *s);
/* Nothing for the sync to do: a readiness backend and no receive. Two
 * loads, so a hot path asks this first and calls the sync only if not. */
static inline bool tern__stream_recv_idle(const struct tern__stream *s)
{
    return !s->recv_on && !(s->loop->backend.completes & TERN__DO_RECV);
}
/* The class hook: a completion of the stream's receive (step 4). */
void tern__stream_recv_completed(tern_loop *loop, struct tern__op *op, const struct tern__done *d);
/* Whether bytes or an end wait in the list: the readiness read must not
 * overtake them, and a reading stream owes a dispatch. */
static inline bool tern__stream_recv_waiting(const struct tern__stream *s)
{
    return s->land_head != TERN__LANDED_NONE || s->recv_end_due;
}
/* The head's unread bytes, or NULL when none wait; *ctl and *ctllen the
 * control data that came with them, on the buffer's first delivery. */
const void *tern__stream_recv_head(const struct tern__stream *s, size_t *len, const void **ctl,
                                   size_t *ctllen);
/* Call fn for each descriptor an SCM_RIGHTS message in ctl holds. */
void tern__passed_fds(const void *ctl, size_t len, void (*fn)(int fd, void *arg), void *arg);
/* Mark n of the head's bytes delivered; when it is used up, unlink it and
 * return its buffer id (the caller gives it back once done with the
 * bytes, tern__stream_recv_release), else TERN__LANDED_NONE. */
uint32_t tern__stream_recv_consume(struct tern__stream *s, size_t n);
void tern__stream_recv_release(tern_loop *loop, uint32_t buf);
/* Give back every buffer in the list (closing). */
void tern__stream_recv_drop(struct tern__stream *s);

/* tcp.c: the watcher callback's listener and connect halves. */
void tern__tcp_accept_ready(struct tern__stream *s);
/*
 * A listener on a completion backend's accept (TERN__DO_ACCEPT): the
 * connections the kernel accepted wait in the stream's `rfds` ring until
 * the listener's dispatch hands them out. Sync (stream_recv.c) starts or
 * cancels the accept as the listener's state asks (0, or the backend's
 * -errno: the listener then accepts by readiness); start is sync, then
 * the watch, and refuses the listen when either fails.
 */
int tern__listener_sync(struct tern__stream *s);
int tern__listener_start(struct tern__stream *s);
void tern__listener_completed(struct tern__stream *s, const struct tern__done *d);
/* Step 2: hand out what waits; whether any still waits to go. */
void tern__listener_deliver(struct tern__stream *s);
static inline bool tern__listener_waiting(const struct tern__stream *s)
{
    return s->kind == TERN__LISTENER && s->rfds_len > 0 &&
           !(s->state & (TERN__S_CLOSING | TERN__S_BACKOFF));
}
void tern__tcp_connect_ready(struct tern__stream *s, unsigned events);

#endif
