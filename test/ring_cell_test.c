/*
 * The ring's 8-byte cell (backends/ring.h): an item and its lap in one
 * word. The rules a cell can break: items come out once each and in
 * order across many wraps of the ring and of the lap number itself; a
 * full ring drains whole; a cell still holding the item of the lap
 * before (claimed by a consumer that has not freed it yet) is not an
 * item for the position a lap on; and tombstones of the bounded queue
 * sit in cells lap after lap without a job running twice or never.
 * Each pop (one by one, a claimed run, the single consumer's one and its
 * run) keeps those rules.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <signal.h>
#include <stdalign.h>
#include <stdint.h>

#include "pool_helpers.h"
#include "ring.h"
#include "testing.h"

/* Items: addresses of 8-aligned words, as the ring requires. */
#define ITEMS 64
static uint64_t store[ITEMS];

static void *item(uint64_t n)
{
    return &store[n % ITEMS];
}

/* The single consumer's pop of one item: NULL when nothing is ready. */
static void *pop_single(struct tern__ring *ring)
{
    void *got;
    return tern__ring_pop_single_many(ring, &got, 1) == 1 ? got : NULL;
}

Test(ring_cell, a_two_slot_ring_wraps_its_lap_number_and_keeps_order)
{
    alignas(TERN_CACHELINE) static struct tern__ring ring;
    cr_assert_eq(tern__ring_init(&ring, 2), 0);
    /* 2^21 items through 2 slots: 2^20 laps, the 19-bit lap wraps twice. */
    uint64_t pushed = 0, popped = 0;
    void *got[2];
    while (popped < (UINT64_C(1) << 21)) {
        tern__ring_push(&ring, item(pushed++));
        tern__ring_push(&ring, item(pushed++));
        switch (popped % 8) {
        case 0: { /* one by one, by the many-consumer pop */
            cr_assert_eq(tern__ring_pop(&ring), item(popped));
            cr_assert_eq(tern__ring_pop(&ring), item(popped + 1));
            break;
        }
        case 2: /* one CAS for the run */
            if (tern__ring_pop_many(&ring, got, 2) != 2 || got[0] != item(popped) ||
                got[1] != item(popped + 1))
                cr_assert_fail("pop_many out of order at %llu", (unsigned long long)popped);
            break;
        case 4: { /* the single consumer's run, asking for more than there is */
            void *run[4] = {0};
            if (tern__ring_pop_single_many(&ring, run, 4) != 2 || run[0] != item(popped) ||
                run[1] != item(popped + 1) || run[2] != NULL)
                cr_assert_fail("pop_single_many at %llu", (unsigned long long)popped);
            break;
        }
        default: /* the single consumer's pop */
            cr_assert_eq(pop_single(&ring), item(popped));
            cr_assert_eq(pop_single(&ring), item(popped + 1));
            break;
        }
        popped += 2;
        if (tern__ring_ready(&ring) || tern__ring_pop(&ring) != NULL)
            cr_assert_fail("an empty ring gave an item at %llu", (unsigned long long)popped);
    }
    cr_assert_eq(tern__ring_count(&ring), 0u);
    tern__ring_destroy(&ring);
}

/*
 * Runs across the ring's end: a run of three pushed into four slots, and
 * the single consumer's run popped, span the wrap to slot 0 every other
 * time, so the lap moves on in the middle of a run; 2^22 items make
 * 2^20 laps, and the 19-bit lap number wraps twice in mid-run too. Each
 * run comes out whole and in order.
 */
Test(ring_cell, runs_across_the_rings_end_keep_their_laps, .timeout = 30)
{
    alignas(TERN_CACHELINE) static struct tern__ring ring;
    cr_assert_eq(tern__ring_init(&ring, 4), 0);
    uint64_t pushed = 0, popped = 0;
    void *in[3], *got[4];
    while (popped < (UINT64_C(1) << 22)) {
        for (unsigned i = 0; i < 3; i++)
            in[i] = item(pushed + i);
        tern__ring_push_many(&ring, in, 3);
        pushed += 3;
        unsigned n = tern__ring_pop_single_many(&ring, got, 4);
        if (n != 3 || got[0] != item(popped) || got[1] != item(popped + 1) ||
            got[2] != item(popped + 2))
            cr_assert_fail("a run at %llu came out as %u items", (unsigned long long)popped, n);
        popped += 3;
    }
    cr_assert_eq(tern__ring_count(&ring), 0u);
    tern__ring_destroy(&ring);
}

Test(ring_cell, a_full_ring_drains_whole_lap_after_lap)
{
    alignas(TERN_CACHELINE) static struct tern__ring ring;
    cr_assert_eq(tern__ring_init(&ring, 8), 0);
    void *got[8];
    for (uint64_t lap = 0; lap < 1000; lap++) {
        void *in[8];
        for (unsigned i = 0; i < 8; i++)
            in[i] = item(lap * 8 + i);
        tern__ring_push_many(&ring, in, 8); /* every slot holds an item */
        cr_assert_eq(tern__ring_count(&ring), 8u);
        cr_assert(tern__ring_ready(&ring));
        /* Every other lap the single consumer's run, in two parts. */
        unsigned n = lap % 2 ? tern__ring_pop_many(&ring, got, 8)
                             : tern__ring_pop_single_many(&ring, got, 3);
        if (n == 3)
            n += tern__ring_pop_single_many(&ring, got + 3, 8);
        cr_assert_eq(n, 8u, "lap %llu: a full ring gave %u of 8", (unsigned long long)lap, n);
        for (unsigned i = 0; i < 8; i++)
            cr_assert_eq(got[i], in[i]);
        cr_assert_eq(tern__ring_pop_many(&ring, got, 8), 0u);
        cr_assert_eq(tern__ring_pop_single_many(&ring, got, 8), 0u);
    }
    tern__ring_destroy(&ring);
}

Test(ring_cell, an_item_claimed_but_not_freed_is_not_taken_a_lap_on)
{
    alignas(TERN_CACHELINE) static struct tern__ring ring;
    cr_assert_eq(tern__ring_init(&ring, 4), 0);
    /* A consumer claims position 0 by the head's CAS and stops before
     * freeing its cell, as a worker does between the CAS and the frees. */
    tern__ring_push(&ring, item(0));
    uint64_t pos = 0;
    cr_assert(atomic_compare_exchange_strong(&ring.head, &pos, 1));
    /* The other three positions of the lap come and go. */
    for (uint64_t n = 1; n < 4; n++)
        tern__ring_push(&ring, item(n));
    for (uint64_t n = 1; n < 4; n++)
        cr_assert_eq(tern__ring_pop(&ring), item(n));
    /* The head is at 4, whose cell still holds the first lap's claimed item. */
    cr_assert_eq(atomic_load(&ring.head), 4u);
    cr_assert_not(tern__ring_ready(&ring), "the lap before's item looked ready");
    cr_assert_null(tern__ring_pop(&ring), "the lap before's item was taken again");
    void *got[4];
    cr_assert_eq(tern__ring_pop_many(&ring, got, 4), 0u);
    cr_assert_null(pop_single(&ring));
    cr_assert_eq(tern__ring_pop_single_many(&ring, got, 4), 0u);
    cr_assert_eq(atomic_load(&ring.head), 4u, "a pop that found nothing moved the head");
    /* The claimer frees it; position 4 is then pushed and taken as itself. */
    tern__ring_release(&ring, 0);
    tern__ring_push(&ring, item(4));
    cr_assert_eq(tern__ring_pop(&ring), item(4));
    tern__ring_destroy(&ring);
}

Test(ring_cell, an_item_the_ring_cannot_hold_is_refused, .signal = SIGABRT,
     .init = cr_redirect_stderr)
{
    alignas(TERN_CACHELINE) static struct tern__ring ring;
    cr_assert_eq(tern__ring_init(&ring, 2), 0);
    tern__ring_push(&ring, (char *)item(0) + 4); /* not 8-aligned */
}

/*
 * Tombstones through many laps of a small bounded queue: capacity 2 is a
 * ring of 4 cells (room for as many tombstones again). Each round holds
 * the one worker, queues two jobs, cancels them (two tombstones in
 * cells), queues a probe behind them, and lets the worker walk past;
 * 300 rounds move the ring's positions well over 200 laps.
 */
Test(ring_cell, tombstones_lap_after_lap_never_run_and_the_probes_all_do)
{
    tern_pool_config cfg = ph_config(1, 2, 4);
    tern_loop *loop = NULL;
    cr_assert_eq(tern_pool_start(&cfg), 0);
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    for (int round = 0; round < 300; round++) {
        ph_gate gate;
        ph_gate_init(&gate);
        ph_job blocker, victims[2], probe;
        ph_job_init(&blocker, &gate);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &blocker), 0);
        cr_assert(ph_gate_wait_entered(&gate, 1));
        for (int i = 0; i < 2; i++) {
            ph_job_init(&victims[i], NULL);
            cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &victims[i]), 0);
        }
        for (int i = 0; i < 2; i++)
            cr_assert_eq(tern__test_cancel_now(loop, victims[i].id), 0);
        ph_job_init(&probe, NULL);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &probe), 0);
        ph_gate_open(&gate);
        bool ok;
        PH_PUMP_UNTIL(ok, loop,
                      atomic_load(&probe.done_calls) == 1 &&
                          atomic_load(&blocker.done_calls) == 1 &&
                          atomic_load(&victims[0].done_calls) == 1 &&
                          atomic_load(&victims[1].done_calls) == 1);
        cr_assert(ok, "round %d: a job was not delivered", round);
        cr_assert_eq(atomic_load(&probe.ran), 1, "round %d: the probe did not run once", round);
        for (int i = 0; i < 2; i++) {
            cr_assert_eq(atomic_load(&victims[i].ran), 0, "round %d: a tombstone ran", round);
            cr_assert_eq(victims[i].status, -ECANCELED);
        }
        ph_gate_destroy(&gate);
    }
    cr_assert_eq(tern_loop_run(loop), 0);
    tern_loop_free(loop);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}
