/*
 * The books audit (TERN_CHECK_BOOKS; runtime/jobs/books.c and
 * tern__jobs_check_books in runtime/jobs/job.c) catches each ledger it
 * keeps when that ledger is wrong. A sound loop passes it; then, in a
 * forked child (abort_helpers.h), one counter is set to what a tern bug
 * would leave, the audit runs, and the child must die of SIGABRT with the
 * audit's report naming that ledger, and no other: each case breaks only
 * the counter its check reads, so every earlier check still passes.
 *
 * These are the only tests that write a loop's private fields
 * (runtime/core/loop_p.h): there is no other way to make an audit of
 * tern's own counters fail without breaking tern.
 */
#include "abort_helpers.h"
#include "loop_helpers.h"

#include "loop_p.h"
#include "ring.h"

static void noop_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id, (void)arg;
}

static void *quick_work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

static void count_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)status, (void)result;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

/* A loop whose result ring exists (one job submitted and delivered) and
 * whose books balance. */
static tern_loop *loop_with_ring(void)
{
    tern_loop *loop = NULL;
    if (tern_loop_new(&loop, NULL) != 0)
        child_exit(3);
    static atomic_uint done;
    if (tern_submit(loop, TERN_BOUNDED, quick_work, count_done, &done, NULL) != 0)
        child_exit(4);
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (atomic_load(&done) == 0 && mono_ns() < end)
        tern_loop_run_once(loop, 10 * (int64_t)MS);
    if (atomic_load(&done) != 1 || loop->ring == NULL)
        child_exit(5);
    return loop;
}

static tern_loop *plain_loop(void)
{
    tern_loop *loop = NULL;
    if (tern_loop_new(&loop, NULL) != 0)
        child_exit(3);
    return loop;
}

struct books_case {
    const char *rule; /* the audit's words for the ledger */
    const char *fn;   /* the function that reports it */
    bool ring;        /* the case needs the result ring */
    void (*corrupt)(tern_loop *loop);
};

static void over_max_undelivered(tern_loop *l)
{
    l->undelivered = l->max_undelivered + 1;
}
static void ops_local_off(tern_loop *l)
{
    l->ops_local++;
    atomic_store(&l->ops_count, l->ops_local);
}
static void ops_count_off(tern_loop *l)
{
    atomic_store(&l->ops_count, l->ops_local + 1);
}
static void refs_over_ops(tern_loop *l)
{
    l->refs = l->ops_local + 1;
}
static void heap_over_claims(tern_loop *l)
{
    if (tern_timer_start(l, HOUR, 0, noop_timer, NULL, NULL) != 0 || l->heap.len == 0)
        child_exit(6);
    l->heap.claims = l->heap.len - 1;
}
static void due_over_live(tern_loop *l)
{
    l->timers.due_live = l->timers.live + 1;
}
static void ready_count_off(tern_loop *l)
{
    l->ready_count++;
}
static void posts_done_over_posted(tern_loop *l)
{
    atomic_store(&l->posts_done, atomic_load(&l->posted) + 1);
}
static void credits_without_ring(tern_loop *l)
{
    if (l->ring != NULL)
        child_exit(6);
    l->undelivered = 1;
}
static void ring_head_past_tail(tern_loop *l)
{
    atomic_store(&l->ring->head, atomic_load(&l->ring->tail) + 1);
}
static void long_over_all(tern_loop *l)
{
    l->long_undelivered = l->undelivered + 1;
}
static void credits_over_jobs(tern_loop *l)
{
    l->undelivered = l->jobs_live + 1;
}
static void results_disagree(tern_loop *l)
{
    l->results_tail = &l->results; /* a tail with no head */
}
static void ring_over_credits(tern_loop *l)
{
    atomic_store(&l->ring->tail, atomic_load(&l->ring->head) + l->undelivered + 1);
}

static const struct books_case cases[] = {
    {"undelivered > max_undelivered", "tern__loop_check_books", false, over_max_undelivered},
    {"live operations (ops_local) != id map count", "tern__loop_check_books", false,
     ops_local_off},
    {"published ops_count != ops_local", "tern__loop_check_books", false, ops_count_off},
    {"refs > live operations", "tern__loop_check_books", false, refs_over_ops},
    {"heap entries > heap claims", "tern__loop_check_books", false, heap_over_claims},
    {"due timers > live timers", "tern__loop_check_books", false, due_over_live},
    {"ready_count != live ops on the ready queue", "tern__loop_check_books", false,
     ready_count_off},
    {"posts_done > posted", "tern__loop_check_books", false, posts_done_over_posted},
    {"credits held (undelivered) with no result ring", "tern__jobs_check_books", false,
     credits_without_ring},
    {"result ring head > tail", "tern__jobs_check_books", true, ring_head_past_tail},
    {"long jobs' credits > all credits", "tern__jobs_check_books", true, long_over_all},
    {"undelivered credits > accepted jobs not yet done", "tern__jobs_check_books", true,
     credits_over_jobs},
    {"job results and their ready-queue entry disagree", "tern__jobs_check_books", true,
     results_disagree},
    {"completions on the ring > undelivered credits", "tern__jobs_check_books", true,
     ring_over_credits},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static void audit_body(void *ctx)
{
    const struct books_case *c = ctx;
    tern_loop *loop = c->ring ? loop_with_ring() : plain_loop();
    tern__loop_check_books(loop); /* sound books pass */
    c->corrupt(loop);
    tern__loop_check_books(loop);
    child_exit(7); /* the audit let it through */
}

static size_t case_index[N_CASES];

ParameterizedTestParameters(books_audit, each_ledger_is_caught)
{
    for (size_t i = 0; i < N_CASES; i++)
        case_index[i] = i;
    return cr_make_param_array(size_t, case_index, N_CASES);
}

ParameterizedTest(size_t *i, books_audit, each_ledger_is_caught, .timeout = TEST_TIMEOUT)
{
    const struct books_case *c = &cases[*i];
    char rule[160];
    snprintf(rule, sizeof rule, "BOOKS failed: %s", c->rule);
    expect_abort(audit_body, (void *)c, c->fn, rule);
}

/* The audit on through the variable: a sound loop's turns pass it. */
Test(books_audit, sound_books_pass_every_turn, .timeout = TEST_TIMEOUT)
{
    cr_assert_eq(setenv("TERN_CHECK_BOOKS", "1", 1), 0);
    tern_loop *loop = loop_new_default();
    static atomic_uint done;
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, quick_work, count_done, &done, NULL), 0);
    cr_assert_eq(tern_timer_start(loop, MS, 0, noop_timer, NULL, NULL), 0);
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(atomic_load(&done), 1);
    loop_free_clean(loop);
}
