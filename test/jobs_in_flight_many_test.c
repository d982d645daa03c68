/*
 * Many jobs in flight on one loop at once (SPEC §3): tens of thousands
 * accepted before the loop turns, so the loop's job records spread over
 * many chunks and its table of chunks grows while ids are live. Every job
 * still gets its one done, with its own argument; a cancel by id reaches
 * its own job in every chunk (the first record of each, and the last job)
 * while they are all in flight, and done's status agrees with what the
 * cancel answered; once delivered, an id is stale (-ENOENT).
 */
#include "loop_helpers.h"
#include "pool_helpers.h"

#define JOBS 40000u

static unsigned char done_count[JOBS];
static atomic_uint dones;
static atomic_uint mismatched;
static tern_id ids[JOBS];
static int want_status[JOBS]; /* 0, or -ECANCELED for a job the cancel stopped or told */

static void *echo_work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

static void note_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop;
    size_t i = (size_t)(uintptr_t)arg;
    if (i >= JOBS || status != want_status[i] || ids[i] != id ||
        (status == 0 && result != arg))
        atomic_fetch_add(&mismatched, 1);
    else
        done_count[i]++;
    atomic_fetch_add(&dones, 1);
}

Test(jobs_in_flight_many, forty_thousand_jobs_in_flight_each_done_once, .timeout = TEST_TIMEOUT)
{
    tern_pool_config c = ph_config(2, 65536, 0);
    cr_assert_eq(tern_pool_start(&c), 0);
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.max_undelivered = 65536;
    tern_loop *loop = loop_new_opts(&o);
    for (size_t i = 0; i < JOBS; i++) {
        int rc = tern_submit(loop, TERN_BOUNDED, echo_work, note_done, (void *)(uintptr_t)i,
                             &ids[i]);
        cr_assert_eq(rc, 0, "job %zu: %s", i, tern_strerror(rc));
    }
    cr_assert_eq(loop_live(loop), JOBS, "all accepted before the loop turned");
    /* The first job of each chunk of records (64, 128, 256, ... records),
     * and the last job: found by id while every job is in flight. */
    size_t pick[12];
    unsigned npick = 0;
    for (size_t first = 0; first < JOBS; first = 2 * first + 64)
        pick[npick++] = first;
    pick[npick++] = JOBS - 1;
    cr_assert_geq(npick, 10u);
    for (unsigned k = 0; k < npick; k++) {
        size_t i = pick[k];
        int out = tern__test_cancel_now(loop, ids[i]);
        cr_assert(out == TERN_CANCEL_STOPPED || out == TERN_CANCEL_RUNNING ||
                      out == TERN_CANCEL_FINISHED,
                  "job %zu is in flight, but its cancel answered %d", i, out);
        want_status[i] = out == TERN_CANCEL_FINISHED ? 0 : -ECANCELED;
    }
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&dones) == JOBS);
    cr_assert(ok, "%u of %u dones", atomic_load(&dones), JOBS);
    cr_assert_eq(atomic_load(&mismatched), 0u, "a done came with another job's id or result");
    for (size_t i = 0; i < JOBS; i++)
        cr_assert_eq(done_count[i], 1, "job %zu: %u dones", i, done_count[i]);
    cr_assert_eq(tern__test_cancel_now(loop, ids[0]), -ENOENT);
    cr_assert_eq(tern__test_cancel_now(loop, ids[JOBS - 1]), -ENOENT);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}
