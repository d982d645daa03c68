/*
 * A foreign tern_cancel racing a thread that claims the loop.
 *
 * Thread A pumps the loop with tern_loop_run_once(loop, 0) and short
 * pauses (drawn from the seed), so the loop is unclaimed most of the time;
 * thread B cancels 20,000 timers by id meanwhile. A cancel that found the
 * loop unclaimed used to go straight into the loop's containers while A
 * claimed it (TSan saw loop->refs written by B and read by A). Now such a
 * cancel claims the loop for its moment. Checked here: every timer is
 * cancelled exactly once (none fires), the live count ends at zero, and,
 * under TSan, no race. Every wait is bounded: the watchdog ends a phase
 * that overruns, and the last drain is bounded in turns too (a lost cancel
 * leaves a one-hour timer live, which used to spin here until meson's
 * timeout). Seed: TERN_SEED (default 0xcc1a13): the pump's pauses and the
 * order of the cancels.
 */
#include "stress.h"

#define DEFAULT_SEED UINT64_C(0xcc1a13)
#define TIMERS 20000
#define DRAIN_TURNS 100000

static tern_loop *loop;
static tern_id ids[TIMERS];
static atomic_bool cancelling_done;
static atomic_uint fired;
static atomic_uint cancels_made;

static void on_timer(tern_loop *l, tern_id id, void *arg)
{
    (void)l, (void)id, (void)arg;
    atomic_fetch_add(&fired, 1);
}

static void *pump(void *arg)
{
    (void)arg;
    uint64_t rng = stress_seed(1);
    while (!atomic_load(&cancelling_done)) {
        tern_loop_run_once(loop, 0);
        /* The workload's shape, not a synchronisation: leave the loop
         * unclaimed for a moment so B's cancels meet both states. */
        struct timespec ts = {0, (long)(5000 + stress_below(&rng, 30000))};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void *cancel_all(void *arg)
{
    (void)arg;
    unsigned bad = 0;
    for (unsigned i = 0; i < TIMERS; i++) {
        int rc = tern_cancel(loop, ids[i]);
        if (rc != TERN_CANCEL_REQUESTED) /* never the caller's thread: always queued */
            bad++;
        atomic_fetch_add_explicit(&cancels_made, 1, memory_order_relaxed);
    }
    atomic_store(&cancelling_done, true);
    return (void *)(uintptr_t)bad;
}

static void report(void)
{
    printf("  cancels made %u of %d, fired %u\n", atomic_load(&cancels_made), TIMERS,
           atomic_load(&fired));
}

int main(void)
{
    stress_init("cancel_claim_stress", DEFAULT_SEED);
    stress_on_report(report);
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.max_operations = TIMERS + 16;
    if (tern_loop_new(&loop, &o) != 0)
        return 1;
    stress_watch_loop(loop, "pumped");
    for (unsigned i = 0; i < TIMERS; i++)
        if (tern_timer_start(loop, 3600ull * 1000000000ull, 0, on_timer, NULL, &ids[i]) != 0)
            return 1;
    /* Cancel in a seeded order, so ids meet the loop in every state. */
    uint64_t rng = stress_seed(2);
    for (unsigned i = TIMERS - 1; i > 0; i--) {
        unsigned j = (unsigned)stress_below(&rng, i + 1);
        tern_id t = ids[i];
        ids[i] = ids[j];
        ids[j] = t;
    }
    stress_phase("thread B cancels every timer while thread A pumps the loop", 120 * STRESS_SEC);
    pthread_t a, b;
    pthread_create(&a, NULL, pump, NULL);
    pthread_create(&b, NULL, cancel_all, NULL);
    void *bad;
    pthread_join(b, &bad);
    pthread_join(a, NULL);
    /* Requests queued while A ran the loop resolve in its next step 1. */
    stress_phase("the queued cancels resolve: the loop runs dry", 30 * STRESS_SEC);
    unsigned turns = 0;
    while (tern_loop_run_once(loop, 0) != 0)
        if (++turns > DRAIN_TURNS)
            stress_fail_now("the loop did not run dry within 100000 turns: timers left live "
                            "(a cancel was lost)");
    tern_loop_stats s;
    tern_loop_stats_get(loop, &s);
    STRESS_CHECK((uintptr_t)bad == 0, "every cancel was accepted (0)");
    STRESS_CHECK(s.live_operations == 0, "every timer was cancelled: nothing live (%u)",
                 s.live_operations);
    STRESS_CHECK(atomic_load(&fired) == 0, "no cancelled timer fired (%u)", atomic_load(&fired));
    stress_phase("tern_loop_free", 30 * STRESS_SEC);
    stress_loop_free(loop);
    stress_phase_end();
    return stress_summary();
}
