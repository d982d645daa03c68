/*
 * Names on the pool, both ways: a listener on a host name
 * (tern_tcp_listen_name: looked up, then the first address that binds)
 * and a reverse lookup (tern_resolve_addr: getnameinfo, cancellable, with
 * a deadline).
 *
 * The resolver is replaced through tern__set_getaddrinfo and
 * tern__set_getnameinfo where a test needs it to fail, to stall until the
 * test lets it go, or to answer a chosen list of addresses; the rest use
 * the system's own (localhost and 127.0.0.1, so no network is involved).
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "loop_helpers.h"

/* ------------------------------------------------------------------ */
/* The fake resolver                                                   */
/* ------------------------------------------------------------------ */

enum fake_mode { FAKE_FAIL, FAKE_STALL, FAKE_TWO, FAKE_NONE_BINDS };

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    enum fake_mode mode;
    bool released;
    unsigned calls;
    unsigned returned; /* stalled lookups that have returned */
    char busy[8]; /* a port some socket listens on at 127.0.0.1 (busy_port) */
} fake = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* Block until fake_release (bounded by the liveness deadline). */
static void fake_stall(void)
{
    uint64_t end = mono_ns() + LIVENESS_NS;
    pthread_mutex_lock(&fake.mu);
    while (!fake.released && mono_ns() < end) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&fake.cv, &fake.mu, &ts);
    }
    fake.returned++;
    pthread_mutex_unlock(&fake.mu);
}

/* Whether no stalled lookup has returned yet: a deadline answered now did
 * not wait for the lookup (which may still be queued on a busy machine, or
 * be blocked in the fake). */
static bool fake_stalled(void)
{
    pthread_mutex_lock(&fake.mu);
    bool stalled = fake.returned == 0;
    pthread_mutex_unlock(&fake.mu);
    return stalled;
}

static void fake_release(void)
{
    pthread_mutex_lock(&fake.mu);
    fake.released = true;
    pthread_cond_broadcast(&fake.cv);
    pthread_mutex_unlock(&fake.mu);
}

static unsigned fake_calls(void)
{
    pthread_mutex_lock(&fake.mu);
    unsigned n = fake.calls;
    pthread_mutex_unlock(&fake.mu);
    return n;
}

static void fake_enter(void)
{
    pthread_mutex_lock(&fake.mu);
    fake.calls++;
    pthread_mutex_unlock(&fake.mu);
}

/* Two loopback addresses in one list, in the order given: their ports. */
static int two_addrs(const char *first, const char *second, struct addrinfo **res)
{
    struct addrinfo h = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
                         .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
    struct addrinfo *a = NULL, *b = NULL;
    int rc = getaddrinfo("127.0.0.1", first, &h, &a);
    if (rc != 0)
        return rc;
    if ((rc = getaddrinfo("127.0.0.1", second, &h, &b)) != 0) {
        freeaddrinfo(a);
        return rc;
    }
    a->ai_next = b; /* freeaddrinfo follows ai_next, so one free frees both */
    *res = a;
    return 0;
}

static int fake_getaddrinfo(const char *host, const char *service, const struct addrinfo *hints,
                            struct addrinfo **res)
{
    (void)host, (void)hints, (void)service;
    fake_enter();
    switch (fake.mode) {
    case FAKE_FAIL:
        return EAI_NONAME;
    case FAKE_STALL:
        fake_stall();
        return EAI_AGAIN;
    case FAKE_TWO:
        /* The first port is taken (its bind fails), the second is the kernel's pick. */
        return two_addrs(fake.busy, "0", res);
    case FAKE_NONE_BINDS:
        return two_addrs(fake.busy, fake.busy, res);
    }
    return EAI_FAIL;
}

static int fake_getnameinfo(const struct sockaddr *addr, unsigned addrlen, char *host,
                            unsigned hostlen, char *serv, unsigned servlen, int flags)
{
    (void)addr, (void)addrlen, (void)host, (void)hostlen, (void)serv, (void)servlen, (void)flags;
    fake_enter();
    if (fake.mode == FAKE_STALL) {
        fake_stall();
        return EAI_AGAIN;
    }
    return EAI_FAIL;
}

/* A socket listening on 127.0.0.1, whose port the fake hands out: a bind
 * there fails with EADDRINUSE whatever the machine's interfaces are. */
static int busy_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof in;
    cr_assert_eq(bind(fd, (struct sockaddr *)&in, sizeof in), 0);
    cr_assert_eq(listen(fd, 1), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&in, &len), 0);
    snprintf(fake.busy, sizeof fake.busy, "%u", (unsigned)ntohs(in.sin_port));
    return fd;
}

static void use_fake(enum fake_mode mode)
{
    fake.mode = mode;
    tern__set_getaddrinfo(fake_getaddrinfo);
    tern__set_getnameinfo(fake_getnameinfo);
}

/* ------------------------------------------------------------------ */
/* Listening on a name                                                 */
/* ------------------------------------------------------------------ */

struct lrec {
    tern_id id;
    atomic_uint ready_calls, accepts, closes;
    int status;
    int port_in_ready; /* tern_tcp_port's result inside ready_cb */
    bool while_stalled; /* ready_cb ran while the lookup was still stalled */
    unsigned port;
    tern_id accepted;
};

static void on_ready(tern_loop *loop, tern_id id, int status, void *arg)
{
    struct lrec *r = arg;
    cr_assert_eq(id, r->id);
    r->status = status;
    r->port_in_ready = tern_tcp_port(loop, id, &r->port);
    r->while_stalled = fake_stalled();
    atomic_fetch_add(&r->ready_calls, 1);
}

static void on_accept(tern_loop *loop, tern_id listener, int status, tern_id stream, void *arg)
{
    struct lrec *r = arg;
    cr_assert_eq(listener, r->id);
    cr_assert_eq(status, 0);
    r->accepted = stream;
    cr_assert_eq(tern_stream_close(loop, stream), 0);
    atomic_fetch_add(&r->accepts, 1);
}

static void on_close(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    struct lrec *r = arg;
    cr_assert_eq(id, r->id);
    atomic_fetch_add(&r->closes, 1);
}

static int listen_name(tern_loop *loop, const char *host, uint64_t timeout_ns, struct lrec *r)
{
    int rc = tern_tcp_listen_name(loop, host, 0, TERN_TCP_BACKLOG_DEFAULT, 0, timeout_ns,
                                  on_ready, on_accept, r, &r->id);
    if (rc == 0)
        cr_assert_eq(tern_stream_on_close(loop, r->id, on_close, r), 0);
    return rc;
}

static atomic_uint connected;

static void on_connect(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)arg;
    cr_assert_eq(status, 0, "connect: %s", tern_err_name(status));
    cr_assert_eq(tern_stream_close(loop, id), 0);
    atomic_fetch_add(&connected, 1);
}

/* A failed listener: closed by the time ready_cb runs, told once, closed once. */
static void assert_failed(tern_loop *loop, struct lrec *r, int want)
{
    cr_assert(run_until_count(loop, &r->ready_calls, 1, 10 * (int64_t)MS, 100000));
    cr_assert(run_until_nothing_live(loop), "%u live", loop_live(loop));
    cr_assert_eq(r->status, want, "ready: %s, want %s", tern_err_name(r->status),
                 tern_err_name(want));
    cr_assert_eq(r->port_in_ready, -ENOENT, "a failed listener's id is live in ready_cb");
    cr_assert_eq(atomic_load(&r->ready_calls), 1);
    cr_assert_eq(atomic_load(&r->closes), 1);
    cr_assert_eq(atomic_load(&r->accepts), 0);
    cr_assert_eq(tern_stream_close(loop, r->id), -ENOENT);
}

BACKEND_TEST(listen_name, localhost_resolves_listens_and_accepts)
{
    tern_loop *loop = loop_new_backend(backend);
    struct lrec r = {0};
    cr_assert_eq(listen_name(loop, "localhost", 10 * SEC, &r), 0);
    unsigned port;
    cr_assert_eq(tern_tcp_port(loop, r.id, &port), -ENOTCONN, "listening before the lookup");
    cr_assert_eq(atomic_load(&r.ready_calls), 0, "ready_cb ran inside the call");
    cr_assert(run_until_count(loop, &r.ready_calls, 1, 10 * (int64_t)MS, 100000));
    cr_assert_eq(r.status, 0, "ready: %s", tern_err_name(r.status));
    cr_assert_eq(r.port_in_ready, 0);
    cr_assert(r.port > 0);
    /* Whichever of localhost's addresses it took, a connect to the name reaches it. */
    atomic_store(&connected, 0);
    cr_assert_eq(tern_tcp_connect(loop, "localhost", r.port, 10 * SEC, on_connect, NULL, NULL), 0);
    cr_assert(run_until_count(loop, &r.accepts, 1, 10 * (int64_t)MS, 100000));
    cr_assert(run_until_count(loop, &connected, 1, 10 * (int64_t)MS, 100000));
    cr_assert_eq(tern_stream_close(loop, r.id), 0);
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(atomic_load(&r.ready_calls), 1);
    cr_assert_eq(atomic_load(&r.closes), 1);
    loop_free_clean(loop);
}

BACKEND_TEST(listen_name, numeric_host_needs_no_lookup)
{
    use_fake(FAKE_FAIL);
    tern_loop *loop = loop_new_backend(backend);
    struct lrec r = {0};
    cr_assert_eq(listen_name(loop, "127.0.0.1", 0, &r), 0);
    cr_assert(run_until_count(loop, &r.ready_calls, 1, 10 * (int64_t)MS, 100000));
    cr_assert_eq(r.status, 0, "ready: %s", tern_err_name(r.status));
    cr_assert_eq(fake_calls(), 0, "a numeric host went to the resolver");
    cr_assert_eq(tern_stream_close(loop, r.id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}

BACKEND_TEST(listen_name, a_name_that_does_not_resolve_fails_and_closes)
{
    use_fake(FAKE_FAIL);
    tern_loop *loop = loop_new_backend(backend);
    struct lrec r = {0};
    cr_assert_eq(listen_name(loop, "no-such-host.invalid", 0, &r), 0);
    assert_failed(loop, &r, TERN_EAI_NONAME);
    cr_assert_eq(fake_calls(), 1);
    loop_free_clean(loop);
}

BACKEND_TEST(listen_name, binds_the_first_address_that_works)
{
    use_fake(FAKE_TWO);
    int busy = busy_port();
    tern_loop *loop = loop_new_backend(backend);
    struct lrec r = {0};
    cr_assert_eq(listen_name(loop, "two.example", 0, &r), 0);
    cr_assert(run_until_count(loop, &r.ready_calls, 1, 10 * (int64_t)MS, 100000));
    cr_assert_eq(r.status, 0, "ready: %s", tern_err_name(r.status));
    atomic_store(&connected, 0);
    cr_assert_neq(r.port, (unsigned)atoi(fake.busy));
    cr_assert_eq(tern_tcp_connect(loop, "127.0.0.1", r.port, 10 * SEC, on_connect, NULL, NULL), 0);
    cr_assert(run_until_count(loop, &r.accepts, 1, 10 * (int64_t)MS, 100000));
    cr_assert(run_until_count(loop, &connected, 1, 10 * (int64_t)MS, 100000));
    cr_assert_eq(tern_stream_close(loop, r.id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(busy);
}

BACKEND_TEST(listen_name, no_address_binds_gives_the_last_error)
{
    use_fake(FAKE_NONE_BINDS);
    int busy = busy_port();
    tern_loop *loop = loop_new_backend(backend);
    int before = count_open_fds();
    struct lrec r = {0};
    cr_assert_eq(listen_name(loop, "nowhere.example", 0, &r), 0);
    assert_failed(loop, &r, -EADDRINUSE);
    cr_assert_eq(count_open_fds(), before, "a socket that failed to bind stayed open");
    loop_free_clean(loop);
    close(busy);
}

BACKEND_TEST(listen_name, the_deadline_passes_during_the_lookup)
{
    use_fake(FAKE_STALL);
    tern_loop *loop = loop_new_backend(backend);
    struct lrec r = {0};
    cr_assert_eq(listen_name(loop, "slow.example", 50 * MS, &r), 0);
    cr_assert(run_until_count(loop, &r.ready_calls, 1, 10 * (int64_t)MS, 100000));
    cr_assert_eq(r.status, -ETIMEDOUT, "ready: %s", tern_err_name(r.status));
    cr_assert(r.while_stalled, "the deadline waited for the lookup to return");
    cr_assert_eq(r.port_in_ready, -ENOENT);
    /* The record waits for the stalled lookup, which the deadline cannot stop. */
    fake_release();
    assert_failed(loop, &r, -ETIMEDOUT);
    loop_free_clean(loop);
}

BACKEND_TEST(listen_name, closing_during_the_lookup_cancels_it)
{
    use_fake(FAKE_STALL);
    tern_loop *loop = loop_new_backend(backend);
    struct lrec r = {0};
    cr_assert_eq(listen_name(loop, "slow.example", 0, &r), 0);
    while (fake_calls() == 0)
        tern_loop_run_once(loop, 1 * (int64_t)MS);
    cr_assert_eq(tern_stream_close(loop, r.id), 0);
    cr_assert(run_until_count(loop, &r.ready_calls, 1, 10 * (int64_t)MS, 100000));
    cr_assert_eq(r.status, -ECANCELED, "ready: %s", tern_err_name(r.status));
    fake_release();
    assert_failed(loop, &r, -ECANCELED);
    loop_free_clean(loop);
}

Test(listen_name, bad_arguments_change_nothing)
{
    tern_loop *loop = loop_new_default();
    tern_id id = 0;
    cr_assert_eq(tern_tcp_listen_name(loop, NULL, 0, -1, 0, 0, on_ready, on_accept, NULL, &id),
                 -EINVAL);
    cr_assert_eq(tern_tcp_listen_name(loop, "localhost", 0, -1, 0, 0, NULL, on_accept, NULL, &id),
                 -EINVAL);
    cr_assert_eq(tern_tcp_listen_name(loop, "localhost", 0, -1, 0, 0, on_ready, NULL, NULL, &id),
                 -EINVAL);
    cr_assert_eq(tern_tcp_listen_name(loop, "localhost", 65536, -1, 0, 0, on_ready, on_accept,
                                      NULL, &id), -EINVAL);
    cr_assert_eq(tern_tcp_listen_name(loop, "localhost", 0, -2, 0, 0, on_ready, on_accept, NULL,
                                      &id), -EINVAL);
    cr_assert_eq(tern_tcp_listen_name(loop, "localhost", 0, -1, 1u << 7, 0, on_ready, on_accept,
                                      NULL, &id), -EINVAL);
    cr_assert_eq(tern_tcp_listen_name(loop, "localhost", 0, -1, 0, (UINT64_C(1) << 62) + 1,
                                      on_ready, on_accept, NULL, &id), -EINVAL);
    cr_assert_eq(id, 0);
    cr_assert_eq(loop_live(loop), 0);
    loop_free_clean(loop);
}

/* ------------------------------------------------------------------ */
/* Reverse lookups                                                     */
/* ------------------------------------------------------------------ */

struct rrec {
    tern_id id;
    atomic_uint calls;
    int status;
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    bool had_names;
    bool while_stalled;
};

static void on_name(tern_loop *loop, tern_id id, int status, const char *host,
                    const char *service, void *arg)
{
    (void)loop;
    struct rrec *r = arg;
    cr_assert_eq(id, r->id);
    r->status = status;
    r->had_names = host != NULL || service != NULL;
    r->while_stalled = fake_stalled();
    if (status == 0) {
        cr_assert(host != NULL && service != NULL);
        snprintf(r->host, sizeof r->host, "%s", host);
        snprintf(r->serv, sizeof r->serv, "%s", service);
    }
    atomic_fetch_add(&r->calls, 1);
}

static struct sockaddr_in loopback(unsigned port)
{
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return in;
}

static void reverse_wait(tern_loop *loop, struct rrec *r)
{
    cr_assert(run_until_count(loop, &r->calls, 1, 10 * (int64_t)MS, 100000));
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(atomic_load(&r->calls), 1);
}

Test(resolve_addr, numeric_flags_give_the_numbers)
{
    tern_loop *loop = loop_new_default();
    struct sockaddr_in in = loopback(80);
    struct rrec r = {0};
    cr_assert_eq(tern_resolve_addr(loop, (struct sockaddr *)&in, NI_NUMERICHOST | NI_NUMERICSERV,
                                   on_name, &r, NULL, &r.id), 0);
    cr_assert_eq(atomic_load(&r.calls), 0, "the callback ran inside the call");
    reverse_wait(loop, &r);
    cr_assert_eq(r.status, 0, "%s", tern_err_name(r.status));
    cr_assert_str_eq(r.host, "127.0.0.1");
    cr_assert_str_eq(r.serv, "80");
    loop_free_clean(loop);
}

Test(resolve_addr, gives_the_systems_name)
{
    /* Whatever name this system gives 127.0.0.1 (localhost, normally),
     * tern hands over the same one. */
    struct sockaddr_in in = loopback(0);
    char want[NI_MAXHOST];
    cr_assert_eq(getnameinfo((struct sockaddr *)&in, sizeof in, want, sizeof want, NULL, 0, 0), 0);
    tern_loop *loop = loop_new_default();
    struct rrec r = {0};
    cr_assert_eq(tern_resolve_addr(loop, (struct sockaddr *)&in, 0, on_name, &r, NULL, &r.id), 0);
    reverse_wait(loop, &r);
    cr_assert_eq(r.status, 0, "%s", tern_err_name(r.status));
    cr_assert_str_eq(r.host, want);
    loop_free_clean(loop);
}

Test(resolve_addr, ipv6_loopback)
{
    struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    tern_loop *loop = loop_new_default();
    struct rrec r = {0};
    cr_assert_eq(tern_resolve_addr(loop, (struct sockaddr *)&in6, NI_NUMERICHOST, on_name, &r,
                                   NULL, &r.id), 0);
    reverse_wait(loop, &r);
    cr_assert_eq(r.status, 0, "%s", tern_err_name(r.status));
    cr_assert_str_eq(r.host, "::1");
    loop_free_clean(loop);
}

Test(resolve_addr, a_failing_resolver_gives_its_code_and_no_names)
{
    use_fake(FAKE_FAIL);
    tern_loop *loop = loop_new_default();
    struct sockaddr_in in = loopback(0);
    struct rrec r = {0};
    cr_assert_eq(tern_resolve_addr(loop, (struct sockaddr *)&in, 0, on_name, &r, NULL, &r.id), 0);
    reverse_wait(loop, &r);
    cr_assert_eq(r.status, TERN_EAI_FAIL, "%s", tern_err_name(r.status));
    cr_assert(!r.had_names);
    cr_assert_eq(fake_calls(), 1);
    loop_free_clean(loop);
}

Test(resolve_addr, the_deadline_answers_a_stalled_resolver)
{
    use_fake(FAKE_STALL);
    tern_loop *loop = loop_new_default();
    struct sockaddr_in in = loopback(0);
    struct rrec r = {0};
    tern_job_options opts;
    tern_job_options_init(&opts);
    opts.timeout_ns = 50 * MS;
    cr_assert_eq(tern_resolve_addr(loop, (struct sockaddr *)&in, 0, on_name, &r, &opts, &r.id), 0);
    cr_assert(run_until_count(loop, &r.calls, 1, 10 * (int64_t)MS, 100000));
    cr_assert_eq(r.status, -ETIMEDOUT, "%s", tern_err_name(r.status));
    cr_assert(r.while_stalled, "the deadline waited for the resolver to return");
    cr_assert(!r.had_names);
    fake_release(); /* the late answer is dropped, never delivered */
    reverse_wait(loop, &r);
    loop_free_clean(loop);
}

Test(resolve_addr, cancel_while_running)
{
    use_fake(FAKE_STALL);
    tern_loop *loop = loop_new_default();
    struct sockaddr_in in = loopback(0);
    struct rrec r = {0};
    cr_assert_eq(tern_resolve_addr(loop, (struct sockaddr *)&in, 0, on_name, &r, NULL, &r.id), 0);
    while (fake_calls() == 0)
        tern_loop_run_once(loop, 1 * (int64_t)MS);
    cr_assert_eq(tern__test_cancel_now(loop, r.id), TERN_CANCEL_RUNNING);
    fake_release();
    reverse_wait(loop, &r);
    cr_assert_eq(r.status, -ECANCELED, "%s", tern_err_name(r.status));
    cr_assert(!r.had_names);
    loop_free_clean(loop);
}

Test(resolve_addr, bad_arguments_change_nothing)
{
    tern_loop *loop = loop_new_default();
    struct sockaddr_in in = loopback(0);
    struct sockaddr un = {.sa_family = AF_UNIX};
    tern_id id = 0;
    cr_assert_eq(tern_resolve_addr(loop, NULL, 0, on_name, NULL, NULL, &id), -EINVAL);
    cr_assert_eq(tern_resolve_addr(loop, (struct sockaddr *)&in, 0, NULL, NULL, NULL, &id),
                 -EINVAL);
    cr_assert_eq(tern_resolve_addr(loop, &un, 0, on_name, NULL, NULL, &id), -EAFNOSUPPORT);
    cr_assert_eq(id, 0);
    loop_free_clean(loop);
}
