/*
 * File requests (include/tern/fs.h): what they all share — checking the
 * caller's values, copying paths into one block, admission through
 * tern__submit_job, and the done function that turns a finished job into
 * a tern_fs_cb — and the public calls. The work of single-call requests
 * is in fs_calls.c, the whole-file requests' steps in fs_whole.c.
 *
 * Status. A request's own outcome is r->status, set by its work function;
 * the job's status (-ECANCELED whenever tern_cancel reached it) is not
 * used, because a cancel that lands while the system call runs changes
 * nothing about what the call did (SPEC §13: "done says what happened").
 * A NULL result means the work never ran, or a whole-file request was
 * stopped in the queue between steps: that is -ECANCELED, or -ETIMEDOUT
 * when the request's deadline (tern_fs_options.timeout_ns) stopped it.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admit.h"
#include "fs_p.h"
#include "job_p.h"

#define STEP_MAX (UINT64_C(1) << 30)

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

static void fs_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    struct tern__fs_req *r = arg;
    if (result == NULL) {
        tern__fs_abandon(r);
        r->status = -ECANCELED;
    }
    /*
     * The job's status matters in one case: a request stopped unstarted or
     * at a step boundary (-ECANCELED above or from its work) because its
     * deadline came says so, as a job would.
     */
    if (r->status == -ECANCELED && status == -ETIMEDOUT)
        r->status = -ETIMEDOUT;
    tern__fs_req_deliver(loop, id, r);
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
    bool has_path; /* path must be checked (path2 too, for a rename) */
    const char *path, *path2;
    unsigned iovcnt;  /* iovec entries to copy into the block */
    size_t tmp_bytes; /* room for a temporary's path */
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
    loop->last_refusal = TERN_REFUSED_NONE; /* whatever this call returns, it is its own */
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
    if (s->has_path && (n1 = check_path(s->path)) < 0)
        return (int)n1;
    if (s->op == TERN__FS_RENAME && (n2 = check_path(s->path2)) < 0)
        return (int)n2;
    if (tern__loop_closing(loop)) /* aborts in a group's destroy phase */
        return -ESHUTDOWN;
    size_t iov_bytes = s->iovcnt * sizeof(struct iovec);
    size_t size =
        sizeof(struct tern__fs_req) + iov_bytes + (size_t)n1 + 1 + (size_t)n2 + 1 + s->tmp_bytes;
    struct tern__fs_req *r = tern__malloc(size);
    if (r == NULL)
        return -ENOMEM;
    *r = (struct tern__fs_req){.op = s->op,
                               .fd = -1,
                               .fd2 = -1,
                               .own_fd = -1,
                               .max_bytes = opts->max_bytes,
                               .step_bytes = opts->step_bytes,
                               .mode = opts->mode,
                               .cb = cb,
                               .arg = arg,
                               .admit = {.owner = opts->owner, .timeout_ns = opts->timeout_ns}};
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

/* The one place a request goes to the ring (fs_ring.c) or the pool. */
static int submit(tern_loop *loop, struct tern__fs_req *r, tern_id *idp)
{
    if (tern__fs_ring_takes(loop, r->op))
        return tern__fs_ring_submit(loop, r, idp);
    bool whole = r->op == TERN__FS_READ_FILE || r->op == TERN__FS_WRITE_FILE;
    /* The owner and the timeout are checked here, with the limits. */
    int rc = tern__submit_job_with(loop, TERN_BOUNDED, whole ? TERN__WORK_STEPS : TERN__WORK_PLAIN,
                                   whole ? tern__fs_whole_work : tern__fs_one_work, fs_done, r,
                                   &r->admit, idp, NULL);
    if (rc < 0)
        free(r);
    return rc;
}

/* Requests on a path alone. */
static int path_request(tern_loop *loop, uint8_t op, const char *path, const char *path2, int flags,
                        unsigned mode, const tern_fs_options *opts, tern_fs_cb cb, void *arg,
                        tern_id *idp)
{
    struct tern__fs_req *r;
    int rc = req_new(loop, &(struct spec){.op = op, .has_path = true, .path = path, .path2 = path2},
                     opts, cb, arg, &r);
    if (rc < 0)
        return rc;
    r->flags = flags;
    if (op == TERN__FS_OPEN || op == TERN__FS_MKDIR)
        r->mode = mode;
    return submit(loop, r, idp);
}

/* Requests on a descriptor alone. */
static int fd_request(tern_loop *loop, uint8_t op, int fd, int64_t off, const tern_fs_options *opts,
                      tern_fs_cb cb, void *arg, tern_id *idp)
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

int tern_fs_close(tern_loop *loop, tern_os_fd_t fd, const tern_fs_options *opts, tern_fs_cb cb,
                  void *arg, tern_id *idp)
{
    return fd_request(loop, TERN__FS_CLOSE, fd, 0, opts, cb, arg, idp);
}

int tern_fs_read(tern_loop *loop, tern_os_fd_t fd, void *buf, size_t len, int64_t offset,
                 const tern_fs_options *opts, tern_fs_cb cb, void *arg, tern_id *idp)
{
    if (buf == NULL)
        return -EINVAL;
    struct iovec v = {.iov_base = buf, .iov_len = len};
    return vector_request(loop, TERN__FS_READ, fd, &v, 1, offset, opts, cb, arg, idp);
}

int tern_fs_readv(tern_loop *loop, tern_os_fd_t fd, const struct iovec *iov, unsigned iovcnt,
                  int64_t offset, const tern_fs_options *opts, tern_fs_cb cb, void *arg,
                  tern_id *idp)
{
    return vector_request(loop, TERN__FS_READ, fd, iov, iovcnt, offset, opts, cb, arg, idp);
}

int tern_fs_write(tern_loop *loop, tern_os_fd_t fd, const void *buf, size_t len, int64_t offset,
                  const tern_fs_options *opts, tern_fs_cb cb, void *arg, tern_id *idp)
{
    if (buf == NULL)
        return -EINVAL;
    struct iovec v = {.iov_base = (void *)buf, .iov_len = len};
    return vector_request(loop, TERN__FS_WRITE, fd, &v, 1, offset, opts, cb, arg, idp);
}

int tern_fs_writev(tern_loop *loop, tern_os_fd_t fd, const struct iovec *iov, unsigned iovcnt,
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

int tern_fs_fstat(tern_loop *loop, tern_os_fd_t fd, const tern_fs_options *opts, tern_fs_cb cb,
                  void *arg, tern_id *idp)
{
    return fd_request(loop, TERN__FS_FSTAT, fd, 0, opts, cb, arg, idp);
}

int tern_fs_fsync(tern_loop *loop, tern_os_fd_t fd, const tern_fs_options *opts, tern_fs_cb cb,
                  void *arg, tern_id *idp)
{
    return fd_request(loop, TERN__FS_FSYNC, fd, 0, opts, cb, arg, idp);
}

int tern_fs_fdatasync(tern_loop *loop, tern_os_fd_t fd, const tern_fs_options *opts, tern_fs_cb cb,
                      void *arg, tern_id *idp)
{
    return fd_request(loop, TERN__FS_FDATASYNC, fd, 0, opts, cb, arg, idp);
}

int tern_fs_ftruncate(tern_loop *loop, tern_os_fd_t fd, int64_t length, const tern_fs_options *opts,
                      tern_fs_cb cb, void *arg, tern_id *idp)
{
    return fd_request(loop, TERN__FS_FTRUNCATE, fd, length, opts, cb, arg, idp);
}

int tern_fs_rename(tern_loop *loop, const char *from, const char *to, const tern_fs_options *opts,
                   tern_fs_cb cb, void *arg, tern_id *idp)
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

int tern_fs_copy_range(tern_loop *loop, tern_os_fd_t fd_in, int64_t off_in, tern_os_fd_t fd_out,
                       int64_t off_out, size_t len, const tern_fs_options *opts, tern_fs_cb cb,
                       void *arg, tern_id *idp)
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

int tern_fs_read_file(tern_loop *loop, const char *path, const tern_fs_options *opts, tern_fs_cb cb,
                      void *arg, tern_id *idp)
{
    struct tern__fs_req *r;
    int rc = req_new(loop, &(struct spec){.op = TERN__FS_READ_FILE, .has_path = true, .path = path},
                     opts, cb, arg, &r);
    if (rc < 0)
        return rc;
    return submit(loop, r, idp);
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
                     &(struct spec){.op = TERN__FS_WRITE_FILE,
                                    .has_path = true,
                                    .path = path,
                                    .tmp_bytes = (size_t)n + TMP_EXTRA},
                     opts, cb, arg, &r);
    if (rc < 0)
        return rc;
    r->wdata = data;
    r->len = len;
    return submit(loop, r, idp);
}
