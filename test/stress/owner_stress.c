/*
 * Owners and deadlines under contention (SPEC §12): several loops, each
 * with owners of small caps, submitting jobs whose short deadlines race
 * their start and whose owners close while they run and complete; a
 * foreign thread cancels jobs by id meanwhile; at the end every loop
 * leaves slow jobs in the pool and a TERN_POOL_CANCEL shutdown ends them.
 *
 * Each loop runs on its own thread (tern_loop_run_once until it is done);
 * all its calls are made from a repeating timer's callback, so they are
 * the loop's own. Decisions come from the seed (TERN_SEED, default
 * 0x0a11ce5): occupancy, owner, timeout, how long the work takes, when an
 * owner closes, which job the foreign thread cancels.
 *
 * Checked (violations are counted with the first message kept, and
 * reported once at the end):
 *   - every accepted job gets exactly one done; a refused one none;
 *   - a done's status: 0 only if the work ran, with its result; NULL and a
 *     failure if it never ran; -ETIMEDOUT only with a timeout;
 *     -ECANCELED only where a cancel could have reached it (its owner
 *     closed, a foreign cancel of its id, the cancelling shutdown); a job
 *     that never ran and nothing cancelled got -ETIMEDOUT; every job left
 *     for the shutdown got -ECANCELED;
 *   - a refusal's cause: the owner's cap exactly when the loop's model of
 *     the owner's jobs in flight is at the cap; never none or shutdown;
 *   - tern_owner_stats_get equals the model after every call and in every
 *     done; a closed owner's id is stale at once;
 *   - at the end nothing is live, the pool owes nothing, and TERN_CHECK_BOOKS
 *     (set by stress_init) audited every loop's credits at each turn.
 */
#include "stress.h"

#define DEFAULT_SEED UINT64_C(0x0a11ce5)
#define LOOPS 3
#define OWNERS 6      /* per loop */
#define CAP_MAX 3     /* owners' caps are 1..CAP_MAX */
#define FINAL_JOBS 4  /* per loop, left for the cancelling shutdown */
#define TICK_NS (100 * STRESS_MS / 1000) /* 100 us */
#define ACTIONS_PER_TICK 4
#define PUBLISHED 64  /* recent job ids per loop, for the foreign canceller */

#ifdef STRESS_UNDER_TSAN
#define ATTEMPTS 800
#else
#define ATTEMPTS 4000
#endif

struct loop_state;

struct job_rec {
    struct loop_state *ls;
    tern_id id;
    int owner;            /* index into ls->owners, or -1 */
    uint64_t timeout;
    uint64_t work_ns;     /* how long the work runs (polling the cancel) */
    bool final;           /* left for the cancelling shutdown */
    bool owner_closed;    /* loop side: its owner closed while it was in flight */
    atomic_bool ran;      /* worker side */
    atomic_bool cancel_asked; /* the foreign thread is cancelling its id */
    atomic_uint dones;
};

struct owner_rec {
    tern_id id;
    bool open;
    unsigned cap, in_flight;
    uint64_t accepted, refused;
    struct job_rec *jobs[CAP_MAX]; /* in flight */
};

struct loop_state {
    int index;
    tern_loop *loop;
    pthread_t thread;
    uint64_t rng;
    tern_id tick;
    struct job_rec *jobs;
    unsigned njobs, attempts;
    struct owner_rec owners[OWNERS];
    enum { CHURN, SETTLED, FINAL_IN, DRAIN } phase;
    atomic_bool finals_submitted, finished;
    _Atomic uint64_t published[PUBLISHED]; /* index + 1 of a recent job rec, 0: none */
    unsigned published_next;
    /* Counters (loop thread; read by main after the join, and by the report). */
    atomic_uint refused_cap, refused_other, done_ok, done_cancelled, done_timedout, closes;
};

static struct loop_state loops[LOOPS];
static atomic_bool shutdown_begun, cancelling_stop;
static atomic_uint loops_settled; /* loops whose churn has ended and settled */
static atomic_uint foreign_cancels, foreign_bad;
static atomic_uint violations;
static char first_violation[256];
static pthread_mutex_t violation_lock = PTHREAD_MUTEX_INITIALIZER;

static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void violation(const char *fmt, ...)
{
    if (atomic_fetch_add(&violations, 1) != 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&violation_lock);
    vsnprintf(first_violation, sizeof first_violation, fmt, ap);
    pthread_mutex_unlock(&violation_lock);
    va_end(ap);
    printf("first violation: %s\n", first_violation);
}

/* ------------------------------------------------------------------ */
/* Work and done                                                       */
/* ------------------------------------------------------------------ */

static void *work(tern_job *job, void *arg)
{
    struct job_rec *j = arg;
    atomic_store_explicit(&j->ran, true, memory_order_relaxed);
    /* A final job waits for the shutdown's cancel, bounded by a liveness limit. */
    uint64_t end = stress_now() + (j->final ? 60 * STRESS_SEC : j->work_ns);
    while (stress_now() < end && !tern_job_cancelled(job)) {
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
    return j;
}

static void owner_check(struct loop_state *ls, int o, const char *when)
{
    struct owner_rec *w = &ls->owners[o];
    if (!w->open)
        return;
    tern_owner_stats st;
    int rc = tern_owner_stats_get(ls->loop, w->id, &st);
    if (rc != 0 || st.cap != w->cap || st.in_flight != w->in_flight ||
        st.accepted != w->accepted || st.refused != w->refused)
        violation("loop %d owner %d %s: stats rc %d cap %u in_flight %u accepted %" PRIu64
                  " refused %" PRIu64 "; model cap %u in_flight %u accepted %" PRIu64
                  " refused %" PRIu64, ls->index, o, when, rc, st.cap, st.in_flight, st.accepted,
                  st.refused, w->cap, w->in_flight, w->accepted, w->refused);
}

static void owner_forget(struct owner_rec *w, struct job_rec *j)
{
    for (unsigned k = 0; k < CAP_MAX; k++)
        if (w->jobs[k] == j) {
            w->jobs[k] = NULL;
            return;
        }
    violation("a done for a job its owner's model does not hold");
}

static void done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    struct job_rec *j = arg;
    struct loop_state *ls = j->ls;
    if (loop != ls->loop || id != j->id)
        violation("done on loop %p id %" PRIu64 " for a job of loop %p id %" PRIu64,
                  (void *)loop, id, (void *)ls->loop, j->id);
    if (atomic_fetch_add(&j->dones, 1) != 0)
        violation("loop %d: a second done for job %" PRIu64, ls->index, id);
    bool ran = atomic_load_explicit(&j->ran, memory_order_relaxed);
    bool cancel = atomic_load(&j->cancel_asked) || j->owner_closed ||
                  atomic_load(&shutdown_begun);
    if (ran ? result != j : (result != NULL || status == 0))
        violation("loop %d job %" PRIu64 ": ran %d, status %s, result %p", ls->index, id, ran,
                  tern_err_name(status), result);
    if (status == -ETIMEDOUT && j->timeout == 0)
        violation("loop %d job %" PRIu64 ": -ETIMEDOUT without a timeout", ls->index, id);
    if (status == -ECANCELED && !cancel)
        violation("loop %d job %" PRIu64 ": -ECANCELED with nothing to cancel it", ls->index,
                  id);
    if (!ran && !cancel && status != -ETIMEDOUT)
        violation("loop %d job %" PRIu64 ": never ran, not cancelled: %s", ls->index, id,
                  tern_err_name(status));
    if (j->final && status != -ECANCELED)
        violation("loop %d final job %" PRIu64 ": %s, not -ECANCELED", ls->index, id,
                  tern_err_name(status));
    if (status != 0 && status != -ECANCELED && status != -ETIMEDOUT)
        violation("loop %d job %" PRIu64 ": status %s", ls->index, id, tern_err_name(status));
    atomic_fetch_add(status == 0 ? &ls->done_ok
                     : status == -ETIMEDOUT ? &ls->done_timedout
                                             : &ls->done_cancelled,
                     1);
    if (j->owner >= 0) {
        struct owner_rec *w = &ls->owners[j->owner];
        if (!j->owner_closed) {
            owner_forget(w, j);
            if (w->in_flight == 0)
                violation("loop %d owner %d: more dones than jobs", ls->index, j->owner);
            else
                w->in_flight--;
            owner_check(ls, j->owner, "in a done");
        }
    }
}

/* ------------------------------------------------------------------ */
/* The loop's actions                                                  */
/* ------------------------------------------------------------------ */

static void owner_open(struct loop_state *ls, int o)
{
    struct owner_rec *w = &ls->owners[o];
    unsigned cap = 1 + (unsigned)stress_below(&ls->rng, CAP_MAX);
    tern_id id;
    int rc = tern_owner_open(ls->loop, cap, &id);
    if (rc != 0) {
        violation("loop %d: tern_owner_open: %s", ls->index, tern_err_name(rc));
        return;
    }
    *w = (struct owner_rec){.id = id, .open = true, .cap = cap};
    owner_check(ls, o, "opened");
}

static void owner_close(struct loop_state *ls, int o)
{
    struct owner_rec *w = &ls->owners[o];
    if (!w->open)
        return;
    /* Its jobs in flight may now be cancelled; their dones no longer count it. */
    for (unsigned k = 0; k < CAP_MAX; k++)
        if (w->jobs[k] != NULL)
            w->jobs[k]->owner_closed = true;
    int rc = tern_owner_close(ls->loop, w->id);
    if (rc != 0)
        violation("loop %d: tern_owner_close of an open owner: %s", ls->index, tern_err_name(rc));
    tern_owner_stats st;
    if (tern_owner_stats_get(ls->loop, w->id, &st) != -ENOENT)
        violation("loop %d: a closed owner's id is not stale", ls->index);
    w->open = false;
    atomic_fetch_add(&ls->closes, 1);
}

static struct job_rec *job_new(struct loop_state *ls)
{
    struct job_rec *j = &ls->jobs[ls->njobs];
    *j = (struct job_rec){.ls = ls, .owner = -1};
    return j;
}

static void publish(struct loop_state *ls, struct job_rec *j)
{
    uint64_t index = (uint64_t)(j - ls->jobs);
    atomic_store(&ls->published[ls->published_next++ % PUBLISHED], index + 1);
}

static void submit_one(struct loop_state *ls)
{
    struct job_rec *j = job_new(ls);
    uint64_t r = stress_below(&ls->rng, 100);
    tern_occupancy occ = r < 15 ? TERN_LONG : TERN_BOUNDED;
    j->timeout = stress_below(&ls->rng, 10) < 4 ? 0 : 1 + stress_below(&ls->rng, 500000);
    j->work_ns = stress_below(&ls->rng, 2) ? 0 : stress_below(&ls->rng, 200000);
    int o = stress_below(&ls->rng, 10) < 8 ? (int)stress_below(&ls->rng, OWNERS) : -1;
    if (o >= 0 && !ls->owners[o].open)
        owner_open(ls, o);
    struct owner_rec *w = o >= 0 && ls->owners[o].open ? &ls->owners[o] : NULL;
    j->owner = w != NULL ? o : -1;
    tern_job_options jo;
    tern_job_options_init(&jo);
    jo.owner = w != NULL ? w->id : 0;
    jo.timeout_ns = j->timeout;
    bool at_cap = w != NULL && w->in_flight >= w->cap;
    int rc = tern_submit_with(ls->loop, occ, work, done, j, &jo, &j->id);
    tern_refusal cause = tern_loop_last_refusal(ls->loop);
    if (rc == 0) {
        if (at_cap)
            violation("loop %d: accepted past the owner's cap %u", ls->index, w->cap);
        if (cause != TERN_REFUSED_NONE)
            violation("loop %d: accepted with cause %s", ls->index, tern_refusal_name(cause));
        if (w != NULL) {
            w->in_flight++;
            w->accepted++;
            for (unsigned k = 0; k < CAP_MAX; k++)
                if (w->jobs[k] == NULL) {
                    w->jobs[k] = j;
                    break;
                }
        }
        ls->njobs++;
        publish(ls, j);
    } else if (rc == -EAGAIN) {
        if ((cause == TERN_REFUSED_OWNER_CAP) != at_cap)
            violation("loop %d: cause %s with the owner %s its cap", ls->index,
                      tern_refusal_name(cause), at_cap ? "at" : "below");
        if (cause == TERN_REFUSED_NONE || cause == TERN_REFUSED_SHUTDOWN ||
            cause == TERN_REFUSED_THREADS)
            violation("loop %d: -EAGAIN with cause %s", ls->index, tern_refusal_name(cause));
        if (cause == TERN_REFUSED_OWNER_CAP) {
            w->refused++;
            atomic_fetch_add(&ls->refused_cap, 1);
        } else {
            atomic_fetch_add(&ls->refused_other, 1);
        }
    } else {
        violation("loop %d: tern_submit_with: %s", ls->index, tern_err_name(rc));
    }
    if (w != NULL)
        owner_check(ls, o, "after a submission");
}

static void submit_final(struct loop_state *ls, unsigned k)
{
    struct job_rec *j = job_new(ls);
    j->final = true;
    tern_occupancy occ = k % 2 ? TERN_LONG : TERN_BOUNDED;
    int rc = tern_submit_with(ls->loop, occ, work, done, j, NULL, &j->id);
    if (rc != 0) {
        violation("loop %d: a final job was refused: %s (%s)", ls->index, tern_err_name(rc),
                  tern_refusal_name(tern_loop_last_refusal(ls->loop)));
        return;
    }
    ls->njobs++;
}

static unsigned in_flight_total(struct loop_state *ls)
{
    unsigned n = 0;
    for (unsigned i = 0; i < ls->njobs; i++)
        n += atomic_load(&ls->jobs[i].dones) == 0;
    return n;
}

static void tick(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id;
    struct loop_state *ls = arg;
    switch (ls->phase) {
    case CHURN:
        for (int a = 0; a < ACTIONS_PER_TICK && ls->attempts < ATTEMPTS; a++, ls->attempts++) {
            uint64_t r = stress_below(&ls->rng, 100);
            int o = (int)stress_below(&ls->rng, OWNERS);
            if (r < 75)
                submit_one(ls);
            else if (r < 85)
                owner_close(ls, o); /* races its jobs' completions */
            else if (r < 92)
                owner_check(ls, o, "checked");
            else if (!ls->owners[o].open)
                owner_open(ls, o);
        }
        /* Once settled (nothing in flight), this loop waits for the others. */
        if (ls->attempts == ATTEMPTS && in_flight_total(ls) == 0) {
            ls->phase = SETTLED;
            atomic_fetch_add(&loops_settled, 1);
        }
        return;
    case SETTLED:
        /*
         * The final jobs go in once every loop has settled: before that
         * they would hold the workers while another loop's queued jobs
         * (which it waits for) could not run until the shutdown, which
         * waits for the finals.
         */
        if (atomic_load(&loops_settled) != LOOPS)
            return;
        for (unsigned k = 0; k < FINAL_JOBS; k++)
            submit_final(ls, k);
        ls->phase = FINAL_IN;
        atomic_store(&ls->finals_submitted, true);
        return;
    case FINAL_IN:
        if (!atomic_load(&shutdown_begun))
            return;
        ls->phase = DRAIN;
        return;
    case DRAIN:
        if (in_flight_total(ls) != 0)
            return;
        for (int o = 0; o < OWNERS; o++)
            owner_close(ls, o);
        tern_timer_stop(ls->loop, ls->tick);
        atomic_store(&ls->finished, true);
        return;
    }
}

static void *loop_main(void *arg)
{
    struct loop_state *ls = arg;
    while (!atomic_load(&ls->finished))
        tern_loop_run_once(ls->loop, (int64_t)(2 * STRESS_MS));
    return NULL;
}

/* ------------------------------------------------------------------ */
/* The foreign canceller                                               */
/* ------------------------------------------------------------------ */

static void *canceller(void *arg)
{
    (void)arg;
    uint64_t rng = stress_seed(100);
    while (!atomic_load(&cancelling_stop)) {
        struct loop_state *ls = &loops[stress_below(&rng, LOOPS)];
        uint64_t v = atomic_load(&ls->published[stress_below(&rng, PUBLISHED)]);
        if (v != 0) {
            struct job_rec *j = &ls->jobs[v - 1];
            /* Marked first: the cancel may take effect before it returns. */
            atomic_store(&j->cancel_asked, true);
            int rc = tern_cancel(ls->loop, j->id);
            if (rc < 0 && rc != -ENOENT)
                atomic_fetch_add(&foreign_bad, 1);
            atomic_fetch_add(&foreign_cancels, 1);
        }
        struct timespec ts = {0, (long)(20000 + stress_below(&rng, 100000))};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void report(void)
{
    for (int i = 0; i < LOOPS; i++) {
        struct loop_state *ls = &loops[i];
        printf("  loop %d: attempts %u, phase %d, finals in %d, finished %d, refused cap %u "
               "other %u, done ok %u cancelled %u timed out %u, owner closes %u\n",
               i, ls->attempts, (int)ls->phase, atomic_load(&ls->finals_submitted),
               atomic_load(&ls->finished), atomic_load(&ls->refused_cap),
               atomic_load(&ls->refused_other), atomic_load(&ls->done_ok),
               atomic_load(&ls->done_cancelled), atomic_load(&ls->done_timedout),
               atomic_load(&ls->closes));
    }
    printf("  foreign cancels %u (bad returns %u), violations %u\n", atomic_load(&foreign_cancels),
           atomic_load(&foreign_bad), atomic_load(&violations));
}

int main(void)
{
    stress_init("owner_stress", DEFAULT_SEED);
    stress_on_report(report);
    tern_pool_config cfg;
    tern_pool_config_init(&cfg);
    cfg.threads = 2;
    cfg.queue_capacity = 8; /* small: queue_full refusals too */
    cfg.long_threads_max = LOOPS * FINAL_JOBS; /* room for every final long job */
    if (tern_pool_start(&cfg) != 0) {
        printf("owner_stress: cannot start the pool\n0 passed, 1 failed\n");
        return 1;
    }
    for (int i = 0; i < LOOPS; i++) {
        struct loop_state *ls = &loops[i];
        ls->index = i;
        ls->rng = stress_seed((uint64_t)i + 1);
        ls->jobs = calloc(ATTEMPTS + FINAL_JOBS, sizeof *ls->jobs);
        tern_loop_options o;
        tern_loop_options_init(&o);
        o.max_undelivered = 12; /* small, so this cause meets the others */
        if (ls->jobs == NULL || tern_loop_new(&ls->loop, &o) != 0 ||
            tern_timer_start(ls->loop, TICK_NS, TICK_NS, tick, ls, &ls->tick) != 0) {
            printf("owner_stress: cannot set up loop %d\n0 passed, 1 failed\n", i);
            return 1;
        }
        stress_watch_loop(ls->loop, "owner loop");
    }
    stress_phase("churn: owners, deadlines and foreign cancels on every loop", 300 * STRESS_SEC);
    pthread_t cancel_thread;
    pthread_create(&cancel_thread, NULL, canceller, NULL);
    for (int i = 0; i < LOOPS; i++)
        pthread_create(&loops[i].thread, NULL, loop_main, &loops[i]);
    for (int i = 0; i < LOOPS; i++)
        while (!atomic_load(&loops[i].finals_submitted)) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL); /* the phase's watchdog bounds this wait */
        }
    atomic_store(&cancelling_stop, true);
    pthread_join(cancel_thread, NULL);

    stress_phase("a cancelling pool shutdown with the final jobs in the pool", 120 * STRESS_SEC);
    atomic_store(&shutdown_begun, true);
    int rc = tern_pool_shutdown(TERN_POOL_CANCEL, 60 * STRESS_SEC);
    STRESS_CHECK(rc == 0, "tern_pool_shutdown(TERN_POOL_CANCEL) returned %s", tern_err_name(rc));

    stress_phase("every loop delivers what it owes and closes its owners", 120 * STRESS_SEC);
    for (int i = 0; i < LOOPS; i++)
        pthread_join(loops[i].thread, NULL);

    unsigned accepted = 0, dones = 0, not_once = 0, ok = 0, cancelled = 0, timed = 0;
    unsigned cap_refusals = 0, other_refusals = 0, closes = 0;
    for (int i = 0; i < LOOPS; i++) {
        struct loop_state *ls = &loops[i];
        for (unsigned k = 0; k < ls->njobs; k++) {
            unsigned d = atomic_load(&ls->jobs[k].dones);
            dones += d;
            not_once += d != 1;
        }
        accepted += ls->njobs;
        ok += atomic_load(&ls->done_ok);
        cancelled += atomic_load(&ls->done_cancelled);
        timed += atomic_load(&ls->done_timedout);
        cap_refusals += atomic_load(&ls->refused_cap);
        other_refusals += atomic_load(&ls->refused_other);
        closes += atomic_load(&ls->closes);
        tern_loop_stats s;
        tern_loop_stats_get(ls->loop, &s);
        STRESS_CHECK(s.live_operations == 0 && s.undelivered == 0,
                     "loop %d: nothing live (%u) and no credit held (%u) at the end", i,
                     s.live_operations, s.undelivered);
    }
    STRESS_CHECK(not_once == 0, "every accepted job got exactly one done (%u jobs, %u dones, "
                 "%u not once)", accepted, dones, not_once);
    STRESS_CHECK(ok + cancelled + timed == accepted,
                 "dones by status: %u ok + %u cancelled + %u timed out = %u accepted", ok,
                 cancelled, timed, accepted);
    STRESS_CHECK(atomic_load(&violations) == 0, "no violation of the contract (%u; first: %s)",
                 atomic_load(&violations), atomic_load(&violations) ? first_violation : "none");
    STRESS_CHECK(atomic_load(&foreign_bad) == 0,
                 "every foreign cancel returned an outcome or -ENOENT (%u cancels)",
                 atomic_load(&foreign_cancels));
    /* The run reached what it is for (with the default seeds these are all in the hundreds). */
    STRESS_CHECK(cap_refusals > 0 && timed > 0 && closes > 0 && cancelled > 0,
                 "the run met owner caps (%u refusals), deadlines (%u), owner closes (%u) and "
                 "cancels (%u); other refusals %u", cap_refusals, timed, closes, cancelled,
                 other_refusals);
    tern_pool_stats ps;
    tern_pool_stats_get(&ps);
    STRESS_CHECK(ps.submitted == ps.completed + ps.cancelled + ps.timed_out,
                 "the pool owes nothing: submitted %" PRIu64 " = completed %" PRIu64
                 " + cancelled %" PRIu64 " + timed out %" PRIu64, ps.submitted, ps.completed,
                 ps.cancelled, ps.timed_out);
    stress_phase("tern_loop_free", 60 * STRESS_SEC);
    for (int i = 0; i < LOOPS; i++) {
        stress_loop_free(loops[i].loop);
        free(loops[i].jobs);
    }
    stress_phase_end();
    return stress_summary();
}
