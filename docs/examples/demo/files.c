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
 * The verified descriptor is then streamed: its size is taken from the
 * same fstat, the head goes out with that Content-Length, and the body
 * follows in chunks read with tern_fs_read at increasing offsets, each
 * written to the stream as soon as it is read. The file is never held
 * whole.
 *
 * Memory. Each answer may hold at most its window (--file-window-bytes,
 * default 64 KiB) in buffers: two chunks of half the window, one being
 * read while the other drains to the client; the next read starts only
 * when a chunk has gone to the socket. So a client that stops reading
 * costs its window and no more, and the write bound (http.c) closes it
 * once nothing drains for that long. Every answer reserves its window
 * from a process-wide budget (--file-budget-bytes, default 64 MiB, so
 * 1,024 downloads at once) before it opens anything, and gives it back
 * when its last chunk is out; a request the budget cannot cover is
 * answered 503 with Retry-After at once (files_over_budget). A file that
 * shrinks while it is served cuts the connection (the promised length
 * cannot be kept); one that grows is served to its size at the open.
 *
 * Load: like /hash, shed with 503 before starting when the pool's
 * queue-wait p99 is over the bound, or when the pool refuses the open.
 * Out of descriptors (EMFILE, ENFILE) is 503 with Retry-After too
 * (files_no_fd): the server is busy, not broken. A read the pool refuses
 * mid-answer is retried shortly after, since the head is already out.
 *
 * Draining (SIGTERM): an answer in progress goes on to its end; the
 * connection then closes once its bytes are out (http.c).
 *
 * A client that goes away mid-answer leaves the job record to finish its
 * read in flight and the writes tern still holds (conn = NULL); the record
 * counts them, whatever it opened is closed, and the window is given back
 * once the last of them has completed.
 * Linux only: it relies on /proc/self/fd.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "demo.h"

#include "loops.h"

/* How soon a read the pool refused is tried again. */
#define RETRY_NS (10 * 1000 * 1000)

struct file_job {
    struct job_base base;
    int fd;         /* the open descriptor, or -1 */
    int closing_fd; /* handed to tern_fs_close, or -1 */
    uint64_t size;  /* the file's length at the open: the Content-Length */
    uint64_t off;   /* where the next read starts */
    size_t window;  /* reserved from the budget */
    size_t held;    /* bytes in this answer's buffers: being read, or queued */
    unsigned refs;  /* the job's own + a read in flight + each write in flight */
    bool reading;   /* a tern_fs_read is in flight */
    bool ended;     /* the answer is complete, or abandoned: no more reads */
    bool given_back; /* the window went back to the budget */
    tern_id retry;  /* the timer that retries a refused read, or 0 */
    char path[PATH_MAX];
};

/* One chunk of the body: read into, then written from. */
struct chunk {
    struct file_job *f;
    size_t len;
    char data[];
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
    case -ENOTSUP: /* not a regular file */
        return 403;
    case -EAGAIN:
    case -EMFILE: /* out of descriptors: busy, not broken */
    case -ENFILE:
        return 503;
    default:
        return 500;
    }
}

static void respond_status(struct conn *c, int code, int err)
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
        if (err == -EMFILE || err == -ENFILE)
            srv->n.files_no_fd++;
        else
            srv->n.shed_refused++;
        http_respond(c, 503, "text/plain", "Retry-After: 1\r\n", "overloaded, retry\n", 18);
        break;
    default:
        http_respond(c, 500, "text/plain", NULL, "file error\n", 11);
        break;
    }
}

void files_budget(const struct server *srv, uint64_t *reserved, uint64_t *budget)
{
    *reserved = atomic_load_explicit(&srv->app->file_reserved, memory_order_relaxed);
    *budget = srv->app->file_budget;
}

/*
 * Once no more reads will start and no buffer is left, the window goes
 * back to the budget, before the descriptor's close (a pool request) is
 * done: a keep-alive client's next download may need it at once.
 */
static void give_back(struct file_job *f)
{
    if (f->given_back || !f->ended || f->held != 0)
        return;
    f->given_back = true;
    atomic_fetch_sub_explicit(&f->base.srv->app->file_reserved, f->window, memory_order_relaxed);
}

/* The last reference is gone: free the record. */
static void unref(struct file_job *f)
{
    if (--f->refs > 0)
        return;
    struct server *srv = f->base.srv;
    f->held = 0;
    f->ended = true;
    give_back(f);
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
    unref(f);
}

/*
 * No more reads: close the descriptor (the job's own reference goes when
 * that is done). Reads and writes in flight hold their own references.
 */
static void end(struct file_job *f)
{
    if (f->ended)
        return;
    f->ended = true;
    give_back(f);
    if (f->retry != 0) {
        tern_timer_stop(f->base.srv->loop, f->retry);
        f->retry = 0;
        f->refs--; /* the timer's; the job's own is still held */
    }
    if (f->fd < 0) {
        unref(f);
        return;
    }
    int fd = f->fd;
    f->fd = -1;
    f->closing_fd = fd;
    if (tern_fs_close(f->base.srv->loop, fd, NULL, closed, f, &f->base.id) < 0) {
        /* Refused (a full pool): a read-only descriptor closes quickly
         * enough to do it here rather than leak it. */
        close(fd);
        unref(f);
    }
}

/* Answer with a status (if the client is still there), then end. */
static void fail(struct file_job *f, int code, int err)
{
    struct conn *c = f->base.conn;
    if (c != NULL) {
        respond_status(c, code, err);
        f->base.conn = NULL;
        http_request_done(c);
    }
    end(f);
}

/* The head is out and the body cannot be completed: cut the connection. */
static void cut(struct file_job *f)
{
    struct conn *c = f->base.conn;
    if (c != NULL)
        http_close(c); /* route_abandon: conn = NULL */
    end(f);
}

static void pump(struct file_job *f);

static void chunk_written(tern_loop *loop, tern_id stream, int status, void *arg)
{
    (void)loop, (void)stream, (void)status; /* a client that left is seen by the read side */
    struct chunk *ch = arg;
    struct file_job *f = ch->f;
    f->held -= ch->len;
    free(ch);
    if (f->base.conn == NULL)
        end(f);
    else
        pump(f);
    give_back(f);
    unref(f);
}

static void read_done(tern_loop *loop, tern_id id, int status, tern_fs_result *res, void *arg)
{
    (void)loop, (void)id;
    struct chunk *ch = arg;
    struct file_job *f = ch->f;
    f->reading = false;
    struct conn *c = f->base.conn;
    size_t got = status == 0 ? (size_t)res->value : 0;
    if (c == NULL || f->ended || got == 0) {
        /* Gone, or a read error, or the file shrank: the length promised cannot be kept. */
        f->held -= ch->len;
        free(ch);
        cut(f);
        give_back(f);
        unref(f);
        return;
    }
    f->held -= ch->len - got;
    ch->len = got;
    f->off += got;
    /* The read's reference passes to the write. */
    if (http_write_owned(c, ch->data, got, chunk_written, ch) < 0) {
        f->held -= got;
        free(ch);
        end(f); /* the connection is closed */
        give_back(f);
        unref(f);
        return;
    }
    if (f->base.conn != NULL)
        pump(f);
}

static void retry_read(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id;
    struct file_job *f = arg;
    f->retry = 0;
    if (f->base.conn == NULL)
        end(f);
    else
        pump(f);
    unref(f);
}

/* The whole body went to the socket: the request is done, the descriptor closed. */
static void complete(struct file_job *f)
{
    struct conn *c = f->base.conn;
    struct server *srv = f->base.srv;
    srv->n.files_served++;
    f->base.conn = NULL;
    http_request_done(c);
    end(f);
}

/* Read the next chunk if the window has room for it. */
static void pump(struct file_job *f)
{
    if (f->ended || f->reading || f->retry != 0 || f->base.conn == NULL)
        return;
    if (f->off == f->size) {
        /* Done once the last chunk is out too: until then the window is
         * in use, and the connection's next request waits for it. */
        if (f->held == 0)
            complete(f);
        return;
    }
    size_t chunk = f->window / 2;
    if (f->size - f->off < chunk)
        chunk = (size_t)(f->size - f->off);
    if (f->held + chunk > f->window)
        return; /* a chunk's write completing calls again */
    struct chunk *ch = malloc(sizeof(*ch) + chunk);
    if (ch == NULL) {
        cut(f);
        return;
    }
    ch->f = f;
    ch->len = chunk;
    tern_loop *loop = f->base.srv->loop;
    int rc = tern_fs_read(loop, f->fd, ch->data, chunk, (int64_t)f->off, NULL, read_done, ch,
                          &f->base.id);
    if (rc == -EAGAIN) {
        /* The pool is full: try again shortly (the head is out, a 503 is too late). */
        free(ch);
        if (tern_timer_start(loop, RETRY_NS, 0, retry_read, f, &f->retry) < 0) {
            f->retry = 0;
            cut(f);
            return;
        }
        tern_unref(loop, f->retry);
        f->refs++;
        return;
    }
    if (rc < 0) {
        free(ch);
        cut(f);
        return;
    }
    f->reading = true;
    f->held += chunk;
    f->refs++;
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
    (void)loop, (void)id;
    struct file_job *f = arg;
    if (status < 0) {
        fail(f, http_status_of(status), status);
        return;
    }
    f->fd = (int)res->value;
    struct conn *c = f->base.conn;
    if (c == NULL) { /* the client left: just close */
        end(f);
        return;
    }
    struct stat st;
    if (!inside_root(f->base.srv, f->fd) || fstat(f->fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        fail(f, 403, 0);
        return;
    }
    struct server *srv = f->base.srv;
    /* The last answer if the request said so, or the drain began. */
    if (srv->draining)
        c->keep_alive = false;
    f->size = (uint64_t)st.st_size;
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 200 OK\r\nServer: tern-demo\r\n"
                     "Content-Type: application/octet-stream\r\nContent-Length: %llu\r\n"
                     "Connection: %s\r\n\r\n",
                     (unsigned long long)f->size, c->keep_alive ? "keep-alive" : "close");
    srv->n.ok++;
    srv->n.responses++;
    http_write(c, head, (size_t)n);
    if (f->base.conn == NULL) { /* the write failed: the connection is closed */
        end(f);
        return;
    }
    pump(f);
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
        respond_status(c, code == 414 ? 403 : code, 0);
        return;
    }
    if (server_over_wait_bound(srv)) {
        srv->n.shed_wait++;
        http_respond(c, 503, "text/plain", "Retry-After: 1\r\n", "overloaded, retry\n", 18);
        return;
    }
    /* The answer's window, from the budget every loop shares, or 503 now. */
    struct app *app = srv->app;
    size_t window = srv->file_window;
    uint64_t before = atomic_fetch_add_explicit(&app->file_reserved, window, memory_order_relaxed);
    if (before + window > app->file_budget) {
        atomic_fetch_sub_explicit(&app->file_reserved, window, memory_order_relaxed);
        srv->n.files_over_budget++;
        http_respond(c, 503, "text/plain", "Retry-After: 1\r\n", "too many downloads, retry\n",
                     26);
        return;
    }
    struct file_job *f = calloc(1, sizeof(*f));
    if (f == NULL) {
        atomic_fetch_sub_explicit(&app->file_reserved, window, memory_order_relaxed);
        http_respond(c, 500, "text/plain", NULL, "out of memory\n", 14);
        return;
    }
    f->base.conn = c;
    f->base.srv = srv;
    f->fd = -1;
    f->closing_fd = -1;
    f->window = window;
    f->refs = 1;
    srv->jobs++; /* unref undoes it, with the window */
    if (snprintf(f->path, sizeof f->path, "%s/%s", srv->files_root, decoded) >=
        (int)sizeof f->path) {
        f->base.conn = NULL;
        unref(f);
        respond_status(c, 403, 0);
        return;
    }
    /* O_NONBLOCK: a FIFO in the directory must not hold a worker in open(2). */
    int rc = tern_fs_open(srv->loop, f->path, O_RDONLY | O_NONBLOCK, 0, NULL, opened, f,
                          &f->base.id);
    if (rc < 0) {
        f->base.conn = NULL;
        unref(f);
        respond_status(c, http_status_of(rc), rc);
        return;
    }
    c->busy = true;
    c->job = &f->base;
}
