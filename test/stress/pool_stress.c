/*
 * Exactly-once under stress (SPEC §3 "Exactly one completion per accepted
 * job"). Standalone: it runs under ThreadSanitizer, where criterion cannot.
 *
 * Three loops, each on its own thread, share one small pool (2 bounded
 * workers, a 256-slot queue, 4 long threads) and push JOBS jobs through it
 * between them: mostly bounded, one in 64 long, and one drive in four
 * starts with a batch of bounded jobs (tern_submit_batch). Jobs are cancelled at
 * random from each loop's own thread (right after submission, while
 * likely queued, and from done callbacks) and from two foreign threads
 * that learn ids through a shared array and call tern_cancel(loop, id).
 *
 * Every job has a record that counts its work runs and its done calls.
 * At the end: every accepted job was delivered exactly once, on its own
 * loop, in step 2, with status 0 or -ECANCELED; status 0 means the work
 * ran once and its result arrived; -ECANCELED with a NULL result means
 * the work never ran (checked after the pool has drained, so a worker
 * that later walked past the tombstone had its chance to misbehave);
 * -ECANCELED with the result means it ran once. The pool statistics agree:
 * submitted == completed + cancelled == accepted jobs, cancelled == the
 * -ECANCELED deliveries, and the refusals add up to the -EAGAINs seen.
 *
 * Usage: pool_stress [JOBS [SEED]]   (defaults: 1000000; TERN_SEED, else
 * 0x7e7a5eed). Pass a smaller JOBS under valgrind. The seed makes the
 * decisions (class, which ids to cancel) repeatable; thread interleaving
 * is not.
 * A run that delivers nothing for STRESS_STALL_NS, or has not finished
 * after STRESS_LIVENESS_NS, is reported as a hang (liveness bounds, not
 * timing checks).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../pool_basics.h"
#include "stress.h"
#include "testing.h" /* tern__loop_step */

#define DEFAULT_JOBS 1000000u
#define DEFAULT_SEED 0x7e7a5eedull
#define LOOPS 3
#define CANCELLERS 2
#define MAX_INFLIGHT 384 /* per loop; more than the queue, so it fills */
#define SUBMIT_BATCH 64
#define ID_SLOTS 256
#define LONG_EVERY 64
#define STRESS_LIVENESS_NS (300ull * PH_SEC)
#define STRESS_STALL_NS (30ull * PH_SEC) /* no delivery at all for this long: a hang */

/* ------------------------------------------------------------------ */
/* Records                                                             */
/* ------------------------------------------------------------------ */

struct rec {
    atomic_uint ran;           /* work starts */
    atomic_uint done;          /* done calls */
    atomic_bool ran_late;      /* the work started after done had run */
    int status;                /* written by done (the loop thread) */
    bool result_null;
    bool long_class;
    uint8_t loop_index;
};

struct lp {
    unsigned index;
    tern_loop *loop;
    pthread_t thread;
    size_t first, end, next; /* record range and next to submit */
    size_t inflight;
    atomic_size_t delivered;
    bool driver_pending;
    tern_id tick;
    uint64_t rng;
    atomic_uint_fast64_t ids[ID_SLOTS]; /* recent ids, read by the cancellers */
    size_t id_cursor;
    /* Counters owned by the loop thread. */
    uint64_t accepted, eagain, local_cancels, local_cancel_ok, local_cancel_enoent;
    uint64_t batches; /* tern_submit_batch calls accepted */
    uint64_t errors;
    int run_rc;
};

static struct rec *recs;
static struct lp loops[LOOPS];
static atomic_bool stop_cancellers;
static atomic_bool cancellers_stopped;
static atomic_uint_fast64_t work_errors; /* seen on workers */
static atomic_uint_fast64_t foreign_cancels, foreign_cancel_bad;

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64*: small, fast and good enough to pick victims. */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

static void loop_error(struct lp *lp, const char *what, size_t rec_index)
{
    if (lp->errors++ < 10)
        fprintf(stderr, "pool_stress: loop %u: %s (job %zu)\n", lp->index, what, rec_index);
}

/* ------------------------------------------------------------------ */
/* Work and done                                                       */
/* ------------------------------------------------------------------ */

static void *stress_work(tern_job *job, void *arg)
{
    struct rec *r = arg;
    if (atomic_load(&r->done) != 0)
        atomic_store(&r->ran_late, true);
    atomic_fetch_add(&r->ran, 1);
    if (tern_loop_current() != NULL)
        atomic_fetch_add(&work_errors, 1);
    /* A little CPU so jobs overlap; long jobs watch their cancel flag. */
    uint64_t x = (uint64_t)(uintptr_t)r | 1;
    int spins = r->long_class ? 2000 : 200;
    for (int i = 0; i < spins; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if (r->long_class && (i & 63) == 0 && tern_job_cancelled(job))
            break;
    }
    if (x == 0) /* never true; keeps the loop from being optimised away */
        atomic_fetch_add(&work_errors, 1);
    return r;
}

static void kick_driver(struct lp *lp);

static void stress_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    struct rec *r = arg;
    struct lp *lp = &loops[r->loop_index];
    size_t index = (size_t)(r - recs);
    (void)id;

    if (loop != lp->loop || tern_loop_current() != loop)
        loop_error(lp, "done ran on another loop", index);
    if (tern__loop_step(loop) != 2)
        loop_error(lp, "done ran outside step 2", index);
    if (atomic_fetch_add(&r->done, 1) != 0) {
        /* Counted in the record; the bookkeeping below is for the first. */
        loop_error(lp, "done ran twice", index);
        return;
    }
    unsigned ran = atomic_load(&r->ran);
    if (status == 0) {
        if (result != r || ran != 1)
            loop_error(lp, "status 0 without the work's result or run", index);
    } else if (status == -ECANCELED) {
        if (result == NULL && ran != 0)
            loop_error(lp, "-ECANCELED with a NULL result, but the work ran", index);
        if (result != NULL && (result != r || ran != 1))
            loop_error(lp, "-ECANCELED with a result, but not the work's", index);
    } else {
        loop_error(lp, "status neither 0 nor -ECANCELED", index);
    }
    r->status = status;
    r->result_null = result == NULL;
    lp->inflight--;
    atomic_fetch_add(&lp->delivered, 1);

    /* Now and then, cancel a recent id from the loop's own thread. */
    if ((rng_next(&lp->rng) & 15) == 0) {
        tern_id victim = atomic_load(&lp->ids[rng_next(&lp->rng) % ID_SLOTS]);
        if (victim != 0) {
            int rc = tern_cancel(loop, victim);
            lp->local_cancels++;
            if (rc >= 0) /* stopped, running or finished */
                lp->local_cancel_ok++;
            else if (rc == -ENOENT)
                lp->local_cancel_enoent++;
            else
                loop_error(lp, "loop-thread tern_cancel returned neither 0 nor -ENOENT", index);
        }
    }
    kick_driver(lp);
}

/* ------------------------------------------------------------------ */
/* The submission driver: a deferred function that re-arms itself      */
/* ------------------------------------------------------------------ */

/*
 * One in four drives starts with a batch: the bounded records up to the
 * next long one, as one tern_submit_batch. All or nothing, so a refusal
 * counts one -EAGAIN per record (as the pool's refusal counters do) and
 * leaves every record unsubmitted. False: refused, stop driving for now.
 */
static bool drive_batch(tern_loop *loop, struct lp *lp)
{
    void *args[SUBMIT_BATCH];
    tern_id ids[SUBMIT_BATCH];
    size_t n = 0;
    while (n < SUBMIT_BATCH && lp->next + n < lp->end && lp->inflight + n < MAX_INFLIGHT &&
           !recs[lp->next + n].long_class) {
        args[n] = &recs[lp->next + n];
        n++;
    }
    if (n < 2)
        return true;
    int rc = tern_submit_batch(loop, TERN_BOUNDED, stress_work, stress_done, args, n, NULL, ids);
    if (rc == -EAGAIN) {
        lp->eagain += n;
        return false;
    }
    if (rc != 0) {
        loop_error(lp, "tern_submit_batch failed", lp->next);
        atomic_fetch_add(&lp->delivered, n); /* settled: the final check reports them */
        lp->next += n;
        return true;
    }
    lp->batches++;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] == 0)
            loop_error(lp, "tern_submit_batch gave id 0", lp->next);
        lp->next++;
        lp->accepted++;
        lp->inflight++;
        atomic_store(&lp->ids[lp->id_cursor++ % ID_SLOTS], ids[i]);
    }
    /* Cancel one of the batch right away, most likely while still queued. */
    if ((rng_next(&lp->rng) & 7) == 0) {
        rc = tern_cancel(loop, ids[rng_next(&lp->rng) % n]);
        lp->local_cancels++;
        if (rc >= 0)
            lp->local_cancel_ok++;
        else
            loop_error(lp, "cancel of a just-batched job failed", lp->next - 1);
    }
    return true;
}

static void drive(tern_loop *loop, void *arg)
{
    struct lp *lp = arg;
    lp->driver_pending = false;
    if ((rng_next(&lp->rng) & 3) == 0 && !drive_batch(loop, lp))
        return; /* refused: a completion or the tick drives again */
    for (int n = 0; n < SUBMIT_BATCH && lp->next < lp->end && lp->inflight < MAX_INFLIGHT; n++) {
        struct rec *r = &recs[lp->next];
        tern_id id = 0;
        int rc = tern_submit(loop, r->long_class ? TERN_LONG : TERN_BOUNDED, stress_work,
                             stress_done, r, &id);
        if (rc == -EAGAIN) {
            /* Refused: the record stays unsubmitted; a completion or the
             * tick will call the driver again. */
            lp->eagain++;
            return;
        }
        if (rc != 0 || id == 0) {
            loop_error(lp, "tern_submit failed", lp->next);
            /* Count it as settled so the run ends; the final check reports
             * it as a job without a completion. */
            atomic_fetch_add(&lp->delivered, 1);
            lp->next++;
            continue;
        }
        lp->next++;
        lp->accepted++;
        lp->inflight++;
        atomic_store(&lp->ids[lp->id_cursor++ % ID_SLOTS], id);
        /* Cancel some right away, most likely while still queued. */
        if ((rng_next(&lp->rng) & 31) == 0) {
            rc = tern_cancel(loop, id);
            lp->local_cancels++;
            if (rc >= 0)
                lp->local_cancel_ok++;
            else
                loop_error(lp, "cancel of a just-submitted job failed", lp->next - 1);
        }
    }
    kick_driver(lp);
}

static void kick_driver(struct lp *lp)
{
    if (lp->driver_pending || lp->next >= lp->end || lp->inflight >= MAX_INFLIGHT)
        return;
    if (tern_defer(lp->loop, drive, lp) == 0)
        lp->driver_pending = true;
}

/* The tick rescues a driver stalled by a refusal with nothing in flight,
 * and ends the loop once its jobs are delivered and no foreign thread can
 * cancel on it any more (so those cancels always meet a running loop). */
static void tick(tern_loop *loop, tern_id id, void *arg)
{
    struct lp *lp = arg;
    if (atomic_load(&lp->delivered) == lp->end - lp->first && atomic_load(&cancellers_stopped)) {
        tern_timer_stop(loop, id);
        return;
    }
    kick_driver(lp);
}

static void *loop_main(void *arg)
{
    struct lp *lp = arg;
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.max_undelivered = 1024;
    if (tern_loop_new(&lp->loop, &opts) != 0) {
        loop_error(lp, "tern_loop_new failed", 0);
        return NULL;
    }
    static const char *const names[LOOPS] = {"0", "1", "2"};
    stress_watch_loop(lp->loop, names[lp->index]);
    tern_timer_start(lp->loop, PH_MS, PH_MS, tick, lp, &lp->tick);
    kick_driver(lp);
    lp->run_rc = tern_loop_run(lp->loop);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Foreign cancellers                                                  */
/* ------------------------------------------------------------------ */

static void *canceller_main(void *arg)
{
    uint64_t rng = (uint64_t)(uintptr_t)arg;
    while (!atomic_load(&stop_cancellers)) {
        struct lp *lp = &loops[rng_next(&rng) % LOOPS];
        tern_id id = atomic_load(&lp->ids[rng_next(&rng) % ID_SLOTS]);
        if (id != 0) {
            /* The loop is inside tern_loop_run for as long as cancellers
             * run, so this is always the queued path: REQUESTED or -ENOMEM. */
            int rc = tern_cancel(lp->loop, id);
            atomic_fetch_add(&foreign_cancels, 1);
            if (rc != TERN_CANCEL_REQUESTED && rc != -ENOMEM)
                atomic_fetch_add(&foreign_cancel_bad, 1);
        }
        ph_sleep_ns(20000);
    }
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Checks and main                                                     */
/* ------------------------------------------------------------------ */

#define check(ok, what) STRESS_CHECK((ok), "%s", (what))

int main(int argc, char **argv)
{
    stress_init("pool_stress", argc > 2 ? strtoull(argv[2], NULL, 0) : DEFAULT_SEED);
    size_t jobs = argc > 1 ? strtoull(argv[1], NULL, 0) : DEFAULT_JOBS;
    uint64_t seed = stress_run_seed;
    if (jobs < LOOPS)
        jobs = LOOPS;
    printf("pool_stress: %zu jobs, %d loops, %d foreign cancellers, seed 0x%" PRIx64 "\n", jobs,
           LOOPS, CANCELLERS, seed);

    tern_pool_config cfg = ph_config(2, 256, 4);
    if (tern_pool_start(&cfg) != 0) {
        printf("FAIL: tern_pool_start\n0 passed, 1 failed\n");
        return 1;
    }
    recs = calloc(jobs, sizeof *recs);
    if (recs == NULL) {
        printf("FAIL: out of memory\n0 passed, 1 failed\n");
        return 1;
    }
    uint64_t rng = seed;
    size_t long_jobs = 0;
    for (size_t i = 0; i < jobs; i++) {
        recs[i].long_class = rng_next(&rng) % LONG_EVERY == 0;
        long_jobs += recs[i].long_class;
    }
    for (unsigned k = 0; k < LOOPS; k++) {
        struct lp *lp = &loops[k];
        lp->index = k;
        lp->first = lp->next = (size_t)k * jobs / LOOPS;
        lp->end = (size_t)(k + 1) * jobs / LOOPS;
        lp->rng = seed ^ (0x9e3779b97f4a7c15ull * (k + 1));
        atomic_init(&lp->delivered, 0);
        for (int s = 0; s < ID_SLOTS; s++)
            atomic_init(&lp->ids[s], 0);
        for (size_t i = lp->first; i < lp->end; i++)
            recs[i].loop_index = (uint8_t)k;
    }

    stress_phase("three loops deliver every job", STRESS_LIVENESS_NS + 60 * PH_SEC);
    uint64_t t0 = ph_now();
    for (unsigned k = 0; k < LOOPS; k++)
        pthread_create(&loops[k].thread, NULL, loop_main, &loops[k]);
    pthread_t cancellers[CANCELLERS];
    for (uintptr_t c = 0; c < CANCELLERS; c++)
        pthread_create(&cancellers[c], NULL, canceller_main, (void *)(seed + 7919 * (c + 1)));

    /* Wait for every loop to deliver everything it was given. */
    bool hung = false;
    size_t last_delivered = 0;
    uint64_t last_progress = t0;
    for (;;) {
        size_t delivered = 0, expected = 0;
        for (unsigned k = 0; k < LOOPS; k++) {
            delivered += atomic_load(&loops[k].delivered);
            expected += loops[k].end - loops[k].first;
        }
        if (delivered == expected)
            break;
        uint64_t now = ph_now();
        if (delivered != last_delivered) {
            last_delivered = delivered;
            last_progress = now;
        }
        if (now - t0 > STRESS_LIVENESS_NS || now - last_progress > STRESS_STALL_NS) {
            hung = true;
            fprintf(stderr, "pool_stress: hang: %zu of %zu delivered, none for %.1f s\n",
                    delivered, expected, (double)(now - last_progress) / 1e9);
            break;
        }
        ph_sleep_ns(10 * PH_MS);
    }
    if (hung)
        stress_fail_now("every job delivered within the liveness bound");
    atomic_store(&stop_cancellers, true);
    for (int c = 0; c < CANCELLERS; c++)
        pthread_join(cancellers[c], NULL);
    atomic_store(&cancellers_stopped, true);
    for (unsigned k = 0; k < LOOPS; k++)
        pthread_join(loops[k].thread, NULL);
    uint64_t elapsed = ph_now() - t0;

    /* The pool's own account, once its counters have settled. */
    uint64_t accepted = 0, eagain = 0, loop_errors = 0, local_cancels = 0, local_ok = 0;
    for (unsigned k = 0; k < LOOPS; k++) {
        accepted += loops[k].accepted;
        eagain += loops[k].eagain;
        loop_errors += loops[k].errors;
        local_cancels += loops[k].local_cancels;
        local_ok += loops[k].local_cancel_ok;
    }
    tern_pool_stats s;
    bool settled;
    PH_WAIT_UNTIL(settled, (s = ph_stats(), s.completed + s.cancelled == s.submitted));

    stress_phase("the loops are freed and the pool drains", 120 * PH_SEC);
    for (unsigned k = 0; k < LOOPS; k++)
        stress_loop_free(loops[k].loop);
    /* Drain the pool so any worker still walking past a tombstone is done. */
    int shut = tern_pool_shutdown(TERN_POOL_DRAIN, 30 * PH_SEC);

    size_t missing = 0, twice = 0, bad_status = 0, ran_twice = 0, cancelled_queued_ran = 0;
    size_t ok_unrun = 0, late = 0, n_ok = 0, n_cancel_null = 0, n_cancel_result = 0;
    for (size_t i = 0; i < jobs; i++) {
        struct rec *r = &recs[i];
        unsigned d = atomic_load(&r->done), ran = atomic_load(&r->ran);
        if (d == 0)
            missing++;
        if (d > 1)
            twice++;
        if (ran > 1)
            ran_twice++;
        if (atomic_load(&r->ran_late))
            late++;
        if (d == 0)
            continue;
        if (r->status == 0) {
            n_ok++;
            if (ran != 1)
                ok_unrun++;
        } else if (r->status == -ECANCELED) {
            if (r->result_null) {
                n_cancel_null++;
                if (ran != 0)
                    cancelled_queued_ran++;
            } else {
                n_cancel_result++;
            }
        } else {
            bad_status++;
        }
    }

    printf("pool_stress: %.2f s; accepted %" PRIu64 " (%zu long), refused %" PRIu64
           "; completed %zu, cancelled queued %zu, cancelled running %zu\n",
           (double)elapsed / 1e9, accepted, long_jobs, eagain, n_ok, n_cancel_null,
           n_cancel_result);
    printf("pool_stress: cancels: %" PRIu64 " from loops (%" PRIu64 " took), %" PRIu64
           " foreign\n", local_cancels, local_ok, (uint64_t)atomic_load(&foreign_cancels));
    printf("pool_stress: stats: submitted %" PRIu64 " completed %" PRIu64 " cancelled %" PRIu64
           " refused q%" PRIu64 " l%" PRIu64 " u%" PRIu64 " o%" PRIu64 " queued_peak %u"
           " wait p50/p99 %" PRIu64 "/%" PRIu64 " run p50/p99 %" PRIu64 "/%" PRIu64 " ns\n",
           s.submitted, s.completed, s.cancelled, s.refused_queue_full, s.refused_long_ceiling,
           s.refused_undelivered, s.refused_operations, s.queued_peak, s.wait_p50_ns,
           s.wait_p99_ns, s.run_p50_ns, s.run_p99_ns);

    check(accepted == jobs, "every job was eventually accepted");
    check(missing == 0, "no accepted job is missing its completion");
    check(twice == 0, "no job completed twice");
    check(ran_twice == 0, "no work ran twice");
    check(bad_status == 0, "every status is 0 or -ECANCELED");
    check(ok_unrun == 0, "status 0 means the work ran once");
    check(cancelled_queued_ran == 0, "a job cancelled while queued never ran its work");
    check(late == 0, "no work started after its done had run");
    check(loop_errors == 0, "every done ran on its own loop, in step 2, with a consistent result");
    check(atomic_load(&work_errors) == 0, "tern_loop_current() is NULL on every worker");
    check(atomic_load(&foreign_cancel_bad) == 0, "foreign tern_cancel calls returned 0");
    check(atomic_load(&foreign_cancels) > 0 && local_ok > 0, "both kinds of cancel happened");
    check(n_cancel_null > 0, "some jobs were cancelled while queued");
    check(eagain > 0, "the pool refused some submissions (the queue filled)");
    check(loops[0].batches + loops[1].batches + loops[2].batches > 0,
          "some batches were accepted");
    for (unsigned k = 0; k < LOOPS; k++)
        if (loops[k].run_rc != 0)
            fprintf(stderr, "pool_stress: loop %u: tern_loop_run returned %d\n", k,
                    loops[k].run_rc);
    check(loops[0].run_rc == 0 && loops[1].run_rc == 0 && loops[2].run_rc == 0,
          "each loop ran dry (tern_loop_run returned 0)");
    check(settled, "stats settle to submitted == completed + cancelled");
    check(s.submitted == accepted, "stats submitted == accepted jobs");
    check(s.cancelled == n_cancel_null + n_cancel_result,
          "stats cancelled == -ECANCELED deliveries");
    check(s.completed == n_ok, "stats completed == status-0 deliveries");
    check(s.refused_queue_full + s.refused_long_ceiling + s.refused_undelivered +
                  s.refused_operations == eagain,
          "stats refusals add up to the -EAGAINs seen");
    check(shut == 0, "the pool drains and shuts down");

    free(recs);
    stress_phase_end();
    return stress_summary();
}
