/*
 * Listeners and connects on their less travelled paths
 * (include/tern/net.h): an accept that fails with EPROTO or EPERM (the
 * connection died in the queue, a firewall refused it) is passed over and
 * the next connection is accepted, with no error told; an accept callback
 * that closes its listener hears of no more connections from the same
 * readiness; a Unix connect or listen interrupted (EINTR) is tried again;
 * a Unix listen that fails at listen() on an abstract name leaves the name
 * free; a Unix connect the system finishes later (EINPROGRESS) is waited
 * for, has no peer credentials meanwhile (-ENOTCONN), and a socket that
 * hangs up without ever connecting is told -ECONNREFUSED; control
 * messages other than passed descriptors are ignored; a TCP connect that
 * failed inside the call leaves a stream that is no terminal (-ENOTTY)
 * and not connected (-ENOTCONN, reading refused too) until its callback
 * closes it; handles opened without asking for their id are closed by
 * tern_loop_free; a listen with TERN_TCP_REUSEPORT that fails at any of
 * its steps leaves nothing open, and a Unix listen out of memory leaves
 * no socket file behind; a connect the system completes at once sends
 * the writes queued before it; a lookup that answers no address is a
 * refused connect and an unavailable listen address. Failures are injected through the stream and
 * descriptor fault seams (backends/fault.h) and lookups through the
 * getaddrinfo seam (runtime/core/testing.h).
 */
#include "net_paths_helpers.h"
#include "tested_backend.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <netdb.h>
#include <sys/un.h>

struct acc {
    atomic_uint accepted, errors;
    int status;
    tern_id listener;
    bool close_listener;
};

static void on_accept(tern_loop *loop, tern_id listener, int status, tern_id stream, void *arg)
{
    struct acc *a = arg;
    if (status < 0) {
        a->status = status;
        atomic_fetch_add(&a->errors, 1);
        return;
    }
    atomic_fetch_add(&a->accepted, 1);
    cr_assert_eq(tern_stream_close(loop, stream), 0);
    if (a->close_listener)
        cr_assert_eq(tern_stream_close(loop, listener), 0);
}

static int raw_connect(unsigned port)
{
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(c, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(c, (struct sockaddr *)&sin, sizeof sin), 0);
    return c;
}

static void accept_passes_over(int err)
{
    tern_loop *loop = loop_new_tested();
    static struct acc a;
    memset(&a, 0, sizeof a);
    tern_id l;
    cr_assert_eq(
        tern_tcp_listen(loop, "127.0.0.1", 0, TERN_TCP_BACKLOG_DEFAULT, 0, on_accept, &a, &l), 0);
    unsigned port = 0;
    cr_assert_eq(tern_tcp_port(loop, l, &port), 0);
    int c = raw_connect(port);
    /* The listener's accept is the only stream call the next turns make. */
    tern__fault_net_errno(-err);
    tern__fault_arm(TERN__FAULT_STREAM, 1);
    cr_assert(run_until_count(loop, &a.accepted, 1, 10 * (int64_t)MS, 500));
    cr_assert(tern__fault_fired(), "the accept did not fail: the test proves nothing");
    fault_off();
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&a.errors), 0, "an accept failing with %s was told: %s", strerror(err),
                 tern_err_name(a.status));
    cr_assert_eq(atomic_load(&a.accepted), 1);
    cr_assert_eq(tern_stream_close(loop, l), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(c);
}

Test(connect_paths, an_accept_failing_with_eproto_is_passed_over, .timeout = TEST_TIMEOUT)
{
    accept_passes_over(EPROTO);
}

Test(connect_paths, an_accept_failing_with_eperm_is_passed_over, .timeout = TEST_TIMEOUT)
{
    accept_passes_over(EPERM);
}

Test(connect_paths, an_accept_failing_with_econnaborted_is_passed_over, .timeout = TEST_TIMEOUT)
{
    accept_passes_over(ECONNABORTED);
}

Test(connect_paths, an_accept_interrupted_is_passed_over, .timeout = TEST_TIMEOUT)
{
    accept_passes_over(EINTR);
}

Test(connect_paths, a_listener_closed_by_its_accept_callback_accepts_no_more,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    static struct acc a = {.close_listener = true};
    tern_id l;
    cr_assert_eq(
        tern_tcp_listen(loop, "127.0.0.1", 0, TERN_TCP_BACKLOG_DEFAULT, 0, on_accept, &a, &l), 0);
    unsigned port = 0;
    cr_assert_eq(tern_tcp_port(loop, l, &port), 0);
    /* Both wait in the backlog before the listener first hears of them. */
    int c1 = raw_connect(port), c2 = raw_connect(port);
    cr_assert(run_until_count(loop, &a.accepted, 1, 10 * (int64_t)MS, 500));
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(atomic_load(&a.accepted), 1, "a closed listener accepted %u connections",
                 atomic_load(&a.accepted));
    cr_assert_eq(atomic_load(&a.errors), 0);
    loop_free_clean(loop);
    close(c1);
    close(c2);
}

struct conn {
    atomic_uint told;
    int status;
};

static void on_connect(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id;
    struct conn *c = arg;
    c->status = status;
    atomic_fetch_add(&c->told, 1);
}

static void sock_path(char *out, size_t n, const char *what)
{
    snprintf(out, n, "/tmp/tern-%s-%d.sock", what, (int)getpid());
    (void)unlink(out);
}

Test(connect_paths, an_interrupted_unix_connect_is_tried_again, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    char path[108];
    sock_path(path, sizeof path, "eintr");
    static struct acc a;
    tern_id l, s;
    cr_assert_eq(tern_unix_listen(loop, path, TERN_TCP_BACKLOG_DEFAULT, on_accept, &a, &l), 0);
    static struct conn c;
    tern__fault_net_errno(-EINTR);
    tern__fault_arm(TERN__FAULT_STREAM, 1);
    cr_assert_eq(tern_unix_connect(loop, path, on_connect, &c, &s), 0);
    cr_assert(tern__fault_fired());
    fault_off();
    cr_assert(run_until_count(loop, &c.told, 1, 10 * (int64_t)MS, 500));
    cr_assert_eq(c.status, 0, "the connect ended with %s", tern_err_name(c.status));
    cr_assert(run_until_count(loop, &a.accepted, 1, 10 * (int64_t)MS, 500));
    cr_assert_eq(tern_stream_close(loop, s), 0);
    cr_assert_eq(tern_stream_close(loop, l), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    cr_assert_eq(unlink(path), 0);
}

Test(connect_paths, a_unix_listen_failing_on_an_abstract_name_leaves_it_free,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    char name[64];
    snprintf(name, sizeof name, "@tern-listen-fail-%d", (int)getpid());
    static struct acc a;
    tern_id l = 0;
    /* The stream calls of a Unix listen: bind (1), listen (2). */
    tern__fault_arm(TERN__FAULT_STREAM, 2);
    cr_assert_eq(tern_unix_listen(loop, name, TERN_TCP_BACKLOG_DEFAULT, on_accept, &a, &l),
                 -ENOBUFS);
    cr_assert(tern__fault_fired());
    fault_off();
    cr_assert_eq(l, 0);
    cr_assert_eq(loop_live(loop), 0);
    cr_assert_eq(tern_unix_listen(loop, name, TERN_TCP_BACKLOG_DEFAULT, on_accept, &a, &l), 0,
                 "the name stayed taken after a failed listen");
    cr_assert_eq(tern_stream_close(loop, l), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}

Test(connect_paths, a_unix_connect_finished_later_is_waited_for, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    char path[108];
    sock_path(path, sizeof path, "later");
    static struct acc a;
    tern_id l, s;
    cr_assert_eq(tern_unix_listen(loop, path, TERN_TCP_BACKLOG_DEFAULT, on_accept, &a, &l), 0);
    static struct conn c;
    /* The system says "in progress" and the socket never connects: it
     * reports a hang-up with no error, which is a refusal. */
    tern__fault_net_errno(-EINPROGRESS);
    tern__fault_arm(TERN__FAULT_STREAM, 1);
    cr_assert_eq(tern_unix_connect(loop, path, on_connect, &c, &s), 0);
    cr_assert(tern__fault_fired());
    fault_off();
    tern_unix_cred cred;
    cr_assert_eq(tern_unix_peer_cred(loop, s, &cred), -ENOTCONN);
    cr_assert_eq(atomic_load(&c.told), 0, "the connect was told inside the call");
    cr_assert(run_until_count(loop, &c.told, 1, 10 * (int64_t)MS, 500));
    cr_assert_eq(c.status, -ECONNREFUSED, "the connect ended with %s", tern_err_name(c.status));
    cr_assert_eq(tern_unix_peer_cred(loop, s, &cred), -ENOENT, "a refused stream stayed open");
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&c.told), 1);
    cr_assert_eq(atomic_load(&a.accepted), 0);
    cr_assert_eq(tern_stream_close(loop, l), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    cr_assert_eq(unlink(path), 0);
}

struct rd {
    atomic_uint reads;
    char got[16];
    size_t len;
};

static void on_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                    void *arg)
{
    (void)loop, (void)id;
    struct rd *r = arg;
    cr_assert_eq(status, 0, "read: %s", tern_err_name(status));
    cr_assert_leq(r->len + len, sizeof r->got);
    memcpy(r->got + r->len, data, len);
    r->len += len;
    atomic_fetch_add(&r->reads, 1);
}

Test(connect_paths, control_messages_other_than_descriptors_are_ignored, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    int one = 1;
    /* Every message now carries the sender's credentials (SCM_CREDENTIALS). */
    cr_assert_eq(setsockopt(sv[0], SOL_SOCKET, SO_PASSCRED, &one, sizeof one), 0);
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, sv[0], &id), 0);
    static struct rd r;
    cr_assert_eq(tern_stream_read_start(loop, id, on_read, &r), 0);
    cr_assert_eq(write(sv[1], "cred", 4), 4);
    cr_assert(run_until_count(loop, &r.reads, 1, 10 * (int64_t)MS, 500));
    cr_assert_eq(r.len, 4);
    cr_assert(memcmp(r.got, "cred", 4) == 0);
    cr_assert_eq(tern_unix_take_fd(loop, id), -EAGAIN, "credentials were taken for a descriptor");
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(sv[1]);
}

Test(connect_paths, a_connect_failed_inside_the_call_is_neither_terminal_nor_connected,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    static struct conn c;
    tern_id s;
    /* A numeric address connects inside the call; its socket is refused. */
    tern__fault_arm(TERN__FAULT_FD, 1);
    cr_assert_eq(tern_tcp_connect(loop, "127.0.0.1", 9, 0, on_connect, &c, &s), 0);
    cr_assert(tern__fault_fired());
    fault_off();
    unsigned cols, rows;
    cr_assert_eq(tern_tty_set_mode(loop, s, TERN_TTY_RAW), -ENOTTY);
    cr_assert_eq(tern_tty_winsize(loop, s, &cols, &rows), -ENOTTY);
    cr_assert_eq(tern_tcp_nodelay(loop, s, true), -ENOTCONN);
    tern_buf buf = {"x", 1};
    cr_assert_eq(tern_stream_try_write(loop, s, &buf, 1), -ENOTCONN);
    static struct rd r;
    cr_assert_eq(tern_stream_read_start(loop, s, on_read, &r), -ENOTCONN);
    cr_assert_eq(atomic_load(&c.told), 0, "the connect was told inside the call");
    cr_assert(run_until_count(loop, &c.told, 1, 10 * (int64_t)MS, 500));
    cr_assert_eq(c.status, -EMFILE, "the connect ended with %s", tern_err_name(c.status));
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(atomic_load(&r.reads), 0);
    loop_free_clean(loop);
}

static void on_connect_ignore(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id, (void)status, (void)arg;
}

Test(connect_paths, handles_opened_without_their_id_are_closed_by_loop_free,
     .timeout = TEST_TIMEOUT)
{
    int before = count_open_fds_settled();
    tern_loop *loop = loop_new_tested();
    static struct acc a;
    char path[108];
    sock_path(path, sizeof path, "noid");
    cr_assert_eq(
        tern_tcp_listen(loop, "127.0.0.1", 0, TERN_TCP_BACKLOG_DEFAULT, 0, on_accept, &a, NULL), 0);
    cr_assert_eq(tern_unix_listen(loop, path, TERN_TCP_BACKLOG_DEFAULT, on_accept, &a, NULL), 0);
    cr_assert_eq(tern_unix_connect(loop, path, on_connect_ignore, NULL, NULL), 0);
    cr_assert_eq(tern_tcp_listen_name(loop, "127.0.0.1", 0, TERN_TCP_BACKLOG_DEFAULT, 0, 0,
                                      on_connect_ignore, on_accept, &a, NULL),
                 0);
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    cr_assert_eq(tern_stream_open(loop, sv[0], NULL), 0);
    cr_assert_eq(loop_live(loop), 5);
    tern_loop_free(loop);
    close(sv[1]);
    cr_assert_eq(count_open_fds_settled(), before, "loop_free left descriptors open");
    cr_assert_eq(unlink(path), 0);
}

Test(connect_paths, a_listen_sharing_its_port_fails_whole_at_each_step, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    static struct acc a;
    int before = count_open_fds_settled();
    uint64_t n = 1;
    for (;; n++) {
        tern_id l = 0;
        tern__fault_arm(TERN__FAULT_STREAM, n);
        int rc = tern_tcp_listen(loop, "127.0.0.1", 0, TERN_TCP_BACKLOG_DEFAULT, TERN_TCP_REUSEPORT,
                                 on_accept, &a, &l);
        bool fired = tern__fault_fired();
        fault_off();
        if (!fired) {
            cr_assert_eq(rc, 0, "the listen failed on its own: %s", tern_err_name(rc));
            cr_assert_eq(tern_stream_close(loop, l), 0);
            cr_assert(run_until_nothing_live(loop));
            break;
        }
        cr_assert_eq(rc, -ENOBUFS, "step %llu failed with %s", (unsigned long long)n,
                     tern_err_name(rc));
        cr_assert_eq(l, 0);
        cr_assert_eq(loop_live(loop), 0);
        cr_assert_eq(count_open_fds_settled(), before, "step %llu left a socket open",
                     (unsigned long long)n);
    }
    /* SO_REUSEADDR, SO_REUSEPORT, bind and listen each failed once. */
    cr_assert_eq(n, 5, "the listen made %llu stream calls", (unsigned long long)n - 1);
    loop_free_clean(loop);
}

Test(connect_paths, a_unix_listen_out_of_memory_leaves_no_socket_file, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    char path[108];
    sock_path(path, sizeof path, "nomem");
    static struct acc a;
    tern_id l = 0;
    uint64_t n = 1;
    for (;; n++) {
        tern__fault_arm(TERN__FAULT_ALLOC, n);
        int rc = tern_unix_listen(loop, path, TERN_TCP_BACKLOG_DEFAULT, on_accept, &a, &l);
        bool fired = tern__fault_fired();
        fault_off();
        if (!fired) {
            cr_assert_eq(rc, 0, "the listen failed on its own: %s", tern_err_name(rc));
            break;
        }
        cr_assert_eq(rc, -ENOMEM, "allocation %llu: %s", (unsigned long long)n, tern_err_name(rc));
        cr_assert_eq(access(path, F_OK), -1, "allocation %llu left the socket file",
                     (unsigned long long)n);
        cr_assert_eq(loop_live(loop), 0);
    }
    cr_assert_gt(n, 1, "the listen allocated nothing: the test proves nothing");
    cr_assert_eq(tern_stream_close(loop, l), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    cr_assert_eq(unlink(path), 0);
}

/*
 * Lookups answered by the test (runtime/core/testing.h's getaddrinfo seam):
 * one Unix-domain address, whose connect the system completes at once
 * (a TCP connect on loopback is always "in progress"), or no address
 * at all. The answer is one allocation, as freeaddrinfo frees it.
 */
static char answer_path[108];

static int unix_getaddrinfo(const char *host, const char *service, const struct addrinfo *hints,
                            struct addrinfo **res)
{
    (void)host, (void)service, (void)hints;
    struct answer {
        struct addrinfo ai;
        struct sockaddr_un sun;
    } *a = calloc(1, sizeof *a);
    if (a == NULL)
        return EAI_MEMORY;
    a->sun.sun_family = AF_UNIX;
    memcpy(a->sun.sun_path, answer_path, strlen(answer_path) + 1);
    a->ai = (struct addrinfo){.ai_family = AF_UNIX,
                              .ai_socktype = SOCK_STREAM,
                              .ai_addrlen = sizeof a->sun,
                              .ai_addr = (struct sockaddr *)&a->sun};
    *res = &a->ai;
    return 0;
}

static int empty_getaddrinfo(const char *host, const char *service, const struct addrinfo *hints,
                             struct addrinfo **res)
{
    (void)host, (void)service, (void)hints;
    *res = NULL;
    return 0;
}

static void on_sent(tern_loop *loop, tern_id id, int status, void *arg)
{
    on_connect(loop, id, status, arg);
}

struct keep {
    atomic_uint accepted;
    tern_id stream;
};

static void on_accept_keep(tern_loop *loop, tern_id listener, int status, tern_id stream, void *arg)
{
    (void)loop, (void)listener;
    struct keep *k = arg;
    cr_assert_eq(status, 0);
    k->stream = stream;
    atomic_fetch_add(&k->accepted, 1);
}

Test(connect_paths, a_connect_the_system_completes_at_once_sends_what_was_queued,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    sock_path(answer_path, sizeof answer_path, "atonce");
    static struct keep k;
    tern_id l, s;
    cr_assert_eq(
        tern_unix_listen(loop, answer_path, TERN_TCP_BACKLOG_DEFAULT, on_accept_keep, &k, &l), 0);
    tern__set_getaddrinfo(unix_getaddrinfo);
    static struct conn c, w;
    cr_assert_eq(tern_tcp_connect(loop, "by-name", 1, 0, on_connect, &c, &s), 0);
    tern_buf buf = {"queued", 6};
    cr_assert_eq(tern_stream_write(loop, s, &buf, 1, on_sent, &w), 0);
    cr_assert(run_until_count(loop, &c.told, 1, 10 * (int64_t)MS, 500));
    tern__set_getaddrinfo(NULL);
    cr_assert_eq(c.status, 0, "the connect ended with %s", tern_err_name(c.status));
    cr_assert(run_until_count(loop, &w.told, 1, 10 * (int64_t)MS, 500));
    cr_assert_eq(w.status, 0, "the queued write ended with %s", tern_err_name(w.status));
    cr_assert(run_until_count(loop, &k.accepted, 1, 10 * (int64_t)MS, 500));
    static struct rd r;
    cr_assert_eq(tern_stream_read_start(loop, k.stream, on_read, &r), 0);
    cr_assert(run_until_count(loop, &r.reads, 1, 10 * (int64_t)MS, 500));
    cr_assert_eq(r.len, 6);
    cr_assert(memcmp(r.got, "queued", 6) == 0);
    cr_assert_eq(tern_stream_close(loop, s), 0);
    cr_assert_eq(tern_stream_close(loop, k.stream), 0);
    cr_assert_eq(tern_stream_close(loop, l), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    cr_assert_eq(unlink(answer_path), 0);
}

/* A named listen's ready callback shares its argument with the accept
 * callback: it reports here. */
static struct conn ready;

static void on_ready(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)arg;
    on_connect(loop, id, status, &ready);
}

Test(connect_paths, a_lookup_answering_no_address_is_refused, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    tern__set_getaddrinfo(empty_getaddrinfo);
    static struct conn c;
    static struct acc a;
    tern_id s, l;
    cr_assert_eq(tern_tcp_connect(loop, "nowhere", 1, 0, on_connect, &c, &s), 0);
    cr_assert_eq(tern_tcp_listen_name(loop, "nowhere", 0, TERN_TCP_BACKLOG_DEFAULT, 0, 0, on_ready,
                                      on_accept, &a, &l),
                 0);
    cr_assert(run_until_count(loop, &c.told, 1, 10 * (int64_t)MS, 500));
    cr_assert(run_until_count(loop, &ready.told, 1, 10 * (int64_t)MS, 500));
    tern__set_getaddrinfo(NULL);
    cr_assert_eq(c.status, -ECONNREFUSED, "the connect ended with %s", tern_err_name(c.status));
    cr_assert_eq(ready.status, -EADDRNOTAVAIL, "the listen ended with %s",
                 tern_err_name(ready.status));
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}
