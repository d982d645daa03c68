/*
 * File requests on a backend that makes file calls itself (TERN__DO_FILE:
 * io_uring): a request is a list of calls the backend submits with the
 * next wait, the next one chosen here when the last one's completion
 * comes in step 4. No pool thread is involved, and a turn's wait carries
 * every request's next call at once.
 *
 * A single-call request (open, close, read, readv, write, writev, stat,
 * lstat, fstat, fsync, fdatasync; unlink, rmdir, mkdir, rename where the
 * kernel has them: tern__fs_ring_takes) is a list of one
 * (RING_ONE): the call fs_calls.c's run_one would make, whose result is
 * the request's (a descriptor, bytes moved, a stat). The backend makes
 * the ring's call answer as the system call does (backends/backend.h).
 *
 * tern_fs_read_file's list is the pool's steps (fs_whole.c): stat the
 * path, open it O_NONBLOCK, stat the descriptor, read, close; the read
 * that asks for the rest of a sized file takes the close along
 * (then_close: the kernel closes whatever the read did), so a small file
 * is four trips, not five.
 *
 * The request is an op of its own kind, admitted as an external wait is
 * (wait.c): a credit (max_undelivered), max_operations, an owner, a
 * deadline. What fs.h promises holds as on the pool, with these readings:
 *   - There is no queue: a request's first call goes to the kernel with
 *     the next wait, so it is running from acceptance. tern_cancel says
 *     RUNNING, or FINISHED once the outcome is in (cb then gets it). A
 *     cancel, a deadline or its owner's close asks the kernel to cancel
 *     the call in flight. A single call the kernel had not started, or
 *     interrupted while it waited (an open of a FIFO on the kernel's
 *     worker: -EINTR), did nothing: cb gets -ECANCELED (or -ETIMEDOUT);
 *     one that finished reports what it did (a write its bytes, an open
 *     its descriptor). read_file stops at the next step boundary: what
 *     it opened is closed, its buffer freed, and cb gets -ECANCELED (or
 *     -ETIMEDOUT). A close is never cancelled: a single one releases the
 *     descriptor whatever it says, and read_file's last call lets the
 *     request end (the file was read, and cb gets it).
 *   - The bounded queue is not used, so queue_full, a pool shutdown and
 *     a pool configuration that conflicts with the running pool's never
 *     refuse it, and the pool's statistics do not count it.
 *   - A call the backend's queue cannot take (the kernel refusing entries
 *     while its completion queue overflows) is made here, as a plain
 *     system call on the loop's thread, and the request goes on; so is
 *     clearing O_NONBLOCK, only when a read says -EAGAIN (a file system
 *     whose reads through io_uring honour O_NONBLOCK); after a last read,
 *     whose close has run, the file is opened again and made blocking
 *     once its descriptor's stat passes.
 *     A call the backend refuses before queueing it (a readv's -ESPIPE,
 *     found as preadv(2) finds it) has that result.
 *   - cb runs in step 2, exactly once, never inside the request's call:
 *     the outcome only queues the op for step 2.
 *   - Loop free: its cancel pass cancels each request, and its drain turns
 *     wait for the completions of the call in flight, both of a read with
 *     its close (the request's credit keeps them going), so cb runs once
 *     and nothing of it is left in the kernel when the backend closes.
 * The fault seam's file site (TERN__FAULT_FS) is asked as each of
 * read_file's calls completes, so a fault walk makes any step fail as on
 * the pool; for a single call it is asked before the call, as the pool's
 * is, so an injected failure makes no call (a close is made all the same:
 * it releases the descriptor).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "admit.h"
#include "fs_p.h"
#include "heap.h"
#include "job_p.h"

/* read_file's steps; a single call's request has one, RING_ONE. */
enum {
    RING_STAT_PATH,
    RING_OPEN,
    RING_STAT_FD,
    RING_READ,
    RING_CLOSE,
    RING_ONE,
};

struct fs_ring {
    struct tern__op op; /* first */
    struct tern__owned owned;
    struct tern__fs_req *r;    /* the request, as the pool's path would hold it */
    struct tern__file_op call; /* the call in flight, or the next one */
    int stop;          /* 0, or the status a cancel (-ECANCELED) or deadline (-ETIMEDOUT) set */
    int res[2];        /* the call's result, and its linked close's (call.then_close) */
    uint8_t calls;     /* completions of the call (2 with its close) not yet taken */
    bool settled;      /* the outcome is in r->status; queued for step 2 */
    bool has_deadline; /* holds a heap claim */
    bool blocking;     /* O_NONBLOCK was cleared (a read said -EAGAIN) */
};

/* The outcome is in: queue cb for step 2. */
static void settle(tern_loop *loop, struct fs_ring *f, int status)
{
    f->settled = true;
    f->r->status = status;
    TERN_DECREMENT(loop->io_count);
    tern__op_ready(loop, &f->op);
}

/* End with an error: undo what the steps left (descriptor, buffer). */
static bool fail(tern_loop *loop, struct fs_ring *f, int status)
{
    tern__fs_abandon(f->r);
    settle(loop, f, status);
    return false;
}

static void set_stat(struct fs_ring *f, int fd, const char *path)
{
    f->call = (struct tern__file_op){.kind = TERN__FILE_STAT, .fd = fd, .path = path};
}

/*
 * The next read, or the buffer's failure. The one that asks for the rest
 * of a sized file takes its close along (then_close), which then owns the
 * descriptor; a sizeless file's reads go on to end of file, so its close
 * is a call of its own.
 */
static bool set_read(tern_loop *loop, struct fs_ring *f)
{
    struct tern__fs_req *r = f->r;
    ssize_t room = tern__fs_read_room(r);
    if (room < 0)
        return fail(loop, f, (int)room);
    bool last = r->len > 0 && r->done + (size_t)room == r->len;
    r->step = RING_READ;
    f->call = (struct tern__file_op){.kind = TERN__FILE_READ,
                                     .fd = r->own_fd,
                                     .buf = (char *)r->res.data + r->done,
                                     .len = (unsigned)room,
                                     .off = r->done,
                                     .then_close = last};
    if (last)
        r->own_fd = -1; /* released whatever the close says */
    return true;
}

/* O_NOCTTY: a terminal put in the path's place since its stat (refused at
 * the descriptor's stat) never becomes a session leader's controlling one. */
static void set_open(struct fs_ring *f)
{
    f->r->step = RING_OPEN;
    f->call = (struct tern__file_op){
        .kind = TERN__FILE_OPEN, .path = f->r->path, .flags = O_RDONLY | O_NONBLOCK | O_NOCTTY};
}

/* The path's stat, before it is opened: as read_open in fs_whole.c. */
static bool path_statted(tern_loop *loop, struct fs_ring *f, int res)
{
    struct tern__fs_req *r = f->r;
    int rc;
    if (res < 0)
        return fail(loop, f, res);
    tern__file_stat(&f->call, &r->res.st);
    if (!S_ISSOCK(r->res.st.st_mode) && (rc = tern__fs_refuse_kind(&r->res.st)) < 0)
        return fail(loop, f, rc);
    set_open(f);
    return true;
}

static bool fd_statted(tern_loop *loop, struct fs_ring *f, int res)
{
    struct tern__fs_req *r = f->r;
    int rc;
    if (res < 0)
        return fail(loop, f, res);
    tern__file_stat(&f->call, &r->res.st);
    if ((rc = tern__fs_refuse_kind(&r->res.st)) < 0)
        return fail(loop, f, rc);
    /* Opened again after a last read said -EAGAIN: blocking from the start. */
    if (f->blocking && fcntl(r->own_fd, F_SETFL, 0) < 0)
        return fail(loop, f, -errno);
    if ((rc = tern__fs_read_sized(r)) < 0)
        return fail(loop, f, rc);
    return set_read(loop, f);
}

static bool data_read(tern_loop *loop, struct fs_ring *f, int res)
{
    struct tern__fs_req *r = f->r;
    if (res == -EAGAIN && !f->blocking) {
        /* This file system's reads honour O_NONBLOCK: clear it, as the
         * pool's steps always do, and read again. */
        f->blocking = true;
        if (fcntl(r->own_fd, F_SETFL, 0) < 0)
            return fail(loop, f, -errno);
        return true; /* the same read */
    }
    if (res < 0)
        return fail(loop, f, res);
    if (!tern__fs_read_took(r, (size_t)res))
        return set_read(loop, f);
    r->step = RING_CLOSE;
    f->call = (struct tern__file_op){.kind = TERN__FILE_CLOSE, .fd = r->own_fd};
    r->own_fd = -1; /* released whatever close says */
    return true;
}

/* close(2)'s EINTR, made here or by the kernel, has released the
 * descriptor too (fs.h): only another error fails the request. */
static bool close_failed(int res)
{
    return res < 0 && res != -EINTR;
}

/*
 * The last read and its close, both done (the close whatever the read
 * did). A read that ends short ends the file: it shrank since its stat.
 * One that says -EAGAIN lost its descriptor to the close, so the file is
 * opened again, to be read blocking once its stat passes.
 */
static bool last_read(tern_loop *loop, struct fs_ring *f, int res, int closed)
{
    struct tern__fs_req *r = f->r;
    if (res == -EAGAIN && !f->blocking) {
        f->blocking = true;
        free(r->res.data);
        r->res.data = NULL;
        r->done = 0;
        set_open(f);
        return true;
    }
    if (res < 0)
        return fail(loop, f, res);
    if (close_failed(closed))
        return fail(loop, f, closed);
    r->done += (size_t)res;
    tern__fs_read_end(r);
    settle(loop, f, 0);
    return false;
}

/* read_file's next step after the call just made (advance). */
static bool read_file_step(tern_loop *loop, struct fs_ring *f, int res)
{
    struct tern__fs_req *r = f->r;
    switch (r->step) {
    case RING_STAT_PATH:
        return path_statted(loop, f, res);
    case RING_OPEN:
        if (res < 0)
            return fail(loop, f, res);
        r->own_fd = res;
        r->step = RING_STAT_FD;
        set_stat(f, res, NULL);
        return true;
    case RING_STAT_FD:
        return fd_statted(loop, f, res);
    case RING_READ:
        return data_read(loop, f, res);
    default:
        TERN_INSIST(r->step == RING_CLOSE);
        if (close_failed(res))
            return fail(loop, f, res);
        tern__fs_read_end(r);
        settle(loop, f, 0);
        return false;
    }
}

/* ------------------------------------------------------------------ */
/* Single calls                                                        */
/* ------------------------------------------------------------------ */

/* The one call of a single-call request, as fs_calls.c's run_one makes it. */
static void set_one(struct fs_ring *f)
{
    static const uint8_t kinds[] = {
        [TERN__FS_OPEN] = TERN__FILE_OPEN,           [TERN__FS_CLOSE] = TERN__FILE_CLOSE,
        [TERN__FS_READ] = TERN__FILE_READV,          [TERN__FS_WRITE] = TERN__FILE_WRITEV,
        [TERN__FS_STAT] = TERN__FILE_STAT,           [TERN__FS_LSTAT] = TERN__FILE_LSTAT,
        [TERN__FS_FSTAT] = TERN__FILE_STAT,          [TERN__FS_FSYNC] = TERN__FILE_FSYNC,
        [TERN__FS_FDATASYNC] = TERN__FILE_FDATASYNC, [TERN__FS_UNLINK] = TERN__FILE_UNLINK,
        [TERN__FS_RMDIR] = TERN__FILE_RMDIR,         [TERN__FS_MKDIR] = TERN__FILE_MKDIR,
        [TERN__FS_RENAME] = TERN__FILE_RENAME,
    };
    struct tern__fs_req *r = f->r;
    bool by_path = r->fd < 0; /* a path request's fd stays -1 (fs.c) */
    r->step = RING_ONE;
    f->call = (struct tern__file_op){.kind = kinds[r->op],
                                     .fd = r->fd,
                                     .flags = r->flags,
                                     .mode = r->mode,
                                     .len = r->iovcnt,
                                     .off = (uint64_t)r->off,
                                     .path = by_path ? r->path : NULL,
                                     .path2 = r->path2,
                                     .iov = r->iov};
}

/* The call's result is the request's: cb gets it, as the pool's would
 * (close(2)'s EINTR has released the descriptor: success, close_failed). */
static bool one_done(tern_loop *loop, struct fs_ring *f, int res)
{
    struct tern__fs_req *r = f->r;
    uint8_t kind = f->call.kind;
    if (kind == TERN__FILE_CLOSE && !close_failed(res))
        res = 0;
    if (res >= 0 && (kind == TERN__FILE_STAT || kind == TERN__FILE_LSTAT))
        tern__file_stat(&f->call, &r->res.st);
    else if (res >= 0 &&
             (kind == TERN__FILE_OPEN || kind == TERN__FILE_READV || kind == TERN__FILE_WRITEV))
        r->res.value = res; /* a descriptor, or bytes moved */
    settle(loop, f, res < 0 ? res : 0);
    return false;
}

/*
 * What the kernel's completion of a single call says: a call the kernel
 * cancelled, or interrupted when a cancel reached it running (a FIFO's
 * open waiting for a writer), did nothing: the stop's status. A close is
 * never asked to stop.
 */
static int one_result(const struct fs_ring *f, int res)
{
    if (f->stop != 0 && f->call.kind != TERN__FILE_CLOSE && (res == -ECANCELED || res == -EINTR))
        return f->stop;
    return res;
}

/*
 * The fault seam, asked before the call as the pool's asks it: a failure
 * injected there is the request's outcome and the call is not made, but
 * for a close, which releases the descriptor whatever it says.
 */
static bool one_injected(tern_loop *loop, struct fs_ring *f)
{
    int injected = tern__fs_fault_made();
    if (injected == 0)
        return false;
    if (f->call.kind == TERN__FILE_CLOSE)
        (void)tern__file_call(&f->call);
    settle(loop, f, injected);
    return true;
}

/*
 * The result of the call just made (or refused before it was queued):
 * prepare the next one (true) or settle the request (false).
 */
static bool advance(tern_loop *loop, struct fs_ring *f, int res)
{
    if (f->r->step == RING_ONE)
        return one_done(loop, f, res);
    return read_file_step(loop, f, res);
}

/* The call (and its close) made on the loop's thread, as the kernel would. */
static bool made_here(tern_loop *loop, struct fs_ring *f)
{
    int res = tern__file_call(&f->call);
    if (!f->call.then_close)
        return advance(loop, f, res);
    struct tern__file_op close_op = {.kind = TERN__FILE_CLOSE, .fd = f->call.fd};
    return last_read(loop, f, res, tern__file_call(&close_op));
}

/* Hand the call over; one the backend cannot take is made here, and one
 * it refuses (the call's own failure, found first) has that result. */
static void issue(tern_loop *loop, struct fs_ring *f)
{
    struct tern__backend *b = &loop->backend;
    for (;;) {
        int rc = b->ops->file(b, f->op.id, &f->call);
        if (rc == 0) {
            f->calls = f->call.then_close ? 2 : 1;
            return;
        }
        if (!(rc == -EBUSY ? made_here(loop, f) : advance(loop, f, rc)))
            return;
    }
}

/* The pool's fault walk reaches these calls too: res, or the failure it injects. */
static int fault_or(int res)
{
    int injected = tern__fs_fault_made();
    return injected < 0 ? injected : res;
}

/*
 * Step 4: a completion of the call. A read with its close goes on once
 * both are in, in whichever order they came. A stopped request undoes
 * what it holds.
 */
static void ring_completed(tern_loop *loop, struct tern__op *op, const struct tern__done *d)
{
    struct fs_ring *f = (struct fs_ring *)op;
    TERN_INSIST(d->file && f->calls > 0 && !f->settled && (!d->closed || f->call.then_close));
    f->res[d->closed] = d->res;
    if (--f->calls > 0)
        return;
    struct tern__fs_req *r = f->r;
    int res = f->res[0];
    if (r->step == RING_ONE) {
        one_done(loop, f, one_result(f, res));
        return;
    }
    /* Recorded at once: a stop or an injected failure undoes it with the rest. */
    if (r->step == RING_OPEN && res >= 0)
        r->own_fd = res;
    res = fault_or(res);
    int closed = f->call.then_close ? fault_or(f->res[1]) : 0;
    if (f->stop != 0 && r->step != RING_CLOSE) {
        fail(loop, f, f->stop);
        return;
    }
    if (f->call.then_close ? last_read(loop, f, res, closed) : advance(loop, f, res))
        issue(loop, f);
}

static void ring_dispatch(tern_loop *loop, struct tern__op *op)
{
    struct fs_ring *f = (struct fs_ring *)op;
    TERN_INSIST(f->settled);
    struct tern__fs_req *r = f->r;
    tern_id id = op->id;
    tern__outside_finish(loop, op, &f->owned, f->has_deadline); /* f is freed */
    tern__fs_req_deliver(loop, id, r);
}

/*
 * A cancel, a deadline or an owner's close: ask the kernel to cancel the
 * call in flight; read_file stops at the next boundary. A close is let
 * end (read_file's last call: the file is read; a single close: the
 * descriptor is released whatever it says).
 */
static int ring_stop(tern_loop *loop, struct fs_ring *f, int status)
{
    if (f->settled || f->stop != 0)
        return f->stop != 0 ? TERN_CANCEL_RUNNING : TERN_CANCEL_FINISHED;
    f->stop = status;
    if (f->r->step != RING_CLOSE && f->call.kind != TERN__FILE_CLOSE)
        loop->backend.ops->file_cancel(&loop->backend, f->op.id);
    return TERN_CANCEL_RUNNING;
}

static int ring_cancel(tern_loop *loop, struct tern__op *op)
{
    return ring_stop(loop, (struct fs_ring *)op, -ECANCELED);
}

static void ring_expired(tern_loop *loop, struct tern__op *op)
{
    (void)ring_stop(loop, (struct fs_ring *)op, -ETIMEDOUT);
}

static void ring_free(tern_loop *loop, struct tern__op *op)
{
    (void)loop;
    free(op);
}

static const struct tern__op_class ring_class = {
    .name = "fs ring",
    .dispatch = ring_dispatch,
    .cancel = ring_cancel,
    .expired = ring_expired,
    .free = ring_free,
    .completed = ring_completed,
    .refable = false,
};

bool tern__fs_ring_takes(const tern_loop *loop, uint8_t op)
{
    unsigned does = loop->backend.completes;
    if (!(does & TERN__DO_FILE))
        return false;
    switch (op) {
    case TERN__FS_UNLINK:
    case TERN__FS_RMDIR:
    case TERN__FS_MKDIR:
    case TERN__FS_RENAME:
        return (does & TERN__DO_FILE_PATHS) != 0;
    case TERN__FS_OPEN:
    case TERN__FS_CLOSE:
    case TERN__FS_READ:
    case TERN__FS_WRITE:
    case TERN__FS_STAT:
    case TERN__FS_LSTAT:
    case TERN__FS_FSTAT:
    case TERN__FS_FSYNC:
    case TERN__FS_FDATASYNC:
    case TERN__FS_READ_FILE:
        return true;
    default:
        return false;
    }
}

/* Every refusal comes before anything is counted or handed over. */
int tern__fs_ring_submit(tern_loop *loop, struct tern__fs_req *r, tern_id *idp)
{
    struct tern__outside claims;
    int rc = tern__outside_admit(loop, r->admit.timeout_ns, r->admit.owner, &claims);
    if (rc < 0)
        goto out;
    struct fs_ring *f = tern__calloc(1, sizeof(*f));
    if (f == NULL) {
        rc = -ENOMEM;
        goto unadmit;
    }
    if ((rc = tern__op_add(loop, &f->op, &ring_class)) < 0) {
        free(f);
        goto unadmit;
    }
    f->r = r;
    f->has_deadline = claims.timeout_ns != 0;
    tern__outside_bind(loop, &claims, &f->op, &f->owned, idp);
    loop->io_count++; /* the kernel has something to report: ask it */
    if (r->op == TERN__FS_READ_FILE) {
        r->step = RING_STAT_PATH;
        set_stat(f, -1, r->path);
    } else {
        set_one(f);
        if (one_injected(loop, f))
            return 0;
    }
    issue(loop, f);
    return 0;

unadmit:
    tern__outside_unadmit(loop, &claims);
out:
    free(r);
    return rc;
}
