/*
 * tern_udp_bind's flags and its failures (tern/udp.h): each flag asked for
 * is set on the socket (read back with getsockopt), an IPv6 socket reports
 * its port like an IPv4 one, and when setting an option or binding fails
 * (the network seam, backends/fault.h) the call returns that error, writes
 * no id, leaves nothing live and no descriptor open; the next bind works.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proc_helpers.h"
#include "tern.h"
#include "tern/udp.h"
#include "testing.h"

#define TEST_TIMEOUT 60

static int option(int fd, int level, int name)
{
    int v = -1;
    socklen_t len = sizeof v;
    cr_assert_eq(getsockopt(fd, level, name, &v, &len), 0, "getsockopt: %s", strerror(errno));
    return v;
}

static unsigned live(tern_loop *loop)
{
    tern_loop_stats s;
    tern_loop_stats_read(loop, &s, sizeof s);
    return s.live_operations;
}

Test(udp_bind, every_flag_is_set_on_the_socket, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    tern_id id = 0;
    cr_assert_eq(tern_udp_bind(loop, "::1", 0,
                               TERN_UDP_REUSEADDR | TERN_UDP_REUSEPORT | TERN_UDP_IPV6ONLY, &id),
                 0);
    int fd = tern_udp_fd(loop, id);
    cr_assert_geq(fd, 0);
    cr_assert_eq(option(fd, SOL_SOCKET, SO_REUSEADDR), 1);
    cr_assert_eq(option(fd, SOL_SOCKET, SO_REUSEPORT), 1);
    cr_assert_eq(option(fd, IPPROTO_IPV6, IPV6_V6ONLY), 1);
    unsigned port = 0;
    cr_assert_eq(tern_udp_port(loop, id, &port), 0);
    struct sockaddr_in6 sa;
    socklen_t len = sizeof sa;
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    cr_assert_eq(port, ntohs(sa.sin6_port), "tern_udp_port says %u, the socket %u", port,
                 ntohs(sa.sin6_port));
    cr_assert_neq(port, 0u);

    /* Without the flags, none is set. */
    tern_id plain = 0;
    cr_assert_eq(tern_udp_bind(loop, "::1", 0, 0, &plain), 0);
    int pfd = tern_udp_fd(loop, plain);
    cr_assert_eq(option(pfd, SOL_SOCKET, SO_REUSEADDR), 0);
    cr_assert_eq(option(pfd, SOL_SOCKET, SO_REUSEPORT), 0);

    cr_assert_eq(tern_udp_close(loop, id), 0);
    cr_assert_eq(tern_udp_close(loop, plain), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    tern_loop_free(loop);
}

Test(udp_bind, a_failed_option_or_bind_leaves_nothing, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    int fds = proc_open_fds();
    cr_assert_geq(fds, 0, "/proc/self/fd cannot be read");
    unsigned before = live(loop);
    unsigned injected = 0;
    uint64_t n;
    for (n = 1; n < 50; n++) {
        tern_id id = 0;
        tern__fault_arm(TERN__FAULT_NET, n);
        int rc = tern_udp_bind(loop, "::1", 0,
                               TERN_UDP_REUSEADDR | TERN_UDP_REUSEPORT | TERN_UDP_IPV6ONLY, &id);
        bool fired = tern__fault_fired();
        tern__fault_arm(0, 0);
        if (!fired) {
            cr_assert_eq(rc, 0);
            cr_assert_eq(tern_udp_close(loop, id), 0);
            cr_assert_eq(tern_loop_run(loop), 0);
            break;
        }
        injected++;
        cr_assert_eq(rc, -ENOBUFS, "failure %llu: returned %d", (unsigned long long)n, rc);
        cr_assert_eq(id, 0, "failure %llu: an id was written", (unsigned long long)n);
        cr_assert_eq(live(loop), before, "failure %llu: an operation is live",
                     (unsigned long long)n);
        cr_assert_eq(proc_open_fds(), fds, "failure %llu: a descriptor was left open",
                     (unsigned long long)n);
    }
    /* One failure per option and one for the bind. */
    cr_assert_eq(injected, 4, "%u failures injected", injected);
    cr_assert_eq(proc_open_fds(), fds);
    tern_loop_free(loop);
}
