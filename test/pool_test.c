/*
 * The pool's configuration contract and where callbacks run (SPEC §3).
 *
 * Criterion runs every test in its own process, so each test starts with
 * no pool and may fix the process-wide configuration it needs. Every test
 * ends by freeing its loops and shutting the pool down, so valgrind sees
 * nothing left behind.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <pthread.h>
#include <stdlib.h>

#include "pool_helpers.h"

static void shutdown_clean(void)
{
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
    cr_assert(!tern__pool_running());
}

static tern_loop *new_loop(const tern_pool_config *cfg)
{
    tern_loop_options opts;
    tern_loop *loop = NULL;
    tern_loop_options_init(&opts);
    opts.pool = cfg;
    cr_assert_eq(tern_loop_new(&loop, &opts), 0);
    cr_assert_not_null(loop);
    return loop;
}

/* Run one quick bounded job to completion and return its record's status. */
static void run_one(tern_loop *loop, tern_occupancy occ, ph_job *j)
{
    bool ok;
    cr_assert_eq(ph_submit(loop, occ, j), 0);
    PH_PUMP_UNTIL(ok, loop, atomic_load(&j->done_calls) == 1);
    cr_assert(ok, "the job's completion never arrived");
}

/* ------------------------------------------------------------------ */
/* Configuration                                                       */
/* ------------------------------------------------------------------ */

Test(pool, start_rejects_out_of_range_fields)
{
    struct {
        const char *what;
        tern_pool_config cfg;
    } bad[6];
    for (int i = 0; i < 6; i++)
        tern_pool_config_init(&bad[i].cfg);
    bad[0].what = "threads 0";
    bad[0].cfg.threads = 0;
    bad[1].what = "threads 1025";
    bad[1].cfg.threads = 1025;
    bad[2].what = "queue_capacity 0";
    bad[2].cfg.queue_capacity = 0;
    bad[3].what = "queue_capacity 2^31+1";
    bad[3].cfg.queue_capacity = (1u << 31) + 1;
    bad[4].what = "long_threads_max 65537";
    bad[4].cfg.long_threads_max = 65537;
    bad[5].what = "long_idle_timeout 0";
    bad[5].cfg.long_idle_timeout_ns = 0;

    for (int i = 0; i < 6; i++) {
        cr_assert_eq(tern_pool_start(&bad[i].cfg), -EINVAL, "%s was accepted", bad[i].what);
        cr_assert(!tern__pool_running(), "%s started the pool", bad[i].what);
        cr_assert_eq(ph_stats().threads, 0u, "%s left threads", bad[i].what);
    }

    /* A loop whose options carry a bad configuration is refused too. */
    tern_loop_options opts;
    tern_loop *loop = (tern_loop *)&opts; /* must stay untouched on error */
    tern_loop_options_init(&opts);
    opts.pool = &bad[0].cfg;
    cr_assert_eq(tern_loop_new(&loop, &opts), -EINVAL);
    cr_assert_eq(loop, (tern_loop *)&opts);
    cr_assert(!tern__pool_running());
}

Test(pool, start_accepts_the_range_edges)
{
    /* long_threads_max 0 is legal: it refuses every long job. */
    tern_pool_config cfg = ph_config(1, 1, 0);
    cfg.long_idle_timeout_ns = 1;
    cr_assert_eq(tern_pool_start(&cfg), 0);
    cr_assert(tern__pool_running());

    tern_loop *loop = new_loop(&cfg);
    ph_job j;
    ph_job_init(&j, NULL);
    ph_refusals before = ph_refusals_now();
    cr_assert_eq(ph_submit(loop, TERN_LONG, &j), -EAGAIN);
    ph_refusals after = ph_refusals_now();
    cr_assert_eq(after.long_ceiling, before.long_ceiling + 1);

    ph_job b;
    ph_job_init(&b, NULL);
    run_one(loop, TERN_BOUNDED, &b);
    cr_assert_eq(b.status, 0);
    cr_assert_eq(atomic_load(&j.ran), 0);
    cr_assert_eq(atomic_load(&j.done_calls), 0);
    tern_loop_free(loop);
    cr_assert_eq(atomic_load(&j.done_calls), 0);
    shutdown_clean();
}

Test(pool, start_twice_same_config_ok_different_einval)
{
    tern_pool_config a = ph_config(2, 64, 8);
    tern_pool_config b = ph_config(3, 64, 8);
    cr_assert_eq(tern_pool_start(&a), 0);
    cr_assert_eq(tern_pool_start(&a), 0, "an identical configuration is not a conflict");
    cr_assert_eq(tern_pool_start(&b), -EINVAL);
    /* Each field on its own is a conflict too. */
    tern_pool_config c[3] = {a, a, a};
    c[0].queue_capacity = 65;
    c[1].long_threads_max = 9;
    c[2].long_idle_timeout_ns = a.long_idle_timeout_ns + 1;
    for (int i = 0; i < 3; i++)
        cr_assert_eq(tern_pool_start(&c[i]), -EINVAL, "field %d: a different value was accepted",
                     i);
    bool ok;
    PH_WAIT_UNTIL(ok, ph_stats().threads == 2u);
    cr_assert(ok, "the conflicting start changed the pool (%u threads)", ph_stats().threads);
    shutdown_clean();
}

Test(pool, loop_with_conflicting_pool_config_gets_einval)
{
    tern_pool_config a = ph_config(2, 64, 8);
    cr_assert_eq(tern_pool_start(&a), 0);

    tern_pool_config variants[4] = {a, a, a, a};
    variants[0].threads = 3;
    variants[1].queue_capacity = 128;
    variants[2].long_threads_max = 9;
    variants[3].long_idle_timeout_ns = a.long_idle_timeout_ns + 1;
    for (int i = 0; i < 4; i++) {
        tern_loop_options opts;
        tern_loop *loop = NULL;
        tern_loop_options_init(&opts);
        opts.pool = &variants[i];
        cr_assert_eq(tern_loop_new(&loop, &opts), -EINVAL, "variant %d accepted", i);
        cr_assert_null(loop, "variant %d: *loopp touched on error", i);
    }

    /* The identical configuration is accepted, and so is NULL (adopt). */
    tern_loop *same = new_loop(&a);
    tern_loop *adopt = new_loop(NULL);
    ph_job j1, j2;
    ph_job_init(&j1, NULL);
    ph_job_init(&j2, NULL);
    run_one(same, TERN_BOUNDED, &j1);
    run_one(adopt, TERN_BOUNDED, &j2);
    cr_assert_eq(j1.status, 0);
    cr_assert_eq(j2.status, 0);
    bool ok;
    PH_WAIT_UNTIL(ok, ph_stats().threads == 2u);
    cr_assert(ok, "a NULL preference must adopt the running pool (%u threads)",
              ph_stats().threads);
    tern_loop_free(same);
    tern_loop_free(adopt);
    shutdown_clean();
}

Test(pool, null_config_starts_the_defaults_on_first_submission)
{
    tern_loop *loop = new_loop(NULL);
    ph_job j;
    ph_job_init(&j, NULL);
    run_one(loop, TERN_BOUNDED, &j);
    cr_assert_eq(j.status, 0);
    cr_assert(tern__pool_running());

    tern_pool_config def;
    tern_pool_config_init(&def);
    cr_assert_eq(def.threads, 4u);
    cr_assert_eq(def.queue_capacity, 1024u);
    cr_assert_eq(def.long_threads_max, 512u);
    cr_assert_eq(def.long_idle_timeout_ns, 10 * PH_SEC);
    bool ok;
    PH_WAIT_UNTIL(ok, ph_stats().threads == def.threads);
    cr_assert(ok, "%u threads, not the default %u", ph_stats().threads, def.threads);
    /* The pool now runs with the defaults, so asking for them is no conflict. */
    cr_assert_eq(tern_pool_start(&def), 0);
    tern_loop_free(loop);
    shutdown_clean();
}

Test(pool, a_loop_config_starts_the_pool_with_it)
{
    tern_pool_config cfg = ph_config(3, 32, 4);
    tern_loop *loop = new_loop(&cfg);
    ph_job j;
    ph_job_init(&j, NULL);
    run_one(loop, TERN_BOUNDED, &j);
    bool ok;
    PH_WAIT_UNTIL(ok, ph_stats().threads == 3u);
    cr_assert(ok, "%u threads, not the loop's 3", ph_stats().threads);
    tern_pool_config other = ph_config(4, 32, 4);
    cr_assert_eq(tern_pool_start(&other), -EINVAL);
    tern_loop_free(loop);
    shutdown_clean();
}

/* ------------------------------------------------------------------ */
/* Bad input leaves no trace                                           */
/* ------------------------------------------------------------------ */

Test(pool, submit_rejects_bad_values)
{
    tern_loop *loop = new_loop(NULL);
    ph_job j;
    ph_job_init(&j, NULL);
    tern_id id = 0;
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, NULL, ph_done, &j, &id), -EINVAL);
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, ph_work, NULL, &j, &id), -EINVAL);
    cr_assert_eq(tern_submit(loop, (tern_occupancy)7, ph_work, ph_done, &j, &id), -EINVAL);
    tern_loop_stats ls = ph_loop_stats(loop);
    cr_assert_eq(ls.undelivered, 0u);
    cr_assert_eq(ls.live_operations, 0u);
    cr_assert_eq(ph_stats().submitted, 0u);
    /* Nothing live: the loop returns at once. */
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&j.ran), 0);
    cr_assert_eq(atomic_load(&j.done_calls), 0);

    /* A NULL idp is allowed. */
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, ph_work, ph_done, &j, NULL), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&j.done_calls), 1);
    cr_assert_eq(j.status, 0);
    tern_loop_free(loop);
    shutdown_clean();
}

/* ------------------------------------------------------------------ */
/* Where work and done run                                             */
/* ------------------------------------------------------------------ */

Test(pool, workers_have_no_current_loop)
{
    tern_pool_config cfg = ph_config(2, 64, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop(NULL);
    ph_job b, l;
    ph_job_init(&b, NULL);
    ph_job_init(&l, NULL);
    /* Poison the fields so a work function that never ran is caught too. */
    b.work_current = loop;
    l.work_current = loop;
    run_one(loop, TERN_BOUNDED, &b);
    run_one(loop, TERN_LONG, &l);
    cr_assert_eq(atomic_load(&b.ran), 1);
    cr_assert_eq(atomic_load(&l.ran), 1);
    cr_assert_null(b.work_current, "tern_loop_current() is not NULL on a bounded worker");
    cr_assert_null(l.work_current, "tern_loop_current() is not NULL on a long worker");
    cr_assert(!pthread_equal(b.work_thread, pthread_self()));
    cr_assert(!pthread_equal(l.work_thread, pthread_self()));
    tern_loop_free(loop);
    shutdown_clean();
}

Test(pool, done_runs_on_the_submitting_loop_in_step_2)
{
    tern_loop *loop = new_loop(NULL);
    for (int occ = TERN_BOUNDED; occ <= TERN_LONG; occ++) {
        ph_job j;
        ph_job_init(&j, NULL);
        j.result = &j.result; /* a distinct pointer the work hands back */
        run_one(loop, (tern_occupancy)occ, &j);
        cr_assert_eq(atomic_load(&j.done_calls), 1);
        cr_assert_eq(j.done_step, 2, "done ran in step %d", j.done_step);
        cr_assert_eq(j.done_loop, loop);
        cr_assert_eq(j.done_current, loop, "tern_loop_current() inside done");
        cr_assert(pthread_equal(j.done_thread, pthread_self()), "done ran on another thread");
        cr_assert_neq(j.id, 0u);
        cr_assert_eq(j.done_id, j.id, "done saw another id");
        cr_assert_eq(j.work_id, j.id, "tern_job_id() disagrees with the submission's id");
        cr_assert_eq(j.status, 0);
        cr_assert_eq(j.done_result, &j.result, "done did not get the work's result");
    }
    tern_loop_free(loop);
    shutdown_clean();
}

/*
 * A job submitted from a done callback (step 2) defers its wake to the end
 * of the step, so one wake decision covers the turn's batch. That deferred
 * wake must still come: here every worker is parked when done submits, so
 * the second job runs only if the loop wakes one after step 2.
 */
struct chain {
    ph_job second;
    bool parked, submitted;
};

static void chain_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)id, (void)status, (void)result;
    struct chain *c = arg;
    /* Both workers park once their spin runs dry: wait for it (bounded). */
    uint64_t deadline = ph_now() + PH_LIVENESS_NS;
    while (tern__test_pool_sleepers() < 2 && ph_now() < deadline)
        sched_yield();
    c->parked = tern__test_pool_sleepers() == 2;
    c->submitted = ph_submit(loop, TERN_BOUNDED, &c->second) == 0;
}

static void *chain_work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

Test(pool, a_job_submitted_in_step_2_wakes_a_parked_worker)
{
    tern_pool_config cfg = ph_config(2, 64, 4);
    tern_loop *loop = new_loop(&cfg);
    struct chain c = {0};
    ph_job_init(&c.second, NULL);
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, chain_work, chain_done, &c, NULL), 0);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&c.second.done_calls) == 1);
    cr_assert(c.parked, "the workers never parked");
    cr_assert(c.submitted);
    cr_assert(ok, "a job submitted in step 2 never ran: its deferred wake was lost");
    cr_assert_eq(c.second.done_step, 2);
    tern_loop_free(loop);
    shutdown_clean();
}

/* Two loops on two threads: each job's done runs on the loop that submitted it. */
struct loop_thread {
    tern_loop *loop;
    ph_job jobs[32];
    pthread_t thread;
    bool ok;
};

static void *two_loops_main(void *arg)
{
    struct loop_thread *t = arg;
    bool ok;
    t->ok = false;
    for (int i = 0; i < 32; i++) {
        ph_job_init(&t->jobs[i], NULL);
        if (ph_submit(t->loop, i % 4 == 3 ? TERN_LONG : TERN_BOUNDED, &t->jobs[i]) != 0)
            return NULL;
    }
    PH_PUMP_UNTIL(ok, t->loop, ph_done_total(t->jobs, 32) == 32);
    t->ok = ok;
    return NULL;
}

Test(pool, each_done_runs_on_its_own_loop)
{
    struct loop_thread t[2];
    for (int k = 0; k < 2; k++)
        t[k].loop = new_loop(NULL);
    for (int k = 0; k < 2; k++)
        cr_assert_eq(pthread_create(&t[k].thread, NULL, two_loops_main, &t[k]), 0);
    for (int k = 0; k < 2; k++)
        pthread_join(t[k].thread, NULL);
    for (int k = 0; k < 2; k++) {
        cr_assert(t[k].ok, "loop %d did not get all its completions", k);
        for (int i = 0; i < 32; i++) {
            ph_job *j = &t[k].jobs[i];
            cr_assert_eq(atomic_load(&j->done_calls), 1);
            cr_assert_eq(j->done_loop, t[k].loop);
            cr_assert_eq(j->done_current, t[k].loop);
            cr_assert(pthread_equal(j->done_thread, t[k].thread));
            cr_assert_eq(j->done_step, 2);
            cr_assert_eq(j->status, 0);
        }
    }
    for (int k = 0; k < 2; k++)
        tern_loop_free(t[k].loop);
    shutdown_clean();
}

/* ------------------------------------------------------------------ */
/* Thread creation failure                                             */
/* ------------------------------------------------------------------ */

static int count_tasks(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    struct dirent *e;
    if (d == NULL)
        return -1;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

Test(pool, thread_creation_failure_is_a_returned_error)
{
    tern_pool_config cfg = ph_config(3, 64, 4);
    int baseline = count_tasks();
    cr_assert_gt(baseline, 0);
    unsigned failures = 0;

    /* Fail the 1st, 2nd, ... thread creation until a start needs fewer. */
    for (uint64_t n = 1; n <= 64; n++) {
        tern__fault_arm(TERN__FAULT_THREAD, n);
        int rc = tern_pool_start(&cfg);
        bool fired = tern__fault_fired();
        tern__fault_arm(TERN__FAULT_THREAD, 0);
        if (!fired) {
            cr_assert_eq(rc, 0, "start failed without an injected fault: %d", rc);
            shutdown_clean();
            break;
        }
        failures++;
        cr_assert_lt(rc, 0, "thread %llu failed yet the start returned %d",
                     (unsigned long long)n, rc);
        cr_assert(rc == -EAGAIN || rc == -ENOMEM, "unexpected error %d (%s)", rc,
                  tern_err_name(rc));
        cr_assert(!tern__pool_running(), "a failed start left the pool running (n=%llu)",
                  (unsigned long long)n);
        tern_pool_stats s = ph_stats();
        cr_assert_eq(s.threads, 0u, "a failed start left %u threads counted", s.threads);
        bool ok;
        PH_WAIT_UNTIL(ok, count_tasks() == baseline);
        cr_assert(ok, "a failed start left threads behind: %d tasks, baseline %d", count_tasks(),
                  baseline);

        /* And the pool can be started afterwards. */
        cr_assert_eq(tern_pool_start(&cfg), 0);
        cr_assert(tern__pool_running());
        PH_WAIT_UNTIL(ok, ph_stats().threads == 3u);
        cr_assert(ok, "%u threads after a clean start", ph_stats().threads);
        shutdown_clean();
        PH_WAIT_UNTIL(ok, count_tasks() == baseline);
        cr_assert(ok, "shutdown left threads behind");
    }
    cr_assert_geq(failures, 3u, "only %u thread creations were injectable for 3 workers", failures);
}

Test(pool, thread_creation_failure_on_submission_is_returned)
{
    /* The lazy start on first submission reports the failure as well. */
    tern_loop *loop = new_loop(NULL);
    ph_job j;
    ph_job_init(&j, NULL);
    tern_pool_stats before = ph_stats();
    tern__fault_arm(TERN__FAULT_THREAD, 1);
    int rc = ph_submit(loop, TERN_BOUNDED, &j);
    bool fired = tern__fault_fired();
    tern__fault_arm(TERN__FAULT_THREAD, 0);
    tern_pool_stats after = ph_stats();
    cr_assert(fired);
    cr_assert_eq(rc, -EAGAIN, "%s", tern_err_name(rc));
    /* Its own cause: no shutdown was under way (SPEC: the cause names the limit). */
    cr_assert_eq(tern_loop_last_refusal(loop), TERN_REFUSED_THREADS, "cause %s",
                 tern_refusal_name(tern_loop_last_refusal(loop)));
    cr_assert(ph_refused_once(&before, &after, TERN_REFUSED_THREADS),
              "refused_threads %llu -> %llu", (unsigned long long)before.refused_threads,
              (unsigned long long)after.refused_threads);
    cr_assert(!tern__pool_running());
    cr_assert_eq(tern_loop_run(loop), 0, "a refused job left something live");
    cr_assert_eq(atomic_load(&j.done_calls), 0);

    run_one(loop, TERN_BOUNDED, &j);
    cr_assert_eq(j.status, 0);
    tern_loop_free(loop);
    cr_assert_eq(atomic_load(&j.done_calls), 1);
    shutdown_clean();
}

Test(pool, long_thread_creation_failure_refuses_the_job)
{
    tern_pool_config cfg = ph_config(1, 16, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = new_loop(NULL);
    ph_job j;
    ph_job_init(&j, NULL);
    tern_pool_stats before = ph_stats();
    tern__fault_arm(TERN__FAULT_THREAD, 1);
    int rc = ph_submit(loop, TERN_LONG, &j);
    bool fired = tern__fault_fired();
    tern__fault_arm(TERN__FAULT_THREAD, 0);
    cr_assert(fired, "submitting a long job with no parked worker created no thread");
    cr_assert_eq(rc, -EAGAIN, "a long job without a thread to run it: %s", tern_err_name(rc));
    /* Below the ceiling: the cause is the missing thread, not the ceiling. */
    cr_assert_eq(tern_loop_last_refusal(loop), TERN_REFUSED_THREADS, "cause %s",
                 tern_refusal_name(tern_loop_last_refusal(loop)));
    tern_pool_stats after = ph_stats();
    cr_assert(ph_refused_once(&before, &after, TERN_REFUSED_THREADS),
              "refused_threads %llu -> %llu", (unsigned long long)before.refused_threads,
              (unsigned long long)after.refused_threads);
    cr_assert_eq(after.long_threads, 0u);
    cr_assert_eq(after.submitted, before.submitted);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&j.ran), 0);

    run_one(loop, TERN_LONG, &j);
    cr_assert_eq(j.status, 0);
    tern_loop_free(loop);
    cr_assert_eq(atomic_load(&j.done_calls), 1);
    shutdown_clean();
}
