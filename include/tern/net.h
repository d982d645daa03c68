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
typedef void (*tern_read_cb)(tern_loop *loop, tern_id stream, int status, const void *data,
                             size_t len, void *arg);

/*
 * A listener's news. status 0: a new connection, already a stream with id
 * `stream` that the callback now owns (close it, or start reading it).
 * status < 0 (stream 0), typically -EMFILE, -ENFILE, -ENOBUFS or -ENOMEM,
 * or -EAGAIN at the loop's max_operations: accepting failed for want of a
 * resource; the listener pauses for TERN_TCP_ACCEPT_BACKOFF_NS and then
 * resumes by itself (it is told once per pause). Nothing to do but note it.
 */
typedef void (*tern_accept_cb)(tern_loop *loop, tern_id listener, int status, tern_id stream,
                               void *arg);

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
 * tern_tcp_listen_name: tern_tcp_listen on a host name: look host up
 * (tern_resolve, on the pool, AI_PASSIVE), bind the first address that
 * takes it in the lookup's order (one socket: a name with several
 * addresses listens on one of them), and listen; then ready_cb(loop, id,
 * status, arg) once, in step 2 (never inside this call). status 0: the
 * listener is listening (tern_tcp_port gives its port) and accept_cb runs
 * as tern_tcp_listen's does. Otherwise the listener is closed by the time
 * ready_cb runs (its id is stale there): -ETIMEDOUT when timeout_ns
 * passed before the lookup answered (0: no timeout), a TERN_EAI_* code
 * from the lookup, the bind or listen error of the last address tried
 * (-EADDRINUSE, -EADDRNOTAVAIL, ...), -ECANCELED when closed first. A
 * numeric host skips the lookup.
 * Requires: loop != NULL; host != NULL; port, backlog and flags as
 *           tern_tcp_listen.
 * Returns: 0 and *idp (the listener's id, valid from now on; tern_tcp_port
 *          is -ENOTCONN until ready_cb); -EINVAL for a NULL callback or
 *          host, a bad port, backlog or flags, or a timeout over 2^62 ns;
 *          -EAGAIN, -ENOMEM, -ESHUTDOWN as tern_resolve. On error no
 *          callback runs.
 * Ownership: host is copied. The listener is the loop's until
 *          tern_stream_close() (which, during the lookup, cancels it).
 * Threads: loop-only.
 */
TERN_EXTERN int tern_tcp_listen_name(tern_loop *loop, const char *host, unsigned port, int backlog,
                                     unsigned flags, uint64_t timeout_ns, tern_stream_cb ready_cb,
                                     tern_accept_cb accept_cb, void *arg, tern_id *idp);

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
                                 uint64_t timeout_ns, tern_stream_cb cb, void *arg, tern_id *idp);

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
 * socketpair), a pipe, a FIFO or a TTY (any character device) as a
 * stream. It is made non-blocking and, where the system has SO_NOSIGPIPE,
 * a socket is set not to raise SIGPIPE (elsewhere tern writes sockets
 * with MSG_NOSIGNAL; for pipes see "Pipes, FIFOs and TTYs" below).
 * A character device epoll cannot wait on (/dev/null) counts as always
 * ready, as poll reports it: reading /dev/null gives end of stream.
 * Requires: loop != NULL; fd is a connected stream socket, a pipe or FIFO
 *           end, or a character device.
 * Returns: 0 and *idp; -EBADF for a negative or closed fd; -EINVAL for a
 *          socket that is not a stream socket; -EPERM for a regular file,
 *          a directory or a block device: they are always "ready", so a
 *          loop cannot wait on them — read and write them with file
 *          requests (tern_fs_*, include/tern/fs.h); -EAGAIN at max_operations;
 *          -ENOMEM; -ESHUTDOWN while the loop is being freed. On error the
 *          fd stays the caller's.
 * Ownership: on success the stream owns fd and closes it when it closes.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_stream_open(tern_loop *loop, tern_os_fd_t fd, tern_id *idp);

/*
 * tern_stream_read_start: call cb with data as it arrives, one read per
 * turn in which the socket is readable (so one busy stream cannot starve
 * others). Replaces the callback of an earlier read_start.
 * Requires: loop != NULL.
 * Returns: 0; -EINVAL for a NULL cb or a listener; -ENOENT for an unknown
 *          or stale id; -ENOTCONN while connecting; -EPIPE once the stream
 *          has reached end of stream or failed; -ENOMEM, or -EBUSY from a
 *          full io_uring queue, when the backend cannot start reading (the
 *          stream is then as it was).
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
TERN_EXTERN int tern_stream_write(tern_loop *loop, tern_id id, const tern_buf *bufs, unsigned nbufs,
                                  tern_stream_cb cb, void *arg);

/*
 * tern_stream_try_write: write what the kernel takes now, without
 * queueing and without a callback (libuv's uv_try_write): the buffers are
 * written in order, as far as the socket buffer has room.
 * Requires: loop != NULL; bufs != NULL; 1 <= nbufs <= 1024.
 * Returns: the bytes written (> 0, or 0 when every buffer is empty; at
 *          most INT_MAX, and at most 128 non-empty buffers are tried);
 *          -EAGAIN when the kernel took nothing or
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

#if defined(_WIN32) && !defined(SIGHUP)
/* Windows' signal.h names no SIGHUP; tern watches a console's close as it
 * (see tern_signal_start), with POSIX's number. */
#define SIGHUP 1
#endif

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
 * in the calling thread instead, both restored by stop. For a
 * TERN_LOOP_RCU loop it also has liburcu's default call_rcu helper
 * created (if it does not exist yet) with every signal blocked. Other
 * threads of the application must block the signal too, or the kernel
 * may deliver it to them instead.
 * Several watchers of one signal, on one loop or several, each get one
 * callback per delivery, each on its own loop (one watcher reads the
 * signal and hands it to the others); starting a watcher on another loop
 * blocks the signal in that loop's thread too. Stopping one leaves the
 * others; the signal is handed back (mask, action) when the last stops.
 * A kqueue loop's registration cannot move to another loop, so when the
 * reading watcher stops and only other loops' watchers remain, an
 * instance sent meanwhile may be lost there.
 * Windows has no signals to watch but the console's control events, and
 * only they are watched: SIGINT for Ctrl-C, SIGBREAK (21, <signal.h>) for
 * Ctrl-Break, SIGHUP (1, defined above) for the console's close; every
 * other number is refused with -EINVAL. The system reports them on a
 * thread of its own, which posts to each watching loop (the callback
 * still runs in step 2 on the loop's thread, once per event per watcher);
 * while some watcher of the event's signal took it, the process is not
 * ended (Ctrl-C, Ctrl-Break). A close ends the process anyway about 5 s
 * later (the system's timeout): the callbacks have that long. With no
 * watcher left the system's default action (ending the process) is back.
 * Nothing is blocked or unblocked on Windows, and there is no -EMFILE.
 * The watcher keeps tern_loop_run() alive unless tern_unref()'d.
 * Requires: loop != NULL.
 * Returns: 0 and *idp; -EINVAL for a NULL cb or a signal that cannot be
 *          caught (SIGKILL, SIGSTOP, out of range; on Windows, any but
 *          SIGINT, SIGBREAK and SIGHUP); -EMFILE and other
 *          descriptor errors (first watcher of a signal); -EAGAIN at
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

/* ------------------------------------------------------------------ */
/* Reading into the caller's memory                                    */
/* ------------------------------------------------------------------ */

/*
 * Asked for the memory the next read lands in: return it and set *len to
 * its size (*len comes in as the size tern would read, 65536). Returning
 * NULL or setting *len to 0 makes that read report -ENOBUFS to the read
 * callback instead; reading goes on. The memory stays the caller's: the
 * read callback that follows gets a pointer into it (or, if the callback
 * stopped or closed the stream, no read happens and the memory is unused).
 */
typedef void *(*tern_alloc_cb)(tern_loop *loop, tern_id stream, size_t *len, void *arg);

/*
 * tern_stream_read_start_alloc: as tern_stream_read_start, but each read
 * lands in memory alloc_cb supplies, so a parser reads in place, with no
 * copy; the data passed to cb is valid as long as the caller keeps that
 * memory. alloc_cb runs in step 2 just before each read, with the same arg
 * as cb. tern_stream_read_start goes back to tern's own buffer.
 * Requires: loop != NULL.
 * Returns: as tern_stream_read_start; -EINVAL also for a NULL alloc_cb.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_stream_read_start_alloc(tern_loop *loop, tern_id id, tern_alloc_cb alloc_cb,
                                             tern_read_cb cb, void *arg);

/* ------------------------------------------------------------------ */
/* Unix-domain sockets                                                 */
/* ------------------------------------------------------------------ */

/* Descriptors one write may pass, and one read may receive. */
#define TERN_UNIX_FDS_MAX 64

/*
 * A Unix-domain socket is named by a filesystem path, or (Linux) by an
 * abstract name written with a leading '@' ("@tern-ctl": the kernel's
 * name is a NUL byte followed by "tern-ctl"; nothing is created on disk).
 */

/*
 * tern_unix_listen: bind a Unix-domain stream socket to path, listen, and
 * call cb for every accepted connection (as tern_tcp_listen, back-off
 * included). The socket file is not removed first, nor when the listener
 * closes: that is the caller's (unlink it before, or get -EADDRINUSE).
 * Requires: loop != NULL; path != NULL and not empty; backlog >= 0 or
 *           TERN_TCP_BACKLOG_DEFAULT.
 * Returns: 0 and *idp; -EINVAL for a NULL cb or path, an empty one or a
 *          bad backlog; -ENAMETOOLONG when path does not fit sun_path
 *          (nothing is created); -EAFNOSUPPORT for an abstract name where
 *          the system has none; -EADDRINUSE, -EACCES, -ENOENT and other
 *          bind errors; -EMFILE; -EAGAIN at max_operations; -ENOMEM;
 *          -ESHUTDOWN while the loop is being freed. On error nothing is
 *          left open (a socket file bind created is removed again).
 * Threads: loop-only.
 */
TERN_EXTERN int tern_unix_listen(tern_loop *loop, const char *path, int backlog, tern_accept_cb cb,
                                 void *arg, tern_id *idp);

/*
 * tern_unix_connect: connect a stream to the socket at path; then cb(loop,
 * id, status, arg) once, in step 2 (never inside this call). status 0: the
 * stream is connected. Otherwise (-ENOENT: nothing at path; -ECONNREFUSED:
 * nobody listens; -EAGAIN: the listener's backlog is full; -EACCES) the
 * stream is closed by the time cb runs, exactly as for tern_tcp_connect.
 * Writes may be queued before cb runs.
 * Requires: loop != NULL; path != NULL and not empty.
 * Returns: 0 and *idp; -EINVAL for a NULL cb or path or an empty one;
 *          -ENAMETOOLONG when path does not fit sun_path; -EAFNOSUPPORT
 *          as tern_unix_listen; -EMFILE; -EAGAIN at max_operations;
 *          -ENOMEM; -ESHUTDOWN. On error cb never runs.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_unix_connect(tern_loop *loop, const char *path, tern_stream_cb cb, void *arg,
                                  tern_id *idp);

typedef struct tern_unix_cred {
    long pid; /* -1 where the system does not say (the BSDs) */
    unsigned long uid;
    unsigned long gid;
} tern_unix_cred;

/*
 * tern_unix_peer_cred: the credentials of the process at the other end of
 * a Unix-domain stream, as the kernel recorded them when it connected.
 * Requires: loop != NULL; out != NULL.
 * Returns: 0 and *out; -ENOENT for an unknown or stale id; -ENOTCONN while
 *          connecting; -ENOTSOCK (or the kernel's error) for a stream that
 *          is not a Unix-domain socket.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_unix_peer_cred(tern_loop *loop, tern_id id, tern_unix_cred *out);

/*
 * tern_unix_write_fds: tern_stream_write that also passes descriptors
 * (SCM_RIGHTS): the peer receives them with the first byte of this write.
 * tern duplicates fds before returning, so the caller may close its own
 * at once; the duplicates are closed once sent, or when the write fails
 * or is cancelled (each exactly once). Completion, ordering and the
 * high-water mark are tern_stream_write's.
 * Requires: loop != NULL; bufs, nbufs and cb as tern_stream_write, with at
 *           least one byte in all; fds != NULL; 1 <= nfds <=
 *           TERN_UNIX_FDS_MAX.
 * Returns: 0 or 1 as tern_stream_write; -EINVAL for bad arguments or a
 *          stream that is not a Unix-domain socket; -EBADF for a closed
 *          fd in fds; -EMFILE; and tern_stream_write's errors. On error cb
 *          never runs and no duplicate is left open.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_unix_write_fds(tern_loop *loop, tern_id id, const tern_buf *bufs,
                                    unsigned nbufs, const int *fds, unsigned nfds,
                                    tern_stream_cb cb, void *arg);

/*
 * tern_unix_take_fd: the next descriptor the peer passed, in the order
 * they arrived. Descriptors come with data: call it from the read callback
 * that delivered the bytes they came with (or later). They are
 * close-on-exec. Those never taken are closed when the stream closes.
 * Requires: loop != NULL.
 * Returns: the fd (>= 0), now the caller's; -EAGAIN when none is waiting;
 *          -ENOENT for an unknown or stale id.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_unix_take_fd(tern_loop *loop, tern_id id);

/* ------------------------------------------------------------------ */
/* Pipes, FIFOs and TTYs                                               */
/* ------------------------------------------------------------------ */

/*
 * tern_stream_open takes these too: an end of a pipe, a FIFO opened for
 * reading or writing, a TTY or other character device. Every stream call
 * works on them, but tern_stream_shutdown, which completes with -ENOTSOCK
 * (close a pipe's stream to give its reader end of stream). Writing to
 * a pipe whose reader has gone raises SIGPIPE unless the process ignores it
 * (the kernel gives no way to say otherwise per write on a pipe);
 * ignore it (signal(SIGPIPE, SIG_IGN)) and the write completes with -EPIPE.
 */

enum { TERN_TTY_NORMAL = 0, TERN_TTY_RAW = 1 };

/*
 * tern_tty_set_mode: TERN_TTY_RAW: bytes as typed, no echo, no line
 * editing, no signals from ^C; TERN_TTY_NORMAL: back to the mode the TTY
 * had before the first tern_tty_set_mode. Closing the stream (or freeing
 * the loop) puts the TTY back too.
 * Requires: loop != NULL.
 * Returns: 0; -EINVAL for an unknown mode; -ENOENT for an unknown or stale
 *          id; -ENOTTY when the stream is not a TTY (nothing changes);
 *          -ENOMEM.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_tty_set_mode(tern_loop *loop, tern_id id, int mode);

/*
 * tern_tty_winsize: the terminal's size in columns and rows.
 * Requires: loop != NULL; cols != NULL; rows != NULL.
 * Returns: 0, *cols and *rows; -ENOENT for an unknown or stale id;
 *          -ENOTTY when the stream is not a TTY.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_tty_winsize(tern_loop *loop, tern_id id, unsigned *cols, unsigned *rows);

#endif /* TERN_NET_H */
