/*
 * TCP settings on a connected stream: no-delay and keep-alive.
 *
 * Keep-alive's timings have different names per system: TCP_KEEPIDLE on
 * Linux and the BSDs, TCP_KEEPALIVE (the same meaning) on macOS;
 * TCP_KEEPINTVL is common. A system with neither timing option refuses
 * the call with -ENOTSUP rather than turning keep-alive on with timings
 * the caller did not ask for. Values are checked before any system call,
 * so a bad one changes nothing.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "net_p.h"

#if !defined(TCP_KEEPIDLE) && defined(TCP_KEEPALIVE)
#define TCP_KEEPIDLE TCP_KEEPALIVE
#endif

/* The connected (or adopted) stream named id, or an error. */
static int connected_stream(tern_loop *loop, tern_id id, struct tern__stream **sp)
{
    struct tern__stream *s = tern__stream_get(loop, id);
    if (s == NULL)
        return -ENOENT;
    if (s->kind != TERN__STREAM)
        return -EINVAL;
    if ((s->state & TERN__S_CONNECTING) || s->fd < 0)
        return -ENOTCONN;
    *sp = s;
    return 0;
}

static int set_int(int fd, int level, int name, int value)
{
    int rc = tern__stream_fault();
    if (rc == 0 && setsockopt(fd, level, name, &value, sizeof(value)) < 0)
        rc = -errno;
    return rc;
}

int tern_tcp_nodelay(tern_loop *loop, tern_id id, bool on)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    struct tern__stream *s;
    int rc = connected_stream(loop, id, &s);
    return rc < 0 ? rc : set_int(s->fd, IPPROTO_TCP, TCP_NODELAY, on);
}

int tern_tcp_keepalive(tern_loop *loop, tern_id id, bool on, unsigned idle_s, unsigned interval_s)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (on && (idle_s < 1 || idle_s > TERN_TCP_KEEPALIVE_MAX_S || interval_s < 1 ||
               interval_s > TERN_TCP_KEEPALIVE_MAX_S))
        return -EINVAL;
    struct tern__stream *s;
    int rc = connected_stream(loop, id, &s);
    if (rc < 0)
        return rc;
    if (!on)
        return set_int(s->fd, SOL_SOCKET, SO_KEEPALIVE, 0);
#if defined(TCP_KEEPIDLE) && defined(TCP_KEEPINTVL)
    /* Timings first: a socket that refuses them is left as it was. */
    if ((rc = set_int(s->fd, IPPROTO_TCP, TCP_KEEPIDLE, (int)idle_s)) < 0 ||
        (rc = set_int(s->fd, IPPROTO_TCP, TCP_KEEPINTVL, (int)interval_s)) < 0)
        return rc;
    return set_int(s->fd, SOL_SOCKET, SO_KEEPALIVE, 1);
#else
    return -ENOTSUP;
#endif
}
