/*
 * Races and faults of the hand-offs between a loop and the pool, found by
 * reading, one test each (each seen to fail on the code before its fix):
 *
 *   - a job handed to a worker but not yet started still counts as in
 *     flight: TERN_POOL_CANCEL flags it, TERN_POOL_DRAIN times out on it
 *     (it used to count only once it ran, so shutdown joined the worker
 *     and the job ran uncancelled);
 *   - a cancel of a stream during its name lookup, from another thread on
 *     a loop nobody runs, reaches the lookup (it used to be queued for an
 *     internal id that step 1 could not see, so the lookup ran);
 *   - options at the top of their documented ranges cost what is used, or
 *     -ENOMEM, never the whole range written up front;
 *   - getaddrinfo's EAI_SYSTEM with errno 0 is a failure, not success.
 */
#include <criterion/criterion.h>

#include <netdb.h>
#include <stdio.h>
#include <unistd.h>

#include "pool_helpers.h"
#include "tern/net.h"

/* ------------------------------------------------------------------ */
/* Jobs handed over but not started                                    */
/* ------------------------------------------------------------------ */

static tern_loop *pool_and_loop(unsigned threads)
{
    tern_pool_config cfg = ph_config(threads, 64, 4);
    tern_loop *loop = NULL;
    cr_assert_eq(tern_pool_start(&cfg), 0);
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    return loop;
}

/* Submit, then shut down at once in CANCEL mode: the job must see it. */
static void cancel_at_once(tern_occupancy occ)
{
    tern_loop *loop = pool_and_loop(1);
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job j;
    ph_job_init(&j, &gate);
    j.poll_cancel = true; /* leaves the gate only when cancelled (or at the bound) */
    cr_assert_eq(ph_submit(loop, occ, &j), 0);
    int rc = tern_pool_shutdown(TERN_POOL_CANCEL, 10 * PH_SEC);
    cr_assert_eq(rc, 0, "shutdown: %s", tern_err_name(rc));
    /* Either it never ran (tombstoned) or it ran and saw the flag. */
    cr_assert(atomic_load(&j.ran) == 0 || atomic_load(&j.saw_cancel),
              "the job ran to its end uncancelled in TERN_POOL_CANCEL mode");
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&j.done_calls) == 1);
    cr_assert(ok, "no done after shutdown");
    cr_assert_eq(j.status, -ECANCELED);
    tern_loop_free(loop);
    ph_gate_destroy(&gate);
}

Test(handover, long_job_submitted_then_cancel_shutdown_is_flagged)
{
    cancel_at_once(TERN_LONG);
}

Test(handover, bounded_job_submitted_then_cancel_shutdown_is_flagged)
{
    cancel_at_once(TERN_BOUNDED);
}

/* Submit, then shut down at once in DRAIN mode with a short timeout. */
static void drain_times_out(tern_occupancy occ)
{
    tern_loop *loop = pool_and_loop(1);
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job j;
    ph_job_init(&j, &gate);
    cr_assert_eq(ph_submit(loop, occ, &j), 0);
    int rc = tern_pool_shutdown(TERN_POOL_DRAIN, 20 * PH_MS);
    cr_assert_eq(rc, -ETIMEDOUT, "a job on its way to a worker is in flight: %s",
                 tern_err_name(rc));
    cr_assert(tern__pool_running(), "a timed-out shutdown freed the pool");
    ph_gate_open(&gate);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&j.done_calls) == 1);
    cr_assert(ok);
    cr_assert_eq(j.status, 0);
    tern_loop_free(loop);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
    ph_gate_destroy(&gate);
}

Test(handover, long_job_submitted_then_drain_shutdown_times_out)
{
    drain_times_out(TERN_LONG);
}

Test(handover, bounded_job_submitted_then_drain_shutdown_times_out)
{
    drain_times_out(TERN_BOUNDED);
}

/* A timed-out shutdown leaves the pool accepting work as before. */
Test(handover, pool_accepts_after_a_timed_out_shutdown)
{
    tern_loop *loop = pool_and_loop(2);
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job blocker, later;
    ph_job_init(&blocker, &gate);
    ph_job_init(&later, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &blocker), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, PH_MS), -ETIMEDOUT);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &later), 0);
    ph_gate_open(&gate);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&later.done_calls) == 1 &&
                                atomic_load(&blocker.done_calls) == 1);
    cr_assert(ok);
    tern_loop_free(loop);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
    ph_gate_destroy(&gate);
}

/* ------------------------------------------------------------------ */
/* A foreign cancel of a stream during its lookup, nobody running      */
/* ------------------------------------------------------------------ */

static atomic_uint lookups_called;

static int counting_getaddrinfo(const char *host, const char *service,
                                const struct addrinfo *hints, struct addrinfo **res)
{
    (void)host, (void)service, (void)hints, (void)res;
    atomic_fetch_add(&lookups_called, 1);
    return EAI_NONAME;
}

struct connect_result {
    atomic_int calls;
    int status;
};

static void on_connect(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id;
    struct connect_result *r = arg;
    r->status = status;
    atomic_fetch_add(&r->calls, 1);
}

struct foreign_cancel {
    tern_loop *loop;
    tern_id id;
    int rc;
};

static void *cancel_from_elsewhere(void *arg)
{
    struct foreign_cancel *f = arg;
    f->rc = tern_cancel(f->loop, f->id);
    return NULL;
}

Test(handover, foreign_cancel_of_a_connect_reaches_its_lookup)
{
    tern__set_getaddrinfo(counting_getaddrinfo);
    tern_loop *loop = pool_and_loop(1);
    /* Hold the only worker so the lookup stays queued. */
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job blocker;
    ph_job_init(&blocker, &gate);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &blocker), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));

    struct connect_result r = {0};
    tern_id stream;
    cr_assert_eq(tern_tcp_connect(loop, "tern-test.invalid", 80, 0, on_connect, &r, &stream), 0);
    /* Another thread cancels the stream while nobody runs the loop. */
    struct foreign_cancel f = {loop, stream, 1};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, cancel_from_elsewhere, &f), 0);
    pthread_join(t, NULL);
    cr_assert_eq(f.rc, TERN_CANCEL_REQUESTED, "queued: %d", f.rc);

    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&r.calls) == 1);
    cr_assert(ok, "the cancelled connect never called back");
    cr_assert_eq(r.status, -ECANCELED);
    ph_gate_open(&gate);
    PH_PUMP_UNTIL(ok, loop, atomic_load(&blocker.done_calls) == 1);
    cr_assert(ok);
    tern_loop_free(loop);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
    cr_assert_eq(atomic_load(&lookups_called), 0,
                 "the lookup of a cancelled connect still ran (its cancel was dropped)");
    tern__set_getaddrinfo(NULL);
    ph_gate_destroy(&gate);
}

/* ------------------------------------------------------------------ */
/* Options at the top of their ranges                                  */
/* ------------------------------------------------------------------ */

/* Resident set size in bytes (/proc/self/statm). */
static uint64_t rss(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    cr_assert_not_null(f);
    unsigned long size = 0, resident = 0;
    cr_assert_eq(fscanf(f, "%lu %lu", &size, &resident), 2);
    fclose(f);
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HUGE_SKIP() cr_skip_test("sanitizer allocators reserve shadow for huge allocations")
#else
#define HUGE_SKIP() ((void)0)
#endif

#define RSS_SLACK (64ull << 20) /* what one job, a loop and a thread may add */

static void one_job_round_trip(tern_loop *loop, bool may_fail)
{
    ph_job j;
    ph_job_init(&j, NULL);
    int rc = ph_submit(loop, TERN_BOUNDED, &j);
    cr_assert(rc == 0 || (rc == -ENOMEM && may_fail), "submit: %s", tern_err_name(rc));
    if (rc == 0) {
        bool ok;
        PH_PUMP_UNTIL(ok, loop, atomic_load(&j.done_calls) == 1);
        cr_assert(ok);
    }
}

Test(handover, huge_queue_capacity_costs_what_is_used)
{
    HUGE_SKIP();
    uint64_t before = rss();
    for (unsigned shift = 28; shift <= 31; shift += 3) {
        tern_pool_config cfg = ph_config(1, 1u << shift, 4);
        int rc = tern_pool_start(&cfg);
        /* 2^28 cells are 4 GiB of address space: it must be granted. */
        cr_assert(rc == 0 || (rc == -ENOMEM && shift > 28), "start with 2^%u: %s", shift,
                  tern_err_name(rc));
        if (rc < 0) {
            cr_assert(!tern__pool_running(), "a failed start left a pool");
            continue;
        }
        cr_assert_lt(rss() - before, RSS_SLACK, "a 2^%u queue was written up front", shift);
        tern_loop *loop;
        tern_loop_options o;
        tern_loop_options_init(&o);
        o.pool = &cfg;
        cr_assert_eq(tern_loop_new(&loop, &o), 0);
        one_job_round_trip(loop, false);
        tern_loop_free(loop);
        cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
    }
}

Test(handover, huge_max_undelivered_costs_what_is_used)
{
    HUGE_SKIP();
    cr_assert_eq(tern_pool_start(NULL), 0);
    uint64_t before = rss();
    for (unsigned shift = 28; shift <= 31; shift += 3) {
        tern_loop_options o;
        tern_loop_options_init(&o);
        o.max_undelivered = o.max_operations = 1u << shift;
        tern_loop *loop;
        cr_assert_eq(tern_loop_new(&loop, &o), 0);
        one_job_round_trip(loop, shift > 28);
        cr_assert_lt(rss() - before, RSS_SLACK, "a 2^%u result ring was written up front",
                     shift);
        tern_loop_free(loop);
    }
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}

/* ------------------------------------------------------------------ */
/* EAI_SYSTEM without errno                                            */
/* ------------------------------------------------------------------ */

static int system_error_without_errno(const char *host, const char *service,
                                      const struct addrinfo *hints, struct addrinfo **res)
{
    (void)host, (void)service, (void)hints, (void)res;
    errno = 0;
    return EAI_SYSTEM;
}

struct lookup_result {
    atomic_int calls;
    int status;
    struct addrinfo *res;
};

static void on_lookup(tern_loop *loop, tern_id id, int status, struct addrinfo *res, void *arg)
{
    (void)loop, (void)id;
    struct lookup_result *r = arg;
    r->status = status;
    r->res = res;
    atomic_fetch_add(&r->calls, 1);
}

Test(handover, eai_system_with_errno_zero_is_a_failure)
{
    tern__set_getaddrinfo(system_error_without_errno);
    tern_loop *loop = pool_and_loop(1);
    struct lookup_result r = {0};
    cr_assert_eq(tern_resolve(loop, "tern-test.invalid", "80", NULL, on_lookup, &r, NULL), 0);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&r.calls) == 1);
    cr_assert(ok);
    cr_assert_neq(r.status, 0, "a failed lookup reported success with no result");
    cr_assert_null(r.res);
    cr_assert_eq(r.status, TERN_EAI_OTHER, "status %s", tern_err_name(r.status));
    tern_loop_free(loop);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
    tern__set_getaddrinfo(NULL);
}
