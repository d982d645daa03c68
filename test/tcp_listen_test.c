/*
 * Where tern_tcp_listen binds and what tern_tcp_port reports (tern/net.h):
 * no host is every address, "localhost" the IPv4 loopback, an IPv6
 * literal an IPv6 socket whose port is reported like an IPv4 one;
 * TERN_TCP_REUSEPORT lets two listeners share a port; a port already
 * taken without it is -EADDRINUSE with nothing left open; and a stream
 * that is neither IPv4 nor IPv6 has no port (-EAFNOSUPPORT).
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proc_helpers.h"
#include "tern.h"
#include "tern/net.h"

#define TEST_TIMEOUT 60

static void on_accept(tern_loop *loop, tern_id listener, int status, tern_id stream, void *arg)
{
    (void)loop, (void)listener, (void)stream, (void)status, (void)arg;
    cr_assert_fail("nothing connects in this test");
}

/* The listener's bound address, as the socket says. */
static struct sockaddr_storage bound(tern_loop *loop, tern_id id)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    cr_assert_eq(getsockname(tern_stream_fd(loop, id), (struct sockaddr *)&ss, &len), 0);
    return ss;
}

Test(tcp_listen, where_it_binds_and_the_port_it_reports, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    tern_id any = 0, local = 0, v6 = 0;
    unsigned port = 0;

    cr_assert_eq(tern_tcp_listen(loop, NULL, 0, 8, 0, on_accept, NULL, &any), 0);
    struct sockaddr_storage ss = bound(loop, any);
    cr_assert_eq(ss.ss_family, AF_INET);
    cr_assert_eq(((struct sockaddr_in *)&ss)->sin_addr.s_addr, htonl(INADDR_ANY));

    cr_assert_eq(tern_tcp_listen(loop, "localhost", 0, 8, 0, on_accept, NULL, &local), 0);
    ss = bound(loop, local);
    cr_assert_eq(ss.ss_family, AF_INET);
    cr_assert_eq(((struct sockaddr_in *)&ss)->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
    cr_assert_eq(tern_tcp_port(loop, local, &port), 0);
    cr_assert_eq(port, ntohs(((struct sockaddr_in *)&ss)->sin_port));

    cr_assert_eq(tern_tcp_listen(loop, "::1", 0, TERN_TCP_BACKLOG_DEFAULT, 0, on_accept, NULL, &v6),
                 0);
    ss = bound(loop, v6);
    cr_assert_eq(ss.ss_family, AF_INET6);
    cr_assert_eq(tern_tcp_port(loop, v6, &port), 0);
    cr_assert_eq(port, ntohs(((struct sockaddr_in6 *)&ss)->sin6_port));
    cr_assert_neq(port, 0u);

    /* A stream of another family has no port, and keeps *portp as it was. */
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    tern_id unix_stream = 0;
    cr_assert_eq(tern_stream_open(loop, sv[0], &unix_stream), 0);
    unsigned kept = 12345;
    cr_assert_eq(tern_tcp_port(loop, unix_stream, &kept), -EAFNOSUPPORT);
    cr_assert_eq(kept, 12345u);

    cr_assert_eq(tern_stream_close(loop, any), 0);
    cr_assert_eq(tern_stream_close(loop, local), 0);
    cr_assert_eq(tern_stream_close(loop, v6), 0);
    cr_assert_eq(tern_stream_close(loop, unix_stream), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    close(sv[1]);
    tern_loop_free(loop);
}

Test(tcp_listen, a_taken_port_unless_both_share_it, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    tern_id first = 0, second = 0, third = 0;
    unsigned port = 0;
    cr_assert_eq(tern_tcp_listen(loop, "127.0.0.1", 0, 8, TERN_TCP_REUSEPORT, on_accept, NULL,
                                 &first),
                 0);
    cr_assert_eq(tern_tcp_port(loop, first, &port), 0);

    int fds = proc_open_fds();
    cr_assert_geq(fds, 0, "/proc/self/fd cannot be read");
    cr_assert_eq(tern_tcp_listen(loop, "127.0.0.1", port, 8, 0, on_accept, NULL, &third),
                 -EADDRINUSE);
    cr_assert_eq(third, 0);
    cr_assert_eq(proc_open_fds(), fds, "a refused listen left a descriptor open");

    cr_assert_eq(tern_tcp_listen(loop, "127.0.0.1", port, 8, TERN_TCP_REUSEPORT, on_accept, NULL,
                                 &second),
                 0, "a second listener asking to share the port");
    unsigned again = 0;
    cr_assert_eq(tern_tcp_port(loop, second, &again), 0);
    cr_assert_eq(again, port);

    cr_assert_eq(tern_stream_close(loop, first), 0);
    cr_assert_eq(tern_stream_close(loop, second), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    tern_loop_free(loop);
}
