/*
 * A stopped job gives its queue slot back (SPEC §12, docs/pool.md,
 * "Admission for servers"): a job cancelled or timed out while queued no
 * longer counts against queue_capacity for admission, although the queue
 * still holds its tombstone until a worker skips it. The tombstones
 * themselves are bounded: the queue's room for them is finite, and when
 * they fill it a submission is refused for a full queue, honestly, until
 * a worker skips them. Every job still gets exactly one done, and a
 * cancelled job never runs.
 *
 * The single bounded worker is held on a gate throughout, so every job
 * submitted behind it stays queued until the test opens the gate.
 */
#include <criterion/criterion.h>

#include "pool_helpers.h"

#define CAP 16u

static tern_loop *setup(void)
{
    tern_pool_config cfg = ph_config(1, CAP, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.max_undelivered = o.max_operations = 4096;
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, &o), 0);
    return loop;
}

static void teardown(tern_loop *loop)
{
    tern_loop_free(loop);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}

/* Hold the one worker on gate, running j. */
static void hold_worker(tern_loop *loop, ph_gate *gate, ph_job *j)
{
    ph_gate_init(gate);
    ph_job_init(j, gate);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, j), 0);
    cr_assert(ph_gate_wait_entered(gate, 1));
}

static void pump_until_done(tern_loop *loop, ph_job *jobs, int n)
{
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(jobs, (size_t)n) == n);
    cr_assert(ok, "not every job got its done");
}

/* Each job got one done with status, and ran `ran` times. */
static void assert_outcome(ph_job *jobs, int n, int status, int ran)
{
    for (int i = 0; i < n; i++) {
        cr_assert_eq(atomic_load(&jobs[i].done_calls), 1, "job %d: %d dones", i,
                     atomic_load(&jobs[i].done_calls));
        cr_assert_eq(jobs[i].status, status, "job %d: status %s", i,
                     tern_err_name(jobs[i].status));
        cr_assert_eq(atomic_load(&jobs[i].ran), ran, "job %d ran %d times", i,
                     atomic_load(&jobs[i].ran));
    }
}

/* Submit the whole queue's capacity: every one must be admitted. */
static void fill_queue(tern_loop *loop, ph_job *fresh)
{
    for (unsigned i = 0; i < CAP; i++) {
        ph_job_init(&fresh[i], NULL);
        int rc = ph_submit(loop, TERN_BOUNDED, &fresh[i]);
        cr_assert_eq(rc, 0, "submission %u after the stops: %s (%s)", i, tern_err_name(rc),
                     tern_refusal_name(tern_loop_last_refusal(loop)));
    }
    cr_assert_eq(ph_stats().queued, CAP, "queued counts the live jobs only");
    ph_job_init(&fresh[CAP], NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &fresh[CAP]), -EAGAIN);
    cr_assert_eq(tern_loop_last_refusal(loop), TERN_REFUSED_QUEUE_FULL);
}

Test(reclaim, cancelled_jobs_give_their_slots_back)
{
    tern_loop *loop = setup();
    ph_gate gate;
    ph_job running;
    hold_worker(loop, &gate, &running);

    /* An owner holds nearly the whole queue; closing it cancels them all. */
    tern_id owner;
    cr_assert_eq(tern_owner_open(loop, 1000, &owner), 0);
    tern_job_options jo;
    tern_job_options_init(&jo);
    jo.owner = owner;
    ph_job held[CAP - 1];
    for (unsigned i = 0; i < CAP - 1; i++) {
        ph_job_init(&held[i], NULL);
        cr_assert_eq(tern_submit_with(loop, TERN_BOUNDED, ph_work, ph_done, &held[i], &jo,
                                      &held[i].id),
                     0);
    }
    cr_assert_eq(tern_owner_close(loop, owner), 0);
    pump_until_done(loop, held, CAP - 1);
    assert_outcome(held, CAP - 1, -ECANCELED, 0);

    /* The tombstones are still in the queue, but the slots are free. */
    ph_job fresh[CAP + 1];
    fill_queue(loop, fresh);

    ph_gate_open(&gate);
    pump_until_done(loop, fresh, CAP);
    pump_until_done(loop, &running, 1);
    assert_outcome(fresh, CAP, 0, 1);
    assert_outcome(held, CAP - 1, -ECANCELED, 0);
    cr_assert_eq(atomic_load(&fresh[CAP].done_calls), 0, "a refused job got a done");
    cr_assert_eq(ph_stats().queued, 0);
    teardown(loop);
    ph_gate_destroy(&gate);
}

Test(reclaim, timed_out_jobs_give_their_slots_back)
{
    tern_loop *loop = setup();
    ph_gate gate;
    ph_job running;
    hold_worker(loop, &gate, &running);

    tern_job_options jo;
    tern_job_options_init(&jo);
    jo.timeout_ns = PH_MS;
    ph_job held[CAP];
    for (unsigned i = 0; i < CAP; i++) {
        ph_job_init(&held[i], NULL);
        cr_assert_eq(tern_submit_with(loop, TERN_BOUNDED, ph_work, ph_done, &held[i], &jo,
                                      &held[i].id),
                     0);
    }
    pump_until_done(loop, held, CAP);
    assert_outcome(held, CAP, -ETIMEDOUT, 0);

    ph_job fresh[CAP + 1];
    fill_queue(loop, fresh);

    ph_gate_open(&gate);
    pump_until_done(loop, fresh, CAP);
    assert_outcome(fresh, CAP, 0, 1);
    assert_outcome(held, CAP, -ETIMEDOUT, 0);
    teardown(loop);
    ph_gate_destroy(&gate);
}

/*
 * Fill, cancel everything, fill again, with the worker held: the queue's
 * room for tombstones runs out after a bounded number of rounds, and then
 * the refusal is a full queue. Once the worker skips the tombstones the
 * whole capacity is admitted again.
 */
#define ROUNDS 64

Test(reclaim, tombstones_are_bounded_and_skipped)
{
    tern_loop *loop = setup();
    ph_gate gate;
    ph_job running;
    hold_worker(loop, &gate, &running);

    static ph_job jobs[ROUNDS][CAP];
    unsigned admitted[ROUNDS] = {0};
    int rounds = 0;
    for (; rounds < ROUNDS; rounds++) {
        for (unsigned i = 0; i < CAP; i++) {
            ph_job_init(&jobs[rounds][i], NULL);
            int rc = ph_submit(loop, TERN_BOUNDED, &jobs[rounds][i]);
            if (rc != 0) {
                cr_assert_eq(rc, -EAGAIN);
                cr_assert_eq(tern_loop_last_refusal(loop), TERN_REFUSED_QUEUE_FULL);
                break;
            }
            admitted[rounds]++;
        }
        for (unsigned i = 0; i < admitted[rounds]; i++) {
            /* From outside the loop's run: done's status is the outcome. */
            int rc = tern_cancel(loop, jobs[rounds][i].id);
            cr_assert_eq(rc, TERN_CANCEL_REQUESTED, "round %d, job %u: cancel said %d", rounds,
                         i, rc);
        }
        pump_until_done(loop, jobs[rounds], (int)admitted[rounds]);
        assert_outcome(jobs[rounds], (int)admitted[rounds], -ECANCELED, 0);
        if (admitted[rounds] == 0)
            break;
    }
    cr_assert_eq(admitted[0], CAP);
    cr_assert_eq(admitted[1], CAP, "the first round's tombstones still held their slots");
    cr_assert_lt(rounds, ROUNDS, "tombstones grew the queue without bound");
    cr_assert_eq(ph_stats().queued, 0);

    /* The worker skips every tombstone before it reaches a job behind them. */
    ph_gate_open(&gate);
    ph_job marker;
    ph_job_init(&marker, NULL);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_submit(loop, TERN_BOUNDED, &marker) == 0);
    cr_assert(ok);
    pump_until_done(loop, &marker, 1);
    ph_gate again;
    ph_job running_again;
    hold_worker(loop, &again, &running_again);
    ph_job fresh[CAP + 1];
    fill_queue(loop, fresh);
    ph_gate_open(&again);
    pump_until_done(loop, fresh, CAP);
    assert_outcome(fresh, CAP, 0, 1);
    teardown(loop);
    ph_gate_destroy(&gate);
    ph_gate_destroy(&again);
}
