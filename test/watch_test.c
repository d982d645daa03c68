/*
 * File watches (tern_watch_start/stop): a directory's entries created,
 * written, renamed and removed, and the directory itself removed (the
 * documented last callback: -ENOENT, TERN_WATCH_GONE, once); a file
 * written, renamed and removed; stop and teardown end a watch without a
 * callback and close what it opened; bad input; a file with two links
 * is gone only with the last. Every backend; the names and the
 * in-directory writes are checked where the source reports them
 * (inotify), following a renamed file where it does (inotify and kqueue's
 * EVFILT_VNODE), not under stat polling (see docs/process.md). A kqueue
 * loop watches through EVFILT_VNODE.
 */
#include "loop_helpers.h"

#include <sys/stat.h>

/* The "stat" run (test/meson.build) polls with stat where inotify is built,
 * so the portable mechanism runs in every build, not only -Dportable. */
static bool stat_forced;
__attribute__((constructor)) static void watch_source_from_env(void)
{
    const char *v = getenv("TERN_TEST_WATCH_STAT");
    stat_forced = v != NULL && strcmp(v, "1") == 0;
    if (stat_forced)
        tern__set_watch_stat(true);
}

#define MAXEV 64

struct news {
    bool names; /* the source names entries (inotify) */
    unsigned n;
    int status[MAXEV];
    unsigned events[MAXEV];
    char name[MAXEV][64];
    tern_id id;
    atomic_uint count;
};

static void on_news(tern_loop *loop, tern_id id, int status, unsigned events, const char *name,
                    void *arg)
{
    (void)loop;
    struct news *w = arg;
    cr_assert_eq(id, w->id);
    if (w->n < MAXEV) {
        w->status[w->n] = status;
        w->events[w->n] = events;
        snprintf(w->name[w->n], sizeof w->name[0], "%s", name != NULL ? name : "");
        w->n++;
    }
    atomic_fetch_add(&w->count, 1);
}

/* Whether watches on this loop report names (inotify) / follow the file
 * rather than the path (inotify, EVFILT_VNODE). */
static bool source_names(tern_loop *loop)
{
    return strcmp(tern__watch_source(loop), "inotify") == 0;
}

static bool source_follows(tern_loop *loop)
{
    return strcmp(tern__watch_source(loop), "stat") != 0;
}

static int watch(tern_loop *loop, const char *path, struct news *w)
{
    w->names = source_names(loop);
    return tern_watch_start(loop, path, 10 * MS, on_news, w, &w->id);
}

/* Turn until a report with all of `events` (and, where names are known,
 * this name) arrived after index *from; *from moves past it. */
static bool wait_news(tern_loop *loop, struct news *w, unsigned *from, unsigned events,
                      const char *name)
{
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (mono_ns() < end) {
        for (; *from < w->n; (*from)++) {
            if ((w->events[*from] & events) == events &&
                (name == NULL || !w->names || strcmp(w->name[*from], name) == 0)) {
                (*from)++;
                return true;
            }
        }
        tern_loop_run_once(loop, 5 * (int64_t)MS);
    }
    return false;
}

static void tmpdir(char *buf, size_t len)
{
    snprintf(buf, len, "/tmp/tern-watch-XXXXXX");
    cr_assert_not_null(mkdtemp(buf));
}

/* Stat polling sees a change only once the clock the file system stamps
 * with has moved past its last look; a pause before each step lets it. */
static void settle(void)
{
    sleep_ns(25 * MS);
}

static void write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

BACKEND_TEST(watch, directory_entries_and_removal)
{
    tern_loop *loop = loop_new_backend(backend);
    char dir[64], a[96], b[96];
    tmpdir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    struct news w = {0};
    cr_assert_eq(watch(loop, dir, &w), 0);
    unsigned at = 0;

    settle();
    write_file(a, "");
    cr_assert(wait_news(loop, &w, &at, TERN_WATCH_RENAME, "a"), "no news of a created entry");
    if (w.names) {
        settle();
        write_file(a, "more");
        cr_assert(wait_news(loop, &w, &at, TERN_WATCH_CHANGE, "a"), "no news of a write");
    }
    settle();
    cr_assert_eq(rename(a, b), 0);
    cr_assert(wait_news(loop, &w, &at, TERN_WATCH_RENAME, "b"), "no news of a rename");
    settle();
    cr_assert_eq(unlink(b), 0);
    cr_assert(wait_news(loop, &w, &at, TERN_WATCH_RENAME, "b"), "no news of a removal");
    settle();
    cr_assert_eq(rmdir(dir), 0);
    if (backend_is_libkqueue(backend)) {
        /* libkqueue's EVFILT_VNODE is inotify on the path; the kernel says
         * IN_DELETE_SELF only once the descriptor tern holds is closed, so
         * it never reports the directory's removal (docs/testing.md). */
        cr_assert_eq(tern_watch_stop(loop, w.id), 0);
        loop_free_clean(loop);
        return;
    }
    cr_assert(wait_news(loop, &w, &at, TERN_WATCH_GONE, NULL), "removing the directory was silent");
    cr_assert_eq(w.status[at - 1], -ENOENT);
    cr_assert_eq(at, w.n, "news after the last callback");
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 5 * (int64_t)MS);
    cr_assert_eq(atomic_load(&w.count), w.n);
    cr_assert_eq(tern_watch_stop(loop, w.id), -ENOENT, "the watch ended with its last callback");
    loop_free_clean(loop);
}

BACKEND_TEST(watch, file_written_and_removed)
{
    tern_loop *loop = loop_new_backend(backend);
    char dir[64], f[96];
    tmpdir(dir, sizeof dir);
    snprintf(f, sizeof f, "%s/f", dir);
    write_file(f, "x");
    struct news w = {0};
    cr_assert_eq(watch(loop, f, &w), 0);
    unsigned at = 0;
    settle();
    write_file(f, "more");
    cr_assert(wait_news(loop, &w, &at, TERN_WATCH_CHANGE, NULL), "no news of a write");
    settle();
    cr_assert_eq(unlink(f), 0);
    cr_assert(wait_news(loop, &w, &at, TERN_WATCH_GONE, NULL), "removing the file was silent");
    cr_assert_eq(w.status[at - 1], -ENOENT);
    cr_assert_eq(loop_live(loop), 0);
    cr_assert_eq(rmdir(dir), 0);
    loop_free_clean(loop);
}

/*
 * What changes a file's or a directory's attributes but not its data is
 * news too: a mode, a second link, a directory's mode. Each mechanism
 * reports it as a change (inotify's IN_ATTRIB, EVFILT_VNODE's
 * NOTE_ATTRIB/NOTE_LINK, stat's ctime, mode and link count).
 */
BACKEND_TEST(watch, attributes_and_links_are_news)
{
    tern_loop *loop = loop_new_backend(backend);
    char dir[64], f[96], l[96];
    tmpdir(dir, sizeof dir);
    snprintf(f, sizeof f, "%s/f", dir);
    snprintf(l, sizeof l, "%s/l", dir);
    write_file(f, "x");
    struct news w = {0};
    cr_assert_eq(watch(loop, f, &w), 0);
    unsigned at = 0;
    settle();
    cr_assert_eq(chmod(f, 0600), 0);
    cr_assert(wait_news(loop, &w, &at, TERN_WATCH_CHANGE, NULL), "a mode change was silent");
    settle();
    cr_assert_eq(link(f, l), 0);
    cr_assert(wait_news(loop, &w, &at, TERN_WATCH_CHANGE, NULL), "a second link was silent");
    cr_assert_eq(tern_watch_stop(loop, w.id), 0);

    struct news d = {0};
    cr_assert_eq(watch(loop, dir, &d), 0);
    at = 0;
    settle();
    cr_assert_eq(chmod(dir, 0750), 0);
    cr_assert(wait_news(loop, &d, &at, TERN_WATCH_CHANGE, NULL), "a directory's mode was silent");
    cr_assert_eq(tern_watch_stop(loop, d.id), 0);
    cr_assert_eq(unlink(l), 0);
    cr_assert_eq(unlink(f), 0);
    cr_assert_eq(rmdir(dir), 0);
    loop_free_clean(loop);
}

BACKEND_TEST(watch, file_renamed)
{
    tern_loop *loop = loop_new_backend(backend);
    char dir[64], f[96], g[96];
    tmpdir(dir, sizeof dir);
    snprintf(f, sizeof f, "%s/f", dir);
    snprintf(g, sizeof g, "%s/g", dir);
    write_file(f, "x");
    struct news w = {0};
    cr_assert_eq(watch(loop, f, &w), 0);
    unsigned at = 0;
    settle();
    cr_assert_eq(rename(f, g), 0);
    /* inotify and EVFILT_VNODE follow the file (RENAME, and on); polling
     * follows the path (GONE). */
    bool follows = source_follows(loop);
    cr_assert(wait_news(loop, &w, &at, follows ? TERN_WATCH_RENAME : TERN_WATCH_GONE, NULL));
    if (follows) {
        settle();
        write_file(g, "more");
        cr_assert(wait_news(loop, &w, &at, TERN_WATCH_CHANGE, NULL),
                  "no news of a write under the new name");
        cr_assert_eq(tern_watch_stop(loop, w.id), 0);
    }
    cr_assert_eq(unlink(g), 0);
    cr_assert_eq(rmdir(dir), 0);
    loop_free_clean(loop);
}

BACKEND_TEST(watch, gone_with_the_last_link)
{
    tern_loop *loop = loop_new_backend(backend);
    char dir[64], f[96], g[96];
    tmpdir(dir, sizeof dir);
    snprintf(f, sizeof f, "%s/f", dir);
    snprintf(g, sizeof g, "%s/g", dir);
    write_file(f, "x");
    cr_assert_eq(link(f, g), 0);
    struct news w = {0};
    cr_assert_eq(watch(loop, f, &w), 0);
    unsigned at = 0;
    settle();
    cr_assert_eq(unlink(g), 0);
    cr_assert(wait_news(loop, &w, &at, TERN_WATCH_CHANGE, NULL), "a link removed was silent");
    for (unsigned i = 0; i < w.n; i++)
        cr_assert_eq(w.status[i], 0, "gone while a link was left");
    settle();
    cr_assert_eq(unlink(f), 0);
    cr_assert(wait_news(loop, &w, &at, TERN_WATCH_GONE, NULL), "removing the last link was silent");
    cr_assert_eq(w.status[at - 1], -ENOENT);
    cr_assert_eq(loop_live(loop), 0);
    cr_assert_eq(rmdir(dir), 0);
    loop_free_clean(loop);
}

/* The source each backend's loops use: kqueue's own filter on kqueue. */
BACKEND_TEST(watch, source_of_the_backend)
{
    tern_loop *loop = loop_new_backend(backend);
    const char *src = tern__watch_source(loop);
    if (strcmp(backend, "kqueue") == 0)
        cr_assert_str_eq(src, "vnode");
#ifdef TERN_HAVE_INOTIFY
    else if (stat_forced)
        cr_assert_str_eq(src, "stat");
    else
        cr_assert_str_eq(src, "inotify");
#else
    else
        cr_assert_str_eq(src, "stat");
#endif
    loop_free_clean(loop);
}

BACKEND_TEST(watch, stop_and_teardown_are_silent)
{
    backend_warm_up(backend);
    int fds = count_open_fds_settled();
    tern_loop *loop = loop_new_backend(backend);
    char dir[64], a[96];
    tmpdir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/a", dir);
    struct news w = {0}, v = {0};
    cr_assert_eq(watch(loop, dir, &w), 0);
    cr_assert_eq(watch(loop, dir, &v), 0);
    cr_assert_eq(tern_watch_stop(loop, w.id), 0);
    cr_assert_eq(tern_watch_stop(loop, w.id), -ENOENT);
    settle();
    write_file(a, "");
    unsigned at = 0;
    cr_assert(wait_news(loop, &v, &at, TERN_WATCH_RENAME, "a"));
    cr_assert_eq(atomic_load(&w.count), 0, "a stopped watch called back");
    unsigned before = atomic_load(&v.count);
    cr_assert_eq(unlink(a), 0);
    tern_loop_free(loop); /* v still live: stopped without a callback */
    cr_assert_eq(atomic_load(&v.count), before);
    cr_assert_eq(rmdir(dir), 0);
    cr_assert_eq(count_open_fds_settled(), fds, "a watch left a descriptor open");
}

BACKEND_TEST(watch, bad_input)
{
    tern_loop *loop = loop_new_backend(backend);
    struct news w = {0};
    cr_assert_eq(tern_watch_start(loop, NULL, 0, on_news, &w, NULL), -EINVAL);
    cr_assert_eq(tern_watch_start(loop, "/tmp", 0, NULL, &w, NULL), -EINVAL);
    cr_assert_eq(tern_watch_start(loop, "/tmp", UINT64_MAX, on_news, &w, NULL), -EINVAL);
    cr_assert_eq(tern_watch_start(loop, "/nonexistent/path", 0, on_news, &w, NULL), -ENOENT);
    cr_assert_eq(tern_watch_stop(loop, 0), -EINVAL);
    cr_assert_eq(tern_watch_stop(loop, 12345), -ENOENT);
    cr_assert_eq(loop_live(loop), 0);
    loop_free_clean(loop);
}

/* A polled watch started with no interval takes the default one, and
 * stops like any other. */
Test(watch, polled_with_no_interval_takes_the_default)
{
    tern__set_watch_stat(true);
    tern_loop *loop = loop_new_default();
    char dir[] = "/tmp/tern-watch-default-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    struct news w = {0};
    cr_assert_eq(tern_watch_start(loop, dir, 0, on_news, &w, &w.id), 0);
    cr_assert_eq(tern_watch_stop(loop, w.id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    rmdir(dir);
}
