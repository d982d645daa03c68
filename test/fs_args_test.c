/*
 * File requests refuse what their "Requires:" lines name (tern/fs.h) at
 * the call, before anything is queued: each refused call returns its
 * documented errno, writes no id, never calls back and leaves nothing
 * live. A zero-length piece with no base is no error, and such a request
 * completes.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tern.h"
#include "tern/fs.h"
#include "tested_backend.h"

#define TEST_TIMEOUT 60

static int called;
static int last_status;
static void on_done(tern_loop *loop, tern_id id, int status, tern_fs_result *res, void *arg)
{
    (void)loop, (void)id, (void)res, (void)arg;
    called++;
    last_status = status;
}

static unsigned live(tern_loop *loop)
{
    tern_loop_stats s;
    tern_loop_stats_read(loop, &s, sizeof s);
    return s.live_operations;
}

static char buf[8];
static struct iovec hole[2] = {{.iov_base = buf, .iov_len = 1}, {.iov_base = NULL, .iov_len = 1}};
static struct iovec empty_piece[2] = {{.iov_base = buf, .iov_len = 1},
                                      {.iov_base = NULL, .iov_len = 0}};

/* X(name, documented errno, call with loop L and a readable and writable fd F). */
#define REFUSED_CALLS(X)                                                                         \
    X(readv_null_base, -EINVAL, tern_fs_readv(L, F, hole, 2, 0, NULL, on_done, NULL, &id))       \
    X(writev_null_base, -EINVAL, tern_fs_writev(L, F, hole, 2, 0, NULL, on_done, NULL, &id))     \
    X(copy_negative_in, -EINVAL,                                                                 \
      tern_fs_copy_range(L, F, -1, F, 0, 1, NULL, on_done, NULL, &id))                           \
    X(copy_negative_out, -EINVAL,                                                                \
      tern_fs_copy_range(L, F, 0, F, -1, 1, NULL, on_done, NULL, &id))                           \
    X(copy_too_long, -EINVAL,                                                                    \
      tern_fs_copy_range(L, F, 0, F, 0, (size_t)SSIZE_MAX + 1, NULL, on_done, NULL, &id))        \
    X(copy_bad_out, -EBADF, tern_fs_copy_range(L, F, 0, -1, 0, 1, NULL, on_done, NULL, &id))     \
    X(sendfile_negative, -EINVAL, tern_fs_sendfile(L, F, F, -1, 1, NULL, on_done, NULL, &id))   \
    X(write_file_too_long, -EINVAL,                                                              \
      tern_fs_write_file(L, path, buf, (size_t)SSIZE_MAX + 1, NULL, on_done, NULL, &id))         \
    X(write_file_no_data, -EINVAL,                                                               \
      tern_fs_write_file(L, path, NULL, 1, NULL, on_done, NULL, &id))                            \
    X(write_file_empty_path, -ENOENT, tern_fs_write_file(L, "", buf, 1, NULL, on_done, NULL, &id)) \
    X(write_file_dir_path, -EISDIR,                                                              \
      tern_fs_write_file(L, "/tmp/", buf, 1, NULL, on_done, NULL, &id))                          \
    X(read_no_cb, -EINVAL, tern_fs_read(L, F, buf, 1, 0, NULL, NULL, NULL, &id))                 \
    X(fsync_no_cb, -EINVAL, tern_fs_fsync(L, F, NULL, NULL, NULL, &id))

static char path[64];

struct call {
    const char *name;
    int expect;
    int (*call)(tern_loop *L, int F, tern_id *idp);
};

#define DEFINE_CALL(name, err, expr)                                                             \
    static int call_##name(tern_loop *L, int F, tern_id *idp)                                    \
    {                                                                                            \
        tern_id id = 0;                                                                          \
        (void)F;                                                                                 \
        int rc = (expr);                                                                         \
        *idp = id;                                                                               \
        return rc;                                                                               \
    }
REFUSED_CALLS(DEFINE_CALL)

#define ROW(name, err, expr) {#name, err, call_##name},
static const struct call calls[] = {REFUSED_CALLS(ROW)};

Test(fs_args, refused_at_the_call_and_nothing_queued, .timeout = TEST_TIMEOUT)
{
    snprintf(path, sizeof path, "/tmp/tern-fs-args-%d", (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "ab", 2), 2);

    tern_loop *loop = NULL;
    loop = loop_new_tested();
    unsigned before = live(loop);
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        tern_id id = 0;
        int rc = calls[i].call(loop, fd, &id);
        cr_expect_eq(rc, calls[i].expect, "%s returned %d, not %d", calls[i].name, rc,
                     calls[i].expect);
        cr_expect_eq(id, 0, "%s: refused, but an id was written", calls[i].name);
        cr_expect_eq(live(loop), before, "%s: refused, but an operation is live", calls[i].name);
    }
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(called, 0, "%d refused requests called back", called);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_size, 2, "a refused request changed the file");

    /* A zero-length piece without a base is accepted, and the read completes. */
    tern_id id = 0;
    cr_assert_eq(tern_fs_readv(loop, fd, empty_piece, 2, 0, NULL, on_done, NULL, &id), 0);
    cr_assert_neq(id, 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(called, 1);
    cr_assert_eq(last_status, 0);
    cr_assert_eq(buf[0], 'a');

    tern_loop_free(loop);
    close(fd);
    unlink(path);
}
