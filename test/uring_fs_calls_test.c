/*
 * The single-call file requests through the io_uring backend
 * (TERN__DO_FILE, runtime/fs/fs_ring.c): open, close, read, readv, write,
 * writev, stat, lstat, fstat, fsync and fdatasync make no pool job there
 * (the pool's submitted count stays put; on epoll each is one job), and
 * answer as the pool's calls do: the same stat fields, bytes, descriptors
 * (O_CLOEXEC, the mode) and errnos, a pipe's -ESPIPE included, also when
 * the queue takes no entry and the loop makes the call itself. An open of
 * a FIFO waits for its peer as open(2) does; a cancel, a deadline, an
 * owner's close or a loop free reaches it in the kernel: cb once with
 * -ECANCELED or -ETIMEDOUT, nothing left open. A cancel that meets a
 * write the kernel made reports it. The fs fault site fails each call
 * before it is made, as on the pool: nothing written, opened or created;
 * a close releases its descriptor all the same, and its EINTR is success.
 * unlink, rmdir, mkdir and rename, where the kernel's probe offers them
 * (a 6.x kernel does), answer as the pool's too and leave the same names.
 */
#include "uring_helpers.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "backend.h"
#include "fault.h"
#include "fs_helpers.h"
#include "testing.h"
#include "tern/fs.h"

#ifdef TERN_HAVE_IO_URING

static void setup(void)
{
    strcpy(dir, "/tmp/tern-uring-calls-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
    static const char *const names[] = {"a", "b", "c", "new", "fifo", "link"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        (void)unlink(at(names[i]));
    (void)unlink(at("sub/c"));
    (void)rmdir(at("sub"));
    (void)rmdir(at("new"));
    cr_assert_eq(rmdir(dir), 0);
}

TestSuite(uring_fs_calls, .init = setup, .fini = teardown, .timeout = TEST_TIMEOUT);

static unsigned count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d);
    unsigned n = 0;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

static uint64_t pool_submitted(void)
{
    tern_pool_stats s;
    tern_pool_stats_get(&s);
    return s.submitted;
}

static void wait_one(tern_loop *loop, struct rec *r)
{
    cr_assert_eq(atomic_load(&r->n), 0, "cb ran inside the call");
    cr_assert(run_until_count(loop, &r->n, 1, -1, 100000));
    cr_assert_eq(atomic_load(&r->n), 1);
}

/* Each request kind, by number, on loop: its record. */
enum {
    OPEN,
    OPEN_CREATE,
    FSTAT,
    STAT,
    LSTAT,
    READ,
    READV,
    WRITE,
    WRITEV,
    FSYNC,
    FDATASYNC,
    CLOSE,
    UNLINK,
    RMDIR,
    MKDIR,
    RENAME
};

struct call {
    int kind;
    const char *path, *path2;
    int fd;
    int flags;
    int64_t off;
};

static char rbuf[2][64];

static void make(tern_loop *loop, const struct call *c, struct rec *r)
{
    memset(rbuf, 0, sizeof rbuf);
    struct iovec v[2] = {{rbuf[0], 3}, {rbuf[1], 40}};
    static const struct iovec w[2] = {{(void *)"xy", 2}, {(void *)"zw!", 3}};
    int rc;
    switch (c->kind) {
    case OPEN:
        rc = tern_fs_open(loop, c->path, c->flags, 0, NULL, rec_cb, r, NULL);
        break;
    case OPEN_CREATE:
        rc = tern_fs_open(loop, c->path, c->flags | O_CREAT | O_EXCL | O_RDWR, 0640, NULL, rec_cb,
                          r, NULL);
        break;
    case FSTAT:
        rc = tern_fs_fstat(loop, c->fd, NULL, rec_cb, r, NULL);
        break;
    case STAT:
        rc = tern_fs_stat(loop, c->path, NULL, rec_cb, r, NULL);
        break;
    case LSTAT:
        rc = tern_fs_lstat(loop, c->path, NULL, rec_cb, r, NULL);
        break;
    case READ:
        rc = tern_fs_read(loop, c->fd, rbuf[0], sizeof rbuf[0], c->off, NULL, rec_cb, r, NULL);
        break;
    case READV:
        rc = tern_fs_readv(loop, c->fd, v, 2, c->off, NULL, rec_cb, r, NULL);
        break;
    case WRITE:
        rc = tern_fs_write(loop, c->fd, "hello", 5, c->off, NULL, rec_cb, r, NULL);
        break;
    case WRITEV:
        rc = tern_fs_writev(loop, c->fd, w, 2, c->off, NULL, rec_cb, r, NULL);
        break;
    case FSYNC:
        rc = tern_fs_fsync(loop, c->fd, NULL, rec_cb, r, NULL);
        break;
    case FDATASYNC:
        rc = tern_fs_fdatasync(loop, c->fd, NULL, rec_cb, r, NULL);
        break;
    case UNLINK:
        rc = tern_fs_unlink(loop, c->path, NULL, rec_cb, r, NULL);
        break;
    case RMDIR:
        rc = tern_fs_rmdir(loop, c->path, NULL, rec_cb, r, NULL);
        break;
    case MKDIR:
        rc = tern_fs_mkdir(loop, c->path, 0750, NULL, rec_cb, r, NULL);
        break;
    case RENAME:
        rc = tern_fs_rename(loop, c->path, c->path2, NULL, rec_cb, r, NULL);
        break;
    default:
        cr_assert_eq(c->kind, CLOSE);
        rc = tern_fs_close(loop, c->fd, NULL, rec_cb, r, NULL);
        break;
    }
    cr_assert_eq(rc, 0, "kind %d refused: %d", c->kind, rc);
    wait_one(loop, r);
}

static void same_stat(const struct stat *a, const struct stat *b, const char *what)
{
    cr_assert_eq(a->st_dev, b->st_dev, "%s: st_dev", what);
    cr_assert_eq(a->st_ino, b->st_ino, "%s: st_ino", what);
    cr_assert_eq(a->st_mode, b->st_mode, "%s: st_mode", what);
    cr_assert_eq(a->st_nlink, b->st_nlink, "%s: st_nlink", what);
    cr_assert_eq(a->st_uid, b->st_uid, "%s: st_uid", what);
    cr_assert_eq(a->st_gid, b->st_gid, "%s: st_gid", what);
    cr_assert_eq(a->st_rdev, b->st_rdev, "%s: st_rdev", what);
    cr_assert_eq(a->st_size, b->st_size, "%s: st_size", what);
    cr_assert_eq(a->st_blksize, b->st_blksize, "%s: st_blksize", what);
    cr_assert_eq(a->st_blocks, b->st_blocks, "%s: st_blocks", what);
    cr_assert_eq(a->st_mtim.tv_sec, b->st_mtim.tv_sec, "%s: mtime", what);
    cr_assert_eq(a->st_mtim.tv_nsec, b->st_mtim.tv_nsec, "%s: mtime ns", what);
    cr_assert_eq(a->st_ctim.tv_sec, b->st_ctim.tv_sec, "%s: ctime", what);
    cr_assert_eq(a->st_ctim.tv_nsec, b->st_ctim.tv_nsec, "%s: ctime ns", what);
}

/*
 * c made on the ring and on the pool (epoll): the same status and value,
 * the same stat, the same bytes read. A call that changes something is
 * given a fresh copy of its scene by reset (or NULL when it changes
 * nothing). Opened descriptors are compared by their flags and closed.
 */
static void both_alike(tern_loop *ring, tern_loop *pool, struct call c, void (*reset)(void))
{
    struct rec a = {0}, b = {0};
    char bytes[2][sizeof rbuf];
    if (reset != NULL)
        reset();
    uint64_t before = pool_submitted();
    make(ring, &c, &a);
    cr_assert_eq(pool_submitted(), before, "kind %d went to the pool on io_uring", c.kind);
    memcpy(bytes[0], rbuf, sizeof rbuf);
    if (reset != NULL)
        reset();
    make(pool, &c, &b);
    cr_assert_eq(pool_submitted(), before + 1, "kind %d skipped the pool on epoll", c.kind);
    memcpy(bytes[1], rbuf, sizeof rbuf);
    cr_assert_eq(a.status, b.status, "kind %d (%s): ring %s, pool %s", c.kind,
                 c.path ? c.path : "fd", tern_err_name(a.status), tern_err_name(b.status));
    if (c.kind == OPEN || c.kind == OPEN_CREATE) {
        if (a.status == 0) {
            int fa = (int)a.value, fb = (int)b.value;
            cr_assert_eq(fcntl(fa, F_GETFD), FD_CLOEXEC);
            cr_assert_eq(fcntl(fa, F_GETFD), fcntl(fb, F_GETFD));
            cr_assert_eq(fcntl(fa, F_GETFL), fcntl(fb, F_GETFL), "open flags differ");
            struct stat sa, sb;
            cr_assert_eq(fstat(fa, &sa), 0);
            cr_assert_eq(fstat(fb, &sb), 0);
            cr_assert_eq(sa.st_mode, sb.st_mode, "the new file's mode");
            close(fa);
            close(fb);
        }
        return;
    }
    cr_assert_eq(a.value, b.value, "kind %d: value %lld, pool %lld", c.kind, (long long)a.value,
                 (long long)b.value);
    cr_assert(memcmp(bytes[0], bytes[1], sizeof bytes[0]) == 0, "kind %d: other bytes", c.kind);
    if (a.status == 0 && (c.kind == STAT || c.kind == LSTAT || c.kind == FSTAT))
        same_stat(&a.st, &b.st, c.path ? c.path : "fd");
}

static void fresh_a(void)
{
    put("a", "0123456789abcdef");
}

static void no_new(void)
{
    (void)unlink(at("new"));
}

static void no_new_dir(void)
{
    (void)rmdir(at("new"));
}

static void fresh_new_dir(void)
{
    (void)mkdir(at("new"), 0700);
}

static void fresh_b(void)
{
    put("b", "b");
}

Test(uring_fs_calls, the_pools_results_without_the_pool)
{
    tern_loop *ring = uring_loop();
    tern_loop *pool = loop_new_backend("epoll");
    fresh_a();
    cr_assert_eq(mkdir(at("sub"), 0700), 0);
    cr_assert_eq(symlink("a", at("link")), 0);
    cr_assert_eq(mkfifo(at("fifo"), 0600), 0);
    unsigned fds = count_fds();
    /* Paths: a file, a directory, a link, a device, and the errors. */
    const char *paths[] = {at("a"),       at("sub"), at("link"), "/dev/null",
                           at("missing"), at("a/x"), "",         "/"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        both_alike(ring, pool, (struct call){.kind = STAT, .path = paths[i]}, NULL);
        both_alike(ring, pool, (struct call){.kind = LSTAT, .path = paths[i]}, NULL);
        both_alike(ring, pool, (struct call){.kind = OPEN, .path = paths[i]}, NULL);
        both_alike(ring, pool, (struct call){.kind = OPEN, .path = paths[i], .flags = O_WRONLY},
                   NULL);
    }
    both_alike(ring, pool,
               (struct call){.kind = OPEN, .path = at("fifo"), .flags = O_WRONLY | O_NONBLOCK},
               NULL);
    both_alike(ring, pool, (struct call){.kind = OPEN_CREATE, .path = at("new")}, no_new);
    both_alike(ring, pool, (struct call){.kind = OPEN_CREATE, .path = at("a")}, NULL); /* EEXIST */
    both_alike(ring, pool,
               (struct call){.kind = OPEN, .path = at("a"), .flags = O_RDWR | O_APPEND | O_TRUNC},
               fresh_a);
    fresh_a();

    /* Descriptors: a file read-write, one read-only, a directory, a pipe,
     * a closed number, /dev/null. */
    int rw = open(at("a"), O_RDWR | O_CLOEXEC);
    int ro = open(at("a"), O_RDONLY | O_CLOEXEC);
    int dfd = open(at("sub"), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    int p[2];
    cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
    cr_assert_eq(write(p[1], "pipe", 4), 4);
    cr_assert(rw >= 0 && ro >= 0 && dfd >= 0 && null >= 0);
    const int fdv[] = {rw, ro, dfd, null, p[0], p[1], 1000};
    const int64_t offs[] = {0, 3, 14, 100};
    for (size_t i = 0; i < sizeof fdv / sizeof fdv[0]; i++) {
        both_alike(ring, pool, (struct call){.kind = FSTAT, .fd = fdv[i]}, NULL);
        both_alike(ring, pool, (struct call){.kind = FSYNC, .fd = fdv[i]}, NULL);
        both_alike(ring, pool, (struct call){.kind = FDATASYNC, .fd = fdv[i]}, NULL);
        for (size_t j = 0; j < sizeof offs / sizeof offs[0]; j++) {
            both_alike(ring, pool, (struct call){.kind = READ, .fd = fdv[i], .off = offs[j]}, NULL);
            both_alike(ring, pool, (struct call){.kind = READV, .fd = fdv[i], .off = offs[j]},
                       NULL);
            both_alike(ring, pool, (struct call){.kind = WRITE, .fd = fdv[i], .off = offs[j]},
                       fresh_a);
            both_alike(ring, pool, (struct call){.kind = WRITEV, .fd = fdv[i], .off = offs[j]},
                       fresh_a);
        }
    }
    /* The bytes a write leaves. */
    fresh_a();
    struct rec wr = {0};
    make(ring, &(struct call){.kind = WRITEV, .fd = rw, .off = 3}, &wr);
    cr_assert_eq(wr.value, 5);
    char back[32] = {0};
    cr_assert_eq(pread(ro, back, sizeof back, 0), 16);
    cr_assert_str_eq(back, "012xyzw!89abcdef");
    /* The pipe was never read: -ESPIPE on both, its bytes still there. */
    char pb[8];
    cr_assert_eq(read(p[0], pb, sizeof pb), 4);
    /* Closes: a good one each (the pool's twin is a dup), then bad ones. */
    int twin = dup(rw);
    struct rec a = {0}, b = {0};
    uint64_t before = pool_submitted();
    make(ring, &(struct call){.kind = CLOSE, .fd = rw}, &a);
    make(pool, &(struct call){.kind = CLOSE, .fd = twin}, &b);
    cr_assert_eq(pool_submitted(), before + 1);
    cr_assert(a.status == 0 && b.status == 0);
    cr_assert_eq(fcntl(rw, F_GETFD), -1, "the ring's close left it open");
    both_alike(ring, pool, (struct call){.kind = CLOSE, .fd = rw}, NULL); /* -EBADF */
    close(ro);
    close(dfd);
    close(null);
    close(p[0]);
    close(p[1]);
    cr_assert_eq(count_fds(), fds, "a descriptor was left open");
    tern_loop_free(pool);
    tern_loop_free(ring);
}

/* The path calls' scene: a, b (files), sub (a directory holding c), no new. */
static void scene(void)
{
    (void)unlink(at("sub/c"));
    (void)unlink(at("new"));
    (void)rmdir(at("new"));
    (void)rmdir(at("sub"));
    fresh_a();
    put("b", "b");
    cr_assert_eq(mkdir(at("sub"), 0700), 0);
    put("sub/c", "c");
}

/* What a path call left: which names are there, and new's mode. */
static unsigned long left(void)
{
    static const char *const names[] = {"a", "b", "sub", "sub/c", "new"};
    unsigned long bits = 0;
    struct stat st;
    for (unsigned i = 0; i < 5; i++)
        if (lstat(at(names[i]), &st) == 0)
            bits |= 1ul << i;
    if (lstat(at("new"), &st) == 0)
        bits |= (unsigned long)st.st_mode << 8;
    return bits;
}

/* unlink, rmdir, mkdir and rename, where the kernel has them on the ring. */
Test(uring_fs_calls, the_path_calls_answer_as_the_pools)
{
    tern_loop *ring = uring_loop();
    tern_loop *pool = loop_new_backend("epoll");
    struct call calls[] = {
        {.kind = UNLINK, .path = at("a")},
        {.kind = UNLINK, .path = at("sub")},
        {.kind = UNLINK, .path = at("missing")},
        {.kind = UNLINK, .path = at("a/x")},
        {.kind = RMDIR, .path = at("sub")},
        {.kind = RMDIR, .path = at("a")},
        {.kind = RMDIR, .path = at("missing")},
        {.kind = MKDIR, .path = at("new")},
        {.kind = MKDIR, .path = at("sub")},
        {.kind = MKDIR, .path = at("missing/new")},
        {.kind = RENAME, .path = at("a"), .path2 = at("new")},
        {.kind = RENAME, .path = at("a"), .path2 = at("b")},
        {.kind = RENAME, .path = at("a"), .path2 = at("sub")},
        {.kind = RENAME, .path = at("sub"), .path2 = at("a")},
        {.kind = RENAME, .path = at("missing"), .path2 = at("new")},
        {.kind = RENAME, .path = at("sub"), .path2 = at("sub/c/d")},
    };
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        /* at() takes turns through four buffers: copies, to outlive them. */
        char p1[128], p2[128];
        struct call c = calls[i];
        snprintf(p1, sizeof p1, "%s", c.path);
        c.path = p1;
        if (c.path2 != NULL) {
            snprintf(p2, sizeof p2, "%s", c.path2);
            c.path2 = p2;
        }
        both_alike(ring, pool, c, scene);
        unsigned long on_pool = left();
        scene();
        struct rec r = {0};
        make(ring, &c, &r);
        cr_assert_eq(left(), on_pool, "call %zu left other names (%lx, pool %lx)", i, left(),
                     on_pool);
    }
    scene();
    (void)unlink(at("sub/c"));
    tern_loop_free(pool);
    tern_loop_free(ring);
}

/* With no entry to be had, the loop makes each call itself: the same answers. */
Test(uring_fs_calls, made_here_when_the_queue_takes_none)
{
    tern_loop *ring = uring_loop();
    tern_loop *pool = loop_new_backend("epoll");
    fresh_a();
    int fd = open(at("a"), O_RDWR | O_CLOEXEC);
    int p[2];
    cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
    tern__uring_refuse_entries(1000000);
    both_alike(ring, pool, (struct call){.kind = STAT, .path = at("a")}, NULL);
    both_alike(ring, pool, (struct call){.kind = LSTAT, .path = at("missing")}, NULL);
    both_alike(ring, pool, (struct call){.kind = OPEN, .path = at("a")}, NULL);
    both_alike(ring, pool, (struct call){.kind = FSTAT, .fd = fd}, NULL);
    both_alike(ring, pool, (struct call){.kind = READ, .fd = fd, .off = 2}, NULL);
    both_alike(ring, pool, (struct call){.kind = READV, .fd = p[0]}, NULL);
    both_alike(ring, pool, (struct call){.kind = WRITEV, .fd = fd, .off = 1}, fresh_a);
    both_alike(ring, pool, (struct call){.kind = FSYNC, .fd = fd}, NULL);
    both_alike(ring, pool, (struct call){.kind = FDATASYNC, .fd = p[1]}, NULL);
    both_alike(ring, pool, (struct call){.kind = MKDIR, .path = at("new")}, no_new_dir);
    both_alike(ring, pool, (struct call){.kind = RENAME, .path = at("a"), .path2 = at("b")},
               fresh_a);
    fresh_a();
    struct rec mv = {0};
    make(ring, &(struct call){.kind = RENAME, .path = at("a"), .path2 = at("b")}, &mv);
    cr_assert_eq(mv.status, 0);
    cr_assert(size_of("a") == -1 && size_of("b") == 16, "the rename made here moved nothing");
    put("b", "b");
    both_alike(ring, pool, (struct call){.kind = UNLINK, .path = at("b")}, fresh_b);
    no_new_dir();
    cr_assert_eq(mkdir(at("new"), 0700), 0);
    both_alike(ring, pool, (struct call){.kind = RMDIR, .path = at("new")}, fresh_new_dir);
    struct rec r = {0};
    make(ring, &(struct call){.kind = CLOSE, .fd = fd}, &r);
    cr_assert_eq(r.status, 0);
    cr_assert_eq(fcntl(fd, F_GETFD), -1);
    /* close(2)'s EINTR has released the descriptor: success (fs.h). */
    deny_syscalls((const long[]){__NR_close}, 1, p[1], EINTR);
    memset(&r, 0, sizeof r);
    make(ring, &(struct call){.kind = CLOSE, .fd = p[1]}, &r);
    cr_assert_eq(r.status, 0, "%s", tern_err_name(r.status));
    tern__uring_refuse_entries(0);
    close(p[0]);
    close(p[1]);
    tern_loop_free(pool);
    tern_loop_free(ring);
}

/* tern_cancel from the loop's thread (a deferred callback) says its outcome. */
struct cancel_at {
    tern_id id;
    int first, second;
};

static void cancel_now(tern_loop *loop, void *arg)
{
    struct cancel_at *c = arg;
    c->first = tern_cancel(loop, c->id);
    c->second = tern_cancel(loop, c->id);
}

/* Cancel id in the loop's next turn: both answers must be want. */
static void cancel_in_turn(tern_loop *loop, tern_id id, int want)
{
    struct cancel_at c = {.id = id, .first = 99, .second = 99};
    cr_assert_eq(tern_defer(loop, cancel_now, &c), 0);
    (void)tern_loop_run_once(loop, 0);
    cr_assert_eq(c.first, want, "tern_cancel: %d", c.first);
    cr_assert_eq(c.second, want, "a second tern_cancel: %d", c.second);
}

/* An open of a FIFO in the kernel, waiting for a writer: one turn takes it there. */
static tern_id fifo_open(tern_loop *loop, const tern_fs_options *o, struct rec *r)
{
    tern_id id;
    cr_assert_eq(tern_fs_open(loop, at("fifo"), O_RDONLY, 0, o, rec_cb, r, &id), 0);
    for (int i = 0; i < 3; i++)
        (void)tern_loop_run_once(loop, 0);
    usleep(20000);
    (void)tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&r->n), 0, "the FIFO opened without a writer");
    return id;
}

Test(uring_fs_calls, a_fifos_open_waits_and_a_cancel_reaches_it)
{
    tern_loop *loop = uring_loop();
    cr_assert_eq(mkfifo(at("fifo"), 0600), 0);
    unsigned fds = count_fds();
    uint64_t before = pool_submitted();
    /* A writer comes: the open ends with its descriptor. */
    struct rec r = {0};
    (void)fifo_open(loop, NULL, &r);
    int w = open(at("fifo"), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    cr_assert_geq(w, 0, "no reader was waiting");
    cr_assert(run_until_count(loop, &r.n, 1, -1, 100000));
    cr_assert_eq(r.status, 0);
    close((int)r.value);
    close(w);
    /* A cancel: RUNNING, then -ECANCELED, nothing opened. */
    memset(&r, 0, sizeof r);
    tern_id id = fifo_open(loop, NULL, &r);
    cancel_in_turn(loop, id, TERN_CANCEL_RUNNING);
    cr_assert(run_until_count(loop, &r.n, 1, -1, 100000));
    cr_assert_eq(r.status, -ECANCELED, "%s", tern_err_name(r.status));
    /* A deadline: -ETIMEDOUT. */
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.timeout_ns = 30 * 1000 * 1000;
    memset(&r, 0, sizeof r);
    cr_assert_eq(tern_fs_open(loop, at("fifo"), O_RDONLY, 0, &o, rec_cb, &r, NULL), 0);
    cr_assert(run_until_count(loop, &r.n, 1, -1, 100000));
    cr_assert_eq(r.status, -ETIMEDOUT, "%s", tern_err_name(r.status));
    /* An owner's close: -ECANCELED. */
    tern_fs_options_init(&o);
    cr_assert_eq(tern_owner_open(loop, 4, &o.owner), 0);
    memset(&r, 0, sizeof r);
    (void)fifo_open(loop, &o, &r);
    cr_assert_eq(tern_owner_close(loop, o.owner), 0);
    cr_assert(run_until_count(loop, &r.n, 1, -1, 100000));
    cr_assert_eq(r.status, -ECANCELED, "%s", tern_err_name(r.status));
    cr_assert_eq(pool_submitted(), before);
    cr_assert_eq(count_fds(), fds, "a descriptor was left open");
    tern_loop_free(loop);
}

/* Loop free with opens in the kernel: each cb once, -ECANCELED, none left open. */
Test(uring_fs_calls, loop_free_with_calls_in_the_kernel)
{
    tern_loop_free(uring_loop()); /* what a first loop makes for the process, made */
    cr_assert_eq(mkfifo(at("fifo"), 0600), 0);
    fresh_a();
    unsigned fds = count_fds();
    tern_loop *loop = uring_loop();
    struct rec r[3] = {0};
    (void)fifo_open(loop, NULL, &r[0]);
    (void)fifo_open(loop, NULL, &r[1]);
    cr_assert_eq(tern_fs_stat(loop, at("a"), NULL, rec_cb, &r[2], NULL), 0);
    tern_loop_free(loop);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(atomic_load(&r[i].n), 1, "request %d: %u callbacks", i, atomic_load(&r[i].n));
        cr_assert_eq(r[i].status, -ECANCELED, "%s", tern_err_name(r[i].status));
    }
    cr_assert_eq(atomic_load(&r[2].n), 1);
    cr_assert(r[2].status == 0 || r[2].status == -ECANCELED);
    cr_assert_eq(count_fds(), fds, "a descriptor was left open (%u, %u)", count_fds(), fds);
}

/*
 * A cancel that meets a call the kernel made reports what it did: a
 * write cancelled in the turn it goes to the kernel says either that it
 * wrote (and the file has the bytes) or -ECANCELED (and it has not); a
 * close cancelled is let end, its descriptor released.
 */
Test(uring_fs_calls, a_cancel_reports_what_the_call_did)
{
    tern_loop *loop = uring_loop();
    put("a", "....");
    int fd = open(at("a"), O_RDWR | O_CLOEXEC);
    struct rec r = {0};
    tern_id id;
    cr_assert_eq(tern_fs_write(loop, fd, "ab", 2, 0, NULL, rec_cb, &r, &id), 0);
    cancel_in_turn(loop, id, TERN_CANCEL_RUNNING);
    cr_assert(run_until_count(loop, &r.n, 1, -1, 100000));
    char back[4];
    cr_assert_eq(pread(fd, back, 4, 0), 4);
    if (r.status == 0) {
        cr_assert_eq(r.value, 2);
        cr_assert(memcmp(back, "ab..", 4) == 0);
    } else {
        cr_assert_eq(r.status, -ECANCELED);
        cr_assert(memcmp(back, "....", 4) == 0);
    }
    memset(&r, 0, sizeof r);
    cr_assert_eq(tern_fs_close(loop, fd, NULL, rec_cb, &r, &id), 0);
    cancel_in_turn(loop, id, TERN_CANCEL_RUNNING);
    cr_assert(run_until_count(loop, &r.n, 1, -1, 100000));
    cr_assert_eq(r.status, 0);
    cr_assert_eq(fcntl(fd, F_GETFD), -1, "a cancelled close left it open");
    tern_loop_free(loop);
}

/* The fs fault site fails each call before it is made, as on the pool. */
Test(uring_fs_calls, an_injected_failure_makes_no_call)
{
    tern_loop *loop = uring_loop();
    put("a", "....");
    unsigned fds = count_fds();
    int fd = open(at("a"), O_RDWR | O_CLOEXEC);
    tern__fault_fs_errno(-ENOSPC);
    struct rec r = {0};
    struct call calls[] = {
        {.kind = OPEN_CREATE, .path = at("new")},
        {.kind = OPEN, .path = at("a")},
        {.kind = WRITE, .fd = fd},
        {.kind = WRITEV, .fd = fd},
        {.kind = READ, .fd = fd},
        {.kind = STAT, .path = at("a")},
        {.kind = FSYNC, .fd = fd},
        {.kind = CLOSE, .fd = fd},
    };
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        memset(&r, 0, sizeof r);
        tern__fault_arm(TERN__FAULT_FS, 1);
        make(loop, &calls[i], &r);
        cr_assert(tern__fault_fired(), "call %zu asked no fault", i);
        tern__fault_arm(TERN__FAULT_FS, 0);
        cr_assert_eq(r.status, -ENOSPC, "call %zu: %s", i, tern_err_name(r.status));
    }
    cr_assert_eq(access(at("new"), F_OK), -1, "a failed open made the file");
    char back[4];
    int ro = open(at("a"), O_RDONLY | O_CLOEXEC);
    cr_assert_eq(pread(ro, back, 4, 0), 4);
    cr_assert(memcmp(back, "....", 4) == 0, "a failed write wrote");
    close(ro);
    cr_assert_eq(fcntl(fd, F_GETFD), -1, "a failed close left it open");
    cr_assert_eq(count_fds(), fds, "a descriptor was left open");
    tern_loop_free(loop);
}

#else

Test(uring_fs_calls, not_built)
{
    cr_skip_test("built without io_uring");
}

#endif
