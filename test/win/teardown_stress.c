/*
 * teardown_stress: loops freed with their jobs queued, running and
 * undelivered, under wine, with a fixed seed (TERN_SEED replays another).
 *
 * Each round makes two loops on a small pool (2 bounded workers, a queue
 * of 16, 4 long threads) and gives each a random mix: bounded and long
 * jobs that return at once or wait (until cancelled) for a gate that
 * never opens, some cancelled before the loop ever runs, then zero to
 * three turns so some dones are delivered and some results wait. Then
 * both loops are freed at once, one on the main thread and one on another.
 * After each free: every accepted job had exactly one done, on its loop,
 * and its status agrees with what its work did (0: ran and returned, with
 * its result; -ECANCELED with no result: never ran; -ECANCELED with its
 * result: ran, saw the flag or finished); no job of that loop is still
 * running; a refused job never ran and got no done. Every 25 rounds the
 * pool is shut down and the process must hold the handles it held before
 * the first round (handles.h: the leak check that wine allows).
 *
 * Usage: teardown_stress [ROUNDS]  (default 200). Closes with
 * "N passed, N failed".
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

#include "handles.h"
#include "os_thread.h"
#include "runner.h"
#include "tern.h"

#define MS 1000000ull
#define DEFAULT_SEED UINT64_C(0x7ea2d0e5)
#define DEFAULT_ROUNDS 200u
#define MAX_JOBS 24
#define LIVENESS_MS 20000u

static uint64_t rng_state;

/* splitmix64, as test/stress/stress.h. */
static uint64_t rng(void)
{
    uint64_t z = (rng_state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static unsigned below(unsigned n)
{
    return (unsigned)(rng() % n);
}

struct job {
    bool waits; /* waits for the cancel flag (the gate never opens) */
    bool accepted;
    tern_id id;
    atomic_int ran, returned, dones;
    int status;
    void *result;
    tern_loop *done_loop;
};

struct side {
    tern_loop *loop;
    struct job jobs[MAX_JOBS];
    unsigned n;
};

static struct side sides[2];

/* Totals over the run, for the closing line. */
static struct {
    unsigned accepted, refused, ok, cancelled_unrun, cancelled_ran, delivered_before_free;
} total;

static void *work(tern_job *j, void *arg)
{
    struct job *r = arg;
    atomic_store(&r->ran, 1);
    if (r->waits) {
        DWORD end = GetTickCount() + LIVENESS_MS;
        while (!tern_job_cancelled(j) && (int)(GetTickCount() - end) < 0)
            Sleep(1);
    }
    atomic_store(&r->returned, 1);
    return r;
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

static void fill(struct side *sd)
{
    tern_loop_options o;
    tern_loop_options_init(&o);
    CHECK(tern_loop_new(&sd->loop, &o) == 0);
    sd->n = 4 + below(MAX_JOBS - 3);
    for (unsigned i = 0; i < sd->n; i++) {
        struct job *r = &sd->jobs[i];
        memset(r, 0, sizeof *r);
        r->waits = below(3) == 0;
        tern_occupancy occ = below(4) == 0 ? TERN_LONG : TERN_BOUNDED;
        int rc = tern_submit(sd->loop, occ, work, done, r, &r->id);
        CHECK(rc == 0 || rc == -EAGAIN);
        r->accepted = rc == 0;
        if (rc != 0) {
            total.refused++;
            continue;
        }
        total.accepted++;
        /* A cancel while nobody runs the loop is queued for its next step 1
         * or for tern_loop_free. */
        if (below(5) == 0)
            CHECK(tern_cancel(sd->loop, r->id) == TERN_CANCEL_REQUESTED);
    }
    unsigned turns = below(4);
    for (unsigned t = 0; t < turns; t++)
        (void)tern_loop_run_once(sd->loop, (int64_t)below(3) * (int64_t)MS);
}

static void check_side(struct side *sd, tern_loop *was)
{
    for (unsigned i = 0; i < sd->n; i++) {
        struct job *r = &sd->jobs[i];
        int ran = atomic_load(&r->ran), returned = atomic_load(&r->returned);
        int dones = atomic_load(&r->dones);
        if (!r->accepted) {
            CHECK(ran == 0 && dones == 0);
            continue;
        }
        CHECK(dones == 1);
        CHECK(r->done_loop == was);
        CHECK(ran == returned); /* the free waited for its running jobs */
        if (r->status == 0) {
            CHECK(ran && r->result == r);
            total.ok++;
        } else {
            CHECK(r->status == -ECANCELED);
            if (r->result == NULL) {
                CHECK(!ran);
                total.cancelled_unrun++;
            } else {
                CHECK(ran && r->result == r);
                total.cancelled_ran++;
            }
        }
    }
}

static void *free_other(void *arg)
{
    tern_loop_free(arg);
    return NULL;
}

static void start_pool(void)
{
    tern_pool_config c;
    tern_pool_config_init(&c);
    c.threads = 2;
    c.queue_capacity = 16;
    c.long_threads_max = 4;
    CHECK(tern_pool_start(&c) == 0);
}

static unsigned rounds = DEFAULT_ROUNDS;
static uint64_t seed = DEFAULT_SEED;

TEST(loops_freed_with_jobs_queued_running_and_undelivered)
{
    struct handles before = handles_now();
    unsigned handle_checks = 0, handle_ok = 0;
    start_pool();
    for (unsigned round = 0; round < rounds; round++) {
        fill(&sides[0]);
        fill(&sides[1]);
        for (int k = 0; k < 2; k++)
            for (unsigned i = 0; i < sides[k].n; i++)
                total.delivered_before_free += atomic_load(&sides[k].jobs[i].dones);
        tern_loop *a = sides[0].loop, *b = sides[1].loop;
        tern__thread_t t;
        CHECK(tern__thread_start(&t, free_other, b) == 0);
        tern_loop_free(a);
        tern__thread_join(t, NULL);
        check_side(&sides[0], a);
        check_side(&sides[1], b);
        if (round % 25 == 24 || round + 1 == rounds) {
            CHECK(tern_pool_shutdown(TERN_POOL_DRAIN, 10000 * MS) == 0);
            handle_checks++;
            handle_ok += handles_same(before, handles_now());
            if (round + 1 < rounds)
                start_pool();
        }
    }
    CHECK(handle_ok == handle_checks);
    CHECK(total.accepted > 0 && total.cancelled_unrun > 0 && total.cancelled_ran > 0);
    printf("%u rounds: %u jobs accepted, %u refused; %u done 0, %u cancelled unrun, %u "
           "cancelled after running; %u delivered before the free; handles checked %u times\n",
           rounds, total.accepted, total.refused, total.ok, total.cancelled_unrun,
           total.cancelled_ran, total.delivered_before_free, handle_checks);
}

static const struct runner_test tests[] = {
    RUNNER_TEST(loops_freed_with_jobs_queued_running_and_undelivered),
};

static DWORD WINAPI watchdog(LPVOID arg)
{
    (void)arg;
    Sleep(50000);
    printf("FAIL: the program did not end in 50 s (a hang)\n0 passed, 1 failed\n");
    fflush(stdout);
    ExitProcess(1);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        rounds = (unsigned)strtoul(argv[1], NULL, 10);
    const char *s = getenv("TERN_SEED");
    if (s != NULL && *s != '\0')
        seed = strtoull(s, NULL, 0);
    rng_state = seed;
    printf("seed=0x%016" PRIx64 "\n", seed);
    /* A plain Windows thread: one of tern's would hold thread-local
     * records (handles.h) while it lives. */
    HANDLE dog = CreateThread(NULL, 0, watchdog, NULL, 0, NULL);
    CHECK(dog != NULL);
    CloseHandle(dog);
    handles_warm_up();
    return RUNNER_MAIN(tests);
}
