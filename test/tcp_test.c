/*
 * TCP conformance (include/tern/net.h), run on every backend built:
 * listen and accept, connect by number and by name (localhost), refused
 * and timed-out connects, 1,000 concurrent connections, EMFILE on accept
 * (the listener backs off, logs once and keeps serving), SO_REUSEPORT,
 * closing listeners, and teardown with a connect in flight.
 *
 * Network rule: only loopback addresses, every loop bounded.
 */
#include "loop_helpers.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>

/* An echo server: every accepted stream echoes what it reads. */
struct server {
    tern_id listener;
    unsigned port;
    atomic_uint accepted;
    atomic_uint backoffs;
    int backoff_status;
    atomic_uint closed;
};

static void echo_written(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop;
    (void)id;
    (void)status;
    free(arg);
}

static void echo_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                      void *arg)
{
    (void)arg;
    if (status < 0 || len == 0) {
        tern_stream_close(loop, id);
        return;
    }
    char *copy = malloc(len);
    cr_assert_not_null(copy);
    memcpy(copy, data, len);
    tern_buf b = {copy, len};
    cr_assert_geq(tern_stream_write(loop, id, &b, 1, echo_written, copy), 0);
}

static void count_close(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

static void on_accept(tern_loop *loop, tern_id listener, int status, tern_id stream, void *arg)
{
    struct server *srv = arg;
    cr_assert_eq(listener, srv->listener);
    if (status < 0) {
        cr_assert_eq(stream, 0);
        srv->backoff_status = status;
        atomic_fetch_add(&srv->backoffs, 1);
        return;
    }
    cr_assert_neq(stream, 0);
    atomic_fetch_add(&srv->accepted, 1);
    cr_assert_eq(tern_stream_on_close(loop, stream, count_close, &srv->closed), 0);
    cr_assert_eq(tern_stream_read_start(loop, stream, echo_read, srv), 0);
}

static void server_start(tern_loop *loop, struct server *srv, int backlog)
{
    memset(srv, 0, sizeof(*srv));
    int rc = tern_tcp_listen(loop, "127.0.0.1", 0, backlog, 0, on_accept, srv, &srv->listener);
    cr_assert_eq(rc, 0, "listen: %s", tern_strerror(rc));
    cr_assert_eq(tern_tcp_port(loop, srv->listener, &srv->port), 0);
    cr_assert_neq(srv->port, 0);
}

/* A client: connect, send a message, expect it back, close. */
struct client {
    tern_id id;
    atomic_uint connected;
    int status;
    char got[64];
    size_t got_len;
    atomic_uint echoed;
    atomic_uint closed;
    atomic_uint written; /* callbacks of the write client_start queues */
    int write_status;
};

static const char msg[] = "hello tern";

static void client_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                        void *arg)
{
    struct client *c = arg;
    cr_assert_eq(status, 0, "client read: %s", tern_strerror(status));
    cr_assert_gt(len, 0);
    cr_assert_leq(c->got_len + len, sizeof(c->got));
    memcpy(c->got + c->got_len, data, len);
    c->got_len += len;
    if (c->got_len == sizeof(msg)) {
        atomic_fetch_add(&c->echoed, 1);
        tern_stream_close(loop, id);
    }
}

/* A write queued before a failed connect completes with -ECANCELED. */
static void noop_written(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop;
    (void)id;
    cr_assert(status == 0 || status == -ECANCELED, "write: %s", tern_err_name(status));
    struct client *c = arg;
    if (c != NULL) {
        c->write_status = status;
        atomic_fetch_add(&c->written, 1);
    }
}

static void client_connected(tern_loop *loop, tern_id id, int status, void *arg)
{
    struct client *c = arg;
    cr_assert_eq(id, c->id);
    c->status = status;
    atomic_fetch_add(&c->connected, 1);
    if (status < 0) {
        cr_assert_eq(tern_stream_write(loop, id, &(tern_buf){"x", 1}, 1, noop_written, NULL),
                     -ENOENT, "a failed connect leaves a stale id");
        return;
    }
    cr_assert_eq(tern_stream_read_start(loop, id, client_read, c), 0);
}

static void client_start(tern_loop *loop, struct client *c, const char *host, unsigned port,
                         uint64_t timeout)
{
    memset(c, 0, sizeof(*c));
    int rc = tern_tcp_connect(loop, host, port, timeout, client_connected, c, &c->id);
    cr_assert_eq(rc, 0, "connect: %s", tern_strerror(rc));
    cr_assert_neq(c->id, 0);
    cr_assert_eq(tern_stream_on_close(loop, c->id, count_close, &c->closed), 0);
    /* Writes may be queued while the connect is in flight. */
    tern_buf b = {msg, sizeof(msg)};
    cr_assert_eq(tern_stream_write(loop, c->id, &b, 1, noop_written, c), 0);
}

static void close_listener(tern_loop *loop, struct server *srv)
{
    atomic_uint closed = 0;
    cr_assert_eq(tern_stream_on_close(loop, srv->listener, count_close, &closed), 0);
    cr_assert_eq(tern_stream_close(loop, srv->listener), 0);
    cr_assert(run_until_count(loop, &closed, 1, 10 * MS, 100));
}

/* Turn until everything the test closed or cancelled has finished. */
static void settle(tern_loop *loop)
{
    cr_assert(run_until_nothing_live(loop), "%u operations still live after %llu s",
              loop_live(loop), (unsigned long long)(LIVENESS_NS / SEC));
}

/* Wait (bounded) until the listener's accept queue is full, so the kernel
 * drops further SYNs. For a listening socket TCP_INFO reports the queue's
 * length in tcpi_unacked and its limit in tcpi_sacked; the kernel calls it
 * full once the length exceeds the limit. */
static void wait_accept_queue_full(int l)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    uint64_t end = mono_ns() + LIVENESS_NS;
    for (;;) {
        memset(&ti, 0, sizeof ti);
        cr_assert_eq(getsockopt(l, IPPROTO_TCP, TCP_INFO, &ti, &len), 0);
        if (ti.tcpi_unacked > ti.tcpi_sacked)
            return;
        cr_assert(mono_ns() < end, "the accept queue never filled: %u queued, limit %u",
                  ti.tcpi_unacked, ti.tcpi_sacked);
        sched_yield();
    }
}

/* ---------------------------------------------------------------- */

BACKEND_TEST(tcp, connect_by_number_and_echo)
{
    tern_loop *loop = loop_new_backend(backend);
    static struct server srv;
    server_start(loop, &srv, TERN_TCP_BACKLOG_DEFAULT);
    static struct client c;
    client_start(loop, &c, "127.0.0.1", srv.port, 10 * SEC);
    cr_assert(run_until_count(loop, &c.echoed, 1, 10 * MS, 2000));
    cr_assert_eq(c.status, 0);
    cr_assert_eq(atomic_load(&c.connected), 1);
    cr_assert(memcmp(c.got, msg, sizeof(msg)) == 0);
    cr_assert(run_until_count(loop, &c.closed, 1, 10 * MS, 100));
    /* The server sees end of stream and closes its side. */
    cr_assert(run_until_count(loop, &srv.closed, 1, 10 * MS, 1000));
    cr_assert_eq(atomic_load(&srv.accepted), 1);
    close_listener(loop, &srv);
    loop_free_clean(loop);
}

BACKEND_TEST(tcp, connect_by_name_to_localhost)
{
    tern_loop *loop = loop_new_backend(backend);
    static struct server srv;
    server_start(loop, &srv, TERN_TCP_BACKLOG_DEFAULT);
    /* localhost may resolve to ::1 first, where nothing listens: the
     * connect must go on to 127.0.0.1. */
    static struct client c;
    client_start(loop, &c, "localhost", srv.port, 20 * SEC);
    cr_assert(run_until_count(loop, &c.echoed, 1, 10 * MS, 2000));
    cr_assert_eq(c.status, 0);
    cr_assert(run_until_count(loop, &c.closed, 1, 10 * MS, 100));
    cr_assert(run_until_count(loop, &srv.closed, 1, 10 * MS, 1000));
    close_listener(loop, &srv);
    loop_free_clean(loop);
}

BACKEND_TEST(tcp, refused_connect_reports_and_closes)
{
    tern_loop *loop = loop_new_backend(backend);
    static struct server srv;
    server_start(loop, &srv, TERN_TCP_BACKLOG_DEFAULT);
    unsigned port = srv.port;
    close_listener(loop, &srv);
    static struct client c;
    client_start(loop, &c, "127.0.0.1", port, 10 * SEC);
    cr_assert(run_until_count(loop, &c.connected, 1, 10 * MS, 1000));
    cr_assert_eq(c.status, -ECONNREFUSED, "got %s", tern_err_name(c.status));
    cr_assert(run_until_count(loop, &c.closed, 1, 10 * MS, 100));
    cr_assert_eq(atomic_load(&c.connected), 1);
    loop_free_clean(loop);
}

BACKEND_TEST(tcp, unknown_name_is_a_lookup_error)
{
    tern_loop *loop = loop_new_backend(backend);
    static struct client c;
    /* ".invalid" never resolves (RFC 6761); /etc/hosts answers nothing for it. */
    client_start(loop, &c, "no-such-host.invalid", 9, 20 * SEC);
    cr_assert(run_until_count(loop, &c.connected, 1, 10 * MS, 3000));
    cr_assert(c.status <= TERN_EAI_BASE, "got %s", tern_err_name(c.status));
    cr_assert(run_until_count(loop, &c.closed, 1, 10 * MS, 100));
    loop_free_clean(loop);
}

/*
 * The timeout fires on loopback: a listener with a backlog of 0 that never
 * accepts. Once its queue is full the kernel drops further SYNs, so a
 * connect stays in progress until tern's timer ends it.
 */
BACKEND_TEST(tcp, connect_timeout_fires_on_a_full_backlog)
{
    tern_loop *loop = loop_new_backend(backend);
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    cr_assert_eq(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(l, 0), 0);
    cr_assert_eq(getsockname(l, (struct sockaddr *)&a, &len), 0);
    int fill[8];
    for (int i = 0; i < 8; i++) {
        fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        connect(fill[i], (struct sockaddr *)&a, sizeof(a)); /* EINPROGRESS or done */
    }
    wait_accept_queue_full(l);
    static struct client c;
    client_start(loop, &c, "127.0.0.1", ntohs(a.sin_port), 200 * MS);
    cr_assert(run_until_count(loop, &c.connected, 1, 10 * MS, 3000));
    cr_assert_eq(c.status, -ETIMEDOUT, "got %s", tern_err_name(c.status));
    cr_assert(run_until_count(loop, &c.closed, 1, 10 * MS, 100));
    for (int i = 0; i < 8; i++)
        close(fill[i]);
    close(l);
    loop_free_clean(loop);
}

/* ---------------------------------------------------------------- */

#define CONNS 1000

static void raise_nofile(rlim_t want)
{
    struct rlimit r;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &r), 0);
    if (r.rlim_cur >= want)
        return;
    r.rlim_cur = want <= r.rlim_max ? want : r.rlim_max;
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &r), 0);
    cr_assert_geq(r.rlim_cur, want, "RLIMIT_NOFILE hard limit too low for %u connections",
                  (unsigned)want);
}

BACKEND_TEST(tcp, a_thousand_concurrent_connections)
{
    raise_nofile(2 * CONNS + 64);
    tern_loop *loop = loop_new_backend(backend);
    static struct server srv;
    server_start(loop, &srv, TERN_TCP_BACKLOG_DEFAULT);
    static struct client c[CONNS];
    atomic_uint echoed = 0;
    for (unsigned i = 0; i < CONNS; i++)
        client_start(loop, &c[i], "127.0.0.1", srv.port, 20 * SEC);
    uint64_t end = mono_ns() + LIVENESS_NS;
    for (;;) {
        unsigned done = 0;
        for (unsigned i = 0; i < CONNS; i++)
            done += atomic_load(&c[i].closed);
        atomic_store(&echoed, done);
        if (done == CONNS || mono_ns() > end)
            break;
        tern_loop_run_once(loop, 10 * MS);
    }
    cr_assert_eq(atomic_load(&echoed), CONNS);
    for (unsigned i = 0; i < CONNS; i++) {
        cr_assert_eq(c[i].status, 0, "client %u: %s", i, tern_err_name(c[i].status));
        cr_assert_eq(atomic_load(&c[i].echoed), 1);
        cr_assert(memcmp(c[i].got, msg, sizeof(msg)) == 0);
    }
    cr_assert(run_until_count(loop, &srv.closed, CONNS, 10 * MS, 3000));
    cr_assert_eq(atomic_load(&srv.accepted), CONNS);
    close_listener(loop, &srv);
    loop_free_clean(loop);
}

/* ---------------------------------------------------------------- */

BACKEND_TEST(tcp, emfile_on_accept_backs_off_logs_once_and_keeps_serving)
{
    /* A limit a little above what is open now, set before the listener:
     * io_uring's accept applies the limit in force when it is submitted
     * (as a server's, set at its start, is), accept4 the one at the call. */
    struct rlimit old, r;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
    int lowest = dup(0);
    cr_assert_geq(lowest, 0);
    close(lowest);
    r = old;
    r.rlim_cur = (rlim_t)lowest + 64;
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &r), 0);
    tern_loop *loop = loop_new_backend(backend);
    static struct server srv;
    server_start(loop, &srv, TERN_TCP_BACKLOG_DEFAULT);
    /* Capture stderr to count the log lines. */
    char path[] = "/tmp/tern-tcp-test-XXXXXX";
    int logfd = mkstemp(path);
    cr_assert_geq(logfd, 0);
    unlink(path);
    int saved = dup(2);
    cr_assert_eq(dup2(logfd, 2), 2);

    for (int round = 0; round < 2; round++) {
        /* The process has no descriptor left (every one below the limit
         * is taken) when a connection comes... */
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                                .sin_port = htons((uint16_t)srv.port)};
        int cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int fill[160], nfill = 0, f;
        while (nfill < 160 && (f = dup(0)) >= 0)
            fill[nfill++] = f;
        cr_assert_lt(nfill, 160);
        /* ...and waits in the kernel's queue. */
        cr_assert_eq(connect(cfd, (struct sockaddr *)&a, sizeof(a)), 0);
        unsigned before = atomic_load(&srv.backoffs);
        cr_assert(run_until_count(loop, &srv.backoffs, before + 1, 10 * MS, 1000));
        cr_assert_eq(srv.backoff_status, -EMFILE);
        cr_assert_eq(atomic_load(&srv.accepted), (unsigned)round);
        while (nfill > 0)
            close(fill[--nfill]);
        /* After the back-off the same connection is accepted and served. */
        cr_assert(run_until_count(loop, &srv.accepted, (unsigned)round + 1, 10 * MS, 3000));
        cr_assert_eq(write(cfd, "ping", 4), 4);
        char buf[4];
        for (int t = 0; t < 1000 && !fd_readable_now(cfd, 0); t++)
            tern_loop_run_once(loop, 10 * MS);
        cr_assert_eq(read(cfd, buf, 4), 4);
        cr_assert(memcmp(buf, "ping", 4) == 0);
        close(cfd);
        cr_assert(run_until_count(loop, &srv.closed, (unsigned)round + 1, 10 * MS, 1000));
        cr_assert_eq(atomic_load(&srv.backoffs), before + 1, "one notice per pause");
    }
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char log[4096] = {0};
    cr_assert_geq(pread(logfd, log, sizeof(log) - 1, 0), 0);
    close(logfd);
    unsigned lines = 0;
    for (char *p = log; (p = strstr(p, "tern: accept")) != NULL; p++)
        lines++;
    cr_assert_eq(lines, 1, "the listener logs once, not per failure: <%s>", log);
    close_listener(loop, &srv);
    loop_free_clean(loop);
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
}

BACKEND_TEST(tcp, reuseport_lets_two_listeners_share_a_port)
{
    tern_loop *loop = loop_new_backend(backend);
    static struct server a, b;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    cr_assert_eq(tern_tcp_listen(loop, "127.0.0.1", 0, 16, TERN_TCP_REUSEPORT, on_accept, &a,
                                 &a.listener), 0);
    cr_assert_eq(tern_tcp_port(loop, a.listener, &a.port), 0);
    cr_assert_eq(tern_tcp_listen(loop, "127.0.0.1", a.port, 16, TERN_TCP_REUSEPORT, on_accept,
                                 &b, &b.listener), 0);
    tern_id third = 0;
    cr_assert_eq(tern_tcp_listen(loop, "127.0.0.1", a.port, 16, 0, on_accept, &b, &third),
                 -EADDRINUSE);
    cr_assert_eq(third, 0);
    close_listener(loop, &a);
    close_listener(loop, &b);
    loop_free_clean(loop);
}

BACKEND_TEST(tcp, listen_and_connect_refuse_bad_input)
{
    tern_loop *loop = loop_new_backend(backend);
    unsigned live = loop_live(loop);
    tern_id id = 0;
    static struct server s;
    cr_assert_eq(tern_tcp_listen(loop, "127.0.0.1", 0, 16, 0, NULL, NULL, &id), -EINVAL);
    cr_assert_eq(tern_tcp_listen(loop, "not-an-address", 0, 16, 0, on_accept, &s, &id), -EINVAL);
    cr_assert_eq(tern_tcp_listen(loop, "127.0.0.1", 70000, 16, 0, on_accept, &s, &id), -EINVAL);
    cr_assert_eq(tern_tcp_listen(loop, "127.0.0.1", 0, -2, 0, on_accept, &s, &id), -EINVAL);
    cr_assert_eq(tern_tcp_listen(loop, "127.0.0.1", 0, 16, 0x80, on_accept, &s, &id), -EINVAL);
    cr_assert_eq(tern_tcp_connect(loop, NULL, 80, 0, client_connected, NULL, &id), -EINVAL);
    cr_assert_eq(tern_tcp_connect(loop, "127.0.0.1", 0, 0, client_connected, NULL, &id), -EINVAL);
    cr_assert_eq(tern_tcp_connect(loop, "127.0.0.1", 80, 0, NULL, NULL, &id), -EINVAL);
    cr_assert_eq(tern_tcp_connect(loop, "127.0.0.1", 80, UINT64_MAX, client_connected, NULL, &id),
                 -EINVAL);
    cr_assert_eq(id, 0);
    unsigned port = 1;
    cr_assert_eq(tern_tcp_port(loop, 999999999, &port), -ENOENT);
    cr_assert_eq(port, 1);
    cr_assert_eq(loop_live(loop), live);
    /* IPv6 loopback listens too (where the kernel has IPv6). */
    int rc = tern_tcp_listen(loop, "::1", 0, 16, 0, on_accept, &s, &id);
    cr_assert(rc == 0 || rc == -EADDRNOTAVAIL || rc == -EAFNOSUPPORT, "%s", tern_err_name(rc));
    if (rc == 0)
        cr_assert_eq(tern_stream_close(loop, id), 0);
    settle(loop);
    loop_free_clean(loop);
}

BACKEND_TEST(tcp, cancel_closes_a_listener)
{
    tern_loop *loop = loop_new_backend(backend);
    static struct server srv;
    server_start(loop, &srv, TERN_TCP_BACKLOG_DEFAULT);
    atomic_uint closed = 0;
    cr_assert_eq(tern_stream_on_close(loop, srv.listener, count_close, &closed), 0);
    cr_assert_eq(tern__test_cancel_now(loop, srv.listener), 0);
    cr_assert_eq(tern__test_cancel_now(loop, srv.listener), -ENOENT);
    cr_assert(run_until_count(loop, &closed, 1, 10 * MS, 100));
    /* The port is free again: nothing listens there. */
    static struct client c;
    client_start(loop, &c, "127.0.0.1", srv.port, 10 * SEC);
    cr_assert(run_until_count(loop, &c.connected, 1, 10 * MS, 1000));
    cr_assert_eq(c.status, -ECONNREFUSED);
    cr_assert(run_until_count(loop, &c.closed, 1, 10 * MS, 100));
    loop_free_clean(loop);
}

BACKEND_TEST(tcp, loop_free_cancels_a_connect_in_flight)
{
    tern_loop *loop = loop_new_backend(backend);
    static struct client c;
    /* By name, so the lookup is on the pool when the loop is freed. */
    client_start(loop, &c, "localhost", 9, 20 * SEC);
    tern_loop_free(loop);
    cr_assert_eq(atomic_load(&c.connected), 1, "the connect callback is owed even at teardown");
    cr_assert(c.status == -ECANCELED || c.status == -ECONNREFUSED, "got %s",
              tern_err_name(c.status));
    cr_assert_eq(atomic_load(&c.closed), 1);
}

BACKEND_TEST(tcp, close_during_connect_cancels_it)
{
    tern_loop *loop = loop_new_backend(backend);
    static struct client c;
    client_start(loop, &c, "localhost", 9, 20 * SEC);
    cr_assert_eq(tern_stream_close(loop, c.id), 0);
    cr_assert_eq(atomic_load(&c.connected), 0, "no callback inside tern_stream_close");
    cr_assert(run_until_count(loop, &c.closed, 1, 10 * MS, 3000));
    cr_assert_eq(atomic_load(&c.connected), 1);
    cr_assert_eq(c.status, -ECANCELED);
    settle(loop);
    loop_free_clean(loop);
}

/* ---------------------------------------------------------------- */

static atomic_bool release_lookup;
static atomic_bool lookup_entered;

static int stalled_getaddrinfo(const char *host, const char *service,
                               const struct addrinfo *hints, struct addrinfo **res)
{
    (void)host;
    atomic_store(&lookup_entered, true);
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (!atomic_load(&release_lookup) && mono_ns() < end)
        sleep_ns(MS);
    return getaddrinfo("127.0.0.1", service, hints, res);
}

BACKEND_TEST(tcp, timeout_during_a_stalled_lookup)
{
    tern_loop *loop = loop_new_backend(backend);
    atomic_store(&release_lookup, false);
    tern__set_getaddrinfo(stalled_getaddrinfo);
    static struct client c;
    client_start(loop, &c, "stalled.example", 9, 50 * MS);
    cr_assert(run_until_count(loop, &c.connected, 1, 10 * MS, 3000));
    cr_assert_eq(c.status, -ETIMEDOUT, "got %s", tern_err_name(c.status));
    cr_assert(run_until_count(loop, &c.closed, 1, 10 * MS, 100));
    /* The lookup comes back later; its answer is dropped, nothing leaks. */
    atomic_store(&release_lookup, true);
    for (unsigned t = 0; t < 2000 && loop_live(loop) > 0; t++)
        tern_loop_run_once(loop, 10 * MS);
    cr_assert_eq(atomic_load(&c.connected), 1, "exactly one connect callback");
    tern__set_getaddrinfo(NULL);
    loop_free_clean(loop);
}

/* The connect callback of a teardown lets the stalled lookup return. */
static void connected_then_release(tern_loop *loop, tern_id id, int status, void *arg)
{
    client_connected(loop, id, status, arg);
    atomic_store(&release_lookup, true);
}

/*
 * tern_loop_free while the connect's lookup runs on a worker: the stream
 * cancels it through the record it holds, and every callback still comes
 * exactly once (connect -ECANCELED, the queued write -ECANCELED, close);
 * the lookup returns only once the connect callback has run, so the loop
 * must keep the record until the lookup's late answer is dropped.
 */
BACKEND_TEST(tcp, loop_free_mid_lookup_delivers_every_callback_once)
{
    tern_loop *loop = loop_new_backend(backend);
    atomic_store(&release_lookup, false);
    atomic_store(&lookup_entered, false);
    tern__set_getaddrinfo(stalled_getaddrinfo);
    static struct client c;
    memset(&c, 0, sizeof(c));
    cr_assert_eq(tern_tcp_connect(loop, "stalled.example", 9, 20 * SEC, connected_then_release,
                                  &c, &c.id),
                 0);
    cr_assert_eq(tern_stream_on_close(loop, c.id, count_close, &c.closed), 0);
    tern_buf b = {msg, sizeof(msg)};
    cr_assert_eq(tern_stream_write(loop, c.id, &b, 1, noop_written, &c), 0);
    cr_assert(wait_for_flag(&lookup_entered), "the lookup never started");
    tern_loop_free(loop);
    tern__set_getaddrinfo(NULL);
    cr_assert_eq(atomic_load(&c.connected), 1, "connect callbacks: %u", atomic_load(&c.connected));
    cr_assert_eq(c.status, -ECANCELED, "got %s", tern_err_name(c.status));
    cr_assert_eq(atomic_load(&c.written), 1, "write callbacks: %u", atomic_load(&c.written));
    cr_assert_eq(c.write_status, -ECANCELED, "got %s", tern_err_name(c.write_status));
    cr_assert_eq(atomic_load(&c.closed), 1, "close callbacks: %u", atomic_load(&c.closed));
}

/*
 * tern_loop_free while the SYN waits in a full backlog: the connect's
 * watcher and timeout are stopped by the stream's close, and every
 * callback comes exactly once.
 */
BACKEND_TEST(tcp, loop_free_mid_connect_delivers_every_callback_once)
{
    tern_loop *loop = loop_new_backend(backend);
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    cr_assert_eq(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(l, 0), 0);
    cr_assert_eq(getsockname(l, (struct sockaddr *)&a, &len), 0);
    int fill[8];
    for (int i = 0; i < 8; i++) {
        fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        connect(fill[i], (struct sockaddr *)&a, sizeof(a)); /* EINPROGRESS or done */
    }
    wait_accept_queue_full(l);
    static struct client c;
    client_start(loop, &c, "127.0.0.1", ntohs(a.sin_port), 20 * SEC);
    for (int i = 0; i < 3; i++)
        tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&c.connected), 0, "the connect finished: %s",
                 tern_err_name(c.status));
    tern_loop_free(loop);
    cr_assert_eq(atomic_load(&c.connected), 1, "connect callbacks: %u", atomic_load(&c.connected));
    cr_assert_eq(c.status, -ECANCELED, "got %s", tern_err_name(c.status));
    cr_assert_eq(atomic_load(&c.written), 1, "write callbacks: %u", atomic_load(&c.written));
    cr_assert_eq(c.write_status, -ECANCELED, "got %s", tern_err_name(c.write_status));
    cr_assert_eq(atomic_load(&c.closed), 1, "close callbacks: %u", atomic_load(&c.closed));
    for (int i = 0; i < 8; i++)
        close(fill[i]);
    close(l);
}

BACKEND_TEST(tcp, a_connect_that_fails_at_once_still_reports_through_dispatch)
{
    tern_loop *loop = loop_new_backend(backend);
    static struct client c;
    /* The socket() inside tern_tcp_connect fails: the id stays usable
     * until the callback, which comes in step 2 like any other. */
    tern__fault_arm(TERN__FAULT_FD, 1);
    client_start(loop, &c, "127.0.0.1", 9, 10 * SEC);
    tern__fault_arm(0, 0);
    cr_assert_eq(atomic_load(&c.connected), 0);
    cr_assert(run_until_count(loop, &c.connected, 1, 10 * MS, 100));
    cr_assert_eq(c.status, -EMFILE, "got %s", tern_err_name(c.status));
    cr_assert(run_until_count(loop, &c.closed, 1, 10 * MS, 100));
    settle(loop);
    loop_free_clean(loop);
}
