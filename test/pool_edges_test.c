/*
 * The pool's edges: the queue is full only when queued + reserved reach
 * queue_capacity, whatever the workers and the submitting loop hold
 * meanwhile; the peak is of what the statistics call queued; a loop's job
 * records go back after a burst, beyond the few it keeps for reuse.
 *   - a loop that keeps queue_capacity jobs in flight, each done
 *     submitting the next, is never refused (slots a worker is repaying
 *     are free, not full: the window's shape, and the repayment's window
 *     held open with the pool's stop points);
 *   - a batch submitted after a single job in the same callback finds
 *     the room the loop's lane holds as credit;
 *   - queued_peak does not count the slots of running jobs;
 *   - tern_loop_memory_bytes falls back near its bound once a burst has
 *     drained.
 */
#include <criterion/criterion.h>

#include "pool_helpers.h"

static tern_loop *new_loop(void)
{
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    return loop;
}

static void *empty_work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

/* ------------------------------------------------------------------ */
/* A window of queue_capacity jobs in flight                           */
/* ------------------------------------------------------------------ */

struct window {
    unsigned total;   /* jobs to run in all */
    unsigned sent;    /* jobs accepted so far */
    unsigned done;    /* dones run */
    int refused;      /* the first refusal's error, or 0 */
    tern_refusal cause;
    unsigned queued_at_refusal;
};

static void window_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)id, (void)result;
    struct window *w = arg;
    cr_assert_eq(status, 0);
    w->done++;
    if (w->refused != 0 || w->sent == w->total)
        return;
    int rc = tern_submit(loop, TERN_BOUNDED, empty_work, window_done, w, NULL);
    if (rc < 0) {
        w->refused = rc;
        w->cause = tern_loop_last_refusal(loop);
        w->queued_at_refusal = ph_stats().queued;
        return;
    }
    w->sent++;
}

/*
 * The shape of a throughput benchmark's in-flight window, sized to the
 * queue: each done resubmits, so at most queue_capacity - 1 other jobs
 * exist when it does, and the queue always has room.
 */
Test(pool_edges, a_window_of_queue_capacity_jobs_is_never_refused)
{
    enum { CAP = 1024, TOTAL = 20000 };
    tern_pool_config cfg = ph_config(2, CAP, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop();
    struct window w = {.total = TOTAL};
    for (unsigned i = 0; i < CAP; i++) {
        cr_assert_eq(tern_submit(loop, TERN_BOUNDED, empty_work, window_done, &w, NULL), 0,
                     "job %u of the first window", i);
        w.sent++;
    }
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(w.refused, 0, "refused %d (%s) after %u jobs with %u queued", w.refused,
                 tern_refusal_name(w.cause), w.sent, w.queued_at_refusal);
    cr_assert_eq(w.done, (unsigned)TOTAL);
    tern_pool_stats s = ph_stats();
    cr_assert_eq(s.refused_queue_full, 0u);
    cr_assert_leq(s.queued_peak, (unsigned)CAP);
    tern_loop_free(loop);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}

/*
 * The same edge held open: the worker has marked its owed slot as being
 * repaid and not yet given it back when the loop fills the queue's last
 * slot and asks for one more. The admission must wait the repayment out
 * (a helper lets the worker go once the admission is seen waiting), not
 * refuse for room the queue has.
 */
struct repay_helper {
    atomic_bool main_done;
    atomic_bool released;
};

static void *release_when_waited(void *arg)
{
    struct repay_helper *h = arg;
    bool ok;
    PH_WAIT_UNTIL(ok, tern__test_waiting_repayment_waited() == 1 || atomic_load(&h->main_done));
    (void)ok;
    /* Noted before the release: the admission returns as soon as it is let
     * go, and must find what the helper saw already written. */
    atomic_store(&h->released, tern__test_waiting_repayment_waited() == 1);
    tern__test_release_repaying();
    tern__test_release_repayment_waited();
    return NULL;
}

Test(pool_edges, an_admission_waits_out_a_repayment_on_its_way)
{
    enum { CAP = 4 };
    tern_pool_config cfg = ph_config(1, CAP, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop();
    ph_job jobs[CAP + 1];
    tern__test_hold_repaying();

    /* The worker runs the first job and stops repaying its slot. */
    ph_job_init(&jobs[0], NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &jobs[0]), 0);
    bool ok;
    PH_WAIT_UNTIL(ok, tern__test_waiting_repaying() == 1);
    cr_assert(ok, "the worker did not reach its repayment");

    /* CAP - 1 more: the queue holds them and the slot on its way back. */
    for (int i = 1; i < CAP; i++) {
        ph_job_init(&jobs[i], NULL);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &jobs[i]), 0, "job %d", i);
    }
    struct repay_helper h;
    atomic_init(&h.main_done, false);
    atomic_init(&h.released, false);
    pthread_t helper;
    cr_assert_eq(pthread_create(&helper, NULL, release_when_waited, &h), 0);
    ph_job_init(&jobs[CAP], NULL);
    int rc = ph_submit(loop, TERN_BOUNDED, &jobs[CAP]);
    atomic_store(&h.main_done, true);
    pthread_join(helper, NULL);
    bool waited = atomic_load(&h.released);
    cr_assert_eq(rc, 0, "refused with %d of %d slots queued and one on its way back", CAP - 1,
                 CAP);
    cr_assert(waited, "admitted before the repayment was let go");

    PH_PUMP_UNTIL(ok, loop, ph_done_total(jobs, CAP + 1) == CAP + 1);
    cr_assert(ok);
    tern_pool_stats s = ph_stats();
    cr_assert_eq(s.refused_queue_full, 0u);
    cr_assert_eq(s.submitted, (uint64_t)CAP + 1);
    tern_loop_free(loop);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}

/* ------------------------------------------------------------------ */
/* A batch after a single job in one callback                          */
/* ------------------------------------------------------------------ */

enum { BATCH_CAP = 100, BATCH_QUEUED = 60, BATCH_N = 9 };

struct batch_case {
    ph_job single;
    ph_job batch[BATCH_N];
    ph_job fill[32];
    int single_rc, batch_rc;
    tern_refusal cause;
};

/* A long job's done (step 2): fill the lane with a full run of jobs. */
static void fill_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)id, (void)status, (void)result;
    struct batch_case *c = arg;
    for (int i = 0; i < 32; i++)
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &c->fill[i]), 0, "fill job %d", i);
}

/* A long job's done (step 2): one job, then a batch that fits the queue. */
static void batch_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)id, (void)status, (void)result;
    struct batch_case *c = arg;
    c->single_rc = ph_submit(loop, TERN_BOUNDED, &c->single);
    void *args[BATCH_N];
    for (int i = 0; i < BATCH_N; i++)
        args[i] = &c->batch[i];
    c->batch_rc = tern_submit_batch(loop, TERN_BOUNDED, ph_work, ph_done, args, BATCH_N, NULL,
                                    NULL);
    c->cause = tern_loop_last_refusal(loop);
}

Test(pool_edges, a_batch_is_not_refused_for_the_credit_its_own_loop_holds)
{
    tern_pool_config cfg = ph_config(1, BATCH_CAP, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop();
    ph_gate gate;
    ph_gate_init(&gate);
    static struct batch_case c;
    ph_job holder, rest[BATCH_QUEUED - 32];

    /* The one worker held in `holder`. */
    ph_job_init(&holder, &gate);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &holder), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));

    /*
     * A full run submitted from a callback: the lane learns to take a
     * run's worth of credit. Then the rest of the 60 from outside a turn.
     */
    for (int i = 0; i < 32; i++)
        ph_job_init(&c.fill[i], &gate);
    bool ok;
    cr_assert_eq(tern_submit(loop, TERN_LONG, empty_work, fill_done, &c, NULL), 0);
    PH_PUMP_UNTIL(ok, loop, ph_stats().queued == 32);
    cr_assert(ok, "queued %u", ph_stats().queued);
    for (int i = 0; i < BATCH_QUEUED - 32; i++) {
        ph_job_init(&rest[i], &gate);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &rest[i]), 0);
    }
    cr_assert_eq(ph_stats().queued, (unsigned)BATCH_QUEUED);

    /* One job and a batch of 9 in one callback: 70 of 100 slots, so both fit. */
    ph_job_init(&c.single, &gate);
    for (int i = 0; i < BATCH_N; i++)
        ph_job_init(&c.batch[i], &gate);
    c.single_rc = c.batch_rc = 1;
    uint64_t full = ph_stats().refused_queue_full;
    cr_assert_eq(tern_submit(loop, TERN_LONG, empty_work, batch_done, &c, NULL), 0);
    PH_PUMP_UNTIL(ok, loop, c.batch_rc != 1);
    cr_assert(ok);
    cr_assert_eq(c.single_rc, 0);
    cr_assert_eq(c.batch_rc, 0, "the batch was refused (%s) with %d of %d slots queued",
                 tern_refusal_name(c.cause), BATCH_QUEUED + 1, BATCH_CAP);
    cr_assert_eq(ph_stats().refused_queue_full, full);
    PH_PUMP_UNTIL(ok, loop, ph_stats().queued == BATCH_QUEUED + 1 + BATCH_N);
    cr_assert(ok, "queued %u", ph_stats().queued);

    ph_gate_open(&gate);
    PH_PUMP_UNTIL(ok, loop,
                  atomic_load(&holder.done_calls) == 1 && ph_done_total(c.fill, 32) == 32 &&
                      ph_done_total(rest, BATCH_QUEUED - 32) == BATCH_QUEUED - 32 &&
                      atomic_load(&c.single.done_calls) == 1 &&
                      ph_done_total(c.batch, BATCH_N) == BATCH_N);
    cr_assert(ok);
    tern_loop_free(loop);
    ph_gate_destroy(&gate);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}

/* ------------------------------------------------------------------ */
/* The peak is of queued jobs                                           */
/* ------------------------------------------------------------------ */

Test(pool_edges, the_queued_peak_does_not_count_running_jobs)
{
    enum { QUEUED = 10 };
    tern_pool_config cfg = ph_config(2, 64, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop();
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job running[2], queued[QUEUED];
    for (int i = 0; i < 2; i++) {
        ph_job_init(&running[i], &gate);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &running[i]), 0);
        cr_assert(ph_gate_wait_entered(&gate, (unsigned)i + 1));
    }
    for (int i = 0; i < QUEUED; i++) {
        ph_job_init(&queued[i], &gate);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &queued[i]), 0);
    }
    tern_pool_stats s = ph_stats();
    cr_assert_eq(s.busy, 2u);
    cr_assert_eq(s.queued, (unsigned)QUEUED);
    cr_assert_eq(s.queued_peak, (unsigned)QUEUED, "peak %u with %u queued at most",
                 s.queued_peak, (unsigned)QUEUED);

    ph_gate_open(&gate);
    bool ok;
    PH_PUMP_UNTIL(ok, loop,
                  ph_done_total(running, 2) == 2 && ph_done_total(queued, QUEUED) == QUEUED);
    cr_assert(ok);
    cr_assert_eq(ph_stats().queued_peak, (unsigned)QUEUED);
    tern_loop_free(loop);
    ph_gate_destroy(&gate);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}

/* ------------------------------------------------------------------ */
/* A loop's job records after a burst                                  */
/* ------------------------------------------------------------------ */

static void count_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)result;
    cr_assert_eq(status, 0);
    (*(unsigned *)arg)++;
}

/* n jobs in flight at once behind a held worker, then drained; the memory figure at the peak. */
static uint64_t burst(tern_loop *loop, unsigned n)
{
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job holder;
    ph_job_init(&holder, &gate);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &holder), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    unsigned done = 0;
    for (unsigned i = 0; i < n; i++)
        cr_assert_eq(tern_submit(loop, TERN_BOUNDED, empty_work, count_done, &done, NULL), 0,
                     "job %u of the burst", i);
    uint64_t peak = tern_loop_memory_bytes(loop);
    ph_gate_open(&gate);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, done == n && atomic_load(&holder.done_calls) == 1);
    cr_assert(ok, "%u of %u done", done, n);
    /* One more turn: its kick is where records go back (the dones may end a turn early). */
    cr_assert_geq(tern_loop_run_once(loop, 0), 0);
    ph_gate_destroy(&gate);
    return peak;
}

Test(pool_edges, a_loop_gives_its_job_records_back_after_a_burst)
{
    enum { BURST = 20000, KEPT = 1024 };
    tern_pool_config cfg = ph_config(1, 2 * BURST, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.max_undelivered = 2 * BURST;
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, &opts), 0);

    /* The loop's figure with its result ring and a first few records. */
    unsigned done = 0;
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, empty_work, count_done, &done, NULL), 0);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, done == 1);
    cr_assert(ok);
    uint64_t base = tern_loop_memory_bytes(loop);

    for (int round = 0; round < 2; round++) {
        uint64_t peak = burst(loop, BURST);
        uint64_t after = tern_loop_memory_bytes(loop);
        /* A record's share of the burst's growth, chunk headers included. */
        uint64_t per = (peak - base) / BURST;
        cr_assert_gt(per, 0);
        cr_assert_leq(after, base + 2 * KEPT * per,
                      "round %d: %llu bytes after the burst drained (%llu before, %llu at the "
                      "peak): more than %d free records kept",
                      round, (unsigned long long)after, (unsigned long long)base,
                      (unsigned long long)peak, 2 * KEPT);
    }
    tern_loop_free(loop);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}
