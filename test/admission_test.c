/*
 * Admission for servers (SPEC §12, include/tern/admission.h): each cause
 * of refusal from each path, named by tern_loop_last_refusal and leaving
 * nothing behind; owners (cap, close with queued, running and finished
 * jobs, stats); deadlines before start, while running and after finish,
 * for jobs and lookups; what tern_cancel says it did; bad input.
 */
#include <criterion/criterion.h>

#include <netdb.h>

#include "pool_helpers.h"

static tern_loop *setup(unsigned threads, unsigned queue, unsigned long_max,
                        const tern_loop_options *opts)
{
    tern_pool_config cfg = ph_config(threads, queue, long_max);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, opts), 0);
    return loop;
}

static void teardown(tern_loop *loop)
{
    tern_loop_free(loop);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}

static unsigned live(tern_loop *loop)
{
    return ph_loop_stats(loop).live_operations;
}

/* A refusal: -EAGAIN, its cause, counted once process-wide, and nothing left live. */
#define ASSERT_REFUSED(loop, call, cause)                                                   \
    do {                                                                                    \
        unsigned live_before_ = live(loop);                                                 \
        tern_pool_stats before_ = ph_stats();                                               \
        int rc_ = (call);                                                                   \
        tern_pool_stats after_ = ph_stats();                                                \
        cr_assert_eq(rc_, -EAGAIN, "%s: %s", #call, tern_err_name(rc_));                    \
        cr_assert_eq(tern_loop_last_refusal(loop), (cause), "cause %s, expected %s",        \
                     tern_refusal_name(tern_loop_last_refusal(loop)),                       \
                     tern_refusal_name(cause));                                             \
        cr_assert(ph_refused_once(&before_, &after_, (cause)),                              \
                  "tern_pool_stats did not count one %s refusal (and nothing else)",        \
                  tern_refusal_name(cause));                                                \
        cr_assert_eq(live(loop), live_before_, "a refused submission left an operation");   \
    } while (0)

static void pump_until_done(tern_loop *loop, ph_job *jobs, int n)
{
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(jobs, (size_t)n) == n);
    cr_assert(ok, "not every job got its done");
}

/* ------------------------------------------------------------------ */
/* Causes                                                              */
/* ------------------------------------------------------------------ */

Test(admission, queue_full_and_owner_cap_and_undelivered_are_told_apart)
{
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.max_undelivered = 4;
    tern_loop *loop = setup(1, 2, 4, &o);
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job j[6];
    for (int i = 0; i < 6; i++)
        ph_job_init(&j[i], i == 0 ? &gate : NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &j[0]), 0);
    cr_assert_eq(tern_loop_last_refusal(loop), TERN_REFUSED_NONE);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &j[1]), 0);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &j[2]), 0);
    /* The queue (capacity 2) is full. */
    ASSERT_REFUSED(loop, ph_submit(loop, TERN_BOUNDED, &j[3]), TERN_REFUSED_QUEUE_FULL);

    /* An owner with a cap of 1 is refused for its own cap first. */
    tern_id owner;
    cr_assert_eq(tern_owner_open(loop, 1, &owner), 0);
    tern_job_options jo;
    tern_job_options_init(&jo);
    jo.owner = owner;
    cr_assert_eq(tern_submit_with(loop, TERN_LONG, ph_work, ph_done, &j[3], &jo, &j[3].id), 0);
    ASSERT_REFUSED(loop, tern_submit_with(loop, TERN_LONG, ph_work, ph_done, &j[4], &jo, NULL),
                   TERN_REFUSED_OWNER_CAP);
    tern_owner_stats os;
    cr_assert_eq(tern_owner_stats_get(loop, owner, &os), 0);
    cr_assert_eq(os.cap, 1);
    cr_assert_eq(os.refused, 1);
    cr_assert_eq(os.accepted, 1);

    /* Four credits held (one running, two queued, one long): undelivered. */
    ASSERT_REFUSED(loop, ph_submit(loop, TERN_LONG, &j[4]), TERN_REFUSED_UNDELIVERED);
    ph_gate_open(&gate);
    pump_until_done(loop, j, 4);
    cr_assert_eq(tern_owner_stats_get(loop, owner, &os), 0);
    cr_assert_eq(os.in_flight, 0);
    cr_assert_eq(tern_owner_close(loop, owner), 0);
    teardown(loop);
    ph_gate_destroy(&gate);
}

Test(admission, long_ceiling_and_operations)
{
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.max_operations = 3;
    tern_loop *loop = setup(1, 16, 1, &o);
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job a, b, c;
    ph_job_init(&a, &gate);
    ph_job_init(&b, NULL);
    ph_job_init(&c, NULL);
    cr_assert_eq(ph_submit(loop, TERN_LONG, &a), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    ASSERT_REFUSED(loop, ph_submit(loop, TERN_LONG, &b), TERN_REFUSED_LONG_CEILING);
    tern_id owner;
    cr_assert_eq(tern_owner_open(loop, 4, &owner), 0); /* the second live operation */
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &b), 0); /* the third */
    ASSERT_REFUSED(loop, ph_submit(loop, TERN_BOUNDED, &c), TERN_REFUSED_OPERATIONS);
    ph_gate_open(&gate);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&a.done_calls) == 1 && atomic_load(&b.done_calls) == 1);
    cr_assert(ok);
    cr_assert_eq(tern_owner_close(loop, owner), 0);
    teardown(loop);
    ph_gate_destroy(&gate);
}

struct shutdown_arg {
    atomic_int rc;
    atomic_bool returned;
};

static void *shut_down(void *arg)
{
    struct shutdown_arg *s = arg;
    atomic_store(&s->rc, tern_pool_shutdown(TERN_POOL_DRAIN, 30 * PH_SEC));
    atomic_store(&s->returned, true);
    return NULL;
}

Test(admission, a_shutdown_under_way_is_a_cause_too)
{
    /* Two workers: a job accepted before the shutdown began still runs. */
    tern_loop *loop = setup(2, 16, 4, NULL);
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job running, late;
    ph_job_init(&running, &gate);
    ph_job_init(&late, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &running), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    struct shutdown_arg s = {0};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, shut_down, &s), 0);
    /* The shutdown waits for the running job; meanwhile submissions say why. */
    int rc = 0;
    uint64_t deadline = ph_now() + PH_LIVENESS_NS;
    tern_pool_stats before = ph_stats();
    while ((rc = ph_submit(loop, TERN_BOUNDED, &late)) == 0 && ph_now() < deadline) {
        bool ok;
        PH_PUMP_UNTIL(ok, loop, atomic_load(&late.done_calls) == 1);
        cr_assert(ok);
        ph_job_init(&late, NULL);
        ph_sleep_ns(PH_MS / 10);
    }
    cr_assert_eq(rc, -EAGAIN);
    cr_assert_eq(tern_loop_last_refusal(loop), TERN_REFUSED_SHUTDOWN);
    tern_pool_stats after = ph_stats();
    cr_assert(ph_refused_once(&before, &after, TERN_REFUSED_SHUTDOWN),
              "the shutdown refusal was not counted once (refused_shutdown %llu -> %llu)",
              (unsigned long long)before.refused_shutdown,
              (unsigned long long)after.refused_shutdown);
    ph_gate_open(&gate);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&running.done_calls) == 1);
    cr_assert(ok);
    pthread_join(t, NULL);
    cr_assert_eq(atomic_load(&s.rc), 0);
    /* After it, a submission starts a fresh pool. */
    ph_job_init(&late, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &late), 0);
    cr_assert_eq(tern_loop_last_refusal(loop), TERN_REFUSED_NONE);
    PH_PUMP_UNTIL(ok, loop, atomic_load(&late.done_calls) == 1);
    cr_assert(ok);
    teardown(loop);
    ph_gate_destroy(&gate);
}

Test(admission, refusal_names)
{
    cr_assert_str_eq(tern_refusal_name(TERN_REFUSED_NONE), "none");
    cr_assert_str_eq(tern_refusal_name(TERN_REFUSED_QUEUE_FULL), "queue_full");
    cr_assert_str_eq(tern_refusal_name(TERN_REFUSED_LONG_CEILING), "long_ceiling");
    cr_assert_str_eq(tern_refusal_name(TERN_REFUSED_UNDELIVERED), "undelivered");
    cr_assert_str_eq(tern_refusal_name(TERN_REFUSED_OPERATIONS), "operations");
    cr_assert_str_eq(tern_refusal_name(TERN_REFUSED_OWNER_CAP), "owner_cap");
    cr_assert_str_eq(tern_refusal_name(TERN_REFUSED_SHUTDOWN), "shutdown");
    cr_assert_str_eq(tern_refusal_name(TERN_REFUSED_THREADS), "threads");
    cr_assert_str_eq(tern_refusal_name((tern_refusal)99), "?");
}

/* ------------------------------------------------------------------ */
/* Owners                                                              */
/* ------------------------------------------------------------------ */

Test(admission, closing_an_owner_cancels_queued_and_running_but_not_finished)
{
    tern_loop *loop = setup(2, 16, 4, NULL);
    tern_id owner;
    cr_assert_eq(tern_owner_open(loop, 8, &owner), 0);
    tern_job_options jo;
    tern_job_options_init(&jo);
    jo.owner = owner;
    ph_gate gate, hold;
    ph_gate_init(&gate);
    ph_gate_init(&hold);
    ph_job finished, running, blocker, queued;
    ph_job_init(&finished, NULL);
    ph_job_init(&running, &gate);
    running.poll_cancel = true;
    ph_job_init(&blocker, &hold); /* not the owner's: holds the other worker */
    ph_job_init(&queued, NULL);

    cr_assert_eq(tern_submit_with(loop, TERN_BOUNDED, ph_work, ph_done, &finished, &jo,
                                  &finished.id), 0);
    bool ok;
    /* Returned and handed back: the worker runs dry only after its hand-back. */
    PH_WAIT_UNTIL(ok, atomic_load(&finished.returned) == 1 && ph_stats().busy == 0);
    cr_assert(ok);
    cr_assert_eq(tern_submit_with(loop, TERN_BOUNDED, ph_work, ph_done, &running, &jo,
                                  &running.id), 0);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &blocker), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    cr_assert(ph_gate_wait_entered(&hold, 1));
    cr_assert_eq(tern_submit_with(loop, TERN_BOUNDED, ph_work, ph_done, &queued, &jo,
                                  &queued.id), 0);
    tern_owner_stats os;
    cr_assert_eq(tern_owner_stats_get(loop, owner, &os), 0);
    cr_assert_eq(os.in_flight, 3);

    cr_assert_eq(tern__test_cancel_now(loop, owner), TERN_CANCEL_STOPPED, "cancel closes it");
    cr_assert_eq(tern_owner_close(loop, owner), -ENOENT, "the id is stale at once");
    cr_assert_eq(tern_owner_stats_get(loop, owner, &os), -ENOENT);
    ph_gate_open(&hold);
    ph_job *mine[] = {&finished, &running, &queued};
    PH_PUMP_UNTIL(ok, loop, atomic_load(&finished.done_calls) == 1 &&
                                atomic_load(&running.done_calls) == 1 &&
                                atomic_load(&queued.done_calls) == 1 &&
                                atomic_load(&blocker.done_calls) == 1);
    cr_assert(ok);
    for (size_t i = 0; i < 3; i++)
        cr_assert_eq(atomic_load(&mine[i]->done_calls), 1);
    cr_assert_eq(finished.status, 0, "a finished job keeps its result");
    cr_assert_eq(running.status, -ECANCELED);
    cr_assert(atomic_load(&running.saw_cancel), "the running job was not flagged");
    cr_assert_eq(queued.status, -ECANCELED);
    cr_assert_eq(atomic_load(&queued.ran), 0, "a queued job of a closed owner ran");
    cr_assert_eq(blocker.status, 0, "another owner's job was touched");
    teardown(loop);
    ph_gate_destroy(&gate);
    ph_gate_destroy(&hold);
}

static int stub_getaddrinfo(const char *host, const char *service, const struct addrinfo *hints,
                            struct addrinfo **res)
{
    (void)host, (void)service, (void)hints;
    struct addrinfo h = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
                         .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
    return getaddrinfo("127.0.0.1", "80", &h, res);
}

struct lookup_rec {
    atomic_int calls;
    int status;
};

static void on_lookup(tern_loop *loop, tern_id id, int status, struct addrinfo *res, void *arg)
{
    (void)loop, (void)id;
    struct lookup_rec *r = arg;
    r->status = status;
    tern_freeaddrinfo(res);
    atomic_fetch_add(&r->calls, 1);
}

Test(admission, lookups_count_against_their_owner)
{
    tern__set_getaddrinfo(stub_getaddrinfo);
    tern_loop *loop = setup(1, 16, 4, NULL);
    tern_id owner;
    cr_assert_eq(tern_owner_open(loop, 1, &owner), 0);
    tern_job_options jo;
    tern_job_options_init(&jo);
    jo.owner = owner;
    struct lookup_rec a = {0}, b = {0};
    cr_assert_eq(tern_resolve_with(loop, "x.invalid", "80", NULL, on_lookup, &a, &jo, NULL), 0);
    ASSERT_REFUSED(loop, tern_resolve_with(loop, "x.invalid", "80", NULL, on_lookup, &b, &jo, NULL),
                   TERN_REFUSED_OWNER_CAP);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&a.calls) == 1);
    cr_assert(ok);
    cr_assert_eq(a.status, 0);
    /* The done has started: the owner's slot is free again. */
    cr_assert_eq(tern_resolve_with(loop, "x.invalid", "80", NULL, on_lookup, &b, &jo, NULL), 0);
    PH_PUMP_UNTIL(ok, loop, atomic_load(&b.calls) == 1);
    cr_assert(ok);
    cr_assert_eq(tern_owner_close(loop, owner), 0);
    teardown(loop);
    tern__set_getaddrinfo(NULL);
}

Test(admission, an_open_owner_is_closed_by_teardown_and_keeps_nothing_running)
{
    tern_loop *loop = setup(1, 16, 4, NULL);
    tern_id owner;
    cr_assert_eq(tern_owner_open(loop, 2, &owner), 0);
    cr_assert_eq(live(loop), 1);
    cr_assert_eq(tern_loop_run(loop), 0, "an owner alone kept the loop running");
    tern_job_options jo;
    tern_job_options_init(&jo);
    jo.owner = owner;
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job j;
    ph_job_init(&j, &gate);
    j.poll_cancel = true;
    cr_assert_eq(tern_submit_with(loop, TERN_LONG, ph_work, ph_done, &j, &jo, &j.id), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    teardown(loop); /* cancels the job (it sees the flag) and closes the owner */
    cr_assert_eq(atomic_load(&j.done_calls), 1);
    cr_assert_eq(j.status, -ECANCELED);
    ph_gate_destroy(&gate);
}

/* ------------------------------------------------------------------ */
/* Deadlines                                                           */
/* ------------------------------------------------------------------ */

Test(admission, a_deadline_before_start_means_the_work_never_runs)
{
    tern_loop *loop = setup(1, 16, 4, NULL);
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job blocker, late;
    ph_job_init(&blocker, &gate);
    ph_job_init(&late, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &blocker), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    tern_job_options jo;
    tern_job_options_init(&jo);
    jo.timeout_ns = PH_MS;
    cr_assert_eq(tern_submit_with(loop, TERN_BOUNDED, ph_work, ph_done, &late, &jo, &late.id), 0);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&late.done_calls) == 1);
    cr_assert(ok, "the deadline never fired");
    cr_assert_eq(late.status, -ETIMEDOUT);
    cr_assert_null(late.done_result);
    cr_assert_eq(late.done_step, 2);
    /* Counted as timed out, not as cancelled. */
    tern_pool_stats s = ph_stats();
    cr_assert_eq(s.timed_out, 1u);
    cr_assert_eq(s.cancelled, 0u, "a timeout was counted as a cancel");
    ph_gate_open(&gate);
    PH_PUMP_UNTIL(ok, loop, atomic_load(&blocker.done_calls) == 1);
    cr_assert(ok);
    cr_assert_eq(atomic_load(&late.ran), 0, "a job past its deadline still ran");
    cr_assert_eq(blocker.status, 0);
    teardown(loop);
    ph_gate_destroy(&gate);
}

Test(admission, a_deadline_while_running_flags_the_job)
{
    tern_loop *loop = setup(1, 16, 4, NULL);
    for (int occ = TERN_BOUNDED; occ <= TERN_LONG; occ++) {
        ph_gate gate;
        ph_job j;
        /*
         * The job must have started before its deadline: on a loaded
         * machine a worker may take longer than the timeout to reach it,
         * and then the deadline (rightly) stops it unstarted. Try again
         * with ten times the timeout until it has run (bounded).
         */
        uint64_t timeout = 5 * PH_MS;
        bool ok;
        for (int attempt = 0;; attempt++, timeout *= 10) {
            cr_assert_lt(attempt, 4, "the job never started within %llu ns",
                         (unsigned long long)timeout);
            ph_gate_init(&gate);
            ph_job_init(&j, &gate);
            j.poll_cancel = true;
            tern_job_options jo;
            tern_job_options_init(&jo);
            jo.timeout_ns = timeout;
            cr_assert_eq(tern_submit_with(loop, (tern_occupancy)occ, ph_work, ph_done, &j, &jo,
                                          &j.id), 0);
            PH_PUMP_UNTIL(ok, loop, atomic_load(&j.done_calls) == 1);
            cr_assert(ok);
            if (atomic_load(&j.ran) == 1)
                break;
            cr_assert_eq(j.status, -ETIMEDOUT, "an unstarted job's status");
            ph_gate_destroy(&gate);
        }
        cr_assert_eq(j.status, -ETIMEDOUT);
        cr_assert(atomic_load(&j.saw_cancel), "tern_job_cancelled stayed false past the deadline");
        cr_assert_eq(j.done_result, &j, "a running job's result is handed to done");
        ph_gate_destroy(&gate);
    }
    teardown(loop);
}

Test(admission, a_deadline_after_finish_changes_nothing)
{
    tern_loop *loop = setup(1, 16, 4, NULL);
    ph_job j;
    ph_job_init(&j, NULL);
    tern_job_options jo;
    tern_job_options_init(&jo);
    jo.timeout_ns = 3600 * PH_SEC;
    cr_assert_eq(tern_submit_with(loop, TERN_BOUNDED, ph_work, ph_done, &j, &jo, &j.id), 0);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&j.done_calls) == 1);
    cr_assert(ok);
    cr_assert_eq(j.status, 0);
    /* The deadline left the heap with the job: nothing keeps the loop. */
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(live(loop), 0);
    teardown(loop);
}

static ph_gate resolver_gate;

static int stalled_getaddrinfo(const char *host, const char *service,
                               const struct addrinfo *hints, struct addrinfo **res)
{
    (void)host, (void)service, (void)hints;
    (void)ph_gate_pass(&resolver_gate, NULL);
    *res = NULL;
    return EAI_AGAIN;
}

Test(admission, a_stalled_lookup_times_out)
{
    ph_gate_init(&resolver_gate);
    tern__set_getaddrinfo(stalled_getaddrinfo);
    tern_loop *loop = setup(2, 16, 4, NULL);
    tern_job_options jo;
    tern_job_options_init(&jo);
    jo.timeout_ns = 5 * PH_MS;
    struct lookup_rec r = {0};
    cr_assert_eq(tern_resolve_with(loop, "stalled.invalid", "80", NULL, on_lookup, &r, &jo, NULL),
                 0);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&r.calls) == 1);
    cr_assert(ok, "the caller was held by a stalled resolver");
    cr_assert_eq(r.status, -ETIMEDOUT);
    ph_gate_open(&resolver_gate);
    teardown(loop);
    tern__set_getaddrinfo(NULL);
    ph_gate_destroy(&resolver_gate);
}

/* ------------------------------------------------------------------ */
/* What a cancel did                                                   */
/* ------------------------------------------------------------------ */

Test(admission, cancel_says_stopped_running_finished_or_requested)
{
    tern_loop *loop = setup(1, 16, 4, NULL);
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job running, queued, finished, foreign;
    ph_job_init(&running, &gate);
    running.poll_cancel = true;
    ph_job_init(&queued, NULL);
    ph_job_init(&finished, NULL);
    ph_job_init(&foreign, NULL);
    cr_assert_eq(ph_submit(loop, TERN_LONG, &finished), 0);
    bool ok;
    /* Returned and handed back: the long worker counts itself idle only after. */
    PH_WAIT_UNTIL(ok, atomic_load(&finished.returned) == 1 && ph_stats().long_busy == 0);
    cr_assert(ok);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &running), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &queued), 0);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &foreign), 0);

    /* Before any turn: finished's done has not been delivered yet. */
    cr_assert_eq(tern__test_cancel_now(loop, finished.id), TERN_CANCEL_FINISHED);
    cr_assert_eq(tern__test_cancel_now(loop, queued.id), TERN_CANCEL_STOPPED);
    cr_assert_eq(tern_cancel(loop, foreign.id), TERN_CANCEL_REQUESTED,
                 "nobody runs the loop: queued");
    /* Resolve it while the only worker is still held by `running`. */
    tern_loop_run_once(loop, 0);
    cr_assert_eq(tern__test_cancel_now(loop, running.id), TERN_CANCEL_RUNNING);
    PH_PUMP_UNTIL(ok, loop, ph_done_total(&running, 1) + ph_done_total(&queued, 1) +
                                    ph_done_total(&finished, 1) + ph_done_total(&foreign, 1) ==
                                4);
    cr_assert(ok);
    cr_assert_eq(queued.status, -ECANCELED);
    cr_assert_eq(atomic_load(&queued.ran), 0);
    cr_assert_eq(running.status, -ECANCELED);
    cr_assert_eq(finished.status, 0);
    cr_assert_eq(foreign.status, -ECANCELED);
    cr_assert_eq(atomic_load(&foreign.ran), 0);
    teardown(loop);
    ph_gate_destroy(&gate);
}

/* ------------------------------------------------------------------ */
/* Bad input                                                           */
/* ------------------------------------------------------------------ */

Test(admission, bad_input_changes_nothing)
{
    tern_loop *loop = setup(1, 16, 4, NULL);
    tern_id owner = 0;
    cr_assert_eq(tern_owner_open(loop, 0, &owner), -EINVAL);
    cr_assert_eq(tern_owner_open(loop, (1u << 31) + 1, &owner), -EINVAL);
    cr_assert_eq(owner, 0);
    cr_assert_eq(live(loop), 0);
    cr_assert_eq(tern_owner_close(loop, 0), -EINVAL);
    cr_assert_eq(tern_owner_close(loop, 12345), -ENOENT);
    tern_owner_stats os;
    cr_assert_eq(tern_owner_stats_get(loop, 0, &os), -EINVAL);
    cr_assert_eq(tern_owner_stats_get(loop, 12345, &os), -ENOENT);

    ph_job j;
    ph_job_init(&j, NULL);
    tern_job_options jo;
    tern_job_options_init(&jo);
    jo.owner = 12345; /* never an owner */
    cr_assert_eq(tern_submit_with(loop, TERN_BOUNDED, ph_work, ph_done, &j, &jo, NULL), -EINVAL);
    tern_id closed;
    cr_assert_eq(tern_owner_open(loop, 1, &closed), 0);
    cr_assert_eq(tern_owner_close(loop, closed), 0);
    jo.owner = closed;
    cr_assert_eq(tern_submit_with(loop, TERN_BOUNDED, ph_work, ph_done, &j, &jo, NULL), -EINVAL);
    jo.owner = 0;
    jo.timeout_ns = (UINT64_C(1) << 62) + 1;
    cr_assert_eq(tern_submit_with(loop, TERN_BOUNDED, ph_work, ph_done, &j, &jo, NULL), -EINVAL);
    cr_assert_eq(tern_submit_with(loop, TERN_BOUNDED, NULL, ph_done, &j, NULL, NULL), -EINVAL);
    cr_assert_eq(tern_resolve_with(loop, NULL, NULL, NULL, on_lookup, NULL, NULL, NULL), -EINVAL);
    cr_assert_eq(live(loop), 0, "bad input left an operation");
    cr_assert_eq(atomic_load(&j.ran), 0);
    cr_assert_eq(ph_stats().submitted, 0);
    /* NULL options are plain tern_submit. */
    cr_assert_eq(tern_submit_with(loop, TERN_BOUNDED, ph_work, ph_done, &j, NULL, &j.id), 0);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&j.done_calls) == 1);
    cr_assert(ok);
    teardown(loop);
}
