/*
 * embed: driving a tern loop from a host event loop instead of giving it
 * a thread, as a GTK or Qt application would.
 *
 * The host here is a plain poll(2) loop that owns one descriptor of its
 * own (a pipe a "UI" thread writes to). To embed tern it needs three
 * calls and one rule:
 *
 *   tern_loop_backend_fd()    watch it for readability: it turns readable
 *                             for tern's fd readiness and for every
 *                             wake-up (a post, a pool completion, a stop)
 *   tern_loop_next_timeout()  how long the host may sleep before tern has
 *                             a deadline due (0: pump now; -1: no deadline)
 *   tern_loop_run_once(loop, 0)  pump: one turn that never blocks
 *
 *   The rule: ask tern_loop_next_timeout() after every pump, just before
 *   sleeping. A post that arrives while a pump runs does not write the
 *   wake descriptor (the loop is awake then); the fresh timeout says 0
 *   for it instead.
 *
 * tern's side does a little of everything: a repeating timer, a pool job,
 * posts from another thread and an fd watcher on a second pipe. The host
 * counts what woke it. tern never gets a thread of its own to run on.
 *
 * Build: part of the meson build (docs/examples). Run: ./embed
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "tern.h"

#define MS 1000000ull
#define POSTS 200
#define UI_EVENTS 3

struct state {
    int ticks;            /* tern timer */
    bool job_done;        /* tern pool job */
    unsigned posts;       /* posts from the worker thread */
    bool pipe_read;       /* tern fd watcher */
    unsigned ui_events;   /* the host's own descriptor */
};

static struct state st;
static int ui_pipe[2], tern_pipe[2];

/* ---------------- tern's side: ordinary callbacks ---------------- */

static void on_tick(tern_loop *loop, tern_id id, void *arg)
{
    (void)arg;
    if (++st.ticks == 3)
        tern_timer_stop(loop, id);
}

static void *sum_work(tern_job *job, void *arg)
{
    (void)job;
    (void)arg;
    uint64_t *sum = malloc(sizeof(*sum));
    if (sum != NULL) {
        *sum = 0;
        for (uint64_t i = 0; i < 10000000; i++)
            *sum += i ^ (i >> 3);
    }
    return sum;
}

static void sum_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
    st.job_done = status == 0 && result != NULL;
    free(result);
}

static void on_post(tern_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
    st.posts++;
}

static void on_pipe(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    (void)events;
    (void)arg;
    char c;
    if (read(fd, &c, 1) == 1)
        st.pipe_read = true;
    tern_io_stop(loop, id);
}

/* Another thread: it posts to tern and writes to both pipes now and then. */
static void *worker_main(void *arg)
{
    tern_loop *loop = arg;
    for (unsigned i = 0; i < POSTS; i++) {
        while (tern_post(loop, on_post, NULL) == -EAGAIN)
            ;
        if (i % 50 == 0) {
            usleep(2000); /* let the host go back to sleep in between */
            if (i / 50 < UI_EVENTS && write(ui_pipe[1], "u", 1) != 1)
                abort();
        }
    }
    if (write(tern_pipe[1], "t", 1) != 1)
        abort();
    return NULL;
}

/* ---------------- the host's side ---------------- */

static bool all_done(void)
{
    return st.ticks == 3 && st.job_done && st.posts == POSTS && st.pipe_read &&
           st.ui_events == UI_EVENTS;
}

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* tern's nanoseconds to poll's milliseconds, rounded up so that a
 * deadline is never missed by sleeping too little. */
static int poll_timeout(int64_t ns)
{
    if (ns < 0)
        return -1;
    int64_t ms = (ns + 999999) / 1000000;
    return ms > 1000 ? 1000 : (int)ms;
}

int main(void)
{
    tern_loop *loop;
    int rc = tern_loop_new(&loop, NULL);
    if (rc < 0) {
        fprintf(stderr, "tern_loop_new: %s\n", tern_strerror(rc));
        return 1;
    }
    if (pipe(ui_pipe) < 0 || pipe(tern_pipe) < 0)
        return 1;
    /* Setup happens on this thread while no thread runs the loop: legal. */
    if ((rc = tern_timer_start(loop, 10 * MS, 10 * MS, on_tick, NULL, NULL)) < 0 ||
        (rc = tern_submit(loop, TERN_BOUNDED, sum_work, sum_done, NULL, NULL)) < 0 ||
        (rc = tern_io_start(loop, tern_pipe[0], TERN_READABLE, on_pipe, NULL, NULL)) < 0) {
        fprintf(stderr, "setup: %s\n", tern_strerror(rc));
        return 1;
    }
    pthread_t worker;
    if (pthread_create(&worker, NULL, worker_main, loop) != 0)
        return 1;

    unsigned sleeps = 0, woke_by_tern = 0, woke_by_ui = 0, timed_out = 0, pumps = 0;
    /* A bound for a broken build, not a timing claim: the work takes ms. */
    uint64_t give_up = monotonic_ns() + 30000 * MS;
    while (!all_done() && monotonic_ns() < give_up) {
        /* Pump first: a turn that never blocks. */
        tern_loop_run_once(loop, 0);
        pumps++;
        if (all_done())
            break;
        /* Then ask, every time, how long we may sleep. */
        int64_t next = tern_loop_next_timeout(loop);
        if (next == 0)
            continue;
        struct pollfd fds[2] = {
            {.fd = tern_loop_backend_fd(loop), .events = POLLIN},
            {.fd = ui_pipe[0], .events = POLLIN},
        };
        sleeps++;
        int n = poll(fds, 2, poll_timeout(next));
        if (n < 0 && errno != EINTR) {
            perror("poll");
            return 1;
        }
        if (n == 0)
            timed_out++; /* a tern deadline is due */
        if (fds[0].revents & POLLIN)
            woke_by_tern++; /* tern consumes it when pumped: never read it */
        if (fds[1].revents & POLLIN) {
            char c;
            if (read(ui_pipe[0], &c, 1) == 1)
                st.ui_events++;
            woke_by_ui++;
        }
    }
    pthread_join(worker, NULL);

    printf("host: %u pumps, %u sleeps; woken %u times by tern's descriptor, %u by its own, "
           "%u by tern's deadlines\n",
           pumps, sleeps, woke_by_tern, woke_by_ui, timed_out);
    printf("tern: %d timer ticks, pool job %s, %u posts, pipe watcher %s\n", st.ticks,
           st.job_done ? "delivered" : "missing", st.posts,
           st.pipe_read ? "fired" : "silent");
    tern_loop_stats s;
    tern_loop_stats_get(loop, &s);
    printf("tern loop: %" PRIu64 " turns, %" PRIu64 " wake syscalls, %.1f ms blocked inside "
           "tern (always 0: the host does the sleeping)\n",
           s.turns, s.wake_syscalls, s.idle_ns / 1e6);

    tern_loop_free(loop);
    tern_pool_shutdown(TERN_POOL_DRAIN, UINT64_MAX);
    for (int i = 0; i < 2; i++) {
        close(ui_pipe[i]);
        close(tern_pipe[i]);
    }
    bool ok = all_done() && s.idle_ns == 0;
    if (!ok)
        fprintf(stderr, "embed: something tern owed never arrived\n");
    return ok ? 0 : 1;
}
