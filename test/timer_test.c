/*
 * Timers (SPEC §1 "One deadline mechanism"): never early, soonest first,
 * FIFO on a tie by arming order, repeat, stop from inside the callback,
 * stop of an expired timer that waits in the ready queue, and ids that
 * are never 0 and never reused.
 */
#include "loop_helpers.h"

static void count_cb(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

/* ---------------------------------------------------------------- */
/* a one-shot timer                                                  */
/* ---------------------------------------------------------------- */

struct once {
    tern_id id;
    uint64_t armed_at; /* the loop clock when armed */
    uint64_t delay;
    atomic_uint calls;
    bool id_ok, arg_ok, not_early, stale_inside;
};

static void once_cb(tern_loop *loop, tern_id id, void *arg)
{
    struct once *o = arg;
    atomic_fetch_add(&o->calls, 1);
    o->id_ok = id == o->id;
    o->arg_ok = true;
    o->not_early = tern_loop_now(loop) >= o->armed_at + o->delay &&
                   mono_ns() >= o->armed_at + o->delay;
    /* A one-shot timer is finished once its callback starts. */
    o->stale_inside = tern_timer_stop(loop, id) == -ENOENT;
}

Test(timer, one_shot_fires_once_not_early_with_its_id_and_arg, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    struct once o = { .delay = 3 * MS };
    o.armed_at = tern_loop_now(loop);
    cr_assert_eq(tern_timer_start(loop, o.delay, 0, once_cb, &o, &o.id), 0);
    cr_assert_neq(o.id, 0);
    cr_assert_eq(loop_live(loop), 1);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&o.calls), 1);
    cr_assert(o.id_ok, "the callback got another id");
    cr_assert(o.arg_ok);
    cr_assert(o.not_early, "the timer fired before its deadline");
    cr_assert(o.stale_inside, "a one-shot timer's id was still live inside its callback");
    cr_assert_eq(tern_timer_stop(loop, o.id), -ENOENT);
    loop_free_clean(loop);
}

/* ---------------------------------------------------------------- */
/* order                                                             */
/* ---------------------------------------------------------------- */

enum { NORDER = 200 };

struct order {
    unsigned seen[NORDER];
    atomic_uint n;
};

struct order_item {
    struct order *o;
    unsigned index;
};

static void order_cb(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    struct order_item *it = arg;
    unsigned i = atomic_fetch_add(&it->o->n, 1);
    if (i < NORDER)
        it->o->seen[i] = it->index;
}

struct order_setup {
    struct order_item items[NORDER];
    uint64_t delay[NORDER];
};

/* Arms every timer from one callback, so they share the loop's cached
 * clock and equal delays give equal deadlines. */
static void arm_all(tern_loop *loop, void *arg)
{
    struct order_setup *s = arg;
    for (unsigned i = 0; i < NORDER; i++)
        cr_assert_eq(tern_timer_start(loop, s->delay[i], 0, order_cb, &s->items[i], NULL), 0);
}

Test(timer, equal_deadlines_fire_fifo_by_arming_order, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    static struct order o;
    static struct order_setup s;
    for (unsigned i = 0; i < NORDER; i++) {
        s.items[i] = (struct order_item){ &o, i };
        s.delay[i] = 2 * MS;
    }
    cr_assert_eq(tern_defer(loop, arm_all, &s), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&o.n), NORDER);
    for (unsigned i = 0; i < NORDER; i++)
        cr_assert_eq(o.seen[i], i, "position %u ran timer %u: ties must fire in arming order", i,
                     o.seen[i]);
    loop_free_clean(loop);
}

/* Equal deadlines from timers armed at different times with different
 * delays still tie-break by arming order. The ready-made tie: the loop
 * clock does not move between two calls outside a turn. */
Test(timer, tie_between_different_delays_is_arming_order, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    static struct order o;
    static struct order_item it[4];
    for (unsigned i = 0; i < 4; i++)
        it[i] = (struct order_item){ &o, i };
    /* All four share one deadline: now + 2 ms. */
    cr_assert_eq(tern_timer_start(loop, 2 * MS, 0, order_cb, &it[0], NULL), 0);
    cr_assert_eq(tern_timer_start(loop, 2 * MS, 0, order_cb, &it[1], NULL), 0);
    cr_assert_eq(tern_timer_start(loop, 2 * MS, 0, order_cb, &it[2], NULL), 0);
    cr_assert_eq(tern_timer_start(loop, 2 * MS, 0, order_cb, &it[3], NULL), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&o.n), 4);
    for (unsigned i = 0; i < 4; i++)
        cr_assert_eq(o.seen[i], i);
    loop_free_clean(loop);
}

static void busy_wait_past(tern_loop *loop, void *arg)
{
    (void)loop;
    /* Make every deadline of the soonest-first test expire before the
     * next step 5, so they are ordered within one firing pass. */
    sleep_ns(*(uint64_t *)arg);
}

/* Soonest first: distinct deadlines armed in a shuffled order, all
 * expiring in the same step 5, run in deadline order. */
Test(timer, distinct_deadlines_fire_soonest_first, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    static struct order o;
    static struct order_setup s;
    /* A fixed permutation (multiplication by 73 mod 200 is a bijection). */
    for (unsigned i = 0; i < NORDER; i++) {
        unsigned rank = (i * 73u) % NORDER;
        s.items[i] = (struct order_item){ &o, rank };
        s.delay[i] = (uint64_t)(rank + 1) * 10000; /* 10 us apart, all under 2.1 ms */
    }
    uint64_t past = 5 * MS;
    cr_assert_eq(tern_defer(loop, arm_all, &s), 0);
    cr_assert_eq(tern_defer(loop, busy_wait_past, &past), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&o.n), NORDER);
    for (unsigned i = 0; i < NORDER; i++)
        cr_assert_eq(o.seen[i], i, "position %u ran the timer of rank %u", i, o.seen[i]);
    loop_free_clean(loop);
}

/* Mixed: pairs of equal deadlines among distinct ones. */
Test(timer, soonest_first_then_fifo, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    static struct order o;
    static struct order_item it[6];
    /* expected firing order: it[1] (1ms), it[3] (1ms), it[0] (2ms),
     * it[4] (2ms), it[5] (3ms), it[2] (4ms). */
    const unsigned expect_rank[6] = { 2, 0, 5, 1, 3, 4 };
    const uint64_t delay[6] = { 2 * MS, 1 * MS, 4 * MS, 1 * MS, 2 * MS, 3 * MS };
    for (unsigned i = 0; i < 6; i++) {
        it[i] = (struct order_item){ &o, expect_rank[i] };
        cr_assert_eq(tern_timer_start(loop, delay[i], 0, order_cb, &it[i], NULL), 0);
    }
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&o.n), 6);
    for (unsigned i = 0; i < 6; i++)
        cr_assert_eq(o.seen[i], i);
    loop_free_clean(loop);
}

/* ---------------------------------------------------------------- */
/* repeat and stop                                                   */
/* ---------------------------------------------------------------- */

struct repeater {
    tern_id id;
    atomic_uint calls;
    unsigned stop_at;
    int stop_rc;
    bool same_id;
    uint64_t period;
    uint64_t last_now;
    bool monotonic;
};

static void repeat_cb(tern_loop *loop, tern_id id, void *arg)
{
    struct repeater *r = arg;
    unsigned n = atomic_fetch_add(&r->calls, 1) + 1;
    if (id != r->id)
        r->same_id = false;
    uint64_t now = tern_loop_now(loop);
    if (now < r->last_now + r->period)
        r->monotonic = false; /* the repeat fired early */
    r->last_now = now;
    if (n == r->stop_at)
        r->stop_rc = tern_timer_stop(loop, id);
}

Test(timer, repeating_timer_repeats_and_stops_inside_its_callback, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    /* 5 ms, not 1: backends round waits up to whole milliseconds, which
     * would hide a repeat that comes early by less than that. */
    struct repeater r = { .stop_at = 5, .stop_rc = 1, .same_id = true, .monotonic = true,
                          .period = 5 * MS };
    r.last_now = tern_loop_now(loop);
    cr_assert_eq(tern_timer_start(loop, r.period, r.period, repeat_cb, &r, &r.id), 0);
    cr_assert_eq(tern_loop_run(loop), 0, "run returns once the stopped timer was the last thing");
    cr_assert_eq(atomic_load(&r.calls), 5, "the timer ran %u times", atomic_load(&r.calls));
    cr_assert_eq(r.stop_rc, 0, "stopping a repeating timer inside its callback: %d", r.stop_rc);
    cr_assert(r.same_id, "a repeating timer keeps its id");
    cr_assert(r.monotonic, "a repeat came sooner than repeat_ns after the previous one");
    cr_assert_eq(tern_timer_stop(loop, r.id), -ENOENT);
    loop_free_clean(loop);
}

Test(timer, repeating_timer_stopped_from_outside, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    struct repeater r = { .stop_at = 0, .same_id = true, .monotonic = true, .period = MS };
    r.last_now = tern_loop_now(loop);
    cr_assert_eq(tern_timer_start(loop, MS, MS, repeat_cb, &r, &r.id), 0);
    cr_assert(run_until_count(loop, &r.calls, 3, -1, 1000));
    cr_assert_eq(loop_live(loop), 1, "a repeating timer stays live between firings");
    cr_assert_eq(tern_timer_stop(loop, r.id), 0);
    unsigned calls = atomic_load(&r.calls);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&r.calls), calls, "a stopped timer ran again");
    loop_free_clean(loop);
}

struct pair {
    tern_id victim;
    int stop_rc;
    atomic_uint killer_calls, victim_calls;
    bool use_cancel;
};

static void victim_cb(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    atomic_fetch_add(&((struct pair *)arg)->victim_calls, 1);
}

static void killer_cb(tern_loop *loop, tern_id id, void *arg)
{
    (void)id;
    struct pair *p = arg;
    atomic_fetch_add(&p->killer_calls, 1);
    p->stop_rc =
        p->use_cancel ? tern__test_cancel_now(loop, p->victim) : tern_timer_stop(loop, p->victim);
}

/* Two timers expire in the same step 5 (equal deadline, killer first);
 * the killer's callback stops the victim, which already waits in the
 * ready queue: its callback must not run. */
static void expired_stop_case(bool use_cancel)
{
    tern_loop *loop = loop_new_default();
    struct pair p = { .stop_rc = 1, .use_cancel = use_cancel };
    cr_assert_eq(tern_timer_start(loop, 0, 0, killer_cb, &p, NULL), 0);
    cr_assert_eq(tern_timer_start(loop, 0, 0, victim_cb, &p, &p.victim), 0);
    cr_assert_eq(tern_loop_run_once(loop, 0), 1);
    cr_assert_eq(tern_loop_next_timeout(loop), 0, "both timers wait in the ready queue");
    cr_assert_eq(loop_live(loop), 2);
    cr_assert_eq(tern_loop_run_once(loop, 0), 0);
    cr_assert_eq(atomic_load(&p.killer_calls), 1);
    cr_assert_eq(p.stop_rc, 0, "stopping an expired, queued timer: %d", p.stop_rc);
    cr_assert_eq(atomic_load(&p.victim_calls), 0, "a stopped timer's queued callback ran");
    loop_free_clean(loop);
}

Test(timer, stopping_an_expired_queued_timer_prevents_its_callback, .timeout = TEST_TIMEOUT)
{
    expired_stop_case(false);
}

Test(timer, cancelling_an_expired_queued_timer_prevents_its_callback, .timeout = TEST_TIMEOUT)
{
    expired_stop_case(true);
}

/* Stopping an expired repeating timer that waits in the ready queue. */
Test(timer, stopping_a_queued_repeating_timer_from_outside, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    atomic_uint n = 0;
    tern_id id = 0;
    cr_assert_eq(tern_timer_start(loop, 0, MS, count_cb, &n, &id), 0);
    cr_assert_eq(tern_loop_run_once(loop, 0), 1);
    cr_assert_eq(tern_loop_next_timeout(loop), 0);
    cr_assert_eq(tern_timer_stop(loop, id), 0);
    cr_assert_eq(tern_loop_next_timeout(loop), -1, "the stopped timer is still queued");
    cr_assert_eq(tern_loop_run_once(loop, 0), 0);
    cr_assert_eq(atomic_load(&n), 0);
    loop_free_clean(loop);
}

/* A timer may start another timer, including one with its own callback,
 * from inside its callback. */
struct chain {
    atomic_uint n;
    unsigned want;
};

static void chain_cb(tern_loop *loop, tern_id id, void *arg)
{
    (void)id;
    struct chain *c = arg;
    if (atomic_fetch_add(&c->n, 1) + 1 < c->want)
        cr_assert_eq(tern_timer_start(loop, 0, 0, chain_cb, c, NULL), 0);
}

Test(timer, timers_started_from_timer_callbacks, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    struct chain c = { .want = 100 };
    cr_assert_eq(tern_timer_start(loop, 0, 0, chain_cb, &c, NULL), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&c.n), 100);
    loop_free_clean(loop);
}

/* ---------------------------------------------------------------- */
/* ids                                                               */
/* ---------------------------------------------------------------- */

static int cmp_id(const void *a, const void *b)
{
    tern_id x = *(const tern_id *)a, y = *(const tern_id *)b;
    return x < y ? -1 : x > y;
}

/* Ids are never 0 and never reused, even when the slot behind an id is
 * recycled many times. */
Test(timer, ids_are_never_zero_and_never_reused, .timeout = TEST_TIMEOUT)
{
    enum { N = 5000 };
    tern_loop *loop = loop_new_default();
    tern_loop *other = loop_new_default();
    static tern_id ids[2 * N];
    atomic_uint n = 0;
    for (unsigned i = 0; i < N; i++) {
        cr_assert_eq(tern_timer_start(loop, HOUR, 0, count_cb, &n, &ids[2 * i]), 0);
        cr_assert_neq(ids[2 * i], 0);
        cr_assert_eq(tern_timer_stop(loop, ids[2 * i]), 0);
        /* A second loop draws from the same never-reused counter. */
        cr_assert_eq(tern_timer_start(other, HOUR, 0, count_cb, &n, &ids[2 * i + 1]), 0);
        cr_assert_eq(tern_timer_stop(other, ids[2 * i + 1]), 0);
    }
    qsort(ids, 2 * N, sizeof ids[0], cmp_id);
    for (unsigned i = 1; i < 2 * N; i++)
        cr_assert_neq(ids[i], ids[i - 1], "id %#llx was handed out twice",
                      (unsigned long long)ids[i]);
    /* A stale id from a recycled slot must not reach the slot's new timer. */
    tern_id fresh = 0;
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, count_cb, &n, &fresh), 0);
    for (unsigned i = 0; i < 2 * N; i++)
        cr_assert_eq(tern_timer_stop(loop, ids[i]), -ENOENT);
    cr_assert_eq(loop_live(loop), 1);
    cr_assert_eq(tern_timer_stop(loop, fresh), 0);
    loop_free_clean(other);
    loop_free_clean(loop);
}

/* An id of one loop means nothing on another. */
Test(timer, ids_belong_to_their_loop, .timeout = TEST_TIMEOUT)
{
    tern_loop *a = loop_new_default();
    tern_loop *b = loop_new_default();
    atomic_uint n = 0;
    tern_id id = 0;
    cr_assert_eq(tern_timer_start(a, HOUR, 0, count_cb, &n, &id), 0);
    cr_assert_eq(tern_timer_start(b, HOUR, 0, count_cb, &n, NULL), 0);
    cr_assert_eq(tern_timer_stop(b, id), -ENOENT);
    cr_assert_eq(tern__test_cancel_now(b, id), -ENOENT);
    cr_assert_eq(loop_live(b), 1);
    cr_assert_eq(tern_timer_stop(a, id), 0);
    loop_free_clean(a);
    tern_loop_free(b);
}

/* Many timers: a thousand deadlines spread over a few ms all fire once. */
Test(timer, many_timers_all_fire_once, .timeout = TEST_TIMEOUT)
{
    enum { N = 1000 };
    tern_loop *loop = loop_new_default();
    static atomic_uint hits[N];
    for (unsigned i = 0; i < N; i++)
        cr_assert_eq(tern_timer_start(loop, (uint64_t)(i % 37) * 100000, 0, count_cb, &hits[i],
                                      NULL), 0);
    cr_assert_eq(loop_live(loop), N);
    cr_assert_eq(tern_loop_run(loop), 0);
    for (unsigned i = 0; i < N; i++)
        cr_assert_eq(atomic_load(&hits[i]), 1, "timer %u ran %u times", i, atomic_load(&hits[i]));
    loop_free_clean(loop);
}

/* ---------------------------------------------------------------- */
/* ids without a map (runtime/core/timer_table.c)                         */
/* ---------------------------------------------------------------- */

/* The process-wide number of the chunk an id's timer lives in. */
static uint64_t chunk_number(tern_id id)
{
    return (id >> 38) & ((UINT64_C(1) << 25) - 1);
}

/*
 * A freed loop's chunk numbers go to the next loop with a floor, so the
 * next loop's timers in the same chunk start past every generation the
 * first one issued: its ids are new, and the old ids name nothing.
 */
Test(timer, ids_stay_unique_when_a_chunk_number_passes_to_another_loop, .timeout = TEST_TIMEOUT)
{
    enum { N = 3 };
    atomic_uint n = 0;
    tern_id old[2 * N];
    tern_loop *a = loop_new_default();
    for (unsigned i = 0; i < N; i++)
        cr_assert_eq(tern_timer_start(a, HOUR, 0, count_cb, &n, &old[i]), 0);
    /* Stop and start again: the same slots, one generation on. */
    for (unsigned i = 0; i < N; i++) {
        cr_assert_eq(tern_timer_stop(a, old[i]), 0);
        cr_assert_eq(tern_timer_start(a, HOUR, 0, count_cb, &n, &old[N + i]), 0);
        cr_assert_neq(old[N + i], old[i]);
    }
    cr_assert_eq(loop_live(a), N);
    tern_loop_free(a); /* cancels the second three */

    tern_loop *b = loop_new_default();
    tern_id fresh[2 * N];
    for (unsigned i = 0; i < 2 * N; i++)
        cr_assert_eq(tern_timer_start(b, HOUR, 0, count_cb, &n, &fresh[i]), 0);
    cr_assert_eq(chunk_number(fresh[0]), chunk_number(old[0]),
                 "the freed loop's chunk number was not passed on: this test shows nothing");
    for (unsigned i = 0; i < 2 * N; i++)
        for (unsigned j = 0; j < 2 * N; j++)
            cr_assert_neq(fresh[i], old[j], "id %#llx was handed out twice",
                          (unsigned long long)fresh[i]);
    for (unsigned j = 0; j < 2 * N; j++) {
        cr_assert_eq(tern_timer_stop(b, old[j]), -ENOENT);
        cr_assert_eq(tern__test_cancel_now(b, old[j]), -ENOENT);
        cr_assert_eq(tern_unref(b, old[j]), -ENOENT);
    }
    cr_assert_eq(loop_live(b), 2 * N);
    cr_assert_eq(atomic_load(&n), 0);
    tern_loop_free(b);
}

/*
 * A slot whose generation reaches 2^30 is retired rather than wrapped:
 * the next timer gets another slot, and when the loop is freed the chunk
 * number is burned, never handed to another loop.
 */
Test(timer, a_slot_is_retired_when_its_generation_runs_out, .timeout = TEST_TIMEOUT)
{
    atomic_uint n = 0;
    tern_loop *a = loop_new_default();
    tern_id id = 0;
    cr_assert_eq(tern_timer_start(a, HOUR, 0, count_cb, &n, &id), 0);
    tern_id last = tern__test_timer_gen(a, id, (UINT32_C(1) << 30) - 1);
    cr_assert_eq(tern_timer_stop(a, id), -ENOENT, "the id before the move still works");
    cr_assert_eq(last & ((UINT64_C(1) << 30) - 1), (UINT64_C(1) << 30) - 1);
    cr_assert_eq(tern_timer_stop(a, last), 0);
    tern_id next = 0;
    cr_assert_eq(tern_timer_start(a, HOUR, 0, count_cb, &n, &next), 0);
    cr_assert_neq((next >> 30) & 0xff, (last >> 30) & 0xff, "the exhausted slot was reused");
    cr_assert_eq(tern_timer_stop(a, last), -ENOENT);
    cr_assert_eq(tern_timer_stop(a, next), 0);
    cr_assert_eq(tern_timer_stop(a, next), -ENOENT);
    loop_free_clean(a);

    tern_loop *b = loop_new_default();
    tern_id other = 0;
    cr_assert_eq(tern_timer_start(b, HOUR, 0, count_cb, &n, &other), 0);
    cr_assert_neq(chunk_number(other), chunk_number(last),
                  "a chunk with a retired slot went to another loop");
    cr_assert_eq(tern_timer_stop(b, other), 0);
    loop_free_clean(b);
}

/* Ids that carry the timer bit but were never issued name nothing. */
Test(timer, forged_timer_ids_are_enoent, .timeout = TEST_TIMEOUT)
{
    atomic_uint n = 0;
    tern_loop *loop = loop_new_default();
    tern_id id = 0, second = 0;
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, count_cb, &n, &id), 0);
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, count_cb, &n, &second), 0);
    const tern_id forged[] = {
        id + 1, id - 1, id ^ (UINT64_C(1) << 30), id ^ (UINT64_C(1) << 37),
        id ^ (UINT64_C(1) << 40), id ^ (UINT64_C(1) << 62), UINT64_MAX, UINT64_C(1) << 63,
        second + (UINT64_C(1) << 30),
    };
    for (size_t i = 0; i < sizeof forged / sizeof forged[0]; i++) {
        if (forged[i] == id || forged[i] == second)
            continue;
        cr_assert_eq(tern_timer_stop(loop, forged[i]), -ENOENT, "forged id %#llx",
                     (unsigned long long)forged[i]);
        cr_assert_eq(tern__test_cancel_now(loop, forged[i]), -ENOENT);
        cr_assert_eq(tern_ref(loop, forged[i]), -ENOENT);
    }
    /* Not a watcher, nor any other kind's. */
    cr_assert_eq(tern_io_stop(loop, id), -ENOENT);
    cr_assert_eq(loop_live(loop), 2);
    cr_assert_eq(tern_timer_stop(loop, id), 0);
    cr_assert_eq(tern_timer_stop(loop, second), 0);
    loop_free_clean(loop);
}

/*
 * The heap's arming sequence is 32 bits and is renumbered, in order,
 * before it wraps: timers with one deadline armed across the renumbering
 * still fire in arming order.
 */
Test(timer, tie_order_survives_the_sequence_renumbering, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    static struct order o;
    static struct order_item it[12];
    for (unsigned i = 0; i < 12; i++)
        it[i] = (struct order_item){ &o, i };
    /* A timer with another deadline, so the renumbering sorts a mix. */
    atomic_uint later = 0;
    cr_assert_eq(tern_timer_start(loop, 3 * MS, 0, count_cb, &later, NULL), 0);
    tern__test_heap_seq(loop, UINT32_MAX - 5);
    for (unsigned i = 0; i < 12; i++)
        cr_assert_eq(tern_timer_start(loop, 2 * MS, 0, order_cb, &it[i], NULL), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&o.n), 12);
    for (unsigned i = 0; i < 12; i++)
        cr_assert_eq(o.seen[i], i, "position %u ran timer %u", i, o.seen[i]);
    cr_assert_eq(atomic_load(&later), 1);
    loop_free_clean(loop);
}

/*
 * Due timers stand behind one op on the ready queue: with dispatch_batch
 * 2, six due timers run two per turn, in arming order; one stopped
 * while it waits never runs (and costs no budget); a defer queued after
 * they came due runs after them.
 */
static void note_defer(tern_loop *loop, void *arg)
{
    order_cb(loop, 0, arg);
}

Test(timer, due_timers_run_within_dispatch_batch_in_order, .timeout = TEST_TIMEOUT)
{
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.dispatch_batch = 2;
    tern_loop *loop = loop_new_opts(&opts);
    static struct order o;
    static struct order_item it[7];
    for (unsigned i = 0; i < 7; i++)
        it[i] = (struct order_item){ &o, i };
    tern_id ids[6];
    for (unsigned i = 0; i < 6; i++)
        cr_assert_eq(tern_timer_start(loop, 0, 0, order_cb, &it[i], &ids[i]), 0);
    cr_assert_eq(tern_loop_run_once(loop, 0), 1); /* step 5: all six due */
    cr_assert_eq(atomic_load(&o.n), 0);
    cr_assert_eq(tern_timer_stop(loop, ids[4]), 0, "a due, queued timer can be stopped");
    cr_assert_eq(tern_defer(loop, note_defer, &it[6]), 0); /* readied after the timers */
    unsigned per_turn[8] = {0}, turns = 0;
    while (turns < 8 && tern_loop_run_once(loop, 0) != 0)
        per_turn[turns++] = atomic_load(&o.n);
    cr_assert_eq(atomic_load(&o.n), 6);
    const unsigned want[] = {0, 1, 2, 3, 5, 6};
    for (unsigned i = 0; i < 6; i++)
        cr_assert_eq(o.seen[i], want[i], "position %u ran %u", i, o.seen[i]);
    cr_assert_eq(per_turn[0], 2, "a turn ran %u callbacks with dispatch_batch 2", per_turn[0]);
    cr_assert_eq(per_turn[1], 4);
    loop_free_clean(loop);
}

/*
 * The heap under removals from anywhere: 3,000 timers with seeded random
 * deadlines (many ties), a random third stopped, the rest all overdue
 * before one step 5. They must run soonest first, ties in arming order,
 * and the stopped ones never.
 */
struct ranked {
    uint64_t delay;
    unsigned index;
    bool stopped;
};

static struct {
    unsigned n, bad;
    uint64_t last_delay;
    unsigned last_index;
    unsigned ran_stopped;
} rank_seen;

static void ranked_cb(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    const struct ranked *r = arg;
    if (r->stopped)
        rank_seen.ran_stopped++;
    if (rank_seen.n > 0 && (r->delay < rank_seen.last_delay ||
                            (r->delay == rank_seen.last_delay && r->index < rank_seen.last_index)))
        rank_seen.bad++;
    rank_seen.n++;
    rank_seen.last_delay = r->delay;
    rank_seen.last_index = r->index;
}

Test(timer, heap_order_holds_under_random_removals, .timeout = TEST_TIMEOUT)
{
    enum { N = 3000 };
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.dispatch_batch = 1u << 20;
    tern_loop *loop = loop_new_opts(&opts);
    static struct ranked r[N];
    static tern_id ids[N];
    uint64_t seed = 0x7465726e74696d65ull; /* fixed: replayable */
    unsigned stopped = 0;
    for (unsigned i = 0; i < N; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        r[i] = (struct ranked){ .delay = (seed >> 33) % 97 * 10000, .index = i };
        cr_assert_eq(tern_timer_start(loop, r[i].delay, 0, ranked_cb, &r[i], &ids[i]), 0);
    }
    for (unsigned i = 0; i < N; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        if ((seed >> 40) % 3 == 0) {
            r[i].stopped = true;
            stopped++;
            cr_assert_eq(tern_timer_stop(loop, ids[i]), 0);
        }
    }
    sleep_ns(2 * MS); /* every deadline (< 1 ms) passes before the first step 5 */
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(rank_seen.ran_stopped, 0, "stopped timers ran");
    cr_assert_eq(rank_seen.n, N - stopped, "ran %u of %u", rank_seen.n, N - stopped);
    cr_assert_eq(rank_seen.bad, 0, "%u callbacks out of (deadline, arming) order", rank_seen.bad);
    loop_free_clean(loop);
}
