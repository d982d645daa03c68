/*
 * The edges of signal watchers spread over several loops
 * (runtime/net/signal.c): a delivery a watcher's loop cannot take (its
 * post refused) is dropped once, not owed forever; a wake-up or a
 * handover that reaches a loop after its watcher stopped does nothing; an
 * heir that cannot watch the source it inherited leaves the signal unread
 * and still stops cleanly; a queue of realtime instances is called back
 * one by one, at most 16 reads per turn; a backend's report of a signal
 * no backend-read watcher reads is ignored; a follower's block stays
 * while its loop still watches or an instance is pending, and the mask
 * is given back when the last one stops; a start that fails part way
 * leaves the mask, the descriptors and the table as they were.
 *
 * These run on the default backend with the loops driven from the test
 * thread (one thread may run several loops turn by turn), except where a
 * reader on another thread is what is tested. SIGWINCH, whose default
 * action is to be ignored, is used where a signal may go unread.
 */
#include "signal_helpers.h"

#include "fault.h"

/* What a backend that reads signals itself (kqueue) calls for each report
 * (runtime/core/loop_p.h, not a header the tests include). */
void tern__signal_fired(tern_loop *loop, int signo, unsigned count);

/* A few turns that wait for nothing: whatever is queued runs. */
static void turns(tern_loop *loop, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        tern_loop_run_once(loop, 0);
}

static void noop_post(tern_loop *loop, void *arg)
{
    (void)loop;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

/*
 * A follower on a loop that refuses the reader's wake-up post (its
 * max_operations reached) loses that delivery, and only that one: the
 * next delivery it can take is one callback, not two.
 */
Test(signal_handover, a_delivery_a_full_loop_refuses_is_dropped_once, .timeout = TEST_TIMEOUT)
{
    tern_loop *a = loop_new_default();
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.max_operations = 2;
    tern_loop *b = loop_new_opts(&opts);
    struct seen sa = {0}, sb = {0};
    tern_id ia, ib;
    cr_assert_eq(tern_signal_start(a, SIGUSR1, on_signal, &sa, &ia), 0);
    cr_assert_eq(tern_signal_start(b, SIGUSR1, on_signal, &sb, &ib), 0);
    atomic_uint posts = 0;
    /* One watcher and one queued post: b has no room for another post. */
    cr_assert_eq(tern_post(b, noop_post, &posts), 0);
    cr_assert_eq(tern_post(b, noop_post, &posts), -EAGAIN);

    cr_assert_eq(kill(getpid(), SIGUSR1), 0);
    cr_assert(run_until_count(a, &sa.n, 1, 10 * (int64_t)MS, 500));
    turns(b, 4);
    cr_assert_eq(atomic_load(&posts), 1);
    cr_assert_eq(atomic_load(&sb.n), 0, "a refused wake-up still called the follower");

    cr_assert_eq(kill(getpid(), SIGUSR1), 0);
    cr_assert(run_until_count(a, &sa.n, 2, 10 * (int64_t)MS, 500));
    cr_assert(run_until_count(b, &sb.n, 1, 0, 100));
    turns(b, 4);
    cr_assert_eq(atomic_load(&sb.n), 1, "the refused delivery was owed and called back later");

    cr_assert_eq(tern_signal_stop(b, ib), 0);
    cr_assert_eq(tern_signal_stop(a, ia), 0);
    loop_free_clean(b);
    loop_free_clean(a);
}

/* The reader's wake-up reaches the follower's loop after the follower
 * stopped: it finds no watcher and calls nothing. */
Test(signal_handover, a_wake_up_for_a_stopped_follower_calls_nothing, .timeout = TEST_TIMEOUT)
{
    tern_loop *a = loop_new_default(), *b = loop_new_default();
    struct seen sa = {0}, sb = {0};
    tern_id ia, ib;
    cr_assert_eq(tern_signal_start(a, SIGUSR1, on_signal, &sa, &ia), 0);
    cr_assert_eq(tern_signal_start(b, SIGUSR1, on_signal, &sb, &ib), 0);
    cr_assert_eq(kill(getpid(), SIGUSR1), 0);
    cr_assert(run_until_count(a, &sa.n, 1, 10 * (int64_t)MS, 500)); /* posts to b */
    cr_assert_eq(tern_signal_stop(b, ib), 0);
    turns(b, 4);
    cr_assert_eq(atomic_load(&sb.n), 0);
    cr_assert_eq(loop_live(b), 0);
    cr_assert_eq(tern_signal_stop(a, ia), 0);
    loop_free_clean(b);
    loop_free_clean(a);
}

/*
 * The reader stops and hands the source to a watcher on another loop,
 * which stops before its loop runs the handover: the handover does
 * nothing, the source is closed by the heir's stop, and the thread's mask
 * and descriptors are as before the first start.
 */
Test(signal_handover, a_handover_to_a_stopped_heir_does_nothing, .timeout = TEST_TIMEOUT)
{
    tern_loop *a = loop_new_default(), *b = loop_new_default();
    int fds = count_open_fds();
    bool was_blocked = blocked_here(SIGWINCH);
    struct seen sa = {0}, sb = {0};
    tern_id ia, ib;
    cr_assert_eq(tern_signal_start(a, SIGWINCH, on_signal, &sa, &ia), 0);
    cr_assert_eq(tern_signal_start(b, SIGWINCH, on_signal, &sb, &ib), 0);
    cr_assert_eq(tern_signal_stop(a, ia), 0); /* b's watcher inherits, by a post */
    cr_assert_eq(tern_signal_stop(b, ib), 0);
    turns(b, 4);
    turns(a, 2);
    cr_assert_eq(blocked_here(SIGWINCH), was_blocked);
    cr_assert_eq(count_open_fds(), fds, "the moved source was not closed");
    cr_assert_eq(atomic_load(&sa.n) + atomic_load(&sb.n), 0);
    loop_free_clean(b);
    loop_free_clean(a);
}

/*
 * The heir on another loop cannot watch the source it inherited (its
 * loop's descriptor table cannot grow): the source is closed, the signal
 * goes unread while the heir lives, and the heir still stops cleanly.
 * Without the failure the same steps deliver the signal to the heir.
 */
static void heir_takes_over(bool fail)
{
    tern_loop *a = loop_new_default(), *b = loop_new_default();
    int fds = count_open_fds();
    struct seen sa = {0}, sb = {0};
    tern_id ia, ib;
    cr_assert_eq(tern_signal_start(a, SIGWINCH, on_signal, &sa, &ia), 0);
    cr_assert_eq(tern_signal_start(b, SIGWINCH, on_signal, &sb, &ib), 0);
    cr_assert_eq(tern_signal_stop(a, ia), 0);
    if (fail)
        tern__fault_arm(TERN__FAULT_ALLOC, 1);
    turns(b, 1); /* the handover: b watches the source (grows its table) */
    tern__fault_arm(0, 0);
    cr_assert_eq(kill(getpid(), SIGWINCH), 0);
    if (fail) {
        turns(b, 8);
        cr_assert_eq(atomic_load(&sb.n), 0, "a source the heir could not watch was read");
        cr_assert_eq(count_open_fds(), fds, "the source the heir could not watch stayed open");
        /* Its own heir inherits no source either: still unread. */
        struct seen sb2 = {0};
        tern_id ib2;
        cr_assert_eq(tern_signal_start(b, SIGWINCH, on_signal, &sb2, &ib2), 0);
        cr_assert_eq(tern_signal_stop(b, ib), 0);
        cr_assert_eq(kill(getpid(), SIGWINCH), 0);
        turns(b, 8);
        cr_assert_eq(atomic_load(&sb2.n), 0);
        cr_assert_eq(count_open_fds(), fds);
        ib = ib2;
    } else {
        cr_assert(run_until_count(b, &sb.n, 1, 10 * (int64_t)MS, 500));
    }
    cr_assert_eq(tern_signal_stop(b, ib), 0);
    cr_assert_eq(count_open_fds(), fds);
    cr_assert_eq(atomic_load(&sa.n), 0);
    loop_free_clean(b);
    loop_free_clean(a);
}

Test(signal_handover, an_heir_on_another_loop_reads_the_source_it_inherits,
     .timeout = TEST_TIMEOUT)
{
    heir_takes_over(false);
}

Test(signal_handover, an_heir_that_cannot_watch_its_source_leaves_it_unread,
     .timeout = TEST_TIMEOUT)
{
    heir_takes_over(true);
}

/*
 * The reader's heir is a watcher on its own loop when there is one, even
 * if a watcher on another loop comes first in the table: the source stays
 * on the loop that read it, and that loop alone goes on reading.
 */
Test(signal_handover, the_readers_heir_is_on_its_own_loop_first, .timeout = TEST_TIMEOUT)
{
    tern_loop *a = loop_new_default(), *b = loop_new_default();
    struct seen s1 = {0}, s2 = {0}, sb = {0};
    tern_id i1, i2, ib;
    cr_assert_eq(tern_signal_start(a, SIGWINCH, on_signal, &s1, &i1), 0);
    cr_assert_eq(tern_signal_start(a, SIGWINCH, on_signal, &s2, &i2), 0);
    cr_assert_eq(tern_signal_start(b, SIGWINCH, on_signal, &sb, &ib), 0);
    cr_assert_eq(tern_signal_stop(a, i1), 0);
    cr_assert_eq(kill(getpid(), SIGWINCH), 0);
    cr_assert(run_until_count(a, &s2.n, 1, 10 * (int64_t)MS, 500),
              "the source left the loop that still watches the signal");
    cr_assert(run_until_count(b, &sb.n, 1, 10 * (int64_t)MS, 500));
    cr_assert_eq(atomic_load(&s1.n), 0);
    cr_assert_eq(tern_signal_stop(b, ib), 0);
    cr_assert_eq(tern_signal_stop(a, i2), 0);
    loop_free_clean(b);
    loop_free_clean(a);
}

/* Realtime signals queue: each instance is one callback (none merged),
 * and one turn reads at most 16 of them, so a burst cannot hold the loop. */
static unsigned rt_turn_n;
static void on_rt(tern_loop *loop, tern_id id, int signo, void *arg)
{
    (void)loop, (void)id, (void)signo, (void)arg;
    rt_turn_n++;
}

Test(signal_handover, a_queue_of_realtime_instances_is_read_sixteen_per_turn,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    int signo = SIGRTMIN + 1;
    tern_id id;
    cr_assert_eq(tern_signal_start(loop, signo, on_rt, NULL, &id), 0);
    if (!source_masks()) {
        cr_log_info("self-pipe source: realtime instances are merged by the pipe read");
        cr_assert_eq(tern_signal_stop(loop, id), 0);
        loop_free_clean(loop);
        return;
    }
    enum { SENT = 40 };
    for (int i = 0; i < SENT; i++)
        cr_assert_eq(sigqueue(getpid(), signo, (union sigval){.sival_int = i}), 0);
    unsigned total = 0, most = 0;
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (total < SENT && mono_ns() < end) {
        rt_turn_n = 0;
        tern_loop_run_once(loop, 10 * (int64_t)MS);
        total += rt_turn_n;
        most = rt_turn_n > most ? rt_turn_n : most;
    }
    cr_assert_eq(total, SENT, "each queued instance is one callback");
    cr_assert_eq(most, 16, "one turn read %u instances", most);
    cr_assert_eq(tern_signal_stop(loop, id), 0);
    loop_free_clean(loop);
}

/* A backend report for a signal no backend-read watcher reads (out of
 * range, or read through a descriptor here) changes nothing. */
Test(signal_handover, a_backend_report_nobody_reads_by_backend_is_ignored,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    struct seen s = {0};
    tern_id id;
    cr_assert_eq(tern_signal_start(loop, SIGWINCH, on_signal, &s, &id), 0);
    tern__signal_fired(loop, 0, 1);
    tern__signal_fired(loop, -1, 1);
    tern__signal_fired(loop, _NSIG, 1);
    if (tern__sigsource_kind_for(false) != TERN__SIG_BACKEND)
        tern__signal_fired(loop, SIGWINCH, 1);
    turns(loop, 4);
    cr_assert_eq(atomic_load(&s.n), 0);
    cr_assert_eq(tern_signal_stop(loop, id), 0);
    loop_free_clean(loop);
}

/* A reader on its own thread, so followers on the test thread block. */
struct reader {
    int signo;
    struct seen s;
    atomic_bool started, stop, stopped;
};

static void *reader_main(void *arg)
{
    struct reader *r = arg;
    tern_loop *loop = loop_new_default();
    tern_id id;
    cr_assert_eq(tern_signal_start(loop, r->signo, on_signal, &r->s, &id), 0);
    atomic_store(&r->started, true);
    while (!atomic_load(&r->stop))
        tern_loop_run_once(loop, 2 * (int64_t)MS);
    cr_assert_eq(tern_signal_stop(loop, id), 0);
    loop_free_clean(loop);
    atomic_store(&r->stopped, true);
    return NULL;
}

static void reader_start(struct reader *r, pthread_t *t)
{
    cr_assert_eq(pthread_create(t, NULL, reader_main, r), 0);
    cr_assert(wait_for_flag(&r->started));
}

static void reader_end(struct reader *r, pthread_t t)
{
    atomic_store(&r->stop, true);
    cr_assert_eq(pthread_join(t, NULL), 0);
}

/*
 * Two followers on one loop: whichever stops first, the thread keeps the
 * signal blocked while the other watches, and the last stop gives the
 * mask back as the first start found it.
 */
static void two_followers(bool first_started_stops_first)
{
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, SIGUSR2);
    cr_assert_eq(pthread_sigmask(SIG_UNBLOCK, &one, NULL), 0);
    struct reader r = {.signo = SIGUSR2};
    pthread_t t;
    reader_start(&r, &t);
    tern_loop *loop = loop_new_default();
    struct seen s1 = {0}, s2 = {0};
    tern_id i1, i2;
    cr_assert_eq(tern_signal_start(loop, SIGUSR2, on_signal, &s1, &i1), 0);
    cr_assert_eq(tern_signal_start(loop, SIGUSR2, on_signal, &s2, &i2), 0);
    cr_assert_eq(blocked_here(SIGUSR2), source_masks());
    cr_assert_eq(tern_signal_stop(loop, first_started_stops_first ? i1 : i2), 0);
    cr_assert_eq(blocked_here(SIGUSR2), source_masks(),
                 "the thread unblocked the signal while its loop still watches it");
    cr_assert_eq(tern_signal_stop(loop, first_started_stops_first ? i2 : i1), 0);
    cr_assert_not(blocked_here(SIGUSR2), "the last stop kept the signal blocked");
    loop_free_clean(loop);
    reader_end(&r, t);
}

Test(signal_handover, two_followers_stopped_in_start_order_give_the_mask_back,
     .timeout = TEST_TIMEOUT)
{
    two_followers(true);
}

Test(signal_handover, two_followers_stopped_last_first_give_the_mask_back,
     .timeout = TEST_TIMEOUT)
{
    two_followers(false);
}

/*
 * An instance sent to the follower's thread is pending there (the reader
 * on another thread cannot read it): the follower's stop keeps the block,
 * so the instance never runs its default action.
 */
Test(signal_handover, a_follower_with_an_instance_pending_keeps_the_block,
     .timeout = TEST_TIMEOUT)
{
    if (!source_masks()) {
        cr_log_info("self-pipe source: a follower never blocks");
        return;
    }
    struct reader r = {.signo = SIGUSR2};
    pthread_t t;
    reader_start(&r, &t);
    tern_loop *loop = loop_new_default();
    struct seen s = {0};
    tern_id id;
    cr_assert_not(blocked_here(SIGUSR2));
    cr_assert_eq(tern_signal_start(loop, SIGUSR2, on_signal, &s, &id), 0);
    cr_assert(blocked_here(SIGUSR2));
    cr_assert_eq(pthread_kill(pthread_self(), SIGUSR2), 0);
    cr_assert(pending_here(SIGUSR2));
    cr_assert_eq(tern_signal_stop(loop, id), 0);
    cr_assert(blocked_here(SIGUSR2), "unblocked with an instance pending: its default action");
    cr_assert(pending_here(SIGUSR2));
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, SIGUSR2);
    const struct timespec zero = {0, 0};
    cr_assert_eq(sigtimedwait(&one, NULL, &zero), SIGUSR2);
    loop_free_clean(loop);
    reader_end(&r, t);
}

/*
 * Every allocation of a start failing in turn, for the first watcher (it
 * opens the source) and for a follower on this thread (it blocks the
 * signal): each failure returns -ENOMEM and leaves the mask and the
 * descriptors as they were, and a start after it works.
 */
static void nothing_hook(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id, (void)arg;
}

static void start_walk(tern_loop *loop, int signo)
{
    bool was_blocked = blocked_here(signo);
    int fds = count_open_fds();
    bool failed_once = false;
    /* With 0, 1, 2, ... other operations live, so that one walk meets the
     * loop's id map growing (the allocation of the registration itself). */
    enum { FILL = 48 };
    tern_id fill[FILL];
    for (unsigned k = 0; k < FILL; k++) {
        for (uint64_t n = 1; n < 64; n++) {
            struct seen s = {0};
            tern_id id;
            tern__fault_arm(TERN__FAULT_ALLOC, n);
            int rc = tern_signal_start(loop, signo, on_signal, &s, &id);
            bool fired = tern__fault_fired();
            tern__fault_arm(0, 0);
            if (rc == 0) {
                cr_assert_eq(tern_signal_stop(loop, id), 0);
                if (!fired)
                    break;
                continue;
            }
            failed_once = true;
            cr_assert_eq(rc, -ENOMEM, "allocation %llu: %s", (unsigned long long)n,
                         tern_strerror(rc));
            cr_assert_eq(blocked_here(signo), was_blocked, "allocation %llu: the mask changed",
                         (unsigned long long)n);
            cr_assert_eq(count_open_fds(), fds, "allocation %llu: a descriptor leaked",
                         (unsigned long long)n);
            cr_assert_eq(loop_live(loop), k);
        }
        cr_assert_eq(tern_hook_start(loop, TERN_HOOK_CHECK, nothing_hook, NULL, &fill[k]), 0);
    }
    for (unsigned k = 0; k < FILL; k++)
        cr_assert_eq(tern__test_cancel_now(loop, fill[k]), 0);
    cr_assert(failed_once);
    struct seen s = {0};
    tern_id id;
    cr_assert_eq(tern_signal_start(loop, signo, on_signal, &s, &id), 0);
    cr_assert_eq(tern_signal_stop(loop, id), 0);
    cr_assert_eq(blocked_here(signo), was_blocked);
}

Test(signal_handover, a_first_start_failing_part_way_leaves_nothing_behind,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    start_walk(loop, SIGWINCH);
    loop_free_clean(loop);
}

Test(signal_handover, a_follower_start_failing_part_way_gives_the_mask_back,
     .timeout = TEST_TIMEOUT)
{
    struct reader r = {.signo = SIGWINCH};
    pthread_t t;
    reader_start(&r, &t);
    tern_loop *loop = loop_new_default();
    cr_assert_not(blocked_here(SIGWINCH));
    start_walk(loop, SIGWINCH);
    loop_free_clean(loop);
    reader_end(&r, t);
}
