/*
 * tern/net.h — streams, TCP and signals. Included by tern.h; do not
 * include it on its own.
 *
 * A stream is an operation like a timer or a job: it is named by a tern_id
 * (never 0, never reused), a stale id is -ENOENT, and tern_cancel(loop, id)
 * closes it exactly as tern_stream_close() does. Listeners are streams that
 * accept instead of read; tern_stream_close() closes them too.
 *
 * Every call here is loop-only and returns 0 (or, for tern_stream_write, a
 * positive hint) or a negative errno. Every callback runs on the loop's
 * thread in step 2 of a turn; none ever runs inside the call that caused it.
 *
 * The life of a stream ends with its close callback (tern_stream_on_close),
 * which runs exactly once, after every other callback the stream owes:
 * pending writes and a pending shutdown or connect complete with
 * -ECANCELED first. tern_loop_free() closes every live stream and listener
 * and runs those callbacks during its drain.
 *
 * The narrative lives in docs/net.md.
 */
#ifndef TERN_NET_H
#define TERN_NET_H

#ifndef TERN_H
#error "include <tern.h>, not <tern/net.h>"
#endif

/* A buffer to write: the memory stays the caller's (see tern_stream_write). */
typedef struct tern_buf {
    const void *base;
    size_t len;
} tern_buf;

/* Completion of a connect, a write or a shutdown: status 0 or a negative errno. */
typedef void (*tern_stream_cb)(tern_loop *loop, tern_id stream, int status, void *arg);

/* The last callback a stream or listener receives. */
typedef void (*tern_close_cb)(tern_loop *loop, tern_id stream, void *arg);

/*
 * Data read from a stream. status 0 and len > 0: data, valid only until the
 * callback returns (it lives in a buffer the loop thread reuses). status 0
 * and len 0: end of stream (the peer shut its side down); reading stops.
 * status < 0 (-ECONNRESET, -ETIMEDOUT, ...): the connection failed; reading
 * stops, and the stream stays open until closed. data is NULL unless len > 0.
 */
typedef void (*tern_read_cb)(tern_loop *loop, tern_id stream, int status,
                             const void *data, size_t len, void *arg);

/*
 * A listener's news. status 0: a new connection, already a stream with id
 * `stream` that the callback now owns (close it, or start reading it).
 * status < 0 (stream 0), typically -EMFILE, -ENFILE, -ENOBUFS or -ENOMEM,
 * or -EAGAIN at the loop's max_operations: accepting failed for want of a
 * resource; the listener pauses for TERN_TCP_ACCEPT_BACKOFF_NS and then
 * resumes by itself (it is told once per pause). Nothing to do but note it.
 */
typedef void (*tern_accept_cb)(tern_loop *loop, tern_id listener, int status,
                               tern_id stream, void *arg);

/* A high-water queue drained back below its low-water mark. */
typedef void (*tern_drain_cb)(tern_loop *loop, tern_id stream, void *arg);

/* ------------------------------------------------------------------ */
/* TCP                                                                 */
/* ------------------------------------------------------------------ */

enum {
    /* Set SO_REUSEPORT (Linux, BSD): several listeners share one port. */
    TERN_TCP_REUSEPORT = 1u << 0,
};

#define TERN_TCP_BACKLOG_DEFAULT (-1) /* SOMAXCONN */

/* Back-off after an accept ran out of descriptors or memory. */
#define TERN_TCP_ACCEPT_BACKOFF_NS 100000000ull /* 100 ms */

/*
 * tern_tcp_listen: bind a TCP socket to host:port (SO_REUSEADDR always,
 * SO_REUSEPORT with TERN_TCP_REUSEPORT), listen, and call cb for every
 * accepted connection. Accepted sockets are non-blocking and never raise
 * SIGPIPE. When accept() runs out of descriptors (EMFILE, ENFILE) or memory
 * the listener logs one line to stderr the first time, tells cb, pauses for
 * TERN_TCP_ACCEPT_BACKOFF_NS and goes on serving.
 * Requires: loop != NULL; host is a numeric IPv4 or IPv6 address,
 *           "localhost" (127.0.0.1), or NULL (every IPv4 interface) — no
 *           name lookup happens here; port 0..65535 (0: the kernel picks,
 *           see tern_tcp_port); backlog >= 0 or TERN_TCP_BACKLOG_DEFAULT.
 * Returns: 0 and *idp; -EINVAL for a NULL cb, a bad host, port, backlog or
 *          unknown flags; -EADDRINUSE, -EACCES, -EMFILE and other socket
 *          errors; -EAGAIN at max_operations; -ENOMEM; -ESHUTDOWN while the
 *          loop is being freed. On error nothing is left open.
 * Ownership: the listener is the loop's until tern_stream_close().
 * Threads: loop-only.
 */
TERN_EXTERN int tern_tcp_listen(tern_loop *loop, const char *host, unsigned port, int backlog,
                                unsigned flags, tern_accept_cb cb, void *arg, tern_id *idp);

/*
 * tern_tcp_connect: resolve host (tern_resolve, on the pool) and connect to
 * the first address that accepts, trying them in order; then cb(loop, id,
 * status, arg) once, in step 2 (never inside this call, even when the
 * connect fails at once). status 0: the stream is connected. Otherwise the
 * stream is closed by the time cb runs (its id is stale in cb; queued
 * writes complete with -ECANCELED and a close callback set with
 * tern_stream_on_close runs after cb): -ETIMEDOUT when timeout_ns passed
 * first (one deadline covering both the lookup and the connect; 0 means no
 * timeout), -ECONNREFUSED and other connect errors (of the last address
 * tried), a TERN_EAI_* code from the lookup, -ECANCELED when closed first.
 * Writes may be queued before the connect completes; they go out once it
 * does (or complete with -ECANCELED if it fails).
 * Requires: loop != NULL; host != NULL; port 1..65535.
 * Returns: 0 and *idp (the stream's id, valid from now on); -EINVAL for a
 *          NULL cb or host, a bad port, or a timeout over 2^62 ns; -EAGAIN,
 *          -ENOMEM, -ESHUTDOWN as tern_resolve. On error cb never runs.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_tcp_connect(tern_loop *loop, const char *host, unsigned port,
                                 uint64_t timeout_ns, tern_stream_cb cb, void *arg,
                                 tern_id *idp);

/*
 * tern_tcp_port: the local port a listener or TCP stream is bound to.
 * Requires: loop != NULL; portp != NULL.
 * Returns: 0 and *portp; -ENOENT for an unknown or stale id or one that is
 *          not a stream; -ENOTCONN while a connect is still resolving;
 *          -EAFNOSUPPORT for a socket that is not IPv4 or IPv6.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_tcp_port(tern_loop *loop, tern_id id, unsigned *portp);

/* The longest keep-alive idle time or interval tern_tcp_keepalive takes. */
#define TERN_TCP_KEEPALIVE_MAX_S 32767u

/*
 * tern_tcp_nodelay: turn Nagle's algorithm off (on == true: TCP_NODELAY,
 * small writes leave at once) or back on.
 * Requires: loop != NULL.
 * Returns: 0; -ENOENT for an unknown or stale id; -EINVAL for a listener;
 *          -ENOTCONN while connecting; the setsockopt errors (-EOPNOTSUPP
 *          for a stream that is not TCP).
 * Threads: loop-only.
 */
TERN_EXTERN int tern_tcp_nodelay(tern_loop *loop, tern_id id, bool on);

/*
 * tern_tcp_keepalive: turn TCP keep-alive on, probing after idle_s
 * seconds without traffic and every interval_s seconds after that, or
 * off (on == false; the timings are then ignored).
 * Requires: loop != NULL; when on, 1 <= idle_s, interval_s <=
 *           TERN_TCP_KEEPALIVE_MAX_S.
 * Returns: 0; -EINVAL for a timing out of range or a listener (nothing
 *          changed); -ENOENT for an unknown or stale id; -ENOTCONN while
 *          connecting; -ENOTSUP where the system cannot set the timings;
 *          the setsockopt errors (-EOPNOTSUPP for a stream that is not
 *          TCP).
 * Threads: loop-only.
 */
TERN_EXTERN int tern_tcp_keepalive(tern_loop *loop, tern_id id, bool on, unsigned idle_s,
                                   unsigned interval_s);

/* ------------------------------------------------------------------ */
/* Streams                                                             */
/* ------------------------------------------------------------------ */

/*
 * tern_stream_open: adopt a connected stream socket (TCP, or an AF_UNIX
 * socketpair) as a stream. It is made non-blocking and, where the system
 * has SO_NOSIGPIPE, set not to raise SIGPIPE (elsewhere tern writes with
 * MSG_NOSIGNAL).
 * Requires: loop != NULL; fd is a connected stream socket.
 * Returns: 0 and *idp; -EBADF for a negative or closed fd; -ENOTSOCK for a
 *          descriptor that is not a socket; -EINVAL for a socket that is
 *          not SOCK_STREAM; -EAGAIN at max_operations;
 *          -ENOMEM; -ESHUTDOWN while the loop is being freed. On error the
 *          fd stays the caller's.
 * Ownership: on success the stream owns fd and closes it when it closes.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_stream_open(tern_loop *loop, int fd, tern_id *idp);

/*
 * tern_stream_read_start: call cb with data as it arrives, one read per
 * turn in which the socket is readable (so one busy stream cannot starve
 * others). Replaces the callback of an earlier read_start.
 * Requires: loop != NULL.
 * Returns: 0; -EINVAL for a NULL cb or a listener; -ENOENT for an unknown
 *          or stale id; -ENOTCONN while connecting; -EPIPE once the stream
 *          has reached end of stream or failed.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_stream_read_start(tern_loop *loop, tern_id id, tern_read_cb cb, void *arg);

/*
 * tern_stream_read_stop: stop reading; data already received stays in the
 * kernel for a later read_start. Idempotent.
 * Requires: loop != NULL.
 * Returns: 0; -ENOENT for an unknown or stale id; -EINVAL for a listener.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_stream_read_stop(tern_loop *loop, tern_id id);

/*
 * tern_stream_write: queue nbufs buffers to be written in order, after
 * everything queued before; then cb(loop, id, status, arg) once: status 0
 * when all of it reached the kernel, -EPIPE or -ECONNRESET when the peer
 * went away (tern never raises SIGPIPE), -ECANCELED when the stream was
 * closed first. Consecutive queued writes go out together in one writev.
 * Requires: loop != NULL; bufs != NULL; 1 <= nbufs <= 1024; every buffer's
 *           memory stays valid and unchanged until cb runs (tern does not
 *           copy the bytes; it copies the bufs array).
 * Returns: 0 when queued; 1 when queued and the bytes waiting now exceed
 *          the stream's high-water mark — the writer should back off until
 *          the drain callback (tern_stream_set_high_water); -EINVAL for bad
 *          bufs or nbufs, a NULL cb, or a listener; -ENOENT for an unknown
 *          or stale id; -EPIPE after tern_stream_shutdown() or after an
 *          earlier write failed; -ENOMEM. On error cb never runs.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_stream_write(tern_loop *loop, tern_id id, const tern_buf *bufs,
                                  unsigned nbufs, tern_stream_cb cb, void *arg);

/*
 * tern_stream_try_write: write what the kernel takes now, without
 * queueing and without a callback (libuv's uv_try_write): the buffers are
 * written in order, as far as the socket buffer has room.
 * Requires: loop != NULL; bufs != NULL; 1 <= nbufs <= 1024.
 * Returns: the bytes written (> 0, or 0 when every buffer is empty; at
 *          most INT_MAX, and at most 128 non-empty buffers are tried); -EAGAIN when the kernel took nothing or
 *          when writes are queued (they go first: tern_stream_write);
 *          -EINVAL for bad bufs or nbufs or a listener; -ENOENT for an
 *          unknown or stale id; -ENOTCONN while connecting; -EPIPE after
 *          tern_stream_shutdown() or a failed write; -EPIPE, -ECONNRESET
 *          and other errors of the send itself (which, unlike a queued
 *          write's, leave later writes allowed).
 * Ownership: the bytes are copied by the kernel before this returns.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_stream_try_write(tern_loop *loop, tern_id id, const tern_buf *bufs,
                                      unsigned nbufs);

/*
 * tern_stream_set_high_water: set the high-water mark (bytes queued but not
 * yet written; default 1 MiB) and the callback that says the queue drained
 * to half of it or less after a write returned 1. The callback runs once
 * per crossing.
 * Requires: loop != NULL; bytes >= 1; cb may be NULL.
 * Returns: 0; -EINVAL for bytes 0 or a listener; -ENOENT for an unknown or
 *          stale id.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_stream_set_high_water(tern_loop *loop, tern_id id, size_t bytes,
                                           tern_drain_cb cb, void *arg);

/*
 * tern_stream_write_queue_size: bytes queued but not yet written.
 * Requires: loop != NULL; out != NULL.
 * Returns: 0 and *out; -ENOENT for an unknown or stale id.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_stream_write_queue_size(tern_loop *loop, tern_id id, size_t *out);

/*
 * tern_stream_shutdown: once every queued write has completed, shut the
 * write side (the peer reads end of stream), then cb(loop, id, status,
 * arg): 0, a socket error, or -ECANCELED if the stream closed first.
 * Reading goes on. Later writes fail with -EPIPE.
 * Requires: loop != NULL.
 * Returns: 0; -EINVAL for a NULL cb or a listener; -ENOENT for an unknown
 *          or stale id; -EALREADY when a shutdown was already requested;
 *          -ENOTCONN while connecting.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_stream_shutdown(tern_loop *loop, tern_id id, tern_stream_cb cb, void *arg);

/*
 * tern_stream_on_close: set (or replace, or with NULL clear) the callback
 * that runs once when the stream or listener closes for any reason
 * (tern_stream_close, tern_cancel, a failed connect, tern_loop_free).
 * Requires: loop != NULL.
 * Returns: 0; -ENOENT for an unknown or stale id.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_stream_on_close(tern_loop *loop, tern_id id, tern_close_cb cb, void *arg);

/*
 * tern_stream_close: close a stream or listener. Its id is stale when this
 * returns; reading stops at once; in step 2 of a coming turn the pending
 * connect, writes and shutdown complete with -ECANCELED (in that order),
 * then the close callback runs. The descriptor is closed before this
 * returns. Same as tern_cancel(loop, id).
 * Requires: loop != NULL.
 * Returns: 0; -ENOENT for an unknown or stale id (a second close).
 * Threads: loop-only.
 */
TERN_EXTERN int tern_stream_close(tern_loop *loop, tern_id id);

/*
 * tern_stream_fd: the stream's descriptor, for setsockopt and the like.
 * Do not read, write or close it.
 * Requires: loop != NULL.
 * Returns: the fd (>= 0); -ENOENT for an unknown or stale id;
 *          -ENOTCONN while a connect is still resolving.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_stream_fd(tern_loop *loop, tern_id id);

/* ------------------------------------------------------------------ */
/* Signals                                                             */
/* ------------------------------------------------------------------ */

typedef void (*tern_signal_cb)(tern_loop *loop, tern_id id, int signo, void *arg);

/*
 * tern_signal_start: deliver signo through the loop: cb(loop, id, signo,
 * arg) runs in step 2 after the signal arrives (signals that arrive
 * together may be merged into one callback, as the kernel merges them).
 * Linux uses a signalfd, a kqueue loop EVFILT_SIGNAL; either way the signal
 * is blocked in the calling thread (which must be the thread that runs the
 * loop) with pthread_sigmask; every thread tern creates already blocks all
 * signals, so a signal sent to the process (kill) reaches the loop. Where
 * there is neither (and in -Dportable builds) a handler writes to a pipe
 * the loop watches: the previous action is saved and the signal unblocked
 * in the calling thread instead, both restored by stop. For a TERN_LOOP_RCU loop it also has liburcu's
 * default call_rcu helper created (if it does not exist yet) with every
 * signal blocked. Other threads of the application must block the signal
 * too, or the kernel may deliver it to them instead.
 * One watcher per signal in the whole process: a second tern_signal_start
 * for a signal that is already watched (by this or any loop) is -EEXIST.
 * Sharing one kernel signal between two callbacks would make their order
 * and who "consumes" it ambiguous, so tern refuses it; stop the first
 * watcher to hand the signal over.
 * The watcher keeps tern_loop_run() alive unless tern_unref()'d.
 * Requires: loop != NULL.
 * Returns: 0 and *idp; -EINVAL for a NULL cb or a signal that cannot be
 *          caught (SIGKILL, SIGSTOP, out of range); -EEXIST when signo is
 *          already watched; -EMFILE and other descriptor errors; -EAGAIN at
 *          max_operations; -ENOMEM; -ESHUTDOWN while the loop is being
 *          freed.
 * Threads: loop-only, and from the thread that will run the loop.
 */
TERN_EXTERN int tern_signal_start(tern_loop *loop, int signo, tern_signal_cb cb, void *arg,
                                  tern_id *idp);

/*
 * tern_signal_stop: stop watching. Instances already pending are consumed,
 * not delivered; then the signal is unblocked again if tern_signal_start
 * blocked it in this thread (so its default action is back). tern_cancel
 * does the same.
 * Requires: loop != NULL.
 * Returns: 0; -ENOENT for an unknown or stale id or one that is not a
 *          signal watcher.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_signal_stop(tern_loop *loop, tern_id id);

#endif /* TERN_NET_H */
