/*
 * Job records live in their loop's chunks (runtime/core/job_slab.c). A job
 * cancelled while queued is delivered at once, but the queue holds its
 * record until a worker passes the tombstone: the record comes back to
 * the loop then, for reuse, and a loop freed before that leaves the
 * chunk to the pool's hand-back, never to a freed loop. (The second is
 * what valgrind runs of this test check: a chunk freed too early is a
 * write to freed memory, one never freed a leak.)
 */
#include <criterion/criterion.h>

#include "pool_helpers.h"

/*
 * Under AddressSanitizer, a chunk left to the pool must not look leaked
 * while its tombstones wait: the queue's cells hold its records'
 * addresses packed with other bits, which LeakSanitizer cannot follow.
 */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define NO_LEAK_SEEN_NOW() \
    cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "a chunk left to the pool reads as leaked")
#else
#define NO_LEAK_SEEN_NOW() ((void)0)
#endif

enum { CANCELLED = 100, LATER = 150 };

static ph_job blocker, probe, cancelled[CANCELLED], later[LATER];

static void start_one_worker(void)
{
    tern_pool_config cfg = ph_config(1, 512, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
}

/* Queue n jobs behind a blocked worker and cancel them: done comes now. */
static void queue_and_cancel(tern_loop *loop, ph_job *jobs, int n)
{
    for (int i = 0; i < n; i++) {
        ph_job_init(&jobs[i], NULL);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &jobs[i]), 0);
    }
    /* Outside a run the cancel is a request, resolved in the next turn. */
    for (int i = 0; i < n; i++)
        cr_assert_geq(tern_cancel(loop, jobs[i].id), 0);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(jobs, (size_t)n) == n);
    cr_assert(ok);
    for (int i = 0; i < n; i++)
        cr_assert_eq(jobs[i].status, -ECANCELED);
}

Test(job_records, tombstones_the_pool_drops_come_back_for_reuse)
{
    start_one_worker();
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job_init(&blocker, &gate);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &blocker), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    queue_and_cancel(loop, cancelled, CANCELLED);
    ph_gate_open(&gate);
    /* Queued behind the tombstones: once it is done, the worker has
     * handed every one of them back. */
    ph_job_init(&probe, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &probe), 0);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&probe.done_calls) == 1 &&
                                atomic_load(&blocker.done_calls) == 1);
    cr_assert(ok);
    for (int i = 0; i < CANCELLED; i++)
        cr_assert_eq(atomic_load(&cancelled[i].ran), 0);
    uint64_t before = tern_loop_memory_bytes(loop);
    /*
     * The loop has records for 102 jobs at once and no more: fewer than
     * LATER unless the 100 the pool held came back.
     */
    ph_gate gate2;
    ph_gate_init(&gate2);
    for (int i = 0; i < LATER; i++) {
        ph_job_init(&later[i], &gate2);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &later[i]), 0);
    }
    cr_assert_eq(tern_loop_memory_bytes(loop), before,
                 "%d jobs took new records: the %d returned ones were not reused", LATER,
                 CANCELLED);
    ph_gate_open(&gate2);
    PH_PUMP_UNTIL(ok, loop, ph_done_total(later, LATER) == LATER);
    cr_assert(ok);
    tern_loop_free(loop);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
    ph_gate_destroy(&gate2);
    ph_gate_destroy(&gate);
}

Test(job_records, a_loop_freed_before_the_pool_drops_its_tombstones)
{
    start_one_worker();
    tern_loop *holder = NULL, *loop = NULL;
    cr_assert_eq(tern_loop_new(&holder, NULL), 0);
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job_init(&blocker, &gate);
    cr_assert_eq(ph_submit(holder, TERN_BOUNDED, &blocker), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    queue_and_cancel(loop, cancelled, CANCELLED);
    /* Every job of `loop` is done; its records are still in the queue. */
    tern_loop_free(loop);
    NO_LEAK_SEEN_NOW();
    ph_gate_open(&gate);
    ph_job_init(&probe, NULL);
    cr_assert_eq(ph_submit(holder, TERN_BOUNDED, &probe), 0);
    bool ok;
    PH_PUMP_UNTIL(ok, holder, atomic_load(&probe.done_calls) == 1 &&
                                  atomic_load(&blocker.done_calls) == 1);
    cr_assert(ok);
    for (int i = 0; i < CANCELLED; i++)
        cr_assert_eq(atomic_load(&cancelled[i].ran), 0);
    tern_loop_free(holder);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
    ph_gate_destroy(&gate);
}

/* What tern_cancel and tern_ref answer for an id, asked from the loop's thread. */
struct asked {
    tern_id id;
    int cancel, ref;
    bool done;
};

static void ask(tern_loop *loop, tern_id id, void *arg)
{
    (void)id;
    struct asked *a = arg;
    a->cancel = tern_cancel(loop, a->id);
    a->ref = tern_ref(loop, a->id);
    a->done = true;
}

/*
 * Ids name records, which the loop reuses at once: the id of a job whose
 * done has run names nothing, even while a new job lives in its record.
 */
Test(job_records, a_reused_record_gets_a_new_id_and_the_old_one_is_stale)
{
    start_one_worker();
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    ph_job_init(&probe, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &probe), 0);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&probe.done_calls) == 1);
    cr_assert(ok);
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job_init(&blocker, &gate);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &blocker), 0);
    cr_assert_neq(blocker.id, probe.id, "a record's next job must get a new id");
    struct asked a = {.id = probe.id};
    cr_assert_eq(tern_timer_start(loop, 0, 0, ask, &a, NULL), 0);
    PH_PUMP_UNTIL(ok, loop, a.done);
    cr_assert(ok);
    cr_assert_eq(a.cancel, -ENOENT, "a done job's id still names a job (%d)", a.cancel);
    cr_assert_eq(a.ref, -ENOENT);
    ph_gate_open(&gate);
    PH_PUMP_UNTIL(ok, loop, atomic_load(&blocker.done_calls) == 1);
    cr_assert(ok);
    cr_assert_eq(blocker.status, 0, "the stale id's cancel reached the new job");
    tern_loop_free(loop);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
    ph_gate_destroy(&gate);
}

/*
 * A freed loop's chunk numbers go to the next loop that needs one, with
 * the generations its records reached: no id is ever issued twice.
 */
Test(job_records, a_freed_loops_numbers_never_issue_its_ids_again)
{
    enum { ROUNDS = 20 };
    static tern_id first[ROUNDS], second[ROUNDS];
    start_one_worker();
    for (int pass = 0; pass < 2; pass++) {
        tern_id *ids = pass == 0 ? first : second;
        tern_loop *loop = NULL;
        cr_assert_eq(tern_loop_new(&loop, NULL), 0);
        for (int i = 0; i < ROUNDS; i++) {
            ph_job_init(&probe, NULL);
            cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &probe), 0);
            ids[i] = probe.id;
            bool ok;
            PH_PUMP_UNTIL(ok, loop, atomic_load(&probe.done_calls) == 1);
            cr_assert(ok);
        }
        tern_loop_free(loop);
    }
    for (int i = 0; i < ROUNDS; i++)
        for (int j = 0; j < ROUNDS; j++)
            cr_assert_neq(first[i], second[j], "id %#llx issued twice",
                          (unsigned long long)first[i]);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}

/*
 * What a job keeps in its headers' spare room (runtime/core/job_p.h) belongs
 * to that job only: a record reused after a job that timed out and held a
 * deadline gives its next job neither mark. The next job here has no
 * timeout and is cancelled while it runs: its done must say -ECANCELED
 * (a left-over "timed out" mark says -ETIMEDOUT), and its delivery must
 * not give back a deadline claim it never took (a left-over deadline
 * mark does, which the books' audit and the heap's count refuse). Each
 * job's id is new: the generation sits beside the mark and must survive
 * it.
 */
Test(job_records, a_reused_record_keeps_no_mark_of_the_job_before)
{
    start_one_worker();
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    enum { ROUNDS = 3 };
    tern_id ids[2 * ROUNDS];
    for (int round = 0; round < ROUNDS; round++) {
        /* A job that runs past its timeout: flagged, then delivered late. */
        ph_gate gate;
        ph_gate_init(&gate);
        ph_job_init(&blocker, &gate);
        blocker.poll_cancel = true; /* leaves the gate when its timeout flags it */
        tern_job_options opts;
        tern_job_options_init(&opts);
        opts.timeout_ns = 5 * PH_MS;
        cr_assert_eq(tern_submit_with(loop, TERN_BOUNDED, ph_work, ph_done, &blocker, &opts,
                                      &blocker.id),
                     0);
        bool ok;
        PH_PUMP_UNTIL(ok, loop, atomic_load(&blocker.done_calls) == 1);
        cr_assert(ok);
        cr_assert_eq(blocker.status, -ETIMEDOUT);
        ph_gate_destroy(&gate);

        /* The next job takes the same record (the loop reuses the last freed one first). */
        ph_gate gate2;
        ph_gate_init(&gate2);
        ph_job_init(&probe, &gate2);
        probe.poll_cancel = true;
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &probe), 0);
        cr_assert(ph_gate_wait_entered(&gate2, 1));
        cr_assert_geq(tern_cancel(loop, probe.id), 0);
        PH_PUMP_UNTIL(ok, loop, atomic_load(&probe.done_calls) == 1);
        cr_assert(ok);
        cr_assert_eq(probe.status, -ECANCELED,
                     "a cancelled job without a timeout was told %d: the record's last "
                     "job's timeout mark outlived it",
                     probe.status);
        ph_gate_destroy(&gate2);
        ids[2 * round] = blocker.id;
        ids[2 * round + 1] = probe.id;
    }
    for (int i = 0; i < 2 * ROUNDS; i++)
        for (int j = i + 1; j < 2 * ROUNDS; j++)
            cr_assert_neq(ids[i], ids[j], "a record issued id %#llx twice",
                          (unsigned long long)ids[i]);
    tern_loop_free(loop);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}

/*
 * A loop freed while a worker is still inside the hand-back of one of its
 * jobs (held by the seam after the push and the wake, the loop still
 * pinned): the free waits until the worker lets go of the loop. A bounded
 * worker pins in its own slot, not in the loop (runtime/jobs/job.c).
 */
static tern_loop *held_loop;
static atomic_int held_state; /* 0: not yet, 1: a worker is held, 2: let it go */
static atomic_bool held_freed;

static void hold_in_handback(tern_loop *loop)
{
    int expected = 0;
    if (loop != held_loop || !atomic_compare_exchange_strong(&held_state, &expected, 1))
        return;
    uint64_t deadline = ph_now() + PH_LIVENESS_NS;
    while (atomic_load(&held_state) == 1 && ph_now() < deadline)
        ph_sleep_ns(PH_MS / 10);
}

static void *free_held_loop(void *arg)
{
    tern_loop_free(arg);
    atomic_store(&held_freed, true);
    return NULL;
}

Test(job_records, a_loop_is_freed_only_after_its_hand_backs_return)
{
    start_one_worker();
    cr_assert_eq(tern_loop_new(&held_loop, NULL), 0);
    atomic_store(&tern__handback_pushed, hold_in_handback);
    ph_job_init(&probe, NULL);
    cr_assert_eq(ph_submit(held_loop, TERN_BOUNDED, &probe), 0);
    bool ok;
    PH_PUMP_UNTIL(ok, held_loop, atomic_load(&probe.done_calls) == 1);
    cr_assert(ok);
    PH_WAIT_UNTIL(ok, atomic_load(&held_state) == 1);
    cr_assert(ok, "the worker never reached the seam");

    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, free_held_loop, held_loop), 0);
    /* A window to see the free return too early (it must not return at all). */
    ph_sleep_ns(100 * PH_MS);
    bool early = atomic_load(&held_freed);
    atomic_store(&held_state, 2);
    cr_assert_eq(pthread_join(t, NULL), 0);
    atomic_store(&tern__handback_pushed, NULL);
    cr_assert(!early, "tern_loop_free returned while a worker was inside its hand-back");
    cr_assert(atomic_load(&held_freed));
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}
