/*
 * The stat-polling watch (backends/watch_stat.c) at its edges, forced
 * where inotify is built (tern__set_watch_stat): a path that comes to
 * name another file (a rename over it) is a RENAME and the watch goes on;
 * a path the look can no longer follow for a reason other than removal
 * (a directory on it replaced by a file: -ENOTDIR) is the last callback,
 * with that status and no GONE; a watch whose path copy cannot be
 * allocated is refused with -ENOMEM and leaves nothing live; a directory
 * nothing touches is no news, and its mode changed is a CHANGE.
 */
#include "loop_helpers.h"

#include <inttypes.h>
#include <sys/stat.h>

__attribute__((constructor)) static void poll_with_stat(void)
{
    tern__set_watch_stat(true);
}

#define MAXEV 32

struct news {
    unsigned n;
    int status[MAXEV];
    unsigned events[MAXEV];
    tern_id id;
};

static void on_news(tern_loop *loop, tern_id id, int status, unsigned events, const char *name,
                    void *arg)
{
    (void)loop, (void)name;
    struct news *w = arg;
    cr_assert_eq(id, w->id);
    cr_assert_lt(w->n, MAXEV);
    w->status[w->n] = status;
    w->events[w->n] = events;
    w->n++;
}

/* Turn until at least `want` reports arrived. */
static bool wait_reports(tern_loop *loop, struct news *w, unsigned want)
{
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (w->n < want && mono_ns() < end)
        tern_loop_run_once(loop, 5 * (int64_t)MS);
    return w->n >= want;
}

static void tmpdir(char *buf, size_t len)
{
    snprintf(buf, len, "/tmp/tern-watch-stat-XXXXXX");
    cr_assert_not_null(mkdtemp(buf));
}

static void write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

Test(watch_stat_edges, the_source_is_stat)
{
    tern_loop *loop = loop_new_default();
    cr_assert_str_eq(tern__watch_source(loop), "stat");
    loop_free_clean(loop);
}

Test(watch_stat_edges, another_file_renamed_onto_the_path_is_a_rename, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    char dir[64], f[96], g[96];
    tmpdir(dir, sizeof dir);
    snprintf(f, sizeof f, "%s/f", dir);
    snprintf(g, sizeof g, "%s/g", dir);
    write_file(f, "x");
    write_file(g, "y"); /* made while f exists: another inode */
    struct news w = {0};
    cr_assert_eq(tern_watch_start(loop, f, 5 * MS, on_news, &w, &w.id), 0);
    cr_assert_eq(rename(g, f), 0);
    cr_assert(wait_reports(loop, &w, 1), "a file renamed onto the path was silent");
    cr_assert_eq(w.status[0], 0);
    cr_assert_eq(w.events[0], TERN_WATCH_RENAME, "events %#x", w.events[0]);
    /* Still watching: the path's new file, removed, ends it. */
    cr_assert_eq(unlink(f), 0);
    cr_assert(wait_reports(loop, &w, 2));
    cr_assert_eq(w.status[1], -ENOENT);
    cr_assert_eq(w.events[1], TERN_WATCH_GONE);
    cr_assert_eq(tern_watch_stop(loop, w.id), -ENOENT, "the watch outlived its last callback");
    cr_assert_eq(rmdir(dir), 0);
    loop_free_clean(loop);
}

Test(watch_stat_edges, a_path_that_stops_resolving_ends_with_its_error, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    char dir[64], sub[96], f[128], aside[96];
    tmpdir(dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s/sub", dir);
    snprintf(aside, sizeof aside, "%s/aside", dir);
    snprintf(f, sizeof f, "%s/f", sub);
    cr_assert_eq(mkdir(sub, 0755), 0);
    write_file(f, "x");
    struct news w = {0};
    cr_assert_eq(tern_watch_start(loop, f, 5 * MS, on_news, &w, &w.id), 0);
    /* sub/f now goes through a file: stat says ENOTDIR, not ENOENT. */
    cr_assert_eq(rename(sub, aside), 0);
    write_file(sub, "not a directory");
    cr_assert(wait_reports(loop, &w, 1), "a path that stopped resolving was silent");
    cr_assert_eq(w.n, 1, "%u reports", w.n);
    cr_assert_eq(w.status[0], -ENOTDIR, "status %d", w.status[0]);
    cr_assert_eq(w.events[0], 0u, "an error other than removal said %#x", w.events[0]);
    /* The last callback: nothing more, and the id is spent. */
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 5 * (int64_t)MS);
    cr_assert_eq(w.n, 1);
    cr_assert_eq(tern_watch_stop(loop, w.id), -ENOENT);
    cr_assert_eq(loop_live(loop), 0u);
    char af[128];
    snprintf(af, sizeof af, "%s/f", aside);
    cr_assert_eq(unlink(af), 0);
    cr_assert_eq(rmdir(aside), 0);
    cr_assert_eq(unlink(sub), 0);
    cr_assert_eq(rmdir(dir), 0);
    loop_free_clean(loop);
}

/* Looks at a directory nothing touches are no news; a mode change is a
 * CHANGE, not a RENAME (only entries coming and going are). */
Test(watch_stat_edges, a_quiet_directory_is_no_news_until_its_mode_changes,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    char dir[64];
    tmpdir(dir, sizeof dir);
    struct news w = {0};
    cr_assert_eq(tern_watch_start(loop, dir, 2 * MS, on_news, &w, &w.id), 0);
    uint64_t end = mono_ns() + 60 * MS;
    while (mono_ns() < end)
        tern_loop_run_once(loop, 5 * (int64_t)MS);
    cr_assert_eq(w.n, 0u, "a directory nothing touched reported %#x", w.events[0]);
    cr_assert_eq(chmod(dir, 0750), 0);
    cr_assert(wait_reports(loop, &w, 1), "a directory's mode change was silent");
    cr_assert_eq(w.status[0], 0);
    cr_assert_eq(w.events[0], TERN_WATCH_CHANGE, "events %#x", w.events[0]);
    cr_assert_eq(tern_watch_stop(loop, w.id), 0);
    cr_assert_eq(rmdir(dir), 0);
    loop_free_clean(loop);
}

/* Every allocation of a start fails in turn: -ENOMEM, no callback, nothing
 * live; the walk ends with a start that succeeds. */
Test(watch_stat_edges, a_start_out_of_memory_at_any_step_leaves_nothing,
     .timeout = TEST_TIMEOUT)
{
    char dir[64];
    tmpdir(dir, sizeof dir);
    bool done = false;
    for (uint64_t n = 1; n < 64 && !done; n++) {
        tern_loop *loop = loop_new_default();
        struct news w = {0};
        tern__fault_arm(TERN__FAULT_ALLOC, n);
        int rc = tern_watch_start(loop, dir, 5 * MS, on_news, &w, &w.id);
        bool fired = tern__fault_fired();
        tern__fault_arm(0, 0);
        if (fired) {
            cr_assert_eq(rc, -ENOMEM, "allocation %" PRIu64 ": %d", n, rc);
            cr_assert_eq(loop_live(loop), 0u);
        } else {
            cr_assert_eq(rc, 0);
            cr_assert_eq(tern_watch_stop(loop, w.id), 0);
            done = true;
        }
        tern_loop_run_once(loop, 0);
        cr_assert_eq(w.n, 0u);
        loop_free_clean(loop);
    }
    cr_assert(done, "the walk never reached a start that succeeds");
    cr_assert_eq(rmdir(dir), 0);
}
