/*
 * File requests and reservations (SPEC §13, include/tern/fs.h): every
 * request against real files in a temporary directory, content checked
 * byte for byte; cancellation queued, running and between the steps of a
 * whole-file request, with descriptors counted in /proc/self/fd before
 * and after; reservations visible in the statistics and never refused;
 * bad values refused with the documented errno and nothing changed.
 *
 * Blocking inside a system call without timing: open(2) of a FIFO for
 * reading blocks until a writer opens it, and a test can tell the reader
 * is inside open because a non-blocking open for writing stops failing
 * with ENXIO exactly then.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pool_helpers.h"
#include "testing.h"
#include "tested_backend.h"

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

typedef struct rec {
    atomic_int calls;
    int status;
    tern_id id;
    tern_fs_result res;
} rec;

static void rec_cb(tern_loop *loop, tern_id id, int status, tern_fs_result *res, void *arg)
{
    (void)loop;
    rec *r = arg;
    r->status = status;
    r->id = id;
    r->res = *res; /* takes data and listing: the test frees them */
    atomic_fetch_add(&r->calls, 1);
}

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/tern_fs_test.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void remove_tree(const char *path)
{
    DIR *d = opendir(path);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            remove_tree(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(path);
}

static const char *at(const char *name)
{
    static char buf[4][128];
    static int i;
    i = (i + 1) % 4;
    snprintf(buf[i], sizeof buf[i], "%s/%.60s", dir, name);
    return buf[i];
}

static int count_fds(void)
{
    int n = proc_open_fds();
    cr_assert_geq(n, 0, "cannot read /proc/self/fd");
    return n;
}

/* Entries in dir, "." and ".." aside. */
static int count_entries(const char *path)
{
    DIR *d = opendir(path);
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

static void put_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, data, len), (ssize_t)len);
    close(fd);
}

/* The file's bytes, malloc'd; *len set. */
static char *get_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static unsigned char *pattern(size_t n, unsigned seed)
{
    unsigned char *p = malloc(n ? n : 1);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (unsigned char)x;
    }
    return p;
}

static tern_loop *loop_with_pool(unsigned threads, unsigned capacity)
{
    tern_pool_config cfg = ph_config(threads, capacity, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    return loop_new_tested();
}

/*
 * For the tests of read_file's steps through the pool (its queue place,
 * its reservation, a queue full): a loop on the default backend, since on
 * one that makes file calls itself (io_uring) read_file takes no pool
 * slot at all (uring_fs_test covers that path).
 */
static tern_loop *loop_with_pool_steps(unsigned threads, unsigned capacity)
{
    tern_pool_config cfg = ph_config(threads, capacity, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    return loop;
}

static void wait_rec(tern_loop *loop, rec *r)
{
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&r->calls) >= 1);
    cr_assert(ok, "FAIL: no completion within the liveness bound (calls %d)",
              atomic_load(&r->calls));
    cr_assert_eq(atomic_load(&r->calls), 1);
}

static void end(tern_loop *loop)
{
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(ph_loop_stats(loop).live_operations, 0u);
    tern_loop_free(loop);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
    tern_pool_stats s = ph_stats();
    cr_assert_eq(s.queued, 0u);
    cr_assert_eq(s.reserved, 0u);
    remove_tree(dir);
}

/* Wait until a reader is blocked in open(fifo) and return a writer for it. */
static int writer_when_reader_blocks(const char *fifo)
{
    int fd = -1;
    bool ok;
    PH_WAIT_UNTIL(ok, (fd = open(fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC)) >= 0 || errno != ENXIO);
    cr_assert(ok && fd >= 0, "FAIL: no reader ever blocked in open(%s): %s", fifo,
              strerror(errno));
    return fd;
}

/* ------------------------------------------------------------------ */
/* Each request against real files                                     */
/* ------------------------------------------------------------------ */

Test(fs, write_file_then_read_file_byte_for_byte)
{
    make_dir();
    tern_loop *loop = loop_with_pool(2, 64);
    int fds = count_fds();
    /* Sizes around the step size, so reads and writes take several steps. */
    const size_t sizes[] = {0, 1, 4095, 4096, 4097, 3 * 4096 + 17, 1 << 20};
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.step_bytes = 4096;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *want = pattern(sizes[i], (unsigned)i);
        rec w = {0}, r = {0};
        cr_assert_eq(tern_fs_write_file(loop, at("f"), want, sizes[i], &o, rec_cb, &w, NULL), 0);
        wait_rec(loop, &w);
        cr_assert_eq(w.status, 0, "write_file %zu: %s", sizes[i], tern_err_name(w.status));
        cr_assert_eq(w.res.value, (int64_t)sizes[i]);
        size_t len;
        char *disk = get_file(at("f"), &len);
        cr_assert_eq(len, sizes[i]);
        cr_assert(memcmp(disk, want, len) == 0, "the file on disk differs");
        free(disk);
        cr_assert_eq(tern_fs_read_file(loop, at("f"), &o, rec_cb, &r, NULL), 0);
        wait_rec(loop, &r);
        cr_assert_eq(r.status, 0, "read_file %zu: %s", sizes[i], tern_err_name(r.status));
        cr_assert_eq(r.res.value, (int64_t)sizes[i]);
        cr_assert_eq(r.res.st.st_size, (off_t)sizes[i]);
        cr_assert(memcmp(r.res.data, want, sizes[i]) == 0, "read_file returned other bytes");
        cr_assert_eq(((char *)r.res.data)[sizes[i]], '\0');
        tern_fs_free(r.res.data);
        free(want);
        /* Only the file itself: no temporary left behind. */
        cr_assert_eq(count_entries(dir), 1);
    }
    cr_assert_eq(count_fds(), fds);
    end(loop);
}

Test(fs, read_file_of_a_file_without_size)
{
    make_dir();
    tern_loop *loop = loop_with_pool(1, 16);
    char want[4096];
    int pfd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    cr_assert_geq(pfd, 0);
    size_t len = 0;
    ssize_t k;
    while ((k = read(pfd, want + len, sizeof want - len)) > 0)
        len += (size_t)k;
    close(pfd);
    cr_assert_gt(len, 0);
    rec r = {0};
    cr_assert_eq(tern_fs_read_file(loop, "/proc/self/cmdline", NULL, rec_cb, &r, NULL), 0);
    wait_rec(loop, &r);
    cr_assert_eq(r.status, 0);
    cr_assert_eq(r.res.value, (int64_t)len);
    cr_assert(memcmp(r.res.data, want, len) == 0);
    tern_fs_free(r.res.data);
    end(loop);
}

Test(fs, read_file_refusals_change_nothing)
{
    make_dir();
    tern_loop *loop = loop_with_pool(1, 16);
    int fds = count_fds();
    put_file(at("big"), "0123456789", 10);
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.max_bytes = 9; /* the buffer the caller allows is too small */
    rec a = {0}, b = {0}, c = {0};
    cr_assert_eq(tern_fs_read_file(loop, at("big"), &o, rec_cb, &a, NULL), 0);
    cr_assert_eq(tern_fs_read_file(loop, dir, NULL, rec_cb, &b, NULL), 0);
    cr_assert_eq(tern_fs_read_file(loop, at("missing"), NULL, rec_cb, &c, NULL), 0);
    wait_rec(loop, &a);
    wait_rec(loop, &b);
    wait_rec(loop, &c);
    cr_assert_eq(a.status, -EFBIG);
    cr_assert_eq(b.status, -EISDIR);
    cr_assert_eq(c.status, -ENOENT);
    cr_assert_null(a.res.data);
    cr_assert_null(b.res.data);
    o.max_bytes = 10; /* exactly enough */
    rec d = {0};
    cr_assert_eq(tern_fs_read_file(loop, at("big"), &o, rec_cb, &d, NULL), 0);
    wait_rec(loop, &d);
    cr_assert_eq(d.status, 0);
    tern_fs_free(d.res.data);
    cr_assert_eq(count_fds(), fds);
    end(loop);
}

Test(fs, write_file_replaces_atomically_and_failure_leaves_the_old)
{
    make_dir();
    tern_loop *loop = loop_with_pool(1, 16);
    put_file(at("f"), "old", 3);
    rec w = {0};
    cr_assert_eq(tern_fs_write_file(loop, at("f"), "new content", 11, NULL, rec_cb, &w, NULL), 0);
    wait_rec(loop, &w);
    cr_assert_eq(w.status, 0);
    size_t len;
    char *s = get_file(at("f"), &len);
    cr_assert_eq(len, 11);
    cr_assert(memcmp(s, "new content", 11) == 0);
    free(s);
    /* Into a directory that does not exist: refused, nothing created. */
    rec x = {0};
    cr_assert_eq(tern_fs_write_file(loop, at("no/f"), "x", 1, NULL, rec_cb, &x, NULL), 0);
    wait_rec(loop, &x);
    cr_assert_eq(x.status, -ENOENT);
    /* Over a directory: the rename fails and the temporary is removed. */
    cr_assert_eq(mkdir(at("d"), 0755), 0);
    rec y = {0};
    cr_assert_eq(tern_fs_write_file(loop, at("d"), "x", 1, NULL, rec_cb, &y, NULL), 0);
    wait_rec(loop, &y);
    cr_assert_eq(y.status, -EISDIR);
    cr_assert_eq(count_entries(dir), 2, "a temporary was left behind");
    end(loop);
}

Test(fs, descriptor_requests)
{
    make_dir();
    tern_loop *loop = loop_with_pool(2, 16);
    int fds = count_fds();
    rec o = {0};
    cr_assert_eq(tern_fs_open(loop, at("f"), O_RDWR | O_CREAT | O_EXCL, 0600, NULL, rec_cb, &o,
                              NULL), 0);
    wait_rec(loop, &o);
    cr_assert_eq(o.status, 0);
    int fd = (int)o.res.value;
    cr_assert_geq(fd, 0);
    cr_assert(fcntl(fd, F_GETFD) & FD_CLOEXEC, "open must add O_CLOEXEC");

    rec w = {0};
    cr_assert_eq(tern_fs_write(loop, fd, "hello, ", 7, 0, NULL, rec_cb, &w, NULL), 0);
    wait_rec(loop, &w);
    cr_assert_eq(w.status, 0);
    cr_assert_eq(w.res.value, 7);
    struct iovec wv[2] = {{"wor", 3}, {"ld!", 3}};
    rec wv_rec = {0};
    cr_assert_eq(tern_fs_writev(loop, fd, wv, 2, 7, NULL, rec_cb, &wv_rec, NULL), 0);
    wait_rec(loop, &wv_rec);
    cr_assert_eq(wv_rec.res.value, 6);

    char buf[32] = {0};
    rec r = {0};
    cr_assert_eq(tern_fs_read(loop, fd, buf, sizeof buf, 0, NULL, rec_cb, &r, NULL), 0);
    wait_rec(loop, &r);
    cr_assert_eq(r.status, 0);
    cr_assert_eq(r.res.value, 13);
    cr_assert(memcmp(buf, "hello, world!", 13) == 0);

    char a[5] = {0}, b[3] = {0};
    struct iovec rv[2] = {{a, 5}, {b, 3}};
    rec rv_rec = {0};
    cr_assert_eq(tern_fs_readv(loop, fd, rv, 2, 2, NULL, rec_cb, &rv_rec, NULL), 0);
    wait_rec(loop, &rv_rec);
    cr_assert_eq(rv_rec.res.value, 8);
    cr_assert(memcmp(a, "llo, ", 5) == 0 && memcmp(b, "wor", 3) == 0);

    rec eof = {0};
    cr_assert_eq(tern_fs_read(loop, fd, buf, sizeof buf, 100, NULL, rec_cb, &eof, NULL), 0);
    wait_rec(loop, &eof);
    cr_assert_eq(eof.status, 0);
    cr_assert_eq(eof.res.value, 0);

    rec t = {0}, fs = {0}, fsync_rec = {0}, fdsync = {0};
    cr_assert_eq(tern_fs_ftruncate(loop, fd, 5, NULL, rec_cb, &t, NULL), 0);
    wait_rec(loop, &t);
    cr_assert_eq(t.status, 0);
    cr_assert_eq(tern_fs_fsync(loop, fd, NULL, rec_cb, &fsync_rec, NULL), 0);
    cr_assert_eq(tern_fs_fdatasync(loop, fd, NULL, rec_cb, &fdsync, NULL), 0);
    cr_assert_eq(tern_fs_fstat(loop, fd, NULL, rec_cb, &fs, NULL), 0);
    wait_rec(loop, &fsync_rec);
    wait_rec(loop, &fdsync);
    wait_rec(loop, &fs);
    cr_assert_eq(fsync_rec.status, 0);
    cr_assert_eq(fdsync.status, 0);
    cr_assert_eq(fs.status, 0);
    cr_assert_eq(fs.res.st.st_size, 5);
    cr_assert_eq(fs.res.st.st_mode & 0777, 0600);

    rec c = {0};
    cr_assert_eq(tern_fs_close(loop, fd, NULL, rec_cb, &c, NULL), 0);
    wait_rec(loop, &c);
    cr_assert_eq(c.status, 0);
    cr_assert_eq(fcntl(fd, F_GETFD), -1, "close must close");
    rec c2 = {0};
    cr_assert_eq(tern_fs_close(loop, fd, NULL, rec_cb, &c2, NULL), 0);
    wait_rec(loop, &c2);
    cr_assert_eq(c2.status, -EBADF);
    cr_assert_eq(count_fds(), fds);
    end(loop);
}

Test(fs, path_requests_and_listing)
{
    make_dir();
    tern_loop *loop = loop_with_pool(2, 16);
    rec m = {0}, m2 = {0};
    cr_assert_eq(tern_fs_mkdir(loop, at("sub"), 0750, NULL, rec_cb, &m, NULL), 0);
    wait_rec(loop, &m);
    cr_assert_eq(m.status, 0);
    cr_assert_eq(tern_fs_mkdir(loop, at("sub"), 0750, NULL, rec_cb, &m2, NULL), 0);
    wait_rec(loop, &m2);
    cr_assert_eq(m2.status, -EEXIST);

    put_file(at("b"), "bb", 2);
    cr_assert_eq(symlink("b", at("link")), 0);
    rec st = {0}, lst = {0};
    cr_assert_eq(tern_fs_stat(loop, at("link"), NULL, rec_cb, &st, NULL), 0);
    cr_assert_eq(tern_fs_lstat(loop, at("link"), NULL, rec_cb, &lst, NULL), 0);
    wait_rec(loop, &st);
    wait_rec(loop, &lst);
    cr_assert_eq(st.status, 0);
    cr_assert(S_ISREG(st.res.st.st_mode));
    cr_assert_eq(st.res.st.st_size, 2);
    cr_assert(S_ISLNK(lst.res.st.st_mode));

    rec l = {0};
    cr_assert_eq(tern_fs_list(loop, dir, NULL, rec_cb, &l, NULL), 0);
    wait_rec(loop, &l);
    cr_assert_eq(l.status, 0);
    cr_assert_eq(l.res.value, 3);
    tern_fs_listing *ls = l.res.listing;
    cr_assert_not_null(ls);
    cr_assert_eq(ls->count, 3);
    cr_assert_str_eq(ls->entries[0].name, "b");
    cr_assert_str_eq(ls->entries[1].name, "link");
    cr_assert_str_eq(ls->entries[2].name, "sub");
    cr_assert(ls->entries[0].type == DT_REG || ls->entries[0].type == DT_UNKNOWN);
    cr_assert(ls->entries[2].type == DT_DIR || ls->entries[2].type == DT_UNKNOWN);
    tern_fs_free(ls);

    rec rn = {0}, ul = {0}, rd = {0}, rd2 = {0};
    cr_assert_eq(tern_fs_rename(loop, at("b"), at("sub/c"), NULL, rec_cb, &rn, NULL), 0);
    wait_rec(loop, &rn);
    cr_assert_eq(rn.status, 0);
    cr_assert_eq(access(at("sub/c"), F_OK), 0);
    cr_assert_eq(tern_fs_rmdir(loop, at("sub"), NULL, rec_cb, &rd, NULL), 0);
    wait_rec(loop, &rd);
    cr_assert_eq(rd.status, -ENOTEMPTY);
    cr_assert_eq(tern_fs_unlink(loop, at("sub/c"), NULL, rec_cb, &ul, NULL), 0);
    wait_rec(loop, &ul);
    cr_assert_eq(ul.status, 0);
    cr_assert_eq(tern_fs_rmdir(loop, at("sub"), NULL, rec_cb, &rd2, NULL), 0);
    wait_rec(loop, &rd2);
    cr_assert_eq(rd2.status, 0);
    cr_assert_eq(access(at("sub"), F_OK), -1);

    rec empty = {0};
    cr_assert_eq(mkdir(at("e"), 0700), 0);
    cr_assert_eq(tern_fs_list(loop, at("e"), NULL, rec_cb, &empty, NULL), 0);
    wait_rec(loop, &empty);
    cr_assert_eq(empty.status, 0);
    cr_assert_eq(empty.res.listing->count, 0);
    tern_fs_free(empty.res.listing);
    end(loop);
}

Test(fs, copy_range_and_sendfile)
{
    make_dir();
    tern_loop *loop = loop_with_pool(2, 16);
    int fds = count_fds();
    size_t n = 200000;
    unsigned char *want = pattern(n, 7);
    put_file(at("src"), want, n);
    int in = open(at("src"), O_RDONLY | O_CLOEXEC);
    int out = open(at("dst"), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    cr_assert(in >= 0 && out >= 0);
    rec c = {0};
    cr_assert_eq(tern_fs_copy_range(loop, in, 100, out, 5, n, NULL, rec_cb, &c, NULL), 0);
    wait_rec(loop, &c);
    cr_assert_eq(c.status, 0);
    cr_assert_eq(c.res.value, (int64_t)(n - 100), "copy stops at the end of the source");
    size_t len;
    char *got = get_file(at("dst"), &len);
    cr_assert_eq(len, n - 100 + 5);
    cr_assert(memcmp(got + 5, want + 100, n - 100) == 0);
    free(got);

    int sp[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    rec s = {0};
    cr_assert_eq(tern_fs_sendfile(loop, sp[0], in, 10, 1000, NULL, rec_cb, &s, NULL), 0);
    wait_rec(loop, &s);
    cr_assert_eq(s.status, 0);
    cr_assert_eq(s.res.value, 1000);
    unsigned char buf[1000];
    size_t have = 0;
    while (have < sizeof buf) {
        ssize_t k = read(sp[1], buf + have, sizeof buf - have);
        cr_assert_gt(k, 0);
        have += (size_t)k;
    }
    cr_assert(memcmp(buf, want + 10, 1000) == 0);
    close(sp[0]);
    close(sp[1]);
    close(in);
    close(out);
    free(want);
    cr_assert_eq(count_fds(), fds);
    end(loop);
}

/* ------------------------------------------------------------------ */
/* Bad input                                                           */
/* ------------------------------------------------------------------ */

Test(fs, bad_values_return_the_documented_errno_and_change_nothing)
{
    make_dir();
    tern_loop *loop = loop_with_pool(1, 16);
    char long_path[PATH_MAX + 8];
    memset(long_path, 'a', sizeof long_path - 1);
    long_path[sizeof long_path - 1] = '\0';
    char buf[8];
    struct iovec iov = {buf, sizeof buf};
    tern_fs_options bad_step;
    tern_fs_options_init(&bad_step);
    bad_step.step_bytes = 0;
    rec r = {0};
    tern_pool_stats before = ph_stats();
    int fds = count_fds();
    tern_id id = 12345;

    struct {
        const char *what;
        int rc, want;
    } cases[] = {
        {"open NULL path", tern_fs_open(loop, NULL, O_RDONLY, 0, NULL, rec_cb, &r, &id), -EINVAL},
        {"open NULL cb", tern_fs_open(loop, at("x"), O_RDONLY, 0, NULL, NULL, &r, &id), -EINVAL},
        {"open long path", tern_fs_open(loop, long_path, O_RDONLY, 0, NULL, rec_cb, &r, &id),
         -ENAMETOOLONG},
        {"stat NULL", tern_fs_stat(loop, NULL, NULL, rec_cb, &r, &id), -EINVAL},
        {"lstat long", tern_fs_lstat(loop, long_path, NULL, rec_cb, &r, &id), -ENAMETOOLONG},
        {"unlink NULL", tern_fs_unlink(loop, NULL, NULL, rec_cb, &r, &id), -EINVAL},
        {"mkdir long", tern_fs_mkdir(loop, long_path, 0700, NULL, rec_cb, &r, &id), -ENAMETOOLONG},
        {"rmdir NULL", tern_fs_rmdir(loop, NULL, NULL, rec_cb, &r, &id), -EINVAL},
        {"rename NULL to", tern_fs_rename(loop, at("x"), NULL, NULL, rec_cb, &r, &id), -EINVAL},
        {"rename long from", tern_fs_rename(loop, long_path, at("x"), NULL, rec_cb, &r, &id),
         -ENAMETOOLONG},
        {"list NULL", tern_fs_list(loop, NULL, NULL, rec_cb, &r, &id), -EINVAL},
        {"read_file NULL", tern_fs_read_file(loop, NULL, NULL, rec_cb, &r, &id), -EINVAL},
        {"read_file long", tern_fs_read_file(loop, long_path, NULL, rec_cb, &r, &id),
         -ENAMETOOLONG},
        {"read_file step 0", tern_fs_read_file(loop, at("x"), &bad_step, rec_cb, &r, &id),
         -EINVAL},
        {"write_file NULL data", tern_fs_write_file(loop, at("x"), NULL, 1, NULL, rec_cb, &r, &id),
         -EINVAL},
        {"write_file long", tern_fs_write_file(loop, long_path, "x", 1, NULL, rec_cb, &r, &id),
         -ENAMETOOLONG},
        {"write_file dir/", tern_fs_write_file(loop, at("d/"), "x", 1, NULL, rec_cb, &r, &id),
         -EISDIR},
        {"read NULL buf", tern_fs_read(loop, 0, NULL, 1, 0, NULL, rec_cb, &r, &id), -EINVAL},
        {"read fd -1", tern_fs_read(loop, -1, buf, 1, 0, NULL, rec_cb, &r, &id), -EBADF},
        {"read offset -1", tern_fs_read(loop, 0, buf, 1, -1, NULL, rec_cb, &r, &id), -EINVAL},
        {"readv 0 iov", tern_fs_readv(loop, 0, &iov, 0, 0, NULL, rec_cb, &r, &id), -EINVAL},
        {"readv NULL iov", tern_fs_readv(loop, 0, NULL, 1, 0, NULL, rec_cb, &r, &id), -EINVAL},
        {"readv too many", tern_fs_readv(loop, 0, &iov, IOV_MAX + 1, 0, NULL, rec_cb, &r, &id),
         -EINVAL},
        {"write NULL buf", tern_fs_write(loop, 1, NULL, 1, 0, NULL, rec_cb, &r, &id), -EINVAL},
        {"write huge", tern_fs_write(loop, 1, buf, (size_t)SSIZE_MAX + 1, 0, NULL, rec_cb, &r, &id),
         -EINVAL},
        {"writev fd -2", tern_fs_writev(loop, -2, &iov, 1, 0, NULL, rec_cb, &r, &id), -EBADF},
        {"close -1", tern_fs_close(loop, -1, NULL, rec_cb, &r, &id), -EBADF},
        {"fstat -1", tern_fs_fstat(loop, -1, NULL, rec_cb, &r, &id), -EBADF},
        {"fsync -1", tern_fs_fsync(loop, -1, NULL, rec_cb, &r, &id), -EBADF},
        {"fdatasync -1", tern_fs_fdatasync(loop, -1, NULL, rec_cb, &r, &id), -EBADF},
        {"ftruncate -1", tern_fs_ftruncate(loop, -1, 0, NULL, rec_cb, &r, &id), -EBADF},
        {"ftruncate len -1", tern_fs_ftruncate(loop, 0, -1, NULL, rec_cb, &r, &id), -EINVAL},
        {"copy in -1", tern_fs_copy_range(loop, -1, 0, 1, 0, 1, NULL, rec_cb, &r, &id), -EBADF},
        {"copy off -1", tern_fs_copy_range(loop, 0, -1, 1, 0, 1, NULL, rec_cb, &r, &id), -EINVAL},
        {"sendfile out -1", tern_fs_sendfile(loop, -1, 0, 0, 1, NULL, rec_cb, &r, &id), -EBADF},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_expect_eq(cases[i].rc, cases[i].want, "%s: got %s, want %s", cases[i].what,
                     tern_err_name(cases[i].rc), tern_err_name(cases[i].want));
    cr_assert_eq(id, 12345, "a refused request must not write *idp");
    /* Nothing changed: no job, no op, no file, no descriptor, no callback. */
    cr_assert_eq(tern_loop_run_once(loop, 0), 0);
    cr_assert_eq(atomic_load(&r.calls), 0);
    cr_assert_eq(ph_loop_stats(loop).live_operations, 0u);
    tern_pool_stats after = ph_stats();
    cr_assert_eq(after.submitted, before.submitted);
    cr_assert_eq(count_entries(dir), 0);
    cr_assert_eq(count_fds(), fds);
    end(loop);
}

/* ------------------------------------------------------------------ */
/* Cancellation                                                        */
/* ------------------------------------------------------------------ */

/* A gated job (threads = 1: it holds the only worker until opened). */
static void block_worker(tern_loop *loop, ph_gate *g, ph_job *j)
{
    ph_gate_init(g);
    ph_job_init(j, g);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, j), 0);
}

Test(fs, cancel_queued_never_runs)
{
    make_dir();
    tern_loop *loop = loop_with_pool_steps(1, 16);
    int fds = count_fds();
    ph_gate g;
    ph_job blocker;
    block_worker(loop, &g, &blocker);
    cr_assert(ph_gate_wait_entered(&g, 1));
    rec m = {0}, o = {0}, w = {0}, r = {0};
    tern_id mid, oid, wid, rid;
    put_file(at("f"), "abc", 3);
    cr_assert_eq(tern_fs_mkdir(loop, at("never"), 0700, NULL, rec_cb, &m, &mid), 0);
    cr_assert_eq(tern_fs_open(loop, at("f"), O_RDONLY, 0, NULL, rec_cb, &o, &oid), 0);
    cr_assert_eq(tern_fs_write_file(loop, at("w"), "x", 1, NULL, rec_cb, &w, &wid), 0);
    cr_assert_eq(tern_fs_read_file(loop, at("f"), NULL, rec_cb, &r, &rid), 0);
    cr_assert_eq(ph_stats().queued, 4u);
    cr_assert_geq(tern_cancel(loop, mid), 0);
    cr_assert_geq(tern_cancel(loop, oid), 0);
    cr_assert_geq(tern_cancel(loop, wid), 0);
    cr_assert_geq(tern_cancel(loop, rid), 0);
    /* Delivered without waiting for the worker. */
    wait_rec(loop, &m);
    wait_rec(loop, &o);
    wait_rec(loop, &w);
    wait_rec(loop, &r);
    cr_assert_eq(m.status, -ECANCELED);
    cr_assert_eq(o.status, -ECANCELED);
    cr_assert_eq(w.status, -ECANCELED);
    cr_assert_eq(r.status, -ECANCELED);
    cr_assert_null(r.res.data);
    ph_gate_open(&g);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&blocker.done_calls) == 1);
    cr_assert(ok);
    /* The worker walks past the tombstones; each gives its slot back. */
    PH_WAIT_UNTIL(ok, ph_stats().queued == 0 && ph_stats().reserved == 0);
    cr_assert(ok, "FAIL: queued %u reserved %u after the tombstones", ph_stats().queued,
              ph_stats().reserved);
    cr_assert_eq(access(at("never"), F_OK), -1, "a cancelled mkdir ran");
    cr_assert_eq(access(at("w"), F_OK), -1, "a cancelled write_file ran");
    cr_assert_eq(count_entries(dir), 1);
    cr_assert_eq(count_fds(), fds);
    ph_gate_destroy(&g);
    end(loop);
}

/* On the pool: a worker's open runs to its end (uring_fs_test has the
 * ring's, whose cancel reaches the call in the kernel). */
Test(fs, cancel_running_open_reports_what_happened)
{
    make_dir();
    tern_loop *loop = loop_with_pool_steps(1, 16);
    cr_assert_eq(mkfifo(at("fifo"), 0600), 0);
    int fds = count_fds();
    rec o = {0};
    tern_id id;
    cr_assert_eq(tern_fs_open(loop, at("fifo"), O_RDONLY, 0, NULL, rec_cb, &o, &id), 0);
    int wfd = writer_when_reader_blocks(at("fifo"));
    cr_assert_geq(tern_cancel(loop, id), 0);
    /* A cancel made off the loop's turn is resolved in its next step 1. */
    tern_loop_run_once(loop, 0);
    cr_assert_eq(write(wfd, "x", 1), 1);
    wait_rec(loop, &o);
    /* The open ran to its end: done says so and hands over the descriptor. */
    cr_assert_eq(o.status, 0, "got %s", tern_err_name(o.status));
    cr_assert_geq(o.res.value, 0);
    char c;
    cr_assert_eq(read((int)o.res.value, &c, 1), 1);
    close((int)o.res.value);
    close(wfd);
    cr_assert_eq(count_fds(), fds);
    end(loop);
}

/*
 * Hold a whole-file request inside its first step: the fault seam keeps
 * its open(2) waiting (as a call that waits on a peer would) until
 * tern__fault_fs_release(). Its slot is a reservation by then.
 */
static void hold_first_step(void)
{
    bool ok;
    PH_WAIT_UNTIL(ok, tern__fault_fs_held() && ph_stats().reserved == 1);
    cr_assert(ok, "FAIL: the first step never ran (held %d, reserved %u)",
              tern__fault_fs_held(), ph_stats().reserved);
}

Test(fs, cancel_while_a_step_runs_stops_at_the_boundary_and_closes)
{
    make_dir();
    tern_loop *loop = loop_with_pool_steps(1, 16);
    put_file(at("f"), "content", 7);
    int fds = count_fds();
    rec r = {0};
    tern_id id;
    tern__fault_fs_hold();
    cr_assert_eq(tern_fs_read_file(loop, at("f"), NULL, rec_cb, &r, &id), 0);
    hold_first_step();
    cr_assert_eq(ph_stats().queued, 0u);
    cr_assert_geq(tern_cancel(loop, id), 0);
    /* Resolved in the next step 1: the running job is flagged before its
     * open can return (it cannot until the hold is released). */
    tern_loop_run_once(loop, 0);
    /* The open returns; the request stops at the boundary and closes it. */
    tern__fault_fs_release();
    wait_rec(loop, &r);
    cr_assert_eq(r.status, -ECANCELED);
    cr_assert_null(r.res.data);
    cr_assert_eq(count_fds(), fds, "the descriptor opened by the first step leaked");
    end(loop);
}

/*
 * tern_fs_read_file reads regular files only. A FIFO with no writer is
 * refused at once with -ENOTSUP (its open does not wait for a writer), and
 * so is a character device; a socket cannot be opened at all (-ENXIO).
 * The one worker is free afterwards: a stat behind them completes.
 */
Test(fs, read_file_refuses_special_files_at_once_and_the_worker_stays_free)
{
    make_dir();
    tern_loop *loop = loop_with_pool(1, 16);
    cr_assert_eq(mkfifo(at("fifo"), 0600), 0);
    int sfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(sfd, 0);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    cr_assert_lt(strlen(at("sock")), sizeof sun.sun_path);
    strcpy(sun.sun_path, at("sock"));
    cr_assert_eq(bind(sfd, (struct sockaddr *)&sun, sizeof sun), 0);
    int fds = count_fds();
    struct {
        const char *path;
        int status;
    } cases[] = {{at("fifo"), -ENOTSUP}, {"/dev/null", -ENOTSUP}, {at("sock"), -ENXIO}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rec r = {0};
        cr_assert_eq(tern_fs_read_file(loop, cases[i].path, NULL, rec_cb, &r, NULL), 0);
        wait_rec(loop, &r);
        cr_assert_eq(r.status, cases[i].status, "%s: %s", cases[i].path,
                     tern_err_name(r.status));
        cr_assert_null(r.res.data);
        cr_assert_eq(count_fds(), fds, "%s: the descriptor leaked", cases[i].path);
    }
    rec st = {0};
    cr_assert_eq(tern_fs_stat(loop, at("fifo"), NULL, rec_cb, &st, NULL), 0);
    wait_rec(loop, &st);
    cr_assert_eq(st.status, 0);
    cr_assert(S_ISFIFO(st.res.st.st_mode));
    close(sfd);
    end(loop);
}

/*
 * A terminal put in the path's place between read_file's stat and its open
 * is refused at the descriptor (-ENOTSUP) and, opened O_NOCTTY, never
 * becomes the controlling terminal of the process, a session leader
 * without one. The pool's steps: the hold lets the stat through and keeps
 * the open until the path is swapped. In a child, the leader of a new
 * session; its exit status says which check failed (0: none, 77: no
 * pseudo-terminal to try).
 */
static int pool_terminal_child(void)
{
    if (setsid() < 0)
        return 1;
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0 || ptsname(master) == NULL)
        return 77;
    tern_pool_config cfg = ph_config(1, 16, 4);
    if (tern_pool_start(&cfg) != 0)
        return 2;
    tern_loop *loop = NULL;
    if (tern_loop_new(&loop, NULL) != 0)
        return 2;
    rec r = {0};
    tern__fault_fs_hold_after(1); /* the stat goes through; the open waits */
    if (tern_fs_read_file(loop, at("f"), NULL, rec_cb, &r, NULL) != 0)
        return 3;
    bool ok;
    PH_WAIT_UNTIL(ok, tern__fault_fs_held());
    if (!ok)
        return 4;
    if (unlink(at("f")) != 0 || symlink(ptsname(master), at("f")) != 0)
        return 5;
    tern__fault_fs_release();
    PH_PUMP_UNTIL(ok, loop, atomic_load(&r.calls) == 1);
    if (!ok || r.status != -ENOTSUP)
        return 6;
    tern_loop_free(loop);
    if (open("/dev/tty", O_RDONLY | O_NOCTTY) >= 0)
        return 7; /* the terminal became the controlling one */
    return 0;
}

Test(fs, a_terminal_put_in_the_paths_place_is_not_made_controlling)
{
    make_dir();
    put_file(at("f"), "content", 7);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0)
        _exit(pool_terminal_child());
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    remove_tree(dir);
    cr_assert(WIFEXITED(st), "the child did not exit");
    if (WEXITSTATUS(st) == 77)
        cr_skip_test("no pseudo-terminal");
    cr_assert_eq(WEXITSTATUS(st), 0, "check %d failed", WEXITSTATUS(st));
}

/*
 * Park a whole-file request in the queue between two steps: one worker;
 * gate 1 holds it while the request queues behind; once gate 1 opens, the
 * worker runs the request's first step, which queues the second behind
 * the job on gate 2, and the worker blocks there.
 */
static void park_between_steps(tern_loop *loop, ph_gate *g1, ph_job *j1, ph_gate *g2, ph_job *j2,
                               void (*submit)(tern_loop *, rec *, tern_id *), rec *r,
                               tern_id *id)
{
    block_worker(loop, g1, j1);
    cr_assert(ph_gate_wait_entered(g1, 1));
    submit(loop, r, id);
    ph_gate_init(g2);
    ph_job_init(j2, g2);
    j2->poll_cancel = true; /* so a loop free or a pool shutdown can end it */
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, j2), 0);
    ph_gate_open(g1);
    cr_assert(ph_gate_wait_entered(g2, 1));
    /* Between steps: its next step holds a queued slot, nothing reserved. */
    tern_pool_stats s = ph_stats();
    cr_assert_eq(s.queued, 1u);
    cr_assert_eq(s.reserved, 0u);
}

static void submit_read(tern_loop *loop, rec *r, tern_id *id)
{
    cr_assert_eq(tern_fs_read_file(loop, at("f"), NULL, rec_cb, r, id), 0);
}

static void submit_write(tern_loop *loop, rec *r, tern_id *id)
{
    cr_assert_eq(tern_fs_write_file(loop, at("w"), "payload", 7, NULL, rec_cb, r, id), 0);
}

static void cancel_between(void (*submit)(tern_loop *, rec *, tern_id *))
{
    make_dir();
    tern_loop *loop = loop_with_pool_steps(1, 16);
    put_file(at("f"), "content", 7);
    int fds = count_fds();
    ph_gate g1, g2;
    ph_job j1, j2;
    rec r = {0};
    tern_id id;
    park_between_steps(loop, &g1, &j1, &g2, &j2, submit, &r, &id);
    cr_assert_eq(count_fds(), fds + 1, "the first step should hold a descriptor");
    cr_assert_geq(tern_cancel(loop, id), 0);
    wait_rec(loop, &r);
    cr_assert_eq(r.status, -ECANCELED);
    cr_assert_null(r.res.data);
    cr_assert_eq(count_fds(), fds, "cancelled between steps: the descriptor leaked");
    cr_assert_eq(count_entries(dir), 1, "cancelled between steps: a temporary was left");
    ph_gate_open(&g2);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&j1.done_calls) == 1 && atomic_load(&j2.done_calls) == 1);
    cr_assert(ok);
    PH_WAIT_UNTIL(ok, ph_stats().queued == 0 && ph_stats().reserved == 0);
    cr_assert(ok, "FAIL: queued %u reserved %u", ph_stats().queued, ph_stats().reserved);
    cr_assert_eq(atomic_load(&r.calls), 1);
    ph_gate_destroy(&g1);
    ph_gate_destroy(&g2);
    end(loop);
}

Test(fs, cancel_read_file_between_steps_closes_the_descriptor)
{
    cancel_between(submit_read);
}

Test(fs, cancel_write_file_between_steps_removes_the_temporary)
{
    cancel_between(submit_write);
}

/* ------------------------------------------------------------------ */
/* Reservations                                                        */
/* ------------------------------------------------------------------ */

Test(fs, a_reservation_counts_against_capacity_and_the_next_step_is_never_refused)
{
    make_dir();
    tern_loop *loop = loop_with_pool_steps(1, 2);
    put_file(at("f"), "file data", 9);
    rec r = {0};
    tern__fault_fs_hold();
    cr_assert_eq(tern_fs_read_file(loop, at("f"), NULL, rec_cb, &r, NULL), 0);
    /* Its open step runs on a reservation, and is held there: one slot of
     * two is taken, and stays taken. */
    hold_first_step();
    bool ok;
    ph_job fill[2];
    ph_job_init(&fill[0], NULL);
    ph_job_init(&fill[1], NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &fill[0]), 0);
    uint64_t refused = ph_stats().refused_queue_full;
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &fill[1]), -EAGAIN,
                 "queued 1 + reserved 1 must fill a queue of 2");
    cr_assert_eq(ph_stats().refused_queue_full, refused + 1);
    tern_pool_stats s = ph_stats();
    cr_assert_eq(s.queued + s.reserved, 2u);
    /* Let the open finish: every later step goes in without a refusal. */
    tern__fault_fs_release();
    wait_rec(loop, &r);
    cr_assert_eq(r.status, 0, "got %s", tern_err_name(r.status));
    cr_assert_eq(r.res.value, 9);
    cr_assert(memcmp(r.res.data, "file data", 9) == 0);
    tern_fs_free(r.res.data);
    cr_assert_eq(ph_stats().refused_queue_full, refused + 1, "a later step was refused");
    PH_PUMP_UNTIL(ok, loop, atomic_load(&fill[0].done_calls) == 1);
    cr_assert(ok);
    end(loop);
}

Test(fs, whole_file_requests_refused_on_a_full_queue_leave_nothing)
{
    make_dir();
    tern_loop *loop = loop_with_pool_steps(1, 1);
    ph_gate g;
    ph_job blocker, fill;
    block_worker(loop, &g, &blocker);
    cr_assert(ph_gate_wait_entered(&g, 1));
    ph_job_init(&fill, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &fill), 0);
    rec r = {0};
    int fds = count_fds();
    cr_assert_eq(tern_fs_read_file(loop, "/etc/hostname", NULL, rec_cb, &r, NULL), -EAGAIN);
    cr_assert_eq(tern_fs_write_file(loop, at("x"), "x", 1, NULL, rec_cb, &r, NULL), -EAGAIN);
    cr_assert_eq(ph_stats().reserved, 0u);
    cr_assert_eq(ph_loop_stats(loop).live_operations, 2u); /* the two jobs */
    ph_gate_open(&g);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&fill.done_calls) == 1);
    cr_assert(ok);
    cr_assert_eq(atomic_load(&r.calls), 0);
    cr_assert_eq(count_fds(), fds);
    cr_assert_eq(count_entries(dir), 0);
    ph_gate_destroy(&g);
    end(loop);
}

/* ------------------------------------------------------------------ */
/* Teardown and shutdown with requests in flight                       */
/* ------------------------------------------------------------------ */

Test(fs, loop_free_between_steps_closes_everything)
{
    make_dir();
    put_file(at("f"), "content", 7);
    int fds = count_fds(); /* before the loop's own descriptors */
    tern_loop *loop = loop_with_pool(1, 16);
    ph_gate g1, g2;
    ph_job j1, j2;
    rec r = {0};
    tern_id id;
    park_between_steps(loop, &g1, &j1, &g2, &j2, submit_write, &r, &id);
    /* The free cancels everything; the gated job sees it and returns. */
    tern_loop_free(loop);
    cr_assert_eq(atomic_load(&r.calls), 1);
    cr_assert_eq(r.status, -ECANCELED);
    cr_assert_eq(count_fds(), fds);
    cr_assert_eq(count_entries(dir), 1);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
    tern_pool_stats s = ph_stats();
    cr_assert_eq(s.queued, 0u);
    cr_assert_eq(s.reserved, 0u);
    ph_gate_destroy(&g1);
    ph_gate_destroy(&g2);
    remove_tree(dir);
}

Test(fs, pool_cancel_shutdown_between_steps_gives_the_slot_back)
{
    make_dir();
    tern_loop *loop = loop_with_pool_steps(1, 16);
    put_file(at("f"), "content", 7);
    int fds = count_fds();
    ph_gate g1, g2;
    ph_job j1, j2;
    rec r = {0};
    tern_id id;
    park_between_steps(loop, &g1, &j1, &g2, &j2, submit_read, &r, &id);
    /* The shutdown cancels the queued step and the gated job, which returns. */
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_CANCEL, 10 * PH_SEC), 0);
    tern_pool_stats s = ph_stats();
    cr_assert_eq(s.queued, 0u);
    cr_assert_eq(s.reserved, 0u);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&r.calls) == 1 && atomic_load(&j2.done_calls) == 1);
    cr_assert(ok);
    cr_assert_eq(r.status, -ECANCELED);
    cr_assert_eq(count_fds(), fds);
    ph_gate_destroy(&g1);
    ph_gate_destroy(&g2);
    end(loop);
}
