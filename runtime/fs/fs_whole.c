/*
 * Whole-file requests: tern_fs_read_file and tern_fs_write_file, each a
 * sequence of steps run one per pass through the bounded queue on a
 * reservation (steps.c). A pass returns NULL when another step follows and
 * the request when it has ended, successfully or not.
 *
 * Invariant: whatever a step opened or created is recorded in the request
 * before the pass ends (own_fd, tmp_made, res.data), so a request that
 * stops anywhere — an error, a cancel seen at a step boundary, a cancel
 * that tombstones it in the queue, a pool shutdown — is undone by
 * tern__fs_abandon() and leaks no descriptor, no temporary file and no
 * memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs_p.h"

enum {
    READ_OPEN,
    READ_FSTAT,
    READ_DATA,
    READ_CLOSE,
};

enum {
    WRITE_OPEN,
    WRITE_DATA,
    WRITE_FSYNC,
    WRITE_CLOSE,
    WRITE_RENAME,
};

/* A buffer for a file that reports no size (/proc): grown up to max_bytes + 1. */
#define UNSIZED_FIRST 65536
/* Temporary names tried before write_file gives up with -EEXIST. */
#define TMP_TRIES 8

void tern__fs_abandon(struct tern__fs_req *r)
{
    /* Cleanup goes around the fault seam: undoing must not fail. */
    if (r->own_fd >= 0) {
        close(r->own_fd);
        r->own_fd = -1;
    }
    if (r->tmp_made) {
        unlink(r->tmp);
        r->tmp_made = false;
    }
    free(r->res.data);
    r->res.data = NULL;
    r->res.value = 0;
}

/* End the request with an error: undo what it left. */
static void *fail(struct tern__fs_req *r, int status)
{
    tern__fs_abandon(r);
    r->status = status;
    return r;
}

/* End the request with status: undo what is left on failure. */
static void *finish(struct tern__fs_req *r, int status)
{
    if (status < 0)
        return fail(r, status);
    r->status = status;
    return r;
}

static void *next(struct tern__fs_req *r, uint8_t step)
{
    r->step = step;
    return NULL;
}

/* ------------------------------------------------------------------ */
/* read_file                                                           */
/* ------------------------------------------------------------------ */

/*
 * A FIFO, socket or device could make a read wait forever on a peer that
 * never comes, and nothing can interrupt a worker inside read(2): only a
 * regular file is read. 0, -EISDIR or -ENOTSUP.
 */
int tern__fs_refuse_kind(const struct stat *st)
{
    if (S_ISDIR(st->st_mode))
        return -EISDIR;
    return S_ISREG(st->st_mode) ? 0 : -ENOTSUP;
}

int tern__fs_read_sized(struct tern__fs_req *r)
{
    uint64_t size = r->res.st.st_size > 0 ? (uint64_t)r->res.st.st_size : 0;
    if (size > r->max_bytes || size >= SSIZE_MAX)
        return -EFBIG;
    /* len: the bytes expected (0: read to end of file, growing the buffer). */
    r->len = (size_t)size;
    r->cap = size > 0 ? (size_t)size
                      : (size_t)(r->max_bytes < UNSIZED_FIRST ? r->max_bytes : UNSIZED_FIRST);
    if (r->cap == 0)
        r->cap = 1; /* room to tell an empty file from one over max_bytes */
    if ((r->res.data = tern__malloc(r->cap + 1)) == NULL)
        return -ENOMEM;
    return 0;
}

ssize_t tern__fs_read_room(struct tern__fs_req *r)
{
    if (r->done == r->cap) {
        /* Full, so the file is unsized (a sized file's buffer is its size,
         * and the read that fills it ends the reads): it needs room. Room
         * for one byte past max_bytes tells a file of exactly max_bytes
         * (end of file next) from a longer one. */
        uint64_t limit = r->max_bytes < SSIZE_MAX ? r->max_bytes + 1 : (uint64_t)SSIZE_MAX;
        if (r->cap >= limit)
            return -EFBIG;
        size_t ncap = r->cap * 2 < limit ? r->cap * 2 : (size_t)limit;
        char *nd = tern__realloc(r->res.data, ncap + 1);
        if (nd == NULL)
            return -ENOMEM;
        r->res.data = nd;
        r->cap = ncap;
    }
    return (ssize_t)(r->cap - r->done < r->step_bytes ? r->cap - r->done : r->step_bytes);
}

bool tern__fs_read_took(struct tern__fs_req *r, size_t n)
{
    r->done += n;
    /* End of file, or the size fstat promised: a file that grows meanwhile
     * is read as it was when opened. */
    return n == 0 || (r->len > 0 && r->done == r->len);
}

void tern__fs_read_end(struct tern__fs_req *r)
{
    ((char *)r->res.data)[r->done] = '\0';
    r->res.value = (int64_t)r->done;
}

/*
 * Looked at before the open, because opening is not harmless: an open of
 * a FIFO for reading counts as its reader, so a writer waiting in its own
 * open would be let through, to a first write that fails with EPIPE once
 * the request has refused the FIFO and closed it. A socket is left to the
 * open, which refuses it (-ENXIO) without touching anything.
 */
static void *read_open(struct tern__fs_req *r)
{
    int rc = tern__fs_sys_stat(r->path, &r->res.st);
    if (rc < 0)
        return finish(r, rc);
    if (!S_ISSOCK(r->res.st.st_mode) && (rc = tern__fs_refuse_kind(&r->res.st)) < 0)
        return finish(r, rc);
    /* O_NONBLOCK: a FIFO or a device that waits for a carrier put in the
     * path's place since the stat opens at once; fstat then refuses it.
     * O_NOCTTY: a terminal put there never becomes the process's. */
    int fd = tern__fs_sys_open(r->path, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0);
    if (fd < 0)
        return finish(r, fd);
    r->own_fd = fd;
    return next(r, READ_FSTAT);
}

/* Again on the descriptor: the path may name another file than it did at the stat. */
static void *read_fstat(struct tern__fs_req *r)
{
    int rc = tern__fs_sys_fstat(r->own_fd, &r->res.st);
    if (rc < 0)
        return finish(r, rc);
    if ((rc = tern__fs_refuse_kind(&r->res.st)) < 0)
        return finish(r, rc);
    /* A regular file: back to blocking reads (open only had to not wait). */
    int rc_fl = tern__fs_sys_fcntl_setfl(r->own_fd, 0);
    if (rc_fl < 0)
        return finish(r, rc_fl);
    if ((rc = tern__fs_read_sized(r)) < 0)
        return finish(r, rc);
    return next(r, READ_DATA);
}

static void *read_data(struct tern__fs_req *r)
{
    ssize_t room = tern__fs_read_room(r);
    if (room < 0)
        return fail(r, (int)room);
    size_t want = (size_t)room;
    /* read(2), not pread(2): the descriptor is ours, at offset done. */
    ssize_t n = tern__fs_sys_read(r->own_fd, (char *)r->res.data + r->done, want);
    if (n < 0)
        return fail(r, (int)n);
    return next(r, tern__fs_read_took(r, (size_t)n) ? READ_CLOSE : READ_DATA);
}

static void *read_close(struct tern__fs_req *r)
{
    int fd = r->own_fd;
    r->own_fd = -1; /* released whatever close says */
    int rc = tern__fs_sys_close(fd);
    if (rc < 0)
        return finish(r, rc);
    tern__fs_read_end(r);
    return finish(r, 0);
}

static void *read_step(struct tern__fs_req *r)
{
    switch (r->step) {
    case READ_OPEN:
        return read_open(r);
    case READ_FSTAT:
        return read_fstat(r);
    case READ_DATA:
        return read_data(r);
    default:
        TERN_INSIST(r->step == READ_CLOSE);
        return read_close(r);
    }
}

/* ------------------------------------------------------------------ */
/* write_file                                                          */
/* ------------------------------------------------------------------ */

/* The directory part of path ("." when it has none). */
static void dir_of(const char *path, char *out)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL) {
        strcpy(out, ".");
    } else if (slash == path) {
        strcpy(out, "/");
    } else {
        memcpy(out, path, (size_t)(slash - path));
        out[slash - path] = '\0';
    }
}

static _Atomic unsigned tmp_counter;

static void *write_open(struct tern__fs_req *r)
{
    const char *slash = strrchr(r->path, '/');
    const char *base = slash ? slash + 1 : r->path;
    int dir_len = slash ? (int)(slash - r->path) + 1 : 0;
    int fd = -EEXIST;
    for (unsigned i = 0; i < TMP_TRIES && fd == -EEXIST; i++) {
        unsigned n = atomic_fetch_add_explicit(&tmp_counter, 1, memory_order_relaxed);
        snprintf(r->tmp, strlen(r->path) + 64, "%.*s.%s.tern-%ld-%u", dir_len, r->path, base,
                 (long)getpid(), n);
        fd = tern__fs_sys_open(r->tmp, O_WRONLY | O_CREAT | O_EXCL, r->mode);
    }
    if (fd < 0)
        return finish(r, fd);
    r->own_fd = fd;
    r->tmp_made = true;
    return next(r, r->len > 0 ? WRITE_DATA : WRITE_FSYNC);
}

static void *write_data(struct tern__fs_req *r)
{
    size_t want = r->len - r->done < r->step_bytes ? r->len - r->done : r->step_bytes;
    ssize_t n =
        tern__fs_sys_pwrite(r->own_fd, (const char *)r->wdata + r->done, want, (int64_t)r->done);
    if (n < 0)
        return fail(r, (int)n);
    if (n == 0)
        return fail(r, -EIO); /* no progress and no error: never loop on it */
    r->done += (size_t)n;
    return next(r, r->done == r->len ? WRITE_FSYNC : WRITE_DATA);
}

/* rename over path, then make the rename itself durable. */
static void *write_rename(struct tern__fs_req *r)
{
    int rc = tern__fs_sys_rename(r->tmp, r->path);
    if (rc < 0)
        return finish(r, rc);
    r->tmp_made = false; /* it is path now */
    r->res.value = (int64_t)r->len;
    char dir[PATH_MAX];
    dir_of(r->path, dir);
    int dfd = tern__fs_sys_open(dir, O_RDONLY | O_DIRECTORY, 0);
    if (dfd < 0)
        return finish(r, dfd);
    rc = tern__fs_sys_fsync(dfd);
    int crc = tern__fs_sys_close(dfd);
    return finish(r, rc < 0 ? rc : crc);
}

static void *write_step(struct tern__fs_req *r)
{
    int rc;
    switch (r->step) {
    case WRITE_OPEN:
        return write_open(r);
    case WRITE_DATA:
        return write_data(r);
    case WRITE_FSYNC:
        if ((rc = tern__fs_sys_fsync(r->own_fd)) < 0)
            return finish(r, rc);
        return next(r, WRITE_CLOSE);
    case WRITE_CLOSE: {
        int fd = r->own_fd;
        r->own_fd = -1;
        if ((rc = tern__fs_sys_close(fd)) < 0)
            return finish(r, rc);
        return next(r, WRITE_RENAME);
    }
    default:
        TERN_INSIST(r->step == WRITE_RENAME);
        return write_rename(r);
    }
}

void *tern__fs_whole_work(tern_job *job, void *arg)
{
    struct tern__fs_req *r = arg;
    /* A step boundary: a cancel seen here stops the request. */
    if (tern_job_cancelled(job))
        return finish(r, -ECANCELED);
    return r->op == TERN__FS_READ_FILE ? read_step(r) : write_step(r);
}
