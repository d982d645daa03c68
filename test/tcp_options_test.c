/*
 * TCP settings and the immediate write (include/tern/net.h), run on every
 * backend built: tern_tcp_nodelay and tern_tcp_keepalive reach the socket
 * (read back with getsockopt) and refuse bad values without changing it;
 * tern_stream_try_write writes at once what the kernel takes, says
 * -EAGAIN when it takes nothing or when writes are queued (and then
 * writes nothing), and refuses bad input.
 *
 * Connections are made with plain system calls over loopback and adopted
 * with tern_stream_open, so only the calls under test are tern's.
 */
#include "loop_helpers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

/* A connected loopback TCP pair: fds[0] adopted as *id, fds[1] raw. */
static void tcp_pair(tern_loop *loop, tern_id *id, int fds[2])
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(l, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    cr_assert_eq(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(l, 1), 0);
    cr_assert_eq(getsockname(l, (struct sockaddr *)&a, &len), 0);
    fds[0] = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fds[0], 0);
    cr_assert_eq(connect(fds[0], (struct sockaddr *)&a, sizeof(a)), 0);
    fds[1] = accept(l, NULL, NULL);
    cr_assert_geq(fds[1], 0);
    close(l);
    cr_assert_eq(tern_stream_open(loop, fds[0], id), 0);
}

static int get_int(int fd, int level, int name)
{
    int v = -1;
    socklen_t len = sizeof(v);
    cr_assert_eq(getsockopt(fd, level, name, &v, &len), 0);
    return v;
}

static void close_clean(tern_loop *loop, tern_id id, int raw)
{
    cr_assert_eq(tern_stream_close(loop, id), 0);
    close(raw);
    cr_assert(run_until_nothing_live(loop));
}

BACKEND_TEST(tcp_options, nodelay_reaches_the_socket)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id id;
    int fds[2];
    tcp_pair(loop, &id, fds);
    cr_assert_eq(tern_tcp_nodelay(loop, id, true), 0);
    cr_assert_neq(get_int(fds[0], IPPROTO_TCP, TCP_NODELAY), 0);
    cr_assert_eq(tern_tcp_nodelay(loop, id, false), 0);
    cr_assert_eq(get_int(fds[0], IPPROTO_TCP, TCP_NODELAY), 0);
    cr_assert_eq(tern_tcp_nodelay(loop, 987654321, true), -ENOENT);
    /* Not TCP: the system's refusal comes back. */
    int sp[2];
    make_socketpair(sp);
    tern_id us;
    cr_assert_eq(tern_stream_open(loop, sp[0], &us), 0);
    cr_assert_lt(tern_tcp_nodelay(loop, us, true), 0);
    cr_assert_eq(tern_stream_close(loop, us), 0);
    close(sp[1]);
    close_clean(loop, id, fds[1]);
    loop_free_clean(loop);
}

static void no_accept(tern_loop *loop, tern_id l, int status, tern_id s, void *arg)
{
    (void)loop, (void)l, (void)status, (void)s, (void)arg;
}

BACKEND_TEST(tcp_options, keepalive_with_its_timings_and_bad_values_change_nothing)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id id;
    int fds[2];
    tcp_pair(loop, &id, fds);
    cr_assert_eq(get_int(fds[0], SOL_SOCKET, SO_KEEPALIVE), 0);
    cr_assert_eq(tern_tcp_keepalive(loop, id, true, 0, 5), -EINVAL);
    cr_assert_eq(tern_tcp_keepalive(loop, id, true, 30, 0), -EINVAL);
    cr_assert_eq(tern_tcp_keepalive(loop, id, true, TERN_TCP_KEEPALIVE_MAX_S + 1, 5), -EINVAL);
    cr_assert_eq(get_int(fds[0], SOL_SOCKET, SO_KEEPALIVE), 0, "a refused call turned it on");
    cr_assert_eq(tern_tcp_keepalive(loop, id, true, 30, 5), 0);
    cr_assert_neq(get_int(fds[0], SOL_SOCKET, SO_KEEPALIVE), 0);
#ifdef TCP_KEEPIDLE
    cr_assert_eq(get_int(fds[0], IPPROTO_TCP, TCP_KEEPIDLE), 30);
#endif
    cr_assert_eq(get_int(fds[0], IPPROTO_TCP, TCP_KEEPINTVL), 5);
    cr_assert_eq(tern_tcp_keepalive(loop, id, false, 0, 0), 0);
    cr_assert_eq(get_int(fds[0], SOL_SOCKET, SO_KEEPALIVE), 0);
    tern_id lid;
    cr_assert_eq(tern_tcp_listen(loop, "127.0.0.1", 0, TERN_TCP_BACKLOG_DEFAULT, 0, no_accept,
                                 NULL, &lid), 0);
    cr_assert_eq(tern_tcp_keepalive(loop, lid, true, 30, 5), -EINVAL);
    cr_assert_eq(tern_tcp_nodelay(loop, lid, true), -EINVAL);
    cr_assert_eq(tern_stream_close(loop, lid), 0);
    close_clean(loop, id, fds[1]);
    loop_free_clean(loop);
}

static atomic_uint written;
static void count_written(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id, (void)arg;
    cr_assert(status == 0 || status == -ECANCELED);
    atomic_fetch_add(&written, 1);
}

BACKEND_TEST(tcp_options, try_write_writes_at_once_or_says_eagain)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id id;
    int fds[2];
    tcp_pair(loop, &id, fds);
    tern_buf two[2] = {{"hel", 3}, {"lo", 2}};
    cr_assert_eq(tern_stream_try_write(loop, id, two, 2), 5);
    char got[8] = {0};
    cr_assert(fd_readable_now(fds[1], 5000));
    cr_assert_eq(read(fds[1], got, sizeof(got)), 5, "the bytes were not written at once");
    cr_assert(memcmp(got, "hello", 5) == 0);
    size_t q = 1;
    cr_assert_eq(tern_stream_write_queue_size(loop, id, &q), 0);
    cr_assert_eq(q, 0, "try_write queued something");

    /* Fill the socket buffer: the kernel takes part, then nothing. */
    int small = 4096;
    setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
    setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    static char block[1 << 16];
    tern_buf b = {block, sizeof(block)};
    int rc;
    size_t total = 0;
    for (int i = 0; i < 10000 && (rc = tern_stream_try_write(loop, id, &b, 1)) > 0; i++)
        total += (size_t)rc;
    cr_assert_eq(rc, -EAGAIN, "a full socket gave %s", tern_strerror(rc));
    cr_assert_gt(total, 0);

    /* With a write queued, try_write refuses and writes nothing. */
    atomic_store(&written, 0);
    cr_assert_geq(tern_stream_write(loop, id, &b, 1, count_written, NULL), 0);
    cr_assert_eq(tern_stream_write_queue_size(loop, id, &q), 0);
    cr_assert_gt(q, 0, "the socket took the whole write; the test proves nothing");
    size_t before = q;
    /* Make room without letting the loop flush its queue: the kernel would
     * now take bytes, but they would overtake the queued write. */
    cr_assert_eq(fcntl(fds[1], F_SETFL, O_NONBLOCK), 0);
    struct pollfd pw = {.fd = fds[0], .events = POLLOUT};
    for (int i = 0; i < 500 && pw.revents == 0; i++) {
        drain_fd(fds[1]);
        (void)poll(&pw, 1, 10);
    }
    cr_assert(pw.revents & POLLOUT, "the socket never had room again");
    cr_assert_eq(tern_stream_try_write(loop, id, two, 2), -EAGAIN);
    cr_assert_eq(tern_stream_write_queue_size(loop, id, &q), 0);
    cr_assert_eq(q, before, "try_write changed the queue");

    /* Bad input. */
    cr_assert_eq(tern_stream_try_write(loop, id, NULL, 1), -EINVAL);
    cr_assert_eq(tern_stream_try_write(loop, id, two, 0), -EINVAL);
    cr_assert_eq(tern_stream_try_write(loop, id, two, 1025), -EINVAL);
    tern_buf nul = {NULL, 1};
    cr_assert_eq(tern_stream_try_write(loop, id, &nul, 1), -EINVAL);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert_eq(tern_stream_try_write(loop, id, two, 2), -ENOENT);
    close(fds[1]);
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(atomic_load(&written), 1);
    loop_free_clean(loop);
}

BACKEND_TEST(tcp_options, try_write_after_shutdown_is_epipe)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_id id;
    int fds[2];
    tcp_pair(loop, &id, fds);
    atomic_store(&written, 0);
    cr_assert_eq(tern_stream_shutdown(loop, id, count_written, NULL), 0);
    tern_buf b = {"x", 1};
    cr_assert_eq(tern_stream_try_write(loop, id, &b, 1), -EPIPE);
    cr_assert(run_until_count(loop, &written, 1, 10 * MS, 500));
    close_clean(loop, id, fds[1]);
    loop_free_clean(loop);
}
