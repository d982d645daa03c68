/*
 * loop_cancel_stress: timers armed and cancelled by id across the thread
 * boundary while the loop runs.
 *
 * Helper threads may only post and cancel (G3), so each helper posts an
 * "arm" function that starts a timer on the loop thread and publishes its
 * id; later the helper cancels that id with tern_cancel from its own
 * thread, while the loop is running (sleeping or busy). Kinds:
 *   short  — one-shot, 0..2 ms; cancelled half the time (it may fire first)
 *   long   — one-shot, 1 hour; always cancelled, so it must never fire
 *   repeat — repeating every 0.2..1 ms; always cancelled
 * Helpers also cancel stale ids (short timers that already fired) and
 * cancel some ids twice; neither may touch any other operation. A
 * sentinel timer that nobody cancels proves it: the loop stops it at the
 * end and it must still be live.
 *
 * At the end every counter adds up: each record was armed once; long
 * timers never fired; every short timer fired once or was cancelled;
 * callbacks saw their own id on the loop thread; ids were never reused;
 * nothing is left live and run() returned 0 on its own.
 *
 * Seed: TERN_SEED (default 0xc0ffee11). Bounded: a fixed count of timers,
 * a stall detector (no progress for 20 s) and the harness's watchdog
 * (stress.h).
 * Standalone (no criterion) so it runs under ThreadSanitizer and valgrind.
 * Usage: loop_cancel_stress [timers_per_helper]
 */
#include "stress.h"

#define DEFAULT_SEED UINT64_C(0xc0ffee11)
static uint64_t SEED; /* the run's seed (TERN_SEED), set in main */
#define HELPERS 3
#define DEFAULT_PER_HELPER 20000u
#define NS_PER_MS UINT64_C(1000000)
#define HOUR_NS (UINT64_C(3600) * 1000000000u)
#define STALL_NS (UINT64_C(20) * 1000000000u)
#define WATCHDOG_NS (UINT64_C(180) * 1000000000u)

#define CHECK(cond, ...) STRESS_CHECK((cond), __VA_ARGS__)

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
                          .tv_nsec = (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * UINT64_C(2685821657736338717);
}

enum kind { K_SHORT, K_LONG, K_REPEAT };

struct rec {
    enum kind kind;
    uint64_t delay, repeat;
    _Atomic tern_id id;            /* published by the loop thread after arming */
    int arm_rc;                    /* loop thread */
    atomic_uint fired;             /* loop thread increments */
    atomic_uint wrong;             /* callback saw a foreign id or thread */
    atomic_bool cancel_requested;  /* set by the helper before tern_cancel */
};

static struct {
    tern_loop *loop;
    pthread_t loop_thread;
    struct rec *recs; /* HELPERS * per_helper */
    unsigned per_helper;
    tern_id sentinel;
    int sentinel_stop_rc;
    atomic_uint helpers_done;
    atomic_uint_fast64_t progress; /* arms + fires, for the stall detector */
    atomic_uint_fast64_t arm_posts, cancels, stale_cancels, double_cancels, refused;
    atomic_uint_fast64_t bad_cancel_rc; /* cross-thread cancels that did not return 0 */
    atomic_bool finished, stalled;
    pthread_barrier_t start;
} g;

static void timer_cb(tern_loop *loop, tern_id id, void *arg)
{
    struct rec *r = arg;
    if (id != atomic_load(&r->id) || loop != g.loop ||
        !pthread_equal(pthread_self(), g.loop_thread))
        atomic_fetch_add(&r->wrong, 1);
    atomic_fetch_add(&r->fired, 1);
    /* Repeating timers fire on their own; only one-shots count as
     * progress, so a loop that never resolves their cancels stalls. */
    if (r->kind != K_REPEAT)
        atomic_fetch_add(&g.progress, 1);
}

static void arm(tern_loop *loop, void *arg)
{
    struct rec *r = arg;
    tern_id id = 0;
    r->arm_rc = tern_timer_start(loop, r->delay, r->repeat, timer_cb, r, &id);
    /* Release pairs with the helper's acquire load before it cancels. */
    atomic_store_explicit(&r->id, id, memory_order_release);
    atomic_fetch_add(&g.progress, 1);
}

static void finish(tern_loop *loop, void *arg)
{
    (void)arg;
    g.sentinel_stop_rc = tern_timer_stop(loop, g.sentinel);
}

static void sentinel_cb(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
    CHECK(false, "the sentinel timer fired");
}

static void post_retry(tern_fn fn, void *arg)
{
    int rc;
    while ((rc = tern_post(g.loop, fn, arg)) == -EAGAIN) {
        atomic_fetch_add(&g.refused, 1);
        sched_yield();
    }
    if (rc != 0) {
        printf("tern_post: %s\n", tern_err_name(rc));
        stress_fail_now("tern_post failed");
    }
}

static tern_id wait_for_id(struct rec *r)
{
    uint64_t end = mono_ns() + STALL_NS;
    tern_id id;
    while ((id = atomic_load_explicit(&r->id, memory_order_acquire)) == 0) {
        if (mono_ns() > end)
            stress_fail_now("an arm post never ran");
        sched_yield();
    }
    return id;
}

static void cancel_rec(struct rec *r, uint64_t *rng)
{
    tern_id id = wait_for_id(r);
    bool must = r->kind != K_SHORT;
    if (!must && rng_next(rng) % 2 == 0)
        return;
    atomic_store(&r->cancel_requested, true);
    /* While the loop runs, a foreign cancel is queued and returns 0. */
    if (tern_cancel(g.loop, id) < 0)
        atomic_fetch_add(&g.bad_cancel_rc, 1);
    atomic_fetch_add(&g.cancels, 1);
    if (rng_next(rng) % 16 == 0) {
        if (tern_cancel(g.loop, id) < 0)
            atomic_fetch_add(&g.bad_cancel_rc, 1);
        atomic_fetch_add(&g.double_cancels, 1);
    }
}

static void *helper(void *arg)
{
    unsigned h = (unsigned)(uintptr_t)arg;
    uint64_t rng = SEED + h * UINT64_C(0x9e3779b97f4a7c15);
    struct rec *mine = g.recs + (size_t)h * g.per_helper;
    enum { WINDOW = 64 };
    unsigned head = 0; /* oldest record not yet processed */
    pthread_barrier_wait(&g.start);
    for (unsigned i = 0; i < g.per_helper; i++) {
        struct rec *r = &mine[i];
        uint64_t x = rng_next(&rng) % 10;
        if (x < 5) {
            r->kind = K_SHORT;
            r->delay = rng_next(&rng) % (2 * NS_PER_MS);
        } else if (x < 8) {
            r->kind = K_LONG;
            r->delay = HOUR_NS;
        } else {
            r->kind = K_REPEAT;
            r->delay = rng_next(&rng) % NS_PER_MS;
            r->repeat = NS_PER_MS / 5 + rng_next(&rng) % (NS_PER_MS * 4 / 5);
        }
        post_retry(arm, r);
        atomic_fetch_add(&g.arm_posts, 1);
        /* Keep a random number of records in flight before cancelling. */
        unsigned window = 1 + (unsigned)(rng_next(&rng) % WINDOW);
        while (i + 1 - head > window)
            cancel_rec(&mine[head++], &rng);
        /* Now and then cancel a stale id: a short timer that has fired is
         * finished, and its id is never reused, so this must be ignored. */
        if (rng_next(&rng) % 8 == 0 && head > 0) {
            struct rec *old = &mine[rng_next(&rng) % head];
            if (old->kind == K_SHORT && atomic_load(&old->fired) > 0) {
                if (tern_cancel(g.loop, atomic_load(&old->id)) < 0)
                    atomic_fetch_add(&g.bad_cancel_rc, 1);
                atomic_fetch_add(&g.stale_cancels, 1);
            }
        }
        if (rng_next(&rng) % 256 == 0)
            sleep_ns(rng_next(&rng) % (NS_PER_MS / 2)); /* let the loop sleep */
    }
    while (head < g.per_helper)
        cancel_rec(&mine[head++], &rng);
    /* The last helper out posts the finish; posts from one thread run in
     * order, and step 1 resolves the cancels queued with it. */
    if (atomic_fetch_add(&g.helpers_done, 1) + 1 == HELPERS)
        post_retry(finish, NULL);
    return NULL;
}

/* Runs first on the loop thread, so helpers start only once the loop is
 * claimed (a cancel while unclaimed would be resolved synchronously). */
static void release_helpers(tern_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
    pthread_barrier_wait(&g.start);
}

static void *watchdog(void *arg)
{
    (void)arg;
    uint64_t start = mono_ns(), last_change = start, last = 0;
    while (!atomic_load(&g.finished)) {
        sleep_ns(10 * NS_PER_MS);
        uint64_t now = mono_ns(), p = atomic_load(&g.progress);
        if (p != last) {
            last = p;
            last_change = now;
        }
        if (now - last_change > STALL_NS || now - start > WATCHDOG_NS) {
            printf("FAIL stalled: progress %" PRIu64 ", helpers done %u\n", p,
                   atomic_load(&g.helpers_done));
            atomic_store(&g.stalled, true);
            tern_loop_stop(g.loop);
            sleep_ns(5000 * NS_PER_MS);
            if (!atomic_load(&g.finished))
                stress_fail_now("the loop did not wake for tern_loop_stop either");
            return NULL;
        }
    }
    return NULL;
}

static int cmp_id(const void *a, const void *b)
{
    tern_id x = *(const tern_id *)a, y = *(const tern_id *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    stress_init("loop_cancel_stress", DEFAULT_SEED);
    SEED = stress_run_seed;
    g.per_helper = DEFAULT_PER_HELPER;
    if (argc > 1)
        g.per_helper = (unsigned)strtoul(argv[1], NULL, 10);
    if (g.per_helper == 0)
        g.per_helper = 1;
    size_t n = (size_t)HELPERS * g.per_helper;
    printf("loop_cancel_stress: seed %#" PRIx64 ", %d helpers x %u timers\n", SEED, HELPERS,
           g.per_helper);
    g.recs = calloc(n, sizeof *g.recs);
    if (g.recs == NULL)
        return 1;

    tern_loop_options o;
    tern_loop_options_init(&o);
    o.max_operations = 1u << 20;
    int rc = tern_loop_new(&g.loop, &o);
    CHECK(rc == 0, "tern_loop_new: %s", tern_err_name(rc));
    if (rc != 0)
        return 1;
    g.loop_thread = pthread_self();
    stress_watch_loop(g.loop, "timers");
    stress_phase("helpers arm and cancel timers on the running loop", 240 * STRESS_SEC);
    rc = tern_timer_start(g.loop, HOUR_NS, 0, sentinel_cb, NULL, &g.sentinel);
    CHECK(rc == 0, "sentinel: %s", tern_err_name(rc));
    g.sentinel_stop_rc = 1;
    pthread_barrier_init(&g.start, NULL, HELPERS + 1);
    rc = tern_defer(g.loop, release_helpers, NULL);
    CHECK(rc == 0, "tern_defer: %s", tern_err_name(rc));

    pthread_t t[HELPERS], dog;
    for (unsigned h = 0; h < HELPERS; h++)
        pthread_create(&t[h], NULL, helper, (void *)(uintptr_t)h);
    pthread_create(&dog, NULL, watchdog, NULL);
    uint64_t start = mono_ns();
    int ran = tern_loop_run(g.loop);
    uint64_t elapsed = mono_ns() - start;
    atomic_store(&g.finished, true);
    for (unsigned h = 0; h < HELPERS; h++)
        pthread_join(t[h], NULL);
    pthread_join(dog, NULL);
    pthread_barrier_destroy(&g.start);

    CHECK(!atomic_load(&g.stalled), "the loop stalled");
    CHECK(atomic_load(&g.bad_cancel_rc) == 0, "%" PRIu64 " cross-thread cancels returned non-zero",
          (uint64_t)atomic_load(&g.bad_cancel_rc));
    CHECK(ran == 0, "tern_loop_run returned %d (stopped with work live?)", ran);
    CHECK(g.sentinel_stop_rc == 0, "the sentinel was no longer live at the end (%s): a cancel hit "
          "an operation it did not name", tern_err_name(g.sentinel_stop_rc));

    uint64_t shorts = 0, shorts_fired = 0, shorts_cancelled = 0, longs = 0, repeats = 0,
             repeat_fires = 0;
    unsigned bad_arm = 0, long_fired = 0, uncancelled = 0, twice = 0, wrong = 0, lost = 0;
    for (size_t i = 0; i < n; i++) {
        struct rec *r = &g.recs[i];
        unsigned f = atomic_load(&r->fired);
        bool c = atomic_load(&r->cancel_requested);
        if (r->arm_rc != 0 || atomic_load(&r->id) == 0)
            bad_arm++;
        wrong += atomic_load(&r->wrong);
        switch (r->kind) {
        case K_SHORT:
            shorts++;
            if (f > 1)
                twice++;
            if (f == 1)
                shorts_fired++;
            else if (c)
                shorts_cancelled++;
            else
                lost++; /* neither fired nor cancelled: a lost timer */
            break;
        case K_LONG:
            longs++;
            if (f != 0)
                long_fired++;
            if (!c)
                uncancelled++;
            break;
        case K_REPEAT:
            repeats++;
            repeat_fires += f;
            if (!c)
                uncancelled++;
            break;
        }
    }
    CHECK(bad_arm == 0, "%u timers failed to arm", bad_arm);
    CHECK(long_fired == 0, "%u cancelled one-hour timers fired", long_fired);
    CHECK(uncancelled == 0, "%u long/repeat timers were never cancelled (bookkeeping)",
          uncancelled);
    CHECK(twice == 0, "%u one-shot timers fired more than once", twice);
    CHECK(wrong == 0, "%u callbacks saw a wrong id, loop or thread", wrong);
    CHECK(lost == 0, "%u short timers neither fired nor were cancelled", lost);
    CHECK(shorts_fired + shorts_cancelled == shorts, "short timers do not add up");
    CHECK(shorts + longs + repeats == n, "records do not add up");
    CHECK(atomic_load(&g.arm_posts) == n, "arm posts %" PRIu64,
          (uint64_t)atomic_load(&g.arm_posts));

    /* Ids are never reused: every armed timer and the sentinel distinct. */
    tern_id *ids = malloc((n + 1) * sizeof *ids);
    for (size_t i = 0; i < n; i++)
        ids[i] = atomic_load(&g.recs[i].id);
    ids[n] = g.sentinel;
    qsort(ids, n + 1, sizeof *ids, cmp_id);
    unsigned dup = 0;
    for (size_t i = 1; i <= n; i++)
        if (ids[i] == ids[i - 1])
            dup++;
    CHECK(dup == 0, "%u ids handed out twice", dup);
    free(ids);

    tern_loop_stats s;
    tern_loop_stats_get(g.loop, &s);
    CHECK(s.live_operations == 0, "%u operations left live", s.live_operations);
    CHECK(s.posts == n + 1, "stats.posts %" PRIu64 ", expected %zu", s.posts, n + 1);
    printf("%zu timers in %.3f s: %" PRIu64 " short (%" PRIu64 " fired, %" PRIu64
           " cancelled first), %" PRIu64 " long, %" PRIu64 " repeating (%" PRIu64
           " fires); %" PRIu64 " cross-thread cancels, %" PRIu64 " doubled, %" PRIu64
           " stale; %" PRIu64 " turns, %" PRIu64 " wake syscalls, %" PRIu64 " post refusals\n",
           n, (double)elapsed / 1e9, shorts, shorts_fired, shorts_cancelled, longs, repeats,
           repeat_fires, (uint64_t)atomic_load(&g.cancels),
           (uint64_t)atomic_load(&g.double_cancels), (uint64_t)atomic_load(&g.stale_cancels),
           s.turns, s.wake_syscalls, (uint64_t)atomic_load(&g.refused));
    stress_phase("tern_loop_free", 30 * STRESS_SEC);
    stress_loop_free(g.loop);
    free(g.recs);
    stress_phase_end();
    return stress_summary();
}
