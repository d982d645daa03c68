/*
 * tern_pool_shutdown (SPEC §10): DRAIN lets queued and running jobs
 * finish; CANCEL tombstones queued jobs and marks running ones cancelled;
 * completions still reach their loops, which deliver them on later turns;
 * -ETIMEDOUT when running jobs outlast the timeout, with nothing freed
 * under them; a later submission starts a fresh pool.
 */
#include <criterion/criterion.h>

#include "pool_helpers.h"

static tern_loop *one_worker_loop(void)
{
    tern_pool_config cfg = ph_config(1, 64, 4);
    tern_loop *loop = NULL;
    cr_assert_eq(tern_pool_start(&cfg), 0);
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    return loop;
}

/* After a shutdown: no pool, and the next submission starts a fresh one. */
static void fresh_pool_works(tern_loop *loop)
{
    cr_assert(!tern__pool_running(), "the pool still runs after shutdown returned 0");
    for (int occ = TERN_BOUNDED; occ <= TERN_LONG; occ++) {
        ph_job j;
        ph_job_init(&j, NULL);
        cr_assert_eq(ph_submit(loop, (tern_occupancy)occ, &j), 0);
        cr_assert(tern__pool_running());
        bool ok;
        PH_PUMP_UNTIL(ok, loop, atomic_load(&j.done_calls) == 1);
        cr_assert(ok, "no completion from the fresh pool");
        cr_assert_eq(j.status, 0);
    }
    tern_loop_free(loop);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
    cr_assert(!tern__pool_running());
}

Test(shutdown, bad_mode_and_no_pool)
{
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 0), 0, "no pool: nothing to do");
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_CANCEL, 0), 0);
    cr_assert_eq(tern_pool_shutdown(7, PH_SEC), -EINVAL);
    cr_assert_eq(tern_pool_shutdown(-1, PH_SEC), -EINVAL);
    cr_assert_eq(tern_pool_start(NULL), 0);
    cr_assert_eq(tern_pool_shutdown(7, PH_SEC), -EINVAL);
    cr_assert(tern__pool_running(), "a bad mode shut the pool down");
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
    cr_assert(!tern__pool_running());
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0, "a second shutdown");
}

Test(shutdown, drain_finishes_queued_and_running_jobs)
{
    tern_loop *loop = one_worker_loop();
    ph_job running, queued[3], lj;
    ph_job_init(&running, NULL);
    running.sleep_ns = 30 * PH_MS; /* still running when shutdown starts */
    ph_gate gate;
    ph_gate_init(&gate);
    running.gate = &gate;
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &running), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    for (int i = 0; i < 3; i++) {
        ph_job_init(&queued[i], NULL);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &queued[i]), 0);
    }
    ph_job_init(&lj, NULL);
    lj.sleep_ns = 30 * PH_MS;
    cr_assert_eq(ph_submit(loop, TERN_LONG, &lj), 0);
    ph_gate_open(&gate);

    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 20 * PH_SEC), 0);
    cr_assert(!tern__pool_running());
    /* Every job ran to the end before shutdown returned. */
    cr_assert_eq(atomic_load(&running.returned), 1);
    cr_assert_eq(atomic_load(&lj.returned), 1);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(atomic_load(&queued[i].returned), 1, "DRAIN dropped queued job %d", i);

    /* The loop delivers them on its next turns. */
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(queued, 3) == 3 &&
                                atomic_load(&running.done_calls) == 1 &&
                                atomic_load(&lj.done_calls) == 1);
    cr_assert(ok, "completions from a drained pool never reached the loop");
    cr_assert_eq(running.status, 0);
    cr_assert_eq(lj.status, 0);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(queued[i].status, 0);
        cr_assert_eq(queued[i].done_result, &queued[i]);
    }
    cr_assert_eq(ph_loop_stats(loop).undelivered, 0u);
    ph_gate_destroy(&gate);
    fresh_pool_works(loop);
}

Test(shutdown, cancel_tombstones_queued_and_flags_running_jobs)
{
    tern_loop *loop = one_worker_loop();
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job running, lj, queued[3];
    ph_job_init(&running, &gate);
    running.poll_cancel = true;
    ph_job_init(&lj, &gate);
    lj.poll_cancel = true;
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &running), 0);
    cr_assert_eq(ph_submit(loop, TERN_LONG, &lj), 0);
    cr_assert(ph_gate_wait_entered(&gate, 2));
    for (int i = 0; i < 3; i++) {
        ph_job_init(&queued[i], NULL);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &queued[i]), 0);
    }

    cr_assert_eq(tern_pool_shutdown(TERN_POOL_CANCEL, 20 * PH_SEC), 0);
    cr_assert(!tern__pool_running());
    cr_assert(atomic_load(&running.saw_cancel), "the running bounded job was not flagged");
    cr_assert(atomic_load(&lj.saw_cancel), "the running long job was not flagged");

    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(queued, 3) == 3 &&
                                atomic_load(&running.done_calls) == 1 &&
                                atomic_load(&lj.done_calls) == 1);
    cr_assert(ok, "completions from a cancelled pool never reached the loop");
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(queued[i].status, -ECANCELED);
        cr_assert_null(queued[i].done_result);
        cr_assert_eq(atomic_load(&queued[i].ran), 0, "CANCEL ran queued job %d", i);
    }
    cr_assert_eq(running.status, -ECANCELED);
    cr_assert_eq(running.done_result, &running, "the cancelled running job's result was lost");
    cr_assert_eq(lj.status, -ECANCELED);
    cr_assert_eq(lj.done_result, &lj);
    ph_gate_destroy(&gate);
    fresh_pool_works(loop);
}

/*
 * A cancel after a cancelling shutdown, before done, answers what done
 * gets (docs/pool.md, "What the call returns"): a queued job the shutdown
 * stopped never ran, so STOPPED (-ECANCELED, NULL); a job told while it
 * ran, RUNNING (-ECANCELED, its result). The cancels run on the loop
 * thread (a post), before the turn's step 2 delivers any done.
 */
struct late_cancel {
    tern_loop *loop;
    ph_job *jobs[4];
    int answers[4];
    int done_before; /* done calls already made when the cancels ran */
    bool ran;
};

static void late_cancel_all(tern_loop *loop, void *arg)
{
    struct late_cancel *lc = arg;
    for (int i = 0; i < 4; i++)
        lc->done_before += atomic_load(&lc->jobs[i]->done_calls);
    for (int i = 0; i < 4; i++)
        lc->answers[i] = tern_cancel(loop, lc->jobs[i]->id);
    lc->ran = true;
}

Test(shutdown, cancel_after_cancelling_shutdown_agrees_with_done)
{
    tern_loop *loop = one_worker_loop();
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job running, queued[3];
    ph_job_init(&running, &gate);
    running.poll_cancel = true;
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &running), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    for (int i = 0; i < 3; i++) {
        ph_job_init(&queued[i], NULL);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &queued[i]), 0);
    }
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_CANCEL, 20 * PH_SEC), 0);

    struct late_cancel lc = {.loop = loop, .jobs = {&running, &queued[0], &queued[1], &queued[2]}};
    cr_assert_eq(tern_post(loop, late_cancel_all, &lc), 0);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, lc.ran && ph_done_total(queued, 3) == 3 &&
                                atomic_load(&running.done_calls) == 1);
    cr_assert(ok, "the cancels or the completions never came");
    cr_assert_eq(lc.done_before, 0, "done ran before the cancels: nothing was tested");

    cr_assert_eq(lc.answers[0], TERN_CANCEL_RUNNING, "the running job's cancel said %d",
                 lc.answers[0]);
    cr_assert_eq(running.status, -ECANCELED);
    cr_assert_eq(running.done_result, &running);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(atomic_load(&queued[i].ran), 0, "CANCEL ran queued job %d", i);
        cr_assert_eq(queued[i].status, -ECANCELED);
        cr_assert_null(queued[i].done_result);
        cr_assert_eq(lc.answers[i + 1], TERN_CANCEL_STOPPED,
                     "queued job %d never ran, but its cancel said %d (STOPPED is %d)", i,
                     lc.answers[i + 1], TERN_CANCEL_STOPPED);
    }
    ph_gate_destroy(&gate);
    fresh_pool_works(loop);
}

static void check_timeout_then_clean(int mode)
{
    tern_loop *loop = one_worker_loop();
    ph_gate gate;
    ph_gate_init(&gate);
    /* Neither job looks at its cancel flag: they outlast any timeout. */
    ph_job stuck, stuck_long, queued;
    ph_job_init(&stuck, &gate);
    ph_job_init(&stuck_long, &gate);
    ph_job_init(&queued, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &stuck), 0);
    cr_assert_eq(ph_submit(loop, TERN_LONG, &stuck_long), 0);
    cr_assert(ph_gate_wait_entered(&gate, 2));
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &queued), 0);

    cr_assert_eq(tern_pool_shutdown(mode, 50 * PH_MS), -ETIMEDOUT);
    /* Nothing was freed under them: they are still inside their work. */
    cr_assert_eq(ph_gate_inside(&gate), 2u);
    cr_assert_eq(ph_done_total(&stuck, 1) + ph_done_total(&stuck_long, 1), 0);

    ph_gate_open(&gate);
    cr_assert_eq(tern_pool_shutdown(mode, 20 * PH_SEC), 0, "the second shutdown did not finish");
    cr_assert(!tern__pool_running());

    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&stuck.done_calls) == 1 &&
                                atomic_load(&stuck_long.done_calls) == 1 &&
                                atomic_load(&queued.done_calls) == 1);
    cr_assert(ok);
    if (mode == TERN_POOL_DRAIN) {
        cr_assert_eq(stuck.status, 0);
        cr_assert_eq(stuck_long.status, 0);
        cr_assert_eq(queued.status, 0);
        cr_assert_eq(atomic_load(&queued.ran), 1);
    } else {
        cr_assert_eq(stuck.status, -ECANCELED);
        cr_assert_eq(stuck.done_result, &stuck);
        cr_assert_eq(stuck_long.status, -ECANCELED);
        cr_assert_eq(queued.status, -ECANCELED);
        cr_assert_eq(atomic_load(&queued.ran), 0);
    }
    cr_assert_eq(atomic_load(&stuck.done_calls), 1);
    cr_assert_eq(atomic_load(&stuck_long.done_calls), 1);
    cr_assert_eq(atomic_load(&queued.done_calls), 1);
    ph_gate_destroy(&gate);
    fresh_pool_works(loop);
}

Test(shutdown, drain_times_out_then_shuts_down_cleanly)
{
    check_timeout_then_clean(TERN_POOL_DRAIN);
}

Test(shutdown, cancel_times_out_then_shuts_down_cleanly)
{
    check_timeout_then_clean(TERN_POOL_CANCEL);
}

Test(shutdown, a_freed_loop_before_shutdown_leaves_nothing)
{
    /* The common exit path: free every loop, then shut the pool down. */
    tern_loop *loop = one_worker_loop();
    ph_job jobs[8];
    for (int i = 0; i < 8; i++) {
        ph_job_init(&jobs[i], NULL);
        cr_assert_eq(ph_submit(loop, i % 2 ? TERN_LONG : TERN_BOUNDED, &jobs[i]), 0);
    }
    tern_loop_free(loop);
    cr_assert_eq(ph_done_total(jobs, 8), 8, "tern_loop_free returned with completions owed");
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
    tern_pool_stats s = ph_stats();
    cr_assert_eq(s.threads, 0u, "threads counted after shutdown");
    cr_assert_eq(s.long_threads, 0u);
}

Test(shutdown, repeated_start_and_shutdown_cycles)
{
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    for (int round = 0; round < 20; round++) {
        ph_job j;
        ph_job_init(&j, NULL);
        cr_assert_eq(ph_submit(loop, round % 3 == 2 ? TERN_LONG : TERN_BOUNDED, &j), 0);
        bool ok;
        PH_PUMP_UNTIL(ok, loop, atomic_load(&j.done_calls) == 1);
        cr_assert(ok, "round %d", round);
        cr_assert_eq(j.status, 0);
        cr_assert_eq(
            tern_pool_shutdown(round % 2 ? TERN_POOL_CANCEL : TERN_POOL_DRAIN, 10 * PH_SEC), 0);
    }
    tern_loop_free(loop);
}
