/*
 * The inbound queue (SPEC §1, §2, §7): posts from other threads run on
 * the loop thread (G1) in step 1, none lost, none twice, in order per
 * producer; cancels from other threads wake the loop and take effect in
 * its next turn; producers coalesce wake syscalls.
 */
#include "loop_helpers.h"

/* ---------------------------------------------------------------- */
/* G1: many producers, one consumer thread                           */
/* ---------------------------------------------------------------- */

enum { MAX_PRODUCERS = 8 };

struct post_run {
    tern_loop *loop;
    pthread_t loop_thread;
    unsigned producers;
    unsigned per_producer;
    tern_id keepalive;
    pthread_barrier_t go;
    /* Written only on the loop thread. */
    uint64_t next_seq[MAX_PRODUCERS];
    atomic_uint_fast64_t received; /* read by the joiner thread */
    uint64_t out_of_order, wrong_thread, wrong_step, wrong_current;
    /* Written by producers. */
    atomic_uint_fast64_t refused;
};

/* A post's argument packs the producer index and its sequence number, so
 * no allocation is needed and nothing is shared but the queue. */
static void *pack(unsigned producer, uint64_t seq)
{
    return (void *)(uintptr_t)(((uint64_t)producer << 40) | seq);
}

/* The run in progress; posts carry only packed numbers. */
static struct post_run *current_run;

static void on_post(tern_loop *loop, void *arg)
{
    struct post_run *r = current_run;
    uint64_t v = (uint64_t)(uintptr_t)arg;
    unsigned producer = (unsigned)(v >> 40);
    uint64_t seq = v & ((UINT64_C(1) << 40) - 1);
    if (!pthread_equal(pthread_self(), r->loop_thread))
        r->wrong_thread++;
    if (tern__loop_step(loop) != 1)
        r->wrong_step++;
    if (tern_loop_current() != loop || loop != r->loop)
        r->wrong_current++;
    if (producer >= r->producers || seq != r->next_seq[producer])
        r->out_of_order++;
    else
        r->next_seq[producer] = seq + 1;
    if (atomic_fetch_add(&r->received, 1) + 1 == (uint64_t)r->producers * r->per_producer)
        cr_assert_eq(tern_timer_stop(loop, r->keepalive), 0);
}

struct producer {
    struct post_run *r;
    unsigned index;
};

static void *produce(void *arg)
{
    struct producer *p = arg;
    struct post_run *r = p->r;
    pthread_barrier_wait(&r->go);
    for (uint64_t seq = 0; seq < r->per_producer; seq++) {
        int rc;
        /* max_operations bounds posts not yet run: a refused post never
         * runs, so it is retried with the same sequence number. */
        while ((rc = tern_post(r->loop, on_post, pack(p->index, seq))) == -EAGAIN) {
            atomic_fetch_add(&r->refused, 1);
            sched_yield();
        }
        cr_assert_eq(rc, 0);
    }
    return NULL;
}

/* Joins the producers, then gives the loop a bounded time to receive
 * everything; a lost post would otherwise leave run() blocked on the
 * keep-alive timer until criterion's timeout. */
struct joiner {
    struct post_run *r;
    pthread_t *producers;
    bool gave_up;
};

static void *join_producers(void *arg)
{
    struct joiner *j = arg;
    struct post_run *r = j->r;
    for (unsigned i = 0; i < r->producers; i++)
        pthread_join(j->producers[i], NULL);
    uint64_t total = (uint64_t)r->producers * r->per_producer;
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (atomic_load(&r->received) < total && mono_ns() < end)
        sleep_ns(MS);
    if (atomic_load(&r->received) < total) {
        j->gave_up = true;
        tern_loop_stop(r->loop);
    }
    return NULL;
}

static void never(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
    cr_assert_fail("the keep-alive timer fired");
}

/* Returns how many times producers were refused at max_operations. */
static uint64_t run_producers(unsigned producers, unsigned per_producer, unsigned max_operations)
{
    static struct post_run r;
    memset(&r, 0, sizeof r);
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.max_operations = max_operations;
    r.loop = loop_new_opts(&o);
    r.loop_thread = pthread_self();
    r.producers = producers;
    r.per_producer = per_producer;
    current_run = &r;
    /* The keep-alive timer holds run() open until the last post arrives. */
    cr_assert_eq(tern_timer_start(r.loop, HOUR, 0, never, NULL, &r.keepalive), 0);
    pthread_barrier_init(&r.go, NULL, producers);
    pthread_t t[MAX_PRODUCERS];
    struct producer p[MAX_PRODUCERS];
    for (unsigned i = 0; i < producers; i++) {
        p[i] = (struct producer){ &r, i };
        cr_assert_eq(pthread_create(&t[i], NULL, produce, &p[i]), 0);
    }
    struct joiner j = { .r = &r, .producers = t };
    pthread_t jt;
    cr_assert_eq(pthread_create(&jt, NULL, join_producers, &j), 0);
    int ran = tern_loop_run(r.loop);
    pthread_join(jt, NULL);
    pthread_barrier_destroy(&r.go);

    uint64_t total = (uint64_t)producers * per_producer;
    uint64_t received = atomic_load(&r.received);
    cr_assert_not(j.gave_up, "received %llu of %llu posts: some were lost",
                  (unsigned long long)received, (unsigned long long)total);
    cr_assert_eq(ran, 0);
    cr_assert_eq(received, total, "received %llu of %llu posts", (unsigned long long)received,
                 (unsigned long long)total);
    cr_assert_eq(r.out_of_order, 0, "%llu posts lost, repeated or out of producer order",
                 (unsigned long long)r.out_of_order);
    cr_assert_eq(r.wrong_thread, 0, "G1: %llu posts ran off the loop thread",
                 (unsigned long long)r.wrong_thread);
    cr_assert_eq(r.wrong_step, 0, "%llu posts ran outside step 1",
                 (unsigned long long)r.wrong_step);
    cr_assert_eq(r.wrong_current, 0);
    for (unsigned i = 0; i < producers; i++)
        cr_assert_eq(r.next_seq[i], per_producer);
    tern_loop_stats s = loop_stats(r.loop);
    cr_assert_eq(s.posts, total);
    cr_assert_leq(s.wake_syscalls, total, "more wake syscalls than posts");
    cr_log_info("%u producers x %u posts: %llu wake syscalls, %llu refusals at max_operations %u",
                producers, per_producer, (unsigned long long)s.wake_syscalls,
                (unsigned long long)atomic_load(&r.refused), max_operations);
    loop_free_clean(r.loop);
    return atomic_load(&r.refused);
}

Test(post, g1_posts_from_several_threads_run_on_the_loop_thread, .timeout = TEST_TIMEOUT)
{
    run_producers(4, 5000, 65536);
}

/* The criterion-sized version of post_stress: none lost, none run twice,
 * order per producer kept, with max_operations small enough that
 * producers are refused and retry. */
Test(post, cross_thread_posts_exactly_once_in_producer_order, .timeout = TEST_TIMEOUT)
{
    run_producers(4, 50000, 1024);
}

Test(post, single_producer_order, .timeout = TEST_TIMEOUT)
{
    run_producers(1, 100000, 65536);
}

/*
 * Admission is exact: a post is refused only at max_operations. Here the
 * limit is above every post of the run at once, so no post may be refused,
 * however the producers interleave. A producer preempted between taking
 * its ticket and reading the loop's count of posts run sees posts admitted
 * after its own already run; counted as a wrapped difference, that looked
 * like a full queue.
 */
Test(post, no_post_refused_below_max_operations, .timeout = TEST_TIMEOUT)
{
    enum { PRODUCERS = 8, PER_PRODUCER = 250000 };
    uint64_t refused = run_producers(PRODUCERS, PER_PRODUCER, PRODUCERS * PER_PRODUCER + 1024);
    cr_assert_eq(refused, 0, "%llu posts refused below max_operations",
                 (unsigned long long)refused);
}

/*
 * Producers and the loop on one CPU (threads inherit the creator's
 * affinity): each producer's wake puts the loop on the CPU the producer
 * was using, and the loop yields it back before parking.
 * None lost, none twice, order kept, whoever has the CPU.
 */
Test(post, producers_sharing_the_loops_cpu, .timeout = TEST_TIMEOUT)
{
    cpu_set_t was, one;
    cr_assert_eq(pthread_getaffinity_np(pthread_self(), sizeof was, &was), 0);
    int cpu = sched_getcpu();
    cr_assert_geq(cpu, 0);
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    cr_assert_eq(pthread_setaffinity_np(pthread_self(), sizeof one, &one), 0);
    run_producers(2, 50000, 1024);
    run_producers(1, 100000, 65536);
    cr_assert_eq(pthread_setaffinity_np(pthread_self(), sizeof was, &was), 0);
}

/* ---------------------------------------------------------------- */
/* wake coalescing (SPEC §2)                                         */
/* ---------------------------------------------------------------- */

struct busy {
    tern_loop *loop;
    atomic_uint received;
    unsigned want;          /* posts in all */
    unsigned producers;     /* each posts want / producers */
    atomic_bool loop_busy;  /* the spinner has run: the loop is claimed and busy */
};

static void count_post(tern_loop *loop, void *arg)
{
    (void)loop;
    atomic_fetch_add(&((struct busy *)arg)->received, 1);
}

/* Keeps the ready queue non-empty so the loop never waits: the loop is
 * busy and never announces that it is about to sleep. */
static void spin(tern_loop *loop, void *arg)
{
    struct busy *b = arg;
    atomic_store(&b->loop_busy, true);
    if (atomic_load(&b->received) < b->want)
        cr_assert_eq(tern_defer(loop, spin, b), 0);
}

static void *busy_producer(void *arg)
{
    struct busy *b = arg;
    /* Start once the loop is busy: before its first claim an unclaimed
     * loop counts as asleep, and the first post would rightly wake it. */
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (!atomic_load(&b->loop_busy) && mono_ns() < end)
        sched_yield();
    for (unsigned i = 0; i < b->want / b->producers; i++) {
        int rc;
        while ((rc = tern_post(b->loop, count_post, b)) == -EAGAIN)
            sched_yield();
        if (rc != 0) {
            atomic_fetch_add(&b->received, b->want); /* end the spinner; the count check fails */
            return NULL;
        }
    }
    return NULL;
}

/*
 * A busy loop takes 100,000 posts, from one producer and from two, with at
 * most one wake syscall per 64 posts (SPEC §2, and §9's "≤ 1 wake syscall
 * per 64 posts under load"). The load is the loop's own: a callback that
 * re-defers itself keeps the ready queue non-empty, so the loop never
 * parks, and the producers start only once it runs. That makes the count
 * a property of the wake protocol, not of timing: a loop that never
 * announces sleep must never be woken, whoever gets the CPU when (a
 * protocol that is right makes 0 here; the bound is the spec's).
 */
static void busy_loop_takes_posts(unsigned producers)
{
    static struct busy b;
    memset(&b, 0, sizeof b);
    /* Room for every post at once, so the spinner's own defer is never
     * refused at max_operations while producers run ahead. */
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.max_operations = 1u << 20;
    b.loop = loop_new_opts(&o);
    b.want = 100000;
    b.producers = producers;
    cr_assert_eq(tern_defer(b.loop, spin, &b), 0);
    pthread_t t[2];
    for (unsigned i = 0; i < producers; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, busy_producer, &b), 0);
    cr_assert_eq(tern_loop_run(b.loop), 0);
    for (unsigned i = 0; i < producers; i++)
        pthread_join(t[i], NULL);
    tern_loop_stats s = loop_stats(b.loop);
    cr_assert_eq(s.posts, b.want, "%llu of %u posts ran", (unsigned long long)s.posts, b.want);
    cr_log_info("busy loop, %u producer(s): %llu posts, %llu wake syscalls", producers,
                (unsigned long long)s.posts, (unsigned long long)s.wake_syscalls);
    cr_assert_leq(s.wake_syscalls * 64, s.posts,
                  "%llu wake syscalls for %llu posts to a busy loop (at most 1 per 64)",
                  (unsigned long long)s.wake_syscalls, (unsigned long long)s.posts);
    loop_free_clean(b.loop);
}

Test(post, busy_loop_coalesces_wake_syscalls, .timeout = TEST_TIMEOUT)
{
    busy_loop_takes_posts(1);
}

Test(post, busy_loop_coalesces_wake_syscalls_from_two_producers, .timeout = TEST_TIMEOUT)
{
    busy_loop_takes_posts(2);
}

static void *burst(void *arg)
{
    struct busy *b = arg;
    for (unsigned i = 0; i < b->want; i++)
        cr_assert_eq(tern_post(b->loop, count_post, b), 0);
    return NULL;
}

/* A burst of posts to a loop that nobody runs (so it counts as asleep)
 * costs exactly one wake syscall: the first post notifies, the rest see
 * the loop already notified. */
BACKEND_TEST(post, burst_to_an_idle_loop_wakes_once)
{
    static struct busy b;
    b.loop = loop_new_backend(backend);
    b.want = 1000;
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, burst, &b), 0);
    pthread_join(t, NULL);
    cr_assert_eq(loop_stats(b.loop).wake_syscalls, 1, "%llu wake syscalls for one burst",
                 (unsigned long long)loop_stats(b.loop).wake_syscalls);
    /* Pending posts are live operations, with the credit the burst's last
     * run took ahead and has not spent: at most 63, a run's credit. */
    unsigned live = loop_live(b.loop);
    cr_assert(live >= b.want && live < b.want + 64, "%u live operations for %u pending posts",
              live, b.want);
    cr_assert_eq(tern_loop_run(b.loop), 0);
    cr_assert_eq(atomic_load(&b.received), b.want);
    cr_assert_eq(loop_live(b.loop), 0, "the run's unspent credit went back with its close");
    /* After the loop ran and stopped, the next burst wakes once more. */
    cr_assert_eq(pthread_create(&t, NULL, burst, &b), 0);
    pthread_join(t, NULL);
    cr_assert_eq(loop_stats(b.loop).wake_syscalls, 2);
    cr_assert_eq(tern_loop_run(b.loop), 0);
    cr_assert_eq(atomic_load(&b.received), 2 * b.want);
    loop_free_clean(b.loop);
}

/* A post from another thread wakes a loop blocked in step 4. */
struct waker {
    tern_loop *loop;
    atomic_uint ran;
    bool saw_step_4;
};

static void stop_keepalive(tern_loop *loop, void *arg)
{
    struct waker *w = arg;
    atomic_fetch_add(&w->ran, 1);
    tern_loop_stop(loop);
}

static void *post_when_blocked(void *arg)
{
    struct waker *w = arg;
    w->saw_step_4 = wait_for_step(w->loop, 4);
    cr_assert_eq(tern_post(w->loop, stop_keepalive, w), 0);
    return NULL;
}

BACKEND_TEST(post, foreign_post_wakes_a_blocked_loop)
{
    struct waker w = { .loop = loop_new_backend(backend) };
    tern_id keep = 0;
    cr_assert_eq(tern_timer_start(w.loop, HOUR, 0, never, NULL, &keep), 0);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, post_when_blocked, &w), 0);
    cr_assert_eq(tern_loop_run(w.loop), 1);
    pthread_join(t, NULL);
    cr_assert(w.saw_step_4);
    cr_assert_eq(atomic_load(&w.ran), 1);
    cr_assert_geq(loop_stats(w.loop).wake_syscalls, 1);
    cr_assert_eq(tern_timer_stop(w.loop, keep), 0);
    loop_free_clean(w.loop);
}

/* ---------------------------------------------------------------- */
/* cross-thread cancel                                               */
/* ---------------------------------------------------------------- */

struct canceller {
    tern_loop *loop;
    tern_id id;
    int rc;
    bool saw_step_4;
    atomic_bool returned; /* set by the loop thread after run_once */
    bool needed_rescue;
};

static void *cancel_when_blocked(void *arg)
{
    struct canceller *c = arg;
    c->saw_step_4 = wait_for_step(c->loop, 4);
    c->rc = tern_cancel(c->loop, c->id);
    /* Bounded liveness: if the cancel did not wake the loop, wake it by
     * other means so the test fails instead of hanging for an hour. */
    if (!wait_for_flag(&c->returned)) {
        c->needed_rescue = true;
        tern_loop_stop(c->loop);
    }
    return NULL;
}

/*
 * A cancel from another thread takes effect without an unrelated wake-up:
 * the loop blocks in run_once(-1) with one 1-hour timer armed; another
 * thread cancels it. The cancel itself must wake the loop (nothing else
 * could), and the loop's next turn resolves it in step 1: the timer is
 * gone and the loop has nothing live.
 */
Test(post, foreign_cancel_wakes_the_loop_and_takes_effect_next_turn, .timeout = TEST_TIMEOUT)
{
    struct canceller c = { .loop = loop_new_default(), .rc = 1 };
    cr_assert_eq(tern_timer_start(c.loop, HOUR, 0, never, NULL, &c.id), 0);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, cancel_when_blocked, &c), 0);
    uint64_t wakes_before = loop_stats(c.loop).wake_syscalls;
    int more = tern_loop_run_once(c.loop, -1);
    atomic_store(&c.returned, true);
    pthread_join(t, NULL);
    cr_assert(c.saw_step_4, "the loop never blocked");
    cr_assert_eq(c.rc, TERN_CANCEL_REQUESTED, "a cross-thread cancel is queued, got %d", c.rc);
    cr_assert_not(c.needed_rescue, "the cancel did not wake the blocked loop");
    cr_assert_gt(loop_stats(c.loop).wake_syscalls, wakes_before, "woken without a syscall?");
    /* The woken turn may or may not have resolved it already (if the
     * cancel arrived before step 4 blocked, step 1 came first); the next
     * turn certainly has. */
    if (more)
        cr_assert_eq(tern_loop_run_once(c.loop, 0), 0, "the cancel was not resolved in step 1");
    cr_assert_eq(loop_live(c.loop), 0, "the cancelled timer is still live");
    cr_assert_eq(tern_timer_stop(c.loop, c.id), -ENOENT);
    cr_assert_eq(tern_loop_next_timeout(c.loop), -1);
    loop_free_clean(c.loop);
}

static void *cancel_then_rescue(void *arg)
{
    struct canceller *c = arg;
    c->saw_step_4 = wait_for_step(c->loop, 4);
    c->rc = tern_cancel(c->loop, c->id);
    if (!wait_for_flag(&c->returned)) {
        c->needed_rescue = true;
        tern_loop_stop(c->loop);
    }
    return NULL;
}

/* The same through run(): with its only timer cancelled from another
 * thread, run() returns 0 because nothing live remains. */
Test(post, foreign_cancel_of_the_last_timer_ends_run, .timeout = TEST_TIMEOUT)
{
    struct canceller c = { .loop = loop_new_default(), .rc = 1 };
    cr_assert_eq(tern_timer_start(c.loop, HOUR, 0, never, NULL, &c.id), 0);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, cancel_then_rescue, &c), 0);
    cr_assert_eq(tern_loop_run(c.loop), 0);
    atomic_store(&c.returned, true);
    pthread_join(t, NULL);
    cr_assert_eq(c.rc, TERN_CANCEL_REQUESTED);
    cr_assert_not(c.needed_rescue);
    loop_free_clean(c.loop);
}

/* A cross-thread cancel of an id that is no longer live (or never was)
 * is ignored when resolved: it cancels nothing else. */
static void *cancel_bogus(void *arg)
{
    struct canceller *c = arg;
    c->saw_step_4 = wait_for_step(c->loop, 4);
    /* Ids on both sides of the live one, and far away: none is live. */
    const tern_id bogus[] = { c->id + 1, c->id + 2, c->id - 1, c->id + 1000,
                              c->id ^ (UINT64_C(1) << 40) };
    c->rc = 0;
    for (size_t i = 0; i < sizeof bogus / sizeof bogus[0]; i++) {
        if (bogus[i] == 0)
            continue;
        int rc = tern_cancel(c->loop, bogus[i]);
        if (rc != TERN_CANCEL_REQUESTED) /* queued: whether the id is known comes later */
            c->rc = rc;
    }
    cr_assert_eq(tern_cancel(c->loop, 0), -EINVAL);
    /* The post runs after this thread is gone: its argument is static. */
    static struct waker w;
    cr_assert_eq(tern_post(c->loop, stop_keepalive, &w), 0);
    return NULL;
}

Test(post, foreign_cancel_of_unknown_id_is_ignored, .timeout = TEST_TIMEOUT)
{
    struct canceller c = { .loop = loop_new_default(), .rc = 1 };
    /* A stopped timer first, so the live one's lower neighbour is a stale
     * id rather than 0. */
    tern_id stale = 0;
    cr_assert_eq(tern_timer_start(c.loop, HOUR, 0, never, NULL, &stale), 0);
    cr_assert_eq(tern_timer_stop(c.loop, stale), 0);
    cr_assert_eq(tern_timer_start(c.loop, HOUR, 0, never, NULL, &c.id), 0);
    cr_assert_gt(c.id, 1);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, cancel_bogus, &c), 0);
    cr_assert_eq(tern_loop_run(c.loop), 1, "stopped by the post with the timer live");
    pthread_join(t, NULL);
    cr_assert(c.rc == 0 || c.rc == -ENOENT, "got %d", c.rc);
    tern_loop_run_once(c.loop, 0); /* resolve anything still queued */
    cr_assert_eq(loop_live(c.loop), 1, "an unknown id cancelled the live timer");
    cr_assert_eq(tern_timer_stop(c.loop, c.id), 0);
    loop_free_clean(c.loop);
}

/*
 * Step 1 runs the posted functions first, then resolves cancels. To get
 * a cancel and a post into one splice, the loop thread holds step 2 (in a
 * deferred callback) while another thread queues the cancel and then the
 * post; the next step 1 takes both, and the post must still see the timer
 * live (tern_ref succeeds), after which the cancel resolves.
 */
struct order_probe {
    tern_loop *loop;
    tern_id id;
    int ref_rc_in_post;
    atomic_bool go, queued, post_ran;
};

static void probe_post(tern_loop *loop, void *arg)
{
    struct order_probe *p = arg;
    p->ref_rc_in_post = tern_ref(loop, p->id);
    atomic_store(&p->post_ran, true);
}

static void *cancel_then_post(void *arg)
{
    struct order_probe *p = arg;
    cr_assert(wait_for_flag(&p->go));
    cr_assert_eq(tern_cancel(p->loop, p->id), TERN_CANCEL_REQUESTED);
    cr_assert_eq(tern_post(p->loop, probe_post, p), 0);
    atomic_store(&p->queued, true);
    return NULL;
}

static void hold_step_2(tern_loop *loop, void *arg)
{
    (void)loop;
    struct order_probe *p = arg;
    atomic_store(&p->go, true);
    cr_assert(wait_for_flag(&p->queued));
}

Test(post, step_1_runs_posts_before_resolving_cancels, .timeout = TEST_TIMEOUT)
{
    struct order_probe p = { .loop = loop_new_default(), .ref_rc_in_post = 1 };
    cr_assert_eq(tern_timer_start(p.loop, HOUR, 0, never, NULL, &p.id), 0);
    cr_assert_eq(tern_defer(p.loop, hold_step_2, &p), 0);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, cancel_then_post, &p), 0);
    cr_assert_eq(tern_loop_run_once(p.loop, 0), 1);
    pthread_join(t, NULL);
    cr_assert_not(atomic_load(&p.post_ran));
    cr_assert_eq(tern_loop_run_once(p.loop, 0), 0, "the cancel was not resolved in this step 1");
    cr_assert(atomic_load(&p.post_ran));
    cr_assert_eq(p.ref_rc_in_post, 0, "the cancel resolved before the post ran (%d)",
                 p.ref_rc_in_post);
    loop_free_clean(p.loop);
}

/* ---------------------------------------------------------------- */
/* runs: a thread's posts travel together                          */
/* ---------------------------------------------------------------- */

static void count_plain(tern_loop *loop, void *arg)
{
    (void)loop;
    ++*(unsigned *)arg;
}

/*
 * One thread's posts to a loop that is not running: accepted up to
 * max_operations exactly, across several blocks of records, whatever
 * credit its runs took ahead; refused after; and once the loop has run
 * them, the whole bound is there again (a run's unspent credit went back
 * when the loop closed it).
 */
Test(post, one_thread_is_refused_exactly_at_max_operations, .timeout = TEST_TIMEOUT)
{
    enum { LIMIT = 700 }; /* more than two blocks of one run's posts */
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.max_operations = LIMIT;
    tern_loop *loop = loop_new_opts(&o);
    tern__test_inbound_fresh_block();
    unsigned ran = 0;
    for (int round = 0; round < 3; round++) {
        unsigned accepted = 0;
        int rc;
        while ((rc = tern_post(loop, count_plain, &ran)) == 0)
            accepted++;
        cr_assert_eq(rc, -EAGAIN);
        cr_assert_eq(accepted, LIMIT, "round %d: %u posts accepted, max_operations %u", round,
                     accepted, LIMIT);
        cr_assert_eq(loop_live(loop), LIMIT);
        cr_assert_eq(tern_loop_run(loop), 0);
        cr_assert_eq(ran, (unsigned)(round + 1) * LIMIT);
        cr_assert_eq(loop_live(loop), 0);
    }
    loop_free_clean(loop);
}

struct ordered {
    unsigned next, wrong;
};

static struct ordered order_a, order_b;

static void seq_a(tern_loop *loop, void *arg)
{
    (void)loop;
    order_a.wrong += (uintptr_t)arg != order_a.next;
    order_a.next++;
}

static void seq_b(tern_loop *loop, void *arg)
{
    (void)loop;
    order_b.wrong += (uintptr_t)arg != order_b.next;
    order_b.next++;
}

/*
 * A thread that posts to two loops in turn starts a new run at every
 * switch, and leaves the other loop's run open behind it: each loop still
 * runs that thread's posts once each, in the order they were posted,
 * whatever the pattern of switches.
 */
Test(post, a_thread_posting_to_two_loops_keeps_each_ones_order, .timeout = TEST_TIMEOUT)
{
    tern_loop *a = loop_new_default();
    tern_loop *b = loop_new_default();
    uintptr_t na = 0, nb = 0;
    srand(136);
    for (int i = 0; i < 4000; i++) {
        unsigned k = 1 + (unsigned)rand() % 300;
        bool to_a = rand() & 1;
        for (unsigned j = 0; j < k; j++)
            cr_assert_eq(
                to_a ? tern_post(a, seq_a, (void *)na++) : tern_post(b, seq_b, (void *)nb++), 0);
        if (rand() % 8 == 0) /* sometimes a loop takes what it has mid-run */
            cr_assert_geq(tern_loop_run_once(to_a ? a : b, 0), 0);
    }
    cr_assert_eq(tern_loop_run(a), 0);
    cr_assert_eq(tern_loop_run(b), 0);
    cr_assert_eq(order_a.next, na);
    cr_assert_eq(order_b.next, nb);
    cr_assert_eq(order_a.wrong, 0, "%u of loop a's posts out of order", order_a.wrong);
    cr_assert_eq(order_b.wrong, 0, "%u of loop b's posts out of order", order_b.wrong);
    loop_free_clean(a);
    loop_free_clean(b);
}

/*
 * A backlog past the spare list's bound: every post runs once, and the
 * blocks come back. The first time, the list keeps at most its starting
 * bound (plus one slab): whole slabs past it are unmapped, none while one
 * of its blocks still holds posts (they would be read from unmapped
 * memory). The second burst has to map slabs again, so the bound rises
 * to what it mapped, and the third maps nothing new. Nothing is lost:
 * every mapped block is on the list but the one the thread carves from.
 */
Test(post, a_backlog_past_the_spare_bound_gives_its_blocks_back, .timeout = TEST_TIMEOUT)
{
    struct tern__test_blocks b;
    tern__test_inbound_blocks(&b);
    cr_assert_eq(b.bound, b.spare_max);
    /* A block carries at most 252 posts of one run. */
    unsigned n = (b.spare_max + 8 * b.slab) * 256;
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.max_operations = n + 1024;
    tern_loop *loop = loop_new_opts(&o);
    unsigned ran = 0, kept[3];
    for (int round = 0; round < 3; round++) {
        for (unsigned i = 0; i < n; i++)
            cr_assert_eq(tern_post(loop, count_plain, &ran), 0);
        tern__test_inbound_blocks(&b);
        cr_assert_gt(b.mapped - b.spare, b.spare_max + 8 * b.slab - 8,
                     "round %d: only %u blocks out for a backlog of %u posts", round,
                     b.mapped - b.spare, n);
        cr_assert_eq(tern_loop_run(loop), 0);
        cr_assert_eq(ran, (unsigned)(round + 1) * n);
        tern__test_inbound_blocks(&b);
        cr_assert_leq(b.spare, b.bound + b.slab, "round %d: %u spare blocks kept, bound %u",
                      round, b.spare, b.bound);
        cr_assert_leq(b.bound, b.spare_ceiling);
        cr_assert_eq(b.mapped - b.spare, 1, "round %d: %u blocks out, not the carving one",
                     round, b.mapped - b.spare);
        kept[round] = b.mapped;
    }
    cr_assert_leq(kept[0], b.spare_max + b.slab, "the first burst kept %u blocks", kept[0]);
    cr_assert_gt(kept[1], b.spare_max + 8 * b.slab - 8, "the second burst kept %u", kept[1]);
    cr_assert_eq(kept[2], kept[1], "the third burst mapped %u blocks more", kept[2] - kept[1]);
    tern__test_inbound_fresh_block();
    tern__test_inbound_blocks(&b);
    cr_assert_eq(b.mapped, b.spare, "%u blocks mapped, %u spare", b.mapped, b.spare);
    loop_free_clean(loop);
}

/*
 * A run the loop holds open is closed when the loop is let go. The host
 * below pumps the loop itself: its own post opens a run, run_once runs it
 * and returns. Were the run left open, the host's next post would join it
 * without waking anyone, and a host asleep on the backend descriptor would
 * never learn of it; and with its posts all run, nothing may stay pending
 * (next_timeout -1, or the host would spin).
 */
Test(post, a_run_held_open_is_closed_when_the_loop_is_let_go, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    int fd = tern_loop_backend_fd(loop);
    unsigned ran = 0;
    for (unsigned round = 1; round <= 4; round++) {
        cr_assert_eq(tern_post(loop, count_plain, &ran), 0);
        cr_assert(fd_readable_now(fd, 0), "round %u: a post left the backend fd quiet", round);
        cr_assert_eq(tern_loop_next_timeout(loop), 0, "a pending post means ready now");
        cr_assert_eq(tern_loop_run_once(loop, 0), 0);
        cr_assert_eq(ran, round);
        cr_assert_eq(tern_loop_next_timeout(loop), -1, "round %u: the run still pending", round);
        cr_assert_not(fd_readable_now(fd, 0), "round %u: backend fd readable after pumping",
                      round);
    }
    loop_free_clean(loop);
}

struct repost {
    unsigned left, ran, same_turn;
    uint64_t last_turn;
};

static void repost(tern_loop *loop, void *arg)
{
    struct repost *r = arg;
    uint64_t turn = loop_stats(loop).turns;
    r->same_turn += r->ran > 0 && turn == r->last_turn;
    r->last_turn = turn;
    r->ran++;
    if (--r->left > 0)
        cr_assert_eq(tern_post(loop, repost, r), 0);
}

/*
 * A post that posts again, on a loop that holds the thread's run open
 * from turn to turn: each new post joins that run, and still runs in a
 * later turn than the post that made it (a drain runs only what its
 * runs held when it read them), so such a chain never keeps one turn
 * going.
 */
Test(post, a_post_made_by_a_post_runs_next_turn_while_its_run_is_open, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    struct repost r = {.left = 200};
    cr_assert_eq(tern_post(loop, repost, &r), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(r.ran, 200);
    cr_assert_eq(r.same_turn, 0, "%u posts ran in the turn of the post that made them",
                 r.same_turn);
    loop_free_clean(loop);
}
