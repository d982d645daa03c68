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
 * On a loop whose backend makes file calls itself (io_uring, where the
 * kernel offers them), tern_fs_open, close, read, readv, write, writev,
 * stat, lstat, fstat, fsync, fdatasync, tern_fs_read_file and (where the
 * kernel has them) unlink, rmdir, mkdir and rename are not pool jobs:
 * their calls go to the kernel through the backend (read_file's
 * steps one per turn), with the same results, and each is admitted like
 * a job but for the queue (queue_full, a pool shutdown and a pool
 * configuration never refuse it; the pool's statistics do not count it).
 * It is running from acceptance: tern_cancel says TERN_CANCEL_RUNNING,
 * or TERN_CANCEL_FINISHED once its outcome is in. The cancel reaches the
 * call in the kernel: one not yet started, or waiting there (an open of
 * a FIFO), did nothing and cb gets -ECANCELED; one that finished reports
 * what it did; a close always runs. read_file stops at the next step
 * boundary as above. docs/design.md, "The fifth: file requests", has the
 * details.
 *
 * A worker inside a system call cannot be interrupted: neither a cancel,
 * nor a timeout (tern_fs_options), nor closing an owner, nor a pool
 * shutdown ends the call early; they act when it returns. A call that
 * waits on something outside the process therefore holds its worker, and
 * its request stays unanswered, for as long as that wait lasts, which
 * may be forever: open(2) of a FIFO that no writer opens (without
 * O_NONBLOCK), or of a device that waits for a carrier; read(2) of a pipe,
 * socket or terminal with nothing to read; write(2) to one that nobody
 * drains. The single-call requests make the call they are given
 * (tern_fs_open with the caller's flags, tern_fs_read on the caller's
 * descriptor, ...), so a caller that may meet such files passes
 * O_NONBLOCK, or checks the type first (tern_fs_fstat on the descriptor
 * it opened). tern_fs_read_file never waits on one: it reads regular
 * files only (see its block). A pool sized for the files it serves is
 * the caller's part: every worker held this way is one fewer for
 * everybody.
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
#ifdef _WIN32
struct iovec; /* no <sys/uio.h> there; the vector requests are POSIX only for now */
#else
#include <sys/uio.h>
#endif

/*
 * Options every file request takes; NULL means the defaults. Set them up
 * with tern_fs_options_init() so fields added later start at their
 * defaults.
 *
 * owner and timeout_ns admit a request exactly as tern_job_options admits
 * a job (tern/admission.h): it counts against the owner's cap from
 * acceptance until cb starts (beyond the cap: -EAGAIN, cause
 * TERN_REFUSED_OWNER_CAP); closing the owner cancels it; a request not
 * started when its timeout passes never starts and cb gets -ETIMEDOUT.
 * A deadline that comes while a system call runs is a cancel like any
 * other (see the top of this file): the call finishes and cb reports what
 * it did; a request of several steps stops at the next step boundary,
 * undoes what it opened, and cb gets -ETIMEDOUT.
 */
typedef struct tern_fs_options {
    uint64_t max_bytes;  /* tern_fs_read_file: a larger file is -EFBIG (1 GiB) */
    size_t step_bytes;   /* whole-file requests: bytes read or written per step (1 MiB) */
    unsigned mode;       /* tern_fs_write_file: mode of a new file, before umask (0666) */
    tern_id owner;       /* an owner (tern_owner_open) it counts against, or 0 (none) */
    uint64_t timeout_ns; /* not started by then: cb gets -ETIMEDOUT; 0: none; 1..2^62 */
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
    int64_t value;            /* bytes moved (read, write, copy, read_file, write_file);
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
typedef void (*tern_fs_cb)(tern_loop *loop, tern_id id, int status, tern_fs_result *res, void *arg);

/*
 * tern_fs_free: free a read_file's data or a listing. NULL is a no-op.
 * Threads: any.
 */
TERN_EXTERN void tern_fs_free(void *p);

/*
 * Every request below shares these lines of its contract:
 * Requires: loop is a live loop, and the call is made on its thread (or
 *     while no thread runs it); otherwise the call aborts with a message.
 * Returns: 0 and the request's id in *idp (idp may be NULL), or a negative
 *     errno with nothing started and nothing changed: the bad values of the
 *     top of this file; -EINVAL for an unknown or closed opts->owner or an
 *     opts->timeout_ns over 2^62; -EAGAIN (queue full, max_undelivered,
 *     max_operations, the owner's cap, a pool shutdown under way:
 *     tern_loop_last_refusal names which); -ENOMEM; -ESHUTDOWN (the loop
 *     is being freed); -EINVAL when the loop's pool configuration
 *     conflicts with the running pool's. On any error cb never runs (a
 *     refusal for the owner's cap counts in the owner's refused).
 * Ownership: paths and iovec arrays are copied; the buffers stay the
 *     caller's until cb runs; opts is read during the call only.
 * Threads: loop-only; cb runs on the loop's thread, in step 2.
 * Each block says what the request does and what its own values add.
 */

/*
 * tern_fs_open: open(2) with O_CLOEXEC added. Without O_NONBLOCK, an open
 * of a FIFO waits for a writer, holding its worker (see the top of this
 * file); with it, a FIFO opens at once (for reading) or fails -ENXIO (for
 * writing, no reader).
 * Requires: path != NULL, shorter than PATH_MAX.
 * Returns: as above. cb: res->value is the new descriptor, which cb owns.
 */
TERN_EXTERN int tern_fs_open(tern_loop *loop, const char *path, int flags, unsigned mode,
                             const tern_fs_options *opts, tern_fs_cb cb, void *arg, tern_id *idp);
/*
 * tern_fs_close: close(2). The descriptor is released whatever cb says.
 * Requires: fd >= 0 (else -EBADF).
 */
TERN_EXTERN int tern_fs_close(tern_loop *loop, tern_os_fd_t fd, const tern_fs_options *opts,
                              tern_fs_cb cb, void *arg, tern_id *idp);
/*
 * tern_fs_read: pread(2) of up to len bytes at offset into buf.
 * Requires: fd >= 0 (-EBADF); buf != NULL, offset >= 0, len <= SSIZE_MAX
 *     (-EINVAL).
 * Returns: as above. cb: res->value is the bytes read, 0 at end of file.
 * Ownership: buf stays the caller's and must stay valid until cb runs.
 */
TERN_EXTERN int tern_fs_read(tern_loop *loop, tern_os_fd_t fd, void *buf, size_t len,
                             int64_t offset, const tern_fs_options *opts, tern_fs_cb cb, void *arg,
                             tern_id *idp);
/*
 * tern_fs_readv: preadv(2).
 * Requires: fd >= 0 (-EBADF); iov != NULL, iovcnt 1..IOV_MAX, no NULL
 *     base with a length, total <= SSIZE_MAX, offset >= 0 (-EINVAL).
 * Ownership: the iovec array is copied; the buffers it names are not.
 */
TERN_EXTERN int tern_fs_readv(tern_loop *loop, tern_os_fd_t fd, const struct iovec *iov,
                              unsigned iovcnt, int64_t offset, const tern_fs_options *opts,
                              tern_fs_cb cb, void *arg, tern_id *idp);
/*
 * tern_fs_write: pwrite(2) of len bytes from buf at offset; cb's
 * res->value is the bytes written (a short write is reported, not continued).
 * Requires and Ownership: as tern_fs_read.
 */
TERN_EXTERN int tern_fs_write(tern_loop *loop, tern_os_fd_t fd, const void *buf, size_t len,
                              int64_t offset, const tern_fs_options *opts, tern_fs_cb cb, void *arg,
                              tern_id *idp);
/*
 * tern_fs_writev: pwritev(2).
 * Requires and Ownership: as tern_fs_readv.
 */
TERN_EXTERN int tern_fs_writev(tern_loop *loop, tern_os_fd_t fd, const struct iovec *iov,
                               unsigned iovcnt, int64_t offset, const tern_fs_options *opts,
                               tern_fs_cb cb, void *arg, tern_id *idp);
/*
 * tern_fs_stat, tern_fs_lstat: stat(2), lstat(2) into cb's res->st.
 * Requires: path != NULL, shorter than PATH_MAX.
 */
TERN_EXTERN int tern_fs_stat(tern_loop *loop, const char *path, const tern_fs_options *opts,
                             tern_fs_cb cb, void *arg, tern_id *idp);
TERN_EXTERN int tern_fs_lstat(tern_loop *loop, const char *path, const tern_fs_options *opts,
                              tern_fs_cb cb, void *arg, tern_id *idp);
/*
 * tern_fs_fstat, tern_fs_fsync, tern_fs_fdatasync: fstat(2) into cb's
 * res->st, fsync(2), fdatasync(2).
 * Requires: fd >= 0 (-EBADF).
 */
TERN_EXTERN int tern_fs_fstat(tern_loop *loop, tern_os_fd_t fd, const tern_fs_options *opts,
                              tern_fs_cb cb, void *arg, tern_id *idp);
TERN_EXTERN int tern_fs_fsync(tern_loop *loop, tern_os_fd_t fd, const tern_fs_options *opts,
                              tern_fs_cb cb, void *arg, tern_id *idp);
TERN_EXTERN int tern_fs_fdatasync(tern_loop *loop, tern_os_fd_t fd, const tern_fs_options *opts,
                                  tern_fs_cb cb, void *arg, tern_id *idp);
/*
 * tern_fs_ftruncate: ftruncate(2) to length.
 * Requires: fd >= 0 (-EBADF); length >= 0 (-EINVAL).
 */
TERN_EXTERN int tern_fs_ftruncate(tern_loop *loop, tern_os_fd_t fd, int64_t length,
                                  const tern_fs_options *opts, tern_fs_cb cb, void *arg,
                                  tern_id *idp);
/*
 * tern_fs_rename, tern_fs_unlink, tern_fs_mkdir, tern_fs_rmdir: rename(2),
 * unlink(2), mkdir(2) with mode (before umask), rmdir(2).
 * Requires: every path != NULL, shorter than PATH_MAX.
 */
TERN_EXTERN int tern_fs_rename(tern_loop *loop, const char *from, const char *to,
                               const tern_fs_options *opts, tern_fs_cb cb, void *arg, tern_id *idp);
TERN_EXTERN int tern_fs_unlink(tern_loop *loop, const char *path, const tern_fs_options *opts,
                               tern_fs_cb cb, void *arg, tern_id *idp);
TERN_EXTERN int tern_fs_mkdir(tern_loop *loop, const char *path, unsigned mode,
                              const tern_fs_options *opts, tern_fs_cb cb, void *arg, tern_id *idp);
TERN_EXTERN int tern_fs_rmdir(tern_loop *loop, const char *path, const tern_fs_options *opts,
                              tern_fs_cb cb, void *arg, tern_id *idp);
/*
 * tern_fs_list: the entries of a directory.
 * Requires: path != NULL, shorter than PATH_MAX.
 * Returns: as above. cb: res->listing (sorted by name, "." and ".." left
 *     out) and res->value entries.
 * Ownership: cb owns res->listing and frees it with tern_fs_free.
 */
TERN_EXTERN int tern_fs_list(tern_loop *loop, const char *path, const tern_fs_options *opts,
                             tern_fs_cb cb, void *arg, tern_id *idp);
/*
 * tern_fs_copy_range: copy up to len bytes from fd_in at off_in to fd_out
 * at off_out, in the kernel where it can (copy_file_range(2)), else
 * through a buffer; it stops early at the end of fd_in, or at an error
 * after some bytes were copied (the count says how far; the next request
 * meets the error). cb's res->value is the bytes copied.
 * Requires: fd_in, fd_out >= 0 (-EBADF); offsets >= 0, len <= SSIZE_MAX
 *     (-EINVAL).
 */
TERN_EXTERN int tern_fs_copy_range(tern_loop *loop, tern_os_fd_t fd_in, int64_t off_in,
                                   tern_os_fd_t fd_out, int64_t off_out, size_t len,
                                   const tern_fs_options *opts, tern_fs_cb cb, void *arg,
                                   tern_id *idp);
/*
 * tern_fs_sendfile: sendfile(2): up to len bytes of in_fd from in_offset
 * to out_fd (a socket or a file) at its current position. cb's res->value
 * is the bytes sent; cb gets -ENOSYS where the system has no sendfile.
 * Requires: out_fd, in_fd >= 0 (-EBADF); in_offset >= 0, len <= SSIZE_MAX
 *     (-EINVAL).
 */
TERN_EXTERN int tern_fs_sendfile(tern_loop *loop, int out_fd, int in_fd, int64_t in_offset,
                                 size_t len, const tern_fs_options *opts, tern_fs_cb cb, void *arg,
                                 tern_id *idp);

/*
 * tern_fs_read_file: read a whole regular file, in steps (open, fstat,
 * read until done, close) that each take one pass through the pool, on a
 * reservation held from acceptance, so no step after the first is ever
 * refused (or, on a backend that makes file calls, that each go to the
 * kernel with a turn's wait: see the top of this file). It never waits
 * on a peer, nor wakes one: stat refuses anything but a regular file (or
 * a socket, which open(2) refuses) before the path is opened, so a writer
 * waiting to open a FIFO is never let through; the open is made with
 * O_NONBLOCK (a FIFO or a device put in the path's place meanwhile opens
 * at once), fstat on that descriptor refuses anything but a regular file
 * again, and only then is O_NONBLOCK cleared for the reads (through a
 * backend's file calls, only if a read says -EAGAIN: io_uring reads a
 * regular file in full despite it).
 * Requires: path != NULL, shorter than PATH_MAX; opts->step_bytes 1..2^30.
 * Returns: as above. cb: 0 with res->data holding res->value bytes (the
 *     size fstat reported, or up to end of file for files that report size
 *     0, such as /proc) followed by a NUL, and res->st the file's stat;
 *     -EFBIG over opts->max_bytes; -EISDIR; -ENOTSUP for a FIFO, a
 *     character or a block device (the path as followed through symbolic
 *     links); -ENXIO for a socket (open(2) refuses one); -ECANCELED
 *     (stopped between steps, its descriptor closed); any step's errno.
 *     Only with 0 is anything returned.
 * Ownership: cb owns res->data and frees it with tern_fs_free.
 */
TERN_EXTERN int tern_fs_read_file(tern_loop *loop, const char *path, const tern_fs_options *opts,
                                  tern_fs_cb cb, void *arg, tern_id *idp);

/*
 * tern_fs_write_file: replace path with len bytes of data, atomically: the
 * bytes go to a new temporary file in the same directory, which is
 * fsync'ed, closed and renamed over path, and the directory is fsync'ed.
 * Readers see the old content or the new, never a mix. In steps like
 * tern_fs_read_file, on a reservation.
 * Requires: path != NULL, shorter than PATH_MAX, not ending in '/'
 *     (-EISDIR); data != NULL unless len is 0; len <= SSIZE_MAX;
 *     opts->step_bytes 1..2^30.
 * Returns: as above. cb: 0 (res->value == len); -ECANCELED; any step's
 *     errno (-ENOSPC, -EIO, ...). Any failure or a cancel before the rename
 *     removes the temporary file and leaves path as it was; a failure of
 *     the directory's fsync after the rename is reported with the new
 *     content already in place (its survival of a crash is not assured).
 * Ownership: data stays the caller's until cb runs; path is copied.
 */
TERN_EXTERN int tern_fs_write_file(tern_loop *loop, const char *path, const void *data, size_t len,
                                   const tern_fs_options *opts, tern_fs_cb cb, void *arg,
                                   tern_id *idp);

#endif
