/*
 * Batch take (pool/bounded.h, "Batch take"): a bounded worker takes a run
 * of queue entries in one step and owes the queued slots of the jobs it
 * claims until the run ends. These tests hold the pool to what that must
 * not change:
 *   - entries of a run not yet started count as queued, and a cancel
 *     still stops them (their done sees -ECANCELED, their work never runs);
 *   - a running job of a run is not queued (the owed slot is subtracted);
 *   - an admission that would be refused takes the owed slots back, so the
 *     queue admits exactly queue_capacity waiting jobs;
 *   - a pause holds a worker that has a run: no entry of it starts, and
 *     the rest goes back to the queue;
 *   - at a quiescent point queued, tombstones and the owed slots are 0 and
 *     submitted = completed + cancelled: nothing is lost or run twice.
 */
#include <criterion/criterion.h>

#include "pool_helpers.h"

/* Exclusive mode's hold on the pool (pool/pool.h; built into the library). */
void tern__pool_hold(void);
void tern__pool_unhold(void);

static tern_loop *new_loop(void)
{
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    return loop;
}

/*
 * One worker, held in `first` on gate a, and n jobs queued behind it on
 * gate b. Opening a lets the worker take the n as one run and block in the
 * first of them.
 */
static void run_behind(tern_loop *loop, ph_gate *a, ph_gate *b, ph_job *first, ph_job *jobs,
                       int n)
{
    ph_job_init(first, a);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, first), 0);
    cr_assert(ph_gate_wait_entered(a, 1));
    for (int i = 0; i < n; i++) {
        ph_job_init(&jobs[i], b);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &jobs[i]), 0);
    }
    ph_gate_open(a);
    cr_assert(ph_gate_wait_entered(b, 1));
    bool ok;
    PH_WAIT_UNTIL(ok, tern__test_pool_run_left() == (unsigned)n - 1);
    cr_assert(ok, "the worker did not take the %d as one run (%u left in runs)", n,
              tern__test_pool_run_left());
}

static void quiescent(tern_loop *loop, ph_job *jobs, int n, int total)
{
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(jobs, n) == n);
    cr_assert(ok);
    PH_WAIT_UNTIL(ok, ph_stats().busy == 0 && ph_stats().queued == 0);
    tern_pool_stats s = ph_stats();
    cr_assert(ok, "busy %u queued %u", s.busy, s.queued);
    cr_assert_eq(s.tombstones, 0u);
    cr_assert_eq(tern__test_pool_run_left(), 0u);
    cr_assert_eq(s.submitted, (uint64_t)total);
    cr_assert_eq(s.submitted, s.completed + s.cancelled,
                 "submitted %lu completed %lu cancelled %lu", (unsigned long)s.submitted,
                 (unsigned long)s.completed, (unsigned long)s.cancelled);
    for (int i = 0; i < n; i++)
        cr_assert_eq(atomic_load(&jobs[i].done_calls), 1, "job %d done %d times", i,
                     atomic_load(&jobs[i].done_calls));
}

Test(take, a_run_waits_as_queued_and_its_entries_stay_cancellable)
{
    enum { N = 8 };
    tern_pool_config cfg = ph_config(1, 64, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop();
    ph_gate a, b;
    ph_gate_init(&a);
    ph_gate_init(&b);
    ph_job first, jobs[N];
    run_behind(loop, &a, &b, &first, jobs, N);

    /* One runs (jobs[0]), N - 1 wait in the worker's run: queued, not running. */
    tern_pool_stats s = ph_stats();
    cr_assert_eq(s.busy, 1u);
    cr_assert_eq(s.queued, (unsigned)N - 1, "queued %u: the running job's slot is owed, not queued",
                 s.queued);

    /* Stop three entries of the run: they never run, and done sees -ECANCELED. */
    for (int i = 1; i < N; i += 3)
        cr_assert_eq(tern_cancel(loop, jobs[i].id), TERN_CANCEL_REQUESTED, "entry %d", i);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_stats().tombstones == 3); /* the loop resolves the requests */
    cr_assert(ok, "tombstones %u", ph_stats().tombstones);
    s = ph_stats();
    cr_assert_eq(s.queued, (unsigned)N - 1 - 3);
    cr_assert_eq(s.tombstones, 3u);

    ph_gate_open(&b);
    PH_PUMP_UNTIL(ok, loop, ph_done_total(jobs, N) == N && atomic_load(&first.done_calls) == 1);
    cr_assert(ok);
    for (int i = 0; i < N; i++) {
        bool stopped = i % 3 == 1;
        cr_assert_eq(atomic_load(&jobs[i].ran), stopped ? 0 : 1, "job %d ran %d times", i,
                     atomic_load(&jobs[i].ran));
        cr_assert_eq(jobs[i].status, stopped ? -ECANCELED : 0, "job %d status %d", i,
                     jobs[i].status);
    }
    quiescent(loop, jobs, N, N + 1);
    cr_assert_eq(ph_stats().cancelled, 3u);
    tern_loop_free(loop);
    ph_gate_destroy(&a);
    ph_gate_destroy(&b);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}

Test(take, a_full_queue_takes_back_the_slots_workers_owe)
{
    enum { CAP = 4 };
    tern_pool_config cfg = ph_config(1, CAP, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop();
    ph_gate a, b;
    ph_gate_init(&a);
    ph_gate_init(&b);
    ph_job first, jobs[CAP + 2];
    run_behind(loop, &a, &b, &first, jobs, CAP);

    /* CAP - 1 wait; the running one's slot is owed: one more fits, no more. */
    cr_assert_eq(ph_stats().queued, (unsigned)CAP - 1);
    ph_job_init(&jobs[CAP], NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &jobs[CAP]), 0,
                 "refused with %d waiting in a %d-slot queue", CAP - 1, CAP);
    cr_assert_eq(ph_stats().queued, (unsigned)CAP);
    ph_job_init(&jobs[CAP + 1], NULL);
    uint64_t full = ph_stats().refused_queue_full;
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &jobs[CAP + 1]), -EAGAIN);
    cr_assert_eq(ph_stats().refused_queue_full, full + 1);

    ph_gate_open(&b);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&first.done_calls) == 1);
    cr_assert(ok);
    quiescent(loop, jobs, CAP + 1, CAP + 2);
    tern_loop_free(loop);
    ph_gate_destroy(&a);
    ph_gate_destroy(&b);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}

static void *hold_pool(void *arg)
{
    (void)arg;
    tern__pool_hold();
    return NULL;
}

Test(take, a_pause_holds_a_worker_with_a_run_and_puts_the_rest_back)
{
    enum { N = 6 };
    tern_pool_config cfg = ph_config(1, 64, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop();
    ph_gate a, b;
    ph_gate_init(&a);
    ph_gate_init(&b);
    ph_job first, jobs[N];
    run_behind(loop, &a, &b, &first, jobs, N);

    /* Pause while the worker runs the first entry of its run. */
    pthread_t holder;
    cr_assert_eq(pthread_create(&holder, NULL, hold_pool, NULL), 0);
    bool ok;
    PH_WAIT_UNTIL(ok, tern__test_pool_holds() == 1);
    cr_assert(ok);
    ph_gate_open(&b);
    cr_assert_eq(pthread_join(holder, NULL), 0); /* the worker holds: no job runs */
    PH_PUMP_UNTIL(ok, loop, atomic_load(&jobs[0].done_calls) == 1);
    cr_assert(ok);
    for (int i = 1; i < N; i++)
        cr_assert_eq(atomic_load(&jobs[i].ran), 0, "entry %d of the run started in the pause", i);
    cr_assert_eq(tern__test_pool_run_left(), 0u, "the rest of the run was not put back");
    cr_assert_eq(ph_stats().queued, (unsigned)N - 1);
    cr_assert_eq(ph_stats().busy, 0u);

    tern__pool_unhold();
    quiescent(loop, jobs, N, N + 1);
    tern_loop_free(loop);
    ph_gate_destroy(&a);
    ph_gate_destroy(&b);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}
