/*
 * An inotify watch's own failures, and a callback that stops its watch in
 * the middle of a batch of news (runtime/kinds/watch.c). Each test runs on a
 * loop whose watches use inotify (skipped elsewhere) and, where the
 * kernel must refuse a call, installs a seccomp filter in its own process
 * (criterion runs every test in a process of its own). Checked: a read of
 * the inotify descriptor that fails for a cause other than "nothing yet"
 * ends the watch with that error, once, and closes the descriptor; an
 * inotify instance that cannot be made refuses the start and leaves
 * nothing; a callback that stops the watch hears nothing more, even of
 * news already read in the same batch.
 */
#include "loop_helpers.h"
#include "seccomp_helpers.h"

#include <stddef.h>
#include <sys/stat.h>

static char dir[64];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/tern_watch_inotify.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    (void)system(cmd);
}

static tern_loop *inotify_loop(void)
{
    tern_loop *loop = loop_new_default();
    if (strcmp(tern__watch_source(loop), "inotify") != 0) {
        tern_loop_free(loop);
        cr_skip_test("this loop's watches do not use inotify");
    }
    return loop;
}

static void touch(const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    cr_assert_geq(fd, 0);
    close(fd);
}

struct news {
    atomic_uint n;
    int status;
    unsigned events;
    bool stop; /* the callback stops the watch */
};

static void on_news(tern_loop *loop, tern_id id, int status, unsigned events, const char *name,
                    void *arg)
{
    (void)name;
    struct news *w = arg;
    w->status = status;
    w->events = events;
    atomic_fetch_add(&w->n, 1);
    if (w->stop)
        cr_assert_eq(tern_watch_stop(loop, id), 0);
}

Test(watch_inotify, a_read_error_ends_the_watch_once, .init = setup, .fini = teardown,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = inotify_loop();
    int fds = count_open_fds();
    int k = dup(0); /* the lowest free descriptor: the watch's inotify instance gets it */
    cr_assert_geq(k, 0);
    close(k);
    struct news w = {0};
    tern_id id;
    cr_assert_eq(tern_watch_start(loop, dir, 0, on_news, &w, &id), 0);
    char link[64], target[64] = {0};
    snprintf(link, sizeof link, "/proc/self/fd/%d", k);
    cr_assert_gt(readlink(link, target, sizeof target - 1), 0);
    cr_assert_str_eq(target, "anon_inode:inotify");
    refuse_when(SYS_read, 0, (uint32_t)k, EIO, THIS_THREAD);
    touch("a");
    cr_assert(run_until_count(loop, &w.n, 1, 10 * (int64_t)MS, 2000), "no callback");
    cr_assert_eq(w.status, -EIO);
    cr_assert_eq(w.events, 0);
    touch("b");
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 2 * (int64_t)MS);
    cr_assert_eq(atomic_load(&w.n), 1, "news after the last callback");
    cr_assert_eq(tern_watch_stop(loop, id), -ENOENT);
    cr_assert_eq(count_open_fds(), fds, "the inotify descriptor was left open");
    /* Hold the number again, so reads elsewhere in this process (the
     * coverage writer's at exit) never meet the refusal. */
    cr_assert_eq(open("/dev/null", O_RDONLY | O_CLOEXEC), k);
    loop_free_clean(loop);
}

Test(watch_inotify, no_inotify_instance_refuses_the_start, .init = setup, .fini = teardown,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = inotify_loop();
    int fds = count_open_fds();
    refuse(SYS_inotify_init1, EMFILE);
    struct news w = {0};
    tern_id id = 0;
    cr_assert_eq(tern_watch_start(loop, dir, 0, on_news, &w, &id), -EMFILE);
    cr_assert_eq(id, 0);
    cr_assert_eq(loop_live(loop), 0);
    cr_assert_eq(count_open_fds(), fds);
    loop_free_clean(loop);
}

/* Three entries made before the loop turns: one read brings all three,
 * and the callback that stops the watch at the first hears no more. */
Test(watch_inotify, stopped_in_its_callback_hears_no_more_of_the_batch, .init = setup,
     .fini = teardown, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = inotify_loop();
    struct news w = {.stop = true};
    tern_id id;
    cr_assert_eq(tern_watch_start(loop, dir, 0, on_news, &w, &id), 0);
    touch("a");
    touch("b");
    touch("c");
    cr_assert(run_until_count(loop, &w.n, 1, 10 * (int64_t)MS, 2000), "no callback");
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 2 * (int64_t)MS);
    cr_assert_eq(atomic_load(&w.n), 1, "news after the watch was stopped");
    cr_assert_eq(w.status, 0);
    loop_free_clean(loop);
}
