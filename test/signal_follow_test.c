/*
 * A signal watcher that follows another loop's reader
 * (runtime/net/signal.c): where the source reads pending signals (a
 * signalfd), starting it blocks the signal in its own loop thread, so
 * that thread never takes the signal's default action; the signal reaches
 * both watchers; and stopping it gives the thread its mask back as it
 * found it. A follower whose thread had the signal blocked already leaves
 * it blocked. With the self-pipe source (portable builds) the mask is
 * never touched, and the test says so.
 */
#include "signal_helpers.h"

struct follower {
    bool block_first;          /* the thread blocks the signal before its watcher starts */
    struct seen s;
    atomic_bool started, stop, stopped;
    bool blocked_before, blocked_while, blocked_after;
};

static void *follower_main(void *arg)
{
    struct follower *f = arg;
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, SIGUSR2);
    cr_assert_eq(pthread_sigmask(f->block_first ? SIG_BLOCK : SIG_UNBLOCK, &one, NULL), 0);
    f->blocked_before = blocked_here(SIGUSR2);
    tern_loop *loop = loop_new_default();
    tern_id id;
    cr_assert_eq(tern_signal_start(loop, SIGUSR2, on_signal, &f->s, &id), 0);
    f->blocked_while = blocked_here(SIGUSR2);
    atomic_store(&f->started, true);
    while (!atomic_load(&f->stop))
        tern_loop_run_once(loop, 2 * (int64_t)MS);
    cr_assert_eq(tern_signal_stop(loop, id), 0);
    f->blocked_after = blocked_here(SIGUSR2);
    loop_free_clean(loop);
    atomic_store(&f->stopped, true);
    return NULL;
}

static void wait_flag(tern_loop *loop, atomic_bool *flag)
{
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (!atomic_load(flag) && mono_ns() < end)
        tern_loop_run_once(loop, 2 * (int64_t)MS);
    cr_assert(atomic_load(flag), "the follower's thread did not get there");
}

static void follow(bool block_first)
{
    tern_loop *loop = loop_new_default(); /* the reader, on this thread */
    struct seen mine = {0};
    tern_id id;
    cr_assert_eq(tern_signal_start(loop, SIGUSR2, on_signal, &mine, &id), 0);
    struct follower f = {.block_first = block_first};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, follower_main, &f), 0);
    wait_flag(loop, &f.started);
    cr_assert_eq(kill(getpid(), SIGUSR2), 0);
    cr_assert(run_until_count(loop, &mine.n, 1, 10 * (int64_t)MS, 2000));
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (atomic_load(&f.s.n) < 1 && mono_ns() < end)
        tern_loop_run_once(loop, 2 * (int64_t)MS);
    cr_assert_eq(atomic_load(&f.s.n), 1, "the follower was not called");
    atomic_store(&f.stop, true);
    wait_flag(loop, &f.stopped);
    cr_assert_eq(pthread_join(t, NULL), 0);

    cr_assert_eq(f.blocked_before, block_first);
    bool masks = source_masks();
    if (!masks)
        cr_log_info("self-pipe source: a follower's mask is left alone");
    cr_assert_eq(f.blocked_while, masks || block_first,
                 "the follower's thread could take the signal's default action");
    cr_assert_eq(f.blocked_after, block_first,
                 "stopping the follower did not give its thread's mask back as it found it");
    cr_assert_eq(atomic_load(&mine.n), 1);
    cr_assert_eq(tern_signal_stop(loop, id), 0);
    loop_free_clean(loop);
}

Test(signal_follow, a_follower_blocks_while_it_watches_and_gives_the_mask_back,
     .timeout = TEST_TIMEOUT)
{
    follow(false);
}

Test(signal_follow, a_follower_whose_thread_blocked_it_leaves_it_blocked,
     .timeout = TEST_TIMEOUT)
{
    follow(true);
}
