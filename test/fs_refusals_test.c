/*
 * File requests when the kernel lacks or refuses one of their calls
 * (runtime/fs/fs_calls.c): each test installs a seccomp filter on every
 * thread of its process (criterion runs every test in a process of its
 * own), the pool's workers among them. Checked: a copy on a kernel without copy_file_range
 * (ENOSYS), or that cannot copy the pair in the kernel (EOPNOTSUPP,
 * EINVAL), copies through a buffer, all of it; with no memory for that
 * buffer the copy is -ENOMEM with nothing written; a close interrupted
 * by a signal counts as done (the descriptor is released on Linux); a
 * directory that cannot be opened as a stream refuses the listing.
 */
#include "fs_helpers.h"
#include "seccomp_helpers.h"
#include "tested_backend.h"

#include <stddef.h>
#include <sys/stat.h>

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/tern_fs_refusals.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    (void)system(cmd);
}

static void wait_one(tern_loop *loop, struct rec *r)
{
    cr_assert(run_until_count(loop, &r->n, 1, 10 * (int64_t)MS, 2000), "no callback");
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(atomic_load(&r->n), 1, "the callback ran %u times", atomic_load(&r->n));
}

static const char text[] = "copied through a buffer when the kernel will not";

/* Copy all of "a" to "b" at offset 3; the callback's status. */
static int copy_a_to_b(tern_loop *loop, int64_t *copied)
{
    int in = open(at("a"), O_RDONLY | O_CLOEXEC);
    int out = open(at("b"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    cr_assert(in >= 0 && out >= 0);
    struct rec r = {0};
    int rc = tern_fs_copy_range(loop, in, 0, out, 3, sizeof text - 1, NULL, rec_cb, &r, NULL);
    if (rc == 0) {
        wait_one(loop, &r);
        rc = r.status;
        *copied = r.value;
    }
    close(in);
    close(out);
    return rc;
}

static void assert_b_holds_the_copy(void)
{
    char buf[128] = {0};
    FILE *f = fopen(at("b"), "r");
    cr_assert_not_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    cr_assert_eq(n, 3 + sizeof text - 1);
    cr_assert_eq(memcmp(buf, "\0\0\0", 3), 0);
    cr_assert_str_eq(buf + 3, text);
}

static void copy_through_a_buffer(int err)
{
    tern_loop *loop = loop_new_tested();
    put("a", text);
    refuse_when(SYS_copy_file_range, ANY_ARG, 0, err, EVERY_THREAD);
    int64_t copied = -1;
    cr_assert_eq(copy_a_to_b(loop, &copied), 0);
    cr_assert_eq(copied, (int64_t)sizeof text - 1);
    assert_b_holds_the_copy();
    loop_free_clean(loop);
}

Test(fs_refusals, a_kernel_without_copy_file_range, .init = setup, .fini = teardown,
     .timeout = TEST_TIMEOUT)
{
    copy_through_a_buffer(ENOSYS);
}

Test(fs_refusals, a_pair_the_kernel_cannot_copy, .init = setup, .fini = teardown,
     .timeout = TEST_TIMEOUT)
{
    copy_through_a_buffer(EOPNOTSUPP);
}

Test(fs_refusals, a_pair_the_kernel_calls_invalid, .init = setup, .fini = teardown,
     .timeout = TEST_TIMEOUT)
{
    copy_through_a_buffer(EINVAL);
}

/* Every allocation of the copy fails in turn: one of them is the buffer's,
 * which ends the copy with -ENOMEM before a byte is written. */
Test(fs_refusals, no_memory_for_the_copy_buffer, .init = setup, .fini = teardown,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    put("a", text);
    refuse_when(SYS_copy_file_range, ANY_ARG, 0, ENOSYS, EVERY_THREAD);
    int64_t copied = -1;
    cr_assert_eq(copy_a_to_b(loop, &copied), 0); /* the pool is running before the walk */
    unsigned in_the_worker = 0;
    for (uint64_t n = 1; n < 50; n++) {
        tern__fault_arm(TERN__FAULT_ALLOC, n);
        copied = -1;
        int rc = copy_a_to_b(loop, &copied);
        bool fired = tern__fault_fired();
        tern__fault_arm(0, 0);
        if (!fired) {
            cr_assert_eq(rc, 0);
            assert_b_holds_the_copy();
            break;
        }
        cr_assert_eq(rc, -ENOMEM, "allocation %llu: %s", (unsigned long long)n,
                     tern_err_name(rc));
        cr_assert_eq(size_of("b"), 0, "a copy refused for memory wrote something");
        in_the_worker += copied == -1 ? 0 : 1;
    }
    cr_assert_gt(in_the_worker, 0, "no allocation of the copy's own failed");
    loop_free_clean(loop);
}

/* close(2) interrupted: on Linux the descriptor is released anyway, so the
 * request reports success rather than invite a second close. */
Test(fs_refusals, an_interrupted_close_is_a_close, .init = setup, .fini = teardown,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    int fd = open(at("a"), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    cr_assert_geq(fd, 0);
    /* Refused for this descriptor only, so it stays open (in this test
     * process, which ends with the test). */
    refuse_when(SYS_close, 0, (uint32_t)fd, EINTR, EVERY_THREAD);
    struct rec r = {0};
    cr_assert_eq(tern_fs_close(loop, fd, NULL, rec_cb, &r, NULL), 0);
    wait_one(loop, &r);
    cr_assert_eq(r.status, 0, "close: %s", tern_err_name(r.status));
    loop_free_clean(loop);
}

/*
 * The directory opens, but no stream can be made over it (fdopendir
 * fails: its fcntl on the new descriptor is refused): the listing is
 * refused with that error and the descriptor closed. The refusal names
 * the descriptor the worker's open gets (the lowest free one), so the
 * rest of the process (the coverage writer's fdopen at exit among it)
 * is untouched once a file of the test's own holds that number again.
 */
Test(fs_refusals, a_directory_that_cannot_be_read_as_a_stream, .init = setup, .fini = teardown,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    put("a", "x");
    struct rec r = {0};
    cr_assert_eq(tern_fs_stat(loop, dir, NULL, rec_cb, &r, NULL), 0); /* the pool starts */
    wait_one(loop, &r);
    int k = dup(0);
    cr_assert_geq(k, 0);
    close(k);
    refuse_when(SYS_fcntl, 0, (uint32_t)k, EBADF, EVERY_THREAD);
    r = (struct rec){0};
    cr_assert_eq(tern_fs_list(loop, dir, NULL, rec_cb, &r, NULL), 0);
    wait_one(loop, &r);
    cr_assert_eq(r.status, -EBADF, "list: %s", tern_err_name(r.status));
    cr_assert_null(r.listing);
    cr_assert_eq(open("/dev/null", O_RDONLY | O_CLOEXEC), k, "the directory was left open");
    loop_free_clean(loop);
}
