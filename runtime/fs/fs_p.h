/*
 * File requests (include/tern/fs.h), shared by their loop's half (fs.c)
 * and their worker bodies (fs_calls.c, fs_whole.c): an operation kind of
 * the runtime whose work runs on pool workers, as jobs of the plain or
 * steps kind. A request is one malloc'd block: this record, then the
 * strings and the iovec array it copied. It is the job's arg: the worker
 * writes it while a step runs, the loop reads it in done (the job's state
 * transitions order the two, see steps.c and job.c).
 */
#ifndef TERN_FS_P_H
#define TERN_FS_P_H

#include <stdlib.h>
#include <sys/types.h>

#include "fault.h"
#include "pool.h"

enum tern__fs_op {
    TERN__FS_OPEN,
    TERN__FS_CLOSE,
    TERN__FS_READ,
    TERN__FS_WRITE,
    TERN__FS_STAT,
    TERN__FS_LSTAT,
    TERN__FS_FSTAT,
    TERN__FS_FSYNC,
    TERN__FS_FDATASYNC,
    TERN__FS_FTRUNCATE,
    TERN__FS_RENAME,
    TERN__FS_UNLINK,
    TERN__FS_MKDIR,
    TERN__FS_RMDIR,
    TERN__FS_LIST,
    TERN__FS_COPY,
    TERN__FS_SENDFILE,
    TERN__FS_READ_FILE,  /* steps: open, fstat, read..., close */
    TERN__FS_WRITE_FILE, /* steps: open temporary, write..., fsync, close, rename */
};

struct tern__fs_req {
    uint8_t op;    /* enum tern__fs_op */
    uint8_t step;  /* whole-file requests: the step the next pass runs */
    bool tmp_made; /* write_file: the temporary exists and is ours to remove */
    int fd, fd2;   /* the caller's descriptors (single-step requests) */
    int own_fd;    /* whole-file requests: the descriptor it opened, or -1 */
    int flags;
    unsigned mode;
    int status; /* the outcome, once the work has finished */
    int64_t off, off2;
    size_t len;  /* bytes to move; read_file: bytes read so far */
    size_t done; /* whole-file requests: bytes moved so far */
    size_t cap;  /* read_file: bytes allocated in res.data (plus one for the NUL) */
    uint64_t max_bytes;
    size_t step_bytes;
    const char *path, *path2; /* inside this block */
    char *tmp;                /* write_file: the temporary's path, inside this block */
    struct iovec *iov;        /* inside this block (read, write: one entry) */
    unsigned iovcnt;
    const void *wdata; /* write_file: the caller's bytes */
    tern_fs_result res;
    tern_job_options admit; /* owner and timeout, for tern__submit_job_with */
    tern_fs_cb cb;
    void *arg;
};

/*
 * The system calls of file requests, each through the fault seam
 * (backends/fault.h): 0 or a result >= 0, or a negative errno.
 */
int tern__fs_sys_open(const char *path, int flags, unsigned mode);
int tern__fs_sys_close(int fd);
int tern__fs_sys_fstat(int fd, struct stat *st);
int tern__fs_sys_stat(const char *path, struct stat *st);
int tern__fs_sys_fsync(int fd);
int tern__fs_sys_fcntl_setfl(int fd, int flags);
ssize_t tern__fs_sys_read(int fd, void *buf, size_t len);
ssize_t tern__fs_sys_pread(int fd, void *buf, size_t len, int64_t off);
ssize_t tern__fs_sys_pwrite(int fd, const void *buf, size_t len, int64_t off);
int tern__fs_sys_rename(const char *from, const char *to);

/*
 * read_file's rules, shared by the pool's steps (fs_whole.c) and the
 * ring's (fs_ring.c). refuse_kind: 0 for a regular file, -EISDIR or
 * -ENOTSUP. read_sized: from res.st (the file as opened), the bytes
 * expected and the buffer: 0, -EFBIG or -ENOMEM. read_room: the bytes the
 * next read asks for (> 0), the buffer grown for a file that reports no
 * size, or -EFBIG, -ENOMEM. read_took: count n bytes read; true when the
 * reads are over. read_end: the NUL and res.value, once all is read.
 */
int tern__fs_refuse_kind(const struct stat *st);
int tern__fs_read_sized(struct tern__fs_req *r);
ssize_t tern__fs_read_room(struct tern__fs_req *r);
bool tern__fs_read_took(struct tern__fs_req *r, size_t n);
void tern__fs_read_end(struct tern__fs_req *r);

/*
 * The ring (fs_ring.c), for a loop whose backend makes file calls itself
 * (TERN__DO_FILE). takes: whether a request of kind op goes there (the
 * single calls the backend has, and read_file) rather than to the pool.
 * submit: admits r as the pool's path would, and frees it on failure.
 * Loop thread.
 */
bool tern__fs_ring_takes(const tern_loop *loop, uint8_t op);
int tern__fs_ring_submit(tern_loop *loop, struct tern__fs_req *r, tern_id *idp);
/*
 * The end of every request, on the pool (fs.c) or the ring (fs_ring.c):
 * frees r and calls its cb with r->status and r->res. Step 2, once per
 * request; whatever r held besides its result must be given back before.
 * Inline, so fs_ring.c, which fs.c calls, need not call back into fs.c.
 */
static inline void tern__fs_req_deliver(tern_loop *loop, tern_id id, struct tern__fs_req *r)
{
    tern_fs_cb cb = r->cb;
    void *arg = r->arg;
    tern_fs_result res = r->res;
    int status = r->status;
    free(r);
    cb(loop, id, status, &res, arg);
}

/* The work function of a single-call request (fs_calls.c). */
void *tern__fs_one_work(tern_job *job, void *arg);
/* The work function of a whole-file request: one step per pass (steps.c). */
void *tern__fs_whole_work(tern_job *job, void *arg);
/*
 * Undo what the finished steps of a whole-file request left: close its
 * descriptor, remove its temporary, free its buffer. Never fails. Called
 * by the worker when a request stops, or by the loop when a request was
 * cancelled in the queue between steps.
 */
void tern__fs_abandon(struct tern__fs_req *r);

#endif
