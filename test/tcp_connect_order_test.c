/*
 * tern_tcp_connect over a lookup that answers several addresses
 * (include/tern/net.h): they are tried in order, an address the kernel
 * refuses at once (a TCP connect to the broadcast address: ENETUNREACH
 * from connect(2) itself, no waiting) does not end the attempt, and the
 * first address that accepts gives the stream; when every address fails
 * the callback gets the last one's error. Either way the callback runs
 * once, never inside the call, and on failure after it the close
 * callback, with a queued write completed -ECANCELED first. The lookup is
 * a fake installed through tern__set_getaddrinfo that chains numeric
 * answers.
 */
#include "loop_helpers.h"
#include "tested_backend.h"

#include <netdb.h>
#include <netinet/in.h>

static const char *answer[3]; /* the addresses the fake lookup gives, in order */

static struct addrinfo *numeric(const char *host, unsigned port)
{
    struct addrinfo h = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                         .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
    char serv[8];
    snprintf(serv, sizeof serv, "%u", port);
    struct addrinfo *r = NULL;
    cr_assert_eq(getaddrinfo(host, serv, &h, &r), 0, "%s", host);
    cr_assert_null(r->ai_next);
    return r;
}

static int fake_getaddrinfo(const char *host, const char *service, const struct addrinfo *hints,
                            struct addrinfo **res)
{
    (void)host, (void)hints;
    unsigned port = (unsigned)atoi(service);
    struct addrinfo *head = NULL, **tail = &head;
    for (int i = 0; i < 3 && answer[i] != NULL; i++) {
        *tail = numeric(answer[i], port);
        tail = &(*tail)->ai_next;
    }
    *res = head;
    return 0;
}

struct conn {
    atomic_uint done, closed, writes;
    int status, write_status;
    bool in_call;
    unsigned order; /* 1: done first, 2: write, then close */
    unsigned seq[3];
};

static void connect_cb(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id;
    struct conn *c = arg;
    cr_assert_not(c->in_call, "the connect callback ran inside tern_tcp_connect");
    c->status = status;
    c->seq[atomic_load(&c->done) ? 2 : 0] = ++c->order;
    atomic_fetch_add(&c->done, 1);
}

static void write_cb(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id;
    struct conn *c = arg;
    c->write_status = status;
    atomic_fetch_add(&c->writes, 1);
}

static void close_cb(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id;
    struct conn *c = arg;
    c->seq[1] = ++c->order;
    atomic_fetch_add(&c->closed, 1);
}

/* A kernel listener on 127.0.0.1 (connections complete in its backlog). */
static int listener(unsigned *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(fd, 8), 0);
    socklen_t len = sizeof a;
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

Test(tcp_connect_order, an_address_refused_at_once_is_passed_over_for_the_next,
     .timeout = TEST_TIMEOUT)
{
    tern__set_getaddrinfo(fake_getaddrinfo);
    tern_loop *loop = loop_new_tested();
    unsigned port;
    int lfd = listener(&port);
    answer[0] = "255.255.255.255";
    answer[1] = "127.0.0.1";
    answer[2] = NULL;
    static struct conn c;
    tern_id id;
    c.in_call = true;
    cr_assert_eq(tern_tcp_connect(loop, "two.test", port, 10 * SEC, connect_cb, &c, &id), 0);
    c.in_call = false;
    cr_assert(run_until_count(loop, &c.done, 1, 10 * (int64_t)MS, 2000), "no callback");
    cr_assert_eq(c.status, 0, "connect: %s", tern_err_name(c.status));
    int afd = accept(lfd, NULL, NULL);
    cr_assert_geq(afd, 0, "the stream is not connected to the listener");
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(atomic_load(&c.done), 1);
    close(afd);
    close(lfd);
    loop_free_clean(loop);
    tern__set_getaddrinfo(NULL);
}

Test(tcp_connect_order, every_address_refused_gives_the_last_error_once_then_the_close,
     .timeout = TEST_TIMEOUT)
{
    tern__set_getaddrinfo(fake_getaddrinfo);
    tern_loop *loop = loop_new_tested();
    unsigned port;
    int lfd = listener(&port);
    close(lfd); /* 127.0.0.1:port now refuses, after a wait for the answer */
    answer[0] = "127.0.0.1";
    answer[1] = "255.255.255.255";
    answer[2] = NULL;
    static struct conn c;
    tern_id id;
    c.in_call = true;
    cr_assert_eq(tern_tcp_connect(loop, "two.test", port, 10 * SEC, connect_cb, &c, &id), 0);
    c.in_call = false;
    cr_assert_eq(tern_stream_on_close(loop, id, close_cb, &c), 0);
    tern_buf b = {.base = "x", .len = 1};
    cr_assert_eq(tern_stream_write(loop, id, &b, 1, write_cb, &c), 0);
    cr_assert(run_until_count(loop, &c.closed, 1, 10 * (int64_t)MS, 2000), "no close");
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(atomic_load(&c.done), 1, "the connect callback ran %u times",
                 atomic_load(&c.done));
    cr_assert_eq(c.status, -ENETUNREACH, "not the last address's error: %s",
                 tern_err_name(c.status));
    cr_assert_eq(atomic_load(&c.writes), 1);
    cr_assert_eq(c.write_status, -ECANCELED);
    cr_assert_eq(c.seq[0], 1, "the connect callback was not first");
    cr_assert_eq(c.seq[1], 2, "the close callback was not after it");
    loop_free_clean(loop);
    tern__set_getaddrinfo(NULL);
}
