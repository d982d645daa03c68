/*
 * The pause gate's windows, held open on purpose (pool/stops.c): what
 * tern_group_pause promises about bounded jobs, at the two moments where
 * a worker has read the gate open but has not yet taken its job.
 *
 *   - A running pool: a worker stopped past the gate, its job queued. The
 *     pause must wait for it (it is neither held nor asleep), so that job
 *     starts before the pause returns, never inside exclusive mode.
 *   - A pool being started: its worker has read the gate open, the pool is
 *     not yet published, and a pause comes in between. Finding no pool,
 *     the pause used to return at once, and the job submitted next ran
 *     inside exclusive mode. It must wait for the start and then for that
 *     worker.
 *
 * Each job records whether exclusive mode had been entered when it began
 * (the pausing thread sets the flag right after pause returns, and clears
 * it before resume). The waits are on conditions, bounded by LIVENESS_NS;
 * the one grace period (GRACE_NS) only gives a broken pause the time to
 * return early, which it does in microseconds: a correct pause never
 * returns inside it, however slow the machine.
 */
#include "loop_helpers.h"

#define GRACE_NS (200 * MS)

static tern_group *group;
static atomic_bool inside;      /* between pause's return and resume */
static atomic_bool paused;      /* the pausing thread's pause has returned */
static atomic_bool may_resume;  /* the test lets the pausing thread resume */
static atomic_int pause_rc;
static atomic_uint jobs_started, jobs_started_inside, jobs_done;

static void *job(tern_job *j, void *arg)
{
    (void)j, (void)arg;
    atomic_fetch_add(&jobs_started, 1);
    if (atomic_load(&inside))
        atomic_fetch_add(&jobs_started_inside, 1);
    return NULL;
}

static void job_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)result, (void)arg;
    cr_assert_eq(status, 0);
    atomic_fetch_add(&jobs_done, 1);
}

/* Pause, mark exclusive mode, wait for the test's word, unmark, resume. */
static void *pauser(void *arg)
{
    (void)arg;
    int rc = tern_group_pause(group);
    atomic_store(&pause_rc, rc);
    if (rc == 0)
        atomic_store(&inside, true);
    atomic_store(&paused, true);
    while (!atomic_load(&may_resume))
        sleep_ns(MS / 10);
    if (rc == 0) {
        atomic_store(&inside, false);
        cr_assert_eq(tern_group_resume(group), 0);
    }
    return NULL;
}

static void wait_until(unsigned (*count)(void), unsigned want, const char *what)
{
    uint64_t deadline = mono_ns() + LIVENESS_NS;
    while (count() < want) {
        if (mono_ns() > deadline)
            cr_assert_fail("FAIL: %s: %u of %u after the deadline", what, count(), want);
        sleep_ns(MS / 10);
    }
}

static unsigned started(void)
{
    return atomic_load(&jobs_started);
}

static unsigned pool_start_waiting(void)
{
    return tern__test_waiting_pool_start();
}

static unsigned past_gate_waiting(void)
{
    return tern__test_waiting_past_gate();
}

static unsigned holds(void)
{
    return tern__test_pool_holds();
}

/* Whether the pause returned within the grace period (a correct one cannot). */
static bool pause_returned_within_grace(void)
{
    uint64_t end = mono_ns() + GRACE_NS;
    while (!atomic_load(&paused) && mono_ns() < end)
        sleep_ns(MS / 10);
    return atomic_load(&paused);
}

static void reset(void)
{
    atomic_store(&inside, false);
    atomic_store(&paused, false);
    atomic_store(&may_resume, false);
    atomic_store(&pause_rc, -1);
    atomic_store(&jobs_started, 0);
    atomic_store(&jobs_started_inside, 0);
    atomic_store(&jobs_done, 0);
}

static tern_group *group_started(void)
{
    tern_group_options go;
    tern_group_options_init(&go);
    go.loops = 2;
    go.name = "window";
    tern_group *g = NULL;
    cr_assert_eq(tern_group_new(&g, &go), 0);
    cr_assert_eq(tern_group_start(g), 0);
    return g;
}

/* After the resume: every job ran once, none inside exclusive mode; all freed. */
static void finish(tern_loop *loop, pthread_t t, unsigned jobs)
{
    atomic_store(&may_resume, true);
    pthread_join(t, NULL);
    cr_assert_eq(atomic_load(&pause_rc), 0);
    cr_assert(run_until_nothing_live(loop),
              "FAIL: %u of %u jobs done after the resume", atomic_load(&jobs_done), jobs);
    cr_assert_eq(atomic_load(&jobs_started), jobs);
    cr_assert_eq(atomic_load(&jobs_started_inside), 0,
                 "FAIL: %u bounded job(s) started inside exclusive mode",
                 atomic_load(&jobs_started_inside));
    loop_free_clean(loop);
    cr_assert_eq(tern_group_shutdown(group), 0);
    cr_assert_eq(tern_group_wait(group), 0);
    tern_group_free(group);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * SEC), 0);
}

Test(pause_window, a_worker_past_the_gate_finishes_its_job_before_pause_returns,
     .timeout = TEST_TIMEOUT)
{
    reset();
    tern_pool_config pc;
    tern_pool_config_init(&pc);
    pc.threads = 1;
    cr_assert_eq(tern_pool_start(&pc), 0);
    group = group_started();
    tern_loop *loop = loop_new_default();

    /* The worker wakes for the job, reads the gate open and stops there. */
    tern__test_hold_past_gate();
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, job, job_done, NULL, NULL), 0);
    wait_until(past_gate_waiting, 1, "workers stopped past the gate");

    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, pauser, NULL), 0);
    wait_until(holds, 1, "exclusive-mode holds taken");
    cr_assert(!pause_returned_within_grace(),
              "FAIL: pause returned while a worker was past the gate with a job to take");

    /* Let it go: it runs the job it was about to take, then holds. */
    tern__test_release_past_gate();
    uint64_t deadline = mono_ns() + LIVENESS_NS;
    while (!atomic_load(&paused))
        cr_assert(mono_ns() < deadline, "FAIL: pause did not return once the worker went on");
    cr_assert_eq(atomic_load(&jobs_started), 1, "the job taken before the hold ran first");

    /* Inside exclusive mode a new job waits for the resume. */
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, job, job_done, NULL, NULL), 0);
    sleep_ns(5 * MS);
    cr_assert_eq(atomic_load(&jobs_started), 1, "FAIL: a job started inside exclusive mode");
    finish(loop, t, 2);
}

/* Start the pool from a thread of its own: the start stops before it is published. */
static void *start_pool(void *arg)
{
    (void)arg;
    tern_pool_config pc;
    tern_pool_config_init(&pc);
    pc.threads = 1;
    cr_assert_eq(tern_pool_start(&pc), 0);
    return NULL;
}

Test(pause_window, a_pause_racing_a_pool_start_waits_for_its_workers, .timeout = TEST_TIMEOUT)
{
    reset();
    cr_assert(!tern__pool_running());
    group = group_started();
    tern_loop *loop = loop_new_default();

    /* A start with its one worker running, past the gate, not yet published. */
    tern__test_hold_past_gate();
    tern__test_hold_pool_start();
    pthread_t s;
    cr_assert_eq(pthread_create(&s, NULL, start_pool, NULL), 0);
    wait_until(pool_start_waiting, 1, "pool starts stopped before publishing");
    wait_until(past_gate_waiting, 1, "workers stopped past the gate");
    cr_assert(!tern__pool_running());

    /* The pause comes in between; it must not return with that worker loose. */
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, pauser, NULL), 0);
    wait_until(holds, 1, "exclusive-mode holds taken");
    cr_assert(!pause_returned_within_grace(),
              "FAIL: pause returned while a pool start had a worker past the gate");

    /* The start goes on; a job is queued; the worker takes it. */
    tern__test_release_pool_start();
    pthread_join(s, NULL);
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, job, job_done, NULL, NULL), 0);
    tern__test_release_past_gate();
    wait_until(started, 1, "jobs started");
    uint64_t deadline = mono_ns() + LIVENESS_NS;
    while (!atomic_load(&paused))
        cr_assert(mono_ns() < deadline, "FAIL: pause did not return once the worker went on");
    cr_assert_eq(atomic_load(&jobs_started_inside), 0,
                 "FAIL: the job the started pool's worker took ran inside exclusive mode");
    finish(loop, t, 1);
}
