/*
 * A foreign tern_cancel racing a thread that claims the loop.
 *
 * Thread A pumps the loop with tern_loop_run_once(loop, 0) and short
 * sleeps, so the loop is unclaimed most of the time; thread B cancels
 * 20,000 timers by id meanwhile. A cancel that found the loop unclaimed
 * used to go straight into the loop's containers while A claimed it (TSan
 * saw loop->refs written by B and read by A). Now such a cancel claims the
 * loop for its moment. Checked here: every timer is cancelled exactly once
 * (none fires), the live count ends at zero, and, under TSan, no race.
 * Fixed workload, no randomness (seed: none needed).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tern.h"

#define TIMERS 20000

static tern_loop *loop;
static tern_id ids[TIMERS];
static atomic_bool cancelling_done;
static atomic_uint fired;
static unsigned passed, failed;

static void check(int ok, const char *what)
{
    printf("%s: %s\n", ok ? "ok" : "FAIL", what);
    ok ? passed++ : failed++;
}

static void on_timer(tern_loop *l, tern_id id, void *arg)
{
    (void)l, (void)id, (void)arg;
    atomic_fetch_add(&fired, 1);
}

static void *pump(void *arg)
{
    (void)arg;
    struct timespec ts = {0, 20000};
    while (!atomic_load(&cancelling_done)) {
        tern_loop_run_once(loop, 0);
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void *cancel_all(void *arg)
{
    (void)arg;
    unsigned bad = 0;
    for (unsigned i = 0; i < TIMERS; i++) {
        int rc = tern_cancel(loop, ids[i]);
        if (rc != TERN_CANCEL_REQUESTED) /* never the caller's thread: always queued */
            bad++;
    }
    atomic_store(&cancelling_done, true);
    return (void *)(uintptr_t)bad;
}

int main(void)
{
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.max_operations = TIMERS + 16;
    if (tern_loop_new(&loop, &o) != 0)
        return 1;
    for (unsigned i = 0; i < TIMERS; i++)
        if (tern_timer_start(loop, 3600ull * 1000000000ull, 0, on_timer, NULL, &ids[i]) != 0)
            return 1;
    pthread_t a, b;
    pthread_create(&a, NULL, pump, NULL);
    pthread_create(&b, NULL, cancel_all, NULL);
    void *bad;
    pthread_join(b, &bad);
    pthread_join(a, NULL);
    /* Requests queued while A ran the loop resolve in its next step 1. */
    while (tern_loop_run_once(loop, 0) != 0)
        ;
    tern_loop_stats s;
    tern_loop_stats_get(loop, &s);
    check((uintptr_t)bad == 0, "every cancel was accepted (0)");
    check(s.live_operations == 0, "every timer was cancelled: nothing live");
    check(atomic_load(&fired) == 0, "no cancelled timer fired");
    tern_loop_free(loop);
    printf("%u passed, %u failed\n", passed, failed);
    return failed != 0;
}
