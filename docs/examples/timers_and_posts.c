/*
 * timers_and_posts: what a turn does with timers, defers and posts.
 *
 * - Three one-shot timers armed with the same delay fire in the order
 *   they were armed (the deadline heap breaks ties by arming sequence).
 * - A repeating timer ticks five times and stops itself. Each tick defers
 *   a function, and the deferred function runs in the *next* turn: what
 *   step 2 queues waits for the next step 2.
 * - An unreferenced heartbeat timer beats all along but does not keep the
 *   loop alive.
 * - A helper thread, started from inside the loop, posts 10,000 numbered
 *   functions (they run in posting order, on the loop thread, in step 1)
 *   and then cancels a 60-second watchdog timer by id. That cancel from
 *   another thread is queued and resolved in the loop's next step 1; with
 *   the watchdog gone nothing referenced is left and tern_loop_run()
 *   returns 0.
 *
 * It prints what happened and the loop's statistics (how few wake
 * syscalls 10,000 posts needed), and exits 0 only if every ordering
 * promise above held.
 *
 * Build: part of the meson build (docs/examples). Run: ./timers_and_posts
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tern.h"

#define MS 1000000ull
#define POSTS 10000

struct demo {
    /* one-shot timers: the order they fired in */
    char order[4];
    int fired;
    /* the repeating timer */
    int ticks;
    uint64_t tick_turn[5];
    uint64_t defer_turn[5];
    int defers_ran;
    /* the unreferenced heartbeat */
    unsigned beats;
    /* posts from the helper thread */
    pthread_t helper;
    bool helper_started;
    unsigned posts_seen;
    bool posts_in_order;
    tern_id watchdog;
    bool watchdog_fired;
    uint64_t started_at;
};

static struct demo d = {.posts_in_order = true};

/* The turns completed so far: the number of the turn we are in, from 0. */
static uint64_t turn_now(tern_loop *loop)
{
    tern_loop_stats s;
    tern_loop_stats_get(loop, &s);
    return s.turns;
}

static void on_oneshot(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    d.order[d.fired++] = *(const char *)arg;
}

static void after_tick(tern_loop *loop, void *arg)
{
    int tick = (int)(intptr_t)arg;
    d.defer_turn[tick] = turn_now(loop);
    d.defers_ran++;
}

static void on_tick(tern_loop *loop, tern_id id, void *arg)
{
    (void)arg;
    int tick = d.ticks++;
    d.tick_turn[tick] = turn_now(loop);
    if (tern_defer(loop, after_tick, (void *)(intptr_t)tick) != 0)
        fprintf(stderr, "tern_defer failed\n");
    if (d.ticks == 5)
        tern_timer_stop(loop, id); /* a repeating timer ends by being stopped */
}

static void on_heartbeat(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
    d.beats++;
}

static void on_watchdog(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
    d.watchdog_fired = true; /* never: the helper cancels it first */
}

/* Runs on the loop thread, in step 1 of some turn. */
static void on_post(tern_loop *loop, void *arg)
{
    (void)loop;
    unsigned n = (unsigned)(uintptr_t)arg;
    if (n != d.posts_seen)
        d.posts_in_order = false;
    d.posts_seen++;
}

/* The helper thread: it may only post and cancel (and stop) the loop. */
static void *helper_main(void *arg)
{
    tern_loop *loop = arg;
    for (uintptr_t i = 0; i < POSTS; i++) {
        int rc;
        while ((rc = tern_post(loop, on_post, (void *)i)) == -EAGAIN)
            ; /* at max_operations: the loop is behind, try again */
        if (rc != 0) {
            fprintf(stderr, "tern_post: %s\n", tern_strerror(rc));
            break;
        }
    }
    /* Queued behind the posts; resolved by live id in the next step 1. */
    int rc = tern_cancel(loop, d.watchdog); /* TERN_CANCEL_REQUESTED: queued */
    if (rc < 0)
        fprintf(stderr, "tern_cancel from the helper: %s\n", tern_strerror(rc));
    return NULL;
}

/*
 * Deferred before the loop runs, so it runs in the first turn's step 2,
 * while this thread has claimed the loop: the helper's cancel is then a
 * genuine cross-thread request.
 */
static void start_helper(tern_loop *loop, void *arg)
{
    (void)arg;
    d.started_at = tern_loop_now(loop);
    d.helper_started = pthread_create(&d.helper, NULL, helper_main, loop) == 0;
    if (!d.helper_started)
        tern_cancel(loop, d.watchdog); /* no helper: end the run anyway */
}

int main(void)
{
    tern_loop *loop;
    int rc = tern_loop_new(&loop, NULL);
    if (rc < 0) {
        fprintf(stderr, "tern_loop_new: %s\n", tern_strerror(rc));
        return 1;
    }

    static const char names[3] = {'A', 'B', 'C'};
    tern_id heartbeat;
    for (int i = 0; i < 3 && rc == 0; i++)
        rc = tern_timer_start(loop, 5 * MS, 0, on_oneshot, (void *)&names[i], NULL);
    if (rc == 0)
        rc = tern_timer_start(loop, 2 * MS, 2 * MS, on_tick, NULL, NULL);
    if (rc == 0)
        rc = tern_timer_start(loop, 1 * MS, 1 * MS, on_heartbeat, NULL, &heartbeat);
    if (rc == 0)
        rc = tern_unref(loop, heartbeat); /* beats, but does not keep run() going */
    if (rc == 0)
        rc = tern_timer_start(loop, 60000 * MS, 0, on_watchdog, NULL, &d.watchdog);
    if (rc == 0)
        rc = tern_defer(loop, start_helper, NULL);
    if (rc != 0) {
        fprintf(stderr, "setup: %s\n", tern_strerror(rc));
        tern_loop_free(loop);
        return 1;
    }

    int run = tern_loop_run(loop); /* 0: nothing referenced is left */
    uint64_t elapsed = tern_loop_now(loop) - d.started_at;
    if (d.helper_started)
        pthread_join(d.helper, NULL);

    printf("one-shot timers armed A, B, C with one delay fired %c, %c, %c\n", d.order[0],
           d.order[1], d.order[2]);
    bool defers_next_turn = d.defers_ran == 5;
    for (int i = 0; i < d.ticks; i++) {
        printf("tick %d ran in turn %" PRIu64 ", its defer in turn %" PRIu64 "\n", i + 1,
               d.tick_turn[i], d.defer_turn[i]);
        if (d.defer_turn[i] != d.tick_turn[i] + 1)
            defers_next_turn = false;
    }
    printf("posts: %u of %d seen, %s\n", d.posts_seen, POSTS,
           d.posts_in_order ? "in posting order" : "OUT OF ORDER");
    printf("watchdog %s; run returned %d after %.1f ms; the unreferenced heartbeat beat %u "
           "times meanwhile\n",
           d.watchdog_fired ? "FIRED" : "cancelled from the helper thread", run, elapsed / 1e6,
           d.beats);

    tern_loop_stats s;
    tern_loop_stats_get(loop, &s);
    printf("loop: %" PRIu64 " turns, %" PRIu64 " posts run, %" PRIu64 " wake syscalls, %" PRIu64
           " callbacks dispatched\n",
           s.turns, s.posts, s.wake_syscalls, s.events);
    printf("(a producer writes the wake descriptor only when the loop sleeps or is about "
           "to: %.1f posts per wake syscall here)\n",
           s.wake_syscalls ? (double)s.posts / (double)s.wake_syscalls : (double)s.posts);
    tern_loop_free(loop);

    bool ok = run == 0 && d.fired == 3 && d.order[0] == 'A' && d.order[1] == 'B' &&
              d.order[2] == 'C' && d.ticks == 5 && defers_next_turn && d.posts_seen == POSTS &&
              d.posts_in_order && !d.watchdog_fired;
    if (!ok)
        fprintf(stderr, "timers_and_posts: a promise did not hold\n");
    return ok ? 0 : 1;
}
