/*
 * UDP settings reach the socket (include/tern/udp.h: tern_udp_set,
 * tern_udp_membership, tern_udp_multicast_interface), on IPv4 and IPv6:
 * each option is read back with getsockopt at the level of the socket's
 * family; values out of range, groups that are not multicast groups of the
 * family and interfaces that do not exist are refused before any system
 * call (the setting read back is unchanged); a system call's own refusal
 * comes back as its errno; a stale id is -ENOENT everywhere. Also the
 * bind flag TERN_UDP_IPV6ONLY, and receiving stopped and restarted with
 * another size (datagrams wait in the kernel meanwhile).
 */
#include "loop_helpers.h"
#include "tested_backend.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

static tern_id bind_udp(tern_loop *loop, const char *host)
{
    tern_id id;
    int rc = tern_udp_bind(loop, host, 0, 0, &id);
    cr_assert_eq(rc, 0, "bind %s: %s", host, tern_err_name(rc));
    return id;
}

static int get_int(tern_loop *loop, tern_id id, int level, int name)
{
    int fd = tern_udp_fd(loop, id);
    cr_assert_geq(fd, 0);
    int v = -1;
    socklen_t len = sizeof(v);
    cr_assert_eq(getsockopt(fd, level, name, &v, &len), 0, "getsockopt %d/%d: %s", level, name,
                 strerror(errno));
    /* IPv4's multicast byte options may come back as one byte. */
    if (len == 1)
        v = *(unsigned char *)&v;
    return v;
}

/* Whether this machine has IPv6 on loopback (a container may not). */
static bool have_ipv6(tern_loop *loop)
{
    tern_id id;
    if (tern_udp_bind(loop, "::1", 0, 0, &id) < 0)
        return false;
    cr_assert_eq(tern_udp_close(loop, id), 0);
    return run_until_nothing_live(loop);
}

Test(udp_options, ipv4_each_option_reaches_the_socket, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    tern_id id = bind_udp(loop, "127.0.0.1");
    cr_assert_eq(tern_udp_set(loop, id, TERN_UDP_BROADCAST, 1), 0);
    cr_assert_eq(get_int(loop, id, SOL_SOCKET, SO_BROADCAST), 1);
    cr_assert_eq(tern_udp_set(loop, id, TERN_UDP_BROADCAST, 0), 0);
    cr_assert_eq(get_int(loop, id, SOL_SOCKET, SO_BROADCAST), 0);
    cr_assert_eq(tern_udp_set(loop, id, TERN_UDP_BROADCAST, -1), -EINVAL);

    cr_assert_eq(tern_udp_set(loop, id, TERN_UDP_TTL, 17), 0);
    cr_assert_eq(get_int(loop, id, IPPROTO_IP, IP_TTL), 17);
    cr_assert_eq(tern_udp_set(loop, id, TERN_UDP_TTL, 256), -EINVAL);
    cr_assert_eq(get_int(loop, id, IPPROTO_IP, IP_TTL), 17, "a refused value changed it");

    cr_assert_eq(tern_udp_set(loop, id, TERN_UDP_MULTICAST_TTL, 0), 0);
    cr_assert_eq(get_int(loop, id, IPPROTO_IP, IP_MULTICAST_TTL), 0);
    cr_assert_eq(tern_udp_set(loop, id, TERN_UDP_MULTICAST_TTL, 255), 0);
    cr_assert_eq(get_int(loop, id, IPPROTO_IP, IP_MULTICAST_TTL), 255);
    cr_assert_eq(tern_udp_set(loop, id, TERN_UDP_MULTICAST_TTL, -1), -EINVAL);

    cr_assert_eq(tern_udp_set(loop, id, TERN_UDP_MULTICAST_LOOP, 0), 0);
    cr_assert_eq(get_int(loop, id, IPPROTO_IP, IP_MULTICAST_LOOP), 0);
    cr_assert_eq(tern_udp_set(loop, id, TERN_UDP_MULTICAST_LOOP, 1), 0);
    cr_assert_eq(get_int(loop, id, IPPROTO_IP, IP_MULTICAST_LOOP), 1);
    cr_assert_eq(tern_udp_set(loop, id, TERN_UDP_MULTICAST_LOOP, -1), -EINVAL);

    /* The interface multicast leaves from: an address, or the system's choice. */
    int fd = tern_udp_fd(loop, id);
    struct in_addr a;
    socklen_t len = sizeof(a);
    cr_assert_eq(tern_udp_multicast_interface(loop, id, "127.0.0.1"), 0);
    cr_assert_eq(getsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &a, &len), 0);
    cr_assert_eq(a.s_addr, htonl(INADDR_LOOPBACK));
    cr_assert_eq(tern_udp_multicast_interface(loop, id, NULL), 0);
    len = sizeof(a);
    cr_assert_eq(getsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &a, &len), 0);
    cr_assert_eq(a.s_addr, htonl(INADDR_ANY));
    cr_assert_eq(tern_udp_multicast_interface(loop, id, "lo"), -EINVAL, "IPv4 takes an address");
    /* An address no interface has: the kernel's refusal, passed on. */
    cr_assert_eq(tern_udp_multicast_interface(loop, id, "192.0.2.77"), -EADDRNOTAVAIL);

    /* Membership: a NULL interface lets the system choose; a bad one is refused first. */
    cr_assert_eq(tern_udp_membership(loop, id, "239.9.9.9", "lo", true), -EINVAL);
    cr_assert_eq(tern_udp_membership(loop, id, NULL, NULL, true), -EINVAL);
    int rc = tern_udp_membership(loop, id, "239.9.9.9", "127.0.0.1", true);
    if (rc == 0) {
        cr_assert_eq(tern_udp_membership(loop, id, "239.9.9.9", "127.0.0.1", true), -EADDRINUSE,
                     "a second join of the same group");
        cr_assert_eq(tern_udp_membership(loop, id, "239.9.9.9", "127.0.0.1", false), 0);
    } else {
        cr_log_warn("no IPv4 multicast on loopback here: %s", tern_err_name(rc));
    }
    cr_assert_eq(tern_udp_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}

Test(udp_options, ipv6_each_option_reaches_the_socket, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    if (!have_ipv6(loop)) {
        loop_free_clean(loop);
        cr_skip_test("no IPv6 loopback here");
    }
    tern_id id = bind_udp(loop, "::1");
    cr_assert_eq(tern_udp_set(loop, id, TERN_UDP_TTL, 9), 0);
    cr_assert_eq(get_int(loop, id, IPPROTO_IPV6, IPV6_UNICAST_HOPS), 9);
    cr_assert_eq(tern_udp_set(loop, id, TERN_UDP_TTL, 0), -EINVAL);
    cr_assert_eq(get_int(loop, id, IPPROTO_IPV6, IPV6_UNICAST_HOPS), 9);

    cr_assert_eq(tern_udp_set(loop, id, TERN_UDP_MULTICAST_TTL, 3), 0);
    cr_assert_eq(get_int(loop, id, IPPROTO_IPV6, IPV6_MULTICAST_HOPS), 3);
    cr_assert_eq(tern_udp_set(loop, id, TERN_UDP_MULTICAST_TTL, 256), -EINVAL);
    cr_assert_eq(get_int(loop, id, IPPROTO_IPV6, IPV6_MULTICAST_HOPS), 3);

    cr_assert_eq(tern_udp_set(loop, id, TERN_UDP_MULTICAST_LOOP, 0), 0);
    cr_assert_eq(get_int(loop, id, IPPROTO_IPV6, IPV6_MULTICAST_LOOP), 0);
    cr_assert_eq(tern_udp_set(loop, id, TERN_UDP_MULTICAST_LOOP, 1), 0);
    cr_assert_eq(get_int(loop, id, IPPROTO_IPV6, IPV6_MULTICAST_LOOP), 1);
    cr_assert_eq(tern_udp_set(loop, id, TERN_UDP_MULTICAST_LOOP, 2), -EINVAL);

    /* IPv6 names its interface; an address or an unknown name is refused first. */
    unsigned lo = if_nametoindex("lo");
    cr_assert_gt(lo, 0);
    cr_assert_eq(tern_udp_multicast_interface(loop, id, "lo"), 0);
    cr_assert_eq(get_int(loop, id, IPPROTO_IPV6, IPV6_MULTICAST_IF), (int)lo);
    cr_assert_eq(tern_udp_multicast_interface(loop, id, NULL), 0);
    cr_assert_eq(get_int(loop, id, IPPROTO_IPV6, IPV6_MULTICAST_IF), 0);
    cr_assert_eq(tern_udp_multicast_interface(loop, id, "tern-no-such-if"), -EINVAL);
    cr_assert_eq(tern_udp_multicast_interface(loop, id, "::1"), -EINVAL);

    cr_assert_eq(tern_udp_membership(loop, id, "ff15::7", "tern-no-such-if", true), -EINVAL);
    cr_assert_eq(tern_udp_membership(loop, id, "239.9.9.9", NULL, true), -EINVAL,
                 "an IPv4 group on an IPv6 socket");
    cr_assert_eq(tern_udp_membership(loop, id, "::1", NULL, true), -EINVAL, "not multicast");
    int rc = tern_udp_membership(loop, id, "ff15::7", "lo", true);
    if (rc == 0) {
        cr_assert_eq(tern_udp_membership(loop, id, "ff15::7", "lo", false), 0);
        cr_assert_eq(tern_udp_membership(loop, id, "ff15::7", "lo", false), -EADDRNOTAVAIL,
                     "leaving a group not joined");
    } else {
        cr_log_warn("no IPv6 multicast on loopback here: %s", tern_err_name(rc));
    }
    rc = tern_udp_membership(loop, id, "ff15::8", NULL, true);
    if (rc == 0)
        cr_assert_eq(tern_udp_membership(loop, id, "ff15::8", NULL, false), 0);

    /* A peer of the other family is refused; dissolving an association works. */
    struct sockaddr_in v4 = {.sin_family = AF_INET, .sin_port = htons(9)};
    v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(tern_udp_connect(loop, id, (struct sockaddr *)&v4), -EINVAL);
    struct sockaddr_in6 v6 = {.sin6_family = AF_INET6, .sin6_port = htons(9)};
    v6.sin6_addr = in6addr_loopback;
    cr_assert_eq(tern_udp_connect(loop, id, (struct sockaddr *)&v6), 0);
    cr_assert_eq(tern_udp_connect(loop, id, NULL), 0);
    cr_assert_eq(tern_udp_connect(loop, id, NULL), -ENOTCONN);
    cr_assert_eq(tern_udp_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}

Test(udp_options, stale_ids_are_enoent, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    tern_id id = bind_udp(loop, "127.0.0.1");
    cr_assert_eq(tern_udp_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    struct sockaddr_in v4 = {.sin_family = AF_INET, .sin_port = htons(9)};
    cr_assert_eq(tern_udp_connect(loop, id, (struct sockaddr *)&v4), -ENOENT);
    cr_assert_eq(tern_udp_set(loop, id, TERN_UDP_TTL, 1), -ENOENT);
    cr_assert_eq(tern_udp_membership(loop, id, "239.9.9.9", NULL, true), -ENOENT);
    cr_assert_eq(tern_udp_multicast_interface(loop, id, NULL), -ENOENT);
    cr_assert_eq(tern_udp_fd(loop, id), -ENOENT);
    cr_assert_eq(tern_udp_recv_stop(loop, id), -ENOENT);
    loop_free_clean(loop);
}

Test(udp_options, ipv6only_is_set_only_when_asked, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    if (!have_ipv6(loop)) {
        loop_free_clean(loop);
        cr_skip_test("no IPv6 here");
    }
    tern_id only, both;
    cr_assert_eq(tern_udp_bind(loop, "127.0.0.1", 0, TERN_UDP_IPV6ONLY, &only), -EINVAL,
                 "IPv6-only on an IPv4 socket");
    cr_assert_eq(tern_udp_bind(loop, "::", 0, TERN_UDP_IPV6ONLY, &only), 0);
    cr_assert_eq(get_int(loop, only, IPPROTO_IPV6, IPV6_V6ONLY), 1);
    /* The wildcard: a specific IPv6 address makes the kernel set it anyway. */
    cr_assert_eq(tern_udp_bind(loop, "::", 0, 0, &both), 0);
    int dflt = -1;
    FILE *f = fopen("/proc/sys/net/ipv6/bindv6only", "r");
    if (f != NULL) {
        if (fscanf(f, "%d", &dflt) != 1)
            dflt = -1;
        fclose(f);
    }
    if (dflt >= 0)
        cr_assert_eq(get_int(loop, both, IPPROTO_IPV6, IPV6_V6ONLY), dflt,
                     "the flag was set without being asked for");
    cr_assert_eq(tern_udp_close(loop, only), 0);
    cr_assert_eq(tern_udp_close(loop, both), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}

struct got {
    atomic_uint n;
    size_t len;
    unsigned flags;
};

static void got_cb(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                   const struct sockaddr *from, unsigned flags, void *arg)
{
    (void)loop, (void)id, (void)data, (void)from;
    struct got *g = arg;
    cr_assert_eq(status, 0);
    g->len = len;
    g->flags = flags;
    atomic_fetch_add(&g->n, 1);
}

Test(udp_options, receiving_stopped_waits_and_restarts_with_a_new_size,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    tern_id id = bind_udp(loop, "127.0.0.1");
    unsigned port;
    cr_assert_eq(tern_udp_port(loop, id, &port), 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int tx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(tx, 0);
    char msg[100];
    memset(msg, 'm', sizeof msg);

    struct got g = {0};
    cr_assert_eq(tern_udp_recv_start(loop, id, 10, got_cb, &g), 0);
    cr_assert_eq(sendto(tx, msg, sizeof msg, 0, (struct sockaddr *)&to, sizeof to), 100);
    cr_assert(run_until_count(loop, &g.n, 1, 10 * (int64_t)MS, 1000));
    cr_assert_eq(g.len, 10);
    cr_assert(g.flags & TERN_UDP_TRUNCATED);

    cr_assert_eq(tern_udp_recv_stop(loop, id), 0);
    cr_assert_eq(tern_udp_recv_stop(loop, id), 0, "idempotent");
    cr_assert_eq(sendto(tx, msg, sizeof msg, 0, (struct sockaddr *)&to, sizeof to), 100);
    for (int i = 0; i < 10; i++)
        tern_loop_run_once(loop, 2 * (int64_t)MS);
    cr_assert_eq(atomic_load(&g.n), 1, "a datagram was delivered after recv_stop");

    /* Restarted larger: the datagram that waited arrives whole. */
    cr_assert_eq(tern_udp_recv_start(loop, id, 200, got_cb, &g), 0);
    cr_assert(run_until_count(loop, &g.n, 2, 10 * (int64_t)MS, 1000));
    cr_assert_eq(g.len, 100);
    cr_assert_eq(g.flags & TERN_UDP_TRUNCATED, 0);
    close(tx);
    cr_assert_eq(tern_udp_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}
