/*
 * The work of file requests that make one system call (or, for listings
 * and copies, one bounded run of them): each runs on a pool worker and
 * goes through the fault seam (backends/fault.h), so the fault walk can
 * make any of them fail. The whole-file requests' steps (fs_whole.c) use
 * the tern__fs_sys_* wrappers from here.
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

#define COPY_BUF 65536

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

int tern__fs_sys_stat(const char *path, struct stat *st)
{
    int rc = tern__fs_fault();
    if (rc < 0)
        return rc;
    return stat(path, st) == 0 ? 0 : -errno;
}

int tern__fs_sys_fcntl_setfl(int fd, int flags)
{
    int rc = tern__fs_fault();
    if (rc < 0)
        return rc;
    return fcntl(fd, F_SETFL, flags) == 0 ? 0 : -errno;
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
        if (n > 1) /* an empty directory has no array at all: v is NULL */
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
static int64_t copy_buffered(struct tern__fs_req *r, int64_t off_in, int64_t off_out, size_t left)
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
    off_t off_in = (off_t)r->off, off_out = (off_t)r->off2;
    size_t left = r->len;
    int64_t copied = 0;
#ifdef __linux__
    while (left > 0) {
        int rc = tern__fs_fault();
        ssize_t n =
            rc < 0 ? (errno = -rc, -1) : copy_file_range(r->fd, &off_in, r->fd2, &off_out, left, 0);
        if (n < 0) {
            int err = errno;
            /* The kernel cannot copy this pair (or at all): use a buffer. */
            if (copied == 0 &&
                (err == ENOSYS || err == EXDEV || err == EINVAL || err == EOPNOTSUPP) && rc == 0)
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

void *tern__fs_one_work(tern_job *job, void *arg)
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
