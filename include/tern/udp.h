/*
 * tern/udp.h — datagram (UDP) sockets. Included by tern.h; do not include
 * it on its own.
 *
 * A UDP socket is an operation like a stream: named by a tern_id (never 0,
 * never reused), a stale id is -ENOENT, and tern_cancel(loop, id) closes
 * it exactly as tern_udp_close() does. A socket exists only bound: there
 * is no unbound UDP socket to send from (bind to port 0 for an ephemeral
 * port).
 *
 * Sends are queued like a stream's writes: each completes once, in step
 * 2, in order; the bytes queued have a high-water mark past which
 * tern_udp_send returns 1 and a drain callback follows. Where the system
 * has recvmmsg and sendmmsg (Linux; not in -Dportable builds) a readiness
 * receives up to TERN_UDP_BATCH datagrams in one system call and queued
 * sends leave in one; elsewhere a loop of recvmsg / sendmsg does the same
 * work one datagram per call.
 *
 * Every call here is loop-only and returns 0 (or, for tern_udp_send, a
 * positive hint) or a negative errno. tern_loop_free() closes every live
 * UDP socket and runs its owed callbacks during its drain.
 *
 * The narrative lives in docs/net.md.
 */
#ifndef TERN_UDP_H
#define TERN_UDP_H

#ifndef TERN_H
#error "include <tern.h>, not <tern/udp.h>"
#endif

/* On Windows the address types come from <winsock2.h>, which the caller
 * includes itself (it pulls in <windows.h>, which this header does not):
 * here they are only named. */
#ifdef _WIN32
struct sockaddr_storage;
#else
#include <sys/socket.h>
#endif

/* Datagrams received (or sent) per system call where batching exists. */
#define TERN_UDP_BATCH 32

/* tern_udp_bind flags. */
enum {
    TERN_UDP_REUSEADDR = 1u << 0, /* SO_REUSEADDR */
    TERN_UDP_REUSEPORT = 1u << 1, /* SO_REUSEPORT: sockets of several loops share a port */
    TERN_UDP_IPV6ONLY = 1u << 2,  /* IPV6_V6ONLY on an IPv6 socket */
};

/* Flags a receive callback is given. */
enum {
    /* The datagram was longer than the receive size: data holds its
     * first len bytes, the rest is lost (MSG_TRUNC). */
    TERN_UDP_TRUNCATED = 1u << 0,
};

/* Settings for tern_udp_set. */
#define TERN_UDP_OPTIONS(X)                                       \
    X(TERN_UDP_BROADCAST, "send to broadcast addresses (0 or 1)") \
    X(TERN_UDP_TTL, "unicast hop limit (1..255)")                 \
    X(TERN_UDP_MULTICAST_TTL, "multicast hop limit (0..255)")     \
    X(TERN_UDP_MULTICAST_LOOP, "multicast sent here is received here (0 or 1)")
enum tern_udp_option {
#define TERN_UDP_OPTION_ENUM(name, what) name,
    TERN_UDP_OPTIONS(TERN_UDP_OPTION_ENUM)
#undef TERN_UDP_OPTION_ENUM
};

/*
 * A datagram, or a receive error. status 0: data[0..len) (valid only until
 * the callback returns) came from `from` (valid as long; len may be 0 for
 * an empty datagram); flags may hold TERN_UDP_TRUNCATED. status < 0 (for
 * instance -ECONNREFUSED on a connected socket whose peer has no
 * listener): data and from are NULL; receiving goes on.
 */
typedef void (*tern_udp_recv_cb)(tern_loop *loop, tern_id sock, int status, const void *data,
                                 size_t len, const struct sockaddr *from, unsigned flags,
                                 void *arg);

/*
 * tern_sockaddr_parse: a numeric IPv4 or IPv6 address and a port as a
 * socket address, for tern_udp_send and tern_udp_connect. No lookup.
 * Requires: host != NULL; out != NULL.
 * Returns: 0 and *out (family AF_INET or AF_INET6); -EINVAL for a host
 *          that is not a numeric address or a port over 65535.
 * Threads: any thread.
 */
TERN_EXTERN int tern_sockaddr_parse(const char *host, unsigned port, struct sockaddr_storage *out);

/*
 * tern_udp_bind: a UDP socket bound to host:port.
 * Requires: loop != NULL; host is a numeric IPv4 or IPv6 address, or NULL
 *           (every IPv4 interface); port 0..65535 (0: the kernel picks, see
 *           tern_udp_port).
 * Returns: 0 and *idp; -EINVAL for a bad host or port or unknown flags;
 *          -ENOTSUP for TERN_UDP_REUSEPORT where the system lacks it;
 *          -EADDRINUSE, -EACCES, -EMFILE and other socket errors; -EAGAIN
 *          at max_operations (checked after host, port and flags, so a bind
 *          that can never succeed is never told to retry); -ENOMEM;
 *          -ESHUTDOWN while the loop is being freed. On error nothing is
 *          left open.
 * Ownership: the socket is the loop's until tern_udp_close().
 * Threads: loop-only.
 */
TERN_EXTERN int tern_udp_bind(tern_loop *loop, const char *host, unsigned port, unsigned flags,
                              tern_id *idp);

/*
 * tern_udp_recv_start: call cb for every datagram received, up to
 * TERN_UDP_BATCH per turn in which the socket is readable. Datagrams
 * longer than max_len arrive cut, flagged TERN_UDP_TRUNCATED. Replaces
 * the callback and size of an earlier recv_start.
 * max_len: 0 (65536) or 1..65536.
 * Requires: loop != NULL.
 * Returns: 0; -EINVAL for a NULL cb or a max_len over 65536; -ENOENT for an
 *          unknown or stale id; -ENOMEM (the receive buffer: max_len times
 *          TERN_UDP_BATCH bytes, touched only where datagrams land). On
 *          error an earlier recv_start stays in force.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_udp_recv_start(tern_loop *loop, tern_id id, size_t max_len,
                                    tern_udp_recv_cb cb, void *arg);

/*
 * tern_udp_recv_stop: stop receiving; datagrams wait in the kernel (and
 * are dropped by it when its buffer fills). Idempotent.
 * Requires: loop != NULL.
 * Returns: 0; -ENOENT for an unknown or stale id.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_udp_recv_stop(tern_loop *loop, tern_id id);

/*
 * tern_udp_send: queue one datagram made of nbufs buffers for `to` (NULL
 * on a connected socket), sent after everything queued before; then, if cb
 * is not NULL, cb(loop, id, status, arg) once: 0 when the kernel took the
 * datagram, -EMSGSIZE, -ENETUNREACH, -ECONNREFUSED and other send errors
 * (this datagram only: later sends go on), -ECANCELED when the socket was
 * closed first.
 * Requires: loop != NULL; bufs != NULL; 1 <= nbufs <= 64; every buffer's
 *           memory stays valid and unchanged until the send completes
 *           (tern copies the bufs array and the address, not the bytes).
 * Returns: 0 when queued; 1 when queued and the bytes queued now exceed
 *          the high-water mark (tern_udp_set_high_water) — back off until
 *          the drain callback; -EINVAL for bad bufs or nbufs, or a `to`
 *          whose family is neither AF_INET nor AF_INET6 or differs from
 *          the socket's; -EDESTADDRREQ for to == NULL on a socket that is
 *          not connected; -EISCONN for to != NULL on a connected one;
 *          -ENOENT for an unknown or stale id; -ENOMEM. On error cb never
 *          runs.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_udp_send(tern_loop *loop, tern_id id, const tern_buf *bufs, unsigned nbufs,
                              const struct sockaddr *to, tern_stream_cb cb, void *arg);

/*
 * tern_udp_set_high_water: set the high-water mark (bytes queued but not
 * yet sent; default 1 MiB) and the callback that says the queue drained
 * to half of it or less after a send returned 1. It runs once per
 * crossing.
 * Requires: loop != NULL; bytes >= 1; cb may be NULL.
 * Returns: 0; -EINVAL for bytes 0; -ENOENT for an unknown or stale id.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_udp_set_high_water(tern_loop *loop, tern_id id, size_t bytes, tern_drain_cb cb,
                                        void *arg);

/*
 * tern_udp_send_queue_size: bytes queued but not yet sent, and how many
 * datagrams hold them.
 * Requires: loop != NULL; bytes != NULL; count may be NULL.
 * Returns: 0 and *bytes (and *count); -ENOENT for an unknown or stale id.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_udp_send_queue_size(tern_loop *loop, tern_id id, size_t *bytes, size_t *count);

/*
 * tern_udp_connect: fix the peer (connected UDP): sends go to it with to ==
 * NULL, only its datagrams are received, and an ICMP refusal reaches the
 * receive callback as -ECONNREFUSED. peer == NULL dissolves the
 * association; the socket stays bound to the address and port it had,
 * including a port the system chose for a bind to port 0.
 * Requires: loop != NULL.
 * Returns: 0; -EINVAL for a peer whose family is not the socket's;
 *          -EALREADY when connecting a connected socket (dissolve first);
 *          -ENOTCONN when dissolving one that is not connected; the
 *          connect errors; -ENOENT for an unknown or stale id. On those
 *          errors nothing changed. -EADDRINUSE when dissolving and another
 *          socket took the system-chosen port in the instant the system
 *          let go of it: the association is dissolved and the socket is
 *          bound to a new port of the same address (tern_udp_port).
 * Threads: loop-only.
 */
TERN_EXTERN int tern_udp_connect(tern_loop *loop, tern_id id, const struct sockaddr *peer);

/*
 * tern_udp_set: one setting (TERN_UDP_OPTIONS), on the socket's family's
 * level (IPv4 or IPv6).
 * Requires: loop != NULL.
 * Returns: 0; -EINVAL for an unknown option or a value out of its range;
 *          -ENOENT for an unknown or stale id; the setsockopt errors.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_udp_set(tern_loop *loop, tern_id id, enum tern_udp_option option, int value);

/*
 * tern_udp_membership: join (join true) or leave the multicast group
 * `group` on the interface `iface`: for IPv4 a numeric interface address,
 * for IPv6 an interface name; NULL lets the system choose.
 * Requires: loop != NULL; group != NULL.
 * Returns: 0; -EINVAL when group is not a numeric multicast address of the
 *          socket's family, or iface is not an address (IPv4) or
 *          interface name (IPv6); -EADDRNOTAVAIL when leaving a group not
 *          joined; the setsockopt errors; -ENOENT for an unknown or stale
 *          id. On error nothing changed.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_udp_membership(tern_loop *loop, tern_id id, const char *group,
                                    const char *iface, bool join);

/*
 * tern_udp_multicast_interface: the interface multicast is sent from
 * (IPv4: a numeric interface address; IPv6: an interface name; NULL: the
 * system's choice).
 * Requires: loop != NULL.
 * Returns: 0; -EINVAL for an iface that is not one; the setsockopt
 *          errors; -ENOENT for an unknown or stale id.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_udp_multicast_interface(tern_loop *loop, tern_id id, const char *iface);

/*
 * tern_udp_port: the local port the socket is bound to.
 * Requires: loop != NULL; portp != NULL.
 * Returns: 0 and *portp; -ENOENT for an unknown or stale id.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_udp_port(tern_loop *loop, tern_id id, unsigned *portp);

/*
 * tern_udp_fd: the socket's descriptor, for setsockopt and the like. Do
 * not read, write or close it.
 * Requires: loop != NULL.
 * Returns: the fd (>= 0); -ENOENT for an unknown or stale id.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_udp_fd(tern_loop *loop, tern_id id);

/*
 * tern_udp_on_close: set (or replace, or with NULL clear) the callback
 * that runs once when the socket closes for any reason (tern_udp_close,
 * tern_cancel, tern_loop_free).
 * Requires: loop != NULL.
 * Returns: 0; -ENOENT for an unknown or stale id.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_udp_on_close(tern_loop *loop, tern_id id, tern_close_cb cb, void *arg);

/*
 * tern_udp_close: close the socket. Its id is stale when this returns and
 * the descriptor is closed; receiving stops at once; in step 2 of a coming
 * turn every queued send completes with -ECANCELED (in order), then the
 * close callback runs. Same as tern_cancel(loop, id).
 * Requires: loop != NULL.
 * Returns: 0; -ENOENT for an unknown or stale id (a second close).
 * Threads: loop-only.
 */
TERN_EXTERN int tern_udp_close(tern_loop *loop, tern_id id);

#endif /* TERN_UDP_H */
