/*
 * File requests that fail (include/tern/fs.h): the system call's error
 * reaches the callback unchanged, and a request that failed did nothing
 * (the file keeps its size and bytes, the directory is not made or not
 * removed, no descriptor is left open). Each single-call request meets an
 * injected EIO at its system call (the fault seam, backends/fault.h), then
 * runs again without it to show the same request works. And a copy the
 * kernel cannot make (copy_file_range refuses a character device) goes
 * through a buffer with the same result, including its errors; an
 * injected EXDEV is reported, not taken for the kernel's refusal.
 */
#include "fs_helpers.h"
#include "tested_backend.h"

#include <sys/stat.h>

static bool exists(const char *name)
{
    return access(at(name), F_OK) == 0;
}

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/tern_fs_errors.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
    const char *names[] = {"a", "b", "d", "copy", "moved"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        (void)unlink(at(names[i]));
        (void)rmdir(at(names[i]));
    }
    cr_assert_eq(rmdir(dir), 0, "the scratch directory is not empty");
}

/*
 * Submit through `submit` with the next file-request system call failing
 * with EIO (injected: true) or not; run until the callback and return it.
 */
typedef int (*submit_fn)(tern_loop *loop, struct rec *r, void *ctx);

static struct rec run(tern_loop *loop, submit_fn submit, void *ctx, bool injected)
{
    struct rec r = {0};
    if (injected) {
        tern__fault_fs_errno(-EIO);
        tern__fault_arm(TERN__FAULT_FS, 1);
    }
    int rc = submit(loop, &r, ctx);
    cr_assert_eq(rc, 0, "submit: %s", tern_err_name(rc));
    cr_assert(run_until_count(loop, &r.n, 1, 10 * (int64_t)MS, 2000), "no callback");
    if (injected) {
        cr_assert(tern__fault_fired(), "the request made no system call through the seam");
        tern__fault_arm(0, 0);
        cr_assert_eq(r.status, -EIO, "the injected error came back as %s",
                     tern_err_name(r.status));
    }
    return r;
}

static int do_stat(tern_loop *l, struct rec *r, void *c)
{
    (void)c;
    return tern_fs_stat(l, at("a"), NULL, rec_cb, r, NULL);
}
static int do_lstat(tern_loop *l, struct rec *r, void *c)
{
    (void)c;
    return tern_fs_lstat(l, at("a"), NULL, rec_cb, r, NULL);
}
static int do_fdatasync(tern_loop *l, struct rec *r, void *c)
{
    return tern_fs_fdatasync(l, *(int *)c, NULL, rec_cb, r, NULL);
}
static int do_ftruncate(tern_loop *l, struct rec *r, void *c)
{
    return tern_fs_ftruncate(l, *(int *)c, 2, NULL, rec_cb, r, NULL);
}
static int do_write(tern_loop *l, struct rec *r, void *c)
{
    return tern_fs_write(l, *(int *)c, "zz", 2, 0, NULL, rec_cb, r, NULL);
}
static int do_unlink(tern_loop *l, struct rec *r, void *c)
{
    (void)c;
    return tern_fs_unlink(l, at("b"), NULL, rec_cb, r, NULL);
}
static int do_mkdir(tern_loop *l, struct rec *r, void *c)
{
    (void)c;
    return tern_fs_mkdir(l, at("d"), 0700, NULL, rec_cb, r, NULL);
}
static int do_rmdir(tern_loop *l, struct rec *r, void *c)
{
    (void)c;
    return tern_fs_rmdir(l, at("d"), NULL, rec_cb, r, NULL);
}
static int do_list(tern_loop *l, struct rec *r, void *c)
{
    (void)c;
    return tern_fs_list(l, dir, NULL, rec_cb, r, NULL);
}
static int do_sendfile(tern_loop *l, struct rec *r, void *c)
{
    int *fds = c; /* out, in */
    return tern_fs_sendfile(l, fds[0], fds[1], 0, 5, NULL, rec_cb, r, NULL);
}
static int do_copy(tern_loop *l, struct rec *r, void *c)
{
    int *fds = c; /* in, out */
    return tern_fs_copy_range(l, fds[0], 0, fds[1], 0, 5, NULL, rec_cb, r, NULL);
}

Test(fs_errors, each_single_call_request_reports_the_error_and_does_nothing,
     .init = setup, .fini = teardown, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    put("a", "hello");
    put("b", "bye");
    int fds = count_open_fds();

    struct rec r = run(loop, do_stat, NULL, true);
    r = run(loop, do_stat, NULL, false);
    cr_assert_eq(r.status, 0);
    cr_assert_eq(r.st.st_size, 5);
    r = run(loop, do_lstat, NULL, true);
    r = run(loop, do_lstat, NULL, false);
    cr_assert_eq(r.st.st_size, 5);

    int fd = open(at("a"), O_RDWR | O_CLOEXEC);
    cr_assert_geq(fd, 0);
    run(loop, do_fdatasync, &fd, true);
    cr_assert_eq(run(loop, do_fdatasync, &fd, false).status, 0);
    run(loop, do_ftruncate, &fd, true);
    cr_assert_eq(size_of("a"), 5, "a failed truncate changed the size");
    cr_assert_eq(run(loop, do_ftruncate, &fd, false).status, 0);
    cr_assert_eq(size_of("a"), 2);
    run(loop, do_write, &fd, true);
    char back[8] = {0};
    cr_assert_eq(pread(fd, back, sizeof back, 0), 2);
    cr_assert_str_eq(back, "he", "a failed write wrote");
    r = run(loop, do_write, &fd, false);
    cr_assert_eq(r.value, 2);

    run(loop, do_unlink, NULL, true);
    cr_assert(exists("b"), "a failed unlink removed the file");
    cr_assert_eq(run(loop, do_unlink, NULL, false).status, 0);
    cr_assert(!exists("b"));
    run(loop, do_mkdir, NULL, true);
    cr_assert(!exists("d"), "a failed mkdir made the directory");
    cr_assert_eq(run(loop, do_mkdir, NULL, false).status, 0);
    cr_assert(exists("d"));
    run(loop, do_rmdir, NULL, true);
    cr_assert(exists("d"), "a failed rmdir removed the directory");
    cr_assert_eq(run(loop, do_rmdir, NULL, false).status, 0);
    cr_assert(!exists("d"));

    /* A listing whose directory cannot be opened: no block, no descriptor. */
    r = run(loop, do_list, NULL, true);
    cr_assert_null(r.listing);
    r = run(loop, do_list, NULL, false);
    cr_assert_eq(r.status, 0);
    cr_assert_eq(r.value, 1);
    cr_assert_str_eq(r.listing->entries[0].name, "a");
    tern_fs_free(r.listing);

    /* sendfile and a kernel copy: the error, and nothing moved. */
    int out = open(at("copy"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    cr_assert_geq(out, 0);
    int pair[2] = {out, fd};
    run(loop, do_sendfile, pair, true);
    cr_assert_eq(size_of("copy"), 0, "a failed sendfile moved bytes");
    cr_assert_eq(run(loop, do_sendfile, pair, false).value, 2);
    int cp[2] = {fd, out};
    run(loop, do_copy, cp, true);
    cr_assert_eq(size_of("copy"), 2, "a failed copy moved bytes");
    close(out);
    close(fd);
    cr_assert_eq(count_open_fds(), fds, "a failed request left a descriptor open");
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}

/*
 * copy_file_range does not take a character device: the copy goes through
 * a buffer, reads stop at the end of the source, and the bytes are the
 * source's. /dev/zero gives as many zeros as asked; a regular file as many
 * as it has.
 */
Test(fs_errors, a_copy_the_kernel_refuses_goes_through_a_buffer, .init = setup,
     .fini = teardown, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    int zero = open("/dev/zero", O_RDONLY | O_CLOEXEC);
    int out = open(at("copy"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    cr_assert_geq(zero, 0);
    cr_assert_geq(out, 0);
    /* More than one buffer's worth, so the loop goes round. */
    struct rec r = {0};
    size_t len = 150000;
    cr_assert_eq(tern_fs_copy_range(loop, zero, 0, out, 10, len, NULL, rec_cb, &r, NULL), 0);
    cr_assert(run_until_count(loop, &r.n, 1, 10 * (int64_t)MS, 2000));
    cr_assert_eq(r.status, 0, "copy: %s", tern_err_name(r.status));
    cr_assert_eq(r.value, (int64_t)len);
    cr_assert_eq(size_of("copy"), (off_t)(10 + len));
    unsigned char b[64];
    cr_assert_eq(pread(out, b, sizeof b, 10 + (off_t)len - sizeof b), (ssize_t)sizeof b);
    for (size_t i = 0; i < sizeof b; i++)
        cr_assert_eq(b[i], 0);

    /* To a character device from a file: the file's bytes, then its end. */
    put("a", "abcdef");
    int in = open(at("a"), O_RDONLY | O_CLOEXEC);
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    cr_assert_geq(in, 0);
    cr_assert_geq(null, 0);
    r = (struct rec){0};
    cr_assert_eq(tern_fs_copy_range(loop, in, 2, null, 0, 100, NULL, rec_cb, &r, NULL), 0);
    cr_assert(run_until_count(loop, &r.n, 1, 10 * (int64_t)MS, 2000));
    cr_assert_eq(r.status, 0);
    cr_assert_eq(r.value, 4, "stops at the end of the source");

    /*
     * Through the buffer, a read that fails before anything was copied is
     * the request's error; a write that fails likewise. The kernel's
     * refusal itself is not injected (the seam's first call is the copy's
     * own attempt), so the buffer's calls are the second and third.
     */
    tern__fault_fs_errno(-EIO);
    for (uint64_t nth = 2; nth <= 3; nth++) {
        r = (struct rec){0};
        tern__fault_arm(TERN__FAULT_FS, nth);
        cr_assert_eq(tern_fs_copy_range(loop, in, 0, null, 0, 6, NULL, rec_cb, &r, NULL), 0);
        cr_assert(run_until_count(loop, &r.n, 1, 10 * (int64_t)MS, 2000));
        cr_assert(tern__fault_fired());
        tern__fault_arm(0, 0);
        cr_assert_eq(r.status, -EIO, "call %llu: %s", (unsigned long long)nth,
                     tern_err_name(r.status));
    }
    /* An injected EXDEV at the kernel's copy, between two regular files
     * the kernel would copy, is the request's error: the seam's failure
     * is reported, not taken for the kernel's refusal and sent round
     * through the buffer. Nothing is written. */
    int to = open(at("copy"), O_RDWR | O_TRUNC | O_CLOEXEC);
    cr_assert_geq(to, 0);
    tern__fault_fs_errno(-EXDEV);
    r = (struct rec){0};
    tern__fault_arm(TERN__FAULT_FS, 1);
    cr_assert_eq(tern_fs_copy_range(loop, in, 0, to, 0, 6, NULL, rec_cb, &r, NULL), 0);
    cr_assert(run_until_count(loop, &r.n, 1, 10 * (int64_t)MS, 2000));
    cr_assert(tern__fault_fired());
    tern__fault_arm(0, 0);
    tern__fault_fs_errno(-EIO);
    cr_assert_eq(r.status, -EXDEV, "copy: %s", tern_err_name(r.status));
    cr_assert_eq(size_of("copy"), 0, "the copy went round through the buffer");
    close(to);
    close(in);
    close(null);
    close(zero);
    close(out);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}
