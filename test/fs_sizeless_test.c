/*
 * Whole-file requests at their edges (tern/fs.h): a file whose size fstat
 * reports as 0 (/proc) is read up to its end, byte for byte what a plain
 * read gives, through as many steps as it takes; such a file longer than
 * max_bytes is -EFBIG with no data; a step that cannot grow the buffer is
 * -ENOMEM. With no limit (max_bytes UINT64_MAX) such a file longer than
 * the first buffer (/proc/kallsyms) is read to its end, and a sparse file
 * of SSIZE_MAX bytes (tmpfs) is -EFBIG.
 * tern_fs_write_file with a path that names no directory writes in the
 * working directory.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tern.h"
#include "tern/fs.h"
#include "pool_helpers.h"
#include "testing.h"
#include "tested_backend.h"

#define TEST_TIMEOUT 60

/* A /proc file whose content stays put while the test reads it twice
 * (not cmdline: valgrind serves that one from a regular file of its own). */
#define SIZELESS "/proc/self/environ"

static int status = 1;
static size_t got_len;
static char got[65536];
static void *got_data;

static void on_read(tern_loop *loop, tern_id id, int st, tern_fs_result *res, void *arg)
{
    (void)loop, (void)id, (void)arg;
    status = st;
    got_data = res != NULL ? res->data : NULL;
    if (st == 0) {
        got_len = (size_t)res->value;
        cr_assert_lt(got_len, sizeof got);
        memcpy(got, res->data, got_len);
        cr_assert_eq(((char *)res->data)[got_len], '\0', "no NUL after the data");
        tern_fs_free(res->data);
    }
}

static size_t plain_read(const char *path, char *out, size_t cap)
{
    int fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0);
    size_t len = 0;
    ssize_t n;
    while ((n = read(fd, out + len, cap - len)) > 0)
        len += (size_t)n;
    close(fd);
    return len;
}

static int read_file(uint64_t max_bytes, size_t step)
{
    tern_loop *loop = NULL;
    loop = loop_new_tested();
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.max_bytes = max_bytes;
    o.step_bytes = step;
    status = 1;
    cr_assert_eq(tern_fs_read_file(loop, SIZELESS, &o, on_read, NULL, NULL), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    tern_loop_free(loop);
    return status;
}

Test(fs_sizeless, a_proc_file_is_read_to_its_end, .timeout = TEST_TIMEOUT)
{
    static char want[65536];
    size_t want_len = plain_read(SIZELESS, want, sizeof want);
    cr_assert_gt(want_len, 4, "the test needs a few bytes to read");
    /* Small steps: the buffer grows several times. */
    cr_assert_eq(read_file(UINT64_C(1) << 20, 3), 0);
    cr_assert_eq(got_len, want_len, "read %zu bytes, a plain read %zu", got_len, want_len);
    cr_assert_eq(memcmp(got, want, want_len), 0);
}

Test(fs_sizeless, longer_than_max_bytes_is_efbig, .timeout = TEST_TIMEOUT)
{
    static char want[65536];
    size_t want_len = plain_read(SIZELESS, want, sizeof want);
    cr_assert_gt(want_len, 4);
    cr_assert_eq(read_file(want_len - 2, 3), -EFBIG);
    /* Exactly max_bytes long is no error. */
    cr_assert_eq(read_file(want_len, 3), 0);
    cr_assert_eq(got_len, want_len);
}

/* No limit at all (max_bytes beyond what a read can return), and a file
 * longer than the first buffer (64 KiB): the buffer grows, uncapped, to
 * the end of the file. */
#define LONG_SIZELESS "/proc/kallsyms"

static void on_long_read(tern_loop *loop, tern_id id, int st, tern_fs_result *res, void *arg)
{
    (void)loop, (void)id;
    status = st;
    if (st == 0) {
        got_len = (size_t)res->value;
        *(void **)arg = res->data;
    }
}

Test(fs_sizeless, with_no_limit_a_long_proc_file_is_read_to_its_end, .timeout = TEST_TIMEOUT)
{
    size_t cap = (size_t)64 << 20;
    char *want = malloc(cap);
    cr_assert_not_null(want);
    int fd = open(LONG_SIZELESS, O_RDONLY);
    if (fd < 0) {
        free(want);
        cr_skip_test("no " LONG_SIZELESS " here");
    }
    close(fd);
    size_t want_len = plain_read(LONG_SIZELESS, want, cap);
    if (want_len <= 65536 || want_len == cap) {
        free(want);
        cr_skip_test(LONG_SIZELESS " is not between 64 KiB and 64 MiB here");
    }
    tern_loop *loop = NULL;
    loop = loop_new_tested();
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.max_bytes = UINT64_MAX;
    void *data = NULL;
    status = 1;
    cr_assert_eq(tern_fs_read_file(loop, LONG_SIZELESS, &o, on_long_read, &data, NULL), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    tern_loop_free(loop);
    cr_assert_eq(status, 0, "status %d", status);
    cr_assert_eq(got_len, want_len, "read %zu bytes, a plain read %zu", got_len, want_len);
    cr_assert_eq(memcmp(data, want, want_len), 0);
    tern_fs_free(data);
    free(want);
}

/* A sparse file as long as a file can be (tmpfs takes SSIZE_MAX bytes):
 * -EFBIG even with no limit, since no read could return it whole. */
Test(fs_sizeless, a_file_longer_than_any_read_is_efbig_even_with_no_limit,
     .timeout = TEST_TIMEOUT)
{
    char path[64];
    snprintf(path, sizeof path, "/dev/shm/tern-fs-huge-%d", (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        cr_skip_test("no /dev/shm here");
    int rc = ftruncate(fd, (off_t)SSIZE_MAX);
    close(fd);
    if (rc != 0) {
        unlink(path);
        cr_skip_test("this file system will not make a file of SSIZE_MAX bytes");
    }
    tern_loop *loop = NULL;
    loop = loop_new_tested();
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.max_bytes = UINT64_MAX;
    status = 1;
    got_data = (void *)1;
    cr_assert_eq(tern_fs_read_file(loop, path, &o, on_read, NULL, NULL), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    tern_loop_free(loop);
    unlink(path);
    cr_assert_eq(status, -EFBIG, "status %d", status);
    cr_assert_null(got_data, "a refused read handed over data");
}

Test(fs_sizeless, a_buffer_that_cannot_grow_is_enomem, .timeout = TEST_TIMEOUT)
{
    static char want[65536];
    size_t want_len = plain_read(SIZELESS, want, sizeof want);
    cr_assert_gt(want_len, 4);
    /* One bounded worker, held on a gate, so no step of the request runs
     * before the fault is armed: the steps pass from worker to worker
     * through the queue, never through the loop. */
    tern_pool_config cfg = ph_config(1, 16, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = NULL;
    loop = loop_new_tested();
    ph_gate gate;
    ph_job hold;
    ph_gate_init(&gate);
    ph_job_init(&hold, &gate);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &hold), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));

    /* The buffer starts at max_bytes (the file's length) and must grow by
     * one byte to see the end of the file. */
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.max_bytes = want_len;
    o.step_bytes = 1;
    status = 1;
    cr_assert_eq(tern_fs_read_file(loop, SIZELESS, &o, on_read, NULL, NULL), 0);
    /* The request's own record was allocated at the call. From here the
     * first checked allocation is the buffer (the fstat step), the second
     * its growth. */
    tern__fault_arm(TERN__FAULT_ALLOC, 2);
    ph_gate_open(&gate);
    cr_assert_eq(tern_loop_run(loop), 0);
    bool fired = tern__fault_fired();
    tern__fault_arm(0, 0);
    cr_assert(fired, "the buffer never grew");
    cr_assert_eq(status, -ENOMEM, "status %d", status);
    cr_assert_null(got_data, "a failed read handed over data");
    tern_loop_free(loop);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
    ph_gate_destroy(&gate);
}

static int wrote = 1;
static void on_write(tern_loop *loop, tern_id id, int st, tern_fs_result *res, void *arg)
{
    (void)loop, (void)id, (void)res, (void)arg;
    wrote = st;
}

Test(fs_sizeless, a_bare_name_is_written_in_the_working_directory, .timeout = TEST_TIMEOUT)
{
    char name[64];
    snprintf(name, sizeof name, "tern-fs-bare-%d", (int)getpid());
    tern_loop *loop = NULL;
    loop = loop_new_tested();
    cr_assert_eq(tern_fs_write_file(loop, name, "hello", 5, NULL, on_write, NULL, NULL), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    tern_loop_free(loop);
    cr_assert_eq(wrote, 0, "status %d", wrote);
    char back[16];
    size_t n = plain_read(name, back, sizeof back);
    unlink(name);
    cr_assert_eq(n, 5);
    cr_assert_eq(memcmp(back, "hello", 5), 0);
}
