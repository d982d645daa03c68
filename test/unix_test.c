/*
 * Unix-domain streams (include/tern/net.h), run on every backend built:
 * listening and connecting by path and by abstract name, the peer's
 * credentials, passing descriptors with a write and taking them after a
 * read, closing with descriptors in flight (each closed exactly once,
 * none leaked), and bad input (a path too long for sun_path creates
 * nothing; nobody listening; a write_fds on a pipe).
 */
#include "loop_helpers.h"

#include <limits.h>
#include <sys/stat.h>
#include <sys/un.h>

struct conn {
    tern_id listener, server, client;
    atomic_uint accepted, connected, closed, written;
    int connect_status, write_status;
    char got[256];
    size_t got_len;
    int taken[8];
    unsigned ntaken;
    atomic_uint reads;
};

static void on_close(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    atomic_fetch_add(&((struct conn *)arg)->closed, 1);
}

static void on_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                    void *arg)
{
    struct conn *c = arg;
    if (status < 0 || len == 0)
        return;
    cr_assert_leq(c->got_len + len, sizeof(c->got));
    memcpy(c->got + c->got_len, data, len);
    c->got_len += len;
    int fd;
    while (c->ntaken < 8 && (fd = tern_unix_take_fd(loop, id)) >= 0)
        c->taken[c->ntaken++] = fd;
    atomic_fetch_add(&c->reads, 1);
}

static void on_accept(tern_loop *loop, tern_id listener, int status, tern_id stream, void *arg)
{
    (void)listener;
    struct conn *c = arg;
    cr_assert_eq(status, 0, "accept: %s", tern_strerror(status));
    c->server = stream;
    cr_assert_eq(tern_stream_on_close(loop, stream, on_close, c), 0);
    atomic_fetch_add(&c->accepted, 1);
}

static void on_connect(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop;
    (void)id;
    struct conn *c = arg;
    c->connect_status = status;
    atomic_fetch_add(&c->connected, 1);
}

static void on_written(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop;
    (void)id;
    struct conn *c = arg;
    c->write_status = status;
    atomic_fetch_add(&c->written, 1);
}

/* Whether every write end of the pipe read by fd is closed (end of file). */
static bool writers_gone(int fd, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int rc;
    do
        rc = poll(&p, 1, timeout_ms);
    while (rc < 0 && errno == EINTR);
    if (rc != 1 || !(p.revents & (POLLIN | POLLHUP)))
        return false;
    char ch;
    return read(fd, &ch, 1) == 0;
}

static void sock_path(char *buf, size_t len, const char *tag)
{
    snprintf(buf, len, "/tmp/tern-unix-%s-%d", tag, (int)getpid());
    unlink(buf);
}

/* Listen at name, connect to it, and wait for both ends. */
static void pair_up(tern_loop *loop, const char *name, struct conn *c)
{
    cr_assert_eq(tern_unix_listen(loop, name, TERN_TCP_BACKLOG_DEFAULT, on_accept, c,
                                  &c->listener), 0);
    cr_assert_eq(tern_unix_connect(loop, name, on_connect, c, &c->client), 0);
    cr_assert_eq(atomic_load(&c->connected), 0, "the connect callback ran inside the call");
    cr_assert(run_until_count(loop, &c->connected, 1, 10 * MS, 1000));
    cr_assert_eq(c->connect_status, 0, "connect: %s", tern_strerror(c->connect_status));
    cr_assert(run_until_count(loop, &c->accepted, 1, 10 * MS, 1000));
}

static void close_all(tern_loop *loop, struct conn *c)
{
    cr_assert_eq(tern_stream_close(loop, c->client), 0);
    cr_assert_eq(tern_stream_close(loop, c->server), 0);
    cr_assert_eq(tern_stream_close(loop, c->listener), 0);
    cr_assert(run_until_nothing_live(loop));
}

static void echo_once(tern_loop *loop, struct conn *c)
{
    cr_assert_eq(tern_stream_read_start(loop, c->server, on_read, c), 0);
    tern_buf b = {"hello", 5};
    cr_assert_eq(tern_stream_write(loop, c->client, &b, 1, on_written, c), 0);
    cr_assert(run_until_count(loop, &c->reads, 1, 10 * MS, 1000));
    cr_assert_eq(c->got_len, 5);
    cr_assert(memcmp(c->got, "hello", 5) == 0);
}

BACKEND_TEST(unix, listen_and_connect_by_path)
{
    tern_loop *loop = loop_new_backend(backend);
    char path[64];
    sock_path(path, sizeof path, "path");
    static struct conn c;
    memset(&c, 0, sizeof c);
    pair_up(loop, path, &c);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert(S_ISSOCK(st.st_mode));
    echo_once(loop, &c);
    close_all(loop, &c);
    /* The socket file is the caller's: closing leaves it. */
    cr_assert_eq(stat(path, &st), 0);
    unlink(path);
    loop_free_clean(loop);
}

BACKEND_TEST(unix, abstract_name_creates_no_file)
{
#ifdef __linux__
    tern_loop *loop = loop_new_backend(backend);
    char name[64];
    snprintf(name, sizeof name, "@tern-abstract-%d", (int)getpid());
    static struct conn c;
    memset(&c, 0, sizeof c);
    pair_up(loop, name, &c);
    struct stat st;
    cr_assert_neq(stat(name, &st), 0, "an abstract name created a file");
    cr_assert_neq(stat(name + 1, &st), 0, "an abstract name created a file");
    echo_once(loop, &c);
    close_all(loop, &c);
    loop_free_clean(loop);
#else
    (void)backend;
#endif
}

BACKEND_TEST(unix, peer_credentials_name_this_process)
{
    tern_loop *loop = loop_new_backend(backend);
    char path[64];
    sock_path(path, sizeof path, "cred");
    static struct conn c;
    memset(&c, 0, sizeof c);
    pair_up(loop, path, &c);
    tern_unix_cred cr;
    cr_assert_eq(tern_unix_peer_cred(loop, c.server, &cr), 0);
    cr_assert_eq(cr.uid, (unsigned long)getuid());
    cr_assert_eq(cr.gid, (unsigned long)getgid());
#ifdef __linux__
    cr_assert_eq(cr.pid, (long)getpid());
#endif
    cr_assert_eq(tern_unix_peer_cred(loop, c.client, &cr), 0);
    cr_assert_eq(cr.uid, (unsigned long)getuid());
    close_all(loop, &c);
    unlink(path);
    loop_free_clean(loop);
}

BACKEND_TEST(unix, descriptors_pass_with_a_write_and_arrive_with_the_read)
{
    tern_loop *loop = loop_new_backend(backend);
    char path[64];
    sock_path(path, sizeof path, "pass");
    static struct conn c;
    memset(&c, 0, sizeof c);
    pair_up(loop, path, &c);
    int p[2];
    make_pipe(p);
    cr_assert_eq(tern_stream_read_start(loop, c.server, on_read, &c), 0);
    /* A plain write first: its bytes must not carry the descriptors. */
    tern_buf b0 = {"ab", 2};
    cr_assert_eq(tern_stream_write(loop, c.client, &b0, 1, on_written, &c), 0);
    tern_buf b = {"fd", 2};
    int pass[2] = {p[0], p[1]};
    cr_assert_eq(tern_unix_write_fds(loop, c.client, &b, 1, pass, 2, on_written, &c), 0);
    /* tern holds duplicates: the caller's own may go at once. */
    close(p[0]);
    close(p[1]);
    cr_assert(run_until_count(loop, &c.written, 2, 10 * MS, 1000));
    cr_assert_eq(c.write_status, 0);
    for (unsigned t = 0; t < 1000 && (c.got_len < 4 || c.ntaken < 2); t++)
        tern_loop_run_once(loop, 10 * MS);
    cr_assert_eq(c.got_len, 4);
    cr_assert(memcmp(c.got, "abfd", 4) == 0);
    cr_assert_eq(c.ntaken, 2, "descriptors received: %u", c.ntaken);
    cr_assert(fcntl(c.taken[0], F_GETFD) & FD_CLOEXEC);
    /* They are the pipe: write one end, read the other. */
    write_byte(c.taken[1]);
    cr_assert(fd_readable_now(c.taken[0], 1000));
    cr_assert_eq(tern_unix_take_fd(loop, c.server), -EAGAIN);
    close(c.taken[0]);
    close(c.taken[1]);
    close_all(loop, &c);
    unlink(path);
    loop_free_clean(loop);
}

/* A passed descriptor nobody took is closed with the stream: the pipe's
 * write end then has no holder left, and its read end sees end of file. */
BACKEND_TEST(unix, descriptors_in_flight_are_closed_exactly_once)
{
    tern_loop *loop = loop_new_backend(backend);
    char path[64];
    sock_path(path, sizeof path, "flight");
    static struct conn c;
    memset(&c, 0, sizeof c);
    pair_up(loop, path, &c);
    int p[2];
    make_pipe(p);
    /* One write received but never taken, one still queued behind a stopped
     * reader: both hold a copy of p[1]. */
    tern_buf b = {"x", 1};
    cr_assert_eq(tern_unix_write_fds(loop, c.client, &b, 1, &p[1], 1, on_written, &c), 0);
    close(p[1]);
    cr_assert(run_until_count(loop, &c.written, 1, 10 * MS, 1000));
    cr_assert_eq(tern_stream_read_start(loop, c.server, on_read, &c), 0);
    /* Read the byte, but leave the descriptor untaken. */
    c.ntaken = 8;
    cr_assert(run_until_count(loop, &c.reads, 1, 10 * MS, 1000));
    cr_assert(!writers_gone(p[0], 0), "the write end was closed too early");
    cr_assert_eq(tern_stream_close(loop, c.server), 0);
    cr_assert(writers_gone(p[0], 1000), "a received descriptor leaked at close");
    cr_assert_eq(tern_stream_close(loop, c.client), 0);
    cr_assert_eq(tern_stream_close(loop, c.listener), 0);
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(atomic_load(&c.closed), 1, "close callback ran %u times",
                 atomic_load(&c.closed));
    close(p[0]);
    unlink(path);
    loop_free_clean(loop);
}

/* A write that passes descriptors, cancelled before it went out: its
 * duplicates are closed once, by the cancellation. */
BACKEND_TEST(unix, a_cancelled_write_closes_its_duplicates)
{
    tern_loop *loop = loop_new_backend(backend);
    char path[64];
    sock_path(path, sizeof path, "cancel");
    static struct conn c;
    memset(&c, 0, sizeof c);
    pair_up(loop, path, &c);
    int p[2];
    make_pipe(p);
    /* Fill the socket so the next write has to wait in the queue. */
    static char big[1 << 20];
    tern_buf bb = {big, sizeof big};
    int rc = tern_stream_write(loop, c.client, &bb, 1, on_written, &c);
    cr_assert(rc == 0 || rc == 1);
    tern_buf b = {"x", 1};
    rc = tern_unix_write_fds(loop, c.client, &b, 1, &p[1], 1, on_written, &c);
    cr_assert(rc == 0 || rc == 1);
    close(p[1]);
    size_t q;
    cr_assert_eq(tern_stream_write_queue_size(loop, c.client, &q), 0);
    cr_assert_gt(q, 0, "the socket took a megabyte; the test proves nothing");
    cr_assert(!writers_gone(p[0], 0));
    cr_assert_eq(tern_stream_close(loop, c.client), 0);
    cr_assert(writers_gone(p[0], 1000), "a queued write's duplicate leaked");
    cr_assert(run_until_count(loop, &c.written, 2, 10 * MS, 1000));
    cr_assert_eq(c.write_status, -ECANCELED);
    cr_assert_eq(tern_stream_close(loop, c.server), 0);
    cr_assert_eq(tern_stream_close(loop, c.listener), 0);
    cr_assert(run_until_nothing_live(loop));
    close(p[0]);
    unlink(path);
    loop_free_clean(loop);
}

static void never(tern_loop *loop, tern_id l, int status, tern_id s, void *arg)
{
    (void)loop, (void)l, (void)status, (void)s, (void)arg;
    cr_assert_fail("accept callback ran");
}

static void never_cb(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id, (void)status, (void)arg;
    cr_assert_fail("callback ran");
}

BACKEND_TEST(unix, bad_input_changes_nothing)
{
    tern_loop *loop = loop_new_backend(backend);
    int before = count_open_fds();
    char longp[sizeof(((struct sockaddr_un *)0)->sun_path) + 8];
    memset(longp, 'a', sizeof longp - 1);
    longp[0] = '/';
    longp[sizeof longp - 1] = '\0';
    tern_id id = 0;
    cr_assert_eq(tern_unix_listen(loop, longp, 8, never, NULL, &id), -ENAMETOOLONG);
    cr_assert_eq(tern_unix_connect(loop, longp, never_cb, NULL, &id), -ENAMETOOLONG);
    /* Exactly one byte too long (no room for the NUL). */
    char edge[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
    snprintf(edge, sizeof edge, "/tmp/tern-%d-", (int)getpid());
    size_t k = strlen(edge);
    memset(edge + k, 'b', sizeof edge - 1 - k);
    edge[sizeof edge - 1] = '\0';
    cr_assert_eq(tern_unix_listen(loop, edge, 8, never, NULL, &id), -ENAMETOOLONG);
    struct stat st;
    cr_assert_neq(stat(edge, &st), 0, "a refused listen created a file");
    cr_assert_eq(tern_unix_listen(loop, "", 8, never, NULL, &id), -EINVAL);
    cr_assert_eq(tern_unix_listen(loop, "/tmp/x", 8, NULL, NULL, &id), -EINVAL);
    cr_assert_eq(tern_unix_connect(loop, "/tmp/x", NULL, NULL, &id), -EINVAL);
    cr_assert_eq(count_open_fds(), before, "a refused call left a descriptor open");
    cr_assert_eq(loop_live(loop), 0);
    /* write_fds on a stream that is not a Unix-domain socket. */
    int p[2];
    make_pipe(p);
    tern_id ps;
    cr_assert_eq(tern_stream_open(loop, p[1], &ps), 0);
    tern_buf b = {"x", 1};
    cr_assert_eq(tern_unix_write_fds(loop, ps, &b, 1, &p[0], 1, never_cb, NULL), -EINVAL);
    tern_buf empty = {"", 0};
    cr_assert_eq(tern_unix_write_fds(loop, ps, &empty, 1, &p[0], 1, never_cb, NULL), -EINVAL);
    int bad = -1;
    cr_assert_eq(tern_unix_write_fds(loop, ps, &b, 1, &bad, 1, never_cb, NULL), -EBADF);
    tern_unix_cred cr;
    cr_assert_eq(tern_unix_peer_cred(loop, ps, &cr), -ENOTSOCK);
    cr_assert_eq(tern_stream_close(loop, ps), 0);
    close(p[0]);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}

static void connect_failed(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)id;
    struct conn *c = arg;
    c->connect_status = status;
    cr_assert_eq(tern_stream_close(loop, id), -ENOENT, "a failed connect left the id live");
    atomic_fetch_add(&c->connected, 1);
}

BACKEND_TEST(unix, connect_to_nothing_fails_in_the_callback)
{
    tern_loop *loop = loop_new_backend(backend);
    char path[64];
    sock_path(path, sizeof path, "none");
    static struct conn c;
    memset(&c, 0, sizeof c);
    tern_id id;
    cr_assert_eq(tern_unix_connect(loop, path, connect_failed, &c, &id), 0);
    cr_assert_eq(atomic_load(&c.connected), 0);
    cr_assert(run_until_count(loop, &c.connected, 1, 10 * MS, 100));
    cr_assert_eq(c.connect_status, -ENOENT, "%s", tern_strerror(c.connect_status));
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}

/* tern_loop_free with a passed descriptor untaken and a write queued. */
BACKEND_TEST(unix, loop_free_closes_descriptors_in_flight)
{
    tern_loop *loop = loop_new_backend(backend);
    char path[64];
    sock_path(path, sizeof path, "free");
    static struct conn c;
    memset(&c, 0, sizeof c);
    pair_up(loop, path, &c);
    int p[2];
    make_pipe(p);
    tern_buf b = {"x", 1};
    cr_assert_eq(tern_unix_write_fds(loop, c.client, &b, 1, &p[1], 1, on_written, &c), 0);
    close(p[1]);
    cr_assert(run_until_count(loop, &c.written, 1, 10 * MS, 1000));
    c.ntaken = 8;
    cr_assert_eq(tern_stream_read_start(loop, c.server, on_read, &c), 0);
    cr_assert(run_until_count(loop, &c.reads, 1, 10 * MS, 1000));
    tern_loop_free(loop);
    cr_assert_eq(atomic_load(&c.closed), 1);
    cr_assert(writers_gone(p[0], 1000), "loop_free leaked a received descriptor");
    close(p[0]);
    unlink(path);
}
