/*
 * A UDP socket's peer and settings: connect, the TERN_UDP_OPTIONS,
 * multicast membership and the multicast interface.
 *
 * Each setting goes to the level of the socket's family (IP or IPV6):
 * the same option name means different setsockopt calls, and the value
 * types differ too (IP_MULTICAST_TTL and IP_MULTICAST_LOOP take an int on
 * Linux but a byte on the BSDs; IPv6 takes ints everywhere). A value is
 * checked before any system call, so a bad one changes nothing.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "udp_p.h"

static int sockopt(struct tern__udp *u, int level, int name, const void *v, socklen_t len)
{
    int rc = tern__net_fault();
    if (rc == 0 && setsockopt(u->fd, level, name, v, len) < 0)
        rc = -errno;
    return rc;
}

static in_port_t *addr_port(struct sockaddr_storage *ss)
{
    return ss->ss_family == AF_INET6 ? &((struct sockaddr_in6 *)ss)->sin6_port
                                     : &((struct sockaddr_in *)ss)->sin_port;
}

/*
 * Dissolving leaves a socket bound where it was. Linux lets go of a port
 * the kernel chose (a bind to port 0) when the association ends, and with
 * it every datagram sent to that port; the socket takes the same port
 * again, on the address the dissolve left (the one bound, not the one the
 * peer's route picked). Should another socket have taken the port in
 * between, the socket binds a new port of that address and says so.
 */
static int keep_port(struct tern__udp *u, in_port_t port)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(u->fd, (struct sockaddr *)&ss, &len) < 0 || *addr_port(&ss) != 0)
        return 0;
    *addr_port(&ss) = port;
    if (bind(u->fd, (struct sockaddr *)&ss, len) == 0)
        return 0;
    int rc = -errno;
    *addr_port(&ss) = 0;
    (void)bind(u->fd, (struct sockaddr *)&ss, len);
    return rc;
}

static int dissolve(struct tern__udp *u)
{
    struct sockaddr_storage bound;
    socklen_t len = sizeof(bound);
    if (getsockname(u->fd, (struct sockaddr *)&bound, &len) < 0)
        return -errno;
    struct sockaddr_storage unspec;
    memset(&unspec, 0, sizeof(unspec));
    unspec.ss_family = AF_UNSPEC;
    int rc = tern__net_fault();
    if (rc == 0 && connect(u->fd, (struct sockaddr *)&unspec, sizeof(unspec)) < 0) {
        rc = -errno;
        /* Some systems report EAFNOSUPPORT for AF_UNSPEC after having
         * dissolved the association all the same. */
        if (rc == -EAFNOSUPPORT)
            rc = 0;
    }
    if (rc < 0)
        return rc;
    u->state &= ~(unsigned)TERN__U_CONNECTED;
    return keep_port(u, *addr_port(&bound));
}

int tern_udp_connect(tern_loop *loop, tern_id id, const struct sockaddr *peer)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    struct tern__udp *u = tern__udp_get(loop, id);
    if (u == NULL)
        return -ENOENT;
    bool connected = (u->state & TERN__U_CONNECTED) != 0;
    if (peer == NULL) {
        if (!connected)
            return -ENOTCONN;
        return dissolve(u);
    }
    if (connected)
        return -EALREADY;
    socklen_t len = tern__udp_addr_len(u, peer);
    if (len == 0)
        return -EINVAL;
    int rc = tern__net_fault();
    if (rc == 0 && connect(u->fd, peer, len) < 0)
        rc = -errno;
    if (rc < 0)
        return rc;
    u->state |= TERN__U_CONNECTED;
    return 0;
}

/* Linux takes an int for the IPv4 multicast byte options, the BSDs a byte. */
static int set_ip_byte(struct tern__udp *u, int name, int value)
{
#if defined(__linux__)
    return sockopt(u, IPPROTO_IP, name, &value, sizeof(value));
#else
    unsigned char b = (unsigned char)value;
    return sockopt(u, IPPROTO_IP, name, &b, sizeof(b));
#endif
}

int tern_udp_set(tern_loop *loop, tern_id id, enum tern_udp_option option, int value)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    struct tern__udp *u = tern__udp_get(loop, id);
    if (u == NULL)
        return -ENOENT;
    bool v6 = u->family == AF_INET6;
    switch (option) {
    case TERN_UDP_BROADCAST:
        if (value != 0 && value != 1)
            return -EINVAL;
        return sockopt(u, SOL_SOCKET, SO_BROADCAST, &value, sizeof(value));
    case TERN_UDP_TTL:
        if (value < 1 || value > 255)
            return -EINVAL;
        return v6 ? sockopt(u, IPPROTO_IPV6, IPV6_UNICAST_HOPS, &value, sizeof(value))
                  : sockopt(u, IPPROTO_IP, IP_TTL, &value, sizeof(value));
    case TERN_UDP_MULTICAST_TTL:
        if (value < 0 || value > 255)
            return -EINVAL;
        return v6 ? sockopt(u, IPPROTO_IPV6, IPV6_MULTICAST_HOPS, &value, sizeof(value))
                  : set_ip_byte(u, IP_MULTICAST_TTL, value);
    case TERN_UDP_MULTICAST_LOOP:
        if (value != 0 && value != 1)
            return -EINVAL;
        return v6 ? sockopt(u, IPPROTO_IPV6, IPV6_MULTICAST_LOOP, &value, sizeof(value))
                  : set_ip_byte(u, IP_MULTICAST_LOOP, value);
    }
    return -EINVAL;
}

/* An IPv6 interface by name (NULL: 0, the system's choice), or -EINVAL. */
static int v6_interface(const char *iface, unsigned *index)
{
    *index = 0;
    if (iface == NULL)
        return 0;
    *index = if_nametoindex(iface);
    return *index == 0 ? -EINVAL : 0;
}

/* An IPv4 interface by address (NULL: INADDR_ANY), or -EINVAL. */
static int v4_interface(const char *iface, struct in_addr *addr)
{
    addr->s_addr = htonl(INADDR_ANY);
    if (iface == NULL)
        return 0;
    return inet_pton(AF_INET, iface, addr) == 1 ? 0 : -EINVAL;
}

int tern_udp_membership(tern_loop *loop, tern_id id, const char *group, const char *iface,
                        bool join)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    struct tern__udp *u = tern__udp_get(loop, id);
    if (u == NULL)
        return -ENOENT;
    if (group == NULL)
        return -EINVAL;
    int rc;
    if (u->family == AF_INET) {
        struct ip_mreq m;
        memset(&m, 0, sizeof(m));
        if (inet_pton(AF_INET, group, &m.imr_multiaddr) != 1 ||
            !IN_MULTICAST(ntohl(m.imr_multiaddr.s_addr)))
            return -EINVAL;
        if ((rc = v4_interface(iface, &m.imr_interface)) < 0)
            return rc;
        return sockopt(u, IPPROTO_IP, join ? IP_ADD_MEMBERSHIP : IP_DROP_MEMBERSHIP, &m, sizeof(m));
    }
    struct ipv6_mreq m;
    memset(&m, 0, sizeof(m));
    if (inet_pton(AF_INET6, group, &m.ipv6mr_multiaddr) != 1 ||
        !IN6_IS_ADDR_MULTICAST(&m.ipv6mr_multiaddr))
        return -EINVAL;
    unsigned index;
    if ((rc = v6_interface(iface, &index)) < 0)
        return rc;
    m.ipv6mr_interface = index;
    return sockopt(u, IPPROTO_IPV6, join ? IPV6_JOIN_GROUP : IPV6_LEAVE_GROUP, &m, sizeof(m));
}

int tern_udp_multicast_interface(tern_loop *loop, tern_id id, const char *iface)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    struct tern__udp *u = tern__udp_get(loop, id);
    if (u == NULL)
        return -ENOENT;
    int rc;
    if (u->family == AF_INET) {
        struct in_addr a;
        if ((rc = v4_interface(iface, &a)) < 0)
            return rc;
        return sockopt(u, IPPROTO_IP, IP_MULTICAST_IF, &a, sizeof(a));
    }
    unsigned index;
    if ((rc = v6_interface(iface, &index)) < 0)
        return rc;
    return sockopt(u, IPPROTO_IPV6, IPV6_MULTICAST_IF, &index, sizeof(index));
}
