/*
 * loop_test: the loop on Windows through the public API, on the IOCP
 * backend: timers fire in deadline order (ties in arming order) and never
 * early; posts from another thread each run exactly once, in order, and
 * wake a loop asleep with nothing else to wake it; a pool job runs and
 * reports back; a loop freed with pending posts, defers, timers and a job
 * runs what the contract says it runs, once; what Windows lacks is refused
 * (TERN_LOOP_RCU, file watches, watches on what is not a socket) and
 * leaves nothing behind. Closes
 * with "N passed, N failed"; exit 0 when all pass.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

#include "os_thread.h"
#include "runner.h"
#include "tern.h"

#define MS 1000000ull

static tern_loop *new_loop(unsigned flags)
{
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.flags = flags;
    tern_loop *loop = NULL;
    int rc = tern_loop_new(&loop, &o);
    CHECK(rc == 0);
    return rc == 0 ? loop : NULL;
}

TEST(the_backend_is_iocp)
{
    tern_loop *loop = new_loop(0);
    CHECK(strcmp(tern_loop_backend_name(loop), "iocp") == 0);
    CHECK(tern_loop_backend_fd(loop) == -1); /* nothing a host can watch */
    CHECK(tern_loop_run(loop) == 0); /* nothing live: returns at once */
    tern_loop_free(loop);
}

TEST(rcu_loops_are_refused)
{
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.flags = TERN_LOOP_RCU;
    tern_loop *loop = (tern_loop *)&o; /* a sentinel: untouched on error */
    CHECK(tern_loop_new(&loop, &o) == -ENOTSUP);
    CHECK(loop == (tern_loop *)&o);
}

static void never_io(tern_loop *loop, tern_id id, tern_os_sock_t fd, unsigned events, void *arg)
{
    (void)loop;
    (void)id;
    (void)fd;
    (void)events;
    (void)arg;
    CHECK(!"an io callback ran");
}

static void never_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop;
    (void)id;
    (void)status;
    (void)result;
    (void)arg;
    CHECK(!"a wait's done ran");
}

static void never_watch(tern_loop *loop, tern_id id, int status, unsigned events, const char *name,
                        void *arg)
{
    (void)loop;
    (void)id;
    (void)status;
    (void)events;
    (void)name;
    (void)arg;
    CHECK(!"a watch callback ran");
}

TEST(non_socket_and_file_watches_are_refused_and_leave_nothing)
{
    tern_loop *loop = new_loop(0);
    tern_id id = 0;
    /* 0 is no socket (io_test watches real ones). */
    CHECK(tern_io_start(loop, 0, TERN_READABLE, never_io, NULL, &id) == -ENOTSOCK);
    CHECK(tern_wait_fd(loop, 0, never_done, NULL, NULL, &id) == -ENOTSOCK);
    CHECK(tern_watch_start(loop, "C:\\", 0, never_watch, NULL, &id) == -ENOTSUP);
    /* Two values here (one on Linux): each has its own name. */
    CHECK(strcmp(tern_err_name(-EOPNOTSUPP), "EOPNOTSUPP") == 0);
    CHECK(strcmp(tern_err_name(-ENOTSUP), "ENOTSUP") == 0);
    CHECK(id == 0);
    tern_loop_stats s;
    tern_loop_stats_get(loop, &s);
    CHECK(s.live_operations == 0);
    CHECK(tern_loop_run(loop) == 0); /* nothing was admitted */
    tern_loop_free(loop);
}

struct fired {
    int order[8];
    uint64_t at[8];
    int n;
};

static struct fired fired;

static void on_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)id;
    if (fired.n < 8) {
        fired.at[fired.n] = tern_loop_now(loop);
        fired.order[fired.n++] = (int)(intptr_t)arg;
    }
}

TEST(timers_fire_in_deadline_order_and_never_early)
{
    tern_loop *loop = new_loop(0);
    memset(&fired, 0, sizeof(fired));
    /* label: the position it must fire in */
    static const struct {
        uint64_t delay;
        int label;
    } arm[] = {{30 * MS, 4}, {10 * MS, 0}, {20 * MS, 2}, {10 * MS, 1}, {20 * MS, 3}, {1, 5}};
    uint64_t start = tern_loop_now(loop);
    for (size_t i = 0; i < sizeof(arm) / sizeof(arm[0]); i++)
        CHECK(tern_timer_start(loop, arm[i].delay, 0, on_timer, (void *)(intptr_t)arm[i].label,
                               NULL) == 0);
    CHECK(tern_loop_run(loop) == 0);
    CHECK(fired.n == 6);
    /* The 1 ns timer first, then the others by deadline, ties as armed. */
    static const int want[] = {5, 0, 1, 2, 3, 4};
    for (int i = 0; i < 6; i++)
        CHECK(fired.order[i] == want[i]);
    for (size_t i = 0; i < sizeof(arm) / sizeof(arm[0]); i++)
        for (int k = 0; k < fired.n; k++)
            if (fired.order[k] == arm[i].label)
                CHECK(fired.at[k] - start >= arm[i].delay);
    tern_loop_free(loop);
}

#define POSTS 20000

struct posts {
    tern_loop *loop;
    _Atomic unsigned char seen[POSTS];
    unsigned next; /* the number the next post must carry */
    bool in_order;
    unsigned extra; /* a post seen twice */
};

static struct posts posts;

static void on_post(tern_loop *loop, void *arg)
{
    (void)loop;
    unsigned n = (unsigned)(uintptr_t)arg;
    if (n != posts.next)
        posts.in_order = false;
    posts.next = n + 1;
    if (atomic_fetch_add(&posts.seen[n], 1) != 0)
        posts.extra++;
}

static void on_last(tern_loop *loop, void *arg)
{
    (void)arg;
    CHECK(tern_loop_keepalive(loop, false) == 0);
}

static void post_retrying(tern_loop *loop, tern_fn fn, void *arg)
{
    int rc;
    while ((rc = tern_post(loop, fn, arg)) == -EAGAIN)
        SwitchToThread();
    CHECK(rc == 0);
}

/* Posts in bursts with pauses, so the loop parks between them and each
 * burst has to wake it. */
static void *producer(void *arg)
{
    (void)arg;
    for (unsigned i = 0; i < POSTS; i++) {
        post_retrying(posts.loop, on_post, (void *)(uintptr_t)i);
        if (i % 4000 == 3999)
            Sleep(5);
    }
    post_retrying(posts.loop, on_last, NULL);
    return NULL;
}

TEST(posts_from_another_thread_run_once_in_order_and_wake_the_loop)
{
    memset(&posts, 0, sizeof(posts));
    posts.in_order = true;
    posts.loop = new_loop(TERN_LOOP_KEEPALIVE);
    tern__thread_t t;
    CHECK(tern__thread_start(&t, producer, NULL) == 0);
    CHECK(tern_loop_run(posts.loop) == 0);
    tern__thread_join(t, NULL);
    unsigned missing = 0;
    for (unsigned i = 0; i < POSTS; i++)
        missing += atomic_load(&posts.seen[i]) == 0;
    CHECK(missing == 0);
    CHECK(posts.extra == 0);
    CHECK(posts.in_order);
    tern_loop_stats s;
    tern_loop_stats_get(posts.loop, &s);
    CHECK(s.posts == POSTS + 1);
    CHECK(s.wake_syscalls >= 1); /* it slept, and a post woke it */
    tern_loop_free(posts.loop);
}

static _Atomic bool late_ran;
static _Atomic bool timer_beat;

static void on_late(tern_loop *loop, void *arg)
{
    (void)arg;
    atomic_store(&late_ran, true);
    CHECK(tern_loop_keepalive(loop, false) == 0);
}

static void on_beat(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
    atomic_store(&timer_beat, true);
}

static void *post_late(void *arg)
{
    Sleep(50); /* the loop is asleep in its port by then */
    post_retrying(arg, on_late, NULL);
    return NULL;
}

TEST(a_post_wakes_a_loop_with_nothing_else_to_wake_it)
{
    tern_loop *loop = new_loop(TERN_LOOP_KEEPALIVE);
    atomic_store(&late_ran, false);
    atomic_store(&timer_beat, false);
    /* Unreferenced, far away: it would end a wait the post failed to end. */
    tern_id beat;
    CHECK(tern_timer_start(loop, 5000 * MS, 0, on_beat, NULL, &beat) == 0);
    CHECK(tern_unref(loop, beat) == 0);
    tern__thread_t t;
    uint64_t t0 = tern_loop_now(loop);
    CHECK(tern__thread_start(&t, post_late, loop) == 0);
    CHECK(tern_loop_run(loop) == 0);
    tern__thread_join(t, NULL);
    CHECK(atomic_load(&late_ran));
    CHECK(!atomic_load(&timer_beat));
    CHECK(tern_loop_now(loop) - t0 < 2000 * MS);
    tern_loop_stats s;
    tern_loop_stats_get(loop, &s);
    CHECK(s.wake_syscalls == 1);
    tern_loop_free(loop);
}

static void *square(tern_job *job, void *arg)
{
    (void)job;
    uintptr_t n = (uintptr_t)arg;
    return (void *)(n * n);
}

static int job_done_calls;
static int job_status;
static uintptr_t job_result;

static void on_job(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
    job_done_calls++;
    job_status = status;
    job_result = (uintptr_t)result;
}

TEST(a_pool_job_runs_and_reports_back)
{
    tern_loop *loop = new_loop(0);
    job_done_calls = 0;
    CHECK(tern_submit(loop, TERN_BOUNDED, square, on_job, (void *)(uintptr_t)12, NULL) == 0);
    CHECK(tern_loop_run(loop) == 0);
    CHECK(job_done_calls == 1);
    CHECK(job_status == 0);
    CHECK(job_result == 144);
    tern_loop_free(loop);
}

static int pending_posts, pending_defers, pending_timers;

static void count_post(tern_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
    pending_posts++;
}

static void count_defer(tern_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
    pending_defers++;
}

static void count_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
    pending_timers++;
}

static void *slow(tern_job *job, void *arg)
{
    (void)job;
    Sleep(30);
    return arg;
}

static void *post_ten(void *arg)
{
    for (int i = 0; i < 10; i++)
        post_retrying(arg, count_post, NULL);
    return NULL;
}

TEST(a_loop_freed_with_pending_work_runs_it_once_and_fires_nothing_late)
{
    tern_loop *loop = new_loop(0);
    pending_posts = pending_defers = pending_timers = 0;
    job_done_calls = 0;
    tern__thread_t t;
    CHECK(tern__thread_start(&t, post_ten, loop) == 0);
    tern__thread_join(t, NULL);
    for (int i = 0; i < 5; i++)
        CHECK(tern_defer(loop, count_defer, NULL) == 0);
    CHECK(tern_timer_start(loop, 10000 * MS, 0, count_timer, NULL, NULL) == 0);
    CHECK(tern_submit(loop, TERN_BOUNDED, slow, on_job, (void *)(uintptr_t)7, NULL) == 0);
    tern_loop_free(loop); /* never run */
    CHECK(pending_posts == 10);
    CHECK(pending_defers == 5);
    CHECK(pending_timers == 0);
    CHECK(job_done_calls == 1);
    /* Cancelled while queued or running, or finished first: never lost. */
    CHECK(job_status == -ECANCELED || (job_status == 0 && job_result == 7));
}

static const struct runner_test tests[] = {
    RUNNER_TEST(the_backend_is_iocp),
    RUNNER_TEST(rcu_loops_are_refused),
    RUNNER_TEST(non_socket_and_file_watches_are_refused_and_leave_nothing),
    RUNNER_TEST(timers_fire_in_deadline_order_and_never_early),
    RUNNER_TEST(posts_from_another_thread_run_once_in_order_and_wake_the_loop),
    RUNNER_TEST(a_post_wakes_a_loop_with_nothing_else_to_wake_it),
    RUNNER_TEST(a_pool_job_runs_and_reports_back),
    RUNNER_TEST(a_loop_freed_with_pending_work_runs_it_once_and_fires_nothing_late),
};

int main(void)
{
    int rc = RUNNER_MAIN(tests);
    CHECK(tern_pool_shutdown(TERN_POOL_DRAIN, UINT64_MAX) == 0);
    return rc;
}
