/*
 * Starting and shutting down the process-wide pool at its edges (SPEC §3,
 * §10): a start that differs from the running pool in the long class only
 * is refused; a start that waited while another start held the lock judges
 * the pool that start made (its own configuration: 0; another: -EINVAL);
 * a second shutdown waits for the first one to end, then finds no pool;
 * a batch submitted while a shutdown is under way is refused for shutdown
 * and leaves nothing behind.
 *
 * Each test runs in its own process (criterion), so each starts with no
 * pool. Every wait is bounded by PH_LIVENESS_NS.
 */
#include "loop_helpers.h"
#include "pool_helpers.h"

#include <linux/futex.h>

static tern_pool_config cfg_of(unsigned threads, unsigned long_max, uint64_t long_idle_ns)
{
    tern_pool_config c = ph_config(threads, 64, long_max);
    if (long_idle_ns != 0)
        c.long_idle_timeout_ns = long_idle_ns;
    return c;
}

Test(pool_start_edges, a_start_differing_only_in_the_long_class_is_refused,
     .timeout = TEST_TIMEOUT)
{
    tern_pool_config run = cfg_of(2, 2, 0);
    cr_assert_eq(tern_pool_start(&run), 0);
    tern_pool_config more_long = cfg_of(2, 3, 0);
    cr_assert_eq(tern_pool_start(&more_long), -EINVAL, "another long_threads_max");
    tern_pool_config other_idle = run;
    other_idle.long_idle_timeout_ns = run.long_idle_timeout_ns + PH_SEC;
    cr_assert_eq(tern_pool_start(&other_idle), -EINVAL, "another long_idle_timeout_ns");
    cr_assert_eq(tern_pool_start(&run), 0, "the same configuration again is accepted");
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 60 * PH_SEC), 0);
}

/* ---------------------------------------------------------------- */
/* Starts that meet at the lock                                     */
/* ---------------------------------------------------------------- */

struct starter {
    tern_pool_config cfg;
    atomic_int tid;
    atomic_int rc;
    atomic_bool returned;
};

static void *start_thread(void *arg)
{
    struct starter *s = arg;
    atomic_store(&s->tid, (int)syscall(SYS_gettid));
    atomic_store(&s->rc, tern_pool_start(&s->cfg));
    atomic_store(&s->returned, true);
    return NULL;
}

/* Whether thread tid sleeps on a futex with no timeout (a mutex). */
static bool blocked_on_a_mutex(pid_t tid)
{
    char line[256], what[256];
    if (!task_syscall_line(tid, line, sizeof line, what, sizeof what))
        return false;
    long nr;
    uint64_t addr, op, val, timeout;
    if (sscanf(line, "%ld %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64, &nr, &addr, &op, &val,
               &timeout) != 5)
        return false;
    unsigned cmd = (unsigned)op & FUTEX_CMD_MASK;
    return nr == SYS_futex && (cmd == FUTEX_WAIT || cmd == FUTEX_LOCK_PI) && timeout == 0;
}

static void wait_blocked(struct starter *s, const char *what)
{
    bool ok;
    PH_WAIT_UNTIL(ok, atomic_load(&s->tid) != 0 && blocked_on_a_mutex(atomic_load(&s->tid)));
    cr_assert(ok, "%s never blocked on the start lock", what);
    cr_assert(!atomic_load(&s->returned), "%s returned while the first start held", what);
}

Test(pool_start_edges, starts_waiting_on_a_start_judge_the_pool_it_made, .timeout = TEST_TIMEOUT)
{
    struct starter first = {.cfg = cfg_of(1, 2, 0)};
    struct starter same = {.cfg = first.cfg};
    struct starter other = {.cfg = cfg_of(2, 2, 0)};
    struct starter other_long = {.cfg = cfg_of(1, 3, 0)};
    struct starter other_idle = {.cfg = first.cfg};
    other_idle.cfg.long_idle_timeout_ns += PH_SEC;
    tern__test_hold_pool_start();
    pthread_t t1, t2, t3, t4, t5;
    cr_assert_eq(pthread_create(&t1, NULL, start_thread, &first), 0);
    bool ok;
    PH_WAIT_UNTIL(ok, tern__test_waiting_pool_start() == 1);
    cr_assert(ok, "the first start never reached the hold");
    cr_assert(!tern__pool_running(), "held before it is published");
    /* Neither later start can see a pool yet: both go for the lock. */
    cr_assert_eq(pthread_create(&t2, NULL, start_thread, &same), 0);
    wait_blocked(&same, "the start with the same configuration");
    cr_assert_eq(pthread_create(&t3, NULL, start_thread, &other), 0);
    wait_blocked(&other, "the start with another configuration");
    cr_assert_eq(pthread_create(&t4, NULL, start_thread, &other_long), 0);
    wait_blocked(&other_long, "the start with another long_threads_max");
    cr_assert_eq(pthread_create(&t5, NULL, start_thread, &other_idle), 0);
    wait_blocked(&other_idle, "the start with another long_idle_timeout_ns");
    tern__test_release_pool_start();
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    pthread_join(t3, NULL);
    pthread_join(t4, NULL);
    pthread_join(t5, NULL);
    cr_assert_eq(atomic_load(&first.rc), 0);
    cr_assert_eq(atomic_load(&same.rc), 0, "the pool runs with its configuration: %s",
                 tern_strerror(atomic_load(&same.rc)));
    cr_assert_eq(atomic_load(&other.rc), -EINVAL, "a different configuration is refused: %s",
                 tern_strerror(atomic_load(&other.rc)));
    cr_assert_eq(atomic_load(&other_long.rc), -EINVAL);
    cr_assert_eq(atomic_load(&other_idle.rc), -EINVAL);
    tern_pool_stats st;
    tern_pool_stats_get(&st);
    cr_assert_eq(st.threads, 1u, "the first start's pool runs");
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 60 * PH_SEC), 0);
}

/* ---------------------------------------------------------------- */
/* Two shutdowns                                                    */
/* ---------------------------------------------------------------- */

struct closer {
    atomic_int tid;
    atomic_int rc;
    atomic_uint *order;
    atomic_uint at; /* 1 + the order in which it returned */
};

static void *shutdown_thread(void *arg)
{
    struct closer *c = arg;
    atomic_store(&c->tid, (int)syscall(SYS_gettid));
    atomic_store(&c->rc, tern_pool_shutdown(TERN_POOL_DRAIN, 60 * PH_SEC));
    atomic_store(&c->at, atomic_fetch_add(c->order, 1) + 1);
    return NULL;
}

/* Whether thread tid is in a plain sleep (the second shutdown's poll). */
static bool in_a_sleep(pid_t tid)
{
    char line[256], what[256];
    long nr;
    return task_syscall_line(tid, line, sizeof line, what, sizeof what) &&
           sscanf(line, "%ld", &nr) == 1 &&
           (nr == SYS_clock_nanosleep
#ifdef SYS_nanosleep
            || nr == SYS_nanosleep
#endif
           );
}

static void noop_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop;
    (void)id;
    (void)status;
    (void)result;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

static void *noop_work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

Test(pool_start_edges, a_second_shutdown_waits_for_the_first, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    tern_pool_config c = cfg_of(1, 2, 0);
    cr_assert_eq(tern_pool_start(&c), 0);
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job j;
    ph_job_init(&j, &gate);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &j), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1), "the job never started");

    /* The first shutdown drains: it waits for the running job. */
    atomic_uint order = 0;
    struct closer first = {.order = &order}, second = {.order = &order};
    pthread_t t1, t2;
    cr_assert_eq(pthread_create(&t1, NULL, shutdown_thread, &first), 0);
    bool ok;
    /* Its only sleep is its poll for the pool to go idle, `closing` set. */
    PH_WAIT_UNTIL(ok, atomic_load(&first.tid) != 0 && in_a_sleep(atomic_load(&first.tid)));
    cr_assert(ok, "the first shutdown never waited for the running job");
    cr_assert_eq(atomic_load(&first.at), 0u, "the drain returned with a job running");

    /* While it waits, a batch is refused for shutdown and leaves nothing. */
    atomic_uint dones = 0;
    void *args[2] = {&dones, &dones};
    tern_id ids[2] = {0, 0};
    tern_pool_stats before;
    tern_pool_stats_get(&before);
    int rc = tern_submit_batch(loop, TERN_BOUNDED, noop_work, noop_done, args, 2, NULL, ids);
    cr_assert_eq(rc, -EAGAIN, "a batch during a shutdown: %s", tern_strerror(rc));
    cr_assert_eq(tern_loop_last_refusal(loop), TERN_REFUSED_SHUTDOWN);
    cr_assert_eq(ids[0], 0u, "ids are written only on success");
    tern_pool_stats after;
    tern_pool_stats_get(&after);
    cr_assert_eq(ph_refused(&after, TERN_REFUSED_SHUTDOWN) -
                     ph_refused(&before, TERN_REFUSED_SHUTDOWN),
                 2u, "one refusal per job of the batch");
    cr_assert_eq(loop_live(loop), 1u, "only the gated job is live");

    /* The second shutdown waits its turn, polling. */
    cr_assert_eq(pthread_create(&t2, NULL, shutdown_thread, &second), 0);
    PH_WAIT_UNTIL(ok, atomic_load(&second.tid) != 0 && in_a_sleep(atomic_load(&second.tid)));
    cr_assert(ok, "the second shutdown never waited");
    cr_assert_eq(atomic_load(&second.at), 0u, "the second shutdown returned during the first");

    ph_gate_open(&gate);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    cr_assert_eq(atomic_load(&first.rc), 0);
    cr_assert_eq(atomic_load(&second.rc), 0, "no pool is left to shut down: 0");
    cr_assert_eq(atomic_load(&first.at), 1u, "the first shutdown ended first");
    cr_assert_eq(atomic_load(&second.at), 2u);
    cr_assert(!tern__pool_running());
    PH_PUMP_UNTIL(ok, loop, atomic_load(&j.done_calls) == 1);
    cr_assert(ok, "the drained job's done never ran");
    cr_assert_eq(j.status, 0);
    cr_assert_eq(atomic_load(&dones), 0u, "the refused batch never runs");
    ph_gate_destroy(&gate);
    loop_free_clean(loop);
}

/* ---------------------------------------------------------------- */
/* A shutdown inside a callback, right after a submission           */
/* ---------------------------------------------------------------- */

struct in_callback {
    ph_job job;
    int submit_rc, shutdown_rc;
};

/* Step 1 (a post): the submission's wake is owed to the end of the turn's
 * callbacks, and the pool is gone before the turn pays it. */
static void submit_then_shutdown(tern_loop *loop, void *arg)
{
    struct in_callback *c = arg;
    c->submit_rc = ph_submit(loop, TERN_BOUNDED, &c->job);
    c->shutdown_rc = tern_pool_shutdown(TERN_POOL_DRAIN, 60 * PH_SEC);
}

Test(pool_start_edges, a_shutdown_in_a_callback_after_a_submission_still_delivers,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    tern_pool_config c = cfg_of(1, 2, 0);
    cr_assert_eq(tern_pool_start(&c), 0);
    struct in_callback cb = {.submit_rc = 1, .shutdown_rc = 1};
    ph_job_init(&cb.job, NULL);
    cr_assert_eq(tern_post(loop, submit_then_shutdown, &cb), 0);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&cb.job.done_calls) == 1);
    cr_assert_eq(cb.submit_rc, 0);
    cr_assert_eq(cb.shutdown_rc, 0, "the drain ran the queued job: %s",
                 tern_strerror(cb.shutdown_rc));
    cr_assert(ok, "the job's done never came");
    cr_assert_eq(atomic_load(&cb.job.ran), 1);
    cr_assert_eq(cb.job.status, 0);
    cr_assert(!tern__pool_running(), "the owed wake started no pool");
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    cr_assert_eq(atomic_load(&cb.job.done_calls), 1);
}
