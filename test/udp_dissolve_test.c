/*
 * Connecting and dissolving a UDP socket's association, the paths the
 * ordinary tests pass over (include/tern/udp.h, tern_udp_connect): a
 * socket bound to a port it named keeps that port when dissolved (the
 * kernel does not let go of it); a socket whose system-chosen port
 * another socket takes while the association is dissolved gets
 * -EADDRINUSE and a new port, no longer connected; a connect or a
 * dissolve the kernel refuses (the UDP fault seam, backends/fault.h)
 * returns the error and changes nothing.
 */
#include "net_paths_helpers.h"
#include "tested_backend.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

static struct sockaddr_storage addr(const char *host, unsigned p)
{
    struct sockaddr_storage ss;
    cr_assert_eq(tern_sockaddr_parse(host, p, &ss), 0);
    return ss;
}
#define SA(ss) ((const struct sockaddr *)&(ss))

static unsigned port_of(tern_loop *loop, tern_id id)
{
    unsigned p = 0;
    cr_assert_eq(tern_udp_port(loop, id, &p), 0);
    return p;
}

static void close_all(tern_loop *loop, const tern_id *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(tern_udp_close(loop, ids[i]), 0);
    cr_assert(run_until_nothing_live(loop), "%u operations still live", loop_live(loop));
    loop_free_clean(loop);
}

static const char one[] = "1";

/* Whether a send without an address is taken (the socket is connected). */
static bool connected(tern_loop *loop, tern_id id)
{
    tern_buf b = {one, 1};
    int rc = tern_udp_send(loop, id, &b, 1, NULL, NULL, NULL);
    cr_assert(rc == 0 || rc == -EDESTADDRREQ, "a send without an address: %d", rc);
    return rc == 0;
}

/* A port free on 127.0.0.1 a moment ago: a socket the kernel gave it to,
 * closed again. */
static unsigned free_port(void)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t len = sizeof(a);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

Test(udp_dissolve, a_port_the_bind_named_is_kept_as_it_was, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    tern_id a = 0, b = 0;
    int rc = -EADDRINUSE;
    unsigned p = 0;
    /* Another process may take the port between the look and the bind. */
    for (int tries = 0; tries < 20 && rc == -EADDRINUSE; tries++)
        rc = tern_udp_bind(loop, "127.0.0.1", p = free_port(), 0, &a);
    cr_assert_eq(rc, 0);
    cr_assert_eq(tern_udp_bind(loop, "127.0.0.1", 0, 0, &b), 0);
    struct sockaddr_storage pb = addr("127.0.0.1", port_of(loop, b));
    cr_assert_eq(tern_udp_connect(loop, a, SA(pb)), 0);
    cr_assert_eq(tern_udp_connect(loop, a, NULL), 0);
    cr_assert_eq(port_of(loop, a), p, "a socket bound to port %u moved once dissolved", p);
    cr_assert_not(connected(loop, a));
    tern_id ids[] = {a, b};
    close_all(loop, ids, 2);
}

/*
 * Bound to every interface at a port the system chose, then connected to
 * loopback: the kernel moves the socket to 127.0.0.1, so another socket
 * may bind the same port on 127.0.0.2. Dissolving puts the socket back on
 * every interface and lets go of the port; taking it again there collides
 * with the other socket. The dissolve says so, and the socket is bound to
 * a new port, not connected.
 */
Test(udp_dissolve, a_port_taken_in_between_is_told_and_replaced, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    tern_id a = 0, b = 0;
    cr_assert_eq(tern_udp_bind(loop, NULL, 0, 0, &a), 0);
    cr_assert_eq(tern_udp_bind(loop, "127.0.0.1", 0, 0, &b), 0);
    unsigned pa = port_of(loop, a);
    struct sockaddr_storage pb = addr("127.0.0.1", port_of(loop, b));
    cr_assert_eq(tern_udp_connect(loop, a, SA(pb)), 0);

    int other = socket(AF_INET, SOCK_DGRAM, 0);
    cr_assert_geq(other, 0);
    struct sockaddr_in o = {.sin_family = AF_INET, .sin_port = htons((uint16_t)pa)};
    cr_assert_eq(inet_pton(AF_INET, "127.0.0.2", &o.sin_addr), 1);
    if (bind(other, (struct sockaddr *)&o, sizeof(o)) < 0) {
        int err = errno;
        close(other);
        cr_skip_test("127.0.0.2 cannot be bound here (%s)", strerror(err));
    }

    cr_assert_eq(tern_udp_connect(loop, a, NULL), -EADDRINUSE);
    unsigned now = port_of(loop, a);
    cr_assert_neq(now, 0u, "the socket was left without a port");
    cr_assert_neq(now, pa, "the socket reports the port another socket took");
    cr_assert_not(connected(loop, a), "the association outlived the dissolve");
    cr_assert_eq(tern_udp_connect(loop, a, NULL), -ENOTCONN);
    /* Still usable: it connects again. */
    cr_assert_eq(tern_udp_connect(loop, a, SA(pb)), 0);
    close(other);
    tern_id ids[] = {a, b};
    close_all(loop, ids, 2);
}

Test(udp_dissolve, a_refused_connect_returns_the_error_and_changes_nothing,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    tern_id a = 0, b = 0;
    cr_assert_eq(tern_udp_bind(loop, "127.0.0.1", 0, 0, &a), 0);
    cr_assert_eq(tern_udp_bind(loop, "127.0.0.1", 0, 0, &b), 0);
    unsigned pa = port_of(loop, a);
    struct sockaddr_storage pb = addr("127.0.0.1", port_of(loop, b));
    tern__fault_net_errno(-ENETUNREACH);
    tern__fault_arm(TERN__FAULT_NET, 1);
    int rc = tern_udp_connect(loop, a, SA(pb));
    cr_assert(tern__fault_fired());
    fault_off();
    cr_assert_eq(rc, -ENETUNREACH);
    cr_assert_not(connected(loop, a), "a refused connect left the socket connected");
    cr_assert_eq(tern_udp_connect(loop, a, NULL), -ENOTCONN);
    cr_assert_eq(port_of(loop, a), pa);
    cr_assert_eq(tern_udp_connect(loop, a, SA(pb)), 0);
    tern_id ids[] = {a, b};
    close_all(loop, ids, 2);
}

Test(udp_dissolve, a_refused_dissolve_returns_the_error_and_stays_connected,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    tern_id a = 0, b = 0;
    cr_assert_eq(tern_udp_bind(loop, "127.0.0.1", 0, 0, &a), 0);
    cr_assert_eq(tern_udp_bind(loop, "127.0.0.1", 0, 0, &b), 0);
    unsigned pa = port_of(loop, a);
    struct sockaddr_storage pb = addr("127.0.0.1", port_of(loop, b));
    cr_assert_eq(tern_udp_connect(loop, a, SA(pb)), 0);
    tern__fault_arm(TERN__FAULT_NET, 1);
    int rc = tern_udp_connect(loop, a, NULL);
    cr_assert(tern__fault_fired());
    fault_off();
    cr_assert_eq(rc, -ENOBUFS);
    cr_assert_eq(tern_udp_connect(loop, a, SA(pb)), -EALREADY,
                 "a refused dissolve left the socket unconnected");
    cr_assert_eq(port_of(loop, a), pa);
    cr_assert_eq(tern_udp_connect(loop, a, NULL), 0);
    cr_assert_eq(port_of(loop, a), pa);
    tern_id ids[] = {a, b};
    close_all(loop, ids, 2);
}
