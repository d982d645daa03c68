/*
 * Batch submission (tern/batch.h, SPEC §18): an accepted batch delivers
 * every job's done exactly once with its own id; a batch refused for any
 * cause, in part or whole, leaves nothing behind (no id, no done, no
 * credit, no queue slot, no owner count; only the refusal counters move,
 * by the batch's size); a batch makes one wake decision, not one per job.
 */
#include <criterion/criterion.h>

#include "pool_helpers.h"

#define MANY 300

static void shutdown_clean(void)
{
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}

static tern_loop *new_loop(tern_pool_config *cfg, unsigned max_operations,
                           unsigned max_undelivered)
{
    tern_loop_options opts;
    tern_loop *loop = NULL;
    tern_loop_options_init(&opts);
    opts.pool = cfg;
    if (max_operations != 0)
        opts.max_operations = max_operations;
    if (max_undelivered != 0)
        opts.max_undelivered = max_undelivered;
    cr_assert_eq(tern_loop_new(&loop, &opts), 0);
    return loop;
}

static void init_jobs(ph_job *jobs, void **args, size_t n, ph_gate *gate)
{
    for (size_t i = 0; i < n; i++) {
        ph_job_init(&jobs[i], gate);
        args[i] = &jobs[i];
    }
}

/* A first job whose done does the test's work inside a turn (steps 1-2: the lane's turf). */
static void submit_first(tern_loop *loop, ph_job *first, tern_done_fn done)
{
    ph_job_init(first, NULL);
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, ph_work, done, first, NULL), 0);
}

/* Run the loop until every job has its done, then check each came once, with its id. */
static void expect_delivered(tern_loop *loop, ph_job *jobs, const tern_id *ids, size_t n)
{
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(jobs, n) == (int)n);
    cr_assert(ok, "only %d of %zu dones came", ph_done_total(jobs, n), n);
    cr_assert_eq(tern_loop_run(loop), 0);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(atomic_load(&jobs[i].done_calls), 1, "job %zu: %d dones", i,
                     atomic_load(&jobs[i].done_calls));
        cr_assert_eq(atomic_load(&jobs[i].ran), 1, "job %zu ran %d times", i,
                     atomic_load(&jobs[i].ran));
        cr_assert_eq(jobs[i].status, 0);
        cr_assert_neq(ids[i], 0);
        cr_assert_eq(jobs[i].done_id, ids[i], "job %zu: done saw another id", i);
        cr_assert_eq(jobs[i].work_id, ids[i], "job %zu: tern_job_id differs", i);
        for (size_t k = 0; k < i; k++)
            cr_assert_neq(ids[k], ids[i], "jobs %zu and %zu share an id", k, i);
    }
}

Test(batch, accepted_batch_delivered_exactly_once, .fini = shutdown_clean)
{
    static ph_job jobs[MANY];
    static void *args[MANY];
    static tern_id ids[MANY];
    tern_pool_config cfg = ph_config(2, 1024, 4);
    tern_loop *loop = new_loop(&cfg, 0, 0);
    init_jobs(jobs, args, MANY, NULL);
    tern_pool_stats s0 = ph_stats();

    cr_assert_eq(tern_submit_batch(loop, TERN_BOUNDED, ph_work, ph_done, args, MANY, NULL, ids),
                 0);
    cr_assert_eq(tern_loop_last_refusal(loop), TERN_REFUSED_NONE);
    expect_delivered(loop, jobs, ids, MANY);

    tern_pool_stats s1 = ph_stats();
    cr_assert_eq(s1.submitted - s0.submitted, MANY);
    cr_assert_eq(s1.completed - s0.completed, MANY);
    tern_loop_stats ls = ph_loop_stats(loop);
    cr_assert_eq(ls.undelivered, 0);
    tern_loop_free(loop);
}

/*
 * A snapshot of everything a refused batch must leave as it was, and a
 * check that only `cause`'s counter moved, by n.
 */
struct books {
    tern_pool_stats pool;
    tern_loop_stats loop;
    uint64_t wake_checks;
};

static struct books books_now(tern_loop *loop)
{
    return (struct books){ph_stats(), ph_loop_stats(loop), tern__test_pool_wake_checks()};
}

static void expect_refused(tern_loop *loop, size_t n, const tern_job_options *opts,
                           tern_refusal cause)
{
    static ph_job victims[MANY];
    static void *args[MANY];
    static tern_id ids[MANY];
    cr_assert(n <= MANY);
    init_jobs(victims, args, n, NULL);
    for (size_t i = 0; i < n; i++)
        ids[i] = 777;
    struct books b0 = books_now(loop);

    int rc = tern_submit_batch(loop, TERN_BOUNDED, ph_work, ph_done, args, n, opts, ids);
    cr_assert_eq(rc, -EAGAIN, "expected -EAGAIN (%s), got %s", tern_refusal_name(cause),
                 tern_err_name(rc));
    cr_assert_eq(tern_loop_last_refusal(loop), cause, "cause %s, expected %s",
                 tern_refusal_name(tern_loop_last_refusal(loop)), tern_refusal_name(cause));

    struct books b1 = books_now(loop);
    for (int c = TERN_REFUSED_QUEUE_FULL; c <= TERN_REFUSED_THREADS; c++) {
        uint64_t d = ph_refused(&b1.pool, (tern_refusal)c) - ph_refused(&b0.pool, (tern_refusal)c);
        cr_assert_eq(d, c == (int)cause ? n : 0, "refused_%s moved by %llu",
                     tern_refusal_name((tern_refusal)c), (unsigned long long)d);
    }
    cr_assert_eq(b1.pool.submitted, b0.pool.submitted, "a refused batch counted as submitted");
    cr_assert_eq(b1.pool.queued, b0.pool.queued, "a refused batch holds queue slots");
    cr_assert_eq(b1.loop.undelivered, b0.loop.undelivered, "a refused batch holds credits");
    cr_assert_eq(b1.loop.live_operations, b0.loop.live_operations, "a refused batch is live");
    cr_assert_eq(b1.wake_checks, b0.wake_checks, "a refused batch woke the pool");
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(ids[i], 777, "a refused batch wrote an id");

    /* Nothing is owed to it: turn the loop a few times and look again. */
    for (int t = 0; t < 3; t++)
        (void)tern_loop_run_once(loop, (int64_t)PH_MS);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(atomic_load(&victims[i].ran), 0, "a refused job ran");
        cr_assert_eq(atomic_load(&victims[i].done_calls), 0, "a refused job got a done");
    }
}

/* One worker held at a gate, then `queued` jobs waiting behind it. */
static void fill_queue(tern_loop *loop, ph_gate *gate, ph_job *hold, ph_job *queued, size_t n)
{
    ph_job_init(hold, gate);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, hold), 0);
    cr_assert(ph_gate_wait_entered(gate, 1));
    for (size_t i = 0; i < n; i++) {
        ph_job_init(&queued[i], NULL);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &queued[i]), 0);
    }
}

Test(batch, refused_when_queue_cannot_hold_it_all, .fini = shutdown_clean)
{
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job hold, queued[5];
    tern_pool_config cfg = ph_config(1, 8, 4);
    tern_loop *loop = new_loop(&cfg, 0, 0);
    fill_queue(loop, &gate, &hold, queued, 5);
    cr_assert_eq(ph_stats().queued, 5);

    /* 3 slots are free: 4 do not fit, so none is taken. */
    expect_refused(loop, 4, NULL, TERN_REFUSED_QUEUE_FULL);
    cr_assert_eq(ph_stats().queued, 5);

    /* Exactly 3 fit. */
    static ph_job fit[3];
    static void *args[3];
    tern_id ids[3];
    init_jobs(fit, args, 3, NULL);
    cr_assert_eq(tern_submit_batch(loop, TERN_BOUNDED, ph_work, ph_done, args, 3, NULL, ids), 0);
    cr_assert_eq(ph_stats().queued, 8);
    ph_gate_open(&gate);
    expect_delivered(loop, fit, ids, 3);
    tern_loop_free(loop);
    ph_gate_destroy(&gate);
}

Test(batch, refused_beyond_max_undelivered, .fini = shutdown_clean)
{
    /* One worker, held: the five queued jobs stay queued while the books are read. */
    tern_pool_config cfg = ph_config(1, 1024, 4);
    tern_loop *loop = new_loop(&cfg, 0, 16);
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job hold, queued[5];
    fill_queue(loop, &gate, &hold, queued, 5); /* 6 credits held */

    expect_refused(loop, 11, NULL, TERN_REFUSED_UNDELIVERED);
    static ph_job fit[10];
    static void *args[10];
    tern_id ids[10];
    init_jobs(fit, args, 10, NULL);
    cr_assert_eq(tern_submit_batch(loop, TERN_BOUNDED, ph_work, ph_done, args, 10, NULL, ids), 0);
    ph_gate_open(&gate);
    expect_delivered(loop, fit, ids, 10);
    tern_loop_free(loop);
    ph_gate_destroy(&gate);
}

Test(batch, refused_beyond_max_operations, .fini = shutdown_clean)
{
    tern_pool_config cfg = ph_config(2, 1024, 4);
    tern_loop *loop = new_loop(&cfg, 20, 0);
    unsigned live = ph_loop_stats(loop).live_operations;
    unsigned room = 20 - live;

    expect_refused(loop, room + 1, NULL, TERN_REFUSED_OPERATIONS);
    static ph_job fit[20];
    static void *args[20];
    tern_id ids[20];
    init_jobs(fit, args, room, NULL);
    cr_assert_eq(tern_submit_batch(loop, TERN_BOUNDED, ph_work, ph_done, args, room, NULL, ids),
                 0);
    expect_delivered(loop, fit, ids, room);
    tern_loop_free(loop);
}

Test(batch, refused_beyond_owner_cap, .fini = shutdown_clean)
{
    tern_pool_config cfg = ph_config(2, 1024, 4);
    tern_loop *loop = new_loop(&cfg, 0, 0);
    tern_id owner;
    cr_assert_eq(tern_owner_open(loop, 4, &owner), 0);
    tern_job_options o;
    tern_job_options_init(&o);
    o.owner = owner;

    expect_refused(loop, 5, &o, TERN_REFUSED_OWNER_CAP);
    tern_owner_stats os;
    cr_assert_eq(tern_owner_stats_get(loop, owner, &os), 0);
    cr_assert_eq(os.in_flight, 0, "a refused batch counts against its owner");
    cr_assert_eq(os.accepted, 0);
    cr_assert_eq(os.refused, 5, "the owner counts each job refused");

    static ph_job fit[4];
    static void *args[4];
    tern_id ids[4];
    init_jobs(fit, args, 4, NULL);
    cr_assert_eq(tern_submit_batch(loop, TERN_BOUNDED, ph_work, ph_done, args, 4, &o, ids), 0);
    cr_assert_eq(tern_owner_stats_get(loop, owner, &os), 0);
    cr_assert_eq(os.accepted, 4);
    expect_delivered(loop, fit, ids, 4);
    cr_assert_eq(tern_owner_stats_get(loop, owner, &os), 0);
    cr_assert_eq(os.in_flight, 0);
    cr_assert_eq(tern_owner_close(loop, owner), 0);
    tern_loop_free(loop);
}

Test(batch, bad_values_change_nothing, .fini = shutdown_clean)
{
    tern_loop *loop = new_loop(NULL, 0, 0);
    ph_job j;
    ph_job_init(&j, NULL);
    void *args[1] = {&j};
    tern_job_options o;
    tern_job_options_init(&o);
    o.owner = 424242; /* no such owner */
    cr_assert_eq(tern_submit_batch(loop, TERN_BOUNDED, ph_work, ph_done, args, 0, NULL, NULL),
                 -EINVAL);
    cr_assert_eq(tern_submit_batch(loop, TERN_BOUNDED, ph_work, ph_done, args,
                                   (size_t)TERN_BATCH_MAX + 1, NULL, NULL),
                 -EINVAL);
    cr_assert_eq(tern_submit_batch(loop, TERN_LONG, ph_work, ph_done, args, 1, NULL, NULL),
                 -EINVAL);
    cr_assert_eq(tern_submit_batch(loop, TERN_BOUNDED, ph_work, ph_done, NULL, 1, NULL, NULL),
                 -EINVAL);
    cr_assert_eq(tern_submit_batch(loop, TERN_BOUNDED, NULL, ph_done, args, 1, NULL, NULL),
                 -EINVAL);
    cr_assert_eq(tern_submit_batch(loop, TERN_BOUNDED, ph_work, ph_done, args, 1, &o, NULL),
                 -EINVAL);
    tern_job_options long_wait;
    tern_job_options_init(&long_wait);
    long_wait.timeout_ns = UINT64_MAX; /* beyond the 2^62 ns a deadline holds */
    cr_assert_eq(
        tern_submit_batch(loop, TERN_BOUNDED, ph_work, ph_done, args, 1, &long_wait, NULL),
        -EINVAL);
    cr_assert_eq(ph_loop_stats(loop).live_operations, 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&j.done_calls), 0);
    tern_loop_free(loop);
}

/* Outside a turn a batch makes one wake decision for all its jobs. */
Test(batch, one_wake_decision_per_batch, .fini = shutdown_clean)
{
    static ph_job jobs[64];
    static void *args[64];
    static tern_id ids[64];
    tern_pool_config cfg = ph_config(2, 1024, 4);
    tern_loop *loop = new_loop(&cfg, 0, 0);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    init_jobs(jobs, args, 64, NULL);

    uint64_t w0 = tern__test_pool_wake_checks();
    cr_assert_eq(tern_submit_batch(loop, TERN_BOUNDED, ph_work, ph_done, args, 64, NULL, ids), 0);
    uint64_t w1 = tern__test_pool_wake_checks();
    cr_assert_eq(w1 - w0, 1, "a batch of 64 made %llu wake decisions",
                 (unsigned long long)(w1 - w0));
    expect_delivered(loop, jobs, ids, 64);
    tern_loop_free(loop);
}

/* From a done, inside step 2: no wake decision in the call, one for the turn. */
static ph_job chained[64];
static void *chained_args[64];
static tern_id chained_ids[64];
static uint64_t checks_in_call;

static void first_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)id, (void)status, (void)result, (void)arg;
    uint64_t w0 = tern__test_pool_wake_checks();
    cr_assert_eq(tern_submit_batch(loop, TERN_BOUNDED, ph_work, ph_done, chained_args, 64, NULL,
                                   chained_ids),
                 0);
    checks_in_call = tern__test_pool_wake_checks() - w0;
}

Test(batch, batch_from_done_defers_its_wake_to_the_turn, .fini = shutdown_clean)
{
    tern_pool_config cfg = ph_config(2, 1024, 4);
    tern_loop *loop = new_loop(&cfg, 0, 0);
    init_jobs(chained, chained_args, 64, NULL);
    ph_job first;
    checks_in_call = 99;
    submit_first(loop, &first, first_done);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, checks_in_call != 99);
    cr_assert(ok);
    cr_assert_eq(checks_in_call, 0, "a batch in step 2 made %llu wake decisions itself",
                 (unsigned long long)checks_in_call);
    expect_delivered(loop, chained, chained_ids, 64);
    tern_loop_free(loop);
}

/* Each job of a batch is its own job: a cancel or a timeout reaches it alone. */
Test(batch, jobs_of_a_batch_cancel_and_time_out_one_by_one, .fini = shutdown_clean)
{
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job hold;
    tern_pool_config cfg = ph_config(1, 64, 4);
    tern_loop *loop = new_loop(&cfg, 0, 0);
    fill_queue(loop, &gate, &hold, NULL, 0);

    static ph_job jobs[4];
    static void *args[4];
    tern_id ids[4];
    init_jobs(jobs, args, 4, NULL);
    tern_job_options o;
    tern_job_options_init(&o);
    o.timeout_ns = 20 * PH_MS;
    cr_assert_eq(tern_submit_batch(loop, TERN_BOUNDED, ph_work, ph_done, args, 4, &o, ids), 0);
    cr_assert_eq(tern__test_cancel_now(loop, ids[1]), TERN_CANCEL_STOPPED);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(jobs, 4) == 4);
    cr_assert(ok);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(atomic_load(&jobs[i].ran), 0);
        cr_assert_eq(jobs[i].status, i == 1 ? -ECANCELED : -ETIMEDOUT, "job %d: %d", i,
                     jobs[i].status);
    }
    ph_gate_open(&gate);
    PH_PUMP_UNTIL(ok, loop, atomic_load(&hold.done_calls) == 1);
    cr_assert(ok);
    tern_loop_free(loop);
    ph_gate_destroy(&gate);
}

/*
 * Memory running out anywhere inside a batch (its list, a record, an id,
 * a deadline's heap slot) refuses the whole batch with -ENOMEM and
 * leaves nothing behind; the first run that injects nothing is accepted.
 */
static void walk_alloc_faults(tern_loop *loop, const tern_job_options *opts)
{
    enum { N = 100 }; /* more than a batch list kept on the stack */
    static ph_job jobs[N];
    static void *args[N];
    static tern_id ids[N];
    bool accepted = false;
    unsigned refused = 0;
    for (uint64_t nth = 1; nth < 10000 && !accepted; nth++) {
        init_jobs(jobs, args, N, NULL);
        struct books b0 = books_now(loop);
        tern__fault_arm(TERN__FAULT_ALLOC, nth);
        int rc = tern_submit_batch(loop, TERN_BOUNDED, ph_work, ph_done, args, N, opts, ids);
        bool fired = tern__fault_fired();
        tern__fault_arm(0, 0);
        if (!fired) {
            cr_assert_eq(rc, 0, "no fault injected, yet %s", tern_err_name(rc));
            accepted = true;
            break;
        }
        if (rc == 0) {
            accepted = true; /* the fault hit something the batch could do without */
            break;
        }
        cr_assert_eq(rc, -ENOMEM, "allocation %llu failed: %s", (unsigned long long)nth,
                     tern_err_name(rc));
        refused++;
        struct books b1 = books_now(loop);
        cr_assert_eq(b1.pool.submitted, b0.pool.submitted);
        cr_assert_eq(b1.pool.queued, b0.pool.queued);
        cr_assert_eq(b1.loop.undelivered, b0.loop.undelivered);
        cr_assert_eq(b1.loop.live_operations, b0.loop.live_operations,
                     "allocation %llu: a batch refused for memory left ops live",
                     (unsigned long long)nth);
    }
    cr_assert(accepted, "the batch was never accepted");
    cr_assert_geq(refused, 2, "only %u allocations of a batch could fail", refused);
    expect_delivered(loop, jobs, ids, N);
}

Test(batch, out_of_memory_leaves_nothing_behind, .fini = shutdown_clean)
{
    tern_pool_config cfg = ph_config(2, 1024, 4);
    tern_loop *loop = new_loop(&cfg, 0, 0);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    walk_alloc_faults(loop, NULL);
    tern_job_options o;
    tern_job_options_init(&o);
    o.timeout_ns = 10 * PH_SEC; /* each job also claims a deadline */
    walk_alloc_faults(loop, &o);
    tern_loop_free(loop);
}

/*
 * The lane: jobs a done callback submits are admitted at
 * once but reach the queue at the turn's kick, or in runs of
 * TERN__LANE_MAX. Whatever the mix of single submissions and batches, one
 * worker starts them in the order they were submitted: a batch pushes
 * what the lane holds before its own jobs, and a full lane pushes itself.
 */
enum { LANE_FIRST = 40, LANE_BATCH = 8, LANE_LAST = 5 };
#define LANE_JOBS (LANE_FIRST + LANE_BATCH + LANE_LAST)
static ph_job lane_jobs[LANE_JOBS];
static void *lane_args[LANE_JOBS];
static atomic_uint lane_started;
static unsigned lane_order[LANE_JOBS]; /* the start position of each job */

static void *ordered_work(tern_job *job, void *arg)
{
    lane_order[(ph_job *)arg - lane_jobs] = atomic_fetch_add(&lane_started, 1);
    return ph_work(job, arg);
}

static void submit_mixed_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)id, (void)result, (void)arg;
    cr_assert_eq(status, 0);
    for (unsigned i = 0; i < LANE_FIRST; i++)
        cr_assert_eq(tern_submit(loop, TERN_BOUNDED, ordered_work, ph_done, &lane_jobs[i], NULL),
                     0);
    cr_assert_eq(tern_submit_batch(loop, TERN_BOUNDED, ordered_work, ph_done,
                                   &lane_args[LANE_FIRST], LANE_BATCH, NULL, NULL),
                 0);
    for (unsigned i = LANE_FIRST + LANE_BATCH; i < LANE_JOBS; i++)
        cr_assert_eq(tern_submit(loop, TERN_BOUNDED, ordered_work, ph_done, &lane_jobs[i], NULL),
                     0);
}

Test(batch, resubmissions_from_done_start_in_submission_order, .fini = shutdown_clean)
{
    tern_pool_config cfg = ph_config(1, 1024, 4);
    tern_loop *loop = new_loop(&cfg, 0, 0);
    init_jobs(lane_jobs, lane_args, LANE_JOBS, NULL);
    ph_job first;
    submit_first(loop, &first, submit_mixed_done);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(lane_jobs, LANE_JOBS) == LANE_JOBS);
    cr_assert(ok, "%d of %d dones", ph_done_total(lane_jobs, LANE_JOBS), LANE_JOBS);
    for (unsigned i = 0; i < LANE_JOBS; i++) {
        cr_assert_eq(atomic_load(&lane_jobs[i].ran), 1);
        cr_assert_eq(lane_order[i], i, "job %u started %uth", i, lane_order[i]);
    }
    tern_loop_free(loop);
}

/*
 * A shutdown called from a done callback, right after it submitted: the
 * jobs are accepted but still in the loop's lane, where only this thread
 * can push them. The shutdown pushes them first, so a draining one runs
 * them and returns 0 (instead of waiting its timeout out for units that
 * never leave).
 */
static ph_job held_jobs[3];
static int held_shutdown_rc = 1;
static int held_ran_at_return = -1;

static void submit_then_shutdown_done(tern_loop *loop, tern_id id, int status, void *result,
                                      void *arg)
{
    (void)id, (void)status, (void)result, (void)arg;
    for (unsigned i = 0; i < 3; i++)
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &held_jobs[i]), 0);
    held_shutdown_rc = tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC);
    held_ran_at_return = 0;
    for (unsigned i = 0; i < 3; i++)
        held_ran_at_return += atomic_load(&held_jobs[i].ran);
}

Test(batch, shutdown_from_done_pushes_the_lane_first, .fini = shutdown_clean)
{
    tern_pool_config cfg = ph_config(2, 64, 4);
    tern_loop *loop = new_loop(&cfg, 0, 0);
    for (unsigned i = 0; i < 3; i++)
        ph_job_init(&held_jobs[i], NULL);
    ph_job first;
    submit_first(loop, &first, submit_then_shutdown_done);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(held_jobs, 3) == 3);
    cr_assert(ok);
    cr_assert_eq(held_shutdown_rc, 0, "the shutdown returned %s", tern_err_name(held_shutdown_rc));
    cr_assert_eq(held_ran_at_return, 3, "%d of 3 jobs had run when the shutdown returned",
                 held_ran_at_return);
    for (unsigned i = 0; i < 3; i++)
        cr_assert_eq(held_jobs[i].status, 0);
    tern_loop_free(loop);
}

/*
 * A job still in the lane is stopped as a queued one: its done says
 * -ECANCELED, its work never runs, and its queue slot is free at once.
 */
static ph_job lane_cancelled, lane_kept;
static int lane_cancel_rc = 1;
static unsigned queued_after_cancel = 99;

static void submit_then_cancel_done(tern_loop *loop, tern_id id, int status, void *result,
                                    void *arg)
{
    (void)id, (void)status, (void)result, (void)arg;
    unsigned q0 = ph_stats().queued;
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &lane_cancelled), 0);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &lane_kept), 0);
    cr_assert_eq(ph_stats().queued, q0 + 2, "accepted into the lane, counted as queued");
    lane_cancel_rc = tern__test_cancel_now(loop, lane_cancelled.id);
    queued_after_cancel = ph_stats().queued - q0;
}

Test(batch, a_job_in_the_lane_cancels_as_a_queued_one, .fini = shutdown_clean)
{
    tern_pool_config cfg = ph_config(1, 64, 4);
    tern_loop *loop = new_loop(&cfg, 0, 0);
    ph_job_init(&lane_cancelled, NULL);
    ph_job_init(&lane_kept, NULL);
    ph_job first;
    submit_first(loop, &first, submit_then_cancel_done);
    bool ok;
    PH_PUMP_UNTIL(ok, loop,
                  atomic_load(&lane_cancelled.done_calls) == 1 &&
                      atomic_load(&lane_kept.done_calls) == 1);
    cr_assert(ok);
    cr_assert_eq(lane_cancel_rc, TERN_CANCEL_STOPPED);
    cr_assert_eq(queued_after_cancel, 1, "the cancelled job's slot was not given back");
    cr_assert_eq(lane_cancelled.status, -ECANCELED);
    cr_assert_eq(atomic_load(&lane_cancelled.ran), 0);
    cr_assert_eq(lane_kept.status, 0);
    cr_assert_eq(atomic_load(&lane_kept.ran), 1);
    tern_loop_free(loop);
}

/*
 * A lane takes queue slots and pool units ahead, as many as its last run
 * held (pool.h, struct tern__lane), and gives back what its run did not
 * use when it is pushed: a run of eight, then a run of one, leaves no
 * slot behind (the seven the second took ahead come back at its push),
 * and the pool still drains (its units came back too: the fixture's
 * shutdown would time out).
 */
#define CREDIT_RUN 8
static ph_job credit_run[CREDIT_RUN], credit_single;
static unsigned credit_run_done;
static unsigned credit_queued_in_turn = 99;

static void credit_run_done_cb(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    ph_done(loop, id, status, result, arg);
    if (++credit_run_done < CREDIT_RUN)
        return;
    /* The last of the run: one job, on a credit the size of the last run. */
    unsigned q0 = ph_stats().queued;
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &credit_single), 0);
    credit_queued_in_turn = ph_stats().queued - q0;
}

static void submit_credit_run_done(tern_loop *loop, tern_id id, int status, void *result,
                                   void *arg)
{
    (void)id, (void)status, (void)result, (void)arg;
    for (unsigned i = 0; i < CREDIT_RUN; i++)
        cr_assert_eq(tern_submit(loop, TERN_BOUNDED, ph_work, credit_run_done_cb,
                                 &credit_run[i], NULL),
                     0);
}

Test(batch, a_lane_gives_back_the_credit_its_run_did_not_use, .fini = shutdown_clean)
{
    tern_pool_config cfg = ph_config(1, 64, 4);
    tern_loop *loop = new_loop(&cfg, 0, 0);
    init_jobs(credit_run, (void *[CREDIT_RUN]){0}, CREDIT_RUN, NULL);
    ph_job_init(&credit_single, NULL);
    ph_job first;
    submit_first(loop, &first, submit_credit_run_done);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&credit_single.done_calls) == 1);
    cr_assert(ok, "%u of %d dones of the run, and the single's never came", credit_run_done,
              CREDIT_RUN);
    cr_assert_eq(credit_single.status, 0);
    /* Inside the turn the credit shows as queued: the run's length, no more. */
    cr_assert(credit_queued_in_turn >= 1 && credit_queued_in_turn <= CREDIT_RUN,
              "the single submission moved queued by %u", credit_queued_in_turn);
    tern_pool_stats s = ph_stats();
    cr_assert_eq(s.queued, 0, "%u slots left behind by the lane's credit", s.queued);
    cr_assert_eq(s.reserved, 0);
    tern_loop_free(loop);
}

/*
 * A shutdown begun in the middle of a turn refuses the turn's next
 * submission even while the loop's lane still holds credit taken before
 * it began: credit is admission taken ahead, not a licence past
 * `closing`. Nine submissions leave the lane seven units of credit (it
 * takes 1, 1, 2, 4, then 8); another loop's submission, refused for the
 * shutdown, shows that it has begun; the lane's next must be refused
 * too, and the nine accepted before it still run (the shutdown drains).
 */
#define MIDTURN_HELD 9
static ph_job midturn_held[MIDTURN_HELD], midturn_late;
static tern_loop *midturn_other;
static int midturn_rc = 1, midturn_refusal = -1, midturn_seen = 0;

static void *midturn_shut_down(void *arg)
{
    *(int *)arg = tern_pool_shutdown(TERN_POOL_DRAIN, 30 * PH_SEC);
    return NULL;
}

static pthread_t midturn_thread;
static int midturn_shutdown_rc = 1;

static void submit_across_shutdown_done(tern_loop *loop, tern_id id, int status, void *result,
                                        void *arg)
{
    (void)id, (void)status, (void)result, (void)arg;
    for (unsigned i = 0; i < MIDTURN_HELD; i++)
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &midturn_held[i]), 0);
    cr_assert_eq(pthread_create(&midturn_thread, NULL, midturn_shut_down, &midturn_shutdown_rc), 0);
    /*
     * Outside its turns the other loop has no lane: its refusal is the
     * shutdown's mark. A probe accepted before it is run to its done here
     * (a callback may run another loop's turns), so none are left over.
     */
    uint64_t deadline = ph_now() + PH_LIVENESS_NS;
    while (ph_now() < deadline) {
        ph_job probe;
        ph_job_init(&probe, NULL);
        int rc = ph_submit(midturn_other, TERN_BOUNDED, &probe);
        if (rc == -EAGAIN && tern_loop_last_refusal(midturn_other) == TERN_REFUSED_SHUTDOWN) {
            midturn_seen = 1;
            break;
        }
        cr_assert_eq(rc, 0, "%s", tern_err_name(rc));
        bool ok;
        PH_PUMP_UNTIL(ok, midturn_other, atomic_load(&probe.done_calls) == 1);
        cr_assert(ok, "a probe accepted before the shutdown never came back");
        ph_sleep_ns(PH_MS);
    }
    midturn_rc = ph_submit(loop, TERN_BOUNDED, &midturn_late);
    midturn_refusal = (int)tern_loop_last_refusal(loop);
}

Test(batch, a_shutdown_begun_mid_turn_refuses_the_lanes_credit, .fini = shutdown_clean)
{
    tern_pool_config cfg = ph_config(2, 64, 4);
    tern_loop *loop = new_loop(&cfg, 0, 0);
    midturn_other = new_loop(&cfg, 0, 0);
    init_jobs(midturn_held, (void *[MIDTURN_HELD]){0}, MIDTURN_HELD, NULL);
    ph_job_init(&midturn_late, NULL);
    ph_job first;
    submit_first(loop, &first, submit_across_shutdown_done);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(midturn_held, MIDTURN_HELD) == MIDTURN_HELD);
    cr_assert(ok, "%d of %d held jobs came back", ph_done_total(midturn_held, MIDTURN_HELD),
              MIDTURN_HELD);
    pthread_join(midturn_thread, NULL);
    cr_assert_eq(midturn_shutdown_rc, 0, "%s", tern_err_name(midturn_shutdown_rc));
    cr_assert(midturn_seen, "the other loop was never refused for the shutdown");
    cr_assert_eq(midturn_rc, -EAGAIN, "a submission on the lane's credit after the shutdown "
                                      "began returned %s",
                 tern_err_name(midturn_rc));
    cr_assert_eq(midturn_refusal, (int)TERN_REFUSED_SHUTDOWN);
    cr_assert_eq(atomic_load(&midturn_late.done_calls), 0);
    cr_assert_eq(atomic_load(&midturn_late.ran), 0);
    for (unsigned i = 0; i < MIDTURN_HELD; i++)
        cr_assert_eq(midturn_held[i].status, 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    tern_loop_free(midturn_other);
    tern_loop_free(loop);
}
