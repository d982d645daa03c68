/*
 * post_stress: cross-thread posts through the inbound queue, at volume.
 *
 * Several producer threads post at least 1,000,000 functions in total to
 * one loop. Each post carries (producer, sequence number); the loop checks
 * that every producer's numbers arrive exactly as last+1 — so none is
 * lost, none runs twice, and order per producer is kept — and that every
 * post runs on the loop thread. max_operations is kept small so producers
 * are refused with -EAGAIN and retry, which exercises the refusal path
 * (a refused post must never run).
 *
 * Phase 1 floods a busy loop. Phase 2 posts in small bursts with pauses
 * so the loop keeps going to sleep and being woken. Phase 3 is a ping-pong
 * (one post in flight, the next sent as soon as the previous ran, after a
 * random spin) that aims each post at the loop's way back to sleep, where
 * a broken park protocol loses the wake-up. A lost wake-up shows as a
 * stall, which the watchdog reports instead of hanging. Phase 4 runs two
 * loops on threads of their own, and producers that switch between them
 * every few posts, leaving a run of posts open on the other loop each
 * time.
 *
 * Seed: TERN_SEED (default 0x5eed2024): pauses in phase 2, spins in phase
 * 3. Bounded: a fixed count of posts, a stall detector (no progress for
 * 20 s) and the harness's watchdog per phase (stress.h). Standalone (no criterion) so it also runs
 * under ThreadSanitizer and valgrind. Usage: post_stress [posts_total]
 */
#include "stress.h"

#define DEFAULT_SEED UINT64_C(0x5eed2024)
static uint64_t SEED; /* the run's seed (TERN_SEED), set in main */
#define PRODUCERS 4
#define DEFAULT_TOTAL 1000000u
#define WATCHDOG_NS (UINT64_C(120) * 1000000000u)
#define STALL_NS (UINT64_C(20) * 1000000000u)

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

/* xorshift64*: small, deterministic per producer. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * UINT64_C(2685821657736338717);
}

struct phase {
    tern_loop *loop;
    pthread_t loop_thread;
    tern_id keepalive;
    unsigned per_producer;
    bool bursty;
    bool pingpong;
    pthread_barrier_t go;
    /* Loop thread only. */
    unsigned producers;
    uint64_t loop_rng;
    uint64_t next_seq[PRODUCERS];
    uint64_t out_of_order, wrong_thread, wrong_current;
    /* Shared. */
    atomic_uint_fast64_t received;
    atomic_uint_fast64_t refused;
    atomic_uint producers_done;
    atomic_bool finished;
    atomic_bool stalled;
};

static struct phase *cur;

static void *pack(unsigned producer, uint64_t seq)
{
    return (void *)(uintptr_t)(((uint64_t)producer << 40) | seq);
}

static void on_post(tern_loop *loop, void *arg)
{
    struct phase *p = cur;
    uint64_t v = (uint64_t)(uintptr_t)arg;
    unsigned producer = (unsigned)(v >> 40);
    uint64_t seq = v & ((UINT64_C(1) << 40) - 1);
    if (!pthread_equal(pthread_self(), p->loop_thread))
        p->wrong_thread++;
    if (tern_loop_current() != loop)
        p->wrong_current++;
    if (producer >= p->producers || seq != p->next_seq[producer])
        p->out_of_order++;
    else
        p->next_seq[producer] = seq + 1;
    uint64_t n = atomic_fetch_add(&p->received, 1) + 1;
    if (p->pingpong) {
        /* The producer posts the next one as soon as it sees this one ran;
         * a random delay here moves the rest of this turn (and the park)
         * later or earlier relative to that post. */
        for (unsigned spin = (unsigned)(rng_next(&p->loop_rng) % 2048); spin > 0; spin--)
            (void)atomic_load_explicit(&p->refused, memory_order_relaxed);
    }
    if (n == (uint64_t)p->producers * p->per_producer) {
        /* The last post ends the run by removing the keep-alive timer. */
        int rc = tern_timer_stop(loop, p->keepalive);
        CHECK(rc == 0, "stopping the keep-alive timer: %s", tern_err_name(rc));
    }
}

struct producer {
    struct phase *p;
    unsigned index;
};

static void *produce(void *arg)
{
    struct producer *pr = arg;
    struct phase *p = pr->p;
    uint64_t rng = SEED ^ ((uint64_t)pr->index * UINT64_C(0x9e3779b97f4a7c15));
    pthread_barrier_wait(&p->go);
    unsigned burst = 0;
    for (uint64_t seq = 0; seq < p->per_producer; seq++) {
        int rc;
        while ((rc = tern_post(p->loop, on_post, pack(pr->index, seq))) == -EAGAIN) {
            atomic_fetch_add(&p->refused, 1);
            sched_yield();
        }
        if (rc != 0) {
            printf("tern_post: %s\n", tern_err_name(rc));
            stress_fail_now("tern_post failed");
        }
        if (p->pingpong) {
            /* Wait (spinning, so the wait ends within nanoseconds) until
             * the loop ran this post, then spin a few cycles; with the
             * loop's own random delay after running it (on_post), the next
             * post lands at a different point of the loop's way back to
             * sleep each time, sweeping the window between its last queue
             * check and its park. */
            for (unsigned spins = 0; atomic_load(&p->received) <= seq; spins++) {
                if (atomic_load(&p->finished))
                    break;
                if (spins % 256 == 255)
                    sched_yield();
            }
            for (unsigned spin = (unsigned)(rng_next(&rng) % 64); spin > 0; spin--)
                (void)atomic_load_explicit(&p->refused, memory_order_relaxed);
        }
        if (p->bursty && ++burst >= 1 + rng_next(&rng) % 64) {
            burst = 0;
            /* A pause long enough for the loop to go back to sleep. */
            sleep_ns(rng_next(&rng) % 50000);
        }
    }
    atomic_fetch_add(&p->producers_done, 1);
    return NULL;
}

static void never(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
    stress_fail_now("the keep-alive timer fired");
}

/* Reports a stall (no progress for STALL_NS with posts outstanding) or a
 * run beyond WATCHDOG_NS, then stops the loop; if even that cannot wake
 * it, gives up on the process. */
static void *watchdog(void *arg)
{
    struct phase *p = arg;
    uint64_t start = mono_ns(), last_change = start;
    uint64_t last = atomic_load(&p->received);
    while (!atomic_load(&p->finished)) {
        sleep_ns(10000000);
        uint64_t now = mono_ns(), r = atomic_load(&p->received);
        if (r != last) {
            last = r;
            last_change = now;
        }
        if (now - last_change > STALL_NS || now - start > WATCHDOG_NS) {
            printf("FAIL stalled: %" PRIu64 " of %" PRIu64 " posts received, producers done %u\n",
                   r, (uint64_t)p->producers * p->per_producer, atomic_load(&p->producers_done));
            atomic_store(&p->stalled, true);
            tern_loop_stop(p->loop);
            sleep_ns(5 * 1000000000ull);
            if (!atomic_load(&p->finished))
                stress_fail_now("the loop did not wake for tern_loop_stop either");
            return NULL;
        }
    }
    return NULL;
}

static void run_phase(const char *name, unsigned producers, unsigned total, bool bursty,
                      bool pingpong, unsigned max_ops)
{
    static struct phase p;
    memset(&p, 0, sizeof p);
    cur = &p;
    p.producers = producers;
    p.per_producer = total / producers;
    p.bursty = bursty;
    p.pingpong = pingpong;
    p.loop_rng = SEED;
    p.loop_thread = pthread_self();
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.max_operations = max_ops;
    int rc = tern_loop_new(&p.loop, &o);
    CHECK(rc == 0, "tern_loop_new: %s", tern_err_name(rc));
    if (rc != 0)
        return;
    stress_watch_loop(p.loop, name);
    stress_phase(name, 180 * STRESS_SEC);
    rc = tern_timer_start(p.loop, UINT64_C(3600) * 1000000000u, 0, never, NULL, &p.keepalive);
    CHECK(rc == 0, "keep-alive timer: %s", tern_err_name(rc));
    pthread_barrier_init(&p.go, NULL, producers);
    pthread_t t[PRODUCERS], dog;
    struct producer pr[PRODUCERS];
    pthread_create(&dog, NULL, watchdog, &p);
    uint64_t start = mono_ns();
    for (unsigned i = 0; i < producers; i++) {
        pr[i] = (struct producer){ &p, i };
        pthread_create(&t[i], NULL, produce, &pr[i]);
    }
    int ran = tern_loop_run(p.loop);
    uint64_t elapsed = mono_ns() - start;
    atomic_store(&p.finished, true);
    for (unsigned i = 0; i < producers; i++)
        pthread_join(t[i], NULL);
    pthread_join(dog, NULL);
    pthread_barrier_destroy(&p.go);

    uint64_t want = (uint64_t)producers * p.per_producer;
    CHECK(!atomic_load(&p.stalled), "%s: the loop stalled (lost wake-up?)", name);
    CHECK(ran == 0, "%s: tern_loop_run returned %d", name, ran);
    CHECK(atomic_load(&p.received) == want, "%s: received %" PRIu64 " of %" PRIu64, name,
          (uint64_t)atomic_load(&p.received), want);
    CHECK(p.out_of_order == 0, "%s: %" PRIu64 " posts lost, repeated or out of order", name,
          p.out_of_order);
    CHECK(p.wrong_thread == 0, "%s: %" PRIu64 " posts ran off the loop thread", name,
          p.wrong_thread);
    CHECK(p.wrong_current == 0, "%s: tern_loop_current wrong in %" PRIu64 " posts", name,
          p.wrong_current);
    for (unsigned i = 0; i < producers; i++)
        CHECK(p.next_seq[i] == p.per_producer, "%s: producer %u ended at %" PRIu64, name, i,
              p.next_seq[i]);
    tern_loop_stats s;
    tern_loop_stats_get(p.loop, &s);
    CHECK(s.posts == want, "%s: stats.posts %" PRIu64, name, s.posts);
    CHECK(s.live_operations == 0, "%s: %u operations left live", name, s.live_operations);
    CHECK(s.wake_syscalls <= want, "%s: more wake syscalls than posts", name);
    printf("%s: %" PRIu64 " posts from %u producers in %.3f s (%.0f posts/s), %" PRIu64
           " wake syscalls (1 per %.1f posts), %" PRIu64 " refusals at max_operations %u, %" PRIu64
           " turns\n",
           name, want, producers, (double)elapsed / 1e9, (double)want * 1e9 / (double)elapsed,
           s.wake_syscalls, s.wake_syscalls ? (double)want / (double)s.wake_syscalls : 0.0,
           (uint64_t)atomic_load(&p.refused), max_ops, s.turns);
    stress_loop_free(p.loop);
    stress_phase_end();
}

/*
 * Two loops, each run by a thread of its own, and producers that switch
 * between them at random every 1..32 posts: every switch leaves a run
 * open behind it on the other loop (inbound_block.c), which that loop
 * closes while the producer is away or racing back to it. Each loop checks
 * each producer's sequence of posts to it.
 */
#define TWO 2
struct two_side {
    tern_loop *loop;
    pthread_t thread;
    tern_id keepalive;
    uint64_t next_seq[PRODUCERS]; /* its loop thread only */
    uint64_t out_of_order, wrong_loop;
    atomic_uint_fast64_t received;
    uint64_t want;                /* set by the producers' join, before the last post */
    atomic_uint_fast64_t sent;
};

static struct two_side two[TWO];
static atomic_uint two_producers_left;

static void two_post(tern_loop *loop, void *arg)
{
    uint64_t v = (uint64_t)(uintptr_t)arg;
    unsigned side = (unsigned)(v >> 60);
    unsigned producer = (unsigned)(v >> 40) & 0xfffffu;
    uint64_t seq = v & ((UINT64_C(1) << 40) - 1);
    struct two_side *t = &two[side];
    if (t->loop != loop)
        t->wrong_loop++;
    if (producer >= PRODUCERS || seq != t->next_seq[producer])
        t->out_of_order++;
    else
        t->next_seq[producer] = seq + 1;
    atomic_fetch_add(&t->received, 1);
}

/* Posted last to each loop, once every producer is done: ends its run. */
static void two_end(tern_loop *loop, void *arg)
{
    struct two_side *t = arg;
    int rc = tern_timer_stop(loop, t->keepalive);
    CHECK(rc == 0, "two loops: stopping the keep-alive timer: %s", tern_err_name(rc));
}

static void *two_run(void *arg)
{
    struct two_side *t = arg;
    int rc = tern_loop_run(t->loop);
    CHECK(rc == 0, "two loops: tern_loop_run returned %d", rc);
    return NULL;
}

static void *two_produce(void *arg)
{
    unsigned index = (unsigned)(uintptr_t)arg;
    uint64_t rng = SEED ^ ((uint64_t)(index + 17) * UINT64_C(0x9e3779b97f4a7c15));
    uint64_t seq[TWO] = {0, 0};
    unsigned total = DEFAULT_TOTAL / 10 / PRODUCERS;
    unsigned side = 0, left = 0;
    for (unsigned i = 0; i < total; i++) {
        if (left == 0) {
            side = (unsigned)(rng_next(&rng) & 1);
            left = 1 + (unsigned)(rng_next(&rng) % 32);
        }
        left--;
        void *v = (void *)(uintptr_t)(((uint64_t)side << 60) | ((uint64_t)index << 40) |
                                      seq[side]);
        int rc;
        while ((rc = tern_post(two[side].loop, two_post, v)) == -EAGAIN)
            sched_yield();
        if (rc != 0) {
            printf("two loops: tern_post: %s\n", tern_err_name(rc));
            stress_fail_now("tern_post failed");
        }
        seq[side]++;
    }
    for (unsigned k = 0; k < TWO; k++)
        atomic_fetch_add(&two[k].sent, seq[k]);
    if (atomic_fetch_sub(&two_producers_left, 1) == 1)
        for (unsigned k = 0; k < TWO; k++) {
            two[k].want = atomic_load(&two[k].sent);
            int rc;
            while ((rc = tern_post(two[k].loop, two_end, &two[k])) == -EAGAIN)
                sched_yield();
            CHECK(rc == 0, "two loops: the last post: %s", tern_err_name(rc));
        }
    return NULL;
}

static void run_two_loops(void)
{
    const char *name = "two loops";
    stress_phase(name, 180 * STRESS_SEC);
    memset(two, 0, sizeof two);
    atomic_store(&two_producers_left, PRODUCERS);
    for (unsigned k = 0; k < TWO; k++) {
        tern_loop_options o;
        tern_loop_options_init(&o);
        o.max_operations = 1024; /* refusals too */
        int rc = tern_loop_new(&two[k].loop, &o);
        CHECK(rc == 0, "tern_loop_new: %s", tern_err_name(rc));
        if (rc != 0)
            return;
        rc = tern_timer_start(two[k].loop, UINT64_C(3600) * 1000000000u, 0, never, NULL,
                              &two[k].keepalive);
        CHECK(rc == 0, "keep-alive timer: %s", tern_err_name(rc));
        pthread_create(&two[k].thread, NULL, two_run, &two[k]);
    }
    pthread_t t[PRODUCERS];
    for (unsigned i = 0; i < PRODUCERS; i++)
        pthread_create(&t[i], NULL, two_produce, (void *)(uintptr_t)i);
    for (unsigned i = 0; i < PRODUCERS; i++)
        pthread_join(t[i], NULL);
    for (unsigned k = 0; k < TWO; k++) {
        pthread_join(two[k].thread, NULL);
        struct two_side *s = &two[k];
        uint64_t got = atomic_load(&s->received), sum = 0;
        for (unsigned i = 0; i < PRODUCERS; i++)
            sum += s->next_seq[i];
        CHECK(got == s->want && sum == s->want, "%s: loop %u ran %" PRIu64 " posts (%" PRIu64
              " in order) of %" PRIu64, name, k, got, sum, s->want);
        CHECK(s->out_of_order == 0, "%s: loop %u: %" PRIu64 " posts lost, repeated or out of order",
              name, k, s->out_of_order);
        CHECK(s->wrong_loop == 0, "%s: loop %u ran %" PRIu64 " posts of the other loop", name, k,
              s->wrong_loop);
        tern_loop_stats st;
        tern_loop_stats_get(s->loop, &st);
        CHECK(st.live_operations == 0, "%s: loop %u: %u operations left live", name, k,
              st.live_operations);
        printf("%s: loop %u ran %" PRIu64 " posts in %" PRIu64 " turns\n", name, k, got, st.turns);
        stress_loop_free(s->loop);
    }
    stress_phase_end();
}

int main(int argc, char **argv)
{
    stress_init("post_stress", DEFAULT_SEED);
    SEED = stress_run_seed;
    unsigned total = DEFAULT_TOTAL;
    if (argc > 1)
        total = (unsigned)strtoul(argv[1], NULL, 10);
    if (total < PRODUCERS)
        total = PRODUCERS;
    printf("post_stress: seed %#" PRIx64 ", up to %u producers, %u posts\n", SEED, PRODUCERS,
           total);
    run_phase("flood", PRODUCERS, total, false, false, 4096);
    run_phase("bursts", PRODUCERS, total / 10, true, false, 65536);
    run_phase("pingpong", 1, total / 50, false, true, 65536);
    run_two_loops();
    return stress_summary();
}
