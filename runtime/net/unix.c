/*
 * Unix-domain streams: listening and connecting by path (or a Linux
 * abstract name), the peer's credentials, and passing descriptors.
 *
 * A Unix-domain stream is an ordinary stream (stream.c, write.c) with
 * `unix_sock` set; only three things differ, all here:
 *  - reads use recvmsg with room for SCM_RIGHTS: a plain recv on such a
 *    socket would make the kernel close descriptors passed to us, so every
 *    read of a Unix-domain stream takes them. They wait in `rfds` (a ring)
 *    for tern_unix_take_fd; whatever is never taken is closed at close.
 *  - a write that passes descriptors holds tern's duplicates of them, so
 *    the caller may close its own at once; write.c sends such a request on
 *    its own at the head of the queue with the duplicates attached, and
 *    every way a request ends (sent, failed, cancelled, freed) closes them
 *    exactly once, through tern__wreq_fds_close.
 *  - connecting cannot take long (no lookup, no handshake across a
 *    network): the result of connect() is known at once almost always,
 *    and is delivered in step 2 through the connect path of tcp.c.
 *
 * Hazards:
 *  - A path longer than sun_path would be silently truncated by some
 *    systems: it is refused (-ENAMETOOLONG) before any socket exists.
 *  - Listening creates a file: when listen() fails after bind() did, the
 *    file is removed again, so a failed call leaves nothing behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "net_p.h"

/* ------------------------------------------------------------------ */
/* Addresses                                                           */
/* ------------------------------------------------------------------ */

/* Fill sun from path ('@' first: a Linux abstract name). */
static int unix_addr(const char *path, struct sockaddr_un *sun, socklen_t *len)
{
    if (path == NULL || path[0] == '\0')
        return -EINVAL;
    memset(sun, 0, sizeof(*sun));
    sun->sun_family = AF_UNIX;
    size_t n = strlen(path);
    if (path[0] == '@') {
#ifdef __linux__
        if (n > sizeof(sun->sun_path))
            return -ENAMETOOLONG;
        sun->sun_path[0] = '\0';
        memcpy(sun->sun_path + 1, path + 1, n - 1);
        *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
        return 0;
#else
        return -EAFNOSUPPORT;
#endif
    }
    if (n >= sizeof(sun->sun_path)) /* room for the terminating NUL */
        return -ENAMETOOLONG;
    memcpy(sun->sun_path, path, n);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Listening and connecting                                            */
/* ------------------------------------------------------------------ */

static int open_listener(const char *path, int backlog)
{
    struct sockaddr_un sun;
    socklen_t len;
    int rc = unix_addr(path, &sun, &len);
    if (rc < 0)
        return rc;
    int fd = tern__socket(AF_UNIX, SOCK_STREAM);
    if (fd < 0)
        return fd;
    rc = tern__stream_fault();
    if (rc == 0 && bind(fd, (struct sockaddr *)&sun, len) < 0)
        rc = -errno;
    if (rc < 0) {
        close(fd);
        return rc;
    }
    rc = tern__stream_fault();
    if (rc == 0 && listen(fd, backlog == TERN_TCP_BACKLOG_DEFAULT ? SOMAXCONN : backlog) < 0)
        rc = -errno;
    if (rc < 0) {
        close(fd);
        if (path[0] != '@')
            (void)unlink(path);
        return rc;
    }
    return fd;
}

int tern_unix_listen(tern_loop *loop, const char *path, int backlog, tern_accept_cb cb, void *arg,
                     tern_id *idp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (cb == NULL || backlog < TERN_TCP_BACKLOG_DEFAULT)
        return -EINVAL;
    int fd = open_listener(path, backlog);
    if (fd < 0)
        return fd;
    struct tern__stream *s;
    int rc = tern__stream_new(loop, TERN__LISTENER, fd, &s);
    if (rc == 0) {
        s->unix_sock = true;
        s->accept_cb = cb;
        s->accept_arg = arg;
        if ((rc = tern__listener_start(s)) < 0)
            tern__stream_discard(s);
    }
    if (rc < 0) {
        close(fd);
        if (path[0] != '@')
            (void)unlink(path);
        return rc;
    }
    if (idp != NULL)
        *idp = s->op.id;
    return 0;
}

int tern_unix_connect(tern_loop *loop, const char *path, tern_stream_cb cb, void *arg, tern_id *idp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (cb == NULL)
        return -EINVAL;
    struct sockaddr_un sun;
    socklen_t len;
    int rc = unix_addr(path, &sun, &len);
    if (rc < 0)
        return rc;
    int fd = tern__socket(AF_UNIX, SOCK_STREAM);
    if (fd < 0)
        return fd;
    struct tern__stream *s;
    if ((rc = tern__stream_new(loop, TERN__STREAM, fd, &s)) < 0) {
        close(fd);
        return rc;
    }
    s->unix_sock = true;
    s->connect_cb = cb;
    s->connect_arg = arg;
    int r;
    do
        if ((r = tern__stream_fault()) == 0 && connect(fd, (struct sockaddr *)&sun, len) < 0)
            r = -errno;
    while (r == -EINTR);
    if (r == -EINPROGRESS) {
        /* Some systems finish it later: tcp.c's connect path waits for it. */
        s->state |= TERN__S_CONNECTING;
        if ((rc = tern__stream_watch(s, TERN_WRITABLE)) < 0) {
            tern__stream_discard(s);
            close(fd);
            return rc;
        }
    } else {
        /* Known now; told in step 2. A failure closes the stream there
         * (CONNECTING holds queued writes back until then). */
        s->connect_due = true;
        s->connect_status = r;
        if (r < 0)
            s->state |= TERN__S_CONNECTING;
        tern__stream_owe(s);
    }
    if (idp != NULL)
        *idp = s->op.id;
    return 0;
}

int tern_unix_peer_cred(tern_loop *loop, tern_id id, tern_unix_cred *out)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    TERN_REQUIRE(out != NULL);
    struct tern__stream *s = tern__stream_get(loop, id);
    if (s == NULL)
        return -ENOENT;
    if (s->state & TERN__S_CONNECTING)
        return -ENOTCONN;
    if (!s->unix_sock)
        return -ENOTSOCK;
#if defined(SO_PEERCRED)
    struct ucred uc;
    socklen_t len = sizeof(uc);
    int rc = tern__stream_fault();
    if (rc == 0 && getsockopt(s->fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0)
        rc = -errno;
    if (rc < 0)
        return rc;
    *out = (tern_unix_cred){.pid = uc.pid, .uid = uc.uid, .gid = uc.gid};
#else
    uid_t uid;
    gid_t gid;
    int rc = tern__stream_fault();
    if (rc == 0 && getpeereid(s->fd, &uid, &gid) < 0)
        rc = -errno;
    if (rc < 0)
        return rc;
    *out = (tern_unix_cred){.pid = -1, .uid = uid, .gid = gid};
#endif
    return 0;
}

/* Duplicate the caller's descriptors into the request (write.c calls back). */
static int fill_fds(struct tern__stream *s, struct tern__wreq *w, const void *arg)
{
    (void)s;
    const int *fds = arg;
    for (unsigned i = 0; i < w->nfds; i++) {
        int rc = tern__fd_fault();
        int d = rc < 0 ? rc : fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
        if (d < 0) {
            if (rc == 0)
                rc = -errno;
            w->nfds = i;
            tern__wreq_fds_close(w);
            return rc;
        }
        w->fds[i] = d;
    }
    return 0;
}

int tern_unix_write_fds(tern_loop *loop, tern_id id, const tern_buf *bufs, unsigned nbufs,
                        const int *fds, unsigned nfds, tern_stream_cb cb, void *arg)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (fds == NULL || nfds == 0 || nfds > TERN_UNIX_FDS_MAX)
        return -EINVAL;
    for (unsigned i = 0; i < nfds; i++)
        if (fds[i] < 0)
            return -EBADF;
    return tern__write_queue(loop, id, bufs, nbufs, nfds, fill_fds, fds, cb, arg);
}

/* ------------------------------------------------------------------ */
/* Passing descriptors: the reading side                               */
/* ------------------------------------------------------------------ */

ssize_t tern__unix_recv(struct tern__stream *s, void *buf, size_t len)
{
    union tern__fds_cmsg cbuf;
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = cbuf.buf,
                         .msg_controllen = sizeof(cbuf.buf)};
#ifdef MSG_CMSG_CLOEXEC
    const int flags = MSG_CMSG_CLOEXEC;
#else
    const int flags = 0;
#endif
    ssize_t n = recvmsg(s->fd, &msg, flags);
    if (n < 0)
        return -errno;
    int rc = tern__unix_keep_fds(s, msg.msg_control, msg.msg_controllen);
    return rc < 0 ? rc : n; /* the data is read but its descriptors are gone: fail the read */
}

struct keeping {
    struct tern__stream *s;
    bool lost;
};

static void keep_fd(int fd, void *arg)
{
    struct keeping *k = arg;
#ifndef MSG_CMSG_CLOEXEC
    (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
#endif
    if (!tern__fds_push(k->s, fd)) {
        close(fd);
        k->lost = true;
    }
}

int tern__unix_keep_fds(struct tern__stream *s, const void *ctl, size_t ctllen)
{
    struct keeping k = {s, false};
    tern__passed_fds(ctl, ctllen, keep_fd, &k);
    return k.lost ? -ENOMEM : 0;
}

void tern__unix_close_fds(struct tern__stream *s)
{
    for (unsigned i = 0; i < s->rfds_len; i++)
        close(s->rfds[(s->rfds_head + i) % s->rfds_cap]);
    s->rfds_len = 0;
    s->rfds_head = 0;
}

int tern_unix_take_fd(tern_loop *loop, tern_id id)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    struct tern__stream *s = tern__stream_get(loop, id);
    if (s == NULL)
        return -ENOENT;
    /* A listener's ring holds the connections it has yet to hand out. */
    if (s->rfds_len == 0 || s->kind != TERN__STREAM)
        return -EAGAIN;
    int fd = s->rfds[s->rfds_head];
    s->rfds_head = (s->rfds_head + 1) % s->rfds_cap;
    s->rfds_len--;
    return fd;
}
