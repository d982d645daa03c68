/*
 * shutdown_race_stress: tern_pool_shutdown against jobs in flight.
 *
 * Part 1, a long job shut down at once. A loop on the main thread
 * submits one TERN_LONG job and calls tern_pool_shutdown(mode, 50 ms)
 * straight away, REPS times per mode. The job's work waits until it sees
 * tern_job_cancelled() or the test releases it (after the shutdown
 * returned), polling both; a backstop of BACKSTOP ends it otherwise and
 * is recorded. Correct outcomes:
 *   CANCEL: 0, with the job either never run (done: -ECANCELED, NULL) or
 *           flagged while it ran (done: -ECANCELED, its result); or
 *           -ETIMEDOUT, and the job finishes once released.
 *   DRAIN:  -ETIMEDOUT (the job cannot finish before the test releases it,
 *           and the test releases it only after shutdown returned); then
 *           done with status 0.
 * The fault this hunts: a job handed to a long worker is not counted in
 * flight until it runs, so shutdown sees an idle pool, joins the worker
 * and the job runs to its end uncancelled (0 after the backstop, never
 * -ETIMEDOUT). The first failing repetition of a mode ends that mode.
 *
 * Part 2, shutdown racing submitters. LOOPS loops, each on its own
 * thread, submit jobs (both classes) in bursts of up to IN_FLIGHT in flight
 * from a 1 ms tick and from done, resting a few ticks between bursts, while
 * another thread runs CYCLES shutdown/restart cycles: shutdowns in a random
 * mode with a random timeout (0, 1 ms or 20 ms) until one ends the pool
 * (the loops' rests let it go idle), then the next pool is started explicitly (tern_pool_start) or
 * lazily by the next submission. A submission may be refused with -EAGAIN,
 * or with -ESHUTDOWN while a shutdown is under way: a submitter is refused
 * or served by the restarted pool, never by a freed one (the faults this
 * hunts: a stale submitter reads the freed pool, which ASan reports, or
 * leaves a job where no worker will take it, which the watchdog reports). Checked: every
 * accepted job gets exactly one done,
 * status 0 or -ECANCELED; each loop's tern_loop_run returns 0 with
 * undelivered 0 and live_operations 0; the frees and a last shutdown end.
 *
 * Seed: TERN_SEED (default 0x5d0e7ace): the job mix, modes, timeouts and
 * restart choices. Run it under TSan and ASan too (docs/testing.md).
 */
#include "stress.h"

#define DEFAULT_SEED UINT64_C(0x5d0e7ace)
#define REPS 100
#define BACKSTOP (UINT64_C(5) * STRESS_SEC)
#define LOOPS 3
#define IN_FLIGHT 16
#define MAX_JOBS 200000 /* per loop, a cap on the records, not a target */
#define CYCLES 60
#define LONG_PCT 20

/* ------------------------------------------------------------------ */
/* Part 1: a long job and an immediate shutdown                        */
/* ------------------------------------------------------------------ */

static struct {
    atomic_bool started, flagged, released, backstop_hit;
    unsigned dones;
    int status;
    void *result;
} one;

static void poll_pause(void)
{
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
}

static void *long_work(tern_job *job, void *arg)
{
    atomic_store(&one.started, true);
    uint64_t end = stress_now() + BACKSTOP;
    for (;;) {
        if (tern_job_cancelled(job)) {
            atomic_store(&one.flagged, true);
            break;
        }
        if (atomic_load(&one.released))
            break;
        if (stress_now() > end) {
            atomic_store(&one.backstop_hit, true);
            break;
        }
        poll_pause();
    }
    return arg;
}

static void long_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)arg;
    one.dones++;
    one.status = status;
    one.result = result;
}

static void report_part1(void)
{
    printf("  the long job: started %d, flagged %d, released %d, backstop %d, dones %u\n",
           atomic_load(&one.started), atomic_load(&one.flagged), atomic_load(&one.released),
           atomic_load(&one.backstop_hit), one.dones);
}

/* One repetition; false when it found the fault (the message is printed). */
static bool long_then_shutdown(tern_loop *loop, int mode, unsigned rep)
{
    const char *m = mode == TERN_POOL_CANCEL ? "CANCEL" : "DRAIN";
    atomic_store(&one.started, false);
    atomic_store(&one.flagged, false);
    atomic_store(&one.released, false);
    atomic_store(&one.backstop_hit, false);
    one.dones = 0;
    int rc = tern_submit(loop, TERN_LONG, long_work, long_done, &one, NULL);
    if (rc != 0) {
        STRESS_CHECK(false, "%s rep %u: tern_submit(TERN_LONG): %s", m, rep, tern_err_name(rc));
        return false;
    }
    int src = tern_pool_shutdown(mode, 50 * STRESS_MS);
    bool backstop = atomic_load(&one.backstop_hit);
    atomic_store(&one.released, true);
    /* The done comes on this loop; run it dry. */
    int run = tern_loop_run(loop);
    if (src == -ETIMEDOUT) {
        /* Released now: the pool can end. */
        int again = tern_pool_shutdown(TERN_POOL_DRAIN, 30 * STRESS_SEC);
        if (again != 0) {
            STRESS_CHECK(false, "%s rep %u: the shutdown after release: %s", m, rep,
                         tern_err_name(again));
            return false;
        }
    }
    bool ok = run == 0 && one.dones == 1;
    const char *why = "";
    if (backstop) {
        ok = false;
        why = "the job ran to its backstop: nobody flagged it and shutdown did not time out";
    } else if (mode == TERN_POOL_CANCEL) {
        if (src == 0 && atomic_load(&one.started) && !atomic_load(&one.flagged)) {
            ok = false;
            why = "shutdown returned 0 but the running job never saw tern_job_cancelled()";
        }
        if (src != 0 && src != -ETIMEDOUT) {
            ok = false;
            why = "shutdown returned neither 0 nor -ETIMEDOUT";
        }
        if (src == 0 && one.dones == 1 && one.status != -ECANCELED) {
            ok = false;
            why = "the job was shut down with CANCEL but its done did not say -ECANCELED";
        }
    } else {
        if (src != -ETIMEDOUT) {
            ok = false;
            why = "DRAIN returned before the accepted job could finish (expected -ETIMEDOUT)";
        } else if (one.dones == 1 && one.status != 0) {
            ok = false;
            why = "a drained job's done did not say 0";
        }
    }
    if (!ok) {
        STRESS_CHECK(false, "%s rep %u: shutdown %s, run %d, dones %u (status %s), started %d, "
                     "flagged %d: %s", m, rep, tern_err_name(src), run, one.dones,
                     tern_err_name(one.status), atomic_load(&one.started),
                     atomic_load(&one.flagged), why);
        return false;
    }
    return true;
}

static void part1(void)
{
    tern_loop *loop;
    int rc = tern_loop_new(&loop, NULL);
    if (rc != 0) {
        STRESS_CHECK(false, "tern_loop_new: %s", tern_err_name(rc));
        return;
    }
    stress_watch_loop(loop, "part 1");
    stress_on_report(report_part1);
    static const int modes[2] = {TERN_POOL_CANCEL, TERN_POOL_DRAIN};
    for (int k = 0; k < 2; k++) {
        const char *m = modes[k] == TERN_POOL_CANCEL ? "CANCEL" : "DRAIN";
        /* Each repetition is bounded by the job's backstop, the shutdown's
         * own timeout and one drain; the phase covers them all. */
        stress_phase(modes[k] == TERN_POOL_CANCEL
                         ? "part 1: TERN_LONG then tern_pool_shutdown(CANCEL), repeated"
                         : "part 1: TERN_LONG then tern_pool_shutdown(DRAIN), repeated",
                     120 * STRESS_SEC);
        unsigned reps = 0, timedout = 0;
        bool ok = true;
        for (; reps < REPS && ok; reps++) {
            ok = long_then_shutdown(loop, modes[k], reps);
            timedout += ok && modes[k] == TERN_POOL_CANCEL && !atomic_load(&one.flagged) &&
                        atomic_load(&one.started);
        }
        if (ok)
            STRESS_CHECK(true, "TERN_LONG then tern_pool_shutdown(%s) at once: %u repetitions, "
                         "the job flagged, never run, or the shutdown timed out (%u)", m, reps,
                         timedout);
    }
    stress_phase("part 1: tern_loop_free", 30 * STRESS_SEC);
    stress_loop_free(loop);
    stress_on_report(NULL);
}

/* ------------------------------------------------------------------ */
/* Part 2: loops submitting through shutdown/restart cycles            */
/* ------------------------------------------------------------------ */

struct rec {
    atomic_uint done;
    int status;
    bool is_long;
};

struct lp {
    unsigned index;
    char name[16];
    tern_loop *loop;
    pthread_t thread;
    uint64_t rng;
    struct rec *recs;
    size_t next;
    unsigned in_flight;
    unsigned burst_left, pause_ticks; /* submissions left in this burst; ticks to rest */
    tern_id tick;
    int run_rc;
    tern_loop_stats after;
    atomic_uint_fast64_t accepted, refused, shut, errors, done;
};

static struct lp loops[LOOPS];
static atomic_bool stop_submitting;
static atomic_uint_fast64_t cycles_done, shutdown_timeouts, explicit_starts;

static void *job_work(tern_job *job, void *arg)
{
    struct rec *r = arg;
    /* Long jobs hold their thread a little, watching their cancel flag. */
    if (r->is_long)
        for (unsigned i = 0; i < 200 && !tern_job_cancelled(job); i++)
            sched_yield();
    return arg;
}

static void submit_more(struct lp *lp);

static void job_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)result;
    struct rec *r = arg;
    struct lp *lp = &loops[0];
    while (r < lp->recs || r >= lp->recs + MAX_JOBS)
        lp++;
    if (atomic_fetch_add(&r->done, 1) != 0 && atomic_fetch_add(&lp->errors, 1) < 10)
        printf("%s: a job got two dones\n", lp->name);
    r->status = status;
    lp->in_flight--;
    atomic_fetch_add(&lp->done, 1);
    submit_more(lp);
}

static void submit_more(struct lp *lp)
{
    while (lp->in_flight < IN_FLIGHT && lp->burst_left > 0 && lp->next < MAX_JOBS &&
           !atomic_load(&stop_submitting)) {
        struct rec *r = &lp->recs[lp->next];
        r->is_long = stress_below(&lp->rng, 100) < LONG_PCT;
        int rc = tern_submit(lp->loop, r->is_long ? TERN_LONG : TERN_BOUNDED, job_work, job_done, r,
                             NULL);
        if (rc == -EAGAIN) {
            atomic_fetch_add(&lp->refused, 1);
            return; /* the tick tries again */
        }
        if (rc == -ESHUTDOWN) {
            atomic_fetch_add(&lp->shut, 1);
            return;
        }
        if (rc != 0) {
            if (atomic_fetch_add(&lp->errors, 1) < 10)
                printf("%s: tern_submit: %s\n", lp->name, tern_err_name(rc));
            return;
        }
        lp->next++;
        lp->in_flight++;
        lp->burst_left--;
        atomic_fetch_add(&lp->accepted, 1);
    }
}

/*
 * The tick keeps the loop alive and submitting, in bursts: between bursts
 * the loop lets what it has in flight finish and rests a few ticks, so the
 * pool goes idle now and then and a shutdown can end it while the loops'
 * next bursts race the teardown. Once submissions stop the tick ends
 * itself, and tern_loop_run returns when the last done has run.
 */
static void tick(tern_loop *loop, tern_id id, void *arg)
{
    struct lp *lp = arg;
    if (atomic_load(&stop_submitting)) {
        tern_timer_stop(loop, id);
        return;
    }
    if (lp->burst_left == 0 && lp->in_flight == 0) {
        if (lp->pause_ticks > 0) {
            lp->pause_ticks--;
            return;
        }
        lp->burst_left = 1 + (unsigned)stress_below(&lp->rng, 64);
        lp->pause_ticks = (unsigned)stress_below(&lp->rng, 6);
    }
    submit_more(lp);
}

static void *loop_main(void *arg)
{
    struct lp *lp = arg;
    int rc = tern_timer_start(lp->loop, STRESS_MS, STRESS_MS, tick, lp, &lp->tick);
    if (rc != 0) {
        printf("%s: tern_timer_start: %s\n", lp->name, tern_err_name(rc));
        atomic_fetch_add(&lp->errors, 1);
        return NULL;
    }
    lp->run_rc = tern_loop_run(lp->loop);
    tern_loop_stats_get(lp->loop, &lp->after);
    return NULL;
}

static void *shutdown_main(void *arg)
{
    (void)arg;
    uint64_t rng = stress_seed(1000);
    tern_pool_config cfg;
    tern_pool_config_init(&cfg);
    for (unsigned c = 0; c < CYCLES; c++) {
        /* Let submissions pile up against this pool first: wait (bounded
         * by the phase) until the loops have had some accepted. */
        uint64_t base = 0, now;
        for (unsigned k = 0; k < LOOPS; k++)
            base += atomic_load(&loops[k].accepted);
        unsigned want = 1 + (unsigned)stress_below(&rng, 200);
        do {
            now = 0;
            for (unsigned k = 0; k < LOOPS; k++)
                now += atomic_load(&loops[k].accepted);
            if (now < base + want)
                sched_yield();
        } while (now < base + want);
        /* Until one shutdown ends the pool (bounded by the phase): the
         * loops rest between bursts, so the pool goes idle now and then. */
        int rc;
        do {
            int mode = stress_below(&rng, 2) ? TERN_POOL_CANCEL : TERN_POOL_DRAIN;
            static const uint64_t timeouts[3] = {0, STRESS_MS, 20 * STRESS_MS};
            rc = tern_pool_shutdown(mode, timeouts[stress_below(&rng, 3)]);
            if (rc == -ETIMEDOUT)
                atomic_fetch_add(&shutdown_timeouts, 1);
            else if (rc != 0)
                printf("shutdown cycle %u: %s\n", c, tern_err_name(rc));
        } while (rc == -ETIMEDOUT);
        if (stress_below(&rng, 2)) {
            rc = tern_pool_start(&cfg);
            if (rc != 0)
                printf("shutdown cycle %u: tern_pool_start: %s\n", c, tern_err_name(rc));
            atomic_fetch_add(&explicit_starts, 1);
        }
        atomic_fetch_add(&cycles_done, 1);
    }
    return NULL;
}

static void report_part2(void)
{
    for (unsigned k = 0; k < LOOPS; k++) {
        struct lp *lp = &loops[k];
        printf("  %s: accepted %" PRIu64 ", done %" PRIu64 ", refused %" PRIu64 ", -ESHUTDOWN %"
               PRIu64 ", errors %" PRIu64 "\n", lp->name, (uint64_t)atomic_load(&lp->accepted),
               (uint64_t)atomic_load(&lp->done), (uint64_t)atomic_load(&lp->refused),
               (uint64_t)atomic_load(&lp->shut), (uint64_t)atomic_load(&lp->errors));
    }
    printf("  shutdown cycles %" PRIu64 " of %u (%" PRIu64 " timed out, %" PRIu64
           " explicit restarts)\n", (uint64_t)atomic_load(&cycles_done), CYCLES,
           (uint64_t)atomic_load(&shutdown_timeouts), (uint64_t)atomic_load(&explicit_starts));
}

static void part2(void)
{
    stress_on_report(report_part2);
    for (unsigned k = 0; k < LOOPS; k++) {
        struct lp *lp = &loops[k];
        lp->index = k;
        snprintf(lp->name, sizeof lp->name, "loop %u", k);
        lp->rng = stress_seed(k + 1);
        lp->recs = calloc(MAX_JOBS, sizeof *lp->recs);
        int rc = lp->recs == NULL ? -ENOMEM : tern_loop_new(&lp->loop, NULL);
        if (rc != 0) {
            STRESS_CHECK(false, "%s: setup: %s", lp->name, tern_err_name(rc));
            exit(stress_summary());
        }
        stress_watch_loop(lp->loop, lp->name);
    }
    stress_phase("part 2: shutdown/restart cycles while loops submit", 180 * STRESS_SEC);
    pthread_t closer;
    for (unsigned k = 0; k < LOOPS; k++)
        pthread_create(&loops[k].thread, NULL, loop_main, &loops[k]);
    pthread_create(&closer, NULL, shutdown_main, NULL);
    pthread_join(closer, NULL);
    stress_phase("part 2: the loops deliver what they have in flight and return", 60 * STRESS_SEC);
    atomic_store(&stop_submitting, true);
    for (unsigned k = 0; k < LOOPS; k++)
        pthread_join(loops[k].thread, NULL);

    uint64_t accepted = 0, missing = 0, twice = 0, bad_status = 0, cancelled = 0;
    for (unsigned k = 0; k < LOOPS; k++) {
        struct lp *lp = &loops[k];
        STRESS_CHECK(lp->run_rc == 0 && lp->after.undelivered == 0 &&
                         lp->after.live_operations == 0,
                     "%s: tern_loop_run returned %d with undelivered %u, live_operations %u "
                     "(want 0, 0, 0)", lp->name, lp->run_rc, lp->after.undelivered,
                     lp->after.live_operations);
        for (size_t i = 0; i < lp->next; i++) {
            unsigned d = atomic_load(&lp->recs[i].done);
            missing += d == 0;
            twice += d > 1;
            bad_status += d != 0 && lp->recs[i].status != 0 && lp->recs[i].status != -ECANCELED;
            cancelled += d != 0 && lp->recs[i].status == -ECANCELED;
        }
        accepted += lp->next;
        STRESS_CHECK(atomic_load(&lp->errors) == 0, "%s: no unexpected error", lp->name);
    }
    report_part2();
    STRESS_CHECK(missing == 0, "every accepted job got its done (%" PRIu64 " of %" PRIu64
                 " missing)", missing, accepted);
    STRESS_CHECK(twice == 0, "no job got two dones (%" PRIu64 ")", twice);
    STRESS_CHECK(bad_status == 0, "every status is 0 or -ECANCELED (%" PRIu64 " not)", bad_status);
    STRESS_CHECK(accepted > CYCLES, "jobs were accepted throughout (%" PRIu64 ", %" PRIu64
                 " cancelled)", accepted, cancelled);
    for (unsigned k = 0; k < LOOPS; k++) {
        stress_phase("part 2: tern_loop_free", 30 * STRESS_SEC);
        stress_loop_free(loops[k].loop);
        free(loops[k].recs);
    }
}

int main(void)
{
    stress_init("shutdown_race_stress", DEFAULT_SEED);
    part1();
    part2();
    stress_phase("the last tern_pool_shutdown(DRAIN)", 60 * STRESS_SEC);
    int rc = tern_pool_shutdown(TERN_POOL_DRAIN, 30 * STRESS_SEC);
    STRESS_CHECK(rc == 0, "the pool drains and shuts down (%s)", tern_err_name(rc));
    stress_phase_end();
    return stress_summary();
}
