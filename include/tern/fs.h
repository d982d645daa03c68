/*
 * tern/fs.h — typed file requests. Included by tern.h; do not include it
 * on its own.
 *
 * Each request is a pool job on the bounded class: it is admitted like
 * tern_submit (a full queue, max_undelivered or max_operations refuse it
 * with -EAGAIN before anything happens), holds one undelivered credit, is
 * named by a tern_id and completes exactly once through its tern_fs_cb,
 * on the loop, in step 2. tern_cancel(loop, id) cancels it:
 *   - still queued: the system call never runs; cb gets -ECANCELED;
 *   - its system call running: the call finishes and cb reports what it
 *     did (an open that succeeded hands over its descriptor);
 *   - a request of several steps (tern_fs_read_file, tern_fs_write_file)
 *     stops at the next step boundary, closes what it opened, removes its
 *     temporary file, and cb gets -ECANCELED.
 *
 * Every call here is loop-only. Paths are copied: the caller's string may
 * go once the call returns. Buffers are not copied: the memory passed to
 * a read or write stays the caller's and must stay valid until cb runs.
 * Bad values return a negative errno at once and change nothing: NULL
 * path, buffer or callback -EINVAL; a negative descriptor -EBADF; a path
 * of PATH_MAX bytes or more -ENAMETOOLONG; a negative offset, a length
 * over SSIZE_MAX, or an iovec count outside 1..IOV_MAX -EINVAL.
 *
 * Errors of the system calls come back as cb's status, as negative
 * errnos, never retried: -EINTR and -ENOSPC are reported like any other
 * (except that close(2) failing with EINTR has released the descriptor on
 * Linux, so tern reports success, as libuv does).
 *
 * The narrative lives in docs/api.md and docs/guide.md.
 */
#ifndef TERN_FS_H
#define TERN_FS_H

#ifndef TERN_H
#error "include <tern.h>, not <tern/fs.h>"
#endif

#include <sys/stat.h>
#include <sys/uio.h>

/*
 * Options every file request takes; NULL means the defaults. Set them up
 * with tern_fs_options_init() so fields added later (an owner, a timeout,
 * once tern has them) start at their defaults.
 */
typedef struct tern_fs_options {
    uint64_t max_bytes; /* tern_fs_read_file: a larger file is -EFBIG (1 GiB) */
    size_t step_bytes;  /* whole-file requests: bytes read or written per step (1 MiB) */
    unsigned mode;      /* tern_fs_write_file: mode of a new file, before umask (0666) */
} tern_fs_options;

/*
 * tern_fs_options_init: fill opts with the defaults.
 * Requires: opts != NULL.
 * Threads: any.
 */
TERN_EXTERN void tern_fs_options_init(tern_fs_options *opts);

/* One entry of a directory listing. */
typedef struct tern_fs_dirent {
    const char *name;   /* inside the listing's own block */
    unsigned char type; /* DT_REG, DT_DIR, DT_LNK, ... or DT_UNKNOWN */
} tern_fs_dirent;

/*
 * A directory listing: one block (free it with tern_fs_free), entries
 * sorted by name, "." and ".." left out.
 */
typedef struct tern_fs_listing {
    size_t count;
    tern_fs_dirent entries[];
} tern_fs_listing;

/*
 * What a request produced. Valid during the callback only, except `data`
 * and `listing`, which the callback owns when they are not NULL (status 0)
 * and frees with tern_fs_free().
 */
typedef struct tern_fs_result {
    int64_t value; /* bytes moved (read, write, copy, read_file, write_file);
                      the descriptor (open); the entries (list); else 0 */
    struct stat st;           /* stat, lstat, fstat; read_file: the file as opened */
    void *data;               /* read_file: `value` bytes, then a NUL not counted */
    tern_fs_listing *listing; /* list */
} tern_fs_result;

/*
 * A file request's completion, on the loop, in step 2, exactly once.
 * status: 0 or a negative errno (-ECANCELED: see the top of this file).
 * res is never NULL.
 */
typedef void (*tern_fs_cb)(tern_loop *loop, tern_id id, int status, tern_fs_result *res,
                           void *arg);

/*
 * tern_fs_free: free a read_file's data or a listing. NULL is a no-op.
 * Threads: any.
 */
TERN_EXTERN void tern_fs_free(void *p);

/*
 * The requests. Each one, unless it says otherwise:
 * Requires: loop is a live loop; the call is made on its thread (or while
 *     no thread runs it).
 * Returns: 0 and the request's id in *idp (idp may be NULL), or a negative
 *     errno with nothing started: -EINVAL, -EBADF, -ENAMETOOLONG (bad
 *     values, see the top of this file), -EAGAIN (queue full,
 *     max_undelivered, max_operations), -ENOMEM, -ESHUTDOWN (the loop is
 *     being freed).
 * Ownership: paths are copied; buffers stay the caller's until cb runs;
 *     opts is read during the call only.
 * Threads: loop-only; cb runs on the loop's thread.
 */

/* open(2) with O_CLOEXEC added; res->value is the new descriptor. */
TERN_EXTERN int tern_fs_open(tern_loop *loop, const char *path, int flags, unsigned mode,
                             const tern_fs_options *opts, tern_fs_cb cb, void *arg, tern_id *idp);
/* close(2). */
TERN_EXTERN int tern_fs_close(tern_loop *loop, int fd, const tern_fs_options *opts, tern_fs_cb cb,
                              void *arg, tern_id *idp);
/* pread(2) at offset >= 0; res->value is the bytes read (0 at end of file). */
TERN_EXTERN int tern_fs_read(tern_loop *loop, int fd, void *buf, size_t len, int64_t offset,
                             const tern_fs_options *opts, tern_fs_cb cb, void *arg, tern_id *idp);
/* preadv(2); the iovec array is copied, the buffers it points at are not. */
TERN_EXTERN int tern_fs_readv(tern_loop *loop, int fd, const struct iovec *iov, unsigned iovcnt,
                              int64_t offset, const tern_fs_options *opts, tern_fs_cb cb,
                              void *arg, tern_id *idp);
/* pwrite(2) at offset >= 0; res->value is the bytes written. */
TERN_EXTERN int tern_fs_write(tern_loop *loop, int fd, const void *buf, size_t len, int64_t offset,
                              const tern_fs_options *opts, tern_fs_cb cb, void *arg, tern_id *idp);
/* pwritev(2); the iovec array is copied, the buffers it points at are not. */
TERN_EXTERN int tern_fs_writev(tern_loop *loop, int fd, const struct iovec *iov, unsigned iovcnt,
                               int64_t offset, const tern_fs_options *opts, tern_fs_cb cb,
                               void *arg, tern_id *idp);
/* stat(2), lstat(2), fstat(2) into res->st. */
TERN_EXTERN int tern_fs_stat(tern_loop *loop, const char *path, const tern_fs_options *opts,
                             tern_fs_cb cb, void *arg, tern_id *idp);
TERN_EXTERN int tern_fs_lstat(tern_loop *loop, const char *path, const tern_fs_options *opts,
                              tern_fs_cb cb, void *arg, tern_id *idp);
TERN_EXTERN int tern_fs_fstat(tern_loop *loop, int fd, const tern_fs_options *opts, tern_fs_cb cb,
                              void *arg, tern_id *idp);
/* fsync(2), fdatasync(2). */
TERN_EXTERN int tern_fs_fsync(tern_loop *loop, int fd, const tern_fs_options *opts, tern_fs_cb cb,
                              void *arg, tern_id *idp);
TERN_EXTERN int tern_fs_fdatasync(tern_loop *loop, int fd, const tern_fs_options *opts,
                                  tern_fs_cb cb, void *arg, tern_id *idp);
/* ftruncate(2) to length >= 0. */
TERN_EXTERN int tern_fs_ftruncate(tern_loop *loop, int fd, int64_t length,
                                  const tern_fs_options *opts, tern_fs_cb cb, void *arg,
                                  tern_id *idp);
/* rename(2), unlink(2), mkdir(2), rmdir(2). */
TERN_EXTERN int tern_fs_rename(tern_loop *loop, const char *from, const char *to,
                               const tern_fs_options *opts, tern_fs_cb cb, void *arg,
                               tern_id *idp);
TERN_EXTERN int tern_fs_unlink(tern_loop *loop, const char *path, const tern_fs_options *opts,
                               tern_fs_cb cb, void *arg, tern_id *idp);
TERN_EXTERN int tern_fs_mkdir(tern_loop *loop, const char *path, unsigned mode,
                              const tern_fs_options *opts, tern_fs_cb cb, void *arg, tern_id *idp);
TERN_EXTERN int tern_fs_rmdir(tern_loop *loop, const char *path, const tern_fs_options *opts,
                              tern_fs_cb cb, void *arg, tern_id *idp);
/* The entries of a directory in res->listing (res->value of them). */
TERN_EXTERN int tern_fs_list(tern_loop *loop, const char *path, const tern_fs_options *opts,
                             tern_fs_cb cb, void *arg, tern_id *idp);
/*
 * Copy up to len bytes from fd_in at off_in to fd_out at off_out, in the
 * kernel where it can (copy_file_range(2)), else through a buffer; stops
 * early at the end of fd_in. res->value is the bytes copied.
 */
TERN_EXTERN int tern_fs_copy_range(tern_loop *loop, int fd_in, int64_t off_in, int fd_out,
                                   int64_t off_out, size_t len, const tern_fs_options *opts,
                                   tern_fs_cb cb, void *arg, tern_id *idp);
/*
 * sendfile(2): up to len bytes of in_fd from in_offset to out_fd (a socket
 * or a file) at its current position. res->value is the bytes sent. Where
 * the system has no sendfile, cb gets -ENOSYS.
 */
TERN_EXTERN int tern_fs_sendfile(tern_loop *loop, int out_fd, int in_fd, int64_t in_offset,
                                 size_t len, const tern_fs_options *opts, tern_fs_cb cb, void *arg,
                                 tern_id *idp);

/*
 * tern_fs_read_file: read a whole file, in steps (open, fstat, read until
 * done, close) that each take one pass through the pool, on a reservation
 * taken at acceptance, so no step after the first is ever refused. On
 * success res->data holds res->value bytes (the size fstat reported, or up
 * to end of file for files that report size 0, such as /proc) followed by
 * a NUL, and res->st the file's stat; the callback owns res->data. A file
 * larger than opts->max_bytes is -EFBIG, a directory -EISDIR.
 * Cancelled between steps: the descriptor is closed, nothing is returned.
 */
TERN_EXTERN int tern_fs_read_file(tern_loop *loop, const char *path, const tern_fs_options *opts,
                                  tern_fs_cb cb, void *arg, tern_id *idp);

/*
 * tern_fs_write_file: replace path with len bytes of data, atomically: the
 * bytes go to a new temporary file in the same directory, which is
 * fsync'ed, closed and renamed over path, and the directory is fsync'ed.
 * Readers see the old content or the new, never a mix. In steps like
 * tern_fs_read_file, on a reservation. res->value is len on success.
 * Any failure or a cancel before the rename removes the temporary file
 * and leaves path as it was. A failure of the directory's fsync after the
 * rename is reported (the new content is in place, but its survival of a
 * crash is not assured). data may be NULL only if len is 0, and stays the
 * caller's until cb runs.
 */
TERN_EXTERN int tern_fs_write_file(tern_loop *loop, const char *path, const void *data,
                                   size_t len, const tern_fs_options *opts, tern_fs_cb cb,
                                   void *arg, tern_id *idp);

#endif
