/*
 * credit_race_stress: the "credit race" (loop-only submissions on an
 * unclaimed loop against foreign cancels), and variants.
 *
 * Loops, each run by its own thread, share the default pool. Each submits
 * its jobs (90 % TERN_BOUNDED, 10 % TERN_LONG, all tiny), keeping IN_FLIGHT
 * in flight by submitting again from done. The first IN_FLIGHT of every
 * round are submitted by the loop's own thread BEFORE it calls
 * tern_loop_run: a loop-only call on an unclaimed loop, which is allowed.
 * That window is where the race lives: a foreign tern_cancel that finds
 * the loop unclaimed used to claim it and resolve the cancel itself
 * (releasing the job's undelivered credit) while the loop thread's
 * tern_submit bumped the same counter unlocked; one of the two updates is
 * lost and the counter ends at -1, -2 (wrapped to 4294967295...) or +1.
 * A wrapped counter makes tern_loop_free spin forever, a leaked one makes
 * it wait for a completion that never comes.
 *
 * About 20 % of the jobs are cancelled: 5 % by the loop thread right after
 * tern_submit, 5 % by the loop thread ~240 submissions later (the job may
 * be live or delivered by then), 10 % by foreign canceller threads calling
 * tern_cancel(loop, id); the loop thread hands them the ids through one
 * single-producer ring per (loop, canceller).
 *
 * Checked: every accepted job gets exactly one done, with status 0 or
 * -ECANCELED; after each round tern_loop_run returned 0 and the loop's
 * stats say undelivered == 0 and live_operations == 0; then the main
 * thread stops the cancellers and frees each loop, each free bounded by
 * the watchdog (a free that hangs prints the loop's books and fails).
 *
 * Variants (argv[1] or TERN_CREDIT_VARIANT):
 *   shape          2 loops, 1 canceller: the race's first known shape.
 *   loops4         4 loops.
 *   cancellers3    3 foreign cancellers.
 *   first-dequeue  30 % of jobs cancelled by a foreign thread the moment the
 *                  id exists (the canceller spins on its ring), racing the
 *                  worker's first dequeue and the unclaimed window.
 *   long-handover  40 % long jobs, each cancelled at once (half by the
 *                  foreign canceller, half by the loop thread): a job
 *                  handed to a long worker and cancelled in the handover.
 * Counts: TERN_CREDIT_JOBS jobs per loop (default 100,000) in
 * TERN_CREDIT_ROUNDS rounds (default 20; each round opens the unclaimed
 * window again, so more rounds find the race more often;
 * TERN_CREDIT_ROUNDS=1 is one window). Under ThreadSanitizer
 * the defaults are 10,000 jobs in 10 rounds. A loop whose books
 * break after a round stops there (the next round would only repeat it).
 * Seed: TERN_SEED (default 0xc4ed17): the job mix and cancel choices;
 * thread interleaving still varies run to run.
 */
#include "stress.h"

#define DEFAULT_SEED UINT64_C(0xc4ed17)
#define MAX_LOOPS 4
#define MAX_CANCELLERS 3
#define IN_FLIGHT 256
#define LATER 240        /* the loop's second cancel comes this many submissions later */
#define RING 4096        /* ids in one (loop, canceller) ring */
#define RUN_DEADLINE (UINT64_C(120) * STRESS_SEC)
#define FREE_DEADLINE (UINT64_C(20) * STRESS_SEC)

struct variant {
    const char *name;
    unsigned loops, cancellers;
    unsigned long_pct;      /* of all jobs */
    unsigned foreign_pct;   /* cancelled by a foreign thread */
    unsigned now_pct;       /* cancelled by the loop thread right after submit */
    unsigned later_pct;     /* cancelled by the loop thread LATER submissions on */
    bool foreign_at_once;   /* the canceller cancels without a random delay */
    bool long_at_once;      /* every long job is cancelled at once */
};

static const struct variant variants[] = {
    {"shape", 2, 1, 10, 10, 5, 5, false, false},
    {"loops4", 4, 1, 10, 10, 5, 5, false, false},
    {"cancellers3", 2, 3, 10, 10, 5, 5, false, false},
    {"first-dequeue", 2, 2, 10, 30, 5, 0, true, false},
    {"long-handover", 2, 1, 40, 10, 5, 0, true, true},
};

static const struct variant *v;
static unsigned jobs_per_loop, rounds;

/* One per job: written by its loop thread (done), read by main at the end. */
struct rec {
    atomic_uint done;
    int status;
    bool accepted;
    bool is_long;
};

/* A single-producer, single-consumer ring of ids: the loop thread pushes,
 * one canceller pops. Release on the producer's tail store pairs with the
 * consumer's acquire load of it, so the id in the slot is visible; the
 * consumer's release head store pairs with the producer's acquire load,
 * so a slot is not overwritten before it was read. */
struct ring {
    _Alignas(64) atomic_uint_fast64_t head;
    _Alignas(64) atomic_uint_fast64_t tail;
    tern_id ids[RING];
};

struct lp {
    unsigned index;
    char name[16];
    tern_loop *loop;
    pthread_t thread;
    struct rec *recs;
    uint64_t rng;
    size_t next;         /* next record to submit */
    size_t round_end;    /* records of this round end here */
    unsigned in_flight;
    tern_id later[LATER]; /* ids to cancel LATER submissions on, by submission index */
    /* Loop-thread counters, read by main after the join (and by the report). */
    atomic_uint_fast64_t accepted, refused, done, cancels_now, cancels_later, later_enoent;
    atomic_uint_fast64_t handed, hand_full, errors;
    /* The first bad book seen after a round, for the report. */
    int bad_round, bad_rc;
    unsigned bad_undelivered, bad_live;
    atomic_bool finished;
};

static struct lp loops[MAX_LOOPS];
static struct ring rings[MAX_LOOPS][MAX_CANCELLERS];
static atomic_bool stop_cancellers;
static atomic_uint_fast64_t foreign_cancels, foreign_ok, foreign_enoent, foreign_bad;

static void loop_error(struct lp *lp, const char *what, size_t index, int rc)
{
    if (atomic_fetch_add(&lp->errors, 1) < 10)
        printf("%s: %s (job %zu, rc %s)\n", lp->name, what, index, tern_err_name(rc));
}

static void *work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

static void submit_more(struct lp *lp);

static void done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)result;
    struct rec *r = arg;
    struct lp *lp = &loops[0];
    while (r < lp->recs || r >= lp->recs + jobs_per_loop)
        lp++;
    if (atomic_fetch_add(&r->done, 1) != 0)
        loop_error(lp, "done ran twice", (size_t)(r - lp->recs), status);
    r->status = status;
    if (status != 0 && status != -ECANCELED)
        loop_error(lp, "done status neither 0 nor -ECANCELED", (size_t)(r - lp->recs), status);
    lp->in_flight--;
    atomic_fetch_add_explicit(&lp->done, 1, memory_order_relaxed);
    submit_more(lp);
}

static void hand_to_canceller(struct lp *lp, tern_id id)
{
    struct ring *ring = &rings[lp->index][stress_below(&lp->rng, v->cancellers)];
    uint64_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
    /* Pairs with the canceller's release store of head. */
    if (tail - atomic_load_explicit(&ring->head, memory_order_acquire) >= RING) {
        atomic_fetch_add(&lp->hand_full, 1);
        return;
    }
    ring->ids[tail % RING] = id;
    /* Pairs with the canceller's acquire load of tail. */
    atomic_store_explicit(&ring->tail, tail + 1, memory_order_release);
    atomic_fetch_add_explicit(&lp->handed, 1, memory_order_relaxed);
}

/* One submission, with the cancel decisions made for it. */
static bool submit_one(struct lp *lp)
{
    size_t index = lp->next;
    struct rec *r = &lp->recs[index];
    tern_id id = 0;
    int rc = tern_submit(lp->loop, r->is_long ? TERN_LONG : TERN_BOUNDED, work, done, r, &id);
    if (rc == -EAGAIN) {
        atomic_fetch_add(&lp->refused, 1);
        return false;
    }
    if (rc != 0 || id == 0) {
        loop_error(lp, "tern_submit failed", index, rc);
        return false;
    }
    r->accepted = true;
    lp->next++;
    lp->in_flight++;
    atomic_fetch_add_explicit(&lp->accepted, 1, memory_order_relaxed);

    /* The cancel LATER submissions ago, if one was planned (the slot is
     * this submission's index modulo LATER). */
    tern_id *slot = &lp->later[index % LATER];
    if (*slot != 0) {
        int crc = tern_cancel(lp->loop, *slot);
        /* Stopped, running, finished (TERN_CANCEL_*), or already delivered. */
        if (crc == -ENOENT)
            atomic_fetch_add(&lp->later_enoent, 1);
        else if (crc < 0)
            loop_error(lp, "the later cancel failed with neither an outcome nor -ENOENT", index,
                       crc);
        atomic_fetch_add(&lp->cancels_later, 1);
        *slot = 0;
    }

    unsigned pick = (unsigned)stress_below(&lp->rng, 100);
    bool long_now = r->is_long && v->long_at_once;
    if (long_now ? stress_below(&lp->rng, 2) == 0 : pick < v->now_pct) {
        /* An outcome; REQUESTED before tern_loop_run, when nobody runs the loop. */
        int crc = tern_cancel(lp->loop, id);
        if (crc < 0)
            loop_error(lp, "cancelling a job just submitted failed", index, crc);
        atomic_fetch_add(&lp->cancels_now, 1);
    } else if (long_now || pick < v->now_pct + v->foreign_pct) {
        hand_to_canceller(lp, id);
    } else if (pick < v->now_pct + v->foreign_pct + v->later_pct) {
        *slot = id;
    }
    return true;
}

static void retry(tern_loop *loop, void *arg)
{
    (void)loop;
    submit_more(arg);
}

/* Keeps IN_FLIGHT jobs in flight until the round's records are all taken.
 * A refusal (not expected with the default pool; counted) retries from a
 * deferred function, which also keeps tern_loop_run from returning early. */
static void submit_more(struct lp *lp)
{
    while (lp->in_flight < IN_FLIGHT && lp->next < lp->round_end)
        if (!submit_one(lp)) {
            if (tern_defer(lp->loop, retry, lp) != 0)
                loop_error(lp, "tern_defer for a retry failed", lp->next, 0);
            return;
        }
}

static void *loop_main(void *arg)
{
    struct lp *lp = arg;
    for (unsigned round = 0; round < rounds; round++) {
        lp->round_end = (size_t)jobs_per_loop * (round + 1) / rounds;
        while (lp->next < lp->round_end) {
            /* Unclaimed: the loop thread submits before it runs the loop,
             * while the cancellers already call tern_cancel on it. */
            submit_more(lp);
            int rc = tern_loop_run(lp->loop);
            tern_loop_stats s;
            tern_loop_stats_get(lp->loop, &s);
            if ((rc != 0 || s.undelivered != 0 || s.live_operations != 0) && lp->bad_round == 0) {
                lp->bad_round = (int)round + 1;
                lp->bad_rc = rc;
                lp->bad_undelivered = s.undelivered;
                lp->bad_live = s.live_operations;
                printf("%s: after round %u tern_loop_run returned %d with undelivered %u, "
                       "live_operations %u\n", lp->name, round, rc, s.undelivered,
                       s.live_operations);
            }
            if (lp->bad_round != 0)
                break; /* a broken book makes the next round meaningless */
        }
        if (lp->bad_round != 0)
            break;
    }
    atomic_store(&lp->finished, true);
    return NULL;
}

static void *canceller_main(void *arg)
{
    unsigned c = (unsigned)(uintptr_t)arg;
    uint64_t rng = stress_seed(100 + c);
    while (!atomic_load(&stop_cancellers)) {
        bool any = false;
        for (unsigned k = 0; k < v->loops; k++) {
            struct ring *ring = &rings[k][c];
            uint64_t head = atomic_load_explicit(&ring->head, memory_order_relaxed);
            /* Pairs with the loop thread's release store of tail. */
            if (head == atomic_load_explicit(&ring->tail, memory_order_acquire))
                continue;
            tern_id id = ring->ids[head % RING];
            /* Pairs with the loop thread's acquire load of head. */
            atomic_store_explicit(&ring->head, head + 1, memory_order_release);
            any = true;
            if (!v->foreign_at_once)
                for (volatile unsigned spin = (unsigned)stress_below(&rng, 4000); spin > 0; spin--)
                    ;
            int rc = tern_cancel(loops[k].loop, id);
            atomic_fetch_add(&foreign_cancels, 1);
            if (rc == TERN_CANCEL_REQUESTED) /* always queued from here */
                atomic_fetch_add(&foreign_ok, 1);
            else if (rc == -ENOENT)
                atomic_fetch_add(&foreign_enoent, 1);
            else if (rc != -ENOMEM)
                atomic_fetch_add(&foreign_bad, 1);
        }
        if (!any)
            sched_yield(); /* still a spin when nothing else is runnable */
    }
    return NULL;
}

static void report(void)
{
    for (unsigned k = 0; k < v->loops; k++) {
        struct lp *lp = &loops[k];
        printf("  %s: finished %d, accepted %" PRIu64 ", done %" PRIu64 ", refused %" PRIu64
               ", cancels now %" PRIu64 " later %" PRIu64 " (-ENOENT %" PRIu64 "), handed %"
               PRIu64 " (ring full %" PRIu64 "), errors %" PRIu64 "\n",
               lp->name, atomic_load(&lp->finished), (uint64_t)atomic_load(&lp->accepted),
               (uint64_t)atomic_load(&lp->done), (uint64_t)atomic_load(&lp->refused),
               (uint64_t)atomic_load(&lp->cancels_now), (uint64_t)atomic_load(&lp->cancels_later),
               (uint64_t)atomic_load(&lp->later_enoent), (uint64_t)atomic_load(&lp->handed),
               (uint64_t)atomic_load(&lp->hand_full), (uint64_t)atomic_load(&lp->errors));
    }
    printf("  foreign cancels %" PRIu64 ": 0 %" PRIu64 ", -ENOENT %" PRIu64 ", other %" PRIu64 "\n",
           (uint64_t)atomic_load(&foreign_cancels), (uint64_t)atomic_load(&foreign_ok),
           (uint64_t)atomic_load(&foreign_enoent), (uint64_t)atomic_load(&foreign_bad));
}

static unsigned env_count(const char *name, unsigned fallback)
{
    const char *s = getenv(name);
    unsigned long n = s != NULL ? strtoul(s, NULL, 0) : 0;
    return n > 0 ? (unsigned)n : fallback;
}

int main(int argc, char **argv)
{
    stress_init("credit_race_stress", DEFAULT_SEED);
    const char *want = argc > 1 ? argv[1] : getenv("TERN_CREDIT_VARIANT");
    v = &variants[0];
    if (want != NULL) {
        v = NULL;
        for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++)
            if (strcmp(want, variants[i].name) == 0)
                v = &variants[i];
        if (v == NULL) {
            printf("credit_race_stress: unknown variant %s\n0 passed, 1 failed\n", want);
            return 1;
        }
    }
#ifdef STRESS_UNDER_TSAN
    /* TSan looks for the unordered accesses themselves, which the first
     * rounds already make; the full count would cost CI minutes. */
    jobs_per_loop = env_count("TERN_CREDIT_JOBS", 10000);
    rounds = env_count("TERN_CREDIT_ROUNDS", 10);
#else
    jobs_per_loop = env_count("TERN_CREDIT_JOBS", 100000);
    rounds = env_count("TERN_CREDIT_ROUNDS", 20);
#endif
    if (rounds > jobs_per_loop)
        rounds = jobs_per_loop;
    printf("credit_race_stress: variant %s: %u loops x %u jobs in %u rounds, %u in flight, "
           "%u%% long, cancels %u%% now + %u%% later + %u%% foreign (%u cancellers%s)\n",
           v->name, v->loops, jobs_per_loop, rounds, IN_FLIGHT, v->long_pct, v->now_pct,
           v->later_pct, v->foreign_pct, v->cancellers, v->foreign_at_once ? ", at once" : "");
    stress_on_report(report);

    for (unsigned k = 0; k < v->loops; k++) {
        struct lp *lp = &loops[k];
        lp->index = k;
        snprintf(lp->name, sizeof lp->name, "loop %u", k);
        lp->rng = stress_seed(k + 1);
        lp->recs = calloc(jobs_per_loop, sizeof *lp->recs);
        if (lp->recs == NULL) {
            printf("out of memory\n0 passed, 1 failed\n");
            return 1;
        }
        for (size_t i = 0; i < jobs_per_loop; i++)
            lp->recs[i].is_long = stress_below(&lp->rng, 100) < v->long_pct;
        int rc = tern_loop_new(&lp->loop, NULL);
        if (rc != 0) {
            printf("tern_loop_new: %s\n0 passed, 1 failed\n", tern_err_name(rc));
            return 1;
        }
        stress_watch_loop(lp->loop, lp->name);
    }

    stress_phase("every loop runs all its jobs (tern_loop_run returns 0 each round)",
                 RUN_DEADLINE);
    uint64_t t0 = stress_now();
    pthread_t cancellers[MAX_CANCELLERS];
    for (uintptr_t c = 0; c < v->cancellers; c++)
        pthread_create(&cancellers[c], NULL, canceller_main, (void *)c);
    for (unsigned k = 0; k < v->loops; k++)
        pthread_create(&loops[k].thread, NULL, loop_main, &loops[k]);
    for (unsigned k = 0; k < v->loops; k++)
        pthread_join(loops[k].thread, NULL);
    double secs = (double)(stress_now() - t0) / 1e9;

    stress_phase("the cancellers stop", 30 * STRESS_SEC);
    atomic_store(&stop_cancellers, true);
    for (unsigned c = 0; c < v->cancellers; c++)
        pthread_join(cancellers[c], NULL);

    /* The books, before the frees (a broken one may make a free hang). */
    uint64_t accepted = 0, missing = 0, twice = 0, bad_status = 0, cancelled = 0, errors = 0;
    for (unsigned k = 0; k < v->loops; k++) {
        struct lp *lp = &loops[k];
        if (lp->bad_round == 0)
            STRESS_CHECK(true, "%s: after every round tern_loop_run returned 0 with undelivered 0 "
                         "and live_operations 0", lp->name);
        else
            STRESS_CHECK(false, "%s: after round %d tern_loop_run returned %d with undelivered %u "
                         "(a lost or wrapped credit), live_operations %u", lp->name,
                         lp->bad_round - 1, lp->bad_rc, lp->bad_undelivered, lp->bad_live);
        for (size_t i = 0; i < jobs_per_loop; i++) {
            struct rec *r = &lp->recs[i];
            unsigned d = atomic_load(&r->done);
            if (!r->accepted) {
                twice += d != 0;
                continue;
            }
            accepted++;
            missing += d == 0;
            twice += d > 1;
            if (d != 0 && r->status != 0 && r->status != -ECANCELED)
                bad_status++;
            cancelled += d != 0 && r->status == -ECANCELED;
        }
        errors += atomic_load(&lp->errors);
    }
    uint64_t expected = (uint64_t)jobs_per_loop * v->loops;
    printf("credit_race_stress: %.2f s: %" PRIu64 " of %" PRIu64 " jobs accepted, %" PRIu64
           " cancelled\n", secs, accepted, expected, cancelled);
    report();
    STRESS_CHECK(accepted == expected,
                 "every job was submitted and accepted (%" PRIu64 " of %" PRIu64 ")", accepted,
                 expected);
    STRESS_CHECK(missing == 0, "every accepted job got its done (%" PRIu64 " missing)", missing);
    STRESS_CHECK(twice == 0, "no job got two dones, no refused job got one (%" PRIu64 ")", twice);
    STRESS_CHECK(bad_status == 0, "every status is 0 or -ECANCELED (%" PRIu64 " not)", bad_status);
    STRESS_CHECK(errors == 0, "no call failed on the loop threads (%" PRIu64 ")", errors);
    STRESS_CHECK(atomic_load(&foreign_bad) == 0, "foreign cancels returned 0, -ENOENT or -ENOMEM");
    STRESS_CHECK(atomic_load(&foreign_cancels) > 0 && cancelled > 0, "cancels happened");

    for (unsigned k = 0; k < v->loops; k++) {
        static char what[MAX_LOOPS][96];
        snprintf(what[k], sizeof what[k], "tern_loop_free(%s) returns", loops[k].name);
        stress_phase(what[k], FREE_DEADLINE);
        stress_loop_free(loops[k].loop);
        free(loops[k].recs);
    }
    stress_phase("tern_pool_shutdown(DRAIN)", 60 * STRESS_SEC);
    int rc = tern_pool_shutdown(TERN_POOL_DRAIN, 30 * STRESS_SEC);
    STRESS_CHECK(rc == 0, "the pool drains and shuts down (%s)", tern_err_name(rc));
    stress_phase_end();
    return stress_summary();
}
