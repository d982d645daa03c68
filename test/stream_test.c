/*
 * Stream conformance (include/tern/net.h), run on every backend built:
 * partial writes, a write larger than the socket buffer, the high-water
 * mark, half-close, peer reset and EPIPE without SIGPIPE, read stop and
 * start, close with pending writes (-ECANCELED, then the close callback),
 * tern_cancel and tern_loop_free closing streams, stale ids, bad input.
 *
 * Streams here are socketpairs (or loopback TCP made with plain syscalls
 * where a reset is needed) adopted with tern_stream_open.
 */
#include "loop_helpers.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>

/*
 * This program's own sendmsg, which the static library's calls resolve to:
 * it counts the calls made on one descriptor and checks each asks for
 * MSG_NOSIGNAL, then makes the real system call.
 */
static atomic_int counted_fd = -1;
static atomic_uint sendmsg_calls;
static atomic_bool nosignal_missing;

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
    if (fd == atomic_load(&counted_fd)) {
        atomic_fetch_add(&sendmsg_calls, 1);
        if (!(flags & MSG_NOSIGNAL))
            atomic_store(&nosignal_missing, true);
    }
    return syscall(SYS_sendmsg, fd, msg, flags);
}

/* A reader that keeps everything it is given. */
struct sink {
    char *buf;
    size_t len, cap;
    atomic_uint reads;
    atomic_bool eof;
    atomic_bool failed;
    int status;
};

static void sink_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                      void *arg)
{
    (void)loop;
    (void)id;
    struct sink *s = arg;
    if (status < 0) {
        cr_assert_eq(len, 0);
        cr_assert_null(data);
        s->status = status;
        atomic_store(&s->failed, true);
        return;
    }
    if (len == 0) {
        atomic_store(&s->eof, true);
        return;
    }
    if (s->len + len > s->cap) {
        s->cap = (s->len + len) * 2;
        s->buf = realloc(s->buf, s->cap);
        cr_assert_not_null(s->buf);
    }
    memcpy(s->buf + s->len, data, len);
    s->len += len;
    atomic_fetch_add(&s->reads, 1);
}

/* Completions in the order they arrive. */
struct log {
    int status[4096];
    uintptr_t tag[4096];
    atomic_uint n;
    atomic_uint closed;
    unsigned closed_after; /* completions seen when the close callback ran */
    bool in_call;          /* set around API calls: no callback may run inside one */
};

static void log_cb(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop;
    (void)id;
    struct log **pl = arg; /* arg points at a slot holding the log and a tag */
    struct log *l = pl[0];
    cr_assert_not(l->in_call, "a callback ran inside the API call that caused it");
    unsigned i = atomic_load(&l->n);
    cr_assert_lt(i, 4096);
    l->status[i] = status;
    l->tag[i] = (uintptr_t)pl[1];
    atomic_store(&l->n, i + 1);
}

static void log_close(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    struct log *l = arg;
    cr_assert_not(l->in_call, "the close callback ran inside tern_stream_close");
    l->closed_after = atomic_load(&l->n);
    atomic_fetch_add(&l->closed, 1);
}

/* Per-write argument slots: {log, tag}. */
static void *slots[4096][2];

static void *slot(struct log *l, uintptr_t tag)
{
    slots[tag][0] = l;
    slots[tag][1] = (void *)tag;
    return slots[tag];
}

static void pattern(char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (char)((i * 131u + seed) & 0xff);
}

static void open_pair(tern_loop *loop, tern_id ids[2], int fds[2])
{
    make_socketpair(fds);
    cr_assert_eq(tern_stream_open(loop, fds[0], &ids[0]), 0);
    cr_assert_eq(tern_stream_open(loop, fds[1], &ids[1]), 0);
    cr_assert_neq(ids[0], 0);
    cr_assert_neq(ids[1], ids[0]);
}

static void small_buffers(int fd)
{
    int sz = 4096;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
}

static bool run_until_bool(tern_loop *loop, atomic_bool *flag)
{
    return run_until_flag(loop, flag, 10 * MS, 2000);
}

static void close_both(tern_loop *loop, tern_id ids[2], struct log *l)
{
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(tern_stream_on_close(loop, ids[i], log_close, l), 0);
        cr_assert_eq(tern_stream_close(loop, ids[i]), 0);
    }
    cr_assert(run_until_count(loop, &l->closed, 2, 10 * MS, 1000));
}

/* ---------------------------------------------------------------- */

BACKEND_TEST(stream, partial_writes_arrive_whole_and_in_order)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id ids[2];
    int fds[2];
    open_pair(loop, ids, fds);
    small_buffers(fds[0]);
    small_buffers(fds[1]);
    enum { N = 64, SZ = 16384 };
    static char data[N * SZ];
    pattern(data, sizeof(data), 7);
    static struct log l;
    memset(&l, 0, sizeof(l));
    bool saw_queue = false;
    for (unsigned i = 0; i < N; i++) {
        tern_buf b = {data + i * SZ, SZ};
        l.in_call = true;
        int rc = tern_stream_write(loop, ids[0], &b, 1, log_cb, slot(&l, i));
        l.in_call = false;
        cr_assert(rc == 0 || rc == 1, "write: %s", tern_strerror(rc));
        size_t q;
        cr_assert_eq(tern_stream_write_queue_size(loop, ids[0], &q), 0);
        saw_queue |= q > 0;
    }
    /* The kernel took only part: the rest waits in the queue. */
    cr_assert(saw_queue, "the socket buffer never filled; the test proves nothing");
    struct sink s = {0};
    cr_assert_eq(tern_stream_read_start(loop, ids[1], sink_read, &s), 0);
    cr_assert(run_until_count(loop, &l.n, N, 10 * MS, 5000));
    for (unsigned i = 0; i < N; i++) {
        cr_assert_eq(l.status[i], 0);
        cr_assert_eq(l.tag[i], i, "completions out of order");
    }
    for (unsigned t = 0; t < 2000 && s.len < sizeof(data); t++)
        tern_loop_run_once(loop, 10 * MS);
    cr_assert_eq(s.len, sizeof(data));
    cr_assert(memcmp(s.buf, data, sizeof(data)) == 0, "bytes changed or reordered");
    size_t q;
    cr_assert_eq(tern_stream_write_queue_size(loop, ids[0], &q), 0);
    cr_assert_eq(q, 0);
    close_both(loop, ids, &l);
    free(s.buf);
    loop_free_clean(loop);
}

static atomic_uint drains;

static void on_drain(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)arg;
    (void)id;
    atomic_fetch_add(&drains, 1);
}

BACKEND_TEST(stream, write_larger_than_socket_buffer_and_high_water)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id ids[2];
    int fds[2];
    open_pair(loop, ids, fds);
    small_buffers(fds[0]);
    size_t big = (size_t)4 << 20; /* over the 1 MiB default high-water mark */
    char *data = malloc(big);
    cr_assert_not_null(data);
    pattern(data, big, 3);
    atomic_store(&drains, 0);
    cr_assert_eq(tern_stream_set_high_water(loop, ids[0], (size_t)1 << 20, on_drain, NULL), 0);
    static struct log l;
    memset(&l, 0, sizeof(l));
    tern_buf b = {data, big};
    int rc = tern_stream_write(loop, ids[0], &b, 1, log_cb, slot(&l, 0));
    cr_assert_eq(rc, 1, "a write over the high-water mark must tell the writer to back off");
    /* Nobody reads yet: no completion, no drain. */
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&l.n), 0);
    cr_assert_eq(atomic_load(&drains), 0);
    struct sink s = {0};
    cr_assert_eq(tern_stream_read_start(loop, ids[1], sink_read, &s), 0);
    cr_assert(run_until_count(loop, &l.n, 1, 10 * MS, 20000));
    cr_assert_eq(l.status[0], 0);
    cr_assert(run_until_count(loop, &drains, 1, 10 * MS, 100));
    for (unsigned t = 0; t < 5000 && s.len < big; t++)
        tern_loop_run_once(loop, 10 * MS);
    cr_assert_eq(s.len, big);
    cr_assert(memcmp(s.buf, data, big) == 0);
    cr_assert_eq(atomic_load(&drains), 1, "one drain per crossing");
    close_both(loop, ids, &l);
    free(s.buf);
    free(data);
    loop_free_clean(loop);
}

BACKEND_TEST(stream, high_water_is_settable_and_drain_fires_once)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id ids[2];
    int fds[2];
    open_pair(loop, ids, fds);
    small_buffers(fds[0]);
    small_buffers(fds[1]);
    atomic_store(&drains, 0);
    cr_assert_eq(tern_stream_set_high_water(loop, ids[0], 0, on_drain, NULL), -EINVAL);
    cr_assert_eq(tern_stream_set_high_water(loop, ids[0], 8192, on_drain, NULL), 0);
    static char data[256 * 1024];
    static struct log l;
    memset(&l, 0, sizeof(l));
    int last = 0;
    for (unsigned i = 0; i < 16; i++) {
        tern_buf b = {data + i * 16384, 16384};
        last = tern_stream_write(loop, ids[0], &b, 1, log_cb, slot(&l, i));
        cr_assert_geq(last, 0);
    }
    cr_assert_eq(last, 1);
    struct sink s = {0};
    cr_assert_eq(tern_stream_read_start(loop, ids[1], sink_read, &s), 0);
    cr_assert(run_until_count(loop, &l.n, 16, 10 * MS, 5000));
    cr_assert(run_until_count(loop, &drains, 1, 10 * MS, 100));
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&drains), 1);
    close_both(loop, ids, &l);
    free(s.buf);
    loop_free_clean(loop);
}

/* ---------------------------------------------------------------- */

static atomic_uint shut_n;
static int shut_status;

static void on_shut(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
    shut_status = status;
    atomic_fetch_add(&shut_n, 1);
}

BACKEND_TEST(stream, half_close_lets_the_other_side_answer)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id ids[2];
    int fds[2];
    open_pair(loop, ids, fds);
    static struct log l;
    memset(&l, 0, sizeof(l));
    struct sink a = {0}, b = {0};
    cr_assert_eq(tern_stream_read_start(loop, ids[0], sink_read, &a), 0);
    cr_assert_eq(tern_stream_read_start(loop, ids[1], sink_read, &b), 0);
    tern_buf ping = {"ping", 4};
    cr_assert_eq(tern_stream_write(loop, ids[0], &ping, 1, log_cb, slot(&l, 0)), 0);
    atomic_store(&shut_n, 0);
    cr_assert_eq(tern_stream_shutdown(loop, ids[0], on_shut, NULL), 0);
    cr_assert_eq(tern_stream_shutdown(loop, ids[0], on_shut, NULL), -EALREADY);
    cr_assert_eq(tern_stream_write(loop, ids[0], &ping, 1, log_cb, slot(&l, 1)), -EPIPE);
    /* The peer reads the data, then end of stream. */
    cr_assert(run_until_bool(loop, &b.eof));
    cr_assert_eq(b.len, 4);
    cr_assert(memcmp(b.buf, "ping", 4) == 0);
    cr_assert_eq(atomic_load(&shut_n), 1);
    cr_assert_eq(shut_status, 0);
    /* After EOF, reading cannot restart, but the write side still works. */
    cr_assert_eq(tern_stream_read_start(loop, ids[1], sink_read, &b), -EPIPE);
    tern_buf pong = {"pong", 4};
    cr_assert_eq(tern_stream_write(loop, ids[1], &pong, 1, log_cb, slot(&l, 2)), 0);
    for (unsigned t = 0; t < 1000 && a.len < 4; t++)
        tern_loop_run_once(loop, 10 * MS);
    cr_assert_eq(a.len, 4);
    cr_assert(memcmp(a.buf, "pong", 4) == 0);
    cr_assert(run_until_count(loop, &l.n, 2, 10 * MS, 100));
    cr_assert_eq(l.status[0], 0);
    cr_assert_eq(l.status[1], 0);
    cr_assert_not(atomic_load(&a.eof));
    close_both(loop, ids, &l);
    free(a.buf);
    free(b.buf);
    loop_free_clean(loop);
}

/* A connected loopback TCP pair made with plain syscalls. */
static void tcp_pair(int *client, int *server)
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(l, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    cr_assert_eq(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(l, 4), 0);
    cr_assert_eq(getsockname(l, (struct sockaddr *)&a, &len), 0);
    *client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(*client, 0);
    cr_assert_eq(connect(*client, (struct sockaddr *)&a, sizeof(a)), 0);
    *server = accept(l, NULL, NULL);
    cr_assert_geq(*server, 0);
    close(l);
}

BACKEND_TEST(stream, peer_reset_is_a_read_error_and_writes_fail_without_sigpipe)
{
    signal(SIGPIPE, SIG_DFL); /* a SIGPIPE would kill this test */
    tern_loop *loop = loop_new_backend(backend);
    int client, server;
    tcp_pair(&client, &server);
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, server, &id), 0);
    struct sink s = {0};
    cr_assert_eq(tern_stream_read_start(loop, id, sink_read, &s), 0);
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    cr_assert_eq(setsockopt(client, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
    close(client); /* sends a reset */
    if (backend_is_libkqueue(backend)) {
        /* libkqueue reads SO_ERROR to fill in EV_EOF's fflags, which
         * clears the reset: the read that follows sees a plain EOF. Native
         * kqueue leaves the error for read() to report. */
        for (int i = 0; i < 2000 && !atomic_load(&s.failed) && !atomic_load(&s.eof); i++)
            tern_loop_run_once(loop, 10 * MS);
        cr_assert(atomic_load(&s.failed) || atomic_load(&s.eof), "the reset went unnoticed");
    } else {
        cr_assert(run_until_bool(loop, &s.failed));
        cr_assert_eq(s.status, -ECONNRESET, "got %s", tern_err_name(s.status));
    }
    static struct log l;
    memset(&l, 0, sizeof(l));
    tern_buf b = {"x", 1};
    int rc = tern_stream_write(loop, id, &b, 1, log_cb, slot(&l, 0));
    cr_assert_eq(rc, 0);
    cr_assert(run_until_count(loop, &l.n, 1, 10 * MS, 100));
    cr_assert(l.status[0] == -EPIPE || l.status[0] == -ECONNRESET, "got %s",
              tern_err_name(l.status[0]));
    /* The failure is sticky: later writes are refused at once. */
    cr_assert_eq(tern_stream_write(loop, id, &b, 1, log_cb, slot(&l, 1)), -EPIPE);
    cr_assert_eq(tern_stream_on_close(loop, id, log_close, &l), 0);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_count(loop, &l.closed, 1, 10 * MS, 100));
    free(s.buf);
    loop_free_clean(loop);
}

BACKEND_TEST(stream, write_to_a_closed_peer_is_epipe_not_sigpipe)
{
    signal(SIGPIPE, SIG_DFL);
    tern_loop *loop = loop_new_backend(backend);
    int fds[2];
    make_socketpair(fds);
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, fds[0], &id), 0);
    close(fds[1]);
    static struct log l;
    memset(&l, 0, sizeof(l));
    tern_buf b = {"hello", 5};
    cr_assert_eq(tern_stream_write(loop, id, &b, 1, log_cb, slot(&l, 0)), 0);
    cr_assert(run_until_count(loop, &l.n, 1, 10 * MS, 100));
    cr_assert_eq(l.status[0], -EPIPE, "got %s", tern_err_name(l.status[0]));
    cr_assert_eq(tern_stream_close(loop, id), 0);
    for (int i = 0; i < 3; i++)
        tern_loop_run_once(loop, 0);
    loop_free_clean(loop);
}

/* ---------------------------------------------------------------- */

BACKEND_TEST(stream, close_with_pending_writes_cancels_them_then_closes)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id ids[2];
    int fds[2];
    open_pair(loop, ids, fds);
    small_buffers(fds[0]);
    small_buffers(fds[1]);
    static char data[1 << 20];
    static struct log l;
    memset(&l, 0, sizeof(l));
    tern_buf b = {data, sizeof(data)};
    l.in_call = true;
    cr_assert_eq(tern_stream_write(loop, ids[0], &b, 1, log_cb, slot(&l, 0)), 0);
    tern_buf small = {data, 10};
    /* 1 on a backend that sends in the kernel: nothing is taken before the turn's wait. */
    cr_assert_geq(tern_stream_write(loop, ids[0], &small, 1, log_cb, slot(&l, 1)), 0);
    cr_assert_geq(tern_stream_write(loop, ids[0], &small, 1, log_cb, slot(&l, 2)), 0);
    atomic_store(&shut_n, 0);
    cr_assert_eq(tern_stream_shutdown(loop, ids[0], on_shut, NULL), 0);
    cr_assert_eq(tern_stream_on_close(loop, ids[0], log_close, &l), 0);
    cr_assert_eq(tern_stream_close(loop, ids[0]), 0);
    l.in_call = false;
    cr_assert_eq(atomic_load(&l.n), 0, "completions must wait for step 2");
    /* The id is stale at once. */
    cr_assert_eq(tern_stream_close(loop, ids[0]), -ENOENT);
    cr_assert_eq(tern_stream_write(loop, ids[0], &small, 1, log_cb, slot(&l, 3)), -ENOENT);
    cr_assert_eq(tern_stream_read_start(loop, ids[0], sink_read, NULL), -ENOENT);
    cr_assert_eq(tern__test_cancel_now(loop, ids[0]), -ENOENT);
    cr_assert(run_until_count(loop, &l.closed, 1, 10 * MS, 100));
    cr_assert_eq(atomic_load(&l.n), 3);
    for (unsigned i = 0; i < 3; i++) {
        cr_assert_eq(l.status[i], -ECANCELED, "write %u: %s", i, tern_err_name(l.status[i]));
        cr_assert_eq(l.tag[i], i);
    }
    cr_assert_eq(atomic_load(&shut_n), 1);
    cr_assert_eq(shut_status, -ECANCELED);
    cr_assert_eq(l.closed_after, 3, "the close callback comes after every write callback");
    for (int i = 0; i < 3; i++)
        tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&l.closed), 1, "exactly one close callback");
    cr_assert_eq(tern_stream_close(loop, ids[1]), 0);
    for (int i = 0; i < 3; i++)
        tern_loop_run_once(loop, 0);
    loop_free_clean(loop);
}

BACKEND_TEST(stream, cancel_by_id_closes_the_stream)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id ids[2];
    int fds[2];
    open_pair(loop, ids, fds);
    static struct log l;
    memset(&l, 0, sizeof(l));
    struct sink s = {0};
    cr_assert_eq(tern_stream_read_start(loop, ids[1], sink_read, &s), 0);
    cr_assert_eq(tern_stream_on_close(loop, ids[0], log_close, &l), 0);
    cr_assert_eq(tern__test_cancel_now(loop, ids[0]), 0);
    cr_assert_eq(tern__test_cancel_now(loop, ids[0]), -ENOENT);
    cr_assert(run_until_count(loop, &l.closed, 1, 10 * MS, 100));
    /* Its descriptor was closed: the peer sees end of stream. */
    cr_assert(run_until_bool(loop, &s.eof));
    cr_assert_eq(tern_stream_close(loop, ids[1]), 0);
    for (int i = 0; i < 3; i++)
        tern_loop_run_once(loop, 0);
    loop_free_clean(loop);
}

BACKEND_TEST(stream, loop_free_closes_live_streams_and_delivers_their_callbacks)
{
    backend_warm_up(backend);
    int before = count_open_fds_settled();
    tern_loop *loop = loop_new_backend(backend);
    tern_id ids[2];
    int fds[2];
    open_pair(loop, ids, fds);
    small_buffers(fds[0]);
    static char data[1 << 20];
    static struct log l;
    memset(&l, 0, sizeof(l));
    tern_buf b = {data, sizeof(data)};
    cr_assert_eq(tern_stream_write(loop, ids[0], &b, 1, log_cb, slot(&l, 0)), 0);
    struct sink s = {0};
    cr_assert_eq(tern_stream_read_start(loop, ids[0], sink_read, &s), 0);
    cr_assert_eq(tern_stream_on_close(loop, ids[0], log_close, &l), 0);
    cr_assert_eq(tern_stream_on_close(loop, ids[1], log_close, &l), 0);
    tern_loop_run_once(loop, 0);
    tern_loop_free(loop);
    cr_assert_eq(atomic_load(&l.n), 1);
    cr_assert_eq(l.status[0], -ECANCELED);
    cr_assert_eq(atomic_load(&l.closed), 2);
    cr_assert_eq(count_open_fds_settled(), before, "the streams' descriptors must be closed");
}

BACKEND_TEST(stream, read_stop_leaves_data_for_a_later_start)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id ids[2];
    int fds[2];
    open_pair(loop, ids, fds);
    static struct log l;
    memset(&l, 0, sizeof(l));
    struct sink s = {0};
    cr_assert_eq(tern_stream_read_start(loop, ids[1], sink_read, &s), 0);
    cr_assert_eq(tern_stream_read_stop(loop, ids[1]), 0);
    cr_assert_eq(tern_stream_read_stop(loop, ids[1]), 0); /* idempotent */
    tern_buf b = {"abcdef", 6};
    cr_assert_eq(tern_stream_write(loop, ids[0], &b, 1, log_cb, slot(&l, 0)), 0);
    cr_assert(run_until_count(loop, &l.n, 1, 10 * MS, 100));
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, MS);
    cr_assert_eq(s.len, 0, "a stopped stream must not read");
    cr_assert_eq(tern_stream_read_start(loop, ids[1], sink_read, &s), 0);
    for (unsigned t = 0; t < 1000 && s.len < 6; t++)
        tern_loop_run_once(loop, 10 * MS);
    cr_assert_eq(s.len, 6);
    cr_assert(memcmp(s.buf, "abcdef", 6) == 0);
    close_both(loop, ids, &l);
    free(s.buf);
    loop_free_clean(loop);
}

BACKEND_TEST(stream, an_unreferenced_stream_does_not_keep_run_going)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id ids[2];
    int fds[2];
    open_pair(loop, ids, fds);
    struct sink s = {0};
    cr_assert_eq(tern_stream_read_start(loop, ids[0], sink_read, &s), 0);
    cr_assert_eq(tern_unref(loop, ids[0]), 0);
    cr_assert_eq(tern_unref(loop, ids[1]), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    /* Closing re-references it until the close callback has run. */
    static struct log l;
    memset(&l, 0, sizeof(l));
    cr_assert_eq(tern_stream_on_close(loop, ids[0], log_close, &l), 0);
    cr_assert_eq(tern_stream_on_close(loop, ids[1], log_close, &l), 0);
    cr_assert_eq(tern_stream_close(loop, ids[0]), 0);
    cr_assert_eq(tern_stream_close(loop, ids[1]), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&l.closed), 2);
    loop_free_clean(loop);
}

static void noop_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
}

BACKEND_TEST(stream, bad_input_is_refused_and_changes_nothing)
{
    tern_loop *loop = loop_new_backend(backend);
    unsigned live = loop_live(loop);
    tern_id id = 12345;
    cr_assert_eq(tern_stream_open(loop, -1, &id), -EBADF);
    /* A regular file is a file request's job (pipes are streams: pipe_test.c). */
    FILE *reg = tmpfile();
    cr_assert_not_null(reg);
    cr_assert_eq(tern_stream_open(loop, fileno(reg), &id), -EPERM);
    fclose(reg);
    int dg[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_DGRAM, 0, dg), 0);
    cr_assert_eq(tern_stream_open(loop, dg[0], &id), -EINVAL);
    cr_assert_eq(id, 12345, "idp untouched on error");
    cr_assert_eq(loop_live(loop), live);
    tern_id ids[2];
    int fds[2];
    open_pair(loop, ids, fds);
    static struct log l;
    memset(&l, 0, sizeof(l));
    tern_buf b = {"x", 1};
    tern_buf nullbuf = {NULL, 1};
    cr_assert_eq(tern_stream_write(loop, ids[0], NULL, 1, log_cb, slot(&l, 0)), -EINVAL);
    cr_assert_eq(tern_stream_write(loop, ids[0], &b, 0, log_cb, slot(&l, 0)), -EINVAL);
    cr_assert_eq(tern_stream_write(loop, ids[0], &b, 1025, log_cb, slot(&l, 0)), -EINVAL);
    cr_assert_eq(tern_stream_write(loop, ids[0], &b, 1, NULL, NULL), -EINVAL);
    cr_assert_eq(tern_stream_write(loop, ids[0], &nullbuf, 1, log_cb, slot(&l, 0)), -EINVAL);
    cr_assert_eq(tern_stream_read_start(loop, ids[0], NULL, NULL), -EINVAL);
    cr_assert_eq(tern_stream_shutdown(loop, ids[0], NULL, NULL), -EINVAL);
    cr_assert_eq(tern_stream_write(loop, 999999999, &b, 1, log_cb, slot(&l, 0)), -ENOENT);
    cr_assert_eq(tern_stream_close(loop, 999999999), -ENOENT);
    cr_assert_eq(tern_stream_fd(loop, 999999999), -ENOENT);
    cr_assert_eq(tern_stream_fd(loop, ids[0]), fds[0]);
    /* A timer's id is not a stream. */
    tern_id timer;
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, noop_timer, NULL, &timer), 0);
    cr_assert_eq(tern_stream_close(loop, timer), -ENOENT);
    cr_assert_eq(tern_stream_write(loop, timer, &b, 1, log_cb, slot(&l, 0)), -ENOENT);
    cr_assert_eq(tern_timer_stop(loop, timer), 0);
    size_t q = 77;
    cr_assert_eq(tern_stream_write_queue_size(loop, 999999999, &q), -ENOENT);
    cr_assert_eq(q, 77);
    for (int i = 0; i < 3; i++)
        tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&l.n), 0, "refused writes owe no callback");
    close_both(loop, ids, &l);
    close(dg[0]);
    close(dg[1]);
    loop_free_clean(loop);
}

BACKEND_TEST(stream, empty_and_multi_buffer_writes_complete_in_order)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id ids[2];
    int fds[2];
    open_pair(loop, ids, fds);
    static struct log l;
    memset(&l, 0, sizeof(l));
    tern_buf empty = {NULL, 0};
    tern_buf parts[3] = {{"ab", 2}, {"", 0}, {"cde", 3}};
    cr_assert_eq(tern_stream_write(loop, ids[0], &empty, 1, log_cb, slot(&l, 0)), 0);
    cr_assert_eq(tern_stream_write(loop, ids[0], parts, 3, log_cb, slot(&l, 1)), 0);
    cr_assert_eq(tern_stream_write(loop, ids[0], &empty, 1, log_cb, slot(&l, 2)), 0);
    cr_assert(run_until_count(loop, &l.n, 3, 10 * MS, 100));
    for (unsigned i = 0; i < 3; i++) {
        cr_assert_eq(l.status[i], 0);
        cr_assert_eq(l.tag[i], i);
    }
    char got[8] = {0};
    cr_assert_eq(read(fds[1], got, sizeof(got)), 5);
    cr_assert_str_eq(got, "abcde");
    close_both(loop, ids, &l);
    loop_free_clean(loop);
}

BACKEND_TEST(stream, queued_writes_leave_together_in_one_sendmsg)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id ids[2];
    int fds[2];
    open_pair(loop, ids, fds);
    small_buffers(fds[0]);
    /* Fill the socket behind tern's back, so tern's writes must queue. */
    static char fill[1 << 20];
    size_t filled = 0;
    ssize_t n;
    while ((n = write(fds[0], fill, sizeof(fill))) > 0)
        filled += (size_t)n;
    cr_assert_gt(filled, 0);
    atomic_store(&sendmsg_calls, 0);
    atomic_store(&nosignal_missing, false);
    atomic_store(&counted_fd, fds[0]);
    enum { N = 100 };
    static char bytes[N][10];
    static struct log l;
    memset(&l, 0, sizeof(l));
    for (unsigned i = 0; i < N; i++) {
        memset(bytes[i], 'a' + (int)(i % 26), sizeof(bytes[i]));
        tern_buf b = {bytes[i], sizeof(bytes[i])};
        cr_assert_eq(tern_stream_write(loop, ids[0], &b, 1, log_cb, slot(&l, i)), 0);
    }
    /* One attempt when the queue was empty, then nothing until writable. */
    cr_assert_leq(atomic_load(&sendmsg_calls), 1);
    /* Drain the fill, then let the loop flush the queue. */
    char sink_buf[65536];
    size_t drained = 0;
    while (drained < filled) {
        n = read(fds[1], sink_buf, sizeof(sink_buf) < filled - drained ? sizeof(sink_buf)
                                                                         : filled - drained);
        if (n > 0)
            drained += (size_t)n;
    }
    cr_assert(run_until_count(loop, &l.n, N, 10 * MS, 1000));
    unsigned calls = atomic_load(&sendmsg_calls);
    atomic_store(&counted_fd, -1);
    cr_assert_leq(calls, 3, "%u sendmsg calls for %u queued writes: they must be coalesced",
                  calls, (unsigned)N);
    cr_assert_not(atomic_load(&nosignal_missing), "every sendmsg must pass MSG_NOSIGNAL");
    for (unsigned i = 0; i < N; i++) {
        cr_assert_eq(l.status[i], 0);
        cr_assert_eq(l.tag[i], i);
    }
    char got[N * 10];
    size_t have = 0;
    while (have < sizeof(got)) {
        n = read(fds[1], got + have, sizeof(got) - have);
        cr_assert_gt(n, 0);
        have += (size_t)n;
    }
    cr_assert(memcmp(got, bytes, sizeof(got)) == 0, "bytes reordered");
    close_both(loop, ids, &l);
    loop_free_clean(loop);
}

struct foreign {
    tern_loop *loop;
    tern_id id, other;
    atomic_uint closed;
};

static void *foreign_cancel(void *arg)
{
    struct foreign *f = arg;
    /* Wait until the loop thread sleeps in step 4 inside tern_loop_run, so
     * the request takes the cross-thread path (queued, resolved in step 1). */
    cr_assert(wait_for_step(f->loop, 4));
    cr_assert_eq(tern_cancel(f->loop, f->id), TERN_CANCEL_REQUESTED);
    return NULL;
}

static void close_other(tern_loop *loop, tern_id id, void *arg)
{
    (void)id;
    struct foreign *f = arg;
    atomic_fetch_add(&f->closed, 1);
    tern_stream_close(loop, f->other); /* -ENOENT the second time */
}

BACKEND_TEST(stream, cancel_from_another_thread_closes_the_stream)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id ids[2];
    int fds[2];
    open_pair(loop, ids, fds);
    struct sink s = {0};
    static struct foreign f;
    f = (struct foreign){.loop = loop, .id = ids[0], .other = ids[1]};
    cr_assert_eq(tern_stream_read_start(loop, ids[0], sink_read, &s), 0);
    cr_assert_eq(tern_stream_on_close(loop, ids[0], close_other, &f), 0);
    cr_assert_eq(tern_stream_on_close(loop, ids[1], close_other, &f), 0);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, foreign_cancel, &f), 0);
    /* Both streams keep the run going until the cancel closes them. */
    cr_assert_eq(tern_loop_run(loop), 0);
    pthread_join(t, NULL);
    cr_assert_eq(atomic_load(&f.closed), 2);
    cr_assert_eq(tern_stream_close(loop, ids[0]), -ENOENT);
    loop_free_clean(loop);
}

/* ---------------------------------------------------------------- */

static atomic_bool stop_producing;
static atomic_uint produced;

/* Empty writes complete without a syscall, so nothing in the kernel ever
 * pushes back: only tern's own dispatch budget can make room for others. */
static void produce_again(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)arg;
    atomic_fetch_add(&produced, 1);
    if (status == 0 && !atomic_load(&stop_producing)) {
        tern_buf b = {NULL, 0};
        tern_stream_write(loop, id, &b, 1, produce_again, NULL);
    }
}

static void set_flag_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    atomic_store((atomic_bool *)arg, true);
}

BACKEND_TEST(stream, a_writer_feeding_itself_from_completions_cannot_starve_the_loop)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id ids[2];
    int fds[2];
    open_pair(loop, ids, fds);
    atomic_store(&stop_producing, false);
    atomic_store(&produced, 0);
    tern_buf b = {NULL, 0};
    cr_assert_eq(tern_stream_write(loop, ids[0], &b, 1, produce_again, NULL), 0);
    atomic_bool fired = false;
    cr_assert_eq(tern_timer_start(loop, 0, 0, set_flag_timer, &fired, NULL), 0);
    /* Other work must get its turn while the writer keeps going. */
    cr_assert(run_until_flag(loop, &fired, 10 * MS, 1000),
              "a timer never ran while a stream kept completing writes");
    atomic_store(&stop_producing, true);
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 0);
    cr_assert_gt(atomic_load(&produced), 1);
    static struct log l;
    memset(&l, 0, sizeof(l));
    close_both(loop, ids, &l);
    loop_free_clean(loop);
}
