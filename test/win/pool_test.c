/*
 * pool_test: the pool's guarantees on Windows through the public API (the
 * checks of test/submit_test.c, cancel_test.c, long_test.c and
 * stats_test.c, without criterion). The bounded class has fixed workers
 * and a bounded queue; a full queue refuses with -EAGAIN and changes
 * nothing. The long class grows a thread per job up to its ceiling and
 * refuses past it. A loop's credits (max_undelivered) refuse new jobs
 * while results wait, and never lose one. A cancel says what it did
 * (queued: never ran; running: reports with its result; finished: no
 * effect) and done agrees. The statistics add up; every accepted job gets
 * exactly one done, also from two loops at once and from a loop freed with
 * jobs queued, running and undelivered. After tern_pool_shutdown has
 * joined the workers, the process holds no more handles than before the
 * first loop (GetProcessHandleCount). Closes with "N passed, N failed".
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

#include "handles.h"
#include "os_thread.h"
#include "runner.h"
#include "tern.h"
#include "tern/admission.h"

#define MS 1000000ull
/* A liveness bound, never a speed check: a wait that hits it is a hang. */
#define LIVENESS_MS 20000u

/* A job's record: what its work and its done saw. */
struct job {
    atomic_bool *gate;   /* NULL: returns at once; else waits until open or cancelled */
    atomic_int *entered; /* counts gated works that started */
    atomic_int ran;      /* the work started */
    atomic_int returned; /* the work returned */
    atomic_int saw_flag; /* the work returned because tern_job_cancelled() was true */
    atomic_int dones;    /* done calls */
    int status;
    void *result;
    tern_loop *done_loop; /* the loop done ran on */
    tern_id id;
};

static void *work(tern_job *j, void *arg)
{
    struct job *r = arg;
    atomic_store(&r->ran, 1);
    if (r->gate != NULL) {
        atomic_fetch_add(r->entered, 1);
        DWORD end = GetTickCount() + LIVENESS_MS;
        while (!atomic_load(r->gate) && (int)(GetTickCount() - end) < 0) {
            if (tern_job_cancelled(j)) {
                atomic_store(&r->saw_flag, 1);
                break;
            }
            Sleep(1);
        }
    }
    atomic_store(&r->returned, 1);
    return r; /* the result: the record itself */
}

static void done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    struct job *r = arg;
    (void)id;
    r->status = status;
    r->result = result;
    r->done_loop = loop;
    atomic_fetch_add(&r->dones, 1);
}

static void job_init(struct job *r, atomic_bool *gate, atomic_int *entered)
{
    memset(r, 0, sizeof *r);
    r->gate = gate;
    r->entered = entered;
}

static int submit(tern_loop *loop, tern_occupancy occ, struct job *r)
{
    return tern_submit(loop, occ, work, done, r, &r->id);
}

static int dones_total(struct job *r, int n)
{
    int t = 0;
    for (int i = 0; i < n; i++)
        t += atomic_load(&r[i].dones);
    return t;
}

/* Turns the loop until cond holds or the liveness bound passes. */
#define PUMP_UNTIL(loop, cond)                                      \
    do {                                                            \
        DWORD end_ = GetTickCount() + LIVENESS_MS;                  \
        while (!(cond) && (int)(GetTickCount() - end_) < 0)         \
            if (tern_loop_run_once((loop), (int64_t)(5 * MS)) == 0) \
                Sleep(1);                                           \
        CHECK(cond);                                                \
    } while (0)

/* Waits (no loop turned) until cond holds or the liveness bound passes. */
#define WAIT_UNTIL(cond)                                    \
    do {                                                    \
        DWORD end_ = GetTickCount() + LIVENESS_MS;          \
        while (!(cond) && (int)(GetTickCount() - end_) < 0) \
            Sleep(1);                                       \
        CHECK(cond);                                        \
    } while (0)

static tern_pool_stats pool_stats(void)
{
    tern_pool_stats s;
    tern_pool_stats_get(&s);
    return s;
}

static tern_loop_stats loop_stats(tern_loop *loop)
{
    tern_loop_stats s;
    tern_loop_stats_get(loop, &s);
    return s;
}

/* A fresh pool with this shape (the previous test's is shut down first). */
static void start_pool(unsigned threads, unsigned queue, unsigned long_max)
{
    CHECK(tern_pool_shutdown(TERN_POOL_DRAIN, 10000 * MS) == 0);
    tern_pool_config c;
    tern_pool_config_init(&c);
    c.threads = threads;
    c.queue_capacity = queue;
    c.long_threads_max = long_max;
    CHECK(tern_pool_start(&c) == 0);
}

static tern_loop *new_loop(unsigned max_operations, unsigned max_undelivered)
{
    tern_loop_options o;
    tern_loop_options_init(&o);
    if (max_operations != 0)
        o.max_operations = max_operations;
    if (max_undelivered != 0)
        o.max_undelivered = max_undelivered;
    tern_loop *loop = NULL;
    CHECK(tern_loop_new(&loop, &o) == 0);
    return loop;
}

enum cause { QUEUE_FULL, LONG_CEILING, UNDELIVERED, OPERATIONS, CAUSES };

static void refusals(uint64_t out[CAUSES])
{
    tern_pool_stats s = pool_stats();
    out[QUEUE_FULL] = s.refused_queue_full;
    out[LONG_CEILING] = s.refused_long_ceiling;
    out[UNDELIVERED] = s.refused_undelivered;
    out[OPERATIONS] = s.refused_operations;
}

/* Submits victim expecting -EAGAIN for cause: only that counter moves,
 * nothing is submitted, no credit or operation is held. */
static void expect_refusal(tern_loop *loop, tern_occupancy occ, struct job *victim, enum cause c)
{
    uint64_t r0[CAUSES], r1[CAUSES];
    refusals(r0);
    tern_pool_stats p0 = pool_stats();
    tern_loop_stats l0 = loop_stats(loop);
    CHECK(tern_submit(loop, occ, work, done, victim, NULL) == -EAGAIN);
    refusals(r1);
    for (int k = 0; k < CAUSES; k++)
        CHECK(r1[k] == r0[k] + (k == (int)c));
    tern_pool_stats p1 = pool_stats();
    tern_loop_stats l1 = loop_stats(loop);
    CHECK(p1.submitted == p0.submitted);
    CHECK(p1.queued == p0.queued);
    CHECK(p1.long_threads == p0.long_threads);
    CHECK(l1.undelivered == l0.undelivered);
    CHECK(l1.live_operations == l0.live_operations);
}

/* Delivers every accepted job, runs the loop dry and frees it; each done
 * came once with status 0 and the work's result, the victim never ran. */
static void finish(tern_loop *loop, struct job *jobs, int n, struct job *victim)
{
    PUMP_UNTIL(loop, dones_total(jobs, n) == n);
    CHECK(tern_loop_run(loop) == 0);
    for (int i = 0; i < n; i++) {
        CHECK(atomic_load(&jobs[i].dones) == 1);
        CHECK(jobs[i].status == 0);
        CHECK(jobs[i].result == &jobs[i]);
        CHECK(jobs[i].done_loop == loop);
    }
    tern_loop_free(loop);
    if (victim != NULL) {
        CHECK(atomic_load(&victim->ran) == 0);
        CHECK(atomic_load(&victim->dones) == 0);
    }
}

TEST(bounded_class_fixed_workers_and_a_full_queue_refuses_changing_nothing)
{
    enum { CAP = 4 };
    start_pool(1, CAP, 4);
    tern_loop *loop = new_loop(0, 0);
    atomic_bool gate = false;
    atomic_int entered = 0;
    struct job jobs[1 + CAP], victim;
    job_init(&jobs[0], &gate, &entered);
    CHECK(submit(loop, TERN_BOUNDED, &jobs[0]) == 0);
    WAIT_UNTIL(atomic_load(&entered) == 1);
    for (int i = 1; i <= CAP; i++) {
        job_init(&jobs[i], NULL, NULL);
        CHECK(submit(loop, TERN_BOUNDED, &jobs[i]) == 0);
    }
    tern_pool_stats s = pool_stats();
    CHECK(s.threads == 1); /* fixed: no worker added for a full queue */
    CHECK(s.busy == 1);
    CHECK(s.queued == CAP);
    CHECK(s.queued_peak >= CAP);
    job_init(&victim, NULL, NULL);
    expect_refusal(loop, TERN_BOUNDED, &victim, QUEUE_FULL);
    expect_refusal(loop, TERN_BOUNDED, &victim, QUEUE_FULL); /* again, the same */
    /* A full bounded queue does not refuse the long class. */
    struct job lj;
    job_init(&lj, NULL, NULL);
    CHECK(submit(loop, TERN_LONG, &lj) == 0);
    PUMP_UNTIL(loop, atomic_load(&lj.dones) == 1);
    CHECK(lj.status == 0);
    atomic_store(&gate, true);
    finish(loop, jobs, 1 + CAP, &victim);
    CHECK(pool_stats().threads == 1);
}

TEST(long_class_grows_to_its_ceiling_and_refuses_past_it)
{
    enum { CEIL = 3 };
    start_pool(1, 16, CEIL);
    tern_loop *loop = new_loop(0, 0);
    atomic_bool gate = false;
    atomic_int entered = 0;
    struct job jobs[CEIL + 1], victim;
    for (int i = 0; i < CEIL; i++) {
        job_init(&jobs[i], &gate, &entered);
        CHECK(submit(loop, TERN_LONG, &jobs[i]) == 0);
    }
    /* Each long job has a thread of its own at once: none waits behind another. */
    WAIT_UNTIL(atomic_load(&entered) == CEIL);
    tern_pool_stats s = pool_stats();
    CHECK(s.long_threads == CEIL);
    CHECK(s.long_busy == CEIL);
    job_init(&victim, NULL, NULL);
    expect_refusal(loop, TERN_LONG, &victim, LONG_CEILING);
    CHECK(pool_stats().long_threads == CEIL);
    /* A saturated long class does not hold bounded work back. */
    job_init(&jobs[CEIL], NULL, NULL);
    CHECK(submit(loop, TERN_BOUNDED, &jobs[CEIL]) == 0);
    PUMP_UNTIL(loop, atomic_load(&jobs[CEIL].dones) == 1);
    atomic_store(&gate, true);
    finish(loop, jobs, CEIL + 1, &victim);
    /* Returned long jobs give the ceiling back. */
    loop = new_loop(0, 0);
    struct job again;
    job_init(&again, NULL, NULL);
    WAIT_UNTIL(pool_stats().long_busy == 0);
    CHECK(submit(loop, TERN_LONG, &again) == 0);
    finish(loop, &again, 1, NULL);
}

TEST(max_operations_refuses_and_changes_nothing)
{
    start_pool(2, 64, 4);
    tern_loop *loop = new_loop(1, 0);
    atomic_bool gate = false;
    atomic_int entered = 0;
    struct job j, victim;
    job_init(&j, &gate, &entered);
    job_init(&victim, NULL, NULL);
    CHECK(submit(loop, TERN_BOUNDED, &j) == 0);
    WAIT_UNTIL(atomic_load(&entered) == 1); /* running: the queue holds still while we look */
    expect_refusal(loop, TERN_BOUNDED, &victim, OPERATIONS);
    expect_refusal(loop, TERN_LONG, &victim, OPERATIONS);
    atomic_store(&gate, true);
    finish(loop, &j, 1, &victim);
}

TEST(credits_hold_results_back_and_never_lose_one)
{
    enum { MAXU = 2 };
    start_pool(2, 64, 4);
    tern_loop *loop = new_loop(0, MAXU);
    atomic_bool gate = false;
    atomic_int entered = 0;
    struct job jobs[MAXU + 1], victim;
    for (int i = 0; i < MAXU; i++) {
        job_init(&jobs[i], &gate, &entered);
        CHECK(submit(loop, i == 0 ? TERN_BOUNDED : TERN_LONG, &jobs[i]) == 0);
        tern_loop_stats l = loop_stats(loop);
        CHECK(l.undelivered == (unsigned)i + 1);
        CHECK(l.undelivered_peak == (unsigned)i + 1);
    }
    WAIT_UNTIL(atomic_load(&entered) == MAXU); /* running: the queue holds still while we look */
    job_init(&victim, NULL, NULL);
    /* Per loop, not per class. */
    expect_refusal(loop, TERN_BOUNDED, &victim, UNDELIVERED);
    expect_refusal(loop, TERN_LONG, &victim, UNDELIVERED);
    /* Finished but not delivered: the credits are still held. */
    atomic_store(&gate, true);
    WAIT_UNTIL(atomic_load(&jobs[0].returned) && atomic_load(&jobs[1].returned));
    CHECK(loop_stats(loop).undelivered == MAXU);
    CHECK(dones_total(jobs, MAXU) == 0);
    expect_refusal(loop, TERN_BOUNDED, &victim, UNDELIVERED);
    /* Delivery returns them, and each result arrives whole. */
    PUMP_UNTIL(loop, dones_total(jobs, MAXU) == MAXU);
    tern_loop_stats l = loop_stats(loop);
    CHECK(l.undelivered == 0);
    CHECK(l.undelivered_peak == MAXU);
    job_init(&jobs[MAXU], NULL, NULL);
    CHECK(submit(loop, TERN_BOUNDED, &jobs[MAXU]) == 0);
    finish(loop, jobs, MAXU + 1, &victim);
}

/* The cancels made from inside the loop (a defer), where the outcome is
 * known at once. */
static struct {
    struct job *queued, *running, *finished;
    tern_id delivered;
    int queued_rc, queued_again_rc, running_rc, finished_rc, delivered_rc, zero_rc;
} cx;

static void cancel_inside(tern_loop *loop, void *arg)
{
    (void)arg;
    cx.queued_rc = tern_cancel(loop, cx.queued->id);
    cx.queued_again_rc = tern_cancel(loop, cx.queued->id);
    cx.running_rc = tern_cancel(loop, cx.running->id);
    cx.finished_rc = tern_cancel(loop, cx.finished->id);
    cx.delivered_rc = tern_cancel(loop, cx.delivered);
    cx.zero_rc = tern_cancel(loop, 0);
}

TEST(cancel_outcomes_queued_never_runs_running_reports_finished_is_unaffected)
{
    start_pool(1, 16, 4);
    tern_loop *loop = new_loop(0, 0);
    atomic_bool gate = false;
    atomic_int entered = 0;
    struct job old, fin, run, q;
    /* A job delivered before: its id is unknown now. */
    job_init(&old, NULL, NULL);
    CHECK(submit(loop, TERN_BOUNDED, &old) == 0);
    PUMP_UNTIL(loop, atomic_load(&old.dones) == 1);
    /* A long job that returns at once and waits for delivery. */
    job_init(&fin, NULL, NULL);
    CHECK(submit(loop, TERN_LONG, &fin) == 0);
    WAIT_UNTIL(atomic_load(&fin.returned) == 1);
    /* The one bounded worker runs run; q waits in the queue behind it. */
    job_init(&run, &gate, &entered);
    CHECK(submit(loop, TERN_BOUNDED, &run) == 0);
    WAIT_UNTIL(atomic_load(&entered) == 1);
    job_init(&q, NULL, NULL);
    CHECK(submit(loop, TERN_BOUNDED, &q) == 0);
    memset(&cx, 0xff, sizeof cx);
    cx.queued = &q;
    cx.running = &run;
    cx.finished = &fin;
    cx.delivered = old.id;
    CHECK(tern_defer(loop, cancel_inside, NULL) == 0);
    CHECK(tern_loop_run(loop) == 0); /* the running job sees its flag and returns */
    CHECK(cx.queued_rc == TERN_CANCEL_STOPPED);
    CHECK(cx.queued_again_rc == TERN_CANCEL_STOPPED);
    CHECK(cx.running_rc == TERN_CANCEL_RUNNING);
    CHECK(cx.finished_rc == TERN_CANCEL_FINISHED);
    CHECK(cx.delivered_rc == -ENOENT);
    CHECK(cx.zero_rc == -EINVAL);
    /* Queued: never ran, done once with -ECANCELED and no result. */
    CHECK(atomic_load(&q.ran) == 0);
    CHECK(atomic_load(&q.dones) == 1);
    CHECK(q.status == -ECANCELED);
    CHECK(q.result == NULL);
    /* Running: told, reports -ECANCELED with its result. */
    CHECK(atomic_load(&run.saw_flag) == 1);
    CHECK(atomic_load(&run.dones) == 1);
    CHECK(run.status == -ECANCELED);
    CHECK(run.result == &run);
    /* Finished: unaffected. */
    CHECK(atomic_load(&fin.dones) == 1);
    CHECK(fin.status == 0);
    CHECK(fin.result == &fin);
    CHECK(atomic_load(&old.dones) == 1);
    tern_loop_free(loop);
}

static void *cancel_from_thread(void *arg)
{
    struct job *r = arg;
    return (void *)(intptr_t)tern_cancel(r->done_loop, r->id);
}

TEST(a_cancel_from_another_thread_is_requested_and_done_agrees)
{
    start_pool(1, 16, 4);
    tern_loop *loop = new_loop(0, 0);
    atomic_bool gate = false;
    atomic_int entered = 0;
    struct job run, q;
    job_init(&run, &gate, &entered);
    CHECK(submit(loop, TERN_BOUNDED, &run) == 0);
    WAIT_UNTIL(atomic_load(&entered) == 1);
    job_init(&q, NULL, NULL);
    CHECK(submit(loop, TERN_BOUNDED, &q) == 0);
    q.done_loop = loop; /* the thread reads the loop from here */
    tern__thread_t t;
    void *rc = NULL;
    CHECK(tern__thread_start(&t, cancel_from_thread, &q) == 0);
    tern__thread_join(t, &rc);
    CHECK((int)(intptr_t)rc == TERN_CANCEL_REQUESTED);
    /* The loop carries the cancel out in its next turn: q is still queued
     * behind run (the gate is shut), so it stops and is done at once. */
    PUMP_UNTIL(loop, atomic_load(&q.dones) == 1);
    CHECK(atomic_load(&entered) == 1 && atomic_load(&run.dones) == 0);
    atomic_store(&gate, true);
    CHECK(tern_loop_run(loop) == 0);
    CHECK(atomic_load(&q.dones) == 1);
    CHECK(atomic_load(&q.ran) == 0);
    CHECK(q.status == -ECANCELED);
    CHECK(atomic_load(&run.dones) == 1);
    CHECK(run.status == 0);
    tern_loop_free(loop);
}

/* A few hundred jobs, every fifth cancelled from inside the loop: the
 * statistics add up on the loop's thread, and each job has its done once.
 * Two gated jobs hold both bounded workers until the cancels are made, so
 * the bounded fifths are still queued then and some cancel surely stops. */
#define MANY 400
#define HOLDERS 2
static struct job many[MANY], holders[HOLDERS];
static atomic_bool holders_gate;

static void cancel_fifths(tern_loop *loop, void *arg)
{
    (void)arg;
    for (int i = 0; i < MANY; i += 5) {
        int rc = tern_cancel(loop, many[i].id);
        CHECK(rc >= 0 || rc == -ENOENT); /* -ENOENT: delivered already */
    }
    atomic_store(&holders_gate, true);
}

TEST(statistics_add_up_and_each_job_is_done_once)
{
    start_pool(2, 1024, 128);
    /* Workers count themselves as they start. */
    WAIT_UNTIL(pool_stats().threads == 2);
    /* The outcome counters are the process's, across pools: deltas. */
    tern_pool_stats s0 = pool_stats();
    tern_loop *loop = new_loop(0, 0);
    atomic_int entered = 0;
    atomic_store(&holders_gate, false);
    for (int i = 0; i < HOLDERS; i++) {
        job_init(&holders[i], &holders_gate, &entered);
        CHECK(submit(loop, TERN_BOUNDED, &holders[i]) == 0);
    }
    WAIT_UNTIL(atomic_load(&entered) == HOLDERS);
    for (int i = 0; i < MANY; i++) {
        job_init(&many[i], NULL, NULL);
        CHECK(submit(loop, i % 7 == 0 ? TERN_LONG : TERN_BOUNDED, &many[i]) == 0);
    }
    CHECK(pool_stats().submitted - s0.submitted == HOLDERS + MANY);
    CHECK(tern_defer(loop, cancel_fifths, NULL) == 0);
    CHECK(tern_loop_run(loop) == 0);
    unsigned ok = 0, cancelled = 0, once = 0, ids_distinct = 1;
    for (int i = 0; i < MANY; i++) {
        once += atomic_load(&many[i].dones) == 1;
        ok += many[i].status == 0;
        cancelled += many[i].status == -ECANCELED;
        if (many[i].status == -ECANCELED && many[i].result == NULL)
            CHECK(atomic_load(&many[i].ran) == 0);
        if (i > 0 && many[i].id == many[i - 1].id)
            ids_distinct = 0;
    }
    CHECK(once == MANY);
    CHECK(ok + cancelled == MANY);
    CHECK(cancelled > 0);
    CHECK(ids_distinct);
    for (int i = 0; i < HOLDERS; i++)
        CHECK(atomic_load(&holders[i].dones) == 1 && holders[i].status == 0);
    /* Read on the loop's thread after its dones: every outcome counted. */
    tern_pool_stats s = pool_stats();
    CHECK(s.submitted - s0.submitted == HOLDERS + MANY);
    CHECK(s.completed - s0.completed == HOLDERS + ok);
    CHECK(s.cancelled - s0.cancelled == cancelled);
    CHECK(s.completed + s.cancelled + s.timed_out == s.submitted);
    CHECK(s.threads == 2);
    CHECK(s.queued_peak >= 1);
    CHECK(s.run_p50_ns > 0 && s.run_p50_ns <= s.run_p99_ns);
    CHECK(s.memory_bytes > 0);
    WAIT_UNTIL(pool_stats().busy == 0 && pool_stats().long_busy == 0);
    CHECK(pool_stats().queued == 0);
    tern_loop_stats l = loop_stats(loop);
    CHECK(l.undelivered == 0);
    CHECK(l.live_operations == 0);
    tern_loop_free(loop);
}

/* Two loops on two threads, each submitting and cancelling every fifth
 * of its jobs while the other does the same: each done once, on its own
 * loop. */
#define PER_LOOP 1000
struct side {
    tern_loop *loop;
    struct job jobs[PER_LOOP];
    int submitted;
};
static struct side sides[2];

static void side_cancel(tern_loop *loop, void *arg)
{
    struct side *sd = arg;
    for (int i = 0; i < sd->submitted; i += 5)
        (void)tern_cancel(loop, sd->jobs[i].id);
}

static void *side_main(void *arg)
{
    struct side *sd = arg;
    for (int i = 0; i < PER_LOOP; i++) {
        job_init(&sd->jobs[i], NULL, NULL);
        int rc;
        while ((rc = submit(sd->loop, i % 3 == 0 ? TERN_LONG : TERN_BOUNDED, &sd->jobs[i])) ==
               -EAGAIN)
            tern_loop_run_once(sd->loop, (int64_t)MS);
        CHECK(rc == 0);
        sd->submitted = i + 1;
        if (i % 50 == 49)
            CHECK(tern_defer(sd->loop, side_cancel, sd) == 0);
    }
    CHECK(tern_loop_run(sd->loop) == 0);
    return NULL;
}

TEST(exactly_once_with_two_loops_and_cancels)
{
    start_pool(2, 256, 8);
    tern__thread_t t[2];
    for (int k = 0; k < 2; k++) {
        sides[k].loop = new_loop(0, 0);
        sides[k].submitted = 0;
    }
    for (int k = 0; k < 2; k++)
        CHECK(tern__thread_start(&t[k], side_main, &sides[k]) == 0);
    for (int k = 0; k < 2; k++)
        tern__thread_join(t[k], NULL);
    for (int k = 0; k < 2; k++) {
        unsigned once = 0, wrong_loop = 0, bad = 0;
        for (int i = 0; i < PER_LOOP; i++) {
            struct job *r = &sides[k].jobs[i];
            once += atomic_load(&r->dones) == 1;
            wrong_loop += r->done_loop != sides[k].loop;
            bad += r->status != 0 && r->status != -ECANCELED;
        }
        CHECK(once == PER_LOOP);
        CHECK(wrong_loop == 0);
        CHECK(bad == 0);
        tern_loop_free(sides[k].loop);
    }
}

TEST(a_freed_loop_delivers_queued_running_and_undelivered_jobs_once)
{
    start_pool(1, 16, 4);
    tern_loop *loop = new_loop(0, 0);
    atomic_bool gate = false;
    atomic_int entered = 0;
    struct job j[4];
    job_init(&j[0], NULL, NULL); /* finished, undelivered */
    CHECK(submit(loop, TERN_LONG, &j[0]) == 0);
    WAIT_UNTIL(atomic_load(&j[0].returned) == 1);
    job_init(&j[1], &gate, &entered); /* running bounded, watching its flag */
    CHECK(submit(loop, TERN_BOUNDED, &j[1]) == 0);
    job_init(&j[2], &gate, &entered); /* running long */
    CHECK(submit(loop, TERN_LONG, &j[2]) == 0);
    WAIT_UNTIL(atomic_load(&entered) == 2);
    job_init(&j[3], NULL, NULL); /* queued behind j[1] */
    CHECK(submit(loop, TERN_BOUNDED, &j[3]) == 0);
    tern_loop_free(loop); /* never run */
    for (int i = 0; i < 4; i++)
        CHECK(atomic_load(&j[i].dones) == 1);
    CHECK(j[0].status == 0 && j[0].result == &j[0]);
    CHECK(j[1].status == -ECANCELED && j[1].result == &j[1] && atomic_load(&j[1].saw_flag));
    CHECK(j[2].status == -ECANCELED && j[2].result == &j[2] && atomic_load(&j[2].saw_flag));
    CHECK(j[3].status == -ECANCELED && j[3].result == NULL && atomic_load(&j[3].ran) == 0);
    /* free waited for its running jobs: they have returned. */
    CHECK(atomic_load(&j[1].returned) && atomic_load(&j[2].returned));
    tern_pool_stats s = pool_stats();
    CHECK(s.busy == 0 && s.long_busy == 0 && s.queued == 0);
}

/* The handles the process held before its first pool (handles.h: after
 * this thread's thread-local records exist). */
static struct handles handles_before;

TEST(shutdown_joins_every_worker_and_gives_every_handle_back)
{
    CHECK(tern_pool_shutdown(TERN_POOL_DRAIN, 10000 * MS) == 0);
    tern_pool_stats s = pool_stats();
    CHECK(s.threads == 0 && s.long_threads == 0);
    CHECK(handles_same(handles_before, handles_now()));
}

static const struct runner_test tests[] = {
    RUNNER_TEST(bounded_class_fixed_workers_and_a_full_queue_refuses_changing_nothing),
    RUNNER_TEST(long_class_grows_to_its_ceiling_and_refuses_past_it),
    RUNNER_TEST(max_operations_refuses_and_changes_nothing),
    RUNNER_TEST(credits_hold_results_back_and_never_lose_one),
    RUNNER_TEST(cancel_outcomes_queued_never_runs_running_reports_finished_is_unaffected),
    RUNNER_TEST(a_cancel_from_another_thread_is_requested_and_done_agrees),
    RUNNER_TEST(statistics_add_up_and_each_job_is_done_once),
    RUNNER_TEST(exactly_once_with_two_loops_and_cancels),
    RUNNER_TEST(a_freed_loop_delivers_queued_running_and_undelivered_jobs_once),
    RUNNER_TEST(shutdown_joins_every_worker_and_gives_every_handle_back),
};

/* A hang (a run that never returns) is a failure with a tally too, well
 * before meson's timeout. */
static DWORD WINAPI watchdog(LPVOID arg)
{
    (void)arg;
    Sleep(45000);
    printf("FAIL: the program did not end in 45 s (a hang)\n0 passed, 1 failed\n");
    fflush(stdout);
    ExitProcess(1);
    return 0;
}

int main(void)
{
    /* A plain Windows thread: one of tern's would hold thread-local
     * records (handles.h) while it lives. */
    HANDLE dog = CreateThread(NULL, 0, watchdog, NULL, 0, NULL);
    CHECK(dog != NULL);
    CloseHandle(dog);
    handles_warm_up();
    handles_before = handles_now();
    return RUNNER_MAIN(tests);
}
