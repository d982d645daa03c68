/*
 * overflow_stress: the pool's watchdog and its overflow workers under
 * load (tern_pool_watch, docs/pool.md, "Stalled work").
 *
 * Three loops, each on its own thread, submit rounds of bounded jobs to a
 * pool of two workers whose watchdog has a short stall bound (20 ms) and
 * idle bound (30 ms), so overflow workers start and retire many times in
 * one run. A job is one of:
 *   short     returns at once;
 *   blocker   reads one byte from a pipe this program holds, so it runs
 *             until the main thread writes that byte: the main thread
 *             holds every blocker either briefly or past the stall bound
 *             (drawn from the seed), then lets it go;
 *   deadline  a blocker submitted with a timeout of 5..40 ms: it times out
 *             in the queue, or runs, or both;
 * and a share of the jobs already submitted is cancelled right away.
 * Nothing waits on a sleep: blockers end when the main thread writes, and
 * the main thread writes only for blockers it has seen start.
 *
 * Checks: every accepted job's done runs exactly once with a status its
 * kind allows; the program's tallies equal the pool's counters
 * (submitted = completed + cancelled + timed out, each one equal); stalls
 * were counted and overflow workers started and retired in several
 * rounds; after the idle bound none is left and started = retired; the
 * pool's drain shutdown succeeds. Bounded: 12 rounds of 3 x 40 jobs.
 */
#include "stress.h"

#define LOOPS 3
#define ROUNDS 12
#define JOBS 40          /* per loop per round */
#define STALL_MS 20      /* the watchdog's stall bound */
#define IDLE_MS 30       /* an idle overflow worker retires after this */
#define OVERFLOW_MAX 4

enum kind { SHORT, BLOCKER, DEADLINE };

struct rec {
    enum kind kind;
    tern_id id;
    int status;
    _Atomic unsigned dones;
};

struct looper {
    unsigned index;
    pthread_t thread;
    tern_loop *loop;
    uint64_t rng;
    struct rec recs[JOBS];
    unsigned accepted; /* this round */
};

static struct looper loopers[LOOPS];
static pthread_barrier_t round_start, round_end;
static atomic_uint finished;           /* loops done with the current round */
static atomic_uint blockers_started;   /* ever: blockers (and deadlines) whose work began */
static int release[2];                 /* the pipe blockers read one byte from */
static atomic_bool quitting;

/* The program's own tallies, over the whole run (loop threads add). */
static atomic_ullong n_accepted, n_refused, n_ok, n_cancelled, n_timed_out, n_bad, n_cancels;

static void *short_work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

static void *block_work(tern_job *job, void *arg)
{
    (void)job;
    atomic_fetch_add(&blockers_started, 1);
    char c;
    ssize_t r;
    while ((r = read(release[0], &c, 1)) < 0 && errno == EINTR) {
    }
    if (r != 1)
        stress_fail_now("a blocker could not read its byte from the release pipe");
    return arg;
}

static void job_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop;
    (void)id;
    (void)result;
    struct rec *r = arg;
    r->status = status;
    atomic_fetch_add(&r->dones, 1);
    if (status == 0)
        atomic_fetch_add(&n_ok, 1);
    else if (status == -ECANCELED)
        atomic_fetch_add(&n_cancelled, 1);
    else if (status == -ETIMEDOUT && r->kind == DEADLINE)
        atomic_fetch_add(&n_timed_out, 1);
    else
        atomic_fetch_add(&n_bad, 1);
}

/* One round on one loop: submit, cancel some, run until every done came. */
static void loop_round(struct looper *l)
{
    l->accepted = 0;
    for (unsigned i = 0; i < JOBS; i++) {
        struct rec *r = &l->recs[i];
        uint64_t draw = stress_below(&l->rng, 100);
        r->kind = draw < 55 ? SHORT : draw < 85 ? BLOCKER : DEADLINE;
        r->status = 1; /* no done yet */
        atomic_store(&r->dones, 0);
        tern_job_options opts;
        tern_job_options_init(&opts);
        if (r->kind == DEADLINE)
            opts.timeout_ns = (5 + stress_below(&l->rng, 36)) * STRESS_MS;
        int rc = tern_submit_with(l->loop, TERN_BOUNDED, r->kind == SHORT ? short_work : block_work,
                                  job_done, r, &opts, &r->id);
        if (rc == -EAGAIN) {
            r->kind = SHORT;
            atomic_store(&r->dones, 1); /* refused: no done owed */
            atomic_fetch_add(&n_refused, 1);
            continue;
        }
        if (rc < 0)
            STRESS_CHECK(false, "loop %u: submit says %d", l->index, rc);
        l->accepted++;
        atomic_fetch_add(&n_accepted, 1);
        /* Now and then cancel one of this round's jobs so far: queued,
         * running (a blocker: it learns it, and still waits for its byte)
         * or finished. */
        if (stress_below(&l->rng, 100) < 15) {
            struct rec *victim = &l->recs[stress_below(&l->rng, i + 1)];
            if (atomic_load(&victim->dones) == 0) {
                (void)tern_cancel(l->loop, victim->id);
                atomic_fetch_add(&n_cancels, 1);
            }
        }
    }
    int rc = tern_loop_run(l->loop); /* returns once nothing live remains */
    if (rc < 0)
        STRESS_CHECK(false, "loop %u: tern_loop_run says %d", l->index, rc);
    unsigned wrong = 0;
    for (unsigned i = 0; i < JOBS; i++)
        wrong += atomic_load(&l->recs[i].dones) != 1;
    if (wrong != 0)
        STRESS_CHECK(false, "loop %u: %u jobs did not get exactly one done", l->index, wrong);
}

static void *loop_main(void *arg)
{
    struct looper *l = arg;
    int rc = tern_loop_new(&l->loop, NULL);
    if (rc < 0)
        stress_fail_now("tern_loop_new failed");
    stress_watch_loop(l->loop, "submitter");
    for (;;) {
        pthread_barrier_wait(&round_start);
        if (atomic_load(&quitting))
            break;
        loop_round(l);
        atomic_fetch_add(&finished, 1);
        pthread_barrier_wait(&round_end);
    }
    stress_loop_free(l->loop);
    return NULL;
}

static void write_bytes(unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        ssize_t w;
        while ((w = write(release[1], "x", 1)) < 0 && errno == EINTR) {
        }
        if (w != 1)
            stress_fail_now("cannot write to the release pipe");
    }
}

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

/*
 * While the loops run a round: each time blockers have started that have
 * no byte yet, hold them (briefly, or past the stall bound), then write
 * one byte for each. The hold is the blockers' run time, not a wait for
 * anything: every wait here is on a counter.
 */
static void release_round(uint64_t *rng, unsigned *held_long)
{
    static unsigned released;
    while (atomic_load(&finished) < LOOPS) {
        unsigned started = atomic_load(&blockers_started);
        if (started == released) {
            sched_yield();
            continue;
        }
        bool long_hold = stress_below(rng, 2) == 0;
        *held_long += long_hold;
        sleep_ms(long_hold ? 2 * STALL_MS + stress_below(rng, STALL_MS) : stress_below(rng, 3));
        write_bytes(started - released);
        released = started;
    }
}

static void report(void)
{
    tern_pool_stats p = stress_pool_stats();
    printf("  program: accepted %llu refused %llu ok %llu cancelled %llu timed_out %llu bad %llu;"
           " blockers started %u; finished %u\n"
           "  pool: stalls %" PRIu64 " overflow started %" PRIu64 " retired %" PRIu64
           " now %u timed_out %" PRIu64 "\n",
           atomic_load(&n_accepted), atomic_load(&n_refused), atomic_load(&n_ok),
           atomic_load(&n_cancelled), atomic_load(&n_timed_out), atomic_load(&n_bad),
           atomic_load(&blockers_started), atomic_load(&finished), p.stalls, p.overflow_started,
           p.overflow_retired, p.overflow_now, p.timed_out);
}

/* Poll (inside a phase) until no overflow worker is alive. */
static void wait_retired(void)
{
    while (stress_pool_stats().overflow_now != 0)
        sleep_ms(1);
}

int main(void)
{
    stress_init("overflow_stress", UINT64_C(0x5eed0f10));
    stress_on_report(report);
    if (pipe(release) < 0) {
        printf("pipe: %s\n0 passed, 1 failed\n", strerror(errno));
        return 1;
    }
    tern_pool_watch w;
    tern_pool_watch_init(&w);
    w.stall_ns = STALL_MS * STRESS_MS;
    w.overflow_max = OVERFLOW_MAX;
    w.overflow_idle_ns = IDLE_MS * STRESS_MS;
    STRESS_CHECK(tern_pool_watch_set(&w) == 0, "the watchdog takes a %d ms stall bound", STALL_MS);
    tern_pool_config cfg;
    tern_pool_config_init(&cfg);
    cfg.threads = 2;
    cfg.queue_capacity = 256;
    STRESS_CHECK(tern_pool_start(&cfg) == 0, "the pool starts with two workers");

    pthread_barrier_init(&round_start, NULL, LOOPS + 1);
    pthread_barrier_init(&round_end, NULL, LOOPS + 1);
    for (unsigned i = 0; i < LOOPS; i++) {
        loopers[i].index = i;
        loopers[i].rng = stress_seed(i + 1);
        pthread_create(&loopers[i].thread, NULL, loop_main, &loopers[i]);
    }
    uint64_t rng = stress_seed(100);
    unsigned held_long = 0, rounds_retired = 0;
    uint64_t last_retired = 0;
    for (unsigned r = 0; r < ROUNDS; r++) {
        stress_phase("a round of submissions, blocks, cancels and deadlines", 60 * STRESS_SEC);
        atomic_store(&finished, 0);
        pthread_barrier_wait(&round_start);
        release_round(&rng, &held_long);
        pthread_barrier_wait(&round_end);
        /* Every other round, let the overflow workers retire before the next. */
        if (r % 2 == 1) {
            stress_phase("overflow workers retiring after the idle bound", 30 * STRESS_SEC);
            wait_retired();
            uint64_t retired = stress_pool_stats().overflow_retired;
            rounds_retired += retired > last_retired;
            last_retired = retired;
        }
    }
    stress_phase("the loops ending", 30 * STRESS_SEC);
    atomic_store(&quitting, true);
    pthread_barrier_wait(&round_start);
    for (unsigned i = 0; i < LOOPS; i++)
        pthread_join(loopers[i].thread, NULL);
    stress_phase("the last overflow workers retiring", 30 * STRESS_SEC);
    wait_retired();
    stress_phase_end();

    tern_pool_stats p = stress_pool_stats();
    unsigned long long acc = atomic_load(&n_accepted), ok = atomic_load(&n_ok),
                       can = atomic_load(&n_cancelled), tmo = atomic_load(&n_timed_out);
    STRESS_CHECK(atomic_load(&n_bad) == 0, "no done had a status its job cannot have (%llu did)",
                 atomic_load(&n_bad));
    STRESS_CHECK(
        acc == ok + can + tmo,
        "every accepted job was done once: %llu = %llu ok + %llu cancelled + %llu timed out", acc,
        ok, can, tmo);
    STRESS_CHECK(p.submitted == p.completed + p.cancelled + p.timed_out,
                 "the pool's books: submitted %" PRIu64 " = completed %" PRIu64
                 " + cancelled %" PRIu64 " + timed out %" PRIu64,
                 p.submitted, p.completed, p.cancelled, p.timed_out);
    STRESS_CHECK(p.submitted == acc && p.completed == ok && p.cancelled == can &&
                     p.timed_out == tmo,
                 "the pool's counters are the program's tallies");
    STRESS_CHECK(can > 0 && tmo > 0, "cancels (%llu of %llu asked) and deadlines (%llu) happened",
                 can, atomic_load(&n_cancels), tmo);
    STRESS_CHECK(p.stalls > 0 && held_long > 0,
                 "stalls were counted (%" PRIu64 "; %u holds past the stall bound)", p.stalls,
                 held_long);
    STRESS_CHECK(p.overflow_started >= 2 && rounds_retired >= 2,
                 "overflow workers started (%" PRIu64 ") and retired in %u of %u idle gaps",
                 p.overflow_started, rounds_retired, ROUNDS / 2);
    STRESS_CHECK(p.overflow_now == 0 && p.overflow_started == p.overflow_retired,
                 "after the idle bound none is alive: started %" PRIu64 " = retired %" PRIu64
                 " (now %u)",
                 p.overflow_started, p.overflow_retired, p.overflow_now);
    STRESS_CHECK(p.busy == 0 && p.queued == 0, "the pool is idle (busy %u, queued %u)", p.busy,
                 p.queued);
    stress_phase("the pool's drain shutdown", 30 * STRESS_SEC);
    STRESS_CHECK(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * STRESS_SEC) == 0,
                 "the pool shuts down cleanly");
    stress_phase_end();
    close(release[0]);
    close(release[1]);
    return stress_summary();
}
