/*
 * The fault walk (SPEC §8): every allocation, thread creation and
 * descriptor creation in tern can fail, and each failure must come back as
 * a clear negative errno that loses nothing already accepted and leaves
 * the loop usable.
 *
 * How. backends/fault.h lets a test make the nth checked call fail. Each
 * scenario below is a function of n: it arms the seam with every site
 * (the stream seam's scenarios: that site alone) at n, runs its calls,
 * disarms, and checks:
 *   - the call during which the failure was injected returned -ENOMEM,
 *     -EMFILE or -EAGAIN, and every other call succeeded;
 *   - what was accepted before or after the failure completes exactly once
 *     (jobs, timers, posts, lookups, connections), and what was refused
 *     never calls back;
 *   - nothing is left behind: live_operations returns to 0, the pool's
 *     submitted == completed + cancelled + timed_out, no descriptor stays open (and
 *     ASan/valgrind see every allocation freed, in CI);
 *   - the loop still works: after disarming, one more operation succeeds.
 * The walk runs n = 1, 2, 3, ... until a whole run passes without the
 * failure being injected (tern__fault_fired() false), so every checked
 * call a scenario makes is made to fail once. Each walk must inject at
 * least one failure, which proves the scenario reaches the seam at all.
 *
 * Checked calls are counted process-wide, so a scenario makes them from
 * one thread at a time: pool workers make none (they neither allocate nor
 * create descriptors), and the cross-thread scenario keeps its loop
 * thread's callbacks free of tern calls while armed.
 *
 * No timing is asserted. Waits are bounded by LIVENESS_NS, a liveness
 * backstop that a correct runtime meets in milliseconds.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc_helpers.h"
#include "tern.h"
#include "testing.h"

#define MS (UINT64_C(1000000))
#define SEC (UINT64_C(1000000000))
#define LIVENESS_NS (UINT64_C(20) * SEC)
/* A walk that needs more steps than this has lost its way (a scenario that
 * never stops making checked calls). */
#define WALK_MAX 5000
#define TEST_TIMEOUT 300.0

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * SEC + (uint64_t)ts.tv_nsec;
}

static void sleep_us(unsigned us)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)us * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

#ifdef TERN_LIBKQUEUE
/* libkqueue's own export for deterministic teardown (not in its header):
 * returns once its monitoring thread has freed every kqueue closed so far. */
void libkqueue_drain_pending_close(void);
#endif

/* Counted after libkqueue, if built, really closed the kqueues closed so far. */
static int count_open_fds(void)
{
#ifdef TERN_LIBKQUEUE
    libkqueue_drain_pending_close();
#endif
    int n = proc_open_fds();
    cr_assert_geq(n, 0, "cannot read /proc/self/fd");
    return n;
}

static void disarm(void)
{
    tern__fault_arm(0, 0);
}

/* The errors an injected failure may surface as (fault.h: allocation ->
 * -ENOMEM, descriptor -> -EMFILE, thread -> -EAGAIN, a UDP socket's
 * system call -> -ENOBUFS). */
static bool injected_errno(int rc)
{
    return rc == -ENOMEM || rc == -EMFILE || rc == -EAGAIN || rc == -ENOBUFS;
}

/*
 * One call made while armed. If the failure was injected during this very
 * call, it must have failed with an injected errno (false: refused);
 * otherwise it must have succeeded (true: accepted). ARMED() samples the
 * flag before the call, sequenced by the comma operator.
 */
static bool fired_mark;
static unsigned refusals; /* armed calls that returned the injected failure */
static bool armed_outcome(const char *what, bool fired_before, int rc)
{
    if (!fired_before && tern__fault_fired()) {
        cr_assert(injected_errno(rc),
                  "%s: the injected failure must return -ENOMEM, -EMFILE, -EAGAIN or -ENOBUFS, got "
                  "%d (%s)",
                  what, rc, tern_err_name(rc));
        refusals++;
        return false;
    }
    cr_assert_eq(rc, 0, "%s failed with %s although no failure was injected", what,
                 tern_err_name(rc));
    return true;
}
#define ARMED(what, expr) \
    (fired_mark = tern__fault_fired(), armed_outcome((what), fired_mark, (expr)))

/*
 * Make the nth checked call from now on fail, over every site but the
 * stream seam's system calls: those have scenarios of their own (the
 * stream seam section at the end), which arm that site alone so each of
 * its calls fails with the errno they choose.
 */
#define BASE_SITES (TERN__FAULT_ALL & ~(unsigned)TERN__FAULT_STREAM)
static void arm(uint64_t n)
{
    refusals = 0;
    tern__fault_arm(BASE_SITES, n);
}

/*
 * Disarm and say whether the failure was injected. An injected failure
 * must have been told to the caller: returned by an armed call, or passed
 * to a callback as its status (`notices`, counted by the scenario). One
 * that nobody heard of was swallowed, and whatever it broke would be lost
 * in silence.
 */
static bool end_armed(unsigned notices)
{
    bool fired = tern__fault_fired();
    disarm();
    if (fired)
        cr_assert_gt(refusals + notices, 0,
                     "the injected failure was swallowed: no call returned it and no callback "
                     "was told");
    else
        cr_assert_eq(refusals + notices, 0, "a failure was reported but none was injected");
    return fired;
}

static tern_loop_stats loop_stats(const tern_loop *loop)
{
    tern_loop_stats s;
    tern_loop_stats_get(loop, &s);
    return s;
}

static tern_loop *new_loop(const char *backend)
{
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.backend = backend;
    tern_loop *loop = NULL;
    int rc = tern_loop_new(&loop, &o);
    cr_assert_eq(rc, 0, "tern_loop_new(%s): %s", backend, tern_err_name(rc));
    return loop;
}

/* One loop made and freed first, so descriptors a backend keeps for the
 * whole process (libkqueue's monitoring thread's) are not counted as left
 * open by the first step. */
static void warm_up(const char *backend)
{
    tern_loop_free(new_loop(backend));
}

/* Every backend built, or only TERN_TEST_BACKEND's (as loop_helpers.h). */
/* As loop_helpers.h's backend_selected: TERN_TEST_BACKEND names the one
 * backend to run, TERN_TEST_SKIP_BACKEND one to leave out. */
static bool selected(const char *backend)
{
    const char *only = getenv("TERN_TEST_BACKEND");
    const char *skip = getenv("TERN_TEST_SKIP_BACKEND");
    return (only == NULL || strcmp(only, backend) == 0) &&
           (skip == NULL || strcmp(skip, backend) != 0);
}

/* Turn until *done(arg) or `ns` pass: for what may rightly never happen. */
static bool run_until_for(tern_loop *loop, bool (*done)(void *), void *arg, uint64_t ns)
{
    uint64_t end = mono_ns() + ns;
    while (!done(arg) && mono_ns() < end)
        tern_loop_run_once(loop, 5 * (int64_t)MS);
    return done(arg);
}

/* Turn until *done(arg) or the liveness deadline. */
static bool run_until(tern_loop *loop, bool (*done)(void *), void *arg)
{
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (!done(arg)) {
        if (mono_ns() > end)
            return false;
        tern_loop_run_once(loop, 5 * (int64_t)MS);
    }
    return true;
}

static bool nothing_live(void *arg)
{
    return loop_stats(arg).live_operations == 0;
}

/* Free a loop that must have nothing left: the common ending. */
static void free_clean(tern_loop *loop)
{
    cr_assert(run_until(loop, nothing_live, loop), "operations left live: %u",
              loop_stats(loop).live_operations);
    cr_assert_eq(loop_stats(loop).undelivered, 0);
    tern_loop_free(loop);
}

static tern_pool_stats pool_stats(void)
{
    tern_pool_stats s;
    tern_pool_stats_get(&s);
    return s;
}

/* The pool's own books: every accepted job has been delivered. */
static void assert_pool_settled(const tern_pool_stats *before, uint64_t accepted)
{
    tern_pool_stats now = pool_stats();
    cr_assert_eq(now.submitted - before->submitted, accepted, "submitted %llu, accepted %llu",
                 (unsigned long long)(now.submitted - before->submitted),
                 (unsigned long long)accepted);
    cr_assert_eq(now.submitted, now.completed + now.cancelled + now.timed_out,
                 "submitted %llu != completed %llu + cancelled %llu + timed out %llu",
                 (unsigned long long)now.submitted, (unsigned long long)now.completed,
                 (unsigned long long)now.cancelled, (unsigned long long)now.timed_out);
    cr_assert_eq(now.queued, 0);
}

/* End the process-wide pool so the next step starts it again (armed). */
static void pool_end(void)
{
    int rc = tern_pool_shutdown(TERN_POOL_DRAIN, 30 * SEC);
    cr_assert_eq(rc, 0, "tern_pool_shutdown: %s", tern_err_name(rc));
    cr_assert(!tern__pool_running());
    tern_pool_stats s = pool_stats();
    cr_assert_eq(s.threads, 0, "bounded workers left after shutdown: %u", s.threads);
    cr_assert_eq(s.long_threads, 0, "long workers left after shutdown: %u", s.long_threads);
}

/*
 * The walk: n = 1, 2, ... until the scenario passes with nothing left to
 * inject. Returns how many checked calls the clean run made.
 */
static uint64_t walk(const char *name, bool (*scenario)(uint64_t n, void *ctx), void *ctx)
{
    uint64_t n = 1;
    while (scenario(n, ctx)) {
        n++;
        cr_assert_lt(n, WALK_MAX, "%s: the walk did not end", name);
    }
    cr_assert_gt(n, 1, "%s: no failure was ever injected (the scenario never reached the seam)",
                 name);
    cr_log_info("%s: %llu checked calls, each made to fail once", name,
                (unsigned long long)(n - 1));
    return n - 1;
}

/* ------------------------------------------------------------------ */
/* Jobs that wait for a gate (or a cancel)                             */
/* ------------------------------------------------------------------ */

static atomic_bool gate;

struct jobrec {
    tern_id id;
    bool accepted;
    atomic_uint ran;  /* work calls */
    atomic_uint done; /* done calls */
    int status;
};

static void *gated_work(tern_job *job, void *arg)
{
    struct jobrec *r = arg;
    atomic_fetch_add(&r->ran, 1);
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (!atomic_load(&gate) && !tern_job_cancelled(job) && mono_ns() < end)
        sleep_us(100);
    return r;
}

static void job_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop;
    struct jobrec *r = arg;
    cr_assert(r->accepted, "done for a refused submission");
    cr_assert_eq(id, r->id);
    cr_assert(status == 0 || status == -ECANCELED, "done status %s", tern_err_name(status));
    /* A job's result is its own record, or NULL if it never ran. */
    cr_assert(result == r || (result == NULL && status == -ECANCELED));
    r->status = status;
    atomic_fetch_add(&r->done, 1);
}

struct jobset {
    struct jobrec *r;
    unsigned n;
};

static bool all_jobs_done(void *arg)
{
    struct jobset *js = arg;
    for (unsigned i = 0; i < js->n; i++)
        if (js->r[i].accepted && atomic_load(&js->r[i].done) == 0)
            return false;
    return true;
}

/* Exactly one done per accepted job, none for a refused one; work at most once. */
static uint64_t assert_jobs_exact(const struct jobset *js)
{
    uint64_t accepted = 0;
    for (unsigned i = 0; i < js->n; i++) {
        const struct jobrec *r = &js->r[i];
        cr_assert_leq(atomic_load(&r->ran), 1, "job %u ran twice", i);
        if (r->accepted) {
            accepted++;
            cr_assert_eq(atomic_load(&r->done), 1, "job %u: %u completions", i,
                         atomic_load(&r->done));
        } else {
            cr_assert_eq(atomic_load(&r->done), 0, "refused job %u completed", i);
            cr_assert_eq(atomic_load(&r->ran), 0, "refused job %u ran", i);
        }
    }
    return accepted;
}

/* One job after the walk step, proving the loop and the pool still work. */
static void one_more_job(tern_loop *loop)
{
    struct jobrec r = {.accepted = true};
    atomic_store(&gate, true);
    int rc = tern_submit(loop, TERN_BOUNDED, gated_work, job_done, &r, &r.id);
    cr_assert_eq(rc, 0, "submit after the fault: %s", tern_err_name(rc));
    struct jobset js = {&r, 1};
    cr_assert(run_until(loop, all_jobs_done, &js));
    cr_assert_eq(r.status, 0);
}

/* ------------------------------------------------------------------ */
/* Loop creation                                                       */
/* ------------------------------------------------------------------ */

static void timer_count(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

static bool flag_set(void *arg)
{
    return atomic_load((atomic_uint *)arg) != 0;
}

/* A timer round trip: the loop works. */
static void one_more_timer(tern_loop *loop)
{
    atomic_uint fired = 0;
    int rc = tern_timer_start(loop, 0, 0, timer_count, &fired, NULL);
    cr_assert_eq(rc, 0, "timer after the fault: %s", tern_err_name(rc));
    cr_assert(run_until(loop, flag_set, &fired));
    cr_assert_eq(atomic_load(&fired), 1);
}

static bool step_loop_new(uint64_t n, void *ctx)
{
    const char *backend = ctx;
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.backend = backend;
    o.flags = TERN_LOOP_RCU;
    int fds = count_open_fds();
    tern_loop *sentinel = (tern_loop *)&fds, *loop = sentinel;

    arm(n);
    bool ok = ARMED("tern_loop_new", tern_loop_new(&loop, &o));
    bool fired = end_armed(0);

    if (!ok) {
        cr_assert_eq(loop, sentinel, "a failed tern_loop_new wrote *loopp");
        cr_assert_eq(count_open_fds(), fds, "a failed tern_loop_new left a descriptor open");
        cr_assert_eq(tern_loop_new(&loop, &o), 0);
    }
    one_more_timer(loop);
    tern_loop_free(loop);
    cr_assert_eq(count_open_fds(), fds);
    return fired;
}

Test(fault, loop_new, .timeout = TEST_TIMEOUT)
{
    for (size_t i = 0; tern__backend_names[i] != NULL; i++) {
        if (!selected(tern__backend_names[i]))
            continue;
        warm_up(tern__backend_names[i]);
        walk(tern__backend_names[i], step_loop_new, (void *)tern__backend_names[i]);
    }
}

/* ------------------------------------------------------------------ */
/* Pool start: explicit, and lazily from a first submission or lookup  */
/* ------------------------------------------------------------------ */

static const tern_pool_config *small_pool(void)
{
    static tern_pool_config cfg;
    tern_pool_config_init(&cfg);
    cfg.threads = 3;
    cfg.queue_capacity = 64;
    cfg.long_threads_max = 8;
    return &cfg;
}

static bool step_pool_start(uint64_t n, void *ctx)
{
    (void)ctx;
    tern_pool_stats before = pool_stats();
    arm(n);
    bool ok = ARMED("tern_pool_start", tern_pool_start(small_pool()));
    bool fired = end_armed(0);

    if (!ok) {
        /* No worker left behind: the pool is not started. */
        cr_assert(!tern__pool_running(), "a failed start left the pool running");
        tern_pool_stats s = pool_stats();
        cr_assert_eq(s.threads, 0, "a failed start left %u workers", s.threads);
        cr_assert_eq(tern_pool_start(small_pool()), 0);
    }
    tern_loop *loop = new_loop(NULL);
    one_more_job(loop);
    free_clean(loop);
    assert_pool_settled(&before, 1);
    pool_end();
    return fired;
}

Test(fault, pool_start, .timeout = TEST_TIMEOUT)
{
    walk("tern_pool_start", step_pool_start, NULL);
}

/* The first submission starts the pool and allocates the loop's ring. */
static bool step_lazy_submit(uint64_t n, void *ctx)
{
    (void)ctx;
    tern_pool_stats before = pool_stats();
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.pool = small_pool();
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, &o), 0);
    atomic_store(&gate, true);
    struct jobrec r[2] = {0};
    struct jobset js = {r, 2};

    arm(n);
    r[0].accepted = ARMED("tern_submit (bounded, starts the pool)",
                          tern_submit(loop, TERN_BOUNDED, gated_work, job_done, &r[0], &r[0].id));
    r[1].accepted = ARMED("tern_submit (long)",
                          tern_submit(loop, TERN_LONG, gated_work, job_done, &r[1], &r[1].id));
    cr_assert(run_until(loop, all_jobs_done, &js));
    bool fired = end_armed(0);

    uint64_t accepted = assert_jobs_exact(&js);
    if (!r[0].accepted && !r[1].accepted)
        cr_assert_eq(loop_stats(loop).live_operations, 0, "a refused job left a trace");
    one_more_job(loop);
    free_clean(loop);
    assert_pool_settled(&before, accepted + 1);
    pool_end();
    return fired;
}

Test(fault, lazy_pool_start, .timeout = TEST_TIMEOUT)
{
    walk("first tern_submit", step_lazy_submit, NULL);
}

/* ------------------------------------------------------------------ */
/* Submit with jobs already in flight                                  */
/* ------------------------------------------------------------------ */

#define PRE_JOBS 3
#define ARMED_JOBS 8

static bool step_submit(uint64_t n, void *ctx)
{
    (void)ctx;
    cr_assert_eq(tern_pool_start(small_pool()), 0);
    tern_pool_stats before = pool_stats();
    tern_loop *loop = new_loop(NULL);
    atomic_store(&gate, false);
    struct jobrec r[PRE_JOBS + ARMED_JOBS] = {0};
    struct jobset js = {r, PRE_JOBS + ARMED_JOBS};

    /* Accepted before the failure: two bounded jobs and one long, waiting. */
    for (unsigned i = 0; i < PRE_JOBS; i++) {
        r[i].accepted = true;
        tern_occupancy occ = i == 2 ? TERN_LONG : TERN_BOUNDED;
        cr_assert_eq(tern_submit(loop, occ, gated_work, job_done, &r[i], &r[i].id), 0);
    }

    arm(n);
    for (unsigned i = PRE_JOBS; i < PRE_JOBS + ARMED_JOBS; i++) {
        /* Long jobs start threads: every other one is long. */
        tern_occupancy occ = i % 2 ? TERN_LONG : TERN_BOUNDED;
        r[i].accepted = ARMED("tern_submit",
                              tern_submit(loop, occ, gated_work, job_done, &r[i], &r[i].id));
    }
    /* A cancel of an accepted job allocates nothing on the loop's thread. */
    int outcome = tern__test_cancel_now(loop, r[0].id);
    cr_assert(outcome == TERN_CANCEL_STOPPED || outcome == TERN_CANCEL_RUNNING, "%d", outcome);
    atomic_store(&gate, true);
    cr_assert(run_until(loop, all_jobs_done, &js), "accepted jobs never completed");
    bool fired = end_armed(0);

    uint64_t accepted = assert_jobs_exact(&js);
    cr_assert_eq(r[0].status, -ECANCELED);
    cr_assert_eq(loop_stats(loop).live_operations, 0);
    one_more_job(loop);
    free_clean(loop);
    assert_pool_settled(&before, accepted + 1);
    pool_end(); /* so long workers are created afresh, under the arm, next time */
    return fired;
}

Test(fault, submit, .timeout = TEST_TIMEOUT)
{
    walk("tern_submit with jobs in flight", step_submit, NULL);
}

/* ------------------------------------------------------------------ */
/* Timers, defers, posts and fd watchers                               */
/* ------------------------------------------------------------------ */

#define TIMERS 72 /* past the heap's and the id map's first growth (64, 40) */
#define DEFERS 6
#define POSTS 6

struct opsrec {
    bool t_ok[TIMERS];
    atomic_uint t_fired[TIMERS];
    tern_id repeat_id;
    bool repeat_ok;
    unsigned repeat_fired;
    bool d_ok[DEFERS], p_ok[POSTS];
    atomic_uint d_ran[DEFERS], p_ran[POSTS];
    int sp[2][2];
    tern_id io_id[2];
    bool io_ok[2];
    unsigned io_seen[2];
};

static struct opsrec *ops_cur;

static void ops_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    atomic_uint *slot = arg;
    size_t i = (size_t)(slot - ops_cur->t_fired);
    cr_assert(i < TIMERS && ops_cur->t_ok[i], "a refused timer fired");
    atomic_fetch_add(slot, 1);
}

static void ops_repeat(tern_loop *loop, tern_id id, void *arg)
{
    struct opsrec *o = arg;
    cr_assert(o->repeat_ok);
    if (++o->repeat_fired == 3)
        cr_assert_eq(tern_timer_stop(loop, id), 0);
}

static void ops_defer(tern_loop *loop, void *arg)
{
    (void)loop;
    atomic_uint *slot = arg;
    size_t i = (size_t)(slot - ops_cur->d_ran);
    cr_assert(i < DEFERS && ops_cur->d_ok[i], "a refused defer ran");
    atomic_fetch_add(slot, 1);
}

static void ops_post(tern_loop *loop, void *arg)
{
    (void)loop;
    atomic_uint *slot = arg;
    size_t i = (size_t)(slot - ops_cur->p_ran);
    cr_assert(i < POSTS && ops_cur->p_ok[i], "a refused post ran");
    atomic_fetch_add(slot, 1);
}

static void ops_io(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    (void)fd;
    struct opsrec *o = arg;
    unsigned i = id == o->io_id[0] ? 0 : 1;
    cr_assert(o->io_ok[i] && id == o->io_id[i]);
    cr_assert(events & TERN_READABLE);
    o->io_seen[i]++;
    cr_assert_eq(tern_io_stop(loop, id), 0);
}

static bool ops_all_done(void *arg)
{
    struct opsrec *o = arg;
    for (unsigned i = 0; i < TIMERS; i++)
        if (o->t_ok[i] && atomic_load(&o->t_fired[i]) == 0)
            return false;
    for (unsigned i = 0; i < DEFERS; i++)
        if (o->d_ok[i] && atomic_load(&o->d_ran[i]) == 0)
            return false;
    for (unsigned i = 0; i < POSTS; i++)
        if (o->p_ok[i] && atomic_load(&o->p_ran[i]) == 0)
            return false;
    for (unsigned i = 0; i < 2; i++)
        if (o->io_ok[i] && o->io_seen[i] == 0)
            return false;
    return !o->repeat_ok || o->repeat_fired >= 3;
}

/* A socketpair whose watched end has a high number, so the loop's fd table grows. */
static void high_socketpair(int sp[2], int at_least)
{
    int raw[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, raw), 0);
    sp[0] = fcntl(raw[0], F_DUPFD_CLOEXEC, at_least);
    cr_assert_geq(sp[0], at_least);
    close(raw[0]);
    sp[1] = raw[1];
}

static bool step_ops(uint64_t n, void *ctx)
{
    const char *backend = ctx;
    struct opsrec *o = calloc(1, sizeof(*o));
    cr_assert_not_null(o);
    ops_cur = o;
    int fds = count_open_fds();
    tern_loop *loop = new_loop(backend);
    for (unsigned i = 0; i < 2; i++) {
        high_socketpair(o->sp[i], 100 + 50 * (int)i);
        cr_assert_eq(write(o->sp[i][1], "x", 1), 1);
    }

    arm(n);
    for (unsigned i = 0; i < TIMERS; i++)
        o->t_ok[i] = ARMED("tern_timer_start", tern_timer_start(loop, (i % 8) * 100000ull, 0,
                                                                  ops_timer, &o->t_fired[i], NULL));
    o->repeat_ok = ARMED("tern_timer_start (repeating)",
                         tern_timer_start(loop, 0, MS, ops_repeat, o, &o->repeat_id));
    for (unsigned i = 0; i < DEFERS; i++)
        o->d_ok[i] = ARMED("tern_defer", tern_defer(loop, ops_defer, &o->d_ran[i]));
    for (unsigned i = 0; i < POSTS; i++)
        o->p_ok[i] = ARMED("tern_post", tern_post(loop, ops_post, &o->p_ran[i]));
    for (unsigned i = 0; i < 2; i++)
        o->io_ok[i] = ARMED("tern_io_start", tern_io_start(loop, o->sp[i][0], TERN_READABLE,
                                                           ops_io, o, &o->io_id[i]));
    /* Nothing in these turns allocates, so nothing there can be told. */
    cr_assert(run_until(loop, ops_all_done, o), "accepted operations never completed");
    bool fired = end_armed(0);

    for (unsigned i = 0; i < TIMERS; i++)
        cr_assert_eq(atomic_load(&o->t_fired[i]), o->t_ok[i] ? 1 : 0, "timer %u", i);
    for (unsigned i = 0; i < DEFERS; i++)
        cr_assert_eq(atomic_load(&o->d_ran[i]), o->d_ok[i] ? 1 : 0, "defer %u", i);
    for (unsigned i = 0; i < POSTS; i++)
        cr_assert_eq(atomic_load(&o->p_ran[i]), o->p_ok[i] ? 1 : 0, "post %u", i);
    for (unsigned i = 0; i < 2; i++)
        cr_assert_eq(o->io_seen[i], o->io_ok[i] ? 1 : 0, "watcher %u", i);
    cr_assert_eq(o->repeat_fired, o->repeat_ok ? 3 : 0);
    cr_assert_eq(loop_stats(loop).live_operations, 0);

    /* A refused watcher left its fd free: it can be watched now. */
    for (unsigned i = 0; i < 2; i++) {
        if (o->io_ok[i])
            continue;
        o->io_ok[i] = true;
        cr_assert_eq(tern_io_start(loop, o->sp[i][0], TERN_READABLE, ops_io, o, &o->io_id[i]), 0);
        cr_assert(run_until(loop, ops_all_done, o));
    }
    one_more_timer(loop);
    free_clean(loop);
    for (unsigned i = 0; i < 2; i++) {
        close(o->sp[i][0]);
        close(o->sp[i][1]);
    }
    cr_assert_eq(count_open_fds(), fds);
    ops_cur = NULL;
    free(o);
    return fired;
}

Test(fault, timers_posts_watchers, .timeout = TEST_TIMEOUT)
{
    for (size_t i = 0; tern__backend_names[i] != NULL; i++) {
        if (!selected(tern__backend_names[i]))
            continue;
        warm_up(tern__backend_names[i]);
        walk(tern__backend_names[i], step_ops, (void *)tern__backend_names[i]);
    }
}

/* ------------------------------------------------------------------ */
/* Posts and cancels from a foreign thread while the loop runs         */
/* ------------------------------------------------------------------ */

/* Past one producer block of inbound nodes (4 KiB, ~126 nodes), so a
 * producer allocates twice. */
#define XPOSTS 300

/* What the poster thread saw around one call (checked on the test thread,
 * where criterion's assertions belong). */
struct xcall {
    bool fired_before, fired_after;
    int rc;
};

struct xrec {
    tern_loop *loop;
    struct xcall post[XPOSTS], cancel[2];
    atomic_uint p_ran[XPOSTS];
    bool p_ok[XPOSTS], cancel_ok[2];
    struct jobrec job[2];
    tern_id keepalive;
    atomic_bool loop_returned;
};

static void x_post(tern_loop *loop, void *arg)
{
    (void)loop;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

static void x_never(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
    cr_assert_fail("the keep-alive timer fired");
}

static void x_finish(tern_loop *loop, void *arg)
{
    struct xrec *x = arg;
    cr_assert_eq(tern_timer_stop(loop, x->keepalive), 0);
}

static void *x_run(void *arg)
{
    struct xrec *x = arg;
    tern_loop_run(x->loop);
    atomic_store(&x->loop_returned, true);
    return NULL;
}

static void x_record(struct xcall *c, int (*call)(struct xrec *, unsigned), struct xrec *x,
                     unsigned i)
{
    c->fired_before = tern__fault_fired();
    c->rc = call(x, i);
    c->fired_after = tern__fault_fired();
}

static int x_do_post(struct xrec *x, unsigned i)
{
    return tern_post(x->loop, x_post, &x->p_ran[i]);
}

static int x_do_cancel(struct xrec *x, unsigned i)
{
    int rc = tern_cancel(x->loop, x->job[i].id);
    return rc == TERN_CANCEL_REQUESTED ? 0 : rc; /* queued: the expected success */
}

/*
 * A fresh producer thread each step: inbound nodes come from per-thread
 * blocks, so only a thread with no block yet allocates on its first post.
 */
static void *x_poster(void *arg)
{
    struct xrec *x = arg;
    for (unsigned i = 0; i < XPOSTS; i++) {
        x_record(&x->post[i], x_do_post, x, i);
        if (i == XPOSTS / 2)
            x_record(&x->cancel[0], x_do_cancel, x, 0);
    }
    x_record(&x->cancel[1], x_do_cancel, x, 1);
    return NULL;
}

static bool x_outcome(const char *what, const struct xcall *c)
{
    if (!c->fired_before && c->fired_after)
        return armed_outcome(what, false, c->rc); /* asserts an injected errno */
    cr_assert_eq(c->rc, 0, "%s failed with %s although no failure was injected", what,
                 tern_err_name(c->rc));
    return true;
}

static bool step_cross_thread(uint64_t n, void *ctx)
{
    (void)ctx;
    struct xrec *x = calloc(1, sizeof(*x));
    cr_assert_not_null(x);
    tern_pool_stats before = pool_stats();
    tern_loop *loop = new_loop(NULL);
    x->loop = loop;
    atomic_store(&gate, false);
    cr_assert_eq(tern_timer_start(loop, 3600 * SEC, 0, x_never, NULL, &x->keepalive), 0);
    for (unsigned i = 0; i < 2; i++) {
        x->job[i].accepted = true;
        cr_assert_eq(tern_submit(loop, TERN_LONG, gated_work, job_done, &x->job[i], &x->job[i].id),
                     0);
    }
    pthread_t t, poster;
    cr_assert_eq(pthread_create(&t, NULL, x_run, x), 0);
    /*
     * Arm only once the loop thread runs the loop: a cancel made while the
     * loop is unclaimed is resolved on the calling thread instead of being
     * handed over, and that is not the path under test here.
     */
    atomic_uint running = 0;
    cr_assert_eq(tern_post(loop, x_post, &running), 0);
    uint64_t until = mono_ns() + LIVENESS_NS;
    while (atomic_load(&running) == 0 && mono_ns() < until)
        sleep_us(100);
    cr_assert_eq(atomic_load(&running), 1, "the loop thread never ran");

    /* While armed, only the poster makes checked calls: the loop thread
     * runs posts and resolves cancels, neither of which allocates. */
    arm(n);
    cr_assert_eq(pthread_create(&poster, NULL, x_poster, x), 0);
    pthread_join(poster, NULL);
    for (unsigned i = 0; i < XPOSTS; i++)
        x->p_ok[i] = x_outcome("tern_post (foreign thread)", &x->post[i]);
    for (unsigned i = 0; i < 2; i++)
        x->cancel_ok[i] = x_outcome("tern_cancel (foreign thread)", &x->cancel[i]);
    bool fired = end_armed(0);

    /* An accepted cancel takes effect while the gate is still shut. */
    until = mono_ns() + LIVENESS_NS;
    bool cancels_seen = false;
    while (!cancels_seen && mono_ns() < until) {
        cancels_seen = true;
        for (unsigned i = 0; i < 2; i++)
            if (x->cancel_ok[i] && atomic_load(&x->job[i].done) == 0)
                cancels_seen = false;
        if (!cancels_seen)
            sleep_us(200);
    }
    cr_assert(cancels_seen, "an accepted foreign cancel never took effect");
    atomic_store(&gate, true);
    cr_assert_eq(tern_post(loop, x_finish, x), 0, "the loop must still take posts");
    until = mono_ns() + LIVENESS_NS;
    while (!atomic_load(&x->loop_returned) && mono_ns() < until)
        sleep_us(200);
    cr_assert(atomic_load(&x->loop_returned),
              "tern_loop_run never returned: something stayed live (a refused post?)");
    pthread_join(t, NULL);

    for (unsigned i = 0; i < XPOSTS; i++)
        cr_assert_eq(atomic_load(&x->p_ran[i]), x->p_ok[i] ? 1 : 0, "post %u", i);
    struct jobset js = {x->job, 2};
    uint64_t accepted = assert_jobs_exact(&js);
    /* A refused cancel changed nothing: that job finished normally. */
    for (unsigned i = 0; i < 2; i++)
        cr_assert_eq(x->job[i].status, x->cancel_ok[i] ? -ECANCELED : 0, "job %u status %s", i,
                     tern_err_name(x->job[i].status));
    one_more_job(loop);
    free_clean(loop);
    assert_pool_settled(&before, accepted + 1);
    pool_end();
    free(x);
    return fired;
}

Test(fault, cross_thread, .timeout = TEST_TIMEOUT)
{
    walk("posts and cancels from a foreign thread", step_cross_thread, NULL);
}

/* ------------------------------------------------------------------ */
/* Name lookups                                                        */
/* ------------------------------------------------------------------ */

#define LOOKUPS 3

struct lookrec {
    tern_id id;
    bool accepted, cancelled;
    atomic_uint calls;
    int status;
};

static void look_cb(tern_loop *loop, tern_id id, int status, struct addrinfo *res, void *arg)
{
    (void)loop;
    struct lookrec *l = arg;
    cr_assert(l->accepted, "a refused lookup called back");
    cr_assert_eq(id, l->id);
    if (status == 0) {
        cr_assert_not_null(res);
        tern_freeaddrinfo(res);
    } else {
        cr_assert_null(res);
        cr_assert(l->cancelled && status == -ECANCELED, "lookup of localhost: %s",
                  tern_err_name(status));
    }
    l->status = status;
    atomic_fetch_add(&l->calls, 1);
}

struct lookset {
    struct lookrec *l;
    unsigned n;
};

static bool lookups_done(void *arg)
{
    struct lookset *s = arg;
    for (unsigned i = 0; i < s->n; i++)
        if (s->l[i].accepted && atomic_load(&s->l[i].calls) == 0)
            return false;
    return true;
}

static bool step_resolve(uint64_t n, void *ctx)
{
    (void)ctx;
    tern_pool_stats before = pool_stats();
    tern_loop *loop = new_loop(NULL);
    struct lookrec l[LOOKUPS] = {0};
    struct lookset ls = {l, LOOKUPS};
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};

    /* The first lookup also starts the pool and allocates the ring. */
    arm(n);
    for (unsigned i = 0; i < LOOKUPS; i++)
        l[i].accepted = ARMED("tern_resolve",
                              tern_resolve(loop, "localhost", i == 1 ? NULL : "80", &hints,
                                           look_cb, &l[i], &l[i].id));
    if (l[2].accepted) {
        l[2].cancelled = true;
        int outcome = tern__test_cancel_now(loop, l[2].id);
        /* An idle worker may have resolved localhost already: FINISHED, done gets 0. */
        cr_assert(outcome == TERN_CANCEL_STOPPED || outcome == TERN_CANCEL_RUNNING ||
                      outcome == TERN_CANCEL_FINISHED,
                  "%d", outcome);
    }
    cr_assert(run_until(loop, lookups_done, &ls), "accepted lookups never called back");
    bool fired = end_armed(0);

    uint64_t accepted = 0;
    for (unsigned i = 0; i < LOOKUPS; i++) {
        cr_assert_eq(atomic_load(&l[i].calls), l[i].accepted ? 1 : 0, "lookup %u", i);
        accepted += l[i].accepted;
    }
    /* Usable afterwards: one more lookup succeeds. */
    struct lookrec again = {.accepted = true};
    struct lookset as = {&again, 1};
    cr_assert_eq(tern_resolve(loop, "localhost", "80", &hints, look_cb, &again, &again.id), 0);
    cr_assert(run_until(loop, lookups_done, &as));
    cr_assert_eq(again.status, 0);
    free_clean(loop);
    assert_pool_settled(&before, accepted + 1);
    pool_end();
    return fired;
}

Test(fault, resolve, .timeout = TEST_TIMEOUT)
{
    walk("tern_resolve", step_resolve, NULL);
}

/* ------------------------------------------------------------------ */
/* Listen and accept, connect by name, echo                            */
/* ------------------------------------------------------------------ */

#define RAW_CLIENTS 2
static const char hello[] = "hello";
static const char ping[] = "ping";

struct tcprec {
    tern_id listener;
    unsigned port;
    unsigned backoffs; /* accept notices: the listener paused */
    unsigned notices;  /* injected failures told to a callback or returned inside one */
    /* the tern client */
    tern_id cli;
    bool cli_accepted;
    int cli_status; /* 1 while pending, 0 echoed, < 0 failed */
    char cli_got[16];
    size_t cli_got_len;
    /* the raw clients: 1 echoed, -1 dropped, 0 pending */
    int raw[RAW_CLIENTS];
    int raw_state[RAW_CLIENTS];
    char raw_got[RAW_CLIENTS][16];
    size_t raw_got_len[RAW_CLIENTS];
};

/* A status some callback saw: fine, an injected failure (counted), or a
 * consequence of one on the other side of the connection. */
static void tcp_status(struct tcprec *t, int status, const char *what)
{
    if (injected_errno(status)) {
        t->notices++;
        return;
    }
    cr_assert(status == 0 || status == -ECANCELED || status == -EPIPE || status == -ECONNRESET,
              "%s: %s", what, tern_err_name(status));
}

static void srv_written(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop;
    (void)id;
    struct tcprec **tp = arg;
    tcp_status(*tp, status, "echo write");
    free(tp);
}

/* The echo: a copy of what was read (the loop does not copy written bytes),
 * behind a pointer back to the scenario's record. */
static void srv_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                     void *arg)
{
    struct tcprec *t = arg;
    if (status < 0 || len == 0) {
        tcp_status(t, status, "echo read");
        tern_stream_close(loop, id);
        return;
    }
    struct tcprec **copy = malloc(sizeof(*copy) + len);
    cr_assert_not_null(copy);
    *copy = t;
    memcpy(copy + 1, data, len);
    tern_buf b = {copy + 1, len};
    int rc = tern_stream_write(loop, id, &b, 1, srv_written, copy);
    if (rc < 0) {
        cr_assert(injected_errno(rc), "echo write: %s", tern_err_name(rc));
        t->notices++;
        free(copy);
        tern_stream_close(loop, id);
    }
}

static void srv_accept(tern_loop *loop, tern_id listener, int status, tern_id stream, void *arg)
{
    struct tcprec *t = arg;
    cr_assert_eq(listener, t->listener);
    if (status < 0) {
        /* The listener paused; the connection waits in the kernel or was dropped. */
        cr_assert(injected_errno(status), "accept: %s", tern_err_name(status));
        cr_assert_eq(stream, 0);
        t->backoffs++;
        t->notices++;
        return;
    }
    int rc = tern_stream_read_start(loop, stream, srv_read, t);
    if (rc < 0) {
        cr_assert(injected_errno(rc), "read_start: %s", tern_err_name(rc));
        t->notices++;
        cr_assert_eq(tern_stream_close(loop, stream), 0);
    }
}

static void cli_written(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop;
    (void)id;
    tcp_status(arg, status, "client write");
}

static void cli_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                     void *arg)
{
    struct tcprec *t = arg;
    if (status < 0 || len == 0) {
        /* Told an injected failure, or the server side was dropped by one. */
        tcp_status(t, status, "client read");
        t->cli_status = status < 0 ? status : -EPIPE;
        tern_stream_close(loop, id);
        return;
    }
    cr_assert_leq(t->cli_got_len + len, sizeof(t->cli_got));
    memcpy(t->cli_got + t->cli_got_len, data, len);
    t->cli_got_len += len;
    if (t->cli_got_len == sizeof(ping)) {
        cr_assert_eq(memcmp(t->cli_got, ping, sizeof(ping)), 0);
        t->cli_status = 0;
        tern_stream_close(loop, id);
    }
}

static void cli_connected(tern_loop *loop, tern_id id, int status, void *arg)
{
    struct tcprec *t = arg;
    cr_assert(t->cli_accepted, "a refused connect called back");
    cr_assert_eq(id, t->cli);
    if (status < 0) {
        cr_assert(injected_errno(status), "connect: %s", tern_err_name(status));
        t->notices++;
        t->cli_status = status;
        return;
    }
    static const tern_buf b = {ping, sizeof(ping)};
    int rc = tern_stream_write(loop, id, &b, 1, cli_written, t);
    if (rc >= 0)
        rc = tern_stream_read_start(loop, id, cli_read, t);
    if (rc < 0) {
        cr_assert(injected_errno(rc), "client write/read_start: %s", tern_err_name(rc));
        t->notices++;
        t->cli_status = rc;
        tern_stream_close(loop, id);
    }
}

static int raw_connect(unsigned port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0, "raw connect: %s",
                 strerror(errno));
    cr_assert_eq(send(fd, hello, sizeof(hello), MSG_NOSIGNAL), (ssize_t)sizeof(hello));
    cr_assert_eq(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0);
    return fd;
}

/* Read what the echo sent back: 1 when all of it came, -1 when dropped. */
static void raw_poll(struct tcprec *t, unsigned i)
{
    if (t->raw_state[i] != 0)
        return;
    char buf[16];
    ssize_t r = recv(t->raw[i], buf, sizeof(buf), 0);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (r <= 0) {
        cr_assert(r == 0 || errno == ECONNRESET, "raw client: %s", strerror(errno));
        t->raw_state[i] = -1;
        return;
    }
    cr_assert_leq(t->raw_got_len[i] + (size_t)r, sizeof(t->raw_got[i]));
    memcpy(t->raw_got[i] + t->raw_got_len[i], buf, (size_t)r);
    t->raw_got_len[i] += (size_t)r;
    if (t->raw_got_len[i] == sizeof(hello)) {
        cr_assert_eq(memcmp(t->raw_got[i], hello, sizeof(hello)), 0);
        t->raw_state[i] = 1;
    }
}

static bool tcp_settled(void *arg)
{
    struct tcprec *t = arg;
    bool settled = !t->cli_accepted || t->cli_status != 1;
    for (unsigned i = 0; i < RAW_CLIENTS; i++) {
        raw_poll(t, i);
        settled = settled && t->raw_state[i] != 0;
    }
    return settled;
}

/* One raw echo round trip through the listener: it still serves. */
static void one_more_echo(tern_loop *loop, struct tcprec *t)
{
    t->raw_state[0] = 0;
    t->raw_got_len[0] = 0;
    t->raw[0] = raw_connect(t->port);
    t->cli_accepted = false;
    for (unsigned i = 1; i < RAW_CLIENTS; i++)
        t->raw_state[i] = 1;
    cr_assert(run_until(loop, tcp_settled, t));
    cr_assert_eq(t->raw_state[0], 1, "the listener no longer echoes after the fault");
    close(t->raw[0]);
}

static bool step_tcp(uint64_t n, void *ctx)
{
    const char *backend = ctx;
    struct tcprec *t = calloc(1, sizeof(*t));
    cr_assert_not_null(t);
    int fds = count_open_fds();
    tern_pool_stats before = pool_stats();
    tern_loop *loop = new_loop(backend);
    int loop_fds = count_open_fds();
    t->cli_status = 1;

    arm(n);
    bool listening = ARMED("tern_tcp_listen", tern_tcp_listen(loop, "127.0.0.1", 0, 16, 0,
                                                               srv_accept, t, &t->listener));
    if (listening) {
        cr_assert_eq(tern_tcp_port(loop, t->listener, &t->port), 0);
        for (unsigned i = 0; i < RAW_CLIENTS; i++)
            t->raw[i] = raw_connect(t->port);
        /* By name: a lookup on the pool (started here, under the arm). */
        t->cli_accepted = ARMED("tern_tcp_connect", tern_tcp_connect(loop, "localhost", t->port,
                                                                     30 * SEC, cli_connected, t,
                                                                     &t->cli));
        cr_assert(run_until(loop, tcp_settled, t), "connections never settled");
    } else {
        cr_assert_eq(loop_stats(loop).live_operations, 0, "a refused listen left an operation");
        cr_assert_eq(count_open_fds(), loop_fds, "a refused listen left a descriptor open");
    }
    bool fired = end_armed(t->notices);

    if (listening) {
        unsigned dropped = 0;
        for (unsigned i = 0; i < RAW_CLIENTS; i++) {
            dropped += t->raw_state[i] < 0;
            close(t->raw[i]);
        }
        unsigned cli_failed = t->cli_accepted && t->cli_status != 0;
        /* One injected failure costs at most one connection, and only one
         * that some callback was told about; none without it. */
        cr_assert_leq(dropped + cli_failed, 1, "one failure lost %u connections",
                      dropped + cli_failed);
        cr_assert_leq(dropped + cli_failed, t->notices,
                      "a connection was lost but no callback was told why");
        cr_assert_leq(t->backoffs, 1);
    } else {
        cr_assert_eq(tern_tcp_listen(loop, "127.0.0.1", 0, 16, 0, srv_accept, t, &t->listener), 0);
        cr_assert_eq(tern_tcp_port(loop, t->listener, &t->port), 0);
    }
    one_more_echo(loop, t);
    cr_assert_eq(tern_stream_close(loop, t->listener), 0);
    free_clean(loop);
    cr_assert_eq(count_open_fds(), fds, "descriptors left open");
    if (tern__pool_running()) {
        tern_pool_stats now = pool_stats();
        cr_assert_eq(now.submitted - before.submitted,
                     now.completed + now.cancelled + now.timed_out - before.completed -
                         before.cancelled - before.timed_out);
        pool_end();
    }
    free(t);
    return fired;
}

Test(fault, listen_accept_connect, .timeout = TEST_TIMEOUT)
{
    for (size_t i = 0; tern__backend_names[i] != NULL; i++) {
        if (!selected(tern__backend_names[i]))
            continue;
        warm_up(tern__backend_names[i]);
        walk(tern__backend_names[i], step_tcp, (void *)tern__backend_names[i]);
    }
}

/* ------------------------------------------------------------------ */
/* Signal watchers                                                     */
/* ------------------------------------------------------------------ */

static void sig_cb(tern_loop *loop, tern_id id, int signo, void *arg)
{
    (void)loop;
    (void)id;
    cr_assert_eq(signo, SIGUSR1);
    atomic_fetch_add((atomic_uint *)arg, 1);
}

static bool sigusr1_blocked(void)
{
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    return sigismember(&cur, SIGUSR1);
}

static void signal_round_trip(tern_loop *loop, tern_id id, atomic_uint *seen)
{
    cr_assert_eq(raise(SIGUSR1), 0);
    cr_assert(run_until(loop, flag_set, seen));
    cr_assert_eq(tern_signal_stop(loop, id), 0);
    cr_assert(!sigusr1_blocked(), "stop left SIGUSR1 blocked");
}

static bool step_signal(uint64_t n, void *ctx)
{
    (void)ctx;
    int fds = count_open_fds();
    tern_loop *loop = new_loop(NULL);
    atomic_uint seen = 0;
    tern_id id = 0;

    arm(n);
    bool ok = ARMED("tern_signal_start", tern_signal_start(loop, SIGUSR1, sig_cb, &seen, &id));
    bool fired = end_armed(0);

    if (!ok) {
        /* Refused: the signal is neither blocked nor claimed. */
        cr_assert(!sigusr1_blocked(), "a refused tern_signal_start left SIGUSR1 blocked");
        cr_assert_eq(loop_stats(loop).live_operations, 0);
        cr_assert_eq(tern_signal_start(loop, SIGUSR1, sig_cb, &seen, &id), 0,
                     "a refused start must not keep the signal claimed");
    }
    signal_round_trip(loop, id, &seen);
    cr_assert_eq(atomic_load(&seen), 1);
    free_clean(loop);
    cr_assert_eq(count_open_fds(), fds);
    return fired;
}

Test(fault, signal_start, .timeout = TEST_TIMEOUT)
{
    walk("tern_signal_start", step_signal, NULL);
}

/* ------------------------------------------------------------------ */
/* Streams adopted from a socketpair                                   */
/* ------------------------------------------------------------------ */

struct pairrec {
    bool write_ok;
    atomic_uint written;
    char got[16];
    size_t got_len;
    atomic_uint closed;
};

static void pair_written(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop;
    (void)id;
    struct pairrec *p = arg;
    cr_assert(p->write_ok, "a refused write completed");
    cr_assert_eq(status, 0, "write: %s", tern_err_name(status));
    atomic_fetch_add(&p->written, 1);
}

static void pair_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                      void *arg)
{
    (void)loop;
    (void)id;
    struct pairrec *p = arg;
    cr_assert_eq(status, 0);
    cr_assert_leq(p->got_len + len, sizeof(p->got));
    memcpy(p->got + p->got_len, data, len);
    p->got_len += len;
}

static void pair_closed(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    atomic_fetch_add(&((struct pairrec *)arg)->closed, 1);
}

static bool pair_done(void *arg)
{
    struct pairrec *p = arg;
    return p->got_len == sizeof(hello) && (!p->write_ok || atomic_load(&p->written) == 1);
}

static bool step_stream(uint64_t n, void *ctx)
{
    const char *backend = ctx;
    int fds = count_open_fds();
    tern_loop *loop = new_loop(backend);
    int sp[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    struct pairrec p = {0};
    tern_id a = 0, b = 0;
    static const tern_buf buf = {hello, sizeof(hello)};

    arm(n);
    bool a_ok = ARMED("tern_stream_open", tern_stream_open(loop, sp[0], &a));
    bool b_ok = ARMED("tern_stream_open", tern_stream_open(loop, sp[1], &b));
    bool reading = false;
    if (a_ok && b_ok) {
        p.write_ok =
            ARMED("tern_stream_write", tern_stream_write(loop, a, &buf, 1, pair_written, &p));
        reading = ARMED("tern_stream_read_start", tern_stream_read_start(loop, b, pair_read, &p));
        if (p.write_ok && reading)
            cr_assert(run_until(loop, pair_done, &p));
    }
    bool fired = end_armed(0);

    /* A refused open left the fd with the caller; adopt it now. */
    if (!a_ok)
        cr_assert_eq(tern_stream_open(loop, sp[0], &a), 0);
    if (!b_ok)
        cr_assert_eq(tern_stream_open(loop, sp[1], &b), 0);
    cr_assert_eq(tern_stream_on_close(loop, a, pair_closed, &p), 0);
    cr_assert_eq(tern_stream_on_close(loop, b, pair_closed, &p), 0);
    if (!p.write_ok) {
        p.write_ok = true;
        cr_assert_geq(tern_stream_write(loop, a, &buf, 1, pair_written, &p), 0);
    }
    if (!reading)
        cr_assert_eq(tern_stream_read_start(loop, b, pair_read, &p), 0);
    cr_assert(run_until(loop, pair_done, &p), "the stream no longer carries data after the fault");
    cr_assert_eq(memcmp(p.got, hello, sizeof(hello)), 0);
    cr_assert_eq(atomic_load(&p.written), 1);
    cr_assert_eq(tern_stream_close(loop, a), 0);
    cr_assert_eq(tern_stream_close(loop, b), 0);
    free_clean(loop);
    cr_assert_eq(atomic_load(&p.closed), 2);
    cr_assert_eq(count_open_fds(), fds, "the streams did not close their descriptors");
    return fired;
}

Test(fault, stream_open_write_read, .timeout = TEST_TIMEOUT)
{
    for (size_t i = 0; tern__backend_names[i] != NULL; i++) {
        if (!selected(tern__backend_names[i]))
            continue;
        warm_up(tern__backend_names[i]);
        walk(tern__backend_names[i], step_stream, (void *)tern__backend_names[i]);
    }
}

/* ------------------------------------------------------------------ */
/* UDP sockets: bind, settings, membership, receive and send            */
/* ------------------------------------------------------------------ */

struct udprec {
    atomic_uint got;      /* datagrams received, all "hello" */
    atomic_uint rx_errors; /* injected receive failures told to the callback */
    atomic_uint sent;     /* send callbacks */
    int send_status;
    atomic_uint closed;
};

static void udp_rx(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                   const struct sockaddr *from, unsigned flags, void *arg)
{
    (void)loop;
    (void)id;
    (void)from;
    (void)flags;
    struct udprec *u = arg;
    if (status < 0) {
        cr_assert_eq(status, -ENOBUFS, "receive failed with %s, which was not injected",
                     tern_err_name(status));
        atomic_fetch_add(&u->rx_errors, 1);
        return;
    }
    cr_assert_eq(len, sizeof(hello));
    cr_assert_eq(memcmp(data, hello, len), 0);
    atomic_fetch_add(&u->got, 1);
}

static void udp_sent(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop;
    (void)id;
    struct udprec *u = arg;
    cr_assert(status == 0 || status == -ENOBUFS, "send failed with %s, which was not injected",
              tern_err_name(status));
    u->send_status = status;
    atomic_fetch_add(&u->sent, 1);
}

static void udp_closed(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    atomic_fetch_add(&((struct udprec *)arg)->closed, 1);
}

static bool udp_settled(void *arg)
{
    struct udprec *u = arg;
    return atomic_load(&u->sent) == 1 && (u->send_status < 0 || atomic_load(&u->got) == 1);
}

static bool udp_got(void *arg)
{
    return atomic_load(&((struct udprec *)arg)->got) >= 1;
}

/*
 * ARMED for a send: a send into an empty queue is tried at once, so a
 * failure injected into that system call belongs to the accepted datagram
 * and reaches its callback (a notice), not the call's return.
 */
static bool send_outcome(const char *what, bool fired_before, int rc)
{
    return rc == 0 ? true : armed_outcome(what, fired_before, rc);
}

static bool step_udp(uint64_t n, void *ctx)
{
    const char *backend = ctx;
    int fds = count_open_fds();
    tern_loop *loop = new_loop(backend);
    struct udprec u = {0};
    tern_id a = 0, b = 0;
    static const tern_buf buf = {hello, sizeof(hello)};
    struct sockaddr_storage to;

    arm(n);
    bool a_ok = ARMED("tern_udp_bind", tern_udp_bind(loop, "127.0.0.1", 0, TERN_UDP_REUSEADDR, &a));
    bool b_ok = ARMED("tern_udp_bind", tern_udp_bind(loop, "127.0.0.1", 0, 0, &b));
    bool recv_ok = false, send_ok = false, ttl_ok = false, join_ok = false, port_ok = false;
    if (a_ok && b_ok) {
        unsigned port = 0;
        port_ok = ARMED("tern_udp_port", tern_udp_port(loop, b, &port));
        if (!port_ok)
            cr_assert_eq(port, 0, "a refused tern_udp_port wrote its answer");
        else
            cr_assert_eq(tern_sockaddr_parse("127.0.0.1", port, &to), 0);
    }
    if (port_ok) {
        ttl_ok = ARMED("tern_udp_set", tern_udp_set(loop, a, TERN_UDP_TTL, 64));
        join_ok = ARMED("tern_udp_membership",
                        tern_udp_membership(loop, b, "239.1.2.3", "127.0.0.1", true));
        recv_ok = ARMED("tern_udp_recv_start", tern_udp_recv_start(loop, b, 0, udp_rx, &u));
        fired_mark = tern__fault_fired();
        send_ok = send_outcome("tern_udp_send", fired_mark, tern_udp_send(loop, a, &buf, 1,
                                                       (struct sockaddr *)&to, udp_sent, &u));
        if (send_ok && recv_ok)
            cr_assert(run_until(loop, udp_settled, &u));
    }
    unsigned notices = atomic_load(&u.rx_errors) + (u.send_status < 0 ? 1 : 0);
    bool fired = end_armed(notices);

    /* What was refused changed nothing: doing it again now succeeds. */
    if (!a_ok)
        cr_assert_eq(tern_udp_bind(loop, "127.0.0.1", 0, TERN_UDP_REUSEADDR, &a), 0);
    if (!b_ok)
        cr_assert_eq(tern_udp_bind(loop, "127.0.0.1", 0, 0, &b), 0);
    unsigned port = 0;
    cr_assert_eq(tern_udp_port(loop, b, &port), 0);
    cr_assert_eq(tern_sockaddr_parse("127.0.0.1", port, &to), 0);
    if (!ttl_ok)
        cr_assert_eq(tern_udp_set(loop, a, TERN_UDP_TTL, 64), 0);
    if (!join_ok)
        cr_assert_eq(tern_udp_membership(loop, b, "239.1.2.3", "127.0.0.1", true), 0);
    cr_assert_eq(tern_udp_membership(loop, b, "239.1.2.3", "127.0.0.1", false), 0,
                 "the group was not joined exactly once");
    if (!recv_ok)
        cr_assert_eq(tern_udp_recv_start(loop, b, 0, udp_rx, &u), 0);
    if (!send_ok || u.send_status < 0) {
        atomic_store(&u.sent, 0);
        cr_assert_eq(tern_udp_send(loop, a, &buf, 1, (struct sockaddr *)&to, udp_sent, &u), 0);
    }
    cr_assert(run_until(loop, udp_got, &u),
              "the socket no longer carries datagrams after the fault");
    cr_assert_eq(atomic_load(&u.got), 1, "a datagram was delivered twice");
    cr_assert_eq(tern_udp_on_close(loop, a, udp_closed, &u), 0);
    cr_assert_eq(tern_udp_on_close(loop, b, udp_closed, &u), 0);
    cr_assert_eq(tern_udp_close(loop, a), 0);
    cr_assert_eq(tern_udp_close(loop, b), 0);
    free_clean(loop);
    cr_assert_eq(atomic_load(&u.closed), 2);
    cr_assert_eq(count_open_fds(), fds, "the sockets did not close their descriptors");
    return fired;
}

Test(fault, udp_bind_set_join_send_receive, .timeout = TEST_TIMEOUT)
{
    for (size_t i = 0; tern__backend_names[i] != NULL; i++) {
        if (!selected(tern__backend_names[i]))
            continue;
        warm_up(tern__backend_names[i]);
        walk(tern__backend_names[i], step_udp, (void *)tern__backend_names[i]);
    }
}

/* ------------------------------------------------------------------ */
/* File requests: every step of the whole-file requests                 */
/* ------------------------------------------------------------------ */

/*
 * An atomic write of 3 steps' worth of bytes, a whole-file read of it and
 * a directory listing, one after the other (so only one thread at a time
 * makes checked calls: the worker running a step while the loop waits).
 * Every allocation, descriptor and system call of every step is made to
 * fail once, with `err` for the system calls (ENOSPC, EINTR). Each
 * failure must reach the callback as that errno, -ENOMEM or -EMFILE;
 * whatever failed must leave no descriptor, no temporary file, and never
 * a partial target file.
 */
#define FS_BYTES 3000
#define FS_STEP 1000

struct fsrec {
    tern_id id;
    bool accepted;
    atomic_uint calls;
    int status;
    tern_fs_result res;
};

static int fs_err;
static char fs_dir[64];

static void fs_cb(tern_loop *loop, tern_id id, int status, tern_fs_result *res, void *arg)
{
    (void)loop;
    struct fsrec *r = arg;
    cr_assert(r->accepted, "a refused file request called back");
    cr_assert_eq(id, r->id);
    cr_assert(status == 0 || status == -ENOMEM || status == -EMFILE || status == -fs_err,
              "file request failed with %s, which was not injected", tern_err_name(status));
    if (status != 0)
        cr_assert(res->data == NULL && res->listing == NULL, "a failed request returned memory");
    r->status = status;
    r->res = *res;
    atomic_fetch_add(&r->calls, 1);
}

static bool fs_called(void *arg)
{
    struct fsrec *r = arg;
    return !r->accepted || atomic_load(&r->calls) == 1;
}

static unsigned fs_temporaries(void)
{
    DIR *d = opendir(fs_dir);
    cr_assert_not_null(d);
    unsigned n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strstr(e->d_name, ".tern-") != NULL)
            n++;
    closedir(d);
    return n;
}

/*
 * ARMED for a file request. Its first step may run on a worker before the
 * submitting call has returned, so a failure injected during an accepted
 * call can belong to that step: then the callback must report it (it is
 * counted as a notice), and end_armed() still insists that someone did.
 */
static bool fs_outcome(const char *what, bool fired_before, int rc)
{
    if (rc == 0)
        return true;
    return armed_outcome(what, fired_before, rc);
}
#define FS_ARMED(what, expr) \
    (fired_mark = tern__fault_fired(), fs_outcome((what), fired_mark, (expr)))

static bool step_fs(uint64_t n, void *ctx)
{
    (void)ctx;
    static unsigned char data[FS_BYTES];
    for (unsigned i = 0; i < FS_BYTES; i++)
        data[i] = (unsigned char)(i * 7 + 3);
    char path[96];
    snprintf(path, sizeof path, "%s/f", fs_dir);
    unlink(path);
    int fds = count_open_fds();
    tern_pool_stats before = pool_stats();
    tern_loop *loop = new_loop(NULL);
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.step_bytes = FS_STEP;
    struct fsrec w = {0}, r = {0}, l = {0};
    unsigned notices = 0;

    arm(n);
    w.accepted = FS_ARMED("tern_fs_write_file",
                       tern_fs_write_file(loop, path, data, FS_BYTES, &o, fs_cb, &w, &w.id));
    cr_assert(run_until(loop, fs_called, &w), "the write never called back");
    notices += w.accepted && w.status != 0;
    bool exists = access(path, F_OK) == 0;
    r.accepted = FS_ARMED("tern_fs_read_file",
                       tern_fs_read_file(loop, exists ? path : "/proc/self/cmdline", &o, fs_cb,
                                         &r, &r.id));
    cr_assert(run_until(loop, fs_called, &r), "the read never called back");
    notices += r.accepted && r.status != 0;
    l.accepted = FS_ARMED("tern_fs_list", tern_fs_list(loop, fs_dir, &o, fs_cb, &l, &l.id));
    cr_assert(run_until(loop, fs_called, &l), "the listing never called back");
    notices += l.accepted && l.status != 0;
    bool fired = end_armed(notices);

    /* The target is whole or absent; it exists after a success. */
    if (w.accepted && w.status == 0)
        cr_assert(exists, "write_file said 0 but the file is not there");
    if (exists) {
        FILE *f = fopen(path, "rb");
        unsigned char back[FS_BYTES + 1];
        size_t got = fread(back, 1, sizeof back, f);
        fclose(f);
        cr_assert(got == FS_BYTES && memcmp(back, data, FS_BYTES) == 0,
                  "a partial file replaced the target (%zu bytes)", got);
    }
    if (exists && r.accepted && r.status == 0) {
        cr_assert_eq(r.res.value, FS_BYTES);
        cr_assert(memcmp(r.res.data, data, FS_BYTES) == 0, "read_file returned other bytes");
    }
    tern_fs_free(r.res.data);
    tern_fs_free(l.res.listing);
    cr_assert_eq(fs_temporaries(), 0, "a temporary file was left behind");
    free_clean(loop);
    cr_assert_eq(count_open_fds(), fds, "a descriptor leaked");
    assert_pool_settled(&before, (uint64_t)w.accepted + r.accepted + l.accepted);
    cr_assert_eq(pool_stats().reserved, 0);
    pool_end();
    return fired;
}

static void fs_walk(int err)
{
    snprintf(fs_dir, sizeof fs_dir, "/tmp/tern_fault_fs.XXXXXX");
    cr_assert_not_null(mkdtemp(fs_dir));
    fs_err = err;
    tern__fault_fs_errno(-err);
    uint64_t calls = walk(tern_err_name(-err), step_fs, NULL);
    /* open, write x3, fsync, close, rename, open/fsync/close of the
     * directory; open, fstat, read, read (end), close; the listing. */
    cr_assert_geq(calls, 16, "the walk cannot have reached every step: %llu calls",
                  (unsigned long long)calls);
    char path[96];
    snprintf(path, sizeof path, "%s/f", fs_dir);
    unlink(path);
    cr_assert_eq(rmdir(fs_dir), 0, "the scratch directory is not empty");
}

Test(fault, fs_steps_enospc, .timeout = TEST_TIMEOUT)
{
    fs_walk(ENOSPC);
}

Test(fault, fs_steps_eintr, .timeout = TEST_TIMEOUT)
{
    fs_walk(EINTR);
}

/* ------------------------------------------------------------------ */
/* Child processes                                                     */
/* ------------------------------------------------------------------ */

struct procrec {
    atomic_uint exits;
    int code;
    atomic_bool eof;
};

static void proc_exit_cb(tern_loop *loop, tern_id id, int status, int code, int sig, void *arg)
{
    (void)loop;
    (void)id;
    (void)sig;
    struct procrec *r = arg;
    cr_assert_eq(status, 0);
    r->code = code;
    atomic_fetch_add(&r->exits, 1);
}

static void proc_read_cb(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                         void *arg)
{
    (void)loop;
    (void)id;
    (void)data;
    if (status < 0 || len == 0)
        atomic_store(&((struct procrec *)arg)->eof, true);
}

static bool proc_done(void *arg)
{
    struct procrec *r = arg;
    return atomic_load(&r->exits) == 1 && atomic_load(&r->eof);
}

static bool step_spawn(uint64_t n, void *ctx)
{
    int fds = count_open_fds();
    tern_loop *loop = new_loop(ctx);
    struct procrec r = {0};
    tern_stdio io[3] = {{.kind = TERN_STDIO_IGNORE}, {.kind = TERN_STDIO_STREAM},
                        {.kind = TERN_STDIO_INHERIT}};
    tern_process_options o;
    tern_process_options_init(&o);
    o.file = "/bin/sh";
    char *argv[] = {"sh", "-c", "echo out; exit 5", NULL};
    o.argv = argv;
    o.stdio = io;
    o.stdio_count = 3;

    arm(n);
    bool ok = ARMED("tern_process_spawn", tern_process_spawn(loop, &o, proc_exit_cb, &r, NULL));
    bool fired = end_armed(0);

    if (!ok) {
        /* A stream opened for it and closed again ends in the next step 2. */
        cr_assert(run_until(loop, nothing_live, loop), "a refused spawn left an operation");
        cr_assert_eq(tern_process_spawn(loop, &o, proc_exit_cb, &r, NULL), 0);
    }
    cr_assert_eq(tern_stream_read_start(loop, io[1].stream, proc_read_cb, &r), 0);
    cr_assert(run_until(loop, proc_done, &r), "the child's exit or output never came");
    cr_assert_eq(r.code, 5);
    cr_assert_eq(tern_stream_close(loop, io[1].stream), 0);
    free_clean(loop);
    int st;
    cr_assert_eq(waitpid(-1, &st, WNOHANG), -1, "a child was left behind");
    cr_assert_eq(count_open_fds(), fds);
    return fired;
}

Test(fault, process_spawn, .timeout = TEST_TIMEOUT)
{
    for (size_t i = 0; tern__backend_names[i] != NULL; i++) {
        if (!selected(tern__backend_names[i]))
            continue;
        warm_up(tern__backend_names[i]);
        walk(tern__backend_names[i], step_spawn, (void *)tern__backend_names[i]);
    }
}

/* ------------------------------------------------------------------ */
/* File watches and external waits                                     */
/* ------------------------------------------------------------------ */

/*
 * Armed: a watch on a directory (inotify, EVFILT_VNODE or stat polling,
 * as the backend and build choose), a wait on a pipe's read end and a
 * blocking wait on a long-class thread the pool starts under the arm.
 * Every allocation, descriptor and thread on those paths fails once and
 * is returned by its call, which leaves nothing behind (no operation, no
 * credit, the pipe free to be waited on again); what was accepted is
 * delivered once; then an entry created in the directory is reported.
 */
struct watchrec {
    atomic_uint news, fd_done, call_done;
    int fd_status, call_status;
};

static void ww_news(tern_loop *loop, tern_id id, int status, unsigned events, const char *name,
                    void *arg)
{
    (void)loop, (void)id, (void)events, (void)name;
    cr_assert_eq(status, 0, "watch: %s", tern_err_name(status));
    atomic_fetch_add(&((struct watchrec *)arg)->news, 1);
}

static void ww_fd_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)result;
    struct watchrec *r = arg;
    r->fd_status = status;
    atomic_fetch_add(&r->fd_done, 1);
}

static void *ww_call(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

static void ww_call_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id;
    struct watchrec *r = arg;
    cr_assert_eq(result, arg);
    r->call_status = status;
    atomic_fetch_add(&r->call_done, 1);
}

static bool ww_waits_done(void *arg)
{
    struct watchrec *r = arg;
    return atomic_load(&r->fd_done) == 1 && atomic_load(&r->call_done) == 1;
}

static bool ww_news_came(void *arg)
{
    return atomic_load(&((struct watchrec *)arg)->news) > 0;
}

static bool step_watch_wait(uint64_t n, void *ctx)
{
    int fds = count_open_fds();
    tern_loop *loop = new_loop(ctx);
    char dir[64], entry[96];
    snprintf(dir, sizeof dir, "/tmp/tern-fault-watch-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(entry, sizeof entry, "%s/e", dir);
    int p[2];
    cr_assert_eq(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
    struct watchrec r = {0};
    tern_id watch = 0;

    arm(n);
    bool w_ok =
        ARMED("tern_watch_start", tern_watch_start(loop, dir, 10 * MS, ww_news, &r, &watch));
    bool f_ok = ARMED("tern_wait_fd", tern_wait_fd(loop, p[0], ww_fd_done, &r, NULL, NULL));
    bool c_ok =
        ARMED("tern_wait_call", tern_wait_call(loop, ww_call, ww_call_done, &r, NULL, NULL));
    bool fired = end_armed(0);

    /* A refusal left nothing: no operation, no credit. */
    tern_loop_stats st = loop_stats(loop);
    cr_assert_eq(st.live_operations, (unsigned)w_ok + (unsigned)f_ok + (unsigned)c_ok,
                 "a refused watch or wait left an operation");
    cr_assert_eq(st.undelivered, (unsigned)f_ok + (unsigned)c_ok, "a refused wait kept a credit");
    if (!w_ok)
        cr_assert_eq(tern_watch_start(loop, dir, 10 * MS, ww_news, &r, &watch), 0);
    if (!f_ok)
        cr_assert_eq(tern_wait_fd(loop, p[0], ww_fd_done, &r, NULL, NULL), 0,
                     "a refused wait left its descriptor watched");
    if (!c_ok)
        cr_assert_eq(tern_wait_call(loop, ww_call, ww_call_done, &r, NULL, NULL), 0);
    cr_assert_eq(write(p[1], "x", 1), 1);
    cr_assert(run_until(loop, ww_waits_done, &r),
              "a wait was never delivered (%s, step %llu: fd wait %u, call %u)", (const char *)ctx,
              (unsigned long long)n, atomic_load(&r.fd_done), atomic_load(&r.call_done));
    cr_assert_eq(r.fd_status, 0);
    cr_assert_eq(r.call_status, 0);
    sleep_us(25000); /* stat polling: past the file system's time-stamp tick */
    int fd = open(entry, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert(run_until(loop, ww_news_came, &r), "the watch reported nothing");
    cr_assert_eq(tern_watch_stop(loop, watch), 0);
    free_clean(loop);
    cr_assert_eq(atomic_load(&r.fd_done), 1);
    cr_assert_eq(atomic_load(&r.call_done), 1);
    pool_end(); /* the next step starts the long class again, armed */
    close(p[0]);
    close(p[1]);
    cr_assert_eq(unlink(entry), 0);
    cr_assert_eq(rmdir(dir), 0);
    cr_assert_eq(count_open_fds(), fds, "descriptors left open");
    return fired;
}

Test(fault, watch_and_waits, .timeout = TEST_TIMEOUT)
{
    for (size_t i = 0; tern__backend_names[i] != NULL; i++) {
        if (!selected(tern__backend_names[i]))
            continue;
        warm_up(tern__backend_names[i]);
        walk(tern__backend_names[i], step_watch_wait, (void *)tern__backend_names[i]);
    }
}

/* ------------------------------------------------------------------ */
/* Unix-domain sockets, descriptor passing and hooks                   */
/* ------------------------------------------------------------------ */

/*
 * Armed: a Unix listener, a connect to it, a check hook, and over an
 * AF_UNIX socketpair a write that passes a pipe's write end plus the read
 * that receives it. Every allocation and descriptor on those paths fails
 * once: the call returns it, or the accept callback (back-off) or the read
 * callback (-ENOMEM: the passed descriptor could not be kept) is told.
 * Whatever happened, the passed descriptor is never leaked: once every
 * stream is closed, the pipe's read end sees end of file.
 */
struct unixrec {
    atomic_uint accepted, accept_notices, connected, written, closed, hooks;
    tern_id server;
    int connect_status;
    bool write_ok, got_byte;
    unsigned read_notices;
    int taken;
};

static void u_accept(tern_loop *loop, tern_id l, int status, tern_id s, void *arg)
{
    (void)loop, (void)l;
    struct unixrec *u = arg;
    if (status < 0) {
        cr_assert(injected_errno(status), "accept: %s", tern_err_name(status));
        atomic_fetch_add(&u->accept_notices, 1);
        return;
    }
    u->server = s;
    atomic_fetch_add(&u->accepted, 1);
}

static void u_connected(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id;
    struct unixrec *u = arg;
    u->connect_status = status;
    atomic_fetch_add(&u->connected, 1);
}

static void u_hook(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id;
    atomic_fetch_add(&((struct unixrec *)arg)->hooks, 1);
}

static void u_written(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id;
    struct unixrec *u = arg;
    cr_assert(u->write_ok, "a refused write completed");
    cr_assert_eq(status, 0, "write_fds: %s", tern_err_name(status));
    atomic_fetch_add(&u->written, 1);
}

static void u_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                   void *arg)
{
    (void)data;
    struct unixrec *u = arg;
    if (status < 0) {
        cr_assert_eq(status, -ENOMEM, "read: %s", tern_err_name(status));
        u->read_notices++;
        return;
    }
    if (len > 0) {
        u->got_byte = true;
        int fd = tern_unix_take_fd(loop, id);
        if (fd >= 0)
            u->taken = fd;
    }
}

static bool u_settled(void *arg)
{
    struct unixrec *u = arg;
    return atomic_load(&u->connected) == 1 &&
           (atomic_load(&u->accepted) == 1 || atomic_load(&u->accept_notices) > 0) &&
           (!u->write_ok || atomic_load(&u->written) == 1) &&
           (u->got_byte || u->read_notices > 0);
}

static bool u_accepted(void *arg)
{
    return atomic_load(&((struct unixrec *)arg)->accepted) == 1;
}

static bool step_unix(uint64_t n, void *ctx)
{
    const char *backend = ctx;
    int fds = count_open_fds();
    tern_loop *loop = new_loop(backend);
    char path[64];
    snprintf(path, sizeof path, "/tmp/tern-fault-unix-%d", (int)getpid());
    unlink(path);
    int sp[2], p[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    cr_assert_eq(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0); /* a leak fails the read, not hangs it */
    struct unixrec u = {.taken = -1};
    tern_id listener = 0, client = 0, hook = 0, a = 0, b = 0;
    static const tern_buf one = {"!", 1};

    arm(n);
    bool l_ok =
        ARMED("tern_unix_listen", tern_unix_listen(loop, path, 16, u_accept, &u, &listener));
    bool h_ok = ARMED("tern_hook_start", tern_hook_start(loop, TERN_HOOK_CHECK, u_hook, &u, &hook));
    bool c_ok = l_ok && ARMED("tern_unix_connect",
                              tern_unix_connect(loop, path, u_connected, &u, &client));
    bool a_ok = ARMED("tern_stream_open", tern_stream_open(loop, sp[0], &a));
    bool b_ok = ARMED("tern_stream_open", tern_stream_open(loop, sp[1], &b));
    bool reading = false;
    if (a_ok && b_ok) {
        u.write_ok = ARMED("tern_unix_write_fds",
                           tern_unix_write_fds(loop, a, &one, 1, &p[1], 1, u_written, &u));
        reading = ARMED("tern_stream_read_start", tern_stream_read_start(loop, b, u_read, &u));
    }
    if (c_ok && a_ok && b_ok && u.write_ok && reading)
        cr_assert(run_until(loop, u_settled, &u), "the armed run did not settle");
    bool fired = end_armed(atomic_load(&u.accept_notices) + u.read_notices);

    /* Disarmed: finish what was refused, and check the loop still works. */
    if (!l_ok)
        cr_assert_eq(tern_unix_listen(loop, path, 16, u_accept, &u, &listener), 0);
    if (!h_ok)
        cr_assert_eq(tern_hook_start(loop, TERN_HOOK_CHECK, u_hook, &u, &hook), 0);
    if (!c_ok)
        cr_assert_eq(tern_unix_connect(loop, path, u_connected, &u, &client), 0);
    if (!a_ok)
        cr_assert_eq(tern_stream_open(loop, sp[0], &a), 0);
    if (!b_ok)
        cr_assert_eq(tern_stream_open(loop, sp[1], &b), 0);
    if (!reading)
        cr_assert_eq(tern_stream_read_start(loop, b, u_read, &u), 0);
    if (!u.write_ok) {
        u.write_ok = true;
        cr_assert_eq(tern_unix_write_fds(loop, a, &one, 1, &p[1], 1, u_written, &u), 0);
    }
    cr_assert(run_until(loop, u_settled, &u), "the loop no longer works after the fault");
    cr_assert_eq(u.connect_status, 0, "connect: %s", tern_err_name(u.connect_status));
    /* An accept that failed before accept() leaves the connection queued:
     * it comes after the back-off. One that failed after it lost it. */
    if (atomic_load(&u.accepted) == 0)
        (void)run_until_for(loop, u_accepted, &u, 500 * MS);
    tern_loop_run_once(loop, 0);
    cr_assert_geq(atomic_load(&u.hooks), 1);
    close(p[1]);
    if (u.taken >= 0)
        close(u.taken);
    cr_assert_eq(tern_hook_stop(loop, hook), 0);
    cr_assert_eq(tern_stream_close(loop, listener), 0);
    cr_assert_eq(tern_stream_close(loop, client), 0);
    if (atomic_load(&u.accepted) == 1)
        cr_assert_eq(tern_stream_close(loop, u.server), 0);
    cr_assert_eq(tern_stream_close(loop, a), 0);
    cr_assert_eq(tern_stream_close(loop, b), 0);
    free_clean(loop);
    /* No copy of the pipe's write end is left anywhere: end of file. */
    char ch;
    cr_assert_eq(read(p[0], &ch, 1), 0, "a passed descriptor was leaked");
    close(p[0]);
    unlink(path);
    cr_assert_eq(count_open_fds(), fds, "descriptors left open");
    return fired;
}

Test(fault, unix_pass_fds_hooks, .timeout = TEST_TIMEOUT)
{
    for (size_t i = 0; tern__backend_names[i] != NULL; i++) {
        if (!selected(tern__backend_names[i]))
            continue;
        warm_up(tern__backend_names[i]);
        walk(tern__backend_names[i], step_unix, (void *)tern__backend_names[i]);
    }
}

/* ------------------------------------------------------------------ */
/* Names both ways: a listener on a name, a reverse lookup             */
/* ------------------------------------------------------------------ */

/* localhost as one address, so a failure on it cannot be hidden by a
 * second address that binds instead. */
static int one_localhost(const char *host, const char *service, const struct addrinfo *hints,
                         struct addrinfo **res)
{
    (void)host, (void)hints;
    struct addrinfo h = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
                         .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE};
    return getaddrinfo("127.0.0.1", service, &h, res);
}

struct namerec {
    tern_id listener, reverse;
    bool listen_ok, reverse_ok;
    atomic_uint ready_calls, name_calls, accepts;
    int ready_status, name_status;
    unsigned notices;
};

static void nm_ready(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop;
    struct namerec *r = arg;
    cr_assert(r->listen_ok, "a refused listener called back");
    cr_assert_eq(id, r->listener);
    if (status < 0) {
        cr_assert(injected_errno(status), "ready: %s", tern_err_name(status));
        r->notices++;
    }
    r->ready_status = status;
    atomic_fetch_add(&r->ready_calls, 1);
}

static void nm_accept(tern_loop *loop, tern_id listener, int status, tern_id stream, void *arg)
{
    struct namerec *r = arg;
    cr_assert_eq(listener, r->listener);
    if (status < 0) {
        cr_assert(injected_errno(status), "accept: %s", tern_err_name(status));
        r->notices++;
        return;
    }
    cr_assert_eq(tern_stream_close(loop, stream), 0);
    atomic_fetch_add(&r->accepts, 1);
}

static void nm_name(tern_loop *loop, tern_id id, int status, const char *host, const char *serv,
                    void *arg)
{
    (void)loop;
    struct namerec *r = arg;
    cr_assert(r->reverse_ok, "a refused reverse lookup called back");
    cr_assert_eq(id, r->reverse);
    if (status == 0) {
        cr_assert_str_eq(host, "127.0.0.1");
        cr_assert_str_eq(serv, "80");
    } else {
        cr_assert(injected_errno(status), "reverse: %s", tern_err_name(status));
        r->notices++;
    }
    r->name_status = status;
    atomic_fetch_add(&r->name_calls, 1);
}

static bool names_settled(void *arg)
{
    struct namerec *r = arg;
    return (!r->listen_ok || atomic_load(&r->ready_calls) == 1) &&
           (!r->reverse_ok || atomic_load(&r->name_calls) == 1);
}

static bool names_accepted(void *arg)
{
    return atomic_load(&((struct namerec *)arg)->accepts) == 1;
}

static int nm_listen(tern_loop *loop, struct namerec *r)
{
    return tern_tcp_listen_name(loop, "localhost", 0, 16, 0, 30 * SEC, nm_ready, nm_accept, r,
                                &r->listener);
}

static int nm_reverse(tern_loop *loop, struct namerec *r)
{
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons(80),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    return tern_resolve_addr(loop, (struct sockaddr *)&in, NI_NUMERICHOST | NI_NUMERICSERV,
                             nm_name, r, NULL, &r->reverse);
}

static bool step_names(uint64_t n, void *ctx)
{
    const char *backend = ctx;
    int fds = count_open_fds();
    tern_pool_stats before = pool_stats();
    tern_loop *loop = new_loop(backend);
    struct namerec r = {0};

    arm(n);
    r.listen_ok = ARMED("tern_tcp_listen_name", nm_listen(loop, &r));
    r.reverse_ok = ARMED("tern_resolve_addr", nm_reverse(loop, &r));
    cr_assert(run_until(loop, names_settled, &r), "accepted lookups never called back");
    bool fired = end_armed(r.notices);
    cr_assert_eq(atomic_load(&r.ready_calls), r.listen_ok ? 1 : 0);
    cr_assert_eq(atomic_load(&r.name_calls), r.reverse_ok ? 1 : 0);

    /* Disarmed: a failed or refused call succeeds now, and the listener serves. */
    if (!r.listen_ok || r.ready_status != 0) {
        r.listen_ok = true;
        atomic_store(&r.ready_calls, 0);
        cr_assert_eq(nm_listen(loop, &r), 0);
    }
    if (!r.reverse_ok || r.name_status != 0) {
        r.reverse_ok = true;
        atomic_store(&r.name_calls, 0);
        cr_assert_eq(nm_reverse(loop, &r), 0);
    }
    cr_assert(run_until(loop, names_settled, &r), "the loop no longer works after the fault");
    cr_assert_eq(r.ready_status, 0, "ready: %s", tern_err_name(r.ready_status));
    cr_assert_eq(r.name_status, 0, "reverse: %s", tern_err_name(r.name_status));
    unsigned port = 0;
    cr_assert_eq(tern_tcp_port(loop, r.listener, &port), 0);
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(connect(c, (struct sockaddr *)&to, sizeof to), 0, "%s", strerror(errno));
    cr_assert(run_until(loop, names_accepted, &r), "the listener does not accept");
    close(c);
    cr_assert_eq(tern_stream_close(loop, r.listener), 0);
    free_clean(loop);
    cr_assert_eq(count_open_fds(), fds, "descriptors left open");
    tern_pool_stats now = pool_stats();
    cr_assert_eq(now.submitted - before.submitted,
                 now.completed + now.cancelled + now.timed_out - before.completed -
                     before.cancelled - before.timed_out);
    pool_end();
    return fired;
}

Test(fault, listen_name_resolve_addr, .timeout = TEST_TIMEOUT)
{
    tern__set_getaddrinfo(one_localhost);
    for (size_t i = 0; tern__backend_names[i] != NULL; i++) {
        if (!selected(tern__backend_names[i]))
            continue;
        warm_up(tern__backend_names[i]);
        walk(tern__backend_names[i], step_names, (void *)tern__backend_names[i]);
    }
    tern__set_getaddrinfo(NULL);
}

/* ------------------------------------------------------------------ */
/* Pipes and TTYs as streams                                           */
/* ------------------------------------------------------------------ */

/*
 * Armed: both ends of a pipe opened as streams, a write and the read that
 * receives it, and the write end of a second pipe nobody reads, opened as
 * a stream with writes queued beyond the pipe's capacity and then closed.
 * Every allocation and descriptor on those paths fails once: the call
 * returns it or the callback is told. Whatever happened, each accepted
 * write completes exactly once (0, or -ECANCELED for the queued ones the
 * close ended), each stream's close callback comes once, TTY calls on a
 * pipe get -ENOTTY, and no descriptor stays open.
 */
#define PIPE_BIG (256 * 1024) /* beyond a pipe's buffer: part of it stays queued */

struct piperec {
    bool write_ok;
    atomic_uint written; /* the data write's callbacks */
    int write_status;
    char got[16];
    size_t got_len;
    unsigned read_notices;
    atomic_uint queued_cbs; /* callbacks of the writes queued on the unread pipe */
    unsigned queued_ok;     /* how many of those writes were accepted */
    atomic_uint closed;
};

static void p_written(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id;
    struct piperec *p = arg;
    cr_assert(p->write_ok, "a refused write completed");
    p->write_status = status;
    atomic_fetch_add(&p->written, 1);
}

static void p_queued_done(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id;
    struct piperec *p = arg;
    cr_assert_eq(status, -ECANCELED, "a write queued on an unread pipe ended with %s",
                 tern_err_name(status));
    atomic_fetch_add(&p->queued_cbs, 1);
}

static void p_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                   void *arg)
{
    (void)loop, (void)id;
    struct piperec *p = arg;
    if (status < 0) {
        cr_assert(injected_errno(status), "read: %s", tern_err_name(status));
        p->read_notices++;
        return;
    }
    cr_assert_leq(p->got_len + len, sizeof(p->got));
    if (len > 0)
        memcpy(p->got + p->got_len, data, len);
    p->got_len += len;
}

static void p_closed(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id;
    atomic_fetch_add(&((struct piperec *)arg)->closed, 1);
}

static bool p_data_done(void *arg)
{
    struct piperec *p = arg;
    return p->got_len == sizeof(hello) && (!p->write_ok || atomic_load(&p->written) == 1);
}

/* tern_stream_write's 1 (past the high-water mark) is a success too. */
static int write_queued(tern_loop *loop, tern_id id, const tern_buf *b, tern_stream_cb cb,
                        void *arg)
{
    int rc = tern_stream_write(loop, id, b, 1, cb, arg);
    return rc > 0 ? 0 : rc;
}

static void pipe_cloexec(int p[2])
{
    cr_assert_eq(pipe(p), 0);
    cr_assert_eq(fcntl(p[0], F_SETFD, FD_CLOEXEC), 0);
    cr_assert_eq(fcntl(p[1], F_SETFD, FD_CLOEXEC), 0);
}

static bool step_pipe(uint64_t n, void *ctx)
{
    const char *backend = ctx;
    int fds = count_open_fds();
    tern_loop *loop = new_loop(backend);
    int dp[2], qp[2]; /* the data pipe; the pipe nobody reads */
    pipe_cloexec(dp);
    pipe_cloexec(qp);
    static char big[PIPE_BIG];
    static const tern_buf buf = {hello, sizeof(hello)};
    const tern_buf bigbuf = {big, sizeof(big)};
    struct piperec p = {0};
    tern_id r = 0, w = 0, q = 0;

    arm(n);
    bool r_ok = ARMED("tern_stream_open(pipe read end)", tern_stream_open(loop, dp[0], &r));
    bool w_ok = ARMED("tern_stream_open(pipe write end)", tern_stream_open(loop, dp[1], &w));
    bool q_ok = ARMED("tern_stream_open(unread pipe)", tern_stream_open(loop, qp[1], &q));
    bool reading = false;
    if (r_ok && w_ok) {
        p.write_ok = ARMED("tern_stream_write(pipe)", write_queued(loop, w, &buf, p_written, &p));
        reading =
            ARMED("tern_stream_read_start(pipe)", tern_stream_read_start(loop, r, p_read, &p));
        if (p.write_ok && reading)
            cr_assert(run_until(loop, p_data_done, &p));
    }
    if (q_ok) {
        /* The small write only behind the big one, so it too stays queued. */
        if (ARMED("tern_stream_write(queued)", write_queued(loop, q, &bigbuf, p_queued_done, &p))) {
            p.queued_ok++;
            p.queued_ok += ARMED("tern_stream_write(queued behind)",
                                 write_queued(loop, q, &buf, p_queued_done, &p));
            tern_loop_run_once(loop, 0); /* the kernel takes what fits; the rest stays queued */
            size_t left = 0;
            cr_assert_eq(tern_stream_write_queue_size(loop, q, &left), 0);
            cr_assert_gt(left, 0, "nothing stayed queued on a pipe nobody reads");
        }
        cr_assert_eq(tern_stream_on_close(loop, q, p_closed, &p), 0);
        cr_assert_eq(tern_stream_close(loop, q), 0); /* with writes queued */
    }
    bool fired = end_armed(p.read_notices);

    /* A refused open left the fd with the caller; adopt it now. */
    if (!r_ok)
        cr_assert_eq(tern_stream_open(loop, dp[0], &r), 0);
    if (!w_ok)
        cr_assert_eq(tern_stream_open(loop, dp[1], &w), 0);
    if (!q_ok) {
        close(qp[1]);
        atomic_fetch_add(&p.closed, 1); /* as if the stream had closed it */
    }
    cr_assert_eq(tern_stream_on_close(loop, r, p_closed, &p), 0);
    cr_assert_eq(tern_stream_on_close(loop, w, p_closed, &p), 0);
    unsigned cols = 0, rows = 0;
    cr_assert_eq(tern_tty_set_mode(loop, w, TERN_TTY_RAW), -ENOTTY);
    cr_assert_eq(tern_tty_winsize(loop, r, &cols, &rows), -ENOTTY);
    if (!p.write_ok) {
        p.write_ok = true;
        cr_assert_eq(write_queued(loop, w, &buf, p_written, &p), 0);
    }
    if (!reading)
        cr_assert_eq(tern_stream_read_start(loop, r, p_read, &p), 0);
    cr_assert(run_until(loop, p_data_done, &p), "the pipe no longer carries data after the fault");
    cr_assert_eq(memcmp(p.got, hello, sizeof(hello)), 0);
    cr_assert_eq(atomic_load(&p.written), 1);
    cr_assert_eq(p.write_status, 0, "write: %s", tern_err_name(p.write_status));
    cr_assert_eq(tern_stream_close(loop, r), 0);
    cr_assert_eq(tern_stream_close(loop, w), 0);
    free_clean(loop);
    cr_assert_eq(atomic_load(&p.queued_cbs), p.queued_ok,
                 "%u writes queued when the stream closed, %u callbacks", p.queued_ok,
                 atomic_load(&p.queued_cbs));
    cr_assert_eq(atomic_load(&p.closed), 3);
    close(qp[0]);
    cr_assert_eq(count_open_fds(), fds, "the streams did not close their descriptors");
    return fired;
}

Test(fault, pipe_open_write_read_close_queued, .timeout = TEST_TIMEOUT)
{
    for (size_t i = 0; tern__backend_names[i] != NULL; i++) {
        if (!selected(tern__backend_names[i]))
            continue;
        warm_up(tern__backend_names[i]);
        walk(tern__backend_names[i], step_pipe, (void *)tern__backend_names[i]);
    }
}

/*
 * Armed: a pseudo-terminal's terminal end opened as a stream, made raw,
 * its window size read, and a write to it that the master end (a stream
 * too) reads back unchanged (raw: no output processing). Every allocation
 * and descriptor on those paths fails once; a refused raw mode leaves the
 * terminal as it was, and closing the stream always puts back the mode it
 * had first.
 */
#include <sys/ioctl.h>
#include <termios.h>

static bool tty_same(const struct termios *a, const struct termios *b)
{
    return a->c_iflag == b->c_iflag && a->c_oflag == b->c_oflag && a->c_cflag == b->c_cflag &&
           a->c_lflag == b->c_lflag;
}

static bool step_tty(uint64_t n, void *ctx)
{
    const char *backend = ctx;
    int fds = count_open_fds();
    tern_loop *loop = new_loop(backend);
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    cr_assert_geq(m, 0, "posix_openpt: %s", strerror(errno));
    cr_assert_eq(fcntl(m, F_SETFD, FD_CLOEXEC), 0);
    cr_assert_eq(grantpt(m), 0);
    cr_assert_eq(unlockpt(m), 0);
    int t = open(ptsname(m), O_RDWR | O_NOCTTY | O_CLOEXEC);
    cr_assert_geq(t, 0, "open(%s): %s", ptsname(m), strerror(errno));
    struct winsize ws = {.ws_row = 40, .ws_col = 100};
    cr_assert_eq(ioctl(m, TIOCSWINSZ, &ws), 0);
    struct termios first, now;
    cr_assert_eq(tcgetattr(t, &first), 0);
    int keep = dup(t); /* to see the terminal's mode once its stream has closed */
    cr_assert_geq(keep, 0);
    struct piperec p = {0};
    static const tern_buf buf = {hello, sizeof(hello)};
    tern_id ts = 0, ms = 0;
    unsigned cols = 0, rows = 0;

    arm(n);
    bool t_ok = ARMED("tern_stream_open(tty)", tern_stream_open(loop, t, &ts));
    bool m_ok = ARMED("tern_stream_open(pty master)", tern_stream_open(loop, m, &ms));
    bool raw = false, sized = false, reading = false;
    if (t_ok) {
        raw = ARMED("tern_tty_set_mode(raw)", tern_tty_set_mode(loop, ts, TERN_TTY_RAW));
        if (!raw) {
            cr_assert_eq(tcgetattr(t, &now), 0);
            cr_assert(tty_same(&first, &now), "a refused raw mode changed the terminal");
        }
        sized = ARMED("tern_tty_winsize", tern_tty_winsize(loop, ts, &cols, &rows));
    }
    if (t_ok && m_ok && raw) {
        p.write_ok = ARMED("tern_stream_write(tty)", write_queued(loop, ts, &buf, p_written, &p));
        reading = ARMED("tern_stream_read_start(pty master)",
                        tern_stream_read_start(loop, ms, p_read, &p));
        if (p.write_ok && reading)
            cr_assert(run_until(loop, p_data_done, &p));
    }
    bool fired = end_armed(p.read_notices);

    if (!t_ok)
        cr_assert_eq(tern_stream_open(loop, t, &ts), 0);
    if (!m_ok)
        cr_assert_eq(tern_stream_open(loop, m, &ms), 0);
    cr_assert_eq(tern_stream_on_close(loop, ts, p_closed, &p), 0);
    cr_assert_eq(tern_stream_on_close(loop, ms, p_closed, &p), 0);
    if (!raw)
        cr_assert_eq(tern_tty_set_mode(loop, ts, TERN_TTY_RAW), 0);
    cr_assert_eq(tcgetattr(t, &now), 0);
    cr_assert(!(now.c_lflag & (ICANON | ECHO)) && !(now.c_oflag & OPOST), "not raw");
    if (!sized)
        cr_assert_eq(tern_tty_winsize(loop, ts, &cols, &rows), 0);
    cr_assert_eq(cols, 100);
    cr_assert_eq(rows, 40);
    cr_assert_eq(tern_tty_set_mode(loop, ms, 7), -EINVAL, "an unknown mode");
    if (!p.write_ok) {
        p.write_ok = true;
        cr_assert_eq(write_queued(loop, ts, &buf, p_written, &p), 0);
    }
    if (!reading)
        cr_assert_eq(tern_stream_read_start(loop, ms, p_read, &p), 0);
    cr_assert(run_until(loop, p_data_done, &p),
              "the terminal no longer carries data after the fault");
    cr_assert_eq(memcmp(p.got, hello, sizeof(hello)), 0, "raw output was changed on its way");
    cr_assert_eq(atomic_load(&p.written), 1);
    cr_assert_eq(p.write_status, 0, "write: %s", tern_err_name(p.write_status));
    cr_assert_eq(tern_stream_close(loop, ts), 0);
    cr_assert_eq(tcgetattr(keep, &now), 0);
    cr_assert(tty_same(&first, &now), "closing the stream did not put the first mode back");
    cr_assert_eq(tern_stream_close(loop, ms), 0);
    free_clean(loop);
    cr_assert_eq(atomic_load(&p.closed), 2);
    close(keep);
    cr_assert_eq(count_open_fds(), fds, "the streams did not close their descriptors");
    return fired;
}

Test(fault, tty_open_raw_winsize_write, .timeout = TEST_TIMEOUT)
{
    for (size_t i = 0; tern__backend_names[i] != NULL; i++) {
        if (!selected(tern__backend_names[i]))
            continue;
        warm_up(tern__backend_names[i]);
        walk(tern__backend_names[i], step_tty, (void *)tern__backend_names[i]);
    }
}

/* ------------------------------------------------------------------ */
/* The stream seam: every system call of a stream, listener and TTY    */
/* ------------------------------------------------------------------ */

/*
 * These scenarios arm the stream site alone (TERN__FAULT_STREAM), with the
 * errno tern__fault_net_errno chose (-ENOBUFS, or -EAGAIN in the walk that
 * makes writes queue), so each system call of runtime/net/'s streams is
 * made to fail once: listen (bind, listen, SO_REUSEADDR), accept, connect
 * and its SO_ERROR, the port, no-delay and keep-alive, the peer's
 * credentials, try_write, each write (with descriptors on a Unix stream),
 * shutdown, each read (recvmsg on a Unix stream), a pipe's open (fstat)
 * and, on a TTY, tcgetattr, tcsetattr and TIOCGWINSZ.
 *
 * A connection: the writer sends "try" (tern_stream_try_write), "hello"
 * (with a descriptor on a Unix stream) and "world" queued behind it,
 * shuts its side, and closes once those are done; the reader reads until
 * the end or an error. Whatever failed: each write's done comes exactly
 * once, and when one failed every write queued after it failed with it;
 * the reader is told an error at most once and then nothing more; what
 * it read is exactly what was written, in order, up to where a failure
 * cut it; every stream closes once and no descriptor stays open.
 */
enum conn_kind { CONN_TCP, CONN_UNIX, CONN_PIPE };

struct conn_ctx {
    const char *backend;
    enum conn_kind kind;
    int err; /* the injected errno (positive) */
};

struct connrec {
    const struct conn_ctx *ctx;
    tern_id listener, w, r; /* writer (connecting side), reader (accepted side) */
    bool connected, connect_told, accepted;
    unsigned accept_errors;
    int connect_status;
    unsigned done[2];       /* the callbacks of "hello" and "world" */
    bool world_refused;     /* "world" refused (-EPIPE) because "hello" had failed */
    int status[2];
    unsigned shut;          /* shutdown callbacks */
    int shut_status;
    char got[32];
    size_t got_len;
    unsigned read_errors, eofs, after_end; /* after_end: reads after an error or the end */
    int passed_fd;          /* the descriptor received with "hello", or -1 */
    unsigned streams;       /* streams and listeners that were opened: each closes once */
    atomic_uint closed;
};

static const char conn_try[] = "try", conn_hello[] = "hello", conn_world[] = "world";

static bool conn_injected(const struct connrec *c, int status)
{
    return status == -c->ctx->err;
}

static void conn_done(struct connrec *c, unsigned i, int status)
{
    cr_assert(status == 0 || conn_injected(c, status), "write %u ended with %s", i,
              tern_err_name(status));
    cr_assert(status != -EAGAIN, "a write that met EAGAIN failed instead of waiting for room");
    c->status[i] = status;
    c->done[i]++;
}

static void conn_done0(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id;
    conn_done(arg, 0, status);
}

static void conn_done1(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id;
    conn_done(arg, 1, status);
}

static void conn_shut(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id;
    struct connrec *c = arg;
    cr_assert(status == 0 || conn_injected(c, status), "shutdown: %s", tern_err_name(status));
    c->shut_status = status;
    c->shut++;
}

static void conn_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                      void *arg)
{
    struct connrec *c = arg;
    if (c->read_errors > 0 || c->eofs > 0) {
        c->after_end++;
        return;
    }
    if (status < 0) {
        cr_assert(conn_injected(c, status), "read: %s", tern_err_name(status));
        cr_assert(status != -EAGAIN, "a read that met EAGAIN failed instead of waiting");
        c->read_errors++;
        return;
    }
    if (len == 0) {
        c->eofs++;
        return;
    }
    cr_assert_leq(c->got_len + len, sizeof(c->got));
    memcpy(c->got + c->got_len, data, len);
    c->got_len += len;
    int fd;
    while (c->ctx->kind == CONN_UNIX && (fd = tern_unix_take_fd(loop, id)) >= 0) {
        cr_assert_eq(c->passed_fd, -1, "one descriptor was passed, two arrived");
        c->passed_fd = fd;
    }
}

static void conn_closed(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id;
    atomic_fetch_add(&((struct connrec *)arg)->closed, 1);
}

static void conn_connected(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id;
    struct connrec *c = arg;
    cr_assert(!c->connect_told, "a connect was told twice");
    cr_assert(status == 0 || conn_injected(c, status), "connect: %s", tern_err_name(status));
    c->connect_told = true;
    c->connected = status == 0;
    c->connect_status = status;
}

static void conn_accepted(tern_loop *loop, tern_id listener, int status, tern_id stream,
                          void *arg)
{
    (void)listener;
    struct connrec *c = arg;
    if (status < 0) { /* the listener pauses, then accepts the connection still queued */
        cr_assert(conn_injected(c, status), "accept: %s", tern_err_name(status));
        c->accept_errors++;
        return;
    }
    cr_assert(!c->accepted, "one connection was accepted twice");
    c->accepted = true;
    c->r = stream;
    c->streams++;
    cr_assert_eq(tern_stream_on_close(loop, stream, conn_closed, c), 0);
}

static bool conn_set_up(void *arg)
{
    struct connrec *c = arg;
    return c->connect_told && (!c->connected || c->accepted);
}

static bool conn_writer_settled(void *arg)
{
    struct connrec *c = arg;
    return c->done[0] == 1 && c->done[1] == !c->world_refused &&
           (c->ctx->kind == CONN_PIPE || c->shut == 1);
}

static bool conn_reader_settled(void *arg)
{
    struct connrec *c = arg;
    return c->read_errors + c->eofs > 0;
}

static void conn_path(char *path, size_t size)
{
    snprintf(path, size, "/tmp/tern-fault-stream-%d.sock", (int)getpid());
}

/* Listen and connect (TCP, Unix) or open a pipe's ends, armed. False when
 * no connection came of it (refused or told): then nothing is left. */
static bool conn_open(tern_loop *loop, struct connrec *c, unsigned *notices)
{
    const struct conn_ctx *x = c->ctx;
    if (x->kind == CONN_PIPE) {
        int p[2];
        pipe_cloexec(p);
        bool r_ok = ARMED("tern_stream_open(pipe read end)", tern_stream_open(loop, p[0], &c->r));
        bool w_ok = ARMED("tern_stream_open(pipe write end)", tern_stream_open(loop, p[1], &c->w));
        /* A refused open left the descriptor with the caller. */
        if (r_ok)
            cr_assert_eq(tern_stream_on_close(loop, c->r, conn_closed, c), 0);
        else
            close(p[0]);
        if (w_ok)
            cr_assert_eq(tern_stream_on_close(loop, c->w, conn_closed, c), 0);
        else
            close(p[1]);
        c->streams = r_ok + w_ok;
        c->connected = c->accepted = r_ok && w_ok;
        c->r = r_ok ? c->r : 0;
        c->w = w_ok ? c->w : 0;
        return c->connected;
    }
    char path[64];
    conn_path(path, sizeof(path));
    bool listening;
    if (x->kind == CONN_TCP)
        listening =
            ARMED("tern_tcp_listen", tern_tcp_listen(loop, "127.0.0.1", 0, TERN_TCP_BACKLOG_DEFAULT,
                                                     0, conn_accepted, c, &c->listener));
    else
        listening = ARMED("tern_unix_listen", tern_unix_listen(loop, path, TERN_TCP_BACKLOG_DEFAULT,
                                                               conn_accepted, c, &c->listener));
    if (!listening) {
        c->listener = 0;
        cr_assert_neq(access(path, F_OK), 0, "a refused listen left its socket file");
        return false;
    }
    cr_assert_eq(tern_stream_on_close(loop, c->listener, conn_closed, c), 0);
    c->streams++;
    if (x->kind == CONN_TCP) {
        unsigned port = 0;
        if (!ARMED("tern_tcp_port", tern_tcp_port(loop, c->listener, &port)))
            cr_assert_eq(tern_tcp_port(loop, c->listener, &port), 0,
                         "the port is there all the same");
        cr_assert_eq(tern_tcp_connect(loop, "127.0.0.1", port, 0, conn_connected, c, &c->w), 0);
    } else {
        cr_assert_eq(tern_unix_connect(loop, path, conn_connected, c, &c->w), 0);
    }
    cr_assert_eq(tern_stream_on_close(loop, c->w, conn_closed, c), 0);
    c->streams++;
    cr_assert(run_until(loop, conn_set_up, c), "the connection was neither made nor refused");
    *notices += c->accept_errors + (c->connect_status < 0);
    if (!c->connected)
        c->w = 0; /* closed by the failed connect; its close callback still comes */
    return c->connected;
}

/* The options of a connected pair, armed: each is returned or changes nothing. */
static void conn_options(tern_loop *loop, struct connrec *c)
{
    if (c->ctx->kind == CONN_TCP) {
        (void)ARMED("tern_tcp_nodelay", tern_tcp_nodelay(loop, c->w, true));
        (void)ARMED("tern_tcp_keepalive", tern_tcp_keepalive(loop, c->w, true, 60, 10));
    } else if (c->ctx->kind == CONN_UNIX) {
        tern_unix_cred cred = {.pid = 0, .uid = 12345, .gid = 12345};
        if (ARMED("tern_unix_peer_cred", tern_unix_peer_cred(loop, c->r, &cred)))
            cr_assert_eq(cred.uid, (unsigned long)getuid());
        else
            cr_assert(cred.pid == 0 && cred.uid == 12345,
                      "a refused credential call wrote its answer");
    }
}

/* ARMED for try_write: the bytes written (> 0) are a success. */
static int try_written(tern_loop *loop, tern_id id, const tern_buf *b, bool *wrote)
{
    int rc = tern_stream_try_write(loop, id, b, 1);
    *wrote = rc > 0;
    if (rc > 0)
        cr_assert_eq(rc, (int)b->len, "a short try_write of a few bytes into an empty stream");
    return rc > 0 ? 0 : rc;
}

static bool step_conn(uint64_t n, void *ctx)
{
    const struct conn_ctx *x = ctx;
    int fds = count_open_fds();
    tern_loop *loop = new_loop(x->backend);
    char path[64];
    conn_path(path, sizeof(path));
    (void)unlink(path);
    int passing = open("/dev/null", O_RDONLY | O_CLOEXEC); /* handed over a Unix stream */
    cr_assert_geq(passing, 0);
    struct connrec c = {.ctx = x, .passed_fd = -1};
    unsigned notices = 0;
    static const tern_buf try_buf = {conn_try, 3}, hello_buf = {conn_hello, 5},
                          world_buf = {conn_world, 5};
    char want[16];
    size_t want_len = 0;
    bool wrote_try = false;

    tern__fault_net_errno(-x->err);
    refusals = 0;
    tern__fault_arm(TERN__FAULT_STREAM, n);
    if (conn_open(loop, &c, &notices)) {
        conn_options(loop, &c);
        bool reading =
            ARMED("tern_stream_read_start", tern_stream_read_start(loop, c.r, conn_read, &c));
        if (ARMED("tern_stream_try_write", try_written(loop, c.w, &try_buf, &wrote_try)) &&
            wrote_try) {
            memcpy(want, conn_try, 3);
            want_len = 3;
        }
        fired_mark = tern__fault_fired();
        int rc = x->kind == CONN_UNIX
                     ? tern_unix_write_fds(loop, c.w, &hello_buf, 1, &passing, 1, conn_done0, &c)
                     : tern_stream_write(loop, c.w, &hello_buf, 1, conn_done0, &c);
        cr_assert_eq(rc, 0, "write: %s", tern_err_name(rc));
        size_t left = 0;
        cr_assert_eq(tern_stream_write_queue_size(loop, c.w, &left), 0);
        /* An injected EAGAIN on the first write leaves it queued; a failure ends it. */
        if (!fired_mark && tern__fault_fired() && x->err == EAGAIN)
            cr_assert_eq(left, 5, "a write that met EAGAIN was not queued whole");
        bool hello_failed = !fired_mark && tern__fault_fired() && x->err != EAGAIN;
        rc = tern_stream_write(loop, c.w, &world_buf, 1, conn_done1, &c);
        if (rc == -EPIPE && hello_failed) { /* refused after the failure, as documented */
            c.world_refused = true;
            c.status[1] = rc;
        } else {
            cr_assert_eq(rc, 0, "write behind: %s", tern_err_name(rc));
        }
        if (x->kind != CONN_PIPE)
            cr_assert_eq(tern_stream_shutdown(loop, c.w, conn_shut, &c), 0);
        cr_assert(run_until(loop, conn_writer_settled, &c), "the writes were not all told");
        /* The end for the reader: the writer closes (a failed write shuts nothing). */
        cr_assert_eq(tern_stream_close(loop, c.w), 0);
        c.w = 0;
        if (!reading) /* the one failure was spent on the first try */
            cr_assert_eq(tern_stream_read_start(loop, c.r, conn_read, &c), 0);
        cr_assert(run_until(loop, conn_reader_settled, &c),
                  "the reader was told neither the end nor an error");
        /* The writer is gone, so a reader still reading would be told again now. */
        for (int i = 0; i < 3; i++)
            tern_loop_run_once(loop, 5 * (int64_t)MS);
        notices += c.read_errors + (c.status[0] < 0) + (c.status[1] < 0 && !c.world_refused) +
                   (c.shut_status < 0);
    }
    bool fired = tern__fault_fired();
    tern__fault_arm(0, 0);
    tern__fault_net_errno(-ENOBUFS);
    if (fired && x->err != EAGAIN)
        cr_assert_gt(refusals + notices, 0, "the injected failure was swallowed (n %llu)",
                     (unsigned long long)n);
    else if (!fired)
        cr_assert_eq(refusals + notices, 0, "a failure was reported but none was injected");

    if (c.connected) {
        /* Each write told once; a failure takes every write queued after it. */
        cr_assert_eq(c.done[0], 1);
        cr_assert_eq(c.done[1], !c.world_refused);
        if (c.status[0] < 0)
            cr_assert(c.status[1] == c.status[0] || c.world_refused,
                      "a write queued after a failed one ended with %s",
                      tern_err_name(c.status[1]));
        cr_assert_leq(c.read_errors, 1, "a read error was told twice");
        cr_assert_eq(c.after_end, 0, "the reader was called after its end or its error");
        if (c.status[0] == 0) {
            memcpy(want + want_len, conn_hello, 5);
            want_len += 5;
        }
        if (c.status[1] == 0) {
            memcpy(want + want_len, conn_world, 5);
            want_len += 5;
        }
        /* What was read is what was written, in order, cut only by a read error. */
        if (c.read_errors == 0)
            cr_assert_eq(c.got_len, want_len, "read %zu bytes, %zu written", c.got_len, want_len);
        cr_assert_leq(c.got_len, want_len);
        cr_assert_eq(memcmp(c.got, want, c.got_len), 0, "the bytes read are not the bytes written");
        if (x->err == EAGAIN && !(fired && refusals + notices > 0)) {
            /* EAGAIN on a read or a write delays; it loses nothing. */
            cr_assert_eq(c.status[0], 0);
            cr_assert_eq(c.status[1], 0);
            cr_assert_eq(c.read_errors, 0);
        }
        if (x->kind == CONN_UNIX && c.status[0] == 0 && c.got_len >= want_len)
            cr_assert_geq(c.passed_fd, 0, "the descriptor did not come with its bytes");
    }
    if (c.passed_fd >= 0)
        close(c.passed_fd);
    if (c.r != 0)
        cr_assert_eq(tern_stream_close(loop, c.r), 0);
    if (c.w != 0)
        cr_assert_eq(tern_stream_close(loop, c.w), 0);
    if (c.listener != 0)
        cr_assert_eq(tern_stream_close(loop, c.listener), 0);
    free_clean(loop);
    cr_assert_eq(atomic_load(&c.closed), c.streams, "%u streams, %u close callbacks", c.streams,
                 atomic_load(&c.closed));
    close(passing);
    (void)unlink(path);
    cr_assert_eq(count_open_fds(), fds, "a stream left a descriptor open");
    return fired;
}

static void conn_walk(enum conn_kind kind, int err, const char *what)
{
    for (size_t i = 0; tern__backend_names[i] != NULL; i++) {
        if (!selected(tern__backend_names[i]))
            continue;
        warm_up(tern__backend_names[i]);
        struct conn_ctx x = {.backend = tern__backend_names[i], .kind = kind, .err = err};
        char name[96];
        snprintf(name, sizeof(name), "%s %s (%s)", what, tern__backend_names[i],
                 tern_err_name(-err));
        walk(name, step_conn, &x);
    }
}

Test(fault, stream_calls_tcp, .timeout = TEST_TIMEOUT)
{
    conn_walk(CONN_TCP, ENOBUFS, "TCP stream");
}

Test(fault, stream_calls_unix, .timeout = TEST_TIMEOUT)
{
    conn_walk(CONN_UNIX, ENOBUFS, "Unix stream");
}

Test(fault, stream_calls_pipe, .timeout = TEST_TIMEOUT)
{
    conn_walk(CONN_PIPE, ENOBUFS, "pipe");
}

/* EAGAIN where a write meets it: the write queues and goes out later; on a
 * read, the reader waits for the next readiness. Nothing is lost. */
Test(fault, stream_calls_eagain, .timeout = TEST_TIMEOUT)
{
    conn_walk(CONN_PIPE, EAGAIN, "pipe");
    conn_walk(CONN_TCP, EAGAIN, "TCP stream");
    conn_walk(CONN_UNIX, EAGAIN, "Unix stream");
}

/*
 * A terminal's calls, armed at the stream site: the stream's open (fstat),
 * raw mode (tcgetattr, tcsetattr), the window size (TIOCGWINSZ), normal
 * mode and raw again. A call that fails returns the injected errno and
 * changes nothing: the terminal keeps the mode it had, the size's out
 * values keep theirs. Closing the stream puts back the first mode.
 */
static bool step_tty_calls(uint64_t n, void *ctx)
{
    const char *backend = ctx;
    int fds = count_open_fds();
    tern_loop *loop = new_loop(backend);
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    cr_assert_geq(m, 0, "posix_openpt: %s", strerror(errno));
    cr_assert_eq(fcntl(m, F_SETFD, FD_CLOEXEC), 0);
    cr_assert_eq(grantpt(m), 0);
    cr_assert_eq(unlockpt(m), 0);
    int t = open(ptsname(m), O_RDWR | O_NOCTTY | O_CLOEXEC);
    cr_assert_geq(t, 0, "open(%s): %s", ptsname(m), strerror(errno));
    struct winsize ws = {.ws_row = 40, .ws_col = 100};
    cr_assert_eq(ioctl(m, TIOCSWINSZ, &ws), 0);
    struct termios first, before, now;
    cr_assert_eq(tcgetattr(t, &first), 0);
    int keep = dup(t);
    cr_assert_geq(keep, 0);
    tern_id ts = 0;
    struct pairrec p = {0}; /* for its close count */

    refusals = 0;
    tern__fault_arm(TERN__FAULT_STREAM, n);
    if (!ARMED("tern_stream_open(tty)", tern_stream_open(loop, t, &ts)))
        cr_assert_eq(tern_stream_open(loop, t, &ts), 0, "the terminal opens all the same");
    cr_assert_eq(tern_stream_on_close(loop, ts, pair_closed, &p), 0);
    static const int modes[3] = {TERN_TTY_RAW, TERN_TTY_NORMAL, TERN_TTY_RAW};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(tcgetattr(keep, &before), 0);
        bool ok =
            ARMED(modes[i] == TERN_TTY_RAW ? "tern_tty_set_mode(raw)" : "tern_tty_set_mode(normal)",
                  tern_tty_set_mode(loop, ts, modes[i]));
        cr_assert_eq(tcgetattr(keep, &now), 0);
        if (!ok)
            cr_assert(tty_same(&before, &now), "a refused mode change changed the terminal");
        else if (modes[i] == TERN_TTY_NORMAL)
            cr_assert(tty_same(&first, &now), "normal mode is not the first mode");
        else
            cr_assert(!(now.c_lflag & (ICANON | ECHO)) && !(now.c_oflag & OPOST), "not raw");
        if (i == 0) {
            unsigned cols = 7, rows = 7;
            if (ARMED("tern_tty_winsize", tern_tty_winsize(loop, ts, &cols, &rows)))
                cr_assert(cols == 100 && rows == 40, "window %ux%u, set 100x40", cols, rows);
            else
                cr_assert(cols == 7 && rows == 7, "a refused window size wrote its answer");
        }
    }
    bool fired = end_armed(0);

    cr_assert_eq(tern_stream_close(loop, ts), 0);
    cr_assert_eq(tcgetattr(keep, &now), 0);
    cr_assert(tty_same(&first, &now), "closing the stream did not put the first mode back");
    free_clean(loop);
    cr_assert_eq(atomic_load(&p.closed), 1);
    close(keep);
    close(m);
    cr_assert_eq(count_open_fds(), fds, "the terminal's stream left a descriptor open");
    return fired;
}

Test(fault, tty_calls, .timeout = TEST_TIMEOUT)
{
    for (size_t i = 0; tern__backend_names[i] != NULL; i++) {
        if (!selected(tern__backend_names[i]))
            continue;
        warm_up(tern__backend_names[i]);
        walk(tern__backend_names[i], step_tty_calls, (void *)tern__backend_names[i]);
    }
}
