/*
 * File requests the kernel itself refuses (include/tern/fs.h): not an
 * injected failure but the system call's own errno, which reaches the
 * callback unchanged, once, with nothing done: a descriptor that is not
 * open (EBADF), a descriptor opened for reading given a write or a
 * truncation, a copy into a descriptor that cannot be written (through
 * the kernel and through the buffer), and a copy or a whole-file write
 * that meets the file size limit (RLIMIT_FSIZE, EFBIG) part way, where
 * the count says how far the copy got and the write leaves the old file,
 * and a whole-file read and a copy whose read fails (/proc/self/mem).
 * Also the edges that end well: a copy of exactly the source's length,
 * an empty file read with max_bytes 0, a listing longer than its first
 * array, an unsized file read with no limit, and a whole-file write in
 * the root directory.
 */
#include "fs_helpers.h"
#include "tested_backend.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/tern_fs_kernel.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
    const char *names[] = {"a", "b", "copy", "empty", "big"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        (void)unlink(at(names[i]));
    cr_assert_eq(rmdir(dir), 0, "the scratch directory is not empty (a temporary left?)");
}

/* A descriptor number that is not open now, and stays so: it is far above
 * the lowest free number that every open in this process takes. */
static int closed_fd(void)
{
    int low = open("/dev/null", O_RDONLY | O_CLOEXEC);
    cr_assert_geq(low, 0);
    int fd = fcntl(low, F_DUPFD_CLOEXEC, 500);
    cr_assert_geq(fd, 500);
    close(fd);
    close(low);
    cr_assert(fcntl(fd, F_GETFD) < 0 && errno == EBADF);
    return fd;
}

/* Wait for exactly one callback, and check that no second one follows. */
static void wait_one(tern_loop *loop, struct rec *r)
{
    cr_assert(run_until_count(loop, &r->n, 1, 10 * (int64_t)MS, 2000), "no callback");
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(atomic_load(&r->n), 1, "the callback ran %u times", atomic_load(&r->n));
}

Test(fs_kernel_errors, every_descriptor_request_on_a_closed_descriptor_gets_ebadf,
     .init = setup, .fini = teardown, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    put("a", "hello");
    int bad = closed_fd();
    int good = open(at("a"), O_RDWR | O_CLOEXEC);
    cr_assert_geq(good, 0);
    int fds = count_open_fds();
    char buf[8];
    struct iovec iov = {buf, sizeof buf};

    for (int which = 0; which < 9; which++) {
        struct rec r = {0};
        int rc = -1;
        switch (which) {
        case 0: rc = tern_fs_fstat(loop, bad, NULL, rec_cb, &r, NULL); break;
        case 1: rc = tern_fs_fsync(loop, bad, NULL, rec_cb, &r, NULL); break;
        case 2: rc = tern_fs_fdatasync(loop, bad, NULL, rec_cb, &r, NULL); break;
        case 3: rc = tern_fs_read(loop, bad, buf, sizeof buf, 0, NULL, rec_cb, &r, NULL); break;
        case 4: rc = tern_fs_writev(loop, bad, &iov, 1, 0, NULL, rec_cb, &r, NULL); break;
        case 5: rc = tern_fs_ftruncate(loop, bad, 0, NULL, rec_cb, &r, NULL); break;
        case 6: rc = tern_fs_sendfile(loop, good, bad, 0, 5, NULL, rec_cb, &r, NULL); break;
        case 7: rc = tern_fs_copy_range(loop, bad, 0, good, 0, 5, NULL, rec_cb, &r, NULL); break;
        case 8: rc = tern_fs_copy_range(loop, good, 0, bad, 0, 5, NULL, rec_cb, &r, NULL); break;
        }
        cr_assert_eq(rc, 0, "request %d: %s", which, tern_err_name(rc));
        wait_one(loop, &r);
        cr_assert_eq(r.status, -EBADF, "request %d: %s, not EBADF", which,
                     tern_err_name(r.status));
    }
    char back[8] = {0};
    cr_assert_eq(pread(good, back, sizeof back, 0), 5);
    cr_assert_str_eq(back, "hello", "a refused request changed the file");
    close(good);
    cr_assert_eq(count_open_fds(), fds - 1, "a refused request left a descriptor open");
    loop_free_clean(loop);
}

Test(fs_kernel_errors, a_read_only_descriptor_refuses_writes_truncation_and_copies_into_it,
     .init = setup, .fini = teardown, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    put("a", "hello");
    put("b", "world");
    int ro = open(at("a"), O_RDONLY | O_CLOEXEC);
    int src = open(at("b"), O_RDONLY | O_CLOEXEC);
    int zero = open("/dev/zero", O_RDONLY | O_CLOEXEC);
    cr_assert(ro >= 0 && src >= 0 && zero >= 0);

    struct rec r = {0};
    cr_assert_eq(tern_fs_write(loop, ro, "zz", 2, 0, NULL, rec_cb, &r, NULL), 0);
    wait_one(loop, &r);
    cr_assert_eq(r.status, -EBADF, "write: %s", tern_err_name(r.status));

    r = (struct rec){0};
    cr_assert_eq(tern_fs_ftruncate(loop, ro, 1, NULL, rec_cb, &r, NULL), 0);
    wait_one(loop, &r);
    cr_assert(r.status == -EINVAL || r.status == -EBADF, "ftruncate: %s",
              tern_err_name(r.status));

    /* Regular to regular: the kernel's copy refuses, and no buffer is tried. */
    r = (struct rec){0};
    cr_assert_eq(tern_fs_copy_range(loop, src, 0, ro, 0, 5, NULL, rec_cb, &r, NULL), 0);
    wait_one(loop, &r);
    cr_assert_eq(r.status, -EBADF, "kernel copy: %s", tern_err_name(r.status));

    /* From a device: the kernel cannot copy it, the buffer's write refuses. */
    r = (struct rec){0};
    cr_assert_eq(tern_fs_copy_range(loop, zero, 0, ro, 0, 5, NULL, rec_cb, &r, NULL), 0);
    wait_one(loop, &r);
    cr_assert_eq(r.status, -EBADF, "buffered copy: %s", tern_err_name(r.status));

    cr_assert_eq(size_of("a"), 5, "a refused request changed the size");
    char back[8] = {0};
    cr_assert_eq(pread(ro, back, sizeof back, 0), 5);
    cr_assert_str_eq(back, "hello", "a refused request changed the bytes");
    close(ro);
    close(src);
    close(zero);
    loop_free_clean(loop);
}

/* The file size limit, with SIGXFSZ ignored so the write returns EFBIG. */
#define LIMIT 65536

static void limit_file_size(void)
{
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl;
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &rl), 0);
    rl.rlim_cur = LIMIT;
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
}

/*
 * A copy that meets EFBIG after some bytes reports how far it got (the
 * bytes up to the limit), as a short write(2) does; the next copy from
 * there meets the error itself. Both ways: in the kernel (regular file to
 * regular file) and through the buffer (from /dev/zero).
 */
Test(fs_kernel_errors, a_copy_stopped_by_the_size_limit_counts_what_it_copied,
     .init = setup, .fini = teardown, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    int zero = open("/dev/zero", O_RDONLY | O_CLOEXEC);
    int big = open(at("big"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    cr_assert(zero >= 0 && big >= 0);
    static char block[3 * LIMIT];
    memset(block, 'x', sizeof block);
    cr_assert_eq(pwrite(big, block, sizeof block, 0), (ssize_t)sizeof block);
    limit_file_size();

    for (int kernel = 0; kernel < 2; kernel++) {
        int in = kernel ? big : zero;
        int out = open(at("copy"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        cr_assert_geq(out, 0);
        struct rec r = {0};
        cr_assert_eq(tern_fs_copy_range(loop, in, 0, out, 0, 2 * LIMIT, NULL, rec_cb, &r, NULL),
                     0);
        wait_one(loop, &r);
        cr_assert_eq(r.status, 0, "%s copy: %s", kernel ? "kernel" : "buffered",
                     tern_err_name(r.status));
        cr_assert_eq(r.value, LIMIT, "%s copy counted %lld bytes", kernel ? "kernel" : "buffered",
                     (long long)r.value);
        cr_assert_eq(size_of("copy"), LIMIT);

        r = (struct rec){0};
        cr_assert_eq(tern_fs_copy_range(loop, in, LIMIT, out, LIMIT, LIMIT, NULL, rec_cb, &r,
                                        NULL), 0);
        wait_one(loop, &r);
        cr_assert_eq(r.status, -EFBIG, "%s copy past the limit: %s",
                     kernel ? "kernel" : "buffered", tern_err_name(r.status));
        cr_assert_eq(size_of("copy"), LIMIT, "a refused copy grew the file");
        close(out);
    }
    close(zero);
    close(big);
    loop_free_clean(loop);
}

/* A whole-file write over the size limit fails with EFBIG and leaves the
 * old file as it was, with no temporary beside it (teardown checks). */
Test(fs_kernel_errors, write_file_over_the_size_limit_leaves_the_old_file,
     .init = setup, .fini = teardown, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    put("a", "old");
    limit_file_size();
    static char data[2 * LIMIT];
    memset(data, 'n', sizeof data);
    struct rec r = {0};
    cr_assert_eq(tern_fs_write_file(loop, at("a"), data, sizeof data, NULL, rec_cb, &r, NULL), 0);
    wait_one(loop, &r);
    cr_assert_eq(r.status, -EFBIG, "write_file: %s", tern_err_name(r.status));
    cr_assert_eq(size_of("a"), 3, "the old file changed");
    loop_free_clean(loop);
}

/* A copy of exactly the source's length copies all of it and stops. */
Test(fs_kernel_errors, a_copy_of_exactly_the_length_copies_it_all, .init = setup,
     .fini = teardown, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    put("a", "hello");
    int in = open(at("a"), O_RDONLY | O_CLOEXEC);
    int out = open(at("copy"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    cr_assert(in >= 0 && out >= 0);
    struct rec r = {0};
    cr_assert_eq(tern_fs_copy_range(loop, in, 0, out, 0, 5, NULL, rec_cb, &r, NULL), 0);
    wait_one(loop, &r);
    cr_assert_eq(r.status, 0);
    cr_assert_eq(r.value, 5);
    char back[8] = {0};
    cr_assert_eq(pread(out, back, sizeof back, 0), 5);
    cr_assert_str_eq(back, "hello");
    close(in);
    close(out);
    loop_free_clean(loop);
}

/* max_bytes 0: an empty file is read (0 bytes and the NUL); a one-byte
 * file is -EFBIG. */
Test(fs_kernel_errors, max_bytes_zero_reads_an_empty_file_and_refuses_one_byte,
     .init = setup, .fini = teardown, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    put("empty", "");
    put("a", "x");
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.max_bytes = 0;
    struct rec r = {0};
    cr_assert_eq(tern_fs_read_file(loop, at("empty"), &o, rec_cb, &r, NULL), 0);
    wait_one(loop, &r);
    cr_assert_eq(r.status, 0, "empty file: %s", tern_err_name(r.status));
    cr_assert_eq(r.value, 0);
    cr_assert_not_null(r.data);
    cr_assert_eq(((char *)r.data)[0], '\0');
    tern_fs_free(r.data);

    r = (struct rec){0};
    cr_assert_eq(tern_fs_read_file(loop, at("a"), &o, rec_cb, &r, NULL), 0);
    wait_one(loop, &r);
    cr_assert_eq(r.status, -EFBIG, "one byte: %s", tern_err_name(r.status));
    cr_assert_null(r.data);
    loop_free_clean(loop);
}

/* A directory of more entries than the listing's first array holds (16):
 * the array grows and every entry is listed, sorted. */
Test(fs_kernel_errors, a_listing_longer_than_its_first_array, .init = setup, .fini = teardown,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    enum { ENTRIES = 40 };
    char name[16];
    for (int i = 0; i < ENTRIES; i++) {
        snprintf(name, sizeof name, "e%02d", i);
        put(name, "");
    }
    struct rec r = {0};
    cr_assert_eq(tern_fs_list(loop, dir, NULL, rec_cb, &r, NULL), 0);
    wait_one(loop, &r);
    cr_assert_eq(r.status, 0, "list: %s", tern_err_name(r.status));
    cr_assert_eq(r.value, ENTRIES);
    cr_assert_eq(r.listing->count, ENTRIES);
    for (int i = 0; i < ENTRIES; i++) {
        snprintf(name, sizeof name, "e%02d", i);
        cr_assert_str_eq(r.listing->entries[i].name, name);
        cr_assert_eq(unlink(at(name)), 0);
    }
    tern_fs_free(r.listing);
    loop_free_clean(loop);
}

/* No limit at all (max_bytes past SSIZE_MAX) on a file that reports no
 * size: read to its end, the buffer grown as it goes. */
Test(fs_kernel_errors, an_unsized_file_read_without_a_limit, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.max_bytes = UINT64_MAX;
    o.step_bytes = 64; /* several reads, past the first buffer */
    struct rec r = {0};
    cr_assert_eq(tern_fs_read_file(loop, "/proc/self/status", &o, rec_cb, &r, NULL), 0);
    wait_one(loop, &r);
    cr_assert_eq(r.status, 0, "read_file: %s", tern_err_name(r.status));
    cr_assert_eq(r.st.st_size, 0, "/proc/self/status reports a size here");
    cr_assert_gt(r.value, 256);
    cr_assert_eq(strncmp(r.data, "Name:", 5), 0);
    cr_assert_eq(strlen(r.data), (size_t)r.value);
    tern_fs_free(r.data);
    loop_free_clean(loop);
}

/* A file whose reads the kernel refuses: /proc/self/mem is a sizeless
 * regular file, opened and stat'ed like any, whose read at offset 0 (an
 * address never mapped) fails with EIO. A whole-file read gets it, with
 * no data and the descriptor closed; so does a copy from it, which the
 * kernel cannot make (procfs) and the buffer's read meets, with nothing
 * written. */
Test(fs_kernel_errors, a_read_the_kernel_refuses_fails_the_request, .init = setup,
     .fini = teardown, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    int fds = count_open_fds();
    struct rec r = {0};
    cr_assert_eq(tern_fs_read_file(loop, "/proc/self/mem", NULL, rec_cb, &r, NULL), 0);
    wait_one(loop, &r);
    cr_assert_eq(r.status, -EIO, "read_file: %s", tern_err_name(r.status));
    cr_assert_null(r.data);
    cr_assert_eq(count_open_fds(), fds, "the descriptor was left open");

    put("copy", "");
    int mem = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
    int out = open(at("copy"), O_WRONLY | O_CLOEXEC);
    cr_assert(mem >= 0 && out >= 0);
    r = (struct rec){0};
    cr_assert_eq(tern_fs_copy_range(loop, mem, 0, out, 0, 5, NULL, rec_cb, &r, NULL), 0);
    wait_one(loop, &r);
    cr_assert_eq(r.status, -EIO, "copy: %s", tern_err_name(r.status));
    cr_assert_eq(size_of("copy"), 0, "a refused copy wrote");
    close(mem);
    close(out);
    loop_free_clean(loop);
}

/* A file directly in "/": its directory, fsync'ed after the rename, is "/". */
Test(fs_kernel_errors, write_file_in_the_root_directory, .timeout = TEST_TIMEOUT)
{
    char path[64];
    snprintf(path, sizeof path, "/tern_write_file_root.%ld", (long)getpid());
    int probe = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (probe < 0)
        cr_skip_test("cannot write in /: %s", strerror(errno));
    close(probe);
    tern_loop *loop = loop_new_tested();
    struct rec r = {0};
    cr_assert_eq(tern_fs_write_file(loop, path, "root", 4, NULL, rec_cb, &r, NULL), 0);
    wait_one(loop, &r);
    int status = r.status;
    char buf[8] = {0};
    FILE *f = fopen(path, "r");
    size_t n = f != NULL ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f != NULL)
        fclose(f);
    (void)unlink(path);
    cr_assert_eq(status, 0, "write_file: %s", tern_err_name(status));
    cr_assert_eq(n, 4);
    cr_assert_str_eq(buf, "root");
    loop_free_clean(loop);
}
