/*
 * A watch whose system queue overflows (inotify's max_queued_events, more
 * news than the loop read in time): the news lost is told as one report
 * of TERN_WATCH_CHANGE | TERN_WATCH_RENAME with no name (the system does
 * not say which entries), never as an error or the end of the watch, and
 * news after it still arrives with its name. inotify only: other sources
 * have no queue to overflow.
 */
#include "loop_helpers.h"

struct news {
    unsigned reports, unnamed, named_change, errors;
    unsigned unnamed_events;
    bool saw_after;
};

static void on_news(tern_loop *loop, tern_id id, int status, unsigned events, const char *name,
                    void *arg)
{
    (void)loop, (void)id;
    struct news *w = arg;
    w->reports++;
    if (status != 0) {
        w->errors++;
        return;
    }
    if (name == NULL) {
        w->unnamed++;
        w->unnamed_events = events;
    } else if (strcmp(name, "after") == 0) {
        w->saw_after = true;
    } else if (events == TERN_WATCH_CHANGE) {
        w->named_change++;
    }
}

static unsigned queue_limit(void)
{
    FILE *f = fopen("/proc/sys/fs/inotify/max_queued_events", "r");
    unsigned v = 0;
    if (f != NULL) {
        if (fscanf(f, "%u", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}

Test(watch_overflow, lost_news_is_one_unnamed_report_and_the_watch_goes_on,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    if (strcmp(tern__watch_source(loop), "inotify") != 0) {
        loop_free_clean(loop);
        cr_skip_test("the watch source is not inotify");
    }
    unsigned limit = queue_limit();
    if (limit == 0 || limit > 1u << 20) {
        loop_free_clean(loop);
        cr_skip_test("max_queued_events unreadable or too large to fill (%u)", limit);
    }
    char dir[64], a[96], b[96], after[96];
    snprintf(dir, sizeof dir, "/tmp/tern-watch-overflow-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    snprintf(after, sizeof after, "%s/after", dir);
    int fa = open(a, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    int fb = open(b, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    cr_assert(fa >= 0 && fb >= 0);

    struct news w = {0};
    tern_id id;
    cr_assert_eq(tern_watch_start(loop, dir, 0, on_news, &w, &id), 0);
    /* Alternate the two files, so no report merges with the one before it,
     * until the queue has overflowed with nothing read. */
    for (unsigned i = 0; i < limit + 64; i++)
        cr_assert_eq(pwrite(i % 2 ? fb : fa, "x", 1, 0), 1);
    close(fa);
    close(fb);

    uint64_t end = mono_ns() + LIVENESS_NS;
    while (w.unnamed == 0 && w.errors == 0 && mono_ns() < end)
        tern_loop_run_once(loop, 5 * (int64_t)MS);
    cr_assert_eq(w.errors, 0, "the overflow ended the watch with an error");
    cr_assert_eq(w.unnamed, 1, "no report of lost news");
    cr_assert_eq(w.unnamed_events, TERN_WATCH_CHANGE | TERN_WATCH_RENAME,
                 "the lost news was told as %#x", w.unnamed_events);
    cr_assert_geq(w.named_change, limit / 2, "the news before the overflow was not told");

    int fc = open(after, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    cr_assert_geq(fc, 0);
    close(fc);
    end = mono_ns() + LIVENESS_NS;
    while (!w.saw_after && mono_ns() < end)
        tern_loop_run_once(loop, 5 * (int64_t)MS);
    cr_assert(w.saw_after, "news after the overflow never arrived");
    cr_assert_eq(w.unnamed, 1, "lost news told more than once");
    cr_assert_eq(w.errors, 0);

    cr_assert_eq(tern_watch_stop(loop, id), 0);
    unlink(a);
    unlink(b);
    unlink(after);
    cr_assert_eq(rmdir(dir), 0);
    loop_free_clean(loop);
}
