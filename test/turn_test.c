/*
 * The five-step turn (SPEC §1 "The turn"): which step runs which
 * callbacks (G2), what carries over to the next turn, the two clock
 * refreshes (steps 3 and 5, one test each), and the dispatch_batch bound.
 */
#include "loop_helpers.h"

/* ---------------------------------------------------------------- */
/* G2: every user callback but a posted function runs in step 2       */
/* ---------------------------------------------------------------- */

struct steps {
    atomic_uint calls;
    atomic_uint wrong; /* callbacks that ran outside their step */
    int expect;
};

static void note_step(tern_loop *loop, struct steps *s)
{
    atomic_fetch_add(&s->calls, 1);
    if (tern__loop_step(loop) != s->expect)
        atomic_fetch_add(&s->wrong, 1);
}

static void step_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)id;
    note_step(loop, arg);
}

static void step_fn(tern_loop *loop, void *arg)
{
    note_step(loop, arg);
}

static void step_io(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    (void)fd;
    (void)events;
    note_step(loop, arg);
    tern_io_stop(loop, id);
}

Test(turn, g2_timer_io_defer_callbacks_run_in_step_2, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    struct steps s = { .expect = 2 };
    int sp[2];
    make_socketpair(sp);
    cr_assert_eq(tern__loop_step(loop), 0, "step outside a turn");
    cr_assert_eq(tern_timer_start(loop, 0, 0, step_timer, &s, NULL), 0);
    cr_assert_eq(tern_timer_start(loop, MS, MS, step_timer, &s, NULL), 0);
    cr_assert_eq(tern_defer(loop, step_fn, &s), 0);
    cr_assert_eq(tern_io_start(loop, sp[0], TERN_WRITABLE, step_io, &s, NULL), 0);
    /* Three turns of the repeating timer, then stop everything. */
    for (int i = 0; i < 1000 && atomic_load(&s.calls) < 6; i++)
        tern_loop_run_once(loop, -1);
    cr_assert_geq(atomic_load(&s.calls), 6);
    cr_assert_eq(atomic_load(&s.wrong), 0, "%u callbacks ran outside step 2",
                 atomic_load(&s.wrong));
    cr_assert_eq(tern__loop_step(loop), 0);
    close(sp[0]);
    close(sp[1]);
    tern_loop_free(loop); /* the repeating timer is still live: teardown ends it */
}

struct job_probe {
    atomic_uint done;
    atomic_uint wrong;
    atomic_bool worker_saw_no_loop;
};

static void *probe_work(tern_job *job, void *arg)
{
    (void)job;
    struct job_probe *p = arg;
    atomic_store(&p->worker_saw_no_loop, tern_loop_current() == NULL);
    return arg;
}

static void probe_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)id;
    struct job_probe *p = arg;
    if (tern__loop_step(loop) != 2 || status != 0 || result != arg)
        atomic_fetch_add(&p->wrong, 1);
    atomic_fetch_add(&p->done, 1);
}

/* G2 for pool completions, and G3's "NULL on pool workers". */
Test(turn, g2_job_completions_run_in_step_2, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    struct job_probe p = { 0 };
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, probe_work, probe_done, &p, NULL), 0);
    cr_assert_eq(tern_submit(loop, TERN_LONG, probe_work, probe_done, &p, NULL), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&p.done), 2);
    cr_assert_eq(atomic_load(&p.wrong), 0);
    cr_assert(atomic_load(&p.worker_saw_no_loop), "tern_loop_current() was not NULL on a worker");
    loop_free_clean(loop);
}

Test(turn, g2_posted_functions_run_in_step_1, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    struct steps s = { .expect = 1 };
    for (int i = 0; i < 10; i++)
        cr_assert_eq(tern_post(loop, step_fn, &s), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&s.calls), 10);
    cr_assert_eq(atomic_load(&s.wrong), 0, "a posted function ran outside step 1");
    loop_free_clean(loop);
}

/* ---------------------------------------------------------------- */
/* order within and across turns                                     */
/* ---------------------------------------------------------------- */

struct trace {
    char log[64];
    atomic_uint n;
};

static void trace_fn(tern_loop *loop, void *arg);

struct tagged {
    struct trace *t;
    char tag;
};

static void trace_fn(tern_loop *loop, void *arg)
{
    (void)loop;
    struct tagged *g = arg;
    unsigned i = atomic_fetch_add(&g->t->n, 1);
    if (i < sizeof g->t->log - 1)
        g->t->log[i] = g->tag;
}

static void trace_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)id;
    trace_fn(loop, arg);
}

/* Step 1 (posts) runs before step 2 (deferred callbacks, expired
 * timers), whatever order they were queued in. */
Test(turn, posts_run_before_the_drain, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    struct trace t = { 0 };
    struct tagged d = { &t, 'd' }, p = { &t, 'p' }, m = { &t, 't' };
    cr_assert_eq(tern_timer_start(loop, 0, 0, trace_timer, &m, NULL), 0);
    cr_assert_eq(tern_loop_run_once(loop, 0), 1); /* step 5 puts the timer in the ready queue */
    cr_assert_eq(tern_defer(loop, trace_fn, &d), 0);
    cr_assert_eq(tern_post(loop, trace_fn, &p), 0);
    cr_assert_eq(tern_loop_run_once(loop, 0), 0);
    cr_assert_str_eq(t.log, "ptd", "order was %s", t.log);
    loop_free_clean(loop);
}

static void defer_again(tern_loop *loop, void *arg)
{
    struct tagged *g = arg;
    trace_fn(loop, g);
    if (atomic_load(&g->t->n) == 1)
        cr_assert_eq(tern_defer(loop, defer_again, g), 0);
}

/* What is deferred during step 2 runs in the next turn's step 2. */
Test(turn, defer_during_step_2_runs_next_turn, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    struct trace t = { 0 };
    struct tagged g = { &t, 'a' };
    cr_assert_eq(tern_defer(loop, defer_again, &g), 0);
    cr_assert_eq(tern_loop_run_once(loop, 0), 1, "the re-deferred callback is live");
    cr_assert_eq(atomic_load(&t.n), 1, "a callback deferred in step 2 ran in the same step 2");
    cr_assert_eq(tern_loop_next_timeout(loop), 0);
    cr_assert_eq(tern_loop_run_once(loop, 0), 0);
    cr_assert_eq(atomic_load(&t.n), 2);
    loop_free_clean(loop);
}

/* A post made from a callback on the loop thread runs in a later step 1,
 * not in the middle of the current drain. */
static void post_from_callback(tern_loop *loop, void *arg)
{
    struct tagged *g = arg;
    trace_fn(loop, g);
    cr_assert_eq(tern_post(loop, trace_fn, g), 0);
}

Test(turn, post_from_the_loop_thread_runs_next_turn, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    struct trace t = { 0 };
    struct tagged g = { &t, 'a' };
    cr_assert_eq(tern_defer(loop, post_from_callback, &g), 0);
    cr_assert_eq(tern_loop_run_once(loop, 0), 1);
    cr_assert_eq(atomic_load(&t.n), 1);
    cr_assert_eq(tern_loop_next_timeout(loop), 0, "a pending post means ready now");
    cr_assert_eq(tern_loop_run_once(loop, 0), 0);
    cr_assert_eq(atomic_load(&t.n), 2);
    loop_free_clean(loop);
}

static void io_count_cb(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    (void)loop;
    (void)id;
    (void)fd;
    (void)events;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

/* Readiness found in step 4 is dispatched in the next turn's step 2. */
BACKEND_TEST(turn, readiness_runs_in_the_next_turn)
{
    tern_loop *loop = loop_new_backend(backend);
    int p[2];
    make_pipe(p);
    atomic_uint n = 0;
    tern_id id = 0;
    write_byte(p[1]);
    cr_assert_eq(tern_io_start(loop, p[0], TERN_READABLE, io_count_cb, &n, &id), 0);
    cr_assert_eq(tern_loop_run_once(loop, 0), 1);
    cr_assert_eq(atomic_load(&n), 0, "readiness from step 4 ran before the next step 2");
    cr_assert_eq(tern_loop_next_timeout(loop), 0, "the recorded readiness is ready now");
    cr_assert_eq(tern_loop_run_once(loop, 0), 1);
    cr_assert_eq(atomic_load(&n), 1);
    cr_assert_eq(tern_io_stop(loop, id), 0);
    close(p[0]);
    close(p[1]);
    loop_free_clean(loop);
}

/* ---------------------------------------------------------------- */
/* the two clock refreshes                                           */
/* ---------------------------------------------------------------- */

static void count_cb(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

static void sleep_30ms(tern_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
    sleep_ns(30 * MS);
}

/*
 * Step 3 refreshes the clock before computing the wait. A 10 ms timer is
 * armed, then a deferred callback spends 30 ms in step 2: the refreshed
 * clock sees the timer overdue and waits 0. With the clock left as it was
 * before step 2, step 3 would compute a wait of about 10 ms.
 */
Test(turn, step_3_refreshes_the_clock_before_computing_the_wait, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    atomic_uint fired = 0;
    cr_assert_eq(tern_timer_start(loop, 10 * MS, 0, count_cb, &fired, NULL), 0);
    cr_assert_eq(tern_defer(loop, sleep_30ms, NULL), 0);
    cr_assert_eq(tern_loop_run_once(loop, -1), 1);
    cr_assert_eq(tern__loop_last_wait(loop), 0,
                 "step 3 computed a wait of %lld ns for an overdue timer",
                 (long long)tern__loop_last_wait(loop));
    cr_assert_eq(atomic_load(&fired), 0, "a deadline ran before the next step 2");
    cr_assert_eq(tern_loop_run_once(loop, 0), 0);
    cr_assert_eq(atomic_load(&fired), 1);
    loop_free_clean(loop);
}

/*
 * Step 5 refreshes the clock after the wait. run_once(-1) with one 2 ms
 * timer blocks in step 4 until the deadline; step 5's fresh clock must see
 * it expired and put it in the ready queue, so right afterwards the loop
 * has work ready now (next_timeout 0) and the callback has not run yet.
 * With the clock left at step 3's value, step 5 would see nothing expired.
 */
Test(turn, step_5_refreshes_the_clock_before_firing_deadlines, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    /* The test proves something only when step 4 actually blocked for the
     * timer; a very slow run (valgrind) may reach step 3 with the timer
     * already overdue, so the delay grows until a turn blocks. */
    bool blocked = false;
    for (uint64_t delay = 2 * MS; delay <= 2 * SEC && !blocked; delay *= 10) {
        atomic_uint fired = 0;
        cr_assert_eq(tern_timer_start(loop, delay, 0, count_cb, &fired, NULL), 0);
        uint64_t before = tern_loop_now(loop);
        cr_assert_eq(tern_loop_run_once(loop, -1), 1);
        blocked = tern__loop_last_wait(loop) > 0;
        if (blocked) {
            cr_assert_geq(tern_loop_now(loop), before + delay,
                          "step 5 left the clock before the deadline");
            cr_assert_eq(atomic_load(&fired), 0, "the timer callback ran outside the next step 2");
            cr_assert_eq(tern_loop_next_timeout(loop), 0,
                         "step 5 did not move the expired timer to the ready queue");
        }
        cr_assert_eq(tern_loop_run_once(loop, 0), 0);
        cr_assert_eq(atomic_load(&fired), 1);
    }
    cr_assert(blocked, "the loop never blocked for a timer");
    loop_free_clean(loop);
}

/* ---------------------------------------------------------------- */
/* dispatch_batch                                                    */
/* ---------------------------------------------------------------- */

static void count_fn(tern_loop *loop, void *arg)
{
    (void)loop;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

static tern_loop *loop_with_batch(unsigned batch)
{
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.dispatch_batch = batch;
    return loop_new_opts(&o);
}

/* Step 2 runs at most dispatch_batch callbacks; the rest stay ready. */
Test(turn, dispatch_batch_bounds_each_drain, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_with_batch(4);
    atomic_uint n = 0;
    for (int i = 0; i < 10; i++)
        cr_assert_eq(tern_defer(loop, count_fn, &n), 0);
    cr_assert_eq(tern_loop_run_once(loop, -1), 1);
    cr_assert_eq(atomic_load(&n), 4);
    cr_assert_eq(tern__loop_last_wait(loop), 0, "ready work left over must not wait");
    cr_assert_eq(loop_stats(loop).events, 4);
    cr_assert_eq(loop_live(loop), 6);
    cr_assert_eq(tern_loop_run_once(loop, -1), 1);
    cr_assert_eq(atomic_load(&n), 8);
    cr_assert_eq(tern_loop_run_once(loop, -1), 0);
    cr_assert_eq(atomic_load(&n), 10);
    loop_free_clean(loop);
}

/* The bound covers expired timers too: ten due at once take three turns
 * with a batch of four, in arming order. */
static void order_cb(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    struct tagged *g = arg;
    trace_fn(loop, g);
}

Test(turn, dispatch_batch_bounds_expired_timers, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_with_batch(4);
    struct trace t = { 0 };
    struct tagged g[10];
    for (int i = 0; i < 10; i++) {
        g[i] = (struct tagged){ &t, (char)('0' + i) };
        cr_assert_eq(tern_timer_start(loop, 0, 0, order_cb, &g[i], NULL), 0);
    }
    cr_assert_eq(tern_loop_run_once(loop, 0), 1); /* step 5 expires all ten */
    cr_assert_eq(atomic_load(&t.n), 0);
    cr_assert_eq(tern_loop_run_once(loop, 0), 1);
    cr_assert_eq(atomic_load(&t.n), 4);
    cr_assert_eq(tern_loop_run_once(loop, 0), 1);
    cr_assert_eq(atomic_load(&t.n), 8);
    cr_assert_eq(tern_loop_run_once(loop, 0), 0);
    cr_assert_str_eq(t.log, "0123456789");
    loop_free_clean(loop);
}

/*
 * Finished jobs wait in step 2 behind one entry of the ready queue, in the
 * order step 1 took them. When the batch ends with some of them left, what
 * was queued after that entry keeps its place: the next turn's results run
 * after it, not with the leftovers. Batch of two: jobs 1-4 are taken in
 * one turn (in the order they finished); the first done defers D and
 * submits 5 and 6, which are on the ring before the next turn takes them,
 * while two of 1-4 still wait.
 */
static atomic_uint results_pushed;

static void count_push(tern_loop *loop)
{
    (void)loop;
    atomic_fetch_add(&results_pushed, 1);
}

static struct tagged order_jobs[6], order_defer;

static void *tag_work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

static void tag_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)id;
    struct tagged *g = arg;
    cr_assert_eq(status, 0);
    cr_assert_eq(result, arg);
    trace_fn(loop, g);
    if (atomic_load(&g->t->n) == 1) { /* the first done */
        cr_assert_eq(tern_defer(loop, trace_fn, &order_defer), 0);
        for (int i = 4; i < 6; i++)
            cr_assert_eq(tern_submit(loop, TERN_BOUNDED, tag_work, tag_done, &order_jobs[i], NULL),
                         0);
    }
}

static bool wait_pushed(unsigned n)
{
    for (int i = 0; i < 20000 && atomic_load(&results_pushed) < n; i++)
        sleep_ns(MS / 10);
    return atomic_load(&results_pushed) >= n;
}

Test(turn, job_results_left_by_the_batch_keep_their_place, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_with_batch(2);
    struct trace t = { 0 };
    for (int i = 0; i < 6; i++)
        order_jobs[i] = (struct tagged){ &t, (char)('1' + i) };
    order_defer = (struct tagged){ &t, 'D' };
    atomic_store(&tern__handback_pushed, count_push);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(tern_submit(loop, TERN_BOUNDED, tag_work, tag_done, &order_jobs[i], NULL), 0);
    cr_assert(wait_pushed(4), "four jobs never finished");
    cr_assert_eq(tern_loop_run_once(loop, 0), 1);
    cr_assert_eq(atomic_load(&t.n), 2);
    cr_assert(wait_pushed(6), "the two jobs submitted from done never finished");
    while (tern_loop_run_once(loop, 0) != 0)
        ;
    atomic_store(&tern__handback_pushed, NULL);
    cr_assert_eq(atomic_load(&t.n), 7, "order was %s", t.log);
    cr_assert_eq(t.log[4], 'D', "D ran out of its place: %s", t.log);
    for (int i = 0; i < 7; i++)
        cr_assert(i < 4 ? t.log[i] >= '1' && t.log[i] <= '4'
                  : i > 4 ? t.log[i] == '5' || t.log[i] == '6' : true,
                  "order was %s", t.log);
    loop_free_clean(loop);
}

struct starver {
    atomic_uint defers;
    atomic_bool timer_fired;
};

static void redefer_forever(tern_loop *loop, void *arg)
{
    struct starver *s = arg;
    atomic_fetch_add(&s->defers, 1);
    /* Stop once the timer fired; also give up after a bound so that a
     * starving runtime fails the assertion instead of hanging. */
    if (!atomic_load(&s->timer_fired) && atomic_load(&s->defers) < 100000)
        cr_assert_eq(tern_defer(loop, redefer_forever, s), 0);
}

static void starver_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    struct starver *s = arg;
    atomic_store(&s->timer_fired, true);
}

/* Work that re-queues itself forever does not starve a timer. */
Test(turn, self_redeferring_callback_does_not_starve_a_timer, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_with_batch(4);
    struct starver s = { 0 };
    /* Four re-deferring chains fill every batch. */
    for (int i = 0; i < 4; i++)
        cr_assert_eq(tern_defer(loop, redefer_forever, &s), 0);
    cr_assert_eq(tern_timer_start(loop, MS, 0, starver_timer, &s, NULL), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert(atomic_load(&s.timer_fired), "the timer starved behind %u defers",
              atomic_load(&s.defers));
    cr_assert_lt(atomic_load(&s.defers), 100000);
    loop_free_clean(loop);
}

/* A deadline armed inside step 2 with delay 0 is not run in that same
 * step 2: it goes through step 5 first. */
static void arm_zero(tern_loop *loop, void *arg)
{
    cr_assert_eq(tern_timer_start(loop, 0, 0, count_cb, arg, NULL), 0);
}

Test(turn, zero_delay_timer_armed_in_step_2_runs_next_turn, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    atomic_uint fired = 0;
    cr_assert_eq(tern_defer(loop, arm_zero, &fired), 0);
    cr_assert_eq(tern_loop_run_once(loop, 0), 1);
    cr_assert_eq(atomic_load(&fired), 0);
    cr_assert_eq(tern_loop_run_once(loop, 0), 0);
    cr_assert_eq(atomic_load(&fired), 1);
    loop_free_clean(loop);
}
