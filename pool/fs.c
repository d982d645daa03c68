/*
 * File requests of one system call each (include/tern/fs.h), and what all
 * file requests share: checking the caller's values, copying paths into
 * one block, admission through tern__submit_job, and the done function
 * that turns a finished job into a tern_fs_cb. The whole-file requests'
 * steps live in fs_whole.c.
 *
 * Status. A request's own outcome is r->status, set by its work function;
 * the job's status (-ECANCELED whenever tern_cancel reached it) is not
 * used, because a cancel that lands while the system call runs changes
 * nothing about what the call did (SPEC §13: "done says what happened").
 * A NULL result means the work never ran, or a whole-file request was
 * stopped in the queue between steps: that is -ECANCELED.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/sendfile.h>
#endif

#include "fs_p.h"

#define STEP_MAX (UINT64_C(1) << 30)
#define COPY_BUF 65536

void tern_fs_options_init(tern_fs_options *opts)
{
    TERN_REQUIRE(opts != NULL);
    *opts = (tern_fs_options){
        .max_bytes = UINT64_C(1) << 30,
        .step_bytes = (size_t)1 << 20,
        .mode = 0666,
    };
}

void tern_fs_free(void *p)
{
    free(p);
}

/* ------------------------------------------------------------------ */
/* System calls through the fault seam                                 */
/* ------------------------------------------------------------------ */

int tern__fs_sys_open(const char *path, int flags, unsigned mode)
{
    int rc;
    if ((rc = tern__fd_fault()) < 0 || (rc = tern__fs_fault()) < 0)
        return rc;
    int fd = open(path, flags | O_CLOEXEC, (mode_t)mode);
    return fd >= 0 ? fd : -errno;
}

int tern__fs_sys_close(int fd)
{
    /*
     * The descriptor is released whatever happens (an injected failure
     * included, or the walk would leak it). A real EINTR has released it
     * too on Linux; reporting it would invite a second close of a number
     * another thread may already own, so it counts as success.
     */
    int injected = tern__fs_fault();
    int rc = close(fd) == 0 || errno == EINTR ? 0 : -errno;
    return injected < 0 ? injected : rc;
}

int tern__fs_sys_fstat(int fd, struct stat *st)
{
    int rc = tern__fs_fault();
    if (rc < 0)
        return rc;
    return fstat(fd, st) == 0 ? 0 : -errno;
}

int tern__fs_sys_fsync(int fd)
{
    int rc = tern__fs_fault();
    if (rc < 0)
        return rc;
    return fsync(fd) == 0 ? 0 : -errno;
}

ssize_t tern__fs_sys_read(int fd, void *buf, size_t len)
{
    int rc = tern__fs_fault();
    if (rc < 0)
        return rc;
    ssize_t n = read(fd, buf, len);
    return n >= 0 ? n : -errno;
}

ssize_t tern__fs_sys_pread(int fd, void *buf, size_t len, int64_t off)
{
    int rc = tern__fs_fault();
    if (rc < 0)
        return rc;
    ssize_t n = pread(fd, buf, len, (off_t)off);
    return n >= 0 ? n : -errno;
}

ssize_t tern__fs_sys_pwrite(int fd, const void *buf, size_t len, int64_t off)
{
    int rc = tern__fs_fault();
    if (rc < 0)
        return rc;
    ssize_t n = pwrite(fd, buf, len, (off_t)off);
    return n >= 0 ? n : -errno;
}

int tern__fs_sys_rename(const char *from, const char *to)
{
    int rc = tern__fs_fault();
    if (rc < 0)
        return rc;
    return rename(from, to) == 0 ? 0 : -errno;
}

/* ------------------------------------------------------------------ */
/* Directory listings                                                  */
/* ------------------------------------------------------------------ */

struct name {
    char *name;
    unsigned char type;
};

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct name *)a)->name, ((const struct name *)b)->name);
}

static void free_names(struct name *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].name);
    free(v);
}

/* Pack sorted names into one block: the listing, its entries, the strings. */
static int pack(struct name *v, size_t n, size_t bytes, tern_fs_listing **out)
{
    tern_fs_listing *l = tern__malloc(sizeof(*l) + n * sizeof(l->entries[0]) + bytes);
    if (l == NULL)
        return -ENOMEM;
    char *s = (char *)&l->entries[n];
    l->count = n;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(v[i].name) + 1;
        memcpy(s, v[i].name, len);
        l->entries[i] = (tern_fs_dirent){.name = s, .type = v[i].type};
        s += len;
    }
    *out = l;
    return 0;
}

static int list_dir(struct tern__fs_req *r)
{
    int fd = tern__fs_sys_open(r->path, O_RDONLY | O_DIRECTORY, 0);
    if (fd < 0)
        return fd;
    DIR *d = fdopendir(fd);
    if (d == NULL) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    struct name *v = NULL;
    size_t n = 0, cap = 0, bytes = 0;
    int rc = 0;
    for (;;) {
        if ((rc = tern__fs_fault()) < 0)
            break;
        errno = 0;
        struct dirent *e = readdir(d);
        if (e == NULL) {
            rc = -errno; /* 0 at the end */
            break;
        }
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            struct name *nv = tern__realloc(v, ncap * sizeof(*v));
            if (nv == NULL) {
                rc = -ENOMEM;
                break;
            }
            v = nv;
            cap = ncap;
        }
        size_t len = strlen(e->d_name) + 1;
        if ((v[n].name = tern__malloc(len)) == NULL) {
            rc = -ENOMEM;
            break;
        }
        memcpy(v[n].name, e->d_name, len);
        v[n].type = e->d_type;
        n++;
        bytes += len;
    }
    closedir(d);
    if (rc == 0) {
        qsort(v, n, sizeof(*v), by_name);
        if ((rc = pack(v, n, bytes, &r->res.listing)) == 0)
            r->res.value = (int64_t)n;
    }
    free_names(v, n);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Copies                                                              */
/* ------------------------------------------------------------------ */

/* Through a buffer, for systems or file pairs the kernel cannot copy. */
static int64_t copy_buffered(struct tern__fs_req *r, int64_t off_in, int64_t off_out,
                             size_t left)
{
    char *buf = tern__malloc(COPY_BUF);
    if (buf == NULL)
        return -ENOMEM;
    int64_t copied = 0;
    while (left > 0) {
        ssize_t n = tern__fs_sys_pread(r->fd, buf, left < COPY_BUF ? left : COPY_BUF, off_in);
        if (n <= 0) {
            if (n < 0 && copied == 0)
                copied = n;
            break;
        }
        ssize_t w = 0;
        while (w < n) {
            ssize_t m = tern__fs_sys_pwrite(r->fd2, buf + w, (size_t)(n - w), off_out + w);
            if (m < 0) {
                free(buf);
                return copied > 0 ? copied : m;
            }
            w += m;
        }
        copied += n;
        off_in += n;
        off_out += n;
        left -= (size_t)n;
    }
    free(buf);
    return copied;
}

/*
 * Bytes copied, or a negative errno if nothing was: an error after some
 * bytes ends the copy early, and the count says how far it got (as a
 * short write(2) does); the next request meets the error.
 */
static int64_t copy_range(struct tern__fs_req *r)
{
    int64_t off_in = r->off, off_out = r->off2;
    size_t left = r->len;
    int64_t copied = 0;
#ifdef __linux__
    while (left > 0) {
        int rc = tern__fs_fault();
        ssize_t n = rc < 0 ? (errno = -rc, -1)
                           : copy_file_range(r->fd, (off_t *)&off_in, r->fd2, (off_t *)&off_out,
                                             left, 0);
        if (n < 0) {
            int err = errno;
            /* The kernel cannot copy this pair (or at all): use a buffer. */
            if (copied == 0 && (err == ENOSYS || err == EXDEV || err == EINVAL ||
                                err == EOPNOTSUPP) && rc == 0)
                return copy_buffered(r, off_in, off_out, left);
            return copied > 0 ? copied : -err;
        }
        if (n == 0)
            break;
        copied += n;
        left -= (size_t)n;
    }
    return copied;
#else
    return copy_buffered(r, off_in, off_out, left);
#endif
}

static int64_t send_file(struct tern__fs_req *r)
{
#ifdef __linux__
    int rc = tern__fs_fault();
    if (rc < 0)
        return rc;
    off_t off = (off_t)r->off;
    ssize_t n = sendfile(r->fd2, r->fd, &off, r->len);
    return n >= 0 ? n : -errno;
#else
    (void)r;
    return -ENOSYS;
#endif
}

/* ------------------------------------------------------------------ */
/* The work of single-call requests                                    */
/* ------------------------------------------------------------------ */

static int64_t vector_io(struct tern__fs_req *r)
{
    int rc = tern__fs_fault();
    if (rc < 0)
        return rc;
    ssize_t n = r->op == TERN__FS_READ ? preadv(r->fd, r->iov, (int)r->iovcnt, (off_t)r->off)
                                       : pwritev(r->fd, r->iov, (int)r->iovcnt, (off_t)r->off);
    return n >= 0 ? n : -errno;
}

static int64_t run_one(struct tern__fs_req *r)
{
    int rc;
    switch (r->op) {
    case TERN__FS_OPEN:
        return tern__fs_sys_open(r->path, r->flags, r->mode);
    case TERN__FS_CLOSE:
        return tern__fs_sys_close(r->fd);
    case TERN__FS_READ:
    case TERN__FS_WRITE:
        return vector_io(r);
    case TERN__FS_STAT:
        if ((rc = tern__fs_fault()) < 0)
            return rc;
        return stat(r->path, &r->res.st) == 0 ? 0 : -errno;
    case TERN__FS_LSTAT:
        if ((rc = tern__fs_fault()) < 0)
            return rc;
        return lstat(r->path, &r->res.st) == 0 ? 0 : -errno;
    case TERN__FS_FSTAT:
        return tern__fs_sys_fstat(r->fd, &r->res.st);
    case TERN__FS_FSYNC:
        return tern__fs_sys_fsync(r->fd);
    case TERN__FS_FDATASYNC:
        if ((rc = tern__fs_fault()) < 0)
            return rc;
        return fdatasync(r->fd) == 0 ? 0 : -errno;
    case TERN__FS_FTRUNCATE:
        if ((rc = tern__fs_fault()) < 0)
            return rc;
        return ftruncate(r->fd, (off_t)r->off) == 0 ? 0 : -errno;
    case TERN__FS_RENAME:
        return tern__fs_sys_rename(r->path, r->path2);
    case TERN__FS_UNLINK:
        if ((rc = tern__fs_fault()) < 0)
            return rc;
        return unlink(r->path) == 0 ? 0 : -errno;
    case TERN__FS_MKDIR:
        if ((rc = tern__fs_fault()) < 0)
            return rc;
        return mkdir(r->path, (mode_t)r->mode) == 0 ? 0 : -errno;
    case TERN__FS_RMDIR:
        if ((rc = tern__fs_fault()) < 0)
            return rc;
        return rmdir(r->path) == 0 ? 0 : -errno;
    case TERN__FS_LIST:
        return list_dir(r);
    case TERN__FS_COPY:
        return copy_range(r);
    case TERN__FS_SENDFILE:
        return send_file(r);
    default:
        TERN_UNREACHABLE();
    }
}

static void *one_work(tern_job *job, void *arg)
{
    struct tern__fs_req *r = arg;
    if (tern_job_cancelled(job)) {
        /* Claimed, but the cancel came first: the call never starts. */
        r->status = -ECANCELED;
        return r;
    }
    int64_t v = run_one(r);
    if (v < 0) {
        r->status = (int)v;
    } else {
        r->status = 0;
        if (r->op != TERN__FS_LIST) /* list_dir set the count */
            r->res.value = v;
    }
    return r;
}

static void fs_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)status; /* the job's: see the top of this file */
    struct tern__fs_req *r = arg;
    if (result == NULL) {
        tern__fs_abandon(r);
        r->status = -ECANCELED;
    }
    tern_fs_cb cb = r->cb;
    void *cb_arg = r->arg;
    tern_fs_result res = r->res;
    int st = r->status;
    free(r);
    cb(loop, id, st, &res, cb_arg);
}

/* ------------------------------------------------------------------ */
/* Building and submitting requests                                    */
/* ------------------------------------------------------------------ */

/* -EINVAL for NULL, -ENAMETOOLONG at PATH_MAX bytes or more; else its length. */
static ssize_t check_path(const char *path)
{
    if (path == NULL)
        return -EINVAL;
    size_t n = strnlen(path, PATH_MAX);
    return n >= PATH_MAX ? -ENAMETOOLONG : (ssize_t)n;
}

struct spec {
    uint8_t op;
    const char *path, *path2;
    unsigned iovcnt;   /* iovec entries to copy into the block */
    size_t tmp_bytes;  /* room for a temporary's path */
};

/*
 * Check what every request shares and allocate its block with the paths
 * copied in. Returns 0 or a negative errno; nothing is left on failure.
 */
static int req_new(tern_loop *loop, const struct spec *s, const tern_fs_options *opts,
                   tern_fs_cb cb, void *arg, struct tern__fs_req **rp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (cb == NULL)
        return -EINVAL;
    tern_fs_options defaults;
    if (opts == NULL) {
        tern_fs_options_init(&defaults);
        opts = &defaults;
    }
    if (opts->step_bytes == 0 || opts->step_bytes > STEP_MAX)
        return -EINVAL;
    ssize_t n1 = 0, n2 = 0;
    if (s->op != TERN__FS_CLOSE && s->op != TERN__FS_READ && s->op != TERN__FS_WRITE &&
        s->op != TERN__FS_FSTAT && s->op != TERN__FS_FSYNC && s->op != TERN__FS_FDATASYNC &&
        s->op != TERN__FS_FTRUNCATE && s->op != TERN__FS_COPY && s->op != TERN__FS_SENDFILE &&
        (n1 = check_path(s->path)) < 0)
        return (int)n1;
    if (s->op == TERN__FS_RENAME && (n2 = check_path(s->path2)) < 0)
        return (int)n2;
    if (atomic_load_explicit(&loop->closing, memory_order_relaxed))
        return -ESHUTDOWN;
    size_t iov_bytes = s->iovcnt * sizeof(struct iovec);
    size_t size = sizeof(struct tern__fs_req) + iov_bytes + (size_t)n1 + 1 + (size_t)n2 + 1 +
                  s->tmp_bytes;
    struct tern__fs_req *r = tern__malloc(size);
    if (r == NULL)
        return -ENOMEM;
    *r = (struct tern__fs_req){.op = s->op, .fd = -1, .fd2 = -1, .own_fd = -1,
                               .max_bytes = opts->max_bytes, .step_bytes = opts->step_bytes,
                               .mode = opts->mode, .cb = cb, .arg = arg};
    char *p = (char *)(r + 1);
    r->iov = (struct iovec *)p;
    p += iov_bytes;
    if (s->path != NULL)
        memcpy(p, s->path, (size_t)n1);
    p[n1] = '\0';
    r->path = p;
    p += n1 + 1;
    if (s->path2 != NULL)
        memcpy(p, s->path2, (size_t)n2);
    p[n2] = '\0';
    r->path2 = p;
    p += n2 + 1;
    r->tmp = s->tmp_bytes ? p : NULL;
    *rp = r;
    return 0;
}

static int submit(tern_loop *loop, struct tern__fs_req *r, tern_id *idp)
{
    bool whole = r->op == TERN__FS_READ_FILE || r->op == TERN__FS_WRITE_FILE;
    int rc = tern__submit_job(loop, TERN_BOUNDED, whole ? TERN__JOB_STEPS : TERN__JOB_WORK,
                              whole ? tern__fs_whole_work : one_work, fs_done, r, idp);
    if (rc < 0)
        free(r);
    return rc;
}

/* Requests on a path alone. */
static int path_request(tern_loop *loop, uint8_t op, const char *path, const char *path2,
                        int flags, unsigned mode, const tern_fs_options *opts, tern_fs_cb cb,
                        void *arg, tern_id *idp)
{
    struct tern__fs_req *r;
    int rc = req_new(loop, &(struct spec){.op = op, .path = path, .path2 = path2}, opts, cb,
                     arg, &r);
    if (rc < 0)
        return rc;
    r->flags = flags;
    if (op == TERN__FS_OPEN || op == TERN__FS_MKDIR)
        r->mode = mode;
    return submit(loop, r, idp);
}

/* Requests on a descriptor alone. */
static int fd_request(tern_loop *loop, uint8_t op, int fd, int64_t off,
                      const tern_fs_options *opts, tern_fs_cb cb, void *arg, tern_id *idp)
{
    if (fd < 0)
        return -EBADF;
    if (off < 0)
        return -EINVAL;
    struct tern__fs_req *r;
    int rc = req_new(loop, &(struct spec){.op = op}, opts, cb, arg, &r);
    if (rc < 0)
        return rc;
    r->fd = fd;
    r->off = off;
    return submit(loop, r, idp);
}

static int vector_request(tern_loop *loop, uint8_t op, int fd, const struct iovec *iov,
                          unsigned iovcnt, int64_t offset, const tern_fs_options *opts,
                          tern_fs_cb cb, void *arg, tern_id *idp)
{
    if (fd < 0)
        return -EBADF;
    if (iov == NULL || iovcnt == 0 || iovcnt > IOV_MAX || offset < 0)
        return -EINVAL;
    size_t total = 0;
    for (unsigned i = 0; i < iovcnt; i++) {
        if (iov[i].iov_base == NULL && iov[i].iov_len != 0)
            return -EINVAL;
        if (iov[i].iov_len > SSIZE_MAX - total)
            return -EINVAL;
        total += iov[i].iov_len;
    }
    struct tern__fs_req *r;
    int rc = req_new(loop, &(struct spec){.op = op, .iovcnt = iovcnt}, opts, cb, arg, &r);
    if (rc < 0)
        return rc;
    memcpy(r->iov, iov, iovcnt * sizeof(*iov));
    r->iovcnt = iovcnt;
    r->fd = fd;
    r->off = offset;
    return submit(loop, r, idp);
}

int tern_fs_open(tern_loop *loop, const char *path, int flags, unsigned mode,
                 const tern_fs_options *opts, tern_fs_cb cb, void *arg, tern_id *idp)
{
    return path_request(loop, TERN__FS_OPEN, path, NULL, flags, mode, opts, cb, arg, idp);
}

int tern_fs_close(tern_loop *loop, int fd, const tern_fs_options *opts, tern_fs_cb cb, void *arg,
                  tern_id *idp)
{
    return fd_request(loop, TERN__FS_CLOSE, fd, 0, opts, cb, arg, idp);
}

int tern_fs_read(tern_loop *loop, int fd, void *buf, size_t len, int64_t offset,
                 const tern_fs_options *opts, tern_fs_cb cb, void *arg, tern_id *idp)
{
    if (buf == NULL)
        return -EINVAL;
    struct iovec v = {.iov_base = buf, .iov_len = len};
    return vector_request(loop, TERN__FS_READ, fd, &v, 1, offset, opts, cb, arg, idp);
}

int tern_fs_readv(tern_loop *loop, int fd, const struct iovec *iov, unsigned iovcnt,
                  int64_t offset, const tern_fs_options *opts, tern_fs_cb cb, void *arg,
                  tern_id *idp)
{
    return vector_request(loop, TERN__FS_READ, fd, iov, iovcnt, offset, opts, cb, arg, idp);
}

int tern_fs_write(tern_loop *loop, int fd, const void *buf, size_t len, int64_t offset,
                  const tern_fs_options *opts, tern_fs_cb cb, void *arg, tern_id *idp)
{
    if (buf == NULL)
        return -EINVAL;
    struct iovec v = {.iov_base = (void *)buf, .iov_len = len};
    return vector_request(loop, TERN__FS_WRITE, fd, &v, 1, offset, opts, cb, arg, idp);
}

int tern_fs_writev(tern_loop *loop, int fd, const struct iovec *iov, unsigned iovcnt,
                   int64_t offset, const tern_fs_options *opts, tern_fs_cb cb, void *arg,
                   tern_id *idp)
{
    return vector_request(loop, TERN__FS_WRITE, fd, iov, iovcnt, offset, opts, cb, arg, idp);
}

int tern_fs_stat(tern_loop *loop, const char *path, const tern_fs_options *opts, tern_fs_cb cb,
                 void *arg, tern_id *idp)
{
    return path_request(loop, TERN__FS_STAT, path, NULL, 0, 0, opts, cb, arg, idp);
}

int tern_fs_lstat(tern_loop *loop, const char *path, const tern_fs_options *opts, tern_fs_cb cb,
                  void *arg, tern_id *idp)
{
    return path_request(loop, TERN__FS_LSTAT, path, NULL, 0, 0, opts, cb, arg, idp);
}

int tern_fs_fstat(tern_loop *loop, int fd, const tern_fs_options *opts, tern_fs_cb cb, void *arg,
                  tern_id *idp)
{
    return fd_request(loop, TERN__FS_FSTAT, fd, 0, opts, cb, arg, idp);
}

int tern_fs_fsync(tern_loop *loop, int fd, const tern_fs_options *opts, tern_fs_cb cb, void *arg,
                  tern_id *idp)
{
    return fd_request(loop, TERN__FS_FSYNC, fd, 0, opts, cb, arg, idp);
}

int tern_fs_fdatasync(tern_loop *loop, int fd, const tern_fs_options *opts, tern_fs_cb cb,
                      void *arg, tern_id *idp)
{
    return fd_request(loop, TERN__FS_FDATASYNC, fd, 0, opts, cb, arg, idp);
}

int tern_fs_ftruncate(tern_loop *loop, int fd, int64_t length, const tern_fs_options *opts,
                      tern_fs_cb cb, void *arg, tern_id *idp)
{
    return fd_request(loop, TERN__FS_FTRUNCATE, fd, length, opts, cb, arg, idp);
}

int tern_fs_rename(tern_loop *loop, const char *from, const char *to,
                   const tern_fs_options *opts, tern_fs_cb cb, void *arg, tern_id *idp)
{
    return path_request(loop, TERN__FS_RENAME, from, to, 0, 0, opts, cb, arg, idp);
}

int tern_fs_unlink(tern_loop *loop, const char *path, const tern_fs_options *opts, tern_fs_cb cb,
                   void *arg, tern_id *idp)
{
    return path_request(loop, TERN__FS_UNLINK, path, NULL, 0, 0, opts, cb, arg, idp);
}

int tern_fs_mkdir(tern_loop *loop, const char *path, unsigned mode, const tern_fs_options *opts,
                  tern_fs_cb cb, void *arg, tern_id *idp)
{
    return path_request(loop, TERN__FS_MKDIR, path, NULL, 0, mode, opts, cb, arg, idp);
}

int tern_fs_rmdir(tern_loop *loop, const char *path, const tern_fs_options *opts, tern_fs_cb cb,
                  void *arg, tern_id *idp)
{
    return path_request(loop, TERN__FS_RMDIR, path, NULL, 0, 0, opts, cb, arg, idp);
}

int tern_fs_list(tern_loop *loop, const char *path, const tern_fs_options *opts, tern_fs_cb cb,
                 void *arg, tern_id *idp)
{
    return path_request(loop, TERN__FS_LIST, path, NULL, 0, 0, opts, cb, arg, idp);
}

static int copy_request(tern_loop *loop, uint8_t op, int fd_in, int64_t off_in, int fd_out,
                        int64_t off_out, size_t len, const tern_fs_options *opts, tern_fs_cb cb,
                        void *arg, tern_id *idp)
{
    if (fd_in < 0 || fd_out < 0)
        return -EBADF;
    if (off_in < 0 || off_out < 0 || len > SSIZE_MAX)
        return -EINVAL;
    struct tern__fs_req *r;
    int rc = req_new(loop, &(struct spec){.op = op}, opts, cb, arg, &r);
    if (rc < 0)
        return rc;
    r->fd = fd_in;
    r->fd2 = fd_out;
    r->off = off_in;
    r->off2 = off_out;
    r->len = len;
    return submit(loop, r, idp);
}

int tern_fs_copy_range(tern_loop *loop, int fd_in, int64_t off_in, int fd_out, int64_t off_out,
                       size_t len, const tern_fs_options *opts, tern_fs_cb cb, void *arg,
                       tern_id *idp)
{
    return copy_request(loop, TERN__FS_COPY, fd_in, off_in, fd_out, off_out, len, opts, cb, arg,
                        idp);
}

int tern_fs_sendfile(tern_loop *loop, int out_fd, int in_fd, int64_t in_offset, size_t len,
                     const tern_fs_options *opts, tern_fs_cb cb, void *arg, tern_id *idp)
{
    return copy_request(loop, TERN__FS_SENDFILE, in_fd, in_offset, out_fd, 0, len, opts, cb, arg,
                        idp);
}

int tern_fs_read_file(tern_loop *loop, const char *path, const tern_fs_options *opts,
                      tern_fs_cb cb, void *arg, tern_id *idp)
{
    return path_request(loop, TERN__FS_READ_FILE, path, NULL, 0, 0, opts, cb, arg, idp);
}

/* Room for "/.<base>.tern-<pid>-<n>" beyond the path itself. */
#define TMP_EXTRA 64

int tern_fs_write_file(tern_loop *loop, const char *path, const void *data, size_t len,
                       const tern_fs_options *opts, tern_fs_cb cb, void *arg, tern_id *idp)
{
    if (data == NULL && len != 0)
        return -EINVAL;
    if (len > SSIZE_MAX)
        return -EINVAL;
    ssize_t n = check_path(path);
    if (n < 0)
        return (int)n;
    if (n == 0)
        return -ENOENT;
    if (path[n - 1] == '/')
        return -EISDIR;
    struct tern__fs_req *r;
    int rc = req_new(loop,
                     &(struct spec){.op = TERN__FS_WRITE_FILE, .path = path,
                                    .tmp_bytes = (size_t)n + TMP_EXTRA},
                     opts, cb, arg, &r);
    if (rc < 0)
        return rc;
    r->wdata = data;
    r->len = len;
    return submit(loop, r, idp);
}
