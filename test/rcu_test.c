/*
 * SPEC §7: with TERN_LOOP_RCU the loop thread is a urcu-qsbr reader that
 * reports a quiescent state after every turn and is offline while blocked
 * in the backend. So (1) a writer's synchronize_rcu() waits for a callback
 * that is running, and (2) never waits on a loop that sleeps.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <urcu-qsbr.h>

#include "tern.h"

#define MS 1000000ull

static atomic_bool in_callback, writer_waiting, callback_done, synchronized;

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void reader(tern_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
    atomic_store(&in_callback, true);
    while (!atomic_load(&writer_waiting))
        sleep_ms(1);
    sleep_ms(50); /* the writer is (or is about to be) inside synchronize_rcu */
    atomic_store(&callback_done, true);
}

static void *writer(void *arg)
{
    (void)arg;
    while (!atomic_load(&in_callback))
        sleep_ms(1);
    atomic_store(&writer_waiting, true);
    synchronize_rcu();
    /* The grace period must have covered the whole running callback. */
    cr_assert(atomic_load(&callback_done), "synchronize_rcu returned while a callback ran");
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

Test(rcu, a_grace_period_waits_for_a_running_callback, .timeout = 30)
{
    tern_loop *loop = rcu_loop();
    cr_assert_eq(tern_post(loop, reader, NULL), 0);
    pthread_t w;
    pthread_create(&w, NULL, writer, NULL);
    cr_assert_eq(tern_loop_run(loop), 0);
    pthread_join(w, NULL);
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
