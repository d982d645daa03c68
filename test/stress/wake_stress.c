/*
 * The wake protocol never leaves the eventfd readable with nothing to say.
 *
 * Producers post at random short intervals (seed: TERN_SEED, default
 * 0x77a6e5ee) to a
 * loop that keeps going to sleep, so posts land in every corner of the
 * park: before it, during its re-check, while blocked. A notify that the
 * loop does not consume leaves the eventfd readable forever, and every
 * later park returns at once (an idle loop spinning at full CPU): the park
 * that found work on its re-check used to overwrite NOTIFIED with RUNNING
 * and lose the producer's write. After each storm the loop is drained and
 * left unclaimed; its descriptor must not be readable then. Also checked:
 * every post ran exactly once. Every wait (a refused post's retry, the
 * drain after each storm) is bounded by the watchdog, which reports the
 * loop's books instead of spinning until meson's timeout.
 */
#include <poll.h>

#include "stress.h"

#define DEFAULT_SEED UINT64_C(0x77a6e5ee)
#define PRODUCERS 2
#define POSTS 100000
#define ROUNDS 4

static tern_loop *loop;
static atomic_ulong ran;
static atomic_uint producers_done;

static void report(void)
{
    printf("  posts ran %lu, producers done %u\n", atomic_load(&ran), atomic_load(&producers_done));
}

static void on_post(tern_loop *l, void *arg)
{
    (void)l, (void)arg;
    atomic_fetch_add(&ran, 1);
}

static void *producer(void *arg)
{
    uint64_t x = stress_seed((uint64_t)(uintptr_t)arg);
    for (unsigned i = 0; i < POSTS; i++) {
        /* A refusal (-EAGAIN at max_operations) retries; the watchdog
         * bounds the retries. */
        while (tern_post(loop, on_post, NULL) != 0)
            sched_yield();
        for (volatile unsigned spin = (unsigned)stress_below(&x, 3000); spin > 0; spin--)
            ;
    }
    atomic_fetch_add(&producers_done, 1);
    return NULL;
}

static void never(tern_loop *l, tern_id id, void *arg)
{
    (void)l, (void)id, (void)arg;
}

static void *runner(void *arg)
{
    (void)arg;
    tern_loop_run(loop);
    return NULL;
}

int main(void)
{
    stress_init("wake_stress", DEFAULT_SEED);
    stress_on_report(report);
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.max_operations = 1u << 20;
    if (tern_loop_new(&loop, &o) != 0)
        return 1;
    stress_watch_loop(loop, "woken");
    tern_id far;
    tern_timer_start(loop, 3600ull * 1000000000ull, 0, never, NULL, &far);
    int stuck = 0;
    for (unsigned round = 0; round < ROUNDS; round++) {
        stress_phase("a storm of posts runs, then the loop drains them", 120 * STRESS_SEC);
        pthread_t r, p[PRODUCERS];
        pthread_create(&r, NULL, runner, NULL);
        for (uintptr_t k = 0; k < PRODUCERS; k++)
            pthread_create(&p[k], NULL, producer, (void *)(1 + k + PRODUCERS * round));
        for (int k = 0; k < PRODUCERS; k++)
            pthread_join(p[k], NULL);
        tern_loop_stop(loop);
        pthread_join(r, NULL);
        /* Run what is left; the loop then sleeps unclaimed. */
        while (atomic_load(&ran) < (unsigned long)(round + 1) * PRODUCERS * POSTS)
            tern_loop_run_once(loop, 0);
        tern_loop_run_once(loop, 0);
        struct pollfd pfd = {.fd = tern_loop_backend_fd(loop), .events = POLLIN};
        stuck += poll(&pfd, 1, 0) != 0;
    }
    STRESS_CHECK(stuck == 0, "an idle, drained loop's descriptor is not readable (%d rounds "
                 "left it readable)", stuck);
    STRESS_CHECK(atomic_load(&ran) == (unsigned long)ROUNDS * PRODUCERS * POSTS,
                 "every post ran exactly once (%lu)", atomic_load(&ran));
    tern_loop_stats s;
    tern_loop_stats_get(loop, &s);
    printf("wake_stress: %lu posts, %llu wake syscalls, %llu turns\n", atomic_load(&ran),
           (unsigned long long)s.wake_syscalls, (unsigned long long)s.turns);
    tern_timer_stop(loop, far);
    stress_phase("tern_loop_free", 30 * STRESS_SEC);
    stress_loop_free(loop);
    stress_phase_end();
    return stress_summary();
}
