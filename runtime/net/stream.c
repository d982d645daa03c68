/*
 * Streams: the record's lifecycle, the fd watcher behind it, reading, and
 * the dispatch hook that delivers every callback a stream owes.
 *
 * Hazards, named where they are handled:
 *  - A user callback may close the stream it is called for. Nothing frees
 *    the record inside a callback: closing only marks it and queues it, and
 *    the record is freed by tern__op_finish() at the end of the dispatch
 *    that runs the close callback (or when step 2 pops it, if it was
 *    queued again meanwhile). Every path re-checks TERN__S_CLOSING after
 *    calling out.
 *  - A descriptor is closed only after its watcher stopped, so the
 *    process-wide fd registry (G4) never names a closed fd. Stopping the
 *    watcher also drops a report it made for that fd and the stream has
 *    not acted on yet (`io_revents`): a connect's next socket may get the
 *    same descriptor number.
 *  - The watcher and the deadline are embedded, not ops: tern_loop_free's
 *    walk over the id map reaches them only through the stream, so they
 *    are never found already stopped when the stream closes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "heap.h"
#include "net_p.h"

/* Reads land in a buffer on the loop thread's stack: nothing to allocate
 * or free per stream, and the data is only promised until the read
 * callback returns. The loop thread needs this much stack to spare. */
#define READ_CHUNK 65536

static void stream_dispatch(tern_loop *loop, struct tern__op *op);
static int stream_cancel(tern_loop *loop, struct tern__op *op);
static void stream_free(tern_loop *loop, struct tern__op *op);
static int stream_close(struct tern__stream *s);
static void stream_completed(tern_loop *loop, struct tern__op *op, const struct tern__done *d);

const struct tern__op_class tern__stream_class = {
    .name = "stream",
    .dispatch = stream_dispatch,
    .cancel = stream_cancel,
    .free = stream_free,
    .refable = true,
    .kind = TERN__KIND_STREAM,
    .completed = stream_completed,
};

/* For an adopted descriptor; sockets tern creates get the flags at birth. */
static int socket_prepare(int fd)
{
    int rc = tern__fd_nonblock_cloexec(fd);
    return rc < 0 ? rc : tern__socket_nosigpipe(fd);
}

/* One system call: recv for a socket, recvmsg for a Unix-domain one (it may
 * carry descriptors), read for a pipe or a TTY. Bytes read, 0 at the end,
 * or a negative errno. */
static ssize_t read_some(struct tern__stream *s, void *buf, size_t len)
{
    for (;;) {
        ssize_t n = tern__stream_fault();
        if (n == 0 && s->unix_sock)
            n = tern__unix_recv(s, buf, len);
        else if (n == 0 &&
                 (n = s->not_socket ? read(s->fd, buf, len) : recv(s->fd, buf, len, 0)) < 0)
            n = -errno;
        if (n != -EINTR)
            return n;
    }
}

static void read_result(struct tern__stream *s, const void *buf, ssize_t n)
{
    if (n > 0) {
        s->read_cb(s->loop, s->op.id, 0, buf, (size_t)n, s->read_arg);
        return;
    }
    if (n == -EAGAIN || n == -EWOULDBLOCK)
        return;
    int status = (int)n;
    s->state = (s->state & ~TERN__S_READING) | TERN__S_READ_DONE;
    tern__stream_rewatch(s);
    s->read_cb(s->loop, s->op.id, status, NULL, 0, s->read_arg);
}

/* Into the caller's memory (tern_stream_read_start_alloc). */
static void read_into_caller(struct tern__stream *s)
{
    size_t len = READ_CHUNK;
    void *buf = s->alloc_cb(s->loop, s->op.id, &len, s->read_arg);
    /* The allocator may have stopped reading or closed the stream. */
    if ((s->state & (TERN__S_READING | TERN__S_CLOSING)) != TERN__S_READING || s->alloc_cb == NULL)
        return;
    if (buf == NULL || len == 0) {
        s->read_cb(s->loop, s->op.id, -ENOBUFS, NULL, 0, s->read_arg);
        return;
    }
    read_result(s, buf, read_some(s, buf, len));
}

/* One read per readiness, so one busy stream cannot starve the others. */
static void read_once(struct tern__stream *s)
{
    if (s->alloc_cb != NULL) {
        read_into_caller(s);
        return;
    }
    char buf[READ_CHUNK];
    read_result(s, buf, read_some(s, buf, sizeof(buf)));
}

/* Bytes the receive brought (stream_recv.c) into the caller's memory. */
static void recv_into_caller(struct tern__stream *s, const void *p, size_t len)
{
    size_t cap = READ_CHUNK;
    void *buf = s->alloc_cb(s->loop, s->op.id, &cap, s->read_arg);
    if ((s->state & (TERN__S_READING | TERN__S_CLOSING)) != TERN__S_READING || s->alloc_cb == NULL)
        return;
    if (buf == NULL || cap == 0) {
        s->read_cb(s->loop, s->op.id, -ENOBUFS, NULL, 0, s->read_arg);
        return;
    }
    size_t n = len < cap ? len : cap;
    memcpy(buf, p, n);
    uint32_t used = tern__stream_recv_consume(s, n);
    if (used != TERN__LANDED_NONE)
        tern__stream_recv_release(s->loop, used);
    s->read_cb(s->loop, s->op.id, 0, buf, n, s->read_arg);
}

/*
 * Step 2: what the receive brought, in order, while the stream reads,
 * then its end. A buffer goes back once the callback it was handed to
 * returns; the callback may stop reading or close the stream (which gives
 * back the rest).
 */
static void recv_deliver(struct tern__stream *s)
{
    while ((s->state & (TERN__S_READING | TERN__S_CLOSING)) == TERN__S_READING) {
        size_t len, ctllen;
        const void *ctl;
        const void *p = tern__stream_recv_head(s, &len, &ctl, &ctllen);
        if (p == NULL)
            break;
        int f = tern__stream_fault(); /* the seam readiness reads pass, at the same point */
        if (f == -EINTR)
            continue;
        if (f == -EAGAIN || f == -EWOULDBLOCK)
            return; /* still waiting: the dispatch comes again (owes) */
        if (f < 0) {
            read_result(s, NULL, f);
            return;
        }
        /* Passed descriptors join the ring just before their bytes, as a
         * readiness read keeps them; one that could not be kept fails the
         * read, bytes and all, as there. */
        if (ctllen > 0 && (f = tern__unix_keep_fds(s, ctl, ctllen)) < 0) {
            tern__stream_recv_release(s->loop, tern__stream_recv_consume(s, len));
            read_result(s, NULL, f);
            return;
        }
        if (s->alloc_cb != NULL) {
            recv_into_caller(s, p, len);
            continue;
        }
        uint32_t used = tern__stream_recv_consume(s, len);
        s->read_cb(s->loop, s->op.id, 0, p, len, s->read_arg);
        tern__stream_recv_release(s->loop, used);
    }
    if (s->recv_end_due && s->land_head == TERN__LANDED_NONE &&
        (s->state & (TERN__S_READING | TERN__S_CLOSING)) == TERN__S_READING) {
        s->recv_end_due = false;
        read_result(s, NULL, s->recv_end);
    }
}

/*
 * Step 2: act on what the watcher reported (events within its interest).
 * Never for a closing stream: closing stops the watcher, which drops its
 * reports (tern__stream_watch clears io_revents).
 */
static void stream_io(struct tern__stream *s, unsigned events)
{
    if (tern__stream_wanted(s) == 0) { /* interest dropped lazily: stop now */
        tern__stream_watch(s, 0);
        return;
    }
    if (s->kind == TERN__LISTENER) {
        tern__tcp_accept_ready(s);
        return;
    }
    if (s->state & TERN__S_CONNECTING) {
        tern__tcp_connect_ready(s, events);
        return;
    }
    if (s->wq != NULL && (events & (TERN_WRITABLE | TERN_HANGUP | TERN_ERROR)))
        tern__write_flush(s);
    /* A receive in flight reads for the stream: a read here would overtake it. */
    if ((s->state & (TERN__S_READING | TERN__S_CLOSING)) == TERN__S_READING && !s->recv_on &&
        !tern__stream_recv_waiting(s) && (events & (TERN_READABLE | TERN_HANGUP | TERN_ERROR)))
        read_once(s);
}

/* ------------------------------------------------------------------ */
/* Delivering what a stream owes, and closing                          */
/* ------------------------------------------------------------------ */

static bool owes(const struct tern__stream *s)
{
    return s->connect_due || s->read_due || s->done != NULL || (s->shut_due && !s->send_on) ||
           s->drain_due || s->backoff_due || tern__listener_waiting(s) ||
           ((s->state & (TERN__S_READING | TERN__S_CLOSING)) == TERN__S_READING &&
            tern__stream_recv_waiting(s));
}

/*
 * Step 2. Order: what the watcher reported (reads, accepts, a connect's
 * outcome, a flush of the write queue), then the owed callbacks: connect,
 * a read failure, writes (in queue order), then —
 * once no write completion is left — shutdown, drain, the listener's
 * back-off notice, and finally, once closed and owing nothing else, the
 * close callback, after which the record goes.
 *
 * A callback may owe more: a write callback that writes again, when the
 * kernel takes the bytes at once, completes another request here. So one
 * dispatch delivers at most DISPATCH_BUDGET write completions; the rest
 * wait for the next turn (the stream is queued again), and a producer that
 * writes from its own completions cannot starve the other streams.
 */
#define DISPATCH_BUDGET 256

static void stream_dispatch(tern_loop *loop, struct tern__op *op)
{
    struct tern__stream *s = (struct tern__stream *)op;
    tern_id id = op->id;
    /* A report made before the interest narrowed counts only for what is
     * still asked (hang-ups and errors always count). */
    unsigned ev = s->io_revents & (s->io.events | TERN_HANGUP | TERN_ERROR);
    s->io_revents = 0;
    if (ev != 0)
        stream_io(s, ev);
    if (tern__listener_waiting(s))
        tern__listener_deliver(s);
    if (tern__stream_recv_waiting(s))
        recv_deliver(s);
    if (s->connect_due) {
        s->connect_due = false;
        if (s->connect_status < 0 && !(s->state & TERN__S_CLOSING)) {
            /* A failed connect closes the stream: its id is stale in the
             * callback, and its queued writes are cancelled. */
            s->state &= ~TERN__S_CONNECTING;
            stream_close(s);
        }
        s->connect_cb(loop, id, s->connect_status, s->connect_arg);
    }
    if (s->read_due) {
        s->read_due = false;
        s->read_cb(loop, id, s->read_status, NULL, 0, s->read_arg);
    }
    tern__write_deliver(s, DISPATCH_BUDGET);
    if (s->done == NULL) {
        /* With a send in the kernel (a close cancelled it), the writes are
         * yet to complete: the shutdown's cancel comes after them. */
        if (s->shut_due && !s->send_on) {
            s->shut_due = false;
            s->shut_cb(loop, id, s->shut_status, s->shut_arg);
        }
        if (s->drain_due) {
            s->drain_due = false;
            if (s->drain_cb != NULL && !(s->state & TERN__S_CLOSING))
                s->drain_cb(loop, id, s->drain_arg);
        }
        if (s->backoff_due) {
            s->backoff_due = false; /* never owed to a closing listener: close clears it */
            s->accept_cb(loop, id, s->backoff_status, 0, s->accept_arg);
        }
    }
    if (owes(s)) {
        tern__stream_owe(s); /* the rest in the next turn (a no-op if queued already) */
        return;
    }
    if ((s->state & (TERN__S_CLOSING | TERN__S_CLOSE_RAN)) == TERN__S_CLOSING && !s->send_on) {
        s->state |= TERN__S_CLOSE_RAN;
        if (s->close_cb != NULL)
            s->close_cb(loop, id, s->close_arg);
        tern__stream_maybe_finish(s);
    }
}

/* Step 4: a completion of the backend's: a send's, a receive's, or a listener's accept. */
static void stream_completed(tern_loop *loop, struct tern__op *op, const struct tern__done *d)
{
    struct tern__stream *s = (struct tern__stream *)op;
    if (d->sent)
        tern__write_sent(s, d);
    else if (s->kind == TERN__LISTENER)
        tern__listener_completed(s, d);
    else
        tern__stream_recv_completed(loop, op, d);
}

/* Close: the shared body of tern_stream_close and the cancel hook. */
static int stream_close(struct tern__stream *s)
{
    if (s->state & TERN__S_CLOSING)
        return -ENOENT;
    s->state = (s->state & ~TERN__S_READING) | TERN__S_CLOSING;
    tern__stream_watch(s, 0);
    (void)tern__stream_recv_sync(s); /* cancelled before its descriptor closes */
    (void)tern__listener_sync(s);    /* likewise; what it accepted closes below */
    tern__stream_recv_drop(s);
    tern__stream_stop_aux(s);
    tern__tty_restore(s);
    tern__unix_close_fds(s);
    if (s->send_on) /* its completion comes, then the queue fails (write.c) */
        s->loop->backend.ops->send_cancel(&s->loop->backend, s->fd, s->op.id);
    if (s->fd >= 0) {
        close(s->fd);
        s->fd = -1;
    }
    if (s->state & TERN__S_CONNECTING) {
        s->state &= ~TERN__S_CONNECTING;
        if (!s->connect_due) { /* a failure already owed keeps its own status */
            s->connect_due = true;
            s->connect_status = -ECANCELED;
        }
    }
    tern__write_fail(s, -ECANCELED);
    if ((s->state & (TERN__S_SHUT_ASKED | TERN__S_SHUT_DONE)) == TERN__S_SHUT_ASKED) {
        s->state |= TERN__S_SHUT_DONE;
        s->shut_due = true;
        s->shut_status = -ECANCELED;
    }
    s->backoff_due = false;
    s->read_due = false;
    /* The close callback is owed: keep run() turning until it is delivered. */
    tern__op_set_ref(s->loop, &s->op, true);
    tern__stream_owe(s);
    return 0;
}

static int stream_cancel(tern_loop *loop, struct tern__op *op)
{
    (void)loop;
    return stream_close((struct tern__stream *)op);
}

static void stream_free(tern_loop *loop, struct tern__op *op)
{
    (void)loop;
    struct tern__stream *s = (struct tern__stream *)op;
    TERN_INSIST(s->fd < 0 && !tern__io_active(&s->io) && s->lookup == NULL &&
                !tern__deadline_armed(&s->deadline) && !s->recv_on && !s->send_on &&
                s->land_head == TERN__LANDED_NONE);
    /* Closing failed every queued write and its dispatch delivered them
     * all before the close callback: nothing is left to free. */
    TERN_INSIST(s->wq == NULL && s->done == NULL);
    tern__stream_free_addrs(s);
    tern__unix_close_fds(s);
    tern__free(s->rfds);
    tern__free(s->send_area);
    tern__free(s->tty_saved);
    tern__free(s);
}

/* ------------------------------------------------------------------ */
/* The public stream calls                                             */
/* ------------------------------------------------------------------ */

/*
 * What a descriptor can be as a stream: 0 for a stream socket, 1 for a
 * pipe, FIFO or character device, or a negative errno. A regular file is
 * always readable and writable, so no readiness backend can wait on it
 * (epoll refuses it): it is a file request's job.
 */
static int stream_fd_kind(int fd)
{
    struct stat st;
    int rc = tern__stream_fault();
    if (rc == 0 && fstat(fd, &st) < 0)
        rc = -errno;
    if (rc < 0)
        return rc;
    if (S_ISSOCK(st.st_mode)) {
        int type;
        socklen_t len = sizeof(type);
        if ((rc = tern__stream_fault()) == 0 &&
            getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0)
            rc = -errno;
        if (rc < 0)
            return rc;
        return type == SOCK_STREAM ? 0 : -EINVAL;
    }
    if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))
        return 1;
    return -EPERM;
}

int tern_stream_open(tern_loop *loop, tern_os_fd_t fd, tern_id *idp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (fd < 0)
        return -EBADF;
    int kind = stream_fd_kind(fd);
    if (kind < 0)
        return kind;
    /* A refused open must leave the caller's fd as it was: note its flags. */
    int rc = tern__stream_fault();
    if (rc < 0)
        return rc;
    int fl = fcntl(fd, F_GETFL), fdfl = fcntl(fd, F_GETFD);
    if (fl < 0 || fdfl < 0)
        return -errno;
    if ((rc = tern__stream_fault()) == 0)
        rc = kind == 0 ? socket_prepare(fd) : tern__fd_nonblock_cloexec(fd);
    struct tern__stream *s;
    if (rc == 0 && (rc = tern__stream_new(loop, TERN__STREAM, fd, &s)) == 0) {
        s->not_socket = kind == 1;
        if (kind == 0) {
            struct sockaddr_storage ss;
            socklen_t sl = sizeof(ss);
            s->unix_sock =
                getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 && ss.ss_family == AF_UNIX;
        }
        if (idp != NULL)
            *idp = s->op.id;
        return 0;
    }
    (void)fcntl(fd, F_SETFL, fl);
    (void)fcntl(fd, F_SETFD, fdfl);
    return rc;
}

static int read_start(tern_loop *loop, tern_id id, tern_alloc_cb alloc_cb, tern_read_cb cb,
                      void *arg)
{
    struct tern__stream *s = tern__stream_get(loop, id);
    if (s == NULL)
        return -ENOENT;
    if (cb == NULL || s->kind != TERN__STREAM)
        return -EINVAL;
    if (s->state & TERN__S_CONNECTING)
        return -ENOTCONN;
    if (s->state & TERN__S_READ_DONE)
        return -EPIPE;
    unsigned old = s->state;
    tern_alloc_cb old_alloc = s->alloc_cb;
    s->state |= TERN__S_READING;
    s->alloc_cb = alloc_cb; /* whether the backend's receive may read for it */
    int rc = tern__stream_recv_sync(s);
    if (rc == 0)
        rc = tern__stream_watch(s, tern__stream_wanted(s));
    if (rc < 0) {
        s->state = old;
        s->alloc_cb = old_alloc;
        (void)tern__stream_recv_sync(s);
        return rc;
    }
    s->read_cb = cb;
    s->read_arg = arg;
    if (tern__stream_recv_waiting(s))
        tern__stream_owe(s); /* what came before a stop goes first */
    return 0;
}

int tern_stream_read_start(tern_loop *loop, tern_id id, tern_read_cb cb, void *arg)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    return read_start(loop, id, NULL, cb, arg);
}

int tern_stream_read_start_alloc(tern_loop *loop, tern_id id, tern_alloc_cb alloc_cb,
                                 tern_read_cb cb, void *arg)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (alloc_cb == NULL)
        return -EINVAL;
    return read_start(loop, id, alloc_cb, cb, arg);
}

int tern_stream_read_stop(tern_loop *loop, tern_id id)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    struct tern__stream *s = tern__stream_get(loop, id);
    if (s == NULL)
        return -ENOENT;
    if (s->kind != TERN__STREAM)
        return -EINVAL;
    s->state &= ~TERN__S_READING;
    (void)tern__stream_recv_sync(s); /* the kernel stops taking bytes off the socket now */
    tern__stream_rewatch(s);
    return 0;
}

int tern_stream_shutdown(tern_loop *loop, tern_id id, tern_stream_cb cb, void *arg)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    struct tern__stream *s = tern__stream_get(loop, id);
    if (s == NULL)
        return -ENOENT;
    if (cb == NULL || s->kind != TERN__STREAM)
        return -EINVAL;
    if (s->state & TERN__S_SHUT_ASKED)
        return -EALREADY;
    if (s->state & TERN__S_CONNECTING)
        return -ENOTCONN;
    s->state |= TERN__S_SHUT_ASKED;
    s->shut_cb = cb;
    s->shut_arg = arg;
    tern__write_maybe_shutdown(s);
    return 0;
}

int tern_stream_on_close(tern_loop *loop, tern_id id, tern_close_cb cb, void *arg)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    struct tern__stream *s = tern__stream_get(loop, id);
    if (s == NULL)
        return -ENOENT;
    s->close_cb = cb;
    s->close_arg = arg;
    return 0;
}

int tern_stream_close(tern_loop *loop, tern_id id)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    struct tern__stream *s = tern__stream_get(loop, id);
    return s == NULL ? -ENOENT : stream_close(s);
}

int tern_stream_fd(tern_loop *loop, tern_id id)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    struct tern__stream *s = tern__stream_get(loop, id);
    if (s == NULL)
        return -ENOENT;
    return s->fd < 0 ? -ENOTCONN : s->fd;
}
