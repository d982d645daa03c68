/*
 * Cancellation of pool jobs (SPEC §3 "Cancellation", header tern_cancel):
 * a tombstone, not a removal. Queued: the work never runs and done gets
 * -ECANCELED with a NULL result in the next turn's step 2, without waiting
 * for a worker. Running: tern_job_cancelled() turns true and done gets
 * -ECANCELED with the work's result. Finished: unaffected.
 */
#include <criterion/criterion.h>
#include <sched.h>
#include <semaphore.h>
#include <stdlib.h>

#include "pool_helpers.h"

static void shutdown_clean(void)
{
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}

/* One bounded worker, so a blocked first job keeps everything else queued. */
static tern_loop *one_worker_loop(void)
{
    tern_pool_config cfg = ph_config(1, 64, 4);
    tern_loop *loop = NULL;
    cr_assert_eq(tern_pool_start(&cfg), 0);
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    return loop;
}

/* Open the gate, deliver everything, free the loop, and prove that the
 * cancelled-while-queued records never ran, even after the worker passed
 * their tombstones. */
static void finish(tern_loop *loop, ph_gate *gate, ph_job *blocker, ph_job **never_ran, int n)
{
    bool ok;
    ph_gate_open(gate);
    PH_PUMP_UNTIL(ok, loop, atomic_load(&blocker->done_calls) == 1);
    cr_assert(ok);
    /* A probe job queued behind the tombstones: once it ran, the worker
     * has walked past every one of them. */
    ph_job probe;
    ph_job_init(&probe, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &probe), 0);
    PH_PUMP_UNTIL(ok, loop, atomic_load(&probe.done_calls) == 1);
    cr_assert(ok);
    cr_assert_eq(tern_loop_run(loop), 0);
    tern_loop_free(loop);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(atomic_load(&never_ran[i]->ran), 0, "a job cancelled while queued ran");
        cr_assert_eq(atomic_load(&never_ran[i]->done_calls), 1);
    }
    ph_gate_destroy(gate);
    shutdown_clean();
}

static void check_cancelled_unrun(ph_job *j)
{
    cr_assert_eq(atomic_load(&j->done_calls), 1);
    cr_assert_eq(j->status, -ECANCELED);
    cr_assert_null(j->done_result, "a job that never ran must get a NULL result");
    cr_assert_eq(j->done_step, 2);
    cr_assert_eq(j->done_id, j->id);
    cr_assert_eq(j->ran_at_done, 0);
}

/* ------------------------------------------------------------------ */
/* Queued jobs                                                         */
/* ------------------------------------------------------------------ */

Test(cancel, queued_job_cancelled_from_the_loop_completes_next_turn)
{
    tern_loop *loop = one_worker_loop();
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job blocker, victim;
    ph_job_init(&blocker, &gate);
    ph_job_init(&victim, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &blocker), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &victim), 0);

    cr_assert_eq(tern__test_cancel_now(loop, victim.id), 0);
    cr_assert_eq(atomic_load(&victim.done_calls), 0, "done ran inside tern_cancel");
    /* One turn, never blocking: the completion must be there. */
    tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&victim.done_calls), 1,
                 "the cancelled queued job was not delivered in the next turn");
    check_cancelled_unrun(&victim);
    cr_assert_eq(ph_gate_inside(&gate), 1u, "the worker was released before delivery");

    /* Once delivered, the id is stale. */
    cr_assert_eq(tern__test_cancel_now(loop, victim.id), -ENOENT);
    ph_job *never[] = {&victim};
    finish(loop, &gate, &blocker, never, 1);
}

struct cancel_in_callback {
    ph_job *victim;
    int rc;
    unsigned done_before; /* victim's done calls when the cancel ran */
};

static void cancel_deferred(tern_loop *loop, void *arg)
{
    struct cancel_in_callback *c = arg;
    c->done_before = (unsigned)atomic_load(&c->victim->done_calls);
    c->rc = tern__test_cancel_now(loop, c->victim->id);
}

Test(cancel, queued_job_cancelled_from_a_callback_completes_next_turn)
{
    tern_loop *loop = one_worker_loop();
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job blocker, victims[3];
    ph_job_init(&blocker, &gate);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &blocker), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    for (int i = 0; i < 3; i++) {
        ph_job_init(&victims[i], NULL);
        cr_assert_eq(ph_submit(loop, i == 1 ? TERN_LONG : TERN_BOUNDED, &victims[i]), 0);
    }
    /* victims[1] is long and runs at once; cancel the two queued ones. */
    struct cancel_in_callback c0 = {&victims[0], 1, 0}, c2 = {&victims[2], 1, 0};
    cr_assert_eq(tern_defer(loop, cancel_deferred, &c0), 0);
    cr_assert_eq(tern_defer(loop, cancel_deferred, &c2), 0);
    tern_loop_run_once(loop, 0); /* step 2 runs the deferred cancels */
    cr_assert_eq(c0.rc, 0);
    cr_assert_eq(c2.rc, 0);
    tern_loop_run_once(loop, 0); /* the next turn delivers them */
    check_cancelled_unrun(&victims[0]);
    check_cancelled_unrun(&victims[2]);
    cr_assert_eq(ph_gate_inside(&gate), 1u);

    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&victims[1].done_calls) == 1);
    cr_assert(ok);
    cr_assert_eq(victims[1].status, 0);
    ph_job *never[] = {&victims[0], &victims[2]};
    finish(loop, &gate, &blocker, never, 2);
}

/* A cancel from a foreign thread while the loop runs (tern_loop_run). */
struct foreign {
    tern_loop *loop;
    tern_id id;
    sem_t loop_running;
    int rc;
    bool timed_out;
    ph_job *stopper; /* whose done stops the loop */
};

static void *foreign_canceller(void *arg)
{
    struct foreign *f = arg;
    sem_wait(&f->loop_running);
    f->rc = tern_cancel(f->loop, f->id);
    return NULL;
}

static void announce_running(tern_loop *loop, void *arg)
{
    struct foreign *f = arg;
    (void)loop;
    sem_post(&f->loop_running);
}

static void guard_timer(tern_loop *loop, tern_id id, void *arg)
{
    struct foreign *f = arg;
    (void)id;
    f->timed_out = true;
    tern_loop_stop(loop);
}

static struct foreign *stopper_ctx;

static void stopping_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    ph_done(loop, id, status, result, arg);
    if (stopper_ctx != NULL && arg == stopper_ctx->stopper)
        tern_loop_stop(loop);
}

/* Run the loop with tern_loop_run while another thread cancels f->id. */
static void run_with_foreign_cancel(struct foreign *f)
{
    pthread_t t;
    tern_id guard = 0;
    sem_init(&f->loop_running, 0, 0);
    f->rc = 1;
    f->timed_out = false;
    stopper_ctx = f;
    cr_assert_eq(tern_timer_start(f->loop, PH_LIVENESS_NS, 0, guard_timer, f, &guard), 0);
    cr_assert_eq(tern_defer(f->loop, announce_running, f), 0);
    cr_assert_eq(pthread_create(&t, NULL, foreign_canceller, f), 0);
    int rc = tern_loop_run(f->loop);
    pthread_join(t, NULL);
    cr_assert(!f->timed_out, "the foreign cancel never took effect (no wake-up?)");
    cr_assert_eq(rc, 1, "the loop was stopped with work live");
    cr_assert_eq(f->rc, TERN_CANCEL_REQUESTED,
                 "a foreign tern_cancel while the loop runs says it was queued");
    cr_assert_eq(tern_timer_stop(f->loop, guard), 0);
    sem_destroy(&f->loop_running);
    stopper_ctx = NULL;
}

Test(cancel, queued_job_cancelled_from_another_thread)
{
    tern_loop *loop = one_worker_loop();
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job blocker, victim;
    ph_job_init(&blocker, &gate);
    ph_job_init(&victim, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &blocker), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, ph_work, stopping_done, &victim, &victim.id), 0);

    struct foreign f = {.loop = loop, .id = victim.id, .stopper = &victim};
    run_with_foreign_cancel(&f);
    check_cancelled_unrun(&victim);
    cr_assert_eq(ph_gate_inside(&gate), 1u, "delivery waited for the worker");
    ph_job *never[] = {&victim};
    finish(loop, &gate, &blocker, never, 1);
}

/* ------------------------------------------------------------------ */
/* Running jobs                                                        */
/* ------------------------------------------------------------------ */

static void check_cancelled_after_running(ph_job *j)
{
    cr_assert_eq(atomic_load(&j->done_calls), 1);
    cr_assert_eq(atomic_load(&j->ran), 1);
    cr_assert(atomic_load(&j->saw_cancel), "the running job never saw tern_job_cancelled()");
    cr_assert_eq(j->status, -ECANCELED);
    cr_assert_eq(j->done_result, j, "done must get the cancelled work's result");
    cr_assert_eq(j->done_step, 2);
}

Test(cancel, running_job_sees_the_flag_and_done_gets_its_result)
{
    tern_loop *loop = one_worker_loop();
    for (int occ = TERN_BOUNDED; occ <= TERN_LONG; occ++) {
        ph_gate gate;
        ph_gate_init(&gate);
        ph_job j;
        ph_job_init(&j, &gate);
        j.poll_cancel = true;
        cr_assert_eq(ph_submit(loop, (tern_occupancy)occ, &j), 0);
        cr_assert(ph_gate_wait_entered(&gate, 1));
        cr_assert_eq(tern__test_cancel_now(loop, j.id), TERN_CANCEL_RUNNING);
        bool ok;
        PH_PUMP_UNTIL(ok, loop, atomic_load(&j.done_calls) == 1);
        cr_assert(ok);
        check_cancelled_after_running(&j);
        cr_assert_eq(tern__test_cancel_now(loop, j.id), -ENOENT);
        ph_gate_destroy(&gate);
    }
    tern_loop_free(loop);
    shutdown_clean();
}

Test(cancel, running_job_cancelled_from_another_thread)
{
    tern_loop *loop = one_worker_loop();
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job j;
    ph_job_init(&j, &gate);
    j.poll_cancel = true;
    cr_assert_eq(tern_submit(loop, TERN_LONG, ph_work, stopping_done, &j, &j.id), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    struct foreign f = {.loop = loop, .id = j.id, .stopper = &j};
    run_with_foreign_cancel(&f);
    check_cancelled_after_running(&j);
    tern_loop_free(loop);
    ph_gate_destroy(&gate);
    shutdown_clean();
}

/* A running job that ignores the flag still owes exactly one completion. */
Test(cancel, running_job_that_ignores_the_flag_completes_once)
{
    tern_loop *loop = one_worker_loop();
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job j;
    ph_job_init(&j, &gate);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &j), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    cr_assert_eq(tern__test_cancel_now(loop, j.id), TERN_CANCEL_RUNNING);
    /* Cancelling twice is harmless, and says the same. */
    int again = tern__test_cancel_now(loop, j.id);
    cr_assert_eq(again, TERN_CANCEL_RUNNING, "second cancel returned %d", again);
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&j.done_calls), 0, "done ran while the work was still running");
    ph_gate_open(&gate);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&j.done_calls) == 1);
    cr_assert(ok);
    cr_assert_eq(j.status, -ECANCELED);
    cr_assert_eq(j.done_result, &j);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&j.done_calls), 1);
    tern_loop_free(loop);
    ph_gate_destroy(&gate);
    shutdown_clean();
}

/* ------------------------------------------------------------------ */
/* Finished jobs and bad ids                                           */
/* ------------------------------------------------------------------ */

Test(cancel, delivered_job_and_bad_ids)
{
    tern_loop *loop = one_worker_loop();
    ph_job j;
    ph_job_init(&j, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &j), 0);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&j.done_calls) == 1);
    cr_assert(ok);
    cr_assert_eq(j.status, 0);
    cr_assert_eq(tern__test_cancel_now(loop, j.id), -ENOENT, "cancel of a delivered job");
    cr_assert_eq(tern__test_cancel_now(loop, 0), -EINVAL);
    cr_assert_eq(tern__test_cancel_now(loop, j.id + 1000000), -ENOENT);
    cr_assert_eq(tern__test_cancel_now(loop, ~(tern_id)0), -ENOENT);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&j.done_calls), 1);
    tern_loop_free(loop);
    shutdown_clean();
}

Test(cancel, a_job_id_from_another_loop_is_unknown_here)
{
    tern_loop *loop = one_worker_loop(), *other = NULL;
    cr_assert_eq(tern_loop_new(&other, NULL), 0);
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job j;
    ph_job_init(&j, &gate);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &j), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    cr_assert_eq(tern__test_cancel_now(other, j.id), -ENOENT);
    ph_gate_open(&gate);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&j.done_calls) == 1);
    cr_assert(ok);
    cr_assert_eq(j.status, 0, "a cancel on another loop reached this job");
    tern_loop_free(other);
    tern_loop_free(loop);
    ph_gate_destroy(&gate);
    shutdown_clean();
}

/*
 * Finished but not yet delivered: the work has returned and its completion
 * waits in the ring. The header promises "a finished one is unaffected":
 * done still gets status 0 and the work's result, exactly once. Whether
 * tern_cancel itself says 0 or -ENOENT for such an id is logged, not
 * asserted: the header lists "finished" among the -ENOENT cases, while the
 * operation is still live on the loop until delivery.
 */
Test(cancel, finished_but_undelivered_job_is_unaffected)
{
    tern_loop *loop = one_worker_loop();
    ph_job j;
    ph_job_init(&j, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &j), 0);
    bool ok;
    /* The worker publishes the completion after the work returns, then
     * wakes the loop; nobody runs the loop, so it counts as asleep and
     * that wake is a syscall. Once it is counted, the completion waits in
     * the ring. */
    PH_WAIT_UNTIL(ok, atomic_load(&j.returned) == 1 && ph_loop_stats(loop).wake_syscalls >= 1);
    cr_assert(ok, "the completion was never published: returned %d, wake syscalls %llu",
              atomic_load(&j.returned), (unsigned long long)ph_loop_stats(loop).wake_syscalls);
    cr_assert_eq(atomic_load(&j.done_calls), 0);

    int rc = tern__test_cancel_now(loop, j.id);
    cr_log_info("tern_cancel on a finished, undelivered job returned %d (%s)", rc,
                tern_err_name(rc));
    cr_assert_eq(rc, TERN_CANCEL_FINISHED, "unexpected %d", rc);
    PH_PUMP_UNTIL(ok, loop, atomic_load(&j.done_calls) == 1);
    cr_assert(ok);
    cr_assert_eq(j.status, 0, "a finished job was turned into -ECANCELED (%d)", j.status);
    cr_assert_eq(j.done_result, &j);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&j.done_calls), 1);
    cr_assert_eq(tern__test_cancel_now(loop, j.id), -ENOENT);
    tern_loop_free(loop);
    shutdown_clean();
}

/* Cancel every other one of many queued jobs: the rest still run, each once. */
Test(cancel, many_queued_jobs_half_cancelled)
{
    enum { N = 40 };
    tern_loop *loop = one_worker_loop();
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job blocker, jobs[N];
    ph_job_init(&blocker, &gate);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &blocker), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    for (int i = 0; i < N; i++) {
        ph_job_init(&jobs[i], NULL);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &jobs[i]), 0);
    }
    for (int i = 0; i < N; i += 2)
        cr_assert_eq(tern__test_cancel_now(loop, jobs[i].id), 0);
    tern_loop_run_once(loop, 0);
    for (int i = 0; i < N; i += 2)
        check_cancelled_unrun(&jobs[i]);
    ph_gate_open(&gate);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(jobs, N) == N && atomic_load(&blocker.done_calls) == 1);
    cr_assert(ok);
    cr_assert_eq(tern_loop_run(loop), 0);
    tern_loop_free(loop);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(atomic_load(&jobs[i].done_calls), 1);
        if (i % 2 == 0) {
            cr_assert_eq(atomic_load(&jobs[i].ran), 0);
        } else {
            cr_assert_eq(jobs[i].status, 0);
            cr_assert_eq(atomic_load(&jobs[i].ran), 1);
        }
    }
    ph_gate_destroy(&gate);
    shutdown_clean();
}

/* ------------------------------------------------------------------ */
/* A second cancel of a stopped job                                    */
/* ------------------------------------------------------------------ */

/*
 * Cancel a queued job (STOPPED), let the worker walk past its tombstone
 * and let go of it, then cancel it again before its done: the work never
 * ran and never will, so the answer is STOPPED again, never FINISHED
 * (which promises done 0 and the work's result).
 */
Test(cancel, second_cancel_after_the_worker_dropped_the_tombstone_says_stopped)
{
    tern_loop *loop = one_worker_loop();
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job blocker, victim, probe;
    ph_job_init(&blocker, &gate);
    ph_job_init(&victim, NULL);
    ph_job_init(&probe, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &blocker), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &victim), 0);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &probe), 0);

    cr_assert_eq(tern__test_cancel_now(loop, victim.id), TERN_CANCEL_STOPPED);
    cr_assert_eq(tern__test_cancel_now(loop, victim.id), TERN_CANCEL_STOPPED,
                 "a second cancel before the worker met the tombstone");
    /* One worker, first in first out: once the probe ran, the worker has
     * dequeued the victim's tombstone and let go of it. Nobody runs the
     * loop meanwhile, so the victim's done is still owed. */
    ph_gate_open(&gate);
    bool ok;
    PH_WAIT_UNTIL(ok, atomic_load(&probe.returned) == 1);
    cr_assert(ok);
    cr_assert_eq(atomic_load(&victim.done_calls), 0);
    int rc = tern__test_cancel_now(loop, victim.id);
    cr_assert_eq(rc, TERN_CANCEL_STOPPED,
                 "a second cancel after the worker let go of the tombstone said %d", rc);

    PH_PUMP_UNTIL(ok, loop, atomic_load(&victim.done_calls) == 1 &&
                                atomic_load(&probe.done_calls) == 1 &&
                                atomic_load(&blocker.done_calls) == 1);
    cr_assert(ok);
    cr_assert_eq(victim.status, -ECANCELED);
    cr_assert_null(victim.done_result);
    cr_assert_eq(atomic_load(&victim.ran), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    tern_loop_free(loop);
    ph_gate_destroy(&gate);
    shutdown_clean();
}

/*
 * The same under load, at random: two loops, each run by its own thread
 * and each with a foreign thread cancelling its jobs by id. Inside every
 * done, the loop cancels one more of its live jobs and cancels again each
 * job it has already cancelled whose done is still owed. Every answer a
 * cancel gives on the loop thread must agree with the done that follows:
 * STOPPED - the work never ran, done gets -ECANCELED and NULL; RUNNING -
 * the work ran, done gets -ECANCELED; FINISHED - the work ran, done gets 0.
 * Bounded (JOBS per loop, a liveness timer) and seeded (TERN_TEST_SEED).
 */
enum { RACE_JOBS = 3000, RACE_WINDOW = 48, RACE_ANSWERS = 64, RACE_ROUNDS = 8 };

struct race_loop;

struct race_job {
    struct race_loop *rl;
    tern_id id;
    atomic_int ran;
    unsigned spin;
    bool delivered, cancelled;
    unsigned n_answers;
    int answers[RACE_ANSWERS];
};

struct race_loop {
    tern_loop *loop;
    struct race_job jobs[RACE_JOBS];
    _Atomic tern_id ids[RACE_JOBS];
    atomic_uint submitted;
    unsigned delivered;
    uint32_t rng;        /* the loop thread's */
    uint32_t foreign_rng;
    atomic_bool over;
    unsigned wrong;
    char first_wrong[160];
    atomic_uint
        broken; /* a check inside a thread failed (criterion asserts on the test thread only) */
    char first_broken[120];
    tern_id guard;
    bool timed_out;
};

#define RACE_CHECK(rl, cond, ...)                                                          \
    do {                                                                                   \
        if (!(cond) && atomic_fetch_add(&(rl)->broken, 1) == 0)                            \
            snprintf((rl)->first_broken, sizeof (rl)->first_broken, __VA_ARGS__);          \
    } while (0)

static uint32_t race_next(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static void *race_work(tern_job *job, void *arg)
{
    struct race_job *j = arg;
    (void)job;
    atomic_store(&j->ran, 1);
    for (volatile unsigned i = 0; i < j->spin; i++) {
    }
    return j;
}

static void race_done(tern_loop *loop, tern_id id, int status, void *result, void *arg);

static void race_submit_one(struct race_loop *rl)
{
    unsigned i = atomic_load(&rl->submitted);
    if (i >= RACE_JOBS)
        return;
    struct race_job *j = &rl->jobs[i];
    j->rl = rl;
    j->spin = race_next(&rl->rng) % 1000;
    int rc = tern_submit(rl->loop, TERN_BOUNDED, race_work, race_done, j, &j->id);
    RACE_CHECK(rl, rc == 0, "submit refused (%d, %s)", rc,
               tern_refusal_name(tern_loop_last_refusal(rl->loop)));
    if (rc < 0)
        return;
    atomic_store(&rl->ids[i], j->id);
    atomic_store(&rl->submitted, i + 1);
}

static void race_cancel(struct race_loop *rl, struct race_job *j)
{
    int rc = tern_cancel(rl->loop, j->id);
    RACE_CHECK(rl, rc >= 0, "a live job's local cancel failed (%d)", rc);
    j->cancelled = true;
    if (j->n_answers < RACE_ANSWERS)
        j->answers[j->n_answers++] = rc;
}

static void race_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    struct race_job *j = arg;
    struct race_loop *rl = j->rl;
    (void)id;
    RACE_CHECK(rl, !j->delivered, "done came twice");
    j->delivered = true;
    rl->delivered++;
    int ran = atomic_load(&j->ran);
    for (unsigned a = 0; a < j->n_answers; a++) {
        int want_ran = j->answers[a] != TERN_CANCEL_STOPPED;
        int want_status = j->answers[a] == TERN_CANCEL_FINISHED ? 0 : -ECANCELED;
        bool right = ran == want_ran && status == want_status &&
                     (j->answers[a] != TERN_CANCEL_STOPPED || result == NULL);
        if (!right && rl->wrong++ == 0)
            snprintf(rl->first_wrong, sizeof rl->first_wrong,
                     "cancel answer %u of %u was %d, but the work ran=%d and done got %d",
                     a + 1, j->n_answers, j->answers[a], ran, status);
    }
    /* Cancel one more live job, and again every cancelled one still owed. */
    unsigned n = atomic_load(&rl->submitted);
    unsigned lo = n > RACE_WINDOW ? n - RACE_WINDOW : 0;
    for (unsigned i = lo; i < n; i++) {
        struct race_job *o = &rl->jobs[i];
        if (!o->delivered && o->cancelled)
            race_cancel(rl, o);
    }
    /* Mostly among the oldest, which the workers reach soonest: a worker
     * that meets a tombstone between two of these cancels is the case. */
    if (n > lo) {
        unsigned span = race_next(&rl->rng) % 2 == 0 && n - lo > 8 ? 8 : n - lo;
        struct race_job *o = &rl->jobs[lo + race_next(&rl->rng) % span];
        if (!o->delivered && race_next(&rl->rng) % 2 == 0)
            race_cancel(rl, o);
    }
    /* Linger, so workers move on while this step 2 still delivers. */
    for (volatile unsigned k = race_next(&rl->rng) % 2000; k > 0; k--) {
    }
    race_submit_one(rl);
    if (rl->delivered == RACE_JOBS)
        (void)tern_timer_stop(loop, rl->guard);
}

static void race_guard(tern_loop *loop, tern_id id, void *arg)
{
    struct race_loop *rl = arg;
    (void)id;
    rl->timed_out = true;
    tern_loop_stop(loop);
}

static void race_start(tern_loop *loop, void *arg)
{
    struct race_loop *rl = arg;
    (void)loop;
    for (unsigned i = 0; i < RACE_WINDOW; i++)
        race_submit_one(rl);
}

static void *race_runner(void *arg)
{
    struct race_loop *rl = arg;
    RACE_CHECK(rl, tern_timer_start(rl->loop, PH_LIVENESS_NS, 0, race_guard, rl, &rl->guard) == 0,
               "guard timer");
    RACE_CHECK(rl, tern_defer(rl->loop, race_start, rl) == 0, "defer");
    (void)tern_loop_run(rl->loop);
    atomic_store(&rl->over, true);
    return NULL;
}

static void *race_foreign(void *arg)
{
    struct race_loop *rl = arg;
    while (!atomic_load(&rl->over)) {
        unsigned n = atomic_load(&rl->submitted);
        if (n == 0) {
            sched_yield();
            continue;
        }
        unsigned lo = n > RACE_WINDOW ? n - RACE_WINDOW : 0;
        tern_id id = atomic_load(&rl->ids[lo + race_next(&rl->foreign_rng) % (n - lo)]);
        int rc = tern_cancel(rl->loop, id);
        /* -EAGAIN: the loop's reserve of queued cancels is taken until its
         * next turn (tern.h); a slow loop (a sanitizer build) meets it. */
        RACE_CHECK(rl, rc == TERN_CANCEL_REQUESTED || rc == -EAGAIN, "foreign cancel: %d", rc);
        if (rc == -EAGAIN || race_next(&rl->foreign_rng) % 8 == 0)
            sched_yield();
    }
    return NULL;
}

/* One round: two fresh loops, run to the end, every answer checked. */
static void race_round(uint32_t seed, unsigned round)
{
    static struct race_loop rls[2];
    pthread_t runner[2], foreign[2];
    for (int l = 0; l < 2; l++) {
        struct race_loop *rl = &rls[l];
        memset(rl, 0, sizeof *rl);
        rl->rng = (seed + round) * 2654435761u + (uint32_t)l;
        if (rl->rng == 0)
            rl->rng = 1;
        rl->foreign_rng = rl->rng ^ 0x9e3779b9u;
        cr_assert_eq(tern_loop_new(&rl->loop, NULL), 0);
    }
    for (int l = 0; l < 2; l++) {
        cr_assert_eq(pthread_create(&runner[l], NULL, race_runner, &rls[l]), 0);
        cr_assert_eq(pthread_create(&foreign[l], NULL, race_foreign, &rls[l]), 0);
    }
    for (int l = 0; l < 2; l++) {
        pthread_join(runner[l], NULL);
        pthread_join(foreign[l], NULL);
    }
    for (int l = 0; l < 2; l++) {
        struct race_loop *rl = &rls[l];
        cr_assert_eq(atomic_load(&rl->broken), 0, "loop %d: %s", l, rl->first_broken);
        cr_assert(!rl->timed_out, "loop %d hit the liveness bound", l);
        cr_assert_eq(rl->delivered, RACE_JOBS);
        cr_assert_eq(rl->wrong, 0,
                     "round %u, loop %d: %u wrong cancel answers (seed %u); first: %s", round, l,
                     rl->wrong, seed, rl->first_wrong);
        tern_loop_free(rl->loop);
    }
}

Test(cancel, cancel_answers_agree_with_done_under_two_loops_and_foreign_cancellers)
{
    const char *env = getenv("TERN_TEST_SEED");
    uint32_t seed = env != NULL ? (uint32_t)strtoul(env, NULL, 0) : (uint32_t)ph_now();
    cr_log_info("seed %u (set TERN_TEST_SEED to repeat)", seed);
    /* Room for every job of both loops: a tombstone keeps its queue slot
     * until a worker meets it, so cancelling does not free room at once. */
    tern_pool_config cfg = ph_config(2, 2 * RACE_JOBS, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    for (unsigned round = 0; round < RACE_ROUNDS; round++)
        race_round(seed, round);
    shutdown_clean();
}

/* ------------------------------------------------------------------ */
/* A cancel never needs memory (tern.h, tern_cancel)                   */
/* ------------------------------------------------------------------ */

static void never_fires(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id;
    atomic_fetch_add((_Atomic unsigned *)arg, 1);
}

/*
 * With every allocation, thread and descriptor made to fail from the first
 * one on, cancels from a thread that does not run the loop are all queued
 * (more than one block of post records' worth, so a cancel that carved
 * records from malloc'd blocks would meet the fault), none of them reaches
 * the fault seam, and each one takes effect in the loop's next turn.
 */
Test(cancel, a_queued_cancel_allocates_nothing)
{
    enum { N = 300 };
    static tern_id ids[N];
    _Atomic unsigned fired = 0;
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    for (int i = 0; i < N; i++)
        cr_assert_eq(tern_timer_start(loop, 60 * PH_SEC, 0, never_fires, &fired, &ids[i]), 0);
    tern__test_inbound_fresh_block(); /* the next record from malloc would be the first */
    tern__fault_arm(TERN__FAULT_ALL, 1);
    for (int i = 0; i < N; i++) {
        int rc = tern_cancel(loop, ids[i]); /* unclaimed: queued, as from another thread */
        cr_assert_eq(rc, TERN_CANCEL_REQUESTED, "cancel %d under an armed fault: %s", i,
                     tern_err_name(rc));
    }
    bool fired_fault = tern__fault_fired();
    tern__fault_arm(0, 0);
    cr_assert(!fired_fault, "a queued cancel reached the fault seam (it allocated)");
    tern_loop_stats st;
    cr_assert_eq(tern_loop_run_once(loop, 0), 0);
    tern_loop_stats_get(loop, &st);
    cr_assert_eq(st.live_operations, 0, "%u timers still live after the cancels' turn",
                 (unsigned)st.live_operations);
    cr_assert_eq(tern_loop_run(loop), 0);
    tern_loop_free(loop);
    cr_assert_eq(atomic_load(&fired), 0);
}

/*
 * The reserve is bounded: while 65536 requests (tern.h) wait for
 * the loop, one more is refused with -EAGAIN (never -ENOMEM); once the
 * loop has taken them, cancels are queued again, reusing the records.
 */
Test(cancel, queued_cancels_beyond_the_reserve_are_refused_then_accepted_again)
{
    tern_loop *loop = NULL;
    tern_id id = 0;
    _Atomic unsigned fired = 0;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    cr_assert_eq(tern_timer_start(loop, 60 * PH_SEC, 0, never_fires, &fired, &id), 0);
    tern_id stranger = id + (UINT64_C(1) << 40); /* names nothing: ignored when resolved */
    for (unsigned i = 0; i < 65536; i++)
        cr_assert_eq(tern_cancel(loop, stranger + i), TERN_CANCEL_REQUESTED);
    cr_assert_eq(tern_cancel(loop, id), -EAGAIN);
    cr_assert_eq(tern_loop_run_once(loop, 0), 1); /* the timer is still live */
    cr_assert_eq(tern_cancel(loop, id), TERN_CANCEL_REQUESTED);
    cr_assert_eq(tern_loop_run(loop), 0); /* the timer is gone: nothing keeps it running */
    tern_loop_free(loop);
    cr_assert_eq(atomic_load(&fired), 0);
}
