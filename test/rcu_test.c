/*
 * SPEC §7: with TERN_LOOP_RCU the loop thread is a urcu-qsbr reader that
 * reports a quiescent state after every turn and is offline while blocked
 * in the backend. So (1) a writer's synchronize_rcu() waits for a callback
 * that is running, and (2) never waits on a loop that sleeps.
 */
#define _LGPL_SOURCE /* urcu_qsbr_gp: to see a grace period begin */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <urcu-qsbr.h>

#include "tern.h"

#define MS 1000000ull
#define LIVENESS_NS (20000ull * MS)

static atomic_bool in_callback, synchronized; /* synchronized: the idle-loop tests */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/*
 * What the grace-period test saw, checked on the main thread afterwards.
 * The ordering is made explicit rather than hoped for: the callback does
 * not finish until it has seen the writer's grace period begin (the
 * global counter that synchronize_rcu advances before it waits for
 * readers moves away from the value the callback read on entry), so a
 * late writer is waited for, never let off. Then the callback stays on
 * for a while longer (its length is the subject here: a grace period that
 * does not wait for it has that long to end) and records whether
 * synchronize_rcu returned meanwhile.
 */
static struct {
    atomic_bool gp_seen;       /* the callback saw the grace period begin */
    atomic_bool returned_early; /* synchronize_rcu returned while the callback ran */
    atomic_bool callback_done;
    atomic_bool writer_saw_done; /* after synchronize_rcu, the callback had finished */
    atomic_bool writer_returned;
} g;

static void reader(tern_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
    unsigned long gp0 = CMM_LOAD_SHARED(urcu_qsbr_gp.ctr);
    atomic_store(&in_callback, true);
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (CMM_LOAD_SHARED(urcu_qsbr_gp.ctr) == gp0 && mono_ns() < end)
        sched_yield();
    atomic_store(&g.gp_seen, CMM_LOAD_SHARED(urcu_qsbr_gp.ctr) != gp0);
    /* The writer is inside synchronize_rcu, waiting for this reader. */
    for (int i = 0; i < 50; i++) {
        if (atomic_load(&g.writer_returned))
            atomic_store(&g.returned_early, true);
        sleep_ms(1);
    }
    atomic_store(&g.callback_done, true);
}

static void *writer(void *arg)
{
    (void)arg;
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (!atomic_load(&in_callback) && mono_ns() < end)
        sched_yield();
    synchronize_rcu();
    /* The grace period must have covered the whole running callback. */
    atomic_store(&g.writer_saw_done, atomic_load(&g.callback_done));
    atomic_store(&g.writer_returned, true);
    return NULL;
}

static tern_loop *rcu_loop(void)
{
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.flags = TERN_LOOP_RCU;
    tern_loop *loop;
    cr_assert_eq(tern_loop_new(&loop, &o), 0);
    return loop;
}

/* The same timeout as the other tests here: criterion 2.4 leaks 48 bytes
 * in its runner (LeakSanitizer fails the run) when a program's tests have
 * different ones. The waits inside end within 21 s. */
Test(rcu, a_grace_period_waits_for_a_running_callback, .timeout = 30)
{
    tern_loop *loop = rcu_loop();
    cr_assert_eq(tern_post(loop, reader, NULL), 0);
    pthread_t w;
    pthread_create(&w, NULL, writer, NULL);
    cr_assert_eq(tern_loop_run(loop), 0);
    pthread_join(w, NULL);
    cr_assert(atomic_load(&g.gp_seen), "the writer's grace period never began while the "
                                       "callback ran (within %llu s)",
              LIVENESS_NS / 1000000000ull);
    cr_assert(!atomic_load(&g.returned_early),
              "synchronize_rcu returned while a callback that began before it still ran");
    cr_assert(atomic_load(&g.writer_saw_done),
              "synchronize_rcu returned before the callback ended");
    tern_loop_free(loop);
}

static void *sync_thread(void *arg)
{
    (void)arg;
    synchronize_rcu();
    atomic_store(&synchronized, true);
    return NULL;
}

static void check_synchronized(tern_loop *loop, tern_id id, void *arg)
{
    (void)arg;
    /* Here the loop has been blocked for a while with a writer waiting. */
    if (atomic_load(&synchronized))
        tern_timer_stop(loop, (tern_id)(uintptr_t)arg);
    (void)id;
}

static void give_up(tern_loop *loop, tern_id id, void *arg)
{
    (void)id;
    (void)arg;
    tern_loop_stop(loop);
}

Test(rcu, an_idle_loop_never_holds_up_a_grace_period, .timeout = 30)
{
    tern_loop *loop = rcu_loop();
    /* A loop that sleeps in the backend: only a far timer keeps it alive. */
    tern_id far;
    cr_assert_eq(tern_timer_start(loop, 3600000 * MS, 0, give_up, NULL, &far), 0);
    tern_id poll_id;
    cr_assert_eq(tern_timer_start(loop, 200 * MS, 200 * MS, check_synchronized,
                                  (void *)(uintptr_t)far, &poll_id), 0);
    pthread_t s;
    pthread_create(&s, NULL, sync_thread, NULL);
    /* Turns run at most every 200 ms: the loop is offline in between. */
    for (int i = 0; i < 100 && !atomic_load(&synchronized); i++)
        tern_loop_run_once(loop, -1);
    cr_assert(atomic_load(&synchronized), "synchronize_rcu waited on an idle loop");
    pthread_join(s, NULL);
    tern_timer_stop(loop, poll_id);
    tern_timer_stop(loop, far);
    tern_loop_free(loop);
}

/* A thread that ran an RCU loop and stopped running it is offline: it
 * does not hold up writers between runs. */
Test(rcu, between_runs_the_thread_is_offline, .timeout = 30)
{
    tern_loop *loop = rcu_loop();
    tern_loop_run_once(loop, 0);
    pthread_t s;
    pthread_create(&s, NULL, sync_thread, NULL);
    pthread_join(s, NULL); /* would hang (and time out) if we stayed online */
    cr_assert(atomic_load(&synchronized));
    tern_loop_free(loop);
}
