/*
 * tern_fs_read_file refuses a FIFO without opening it (include/tern/fs.h):
 * an open for reading counts as the FIFO's reader, and lets a writer that
 * waits in its own open(2) through to a first write that fails with EPIPE
 * once the request has closed the FIFO again. Whether the request opened
 * the FIFO at all is what the test asks, through inotify, which queues an
 * IN_OPEN for every successful open of the path before open(2) returns:
 * no waiting writer and no timing is needed to see it.
 */
#include "fs_helpers.h"
#include "tested_backend.h"

#include <sys/inotify.h>

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/tern_fs_fifo.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
    (void)unlink(at("fifo"));
    cr_assert_eq(rmdir(dir), 0, "the scratch directory is not empty");
}

TestSuite(fs_fifo, .init = setup, .fini = teardown, .timeout = TEST_TIMEOUT);

Test(fs_fifo, read_file_refuses_a_fifo_without_opening_it)
{
    cr_assert_eq(mkfifo(at("fifo"), 0600), 0);
    int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    cr_assert_geq(in, 0);
    cr_assert_geq(inotify_add_watch(in, at("fifo"), IN_OPEN | IN_CLOSE), 0);

    tern_loop *loop = loop_new_tested();
    struct rec r = {0};
    cr_assert_eq(tern_fs_read_file(loop, at("fifo"), NULL, rec_cb, &r, NULL), 0);
    cr_assert(run_until_count(loop, &r.n, 1, 10 * (int64_t)MS, 2000), "no callback");
    cr_assert_eq(r.status, -ENOTSUP, "%s", tern_err_name(r.status));
    cr_assert_null(r.data);

    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    ssize_t n = read(in, buf, sizeof buf);
    cr_assert(n < 0 && errno == EAGAIN,
              "the request opened the FIFO (an open lets a waiting writer through)");
    close(in);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}
