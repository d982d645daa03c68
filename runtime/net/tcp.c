/*
 * TCP: listeners (bind, listen, accept with back-off) and connects (a name
 * lookup on the pool, then a non-blocking connect to each address in
 * turn, all under one deadline for the timeout). A listener on a name
 * (tern_tcp_listen_name) is a connect's first half: it looks up, under
 * the same deadline, then binds the first address that takes it.
 *
 * The timeout and the back-off are the stream's internal deadline: an op
 * embedded in the record, armed on the loop's heap with no id, whose
 * `expired` hook acts in step 5 without calling user code (the connect
 * callback it makes owed is delivered by the stream's dispatch). The
 * lookup is held by its record and cancelled by pointer. Neither is an
 * operation a caller's id could name.
 *
 * Quirks worth knowing:
 *  - accept() failing with EMFILE/ENFILE leaves the connection in the
 *    kernel's queue, so a level-triggered listener would be reported ready
 *    again at once and spin. The listener stops watching for a back-off
 *    interval instead, on its deadline, and logs the first time only.
 *  - A non-blocking connect reports its outcome as writability; SO_ERROR
 *    says whether it worked. On loopback a refused connect can also fail
 *    inside connect() itself, so both paths lead to the next address.
 *  - On a completion backend (TERN__DO_ACCEPT) the kernel accepts with one
 *    multishot accept per listener; the connections wait in the listener's
 *    `rfds` ring for its dispatch, which hands them out as readiness does.
 *  - Numeric hosts are turned into addresses on the loop thread with
 *    AI_NUMERICHOST (no lookup can block); only names go to the pool.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "container.h"
#include "heap.h"
#include "job_p.h"
#include "net_p.h"

#define ACCEPT_BATCH 32 /* connections accepted per readiness */

/* ------------------------------------------------------------------ */
/* The deadline                                                        */
/* ------------------------------------------------------------------ */

static void connect_done(struct tern__stream *s, int status);

/*
 * Step 5: the heap has let go of the deadline, so its claim goes back
 * first. A listener's back-off ends (it watches again); a connect has
 * timed out (its callback is owed, delivered by dispatch).
 */
static void deadline_expired(tern_loop *loop, struct tern__op *op)
{
    struct tern__stream *s = tern__container_of(op, struct tern__stream, deadline);
    tern__deadline_unclaim(loop);
    if (s->kind == TERN__LISTENER && !(s->state & TERN__S_CONNECTING)) {
        s->state &= ~TERN__S_BACKOFF;
        tern__stream_rewatch(s);
        if (tern__listener_waiting(s))
            tern__stream_owe(s); /* accepted before the back-off, handed out now */
    } else {
        connect_done(s, -ETIMEDOUT);
    }
}

const struct tern__op_class tern__stream_deadline_class = {
    .name = "stream deadline",
    .expired = deadline_expired,
};

/* Arm the deadline delay_ns from now: 0, or -ENOMEM (no heap slot). */
static int deadline_start(struct tern__stream *s, uint64_t delay_ns)
{
    TERN_INSIST(!tern__deadline_armed(&s->deadline));
    int rc = tern__deadline_claim(s->loop);
    if (rc == 0)
        tern__deadline_arm(s->loop, &s->deadline, s->loop->now + delay_ns);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Listening                                                           */
/* ------------------------------------------------------------------ */

static int parse_host(const char *host, unsigned port, struct sockaddr_storage *ss, socklen_t *len)
{
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    if (host == NULL || strcmp(host, "localhost") == 0) {
        in4->sin_family = AF_INET;
        in4->sin_addr.s_addr = htonl(host == NULL ? INADDR_ANY : INADDR_LOOPBACK);
    } else if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
    } else if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
    } else {
        return -EINVAL;
    }
    if (ss->ss_family == AF_INET) {
        in4->sin_port = htons((uint16_t)port);
        *len = sizeof(*in4);
    } else {
        in6->sin6_port = htons((uint16_t)port);
        *len = sizeof(*in6);
    }
    return 0;
}

/* A listening socket bound to addr, or a negative errno (nothing left open). */
static int bind_listener(const struct sockaddr *addr, socklen_t len, int backlog, unsigned flags)
{
#ifndef SO_REUSEPORT
    if (flags & TERN_TCP_REUSEPORT)
        return -ENOTSUP;
#endif
    int fd = tern__socket(addr->sa_family, SOCK_STREAM);
    if (fd < 0)
        return fd;
    int one = 1;
    int rc = tern__stream_fault();
    if (rc == 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
        rc = -errno;
#ifdef SO_REUSEPORT
    if (rc == 0 && (flags & TERN_TCP_REUSEPORT) && (rc = tern__stream_fault()) == 0 &&
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0)
        rc = -errno;
#endif
    if (rc == 0 && (rc = tern__stream_fault()) == 0 && bind(fd, addr, len) < 0)
        rc = -errno;
    if (rc == 0 && (rc = tern__stream_fault()) == 0 &&
        listen(fd, backlog == TERN_TCP_BACKLOG_DEFAULT ? SOMAXCONN : backlog) < 0)
        rc = -errno;
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

static int open_listener(const char *host, unsigned port, int backlog, unsigned flags)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int rc = parse_host(host, port, &ss, &len);
    if (rc < 0)
        return rc;
    return bind_listener((struct sockaddr *)&ss, len, backlog, flags);
}

int tern_tcp_listen(tern_loop *loop, const char *host, unsigned port, int backlog, unsigned flags,
                    tern_accept_cb cb, void *arg, tern_id *idp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (cb == NULL || port > 65535 || backlog < TERN_TCP_BACKLOG_DEFAULT ||
        (flags & ~(unsigned)TERN_TCP_REUSEPORT))
        return -EINVAL;
    int fd = open_listener(host, port, backlog, flags);
    if (fd < 0)
        return fd;
    struct tern__stream *s;
    int rc = tern__stream_new(loop, TERN__LISTENER, fd, &s);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    s->accept_cb = cb;
    s->accept_arg = arg;
    if ((rc = tern__listener_start(s)) < 0) {
        tern__stream_discard(s);
        close(fd);
        return rc;
    }
    if (idp != NULL)
        *idp = s->op.id;
    return 0;
}

/*
 * Out of descriptors or memory: the pending connection stays queued in the
 * kernel, and retrying at once would spin. Pause, say so once on stderr,
 * and tell the accept callback (from dispatch) that this pause began.
 */
static void backoff(struct tern__stream *s, int status)
{
    if (!s->backoff_logged) {
        s->backoff_logged = true;
        fprintf(stderr,
                "tern: accept on listener %llu failed: %s; pausing %llu ms and "
                "retrying (logged once per listener)\n",
                (unsigned long long)s->op.id, tern_strerror(status),
                TERN_TCP_ACCEPT_BACKOFF_NS / 1000000ull);
    }
    if (deadline_start(s, TERN_TCP_ACCEPT_BACKOFF_NS) == 0) {
        s->state |= TERN__S_BACKOFF;
        tern__stream_rewatch(s);
    }
    /* Without a heap slot (out of memory) the listener stays watched and
     * retries on the next turn: busier, but it keeps serving. */
    s->backoff_status = status;
    s->backoff_due = true;
    tern__stream_owe(s);
}

static bool accept_retryable(int err)
{
    /* The connection died in the queue, or a firewall said no: take the next. */
    return err == EINTR || err == ECONNABORTED || err == EPROTO || err == EPERM;
}

void tern__tcp_accept_ready(struct tern__stream *s)
{
    tern_loop *loop = s->loop;
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        if (s->state & (TERN__S_CLOSING | TERN__S_BACKOFF))
            return;
        int rc = tern__stream_fault();
        int fd = rc < 0 ? rc : tern__accept(s->fd);
        rc = fd < 0 ? fd : 0;
        if (rc == -EAGAIN || rc == -EWOULDBLOCK)
            return;
        if (rc < 0 && accept_retryable(-rc))
            continue;
        struct tern__stream *c = NULL;
        if (rc == 0 && (rc = tern__stream_new(loop, TERN__STREAM, fd, &c)) < 0)
            close(fd); /* the peer sees a reset; the listener backs off */
        else if (rc == 0)
            c->unix_sock = s->unix_sock; /* accepted from tern_unix_listen */
        if (rc < 0) {
            backoff(s, rc);
            return;
        }
        s->accept_cb(loop, s->op.id, 0, c->op.id, s->accept_arg);
    }
}

/* ------------------------------------------------------------------ */
/* Accepting through the backend (TERN__DO_ACCEPT)                     */
/* ------------------------------------------------------------------ */

int tern__listener_start(struct tern__stream *s)
{
    /* Refused (no memory, the backend's queue full): the listen is
     * refused and changes nothing, as a watch that cannot start is. */
    int rc = tern__listener_sync(s);
    return rc < 0 ? rc : tern__stream_watch(s, tern__stream_wanted(s));
}

/*
 * Step 4: a connection waits in the ring for the dispatch (an accept
 * callback is step 2's); the accept's end is a failure accept4 would have
 * met. Never for a closing listener, or one backing off: stopping the
 * accept cancels it, and the backend closes what comes after.
 */
void tern__listener_completed(struct tern__stream *s, const struct tern__done *d)
{
    tern_loop *loop = s->loop;
    if (d->res >= 0) {
        if (tern__fds_push(s, d->res)) {
            tern__stream_owe(s);
            return;
        }
        close(d->res); /* the peer sees a reset; the listener backs off */
        backoff(s, -ENOMEM);
        return;
    }
    s->accept_on = false; /* a failure is final (backend.h) */
    TERN_DECREMENT(loop->io_count);
    if (d->res == -EOPNOTSUPP || accept_retryable(-d->res))
        tern__stream_rewatch(s); /* again, or by readiness once the backend cannot */
    else
        backoff(s, d->res);
}

/* The head of the ring: the oldest connection not yet handed out. */
static int listener_take(struct tern__stream *s)
{
    int fd = s->rfds[s->rfds_head];
    s->rfds_head = (s->rfds_head + 1) % s->rfds_cap;
    s->rfds_len--;
    return fd;
}

/*
 * Step 2: hand out the connections the backend accepted, in order, as
 * readiness accepts them: at most a batch per dispatch, each past the
 * fault seam accept4 passes. A failure injected there is one before the
 * call, so the connection stays where it is (first in the ring) as it
 * stays in the kernel's queue; a record that cannot be made closes it and
 * backs off, as by readiness. The callback may close the listener (which
 * closes what is left) or make it back off.
 */
void tern__listener_deliver(struct tern__stream *s)
{
    tern_loop *loop = s->loop;
    for (int i = 0; i < ACCEPT_BATCH && tern__listener_waiting(s); i++) {
        int rc = tern__stream_fault();
        if (rc == 0)
            rc = tern__fd_fault(); /* both seams accept4 passes, in its order */
        if (rc == -EAGAIN || rc == -EWOULDBLOCK)
            return; /* still waiting: the dispatch comes again (owes) */
        if (rc < 0 && accept_retryable(-rc))
            continue;
        struct tern__stream *c = NULL;
        if (rc == 0) {
            int fd = listener_take(s);
            if ((rc = tern__stream_new(loop, TERN__STREAM, fd, &c)) < 0)
                close(fd); /* the peer sees a reset */
            else
                c->unix_sock = s->unix_sock;
        }
        if (rc < 0) {
            backoff(s, rc);
            return;
        }
        s->accept_cb(loop, s->op.id, 0, c->op.id, s->accept_arg);
    }
}

int tern_tcp_port(tern_loop *loop, tern_id id, unsigned *portp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    TERN_REQUIRE(portp != NULL);
    struct tern__stream *s = tern__stream_get(loop, id);
    if (s == NULL)
        return -ENOENT;
    if (s->fd < 0)
        return -ENOTCONN;
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int rc = tern__stream_fault();
    if (rc == 0 && getsockname(s->fd, (struct sockaddr *)&ss, &len) < 0)
        rc = -errno;
    if (rc < 0)
        return rc;
    if (ss.ss_family == AF_INET)
        *portp = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    else if (ss.ss_family == AF_INET6)
        *portp = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    else
        return -EAFNOSUPPORT;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Connecting                                                          */
/* ------------------------------------------------------------------ */

/*
 * A failure leaves the stream open but inert (still CONNECTING, no fd)
 * until dispatch delivers it: the id stays valid for the caller until
 * then, even when the connect failed inside tern_tcp_connect itself, so
 * tern_stream_on_close and queued writes work the same either way.
 * Dispatch closes the stream just before the connect callback runs.
 */
static void connect_done(struct tern__stream *s, int status)
{
    s->connect_due = true;
    s->connect_status = status;
    tern__stream_free_addrs(s);
    tern__stream_stop_aux(s);
    tern__stream_owe(s);
    if (status < 0) {
        tern__stream_watch(s, 0);
        if (s->fd >= 0) {
            close(s->fd);
            s->fd = -1;
        }
        return;
    }
    s->state &= ~TERN__S_CONNECTING;
    /* Writes queued while connecting go out now (this also sets the interest).
     * A listener on a name is watched already (listen_next). */
    if (s->kind == TERN__STREAM)
        tern__write_flush(s);
}

/*
 * Bind the first address that takes it, in the lookup's order; the last
 * failure is the answer when none does. One listener holds one socket, so
 * a name with several addresses (localhost: ::1 and 127.0.0.1) listens on
 * the first that binds, never on all of them.
 */
static void listen_next(struct tern__stream *s, int last)
{
    while (s->next_addr != NULL) {
        struct addrinfo *ai = s->next_addr;
        s->next_addr = ai->ai_next;
        int fd = bind_listener(ai->ai_addr, ai->ai_addrlen, s->listen_backlog, s->listen_flags);
        if (fd < 0) {
            last = fd;
            continue;
        }
        s->fd = fd;
        int rc = tern__listener_start(s);
        if (rc == 0) {
            connect_done(s, 0);
            return;
        }
        s->fd = -1;
        close(fd);
        last = rc; /* out of memory: another address would fare no better */
        break;
    }
    connect_done(s, last != 0 ? last : -EADDRNOTAVAIL);
}

/* Try the remaining addresses in order; the last failure is the answer. */
static void connect_next(struct tern__stream *s, int last)
{
    while (s->next_addr != NULL) {
        struct addrinfo *ai = s->next_addr;
        s->next_addr = ai->ai_next;
        int fd = tern__socket(ai->ai_family, SOCK_STREAM);
        if (fd < 0) {
            last = fd;
            continue;
        }
        int rc = tern__stream_fault();
        if (rc == 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) < 0)
            rc = -errno;
        if (rc == 0) {
            s->fd = fd;
            connect_done(s, 0);
            return;
        }
        if (rc == -EINPROGRESS || rc == -EINTR) {
            s->fd = fd;
            rc = tern__stream_watch(s, TERN_WRITABLE);
            if (rc == 0)
                return;
            s->fd = -1;
            close(fd);
            connect_done(s, rc);
            return;
        }
        last = rc;
        close(fd);
    }
    connect_done(s, last != 0 ? last : -ECONNREFUSED);
}

void tern__tcp_connect_ready(struct tern__stream *s, unsigned events)
{
    int err = 0;
    socklen_t len = sizeof(err);
    int rc = tern__stream_fault();
    if (rc < 0)
        err = -rc;
    else if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    if (err == 0 && (events & (TERN_HANGUP | TERN_ERROR))) {
        /*
         * Failed, but the error was read before us: libkqueue reads
         * SO_ERROR to fill in EV_EOF's fflags, and reading it clears it.
         * Not connected is the one thing we can still tell; a refusal is
         * by far the common cause, so that is what we report.
         */
        struct sockaddr_storage peer;
        socklen_t plen = sizeof(peer);
        if (getpeername(s->fd, (struct sockaddr *)&peer, &plen) < 0 && errno == ENOTCONN)
            err = ECONNREFUSED;
    }
    if (err == 0 && (events & TERN_WRITABLE)) {
        connect_done(s, 0);
        return;
    }
    if (err == 0)
        return; /* nothing decided yet */
    tern__stream_watch(s, 0);
    close(s->fd);
    s->fd = -1;
    connect_next(s, -err);
}

static void connect_resolved(tern_loop *loop, tern_id id, int status, struct addrinfo *res,
                             void *arg)
{
    (void)loop;
    (void)id;
    struct tern__stream *s = arg;
    s->lookup = NULL;
    /* Closed, or already decided (the timeout fired while looking up). */
    if ((s->state & TERN__S_CLOSING) || s->connect_due) {
        tern_freeaddrinfo(res);
        tern__stream_maybe_finish(s);
        return;
    }
    if (status < 0) {
        connect_done(s, status);
        return;
    }
    s->addrs = s->next_addr = res;
    s->addrs_resolved = true;
    if (s->kind == TERN__LISTENER)
        listen_next(s, 0);
    else
        connect_next(s, 0);
}

/*
 * A numeric IPv4 or IPv6 host needs no lookup: parse it into the stream's
 * own one-entry address list (getaddrinfo would cost allocations and a
 * free for the same answer).
 */
static bool numeric_addr(struct tern__stream *s, const char *host, unsigned port)
{
    socklen_t len;
    if (parse_host(host, port, &s->numeric_addr, &len) < 0 || strcmp(host, "localhost") == 0)
        return false;
    s->numeric = (struct addrinfo){
        .ai_family = s->numeric_addr.ss_family,
        .ai_socktype = SOCK_STREAM,
        .ai_addrlen = len,
        .ai_addr = (struct sockaddr *)&s->numeric_addr,
    };
    s->addrs = s->next_addr = &s->numeric;
    s->addrs_resolved = false;
    return true;
}

int tern_tcp_connect(tern_loop *loop, const char *host, unsigned port, uint64_t timeout_ns,
                     tern_stream_cb cb, void *arg, tern_id *idp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (cb == NULL || host == NULL || port == 0 || port > 65535 ||
        timeout_ns > TERN__DURATION_MAX_NS)
        return -EINVAL;
    char service[8];
    snprintf(service, sizeof(service), "%u", port);
    struct tern__stream *s;
    int rc = tern__stream_new(loop, TERN__STREAM, -1, &s);
    if (rc < 0)
        return rc;
    s->state |= TERN__S_CONNECTING;
    s->connect_cb = cb;
    s->connect_arg = arg;
    if (timeout_ns > 0 && (rc = deadline_start(s, timeout_ns)) < 0)
        goto fail;
    if (numeric_addr(s, host, port)) {
        connect_next(s, 0); /* any outcome is delivered from dispatch */
    } else {
        struct addrinfo hints = {
            .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
        rc = tern__lookup_start(loop, host, service, &hints, connect_resolved, s, &s->lookup);
    }
    if (rc < 0)
        goto fail;
    if (idp != NULL)
        *idp = s->op.id;
    return 0;
fail:
    tern__stream_discard(s);
    return rc;
}

int tern_tcp_listen_name(tern_loop *loop, const char *host, unsigned port, int backlog,
                         unsigned flags, uint64_t timeout_ns, tern_stream_cb ready_cb,
                         tern_accept_cb accept_cb, void *arg, tern_id *idp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (ready_cb == NULL || accept_cb == NULL || host == NULL || port > 65535 ||
        backlog < TERN_TCP_BACKLOG_DEFAULT || (flags & ~(unsigned)TERN_TCP_REUSEPORT) ||
        timeout_ns > TERN__DURATION_MAX_NS)
        return -EINVAL;
    char service[8];
    snprintf(service, sizeof(service), "%u", port);
    struct tern__stream *s;
    int rc = tern__stream_new(loop, TERN__LISTENER, -1, &s);
    if (rc < 0)
        return rc;
    s->state |= TERN__S_CONNECTING;
    s->connect_cb = ready_cb;
    s->connect_arg = arg;
    s->accept_cb = accept_cb;
    s->accept_arg = arg;
    s->listen_backlog = backlog;
    s->listen_flags = flags;
    if (timeout_ns > 0 && (rc = deadline_start(s, timeout_ns)) < 0)
        goto fail;
    if (numeric_addr(s, host, port)) {
        listen_next(s, 0); /* any outcome is delivered from dispatch */
    } else {
        struct addrinfo hints = {.ai_family = AF_UNSPEC,
                                 .ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
        rc = tern__lookup_start(loop, host, service, &hints, connect_resolved, s, &s->lookup);
    }
    if (rc < 0)
        goto fail;
    if (idp != NULL)
        *idp = s->op.id;
    return 0;
fail:
    tern__stream_discard(s);
    return rc;
}
