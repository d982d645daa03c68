/*
 * Submissions with an owner and a deadline under injected allocation
 * failures (SPEC §12): a single job (tern_submit_with) and a batch larger
 * than the call's stack array (tern_submit_batch) are walked through every
 * allocation they make (n = 1, 2, ... until none fails): the deadline's
 * place, the job records, the owner's links, the batch's array. Each
 * failed call returns -ENOMEM and leaves no trace: nothing live but the
 * owner, nothing in the owner's counts, no done. The call that succeeds
 * then runs every job once, with status 0.
 */
#include "loop_helpers.h"
#include "pool_helpers.h"

static atomic_uint dones;
static atomic_uint bad_status;

static void *echo_work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

static void count_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop;
    (void)id;
    (void)result;
    (void)arg;
    if (status != 0)
        atomic_fetch_add(&bad_status, 1);
    atomic_fetch_add(&dones, 1);
}

static void assert_no_trace(tern_loop *loop, tern_id owner, const char *what, uint64_t nth)
{
    cr_assert_eq(loop_live(loop), 1u, "%s, allocation %llu: a refused call left work live", what,
                 (unsigned long long)nth);
    tern_owner_stats st;
    cr_assert_eq(tern_owner_stats_get(loop, owner, &st), 0);
    cr_assert_eq(st.in_flight, 0u, "%s, allocation %llu: counted in the owner", what,
                 (unsigned long long)nth);
    cr_assert_eq(st.accepted, 0u);
    cr_assert_eq(atomic_load(&dones), 0u, "a refused job got a done");
}

static tern_loop *setup(tern_id *owner)
{
    /* The pool first, so its start is not among the allocations walked. */
    tern_pool_config c = ph_config(2, 1024, 2);
    cr_assert_eq(tern_pool_start(&c), 0);
    tern_loop *loop = loop_new_default();
    cr_assert_eq(tern_owner_open(loop, 1000, owner), 0);
    return loop;
}

static void finish(tern_loop *loop, tern_id owner, unsigned jobs)
{
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&dones) == jobs);
    cr_assert(ok, "%u of %u dones", atomic_load(&dones), jobs);
    cr_assert_eq(atomic_load(&bad_status), 0u, "a job finished with an error");
    cr_assert_eq(tern_owner_close(loop, owner), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    cr_assert_eq(atomic_load(&dones), jobs, "a done came twice");
}

Test(owned_submit_faults, a_single_owned_job_with_a_deadline, .timeout = TEST_TIMEOUT)
{
    tern_id owner;
    tern_loop *loop = setup(&owner);
    tern_job_options o;
    tern_job_options_init(&o);
    o.owner = owner;
    o.timeout_ns = HOUR;
    unsigned failures = 0;
    for (uint64_t nth = 1;; nth++) {
        tern_id id = 0;
        tern__fault_arm(TERN__FAULT_ALLOC, nth);
        int rc = tern_submit_with(loop, TERN_BOUNDED, echo_work, count_done, NULL, &o, &id);
        bool fired = tern__fault_fired();
        tern__fault_arm(0, 0);
        if (!fired) {
            cr_assert_eq(rc, 0, "%s", tern_strerror(rc));
            cr_assert_neq(id, 0u);
            break;
        }
        failures++;
        cr_assert_eq(rc, -ENOMEM, "allocation %llu: %s", (unsigned long long)nth,
                     tern_strerror(rc));
        cr_assert_eq(id, 0u);
        assert_no_trace(loop, owner, "tern_submit_with", nth);
    }
    cr_assert_geq(failures, 3u, "the ring, the deadline, the record, the owner's links: %u",
                  failures);
    finish(loop, owner, 1);
}

#define BATCH 100 /* more than a batch's array on the stack holds */

Test(owned_submit_faults, an_owned_batch_with_a_deadline, .timeout = TEST_TIMEOUT)
{
    tern_id owner;
    tern_loop *loop = setup(&owner);
    tern_job_options o;
    tern_job_options_init(&o);
    o.owner = owner;
    o.timeout_ns = HOUR;
    static void *args[BATCH];
    static tern_id ids[BATCH];
    unsigned failures = 0;
    for (uint64_t nth = 1;; nth++) {
        memset(ids, 0, sizeof ids);
        tern__fault_arm(TERN__FAULT_ALLOC, nth);
        int rc = tern_submit_batch(loop, TERN_BOUNDED, echo_work, count_done, args, BATCH, &o, ids);
        bool fired = tern__fault_fired();
        tern__fault_arm(0, 0);
        if (!fired) {
            cr_assert_eq(rc, 0, "%s", tern_strerror(rc));
            break;
        }
        failures++;
        cr_assert_eq(rc, -ENOMEM, "allocation %llu: %s", (unsigned long long)nth,
                     tern_strerror(rc));
        cr_assert_eq(ids[0], 0u, "ids are written only on success");
        assert_no_trace(loop, owner, "tern_submit_batch", nth);
    }
    cr_assert_geq(failures, 3u, "the array, the deadline, the records, the owner's links: %u",
                  failures);
    for (unsigned i = 0; i < BATCH; i++)
        cr_assert_neq(ids[i], 0u);
    finish(loop, owner, BATCH);
}

/* A batch bigger than the stack array, refused by the pool (its queue is
 * smaller than the batch): the array goes back and nothing is left. */
Test(owned_submit_faults, a_large_batch_refused_by_the_pool_leaves_nothing,
     .timeout = TEST_TIMEOUT)
{
    tern_pool_config c = ph_config(1, 16, 0);
    cr_assert_eq(tern_pool_start(&c), 0);
    tern_loop *loop = loop_new_default();
    static void *args[BATCH];
    static tern_id ids[BATCH];
    int rc = tern_submit_batch(loop, TERN_BOUNDED, echo_work, count_done, args, BATCH, NULL, ids);
    cr_assert_eq(rc, -EAGAIN, "%s", tern_strerror(rc));
    cr_assert_eq(tern_loop_last_refusal(loop), TERN_REFUSED_QUEUE_FULL);
    cr_assert_eq(ids[0], 0u);
    cr_assert_eq(loop_live(loop), 0u);
    rc = tern_submit_batch(loop, TERN_BOUNDED, echo_work, count_done, args, 16, NULL, ids);
    cr_assert_eq(rc, 0, "a batch that fits: %s", tern_strerror(rc));
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&dones) == 16);
    cr_assert(ok);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    cr_assert_eq(atomic_load(&dones), 16u);
}
