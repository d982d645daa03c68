/*
 * Exclusive mode racing bounded submissions: pause and resume, from
 * members and from an outside thread, while every loop of the group keeps
 * bounded jobs streaming through the pool (each done submits the next).
 *
 * Each round builds a group of 2..4 loops and a pool of 1..4 bounded
 * workers from the run's seed (TERN_SEED replays another); the outside
 * pauser is already pausing while the pool starts. Every loop runs
 * a repeating timer; now and then a tick pauses the group from inside the
 * callback, submits a few bounded jobs (they must wait for the resume),
 * watches for a random window of up to 2 ms, and resumes. An outside
 * thread does the same between its own random sleeps.
 *
 * Checked, per round:
 *   - inside exclusive mode no bounded job runs and none starts, whoever
 *     paused (the count of jobs started is the same at both ends of the
 *     window, and the count running is 0);
 *   - every job accepted is done exactly once by the end of the round (the
 *     jobs submitted inside exclusive mode run after the resume);
 *   - every wait is bounded: the watchdog (stress.h) reports the state and
 *     fails a round that does not end in time.
 * Ends with "N passed, N failed".
 */
#include "stress.h"

#include "tern/group.h"

#define ROUNDS 10
#define ROUND_NS (250 * STRESS_MS)
#define MAX_LOOPS 4
#define STREAM_JOBS 6 /* jobs each loop keeps in flight outside exclusive mode */
#define INSIDE_JOBS 2 /* jobs a pauser submits inside exclusive mode */

static unsigned job_spins; /* a job's length this round */
static _Atomic unsigned jobs_running, jobs_started, jobs_done, jobs_accepted;
static _Atomic unsigned pauses, violations, first_violation_started;
static atomic_bool stopping;
/* Set between a pause's return and its resume: a job that starts then is a violation. */
static atomic_bool exclusive;
static _Atomic unsigned job_violations;

struct member {
    tern_group *g;
    unsigned index;
    uint64_t rng;
    tern_id timer;
    unsigned inflight; /* loop thread only */
};

static struct member members[MAX_LOOPS];

static void *work(tern_job *job, void *arg)
{
    (void)job, (void)arg;
    atomic_fetch_add(&jobs_running, 1);
    atomic_fetch_add(&jobs_started, 1);
    if (atomic_load(&exclusive))
        atomic_fetch_add(&job_violations, 1);
    volatile unsigned x = 0; /* tens to hundreds of microseconds */
    for (unsigned i = 0; i < job_spins; i++)
        x += i;
    atomic_fetch_sub(&jobs_running, 1);
    return NULL;
}

static void submit_one(tern_loop *loop, struct member *m);

static void done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)id, (void)status, (void)result;
    struct member *m = arg;
    m->inflight--;
    atomic_fetch_add(&jobs_done, 1);
    if (!atomic_load(&stopping) && m->inflight < STREAM_JOBS)
        submit_one(loop, m);
}

static void submit_one(tern_loop *loop, struct member *m)
{
    if (tern_submit(loop, TERN_BOUNDED, work, done, m, NULL) == 0) {
        m->inflight++;
        atomic_fetch_add(&jobs_accepted, 1);
    }
}

/* Spin for ns, yielding: the window in which nothing may start. */
static void window(uint64_t ns)
{
    uint64_t end = stress_now() + ns;
    while (stress_now() < end)
        sched_yield();
}

/*
 * Pause, check that the pool is still and stays still for a window while
 * jobs are submitted (from a member, into its own loop), resume.
 */
static void exclusive_round(tern_group *g, tern_loop *own, struct member *m, uint64_t *rng)
{
    int rc = tern_group_pause(g);
    if (rc != 0)
        return; /* -ESHUTDOWN at the end of the round */
    atomic_store(&exclusive, true);
    unsigned running = atomic_load(&jobs_running);
    unsigned started = atomic_load(&jobs_started);
    if (own != NULL)
        for (int j = 0; j < INSIDE_JOBS; j++)
            submit_one(own, m);
    window(stress_below(rng, 5 * STRESS_MS));
    unsigned after = atomic_load(&jobs_started);
    if (running != 0 || after != started) {
        if (atomic_fetch_add(&violations, 1) == 0)
            atomic_store(&first_violation_started, after - started + running * 1000u);
        printf("violation: %u running at the pause, %u started while paused (%s)\n", running,
               after - started, own != NULL ? "member" : "outside");
    }
    atomic_fetch_add(&pauses, 1);
    atomic_store(&exclusive, false);
    tern_group_resume(g);
}

static void tick(tern_loop *loop, tern_id id, void *arg)
{
    (void)id;
    struct member *m = arg;
    if (atomic_load(&stopping))
        return;
    if (m->inflight < STREAM_JOBS)
        submit_one(loop, m);
    if (stress_below(&m->rng, 4) == 0)
        exclusive_round(m->g, loop, m, &m->rng);
}

/* A defer chain: the loop never sleeps, as a busy server's does not. */
static void spin_defer(tern_loop *loop, void *arg)
{
    if (!atomic_load(&stopping))
        tern_defer(loop, spin_defer, arg);
}

static void setup(tern_loop *loop, void *arg)
{
    struct member *m = arg;
    if (stress_below(&m->rng, 2) == 0)
        tern_defer(loop, spin_defer, m);
    tern_timer_start(loop, 200 * 1000, 200 * 1000, tick, m, &m->timer);
    for (int j = 0; j < STREAM_JOBS; j++)
        submit_one(loop, m);
}

static void teardown(tern_loop *loop, void *arg)
{
    struct member *m = arg;
    tern_timer_stop(loop, m->timer);
}

struct outside {
    tern_group *g;
    uint64_t rng;
};

static void *outside_main(void *arg)
{
    struct outside *o = arg;
    while (!atomic_load(&stopping)) {
        exclusive_round(o->g, NULL, NULL, &o->rng); /* the first one at once: it races the start */
        window(stress_below(&o->rng, 3 * STRESS_MS));
    }
    return NULL;
}

static void report(void)
{
    printf("pauses %u, violations %u, jobs accepted %u started %u done %u running %u\n",
           atomic_load(&pauses), atomic_load(&violations), atomic_load(&jobs_accepted),
           atomic_load(&jobs_started), atomic_load(&jobs_done), atomic_load(&jobs_running));
}

static void round_run(int round)
{
    uint64_t rng = stress_seed((uint64_t)round);
    unsigned n = 2 + (unsigned)stress_below(&rng, MAX_LOOPS - 1);
    tern_pool_config pc;
    tern_pool_config_init(&pc);
    pc.threads = 1 + (unsigned)stress_below(&rng, 4);
    job_spins = stress_below(&rng, 2) ? 20000 : 400000;
    atomic_store(&stopping, false);
    atomic_store(&jobs_accepted, 0);
    atomic_store(&jobs_started, 0);
    atomic_store(&jobs_done, 0);
    atomic_store(&violations, 0);
    atomic_store(&pauses, 0);
    atomic_store(&job_violations, 0);

    tern_group_options go;
    tern_group_options_init(&go);
    go.loops = n;
    go.name = "pause";
    tern_group *g = NULL;
    int rc = tern_group_new(&g, &go);
    STRESS_CHECK(rc == 0, "round %d: a group of %u loops: %s", round, n, tern_strerror(rc));
    if (rc != 0)
        return;
    for (unsigned i = 0; i < n; i++) {
        members[i] = (struct member){.g = g, .index = i, .rng = stress_seed(100 + i + 8 * round)};
        tern_group_on_shutdown(g, i, teardown, &members[i]);
    }
    tern_group_start(g);

    stress_phase("a round of pauses racing bounded submissions", 60 * STRESS_SEC);
    /* The outside pauser begins before the pool exists, so its first pauses race the start. */
    struct outside o = {g, stress_seed(1000 + round)};
    pthread_t t;
    pthread_create(&t, NULL, outside_main, &o);
    rc = tern_pool_start(&pc);
    STRESS_CHECK(rc == 0, "round %d: pool of %u bounded workers: %s", round, pc.threads,
                 tern_strerror(rc));
    for (unsigned i = 0; i < n; i++)
        while (tern_post(tern_group_loop(g, i), setup, &members[i]) == -EAGAIN)
            sched_yield();
    window(ROUND_NS);
    atomic_store(&stopping, true);
    pthread_join(t, NULL);
    tern_group_shutdown(g);
    rc = tern_group_wait(g);
    tern_group_free(g);
    rc = rc == 0 ? tern_pool_shutdown(TERN_POOL_DRAIN, 30 * STRESS_SEC) : rc;
    stress_phase_end();

    STRESS_CHECK(atomic_load(&violations) == 0 && atomic_load(&job_violations) == 0,
                 "round %d (%u loops, %u workers): no bounded job starts in exclusive mode "
                 "(%u pauses; %u windows saw a start, %u jobs started inside)",
                 round, n, pc.threads, atomic_load(&pauses), atomic_load(&violations),
                 atomic_load(&job_violations));
    STRESS_CHECK(rc == 0 && atomic_load(&jobs_done) == atomic_load(&jobs_accepted),
                 "round %d: every accepted job done once (%u accepted, %u done, end %s)", round,
                 atomic_load(&jobs_accepted), atomic_load(&jobs_done), tern_strerror(rc));
}

int main(void)
{
    stress_init("pause_stress", 0x9a05e001);
    stress_on_report(report);
    for (int round = 0; round < ROUNDS; round++)
        round_run(round);
    return stress_summary();
}
