/*
 * GET /files/<path>: a file from the directory given with --files, read
 * through tern's file requests, never from outside that directory.
 *
 * Containment, in two layers:
 *   1. The path from the URL is percent-decoded and then refused (403)
 *      if any segment is empty, "." or "..", or holds a NUL or a
 *      backslash; an absolute path ("/files//etc/passwd") has an empty
 *      first segment. So the lexical path stays below the root.
 *   2. Symbolic links are followed, which could still lead out. So the
 *      file is opened first (tern_fs_open) and the path the kernel
 *      actually opened is read back from /proc/self/fd/N on the loop
 *      thread (a procfs lookup, no disk I/O); unless it lies inside the
 *      root's real path the answer is 403. The check binds to the
 *      descriptor, not to a path that could change after it.
 *   3. Only regular files are served: a FIFO, a socket or a device is
 *      403. The descriptor is opened O_NONBLOCK (an open of a FIFO with
 *      no writer, or of a device that waits for a carrier, returns at
 *      once) and its type is checked with fstat(2) on the loop thread (a
 *      cheap call on an open descriptor, no disk I/O): on the descriptor,
 *      so no rename between a check and the open can swap the file.
 *      tern_fs_read_file refuses anything but a regular file as well
 *      (tern/fs.h); this check answers first and says 403, not 500.
 * The verified descriptor is then read whole with tern_fs_read_file on
 * /proc/self/fd/N (which reopens that same file), so the read is a
 * multi-step request on a reservation: once accepted, none of its steps
 * can be refused, however busy the pool gets. Then the descriptor is
 * closed with tern_fs_close.
 *
 * Load: like /hash, shed with 503 before starting when the pool's
 * queue-wait p99 is over the bound, or when the pool refuses the first
 * request. A refusal later on (the read after a successful open) is also
 * a 503, after which the descriptor is still closed.
 *
 * A client that goes away mid-request leaves the job record running to
 * its end (conn = NULL); whatever it opened is closed all the same.
 * Linux only: it relies on /proc/self/fd.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "demo.h"

#define FILES_MAX_BYTES (64u << 20)

struct file_job {
    struct job_base base;
    int fd;         /* the open descriptor, or -1 */
    int closing_fd; /* handed to tern_fs_close, or -1 */
    char path[PATH_MAX];
};

int files_init(struct server *srv, const char *dir)
{
    char *real = realpath(dir, NULL);
    if (real == NULL)
        return -errno;
    srv->files_root = real;
    return 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/*
 * Decode rel (percent-encoding) into out and check every segment.
 * Returns 0, or the HTTP status to answer with (400 bad encoding, 403 a
 * path that could leave the root, 414 too long).
 */
static int safe_relative(const char *rel, size_t len, char *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = rel[i];
        if (ch == '%') {
            int hi = i + 2 < len ? hexval(rel[i + 1]) : -1;
            int lo = i + 2 < len ? hexval(rel[i + 2]) : -1;
            if (hi < 0 || lo < 0)
                return 400;
            ch = (char)(hi * 16 + lo);
            i += 2;
        }
        if (ch == '\0' || ch == '\\')
            return 403;
        if (n + 1 >= cap)
            return 414;
        out[n++] = ch;
    }
    out[n] = '\0';
    if (n == 0)
        return 403; /* the root itself: no listings */
    /* Every segment between slashes: not empty, not "." nor "..". */
    for (const char *seg = out;;) {
        const char *end = strchr(seg, '/');
        size_t sl = end ? (size_t)(end - seg) : strlen(seg);
        if (sl == 0 || (sl == 1 && seg[0] == '.') || (sl == 2 && seg[0] == '.' && seg[1] == '.'))
            return 403;
        if (end == NULL)
            return 0;
        seg = end + 1;
    }
}

static int http_status_of(int err)
{
    switch (err) {
    case -ENOENT:
    case -ENOTDIR:
        return 404;
    case -EACCES:
    case -EPERM:
    case -ELOOP:
    case -EISDIR:
    case -EFBIG:
    case -ENXIO:   /* a socket, or a device with no driver: not a file */
    case -ENOTSUP: /* tern_fs_read_file: not a regular file */
        return 403;
    case -EAGAIN:
        return 503;
    default:
        return 500;
    }
}

static void respond_status(struct conn *c, int code)
{
    struct server *srv = c->srv;
    switch (code) {
    case 403:
        srv->n.forbidden++;
        http_respond(c, 403, "text/plain", NULL, "forbidden\n", 10);
        break;
    case 404:
        srv->n.not_found++;
        http_respond(c, 404, "text/plain", NULL, "not found\n", 10);
        break;
    case 503:
        srv->n.shed_refused++;
        http_respond(c, 503, "text/plain", "Retry-After: 1\r\n", "overloaded, retry\n", 18);
        break;
    default:
        http_respond(c, 500, "text/plain", NULL, "file error\n", 11);
        break;
    }
}

/* The request is over: free the record, let the server drain. */
static void job_end(struct file_job *f)
{
    struct server *srv = f->base.srv;
    free(f);
    srv->jobs--;
    server_maybe_done(srv);
}

static void closed(tern_loop *loop, tern_id id, int status, tern_fs_result *res, void *arg)
{
    (void)loop, (void)id, (void)res;
    struct file_job *f = arg;
    /* Cancelled before it ran (the loop is being freed): close it here. */
    if (status == -ECANCELED)
        close(f->closing_fd);
    job_end(f);
}

/* Answer (if the client is still there) and close the descriptor. */
static void finish(struct file_job *f, int code, const void *body, size_t len)
{
    struct conn *c = f->base.conn;
    if (c != NULL) {
        if (code == 200) {
            f->base.srv->n.ok++;
            f->base.srv->n.files_served++;
            http_respond(c, 200, "application/octet-stream", NULL, body, len);
        } else {
            respond_status(c, code);
        }
        f->base.conn = NULL;
        http_request_done(c);
    }
    if (f->fd < 0) {
        job_end(f);
        return;
    }
    int fd = f->fd;
    f->fd = -1;
    f->closing_fd = fd;
    if (tern_fs_close(f->base.srv->loop, fd, NULL, closed, f, &f->base.id) < 0) {
        /* Refused (a full pool): a read-only descriptor closes quickly
         * enough to do it here rather than leak it. */
        close(fd);
        job_end(f);
    }
}

static void read_whole(tern_loop *loop, tern_id id, int status, tern_fs_result *res, void *arg)
{
    (void)loop, (void)id;
    struct file_job *f = arg;
    if (status == 0)
        finish(f, 200, res->data, (size_t)res->value);
    else
        finish(f, http_status_of(status), NULL, 0);
    tern_fs_free(res->data);
}

/* Whether the descriptor's real path lies inside the root. */
static bool inside_root(struct server *srv, int fd)
{
    char link[64], real[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, real, sizeof real - 1);
    if (n < 0)
        return false;
    real[n] = '\0';
    size_t rl = strlen(srv->files_root);
    if (strncmp(real, srv->files_root, rl) != 0)
        return false;
    return real[rl] == '/' || (rl == 1 && srv->files_root[0] == '/');
}

static void opened(tern_loop *loop, tern_id id, int status, tern_fs_result *res, void *arg)
{
    (void)id;
    struct file_job *f = arg;
    if (status < 0) {
        finish(f, http_status_of(status), NULL, 0);
        return;
    }
    f->fd = (int)res->value;
    if (f->base.conn == NULL) { /* the client left: just close */
        finish(f, 500, NULL, 0);
        return;
    }
    struct stat st;
    if (!inside_root(f->base.srv, f->fd) || fstat(f->fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        finish(f, 403, NULL, 0);
        return;
    }
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.max_bytes = FILES_MAX_BYTES;
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", f->fd);
    int rc = tern_fs_read_file(loop, self, &o, read_whole, f, &f->base.id);
    if (rc < 0)
        finish(f, http_status_of(rc), NULL, 0);
}

void route_files(struct conn *c, const char *rel, size_t len)
{
    struct server *srv = c->srv;
    if (srv->files_root == NULL) {
        srv->n.not_found++;
        http_respond(c, 404, "text/plain", NULL, "no --files directory\n", 21);
        return;
    }
    char decoded[PATH_MAX];
    int code = safe_relative(rel, len, decoded, sizeof decoded);
    if (code == 400) {
        srv->n.bad_request++;
        http_respond(c, 400, "text/plain", NULL, "bad path encoding\n", 18);
        return;
    }
    if (code != 0) {
        respond_status(c, code == 414 ? 403 : code);
        return;
    }
    if (server_over_wait_bound(srv)) {
        srv->n.shed_wait++;
        http_respond(c, 503, "text/plain", "Retry-After: 1\r\n", "overloaded, retry\n", 18);
        return;
    }
    struct file_job *f = calloc(1, sizeof(*f));
    if (f == NULL) {
        http_respond(c, 500, "text/plain", NULL, "out of memory\n", 14);
        return;
    }
    f->base.conn = c;
    f->base.srv = srv;
    f->fd = -1;
    f->closing_fd = -1;
    if (snprintf(f->path, sizeof f->path, "%s/%s", srv->files_root, decoded) >=
        (int)sizeof f->path) {
        free(f);
        respond_status(c, 403);
        return;
    }
    /* O_NONBLOCK: a FIFO in the directory must not hold a worker in open(2). */
    int rc = tern_fs_open(srv->loop, f->path, O_RDONLY | O_NONBLOCK, 0, NULL, opened, f,
                          &f->base.id);
    if (rc < 0) {
        free(f);
        respond_status(c, http_status_of(rc));
        return;
    }
    srv->jobs++;
    c->busy = true;
    c->job = &f->base;
}
