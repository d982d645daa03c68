/*
 * Thread-affinity contracts (SPEC §1 Guarantees G1, G3, G5): a loop-only
 * call from a thread that does not run the loop, while some thread runs
 * it, aborts with a message naming the function; so does freeing a loop
 * from inside its own callback. Each abort test runs the violation in a
 * forked child (test/abort_helpers.h) and requires SIGABRT *and* tern's
 * report naming the function and the rule; an abort for any other reason
 * (a double free, a sanitizer report) fails it, as does a call that
 * returns.
 *
 * "While the loop runs" is made certain, not likely: the foreign call is
 * made by a helper thread that the loop thread starts and joins from
 * inside one of its own callbacks, so the loop is claimed throughout. A
 * second form makes the call while the loop blocks in step 4.
 */
#include "loop_helpers.h"
#include "abort_helpers.h"


typedef void (*foreign_fn)(tern_loop *loop, void *ctx);

struct foreign {
    foreign_fn fn;
    void *ctx;
    tern_loop *loop;
    tern_loop *current_seen;
};

static void *foreign_main(void *arg)
{
    struct foreign *f = arg;
    f->current_seen = tern_loop_current();
    f->fn(f->loop, f->ctx);
    return NULL;
}

/* Runs on the loop thread, in step 2: call f->fn on another thread now. */
static void call_from_foreign_thread(tern_loop *loop, void *arg)
{
    struct foreign *f = arg;
    f->loop = loop;
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, foreign_main, f), 0);
    pthread_join(t, NULL);
}

/* Set up a loop with whatever `setup` arms, then make the foreign call
 * while the loop runs one of its callbacks. */
static void foreign_call_during_callback(foreign_fn fn, void *ctx)
{
    tern_loop *loop = loop_new_default();
    struct foreign f = { .fn = fn, .ctx = ctx };
    cr_assert_eq(tern_defer(loop, call_from_foreign_thread, &f), 0);
    tern_loop_run(loop);
    tern_loop_free(loop);
}

static void noop_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
}

static void noop_fn(tern_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
}

static void noop_io(tern_loop *loop, tern_id id, int fd, unsigned ev, void *arg)
{
    (void)loop;
    (void)id;
    (void)fd;
    (void)ev;
    (void)arg;
}

/* ---------------------------------------------------------------- */
/* G1: exactly one thread dequeues the loop's queues                 */
/* ---------------------------------------------------------------- */

static void do_run_once(tern_loop *loop, void *ctx)
{
    (void)ctx;
    tern_loop_run_once(loop, 0);
}

static void g1_run_once_from_a_second_thread_aborts_body(void *ctx)
{
    (void)ctx;
    foreign_call_during_callback(do_run_once, NULL);
}

Test(contract, g1_run_once_from_a_second_thread_aborts, .timeout = TEST_TIMEOUT)
{
    expect_abort(g1_run_once_from_a_second_thread_aborts_body, NULL, "tern_loop_run_once",
                 RULE_RUNNING_ELSEWHERE);
}

static void do_run(tern_loop *loop, void *ctx)
{
    (void)ctx;
    tern_loop_run(loop);
}

static void g1_run_from_a_second_thread_aborts_body(void *ctx)
{
    (void)ctx;
    foreign_call_during_callback(do_run, NULL);
}

Test(contract, g1_run_from_a_second_thread_aborts, .timeout = TEST_TIMEOUT)
{
    expect_abort(g1_run_from_a_second_thread_aborts_body, NULL, "tern_loop_run",
                 RULE_RUNNING_ELSEWHERE);
}

static void do_timer_start(tern_loop *loop, void *ctx)
{
    (void)ctx;
    tern_timer_start(loop, 0, 0, noop_timer, NULL, NULL);
}

static void g1_timer_start_from_a_second_thread_aborts_body(void *ctx)
{
    (void)ctx;
    foreign_call_during_callback(do_timer_start, NULL);
}

Test(contract, g1_timer_start_from_a_second_thread_aborts, .timeout = TEST_TIMEOUT)
{
    expect_abort(g1_timer_start_from_a_second_thread_aborts_body, NULL, "tern_timer_start",
                 RULE_LOOP_ONLY);
}

/* The loop runs on the main thread, blocked in step 4 of run_once(-1)
 * with one long timer; a helper thread makes a loop-only call. If it does
 * not abort, the helper stops the loop so the test ends (and fails). */
struct blocked_call {
    tern_loop *loop;
    foreign_fn fn;
};

static void *call_when_blocked(void *arg)
{
    struct blocked_call *b = arg;
    wait_for_step(b->loop, 4);
    b->fn(b->loop, NULL);
    tern_loop_stop(b->loop);
    tern_post(b->loop, noop_fn, NULL);
    return NULL;
}

static void foreign_call_while_blocked(foreign_fn fn)
{
    tern_loop *loop = loop_new_default();
    tern_id keep = 0;
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, noop_timer, NULL, &keep), 0);
    struct blocked_call b = { loop, fn };
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, call_when_blocked, &b), 0);
    tern_loop_run_once(loop, -1);
    pthread_join(t, NULL);
    tern_loop_free(loop);
}

static void g1_timer_start_while_blocked_in_step_4_aborts_body(void *ctx)
{
    (void)ctx;
    foreign_call_while_blocked(do_timer_start);
}

Test(contract, g1_timer_start_while_blocked_in_step_4_aborts, .timeout = TEST_TIMEOUT)
{
    expect_abort(g1_timer_start_while_blocked_in_step_4_aborts_body, NULL, "tern_timer_start",
                 RULE_LOOP_ONLY);
}

static void g1_run_once_while_blocked_in_step_4_aborts_body(void *ctx)
{
    (void)ctx;
    foreign_call_while_blocked(do_run_once);
}

Test(contract, g1_run_once_while_blocked_in_step_4_aborts, .timeout = TEST_TIMEOUT)
{
    expect_abort(g1_run_once_while_blocked_in_step_4_aborts_body, NULL, "tern_loop_run_once",
                 RULE_RUNNING_ELSEWHERE);
}

/* Running a loop re-entrantly from its own callback is a second claim. */
static void reenter(tern_loop *loop, void *arg)
{
    (void)arg;
    tern_loop_run_once(loop, 0);
}

static void run_once_inside_own_callback_aborts_body(void *ctx)
{
    (void)ctx;
    tern_loop *loop = loop_new_default();
    cr_assert_eq(tern_defer(loop, reenter, NULL), 0);
    tern_loop_run(loop);
    tern_loop_free(loop);
}

Test(contract, run_once_inside_own_callback_aborts, .timeout = TEST_TIMEOUT)
{
    expect_abort(run_once_inside_own_callback_aborts_body, NULL, "tern_loop_run_once",
                 RULE_OWN_CALLBACK);
}

/* ---------------------------------------------------------------- */
/* G3: helper threads only post                                      */
/* ---------------------------------------------------------------- */

static void note_current(tern_loop *loop, void *ctx)
{
    (void)loop;
    (void)ctx;
}

Test(contract, g3_current_is_null_on_a_thread_not_running_the_loop, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    struct foreign f = { .fn = note_current, .current_seen = (tern_loop *)(uintptr_t)1 };
    cr_assert_eq(tern_defer(loop, call_from_foreign_thread, &f), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_null(f.current_seen, "tern_loop_current() on a helper thread was not NULL");
    cr_assert_null(tern_loop_current());
    loop_free_clean(loop);
}

static void do_io_start(tern_loop *loop, void *ctx)
{
    int *fd = ctx;
    tern_io_start(loop, *fd, TERN_READABLE, noop_io, NULL, NULL);
}

static void g3_io_start_from_a_helper_thread_aborts_body(void *ctx)
{
    (void)ctx;
    int p[2];
    make_pipe(p);
    foreign_call_during_callback(do_io_start, &p[0]);
}

Test(contract, g3_io_start_from_a_helper_thread_aborts, .timeout = TEST_TIMEOUT)
{
    expect_abort(g3_io_start_from_a_helper_thread_aborts_body, NULL, "tern_io_start",
                 RULE_LOOP_ONLY);
}

static void do_defer(tern_loop *loop, void *ctx)
{
    (void)ctx;
    tern_defer(loop, noop_fn, NULL);
}

static void g3_defer_from_a_helper_thread_aborts_body(void *ctx)
{
    (void)ctx;
    foreign_call_during_callback(do_defer, NULL);
}

Test(contract, g3_defer_from_a_helper_thread_aborts, .timeout = TEST_TIMEOUT)
{
    expect_abort(g3_defer_from_a_helper_thread_aborts_body, NULL, "tern_defer", RULE_LOOP_ONLY);
}

static void *noop_work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

static void noop_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop;
    (void)id;
    (void)status;
    (void)result;
    (void)arg;
}

static void do_submit(tern_loop *loop, void *ctx)
{
    (void)ctx;
    tern_submit(loop, TERN_BOUNDED, noop_work, noop_done, NULL, NULL);
}

static void g3_submit_from_a_helper_thread_aborts_body(void *ctx)
{
    (void)ctx;
    foreign_call_during_callback(do_submit, NULL);
}

Test(contract, g3_submit_from_a_helper_thread_aborts, .timeout = TEST_TIMEOUT)
{
    expect_abort(g3_submit_from_a_helper_thread_aborts_body, NULL, "tern_submit", RULE_LOOP_ONLY);
}

/* A datagram queued from a helper thread: the check comes before the
 * socket is looked up, so any id will do. */
static void do_udp_send(tern_loop *loop, void *ctx)
{
    (void)ctx;
    static char byte;
    tern_buf b = { .base = &byte, .len = 1 };
    tern_udp_send(loop, 1, &b, 1, NULL, NULL, NULL);
}

static void g3_udp_send_from_a_helper_thread_aborts_body(void *ctx)
{
    (void)ctx;
    foreign_call_during_callback(do_udp_send, NULL);
}

Test(contract, g3_udp_send_from_a_helper_thread_aborts, .timeout = TEST_TIMEOUT)
{
    expect_abort(g3_udp_send_from_a_helper_thread_aborts_body, NULL, "tern_udp_send",
                 RULE_LOOP_ONLY);
}

struct id_ctx {
    tern_id id;
};

static void do_unref(tern_loop *loop, void *ctx)
{
    tern_unref(loop, ((struct id_ctx *)ctx)->id);
}

static void arm_then_unref_from_helper(tern_loop *loop, void *arg)
{
    struct foreign *f = arg;
    struct id_ctx *c = f->ctx;
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, noop_timer, NULL, &c->id), 0);
    call_from_foreign_thread(loop, f);
}

static void g3_unref_from_a_helper_thread_aborts_body(void *ctx)
{
    (void)ctx;
    tern_loop *loop = loop_new_default();
    struct id_ctx c = { 0 };
    struct foreign f = { .fn = do_unref, .ctx = &c };
    cr_assert_eq(tern_defer(loop, arm_then_unref_from_helper, &f), 0);
    tern_loop_run_once(loop, 0);
    tern_loop_free(loop);
}

Test(contract, g3_unref_from_a_helper_thread_aborts, .timeout = TEST_TIMEOUT)
{
    expect_abort(g3_unref_from_a_helper_thread_aborts_body, NULL, "tern_unref", RULE_LOOP_ONLY);
}

/* Posting, cancelling and stopping are the three things a helper may do:
 * none of them aborts while the loop runs. */
static void do_allowed(tern_loop *loop, void *ctx)
{
    struct id_ctx *c = ctx;
    cr_assert_eq(tern_post(loop, noop_fn, NULL), 0);
    cr_assert_eq(tern_cancel(loop, c->id), TERN_CANCEL_REQUESTED);
    cr_assert_eq(tern_loop_stop(loop), 0);
    tern_loop_stats s;
    tern_loop_stats_get(loop, &s);
    (void)tern_loop_now(loop);
    (void)tern_loop_backend_fd(loop);
}

static void arm_then_allowed(tern_loop *loop, void *arg)
{
    struct foreign *f = arg;
    struct id_ctx *c = f->ctx;
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, noop_timer, NULL, &c->id), 0);
    call_from_foreign_thread(loop, f);
}

Test(contract, post_cancel_stop_are_allowed_from_helper_threads, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    struct id_ctx c = { 0 };
    struct foreign f = { .fn = do_allowed, .ctx = &c };
    cr_assert_eq(tern_defer(loop, arm_then_allowed, &f), 0);
    cr_assert_eq(tern_loop_run(loop), 1, "the helper's stop ends run with work live");
    /* The next turn runs the post and resolves the cancel. */
    cr_assert_eq(tern_loop_run_once(loop, 0), 0);
    cr_assert_eq(loop_stats(loop).posts, 1);
    loop_free_clean(loop);
}

/* ---------------------------------------------------------------- */
/* G5: freeing is serialised with dispatch                           */
/* ---------------------------------------------------------------- */

static void free_inside(tern_loop *loop, tern_id id, void *arg)
{
    (void)id;
    (void)arg;
    tern_loop_free(loop);
}

static void g5_free_inside_own_timer_callback_aborts_body(void *ctx)
{
    (void)ctx;
    tern_loop *loop = loop_new_default();
    cr_assert_eq(tern_timer_start(loop, 0, 0, free_inside, NULL, NULL), 0);
    tern_loop_run(loop);
}

Test(contract, g5_free_inside_own_timer_callback_aborts, .timeout = TEST_TIMEOUT)
{
    expect_abort(g5_free_inside_own_timer_callback_aborts_body, NULL, "tern_loop_free",
                 RULE_FREE_WHILE_RUNNING);
}

static void free_inside_post(tern_loop *loop, void *arg)
{
    (void)arg;
    tern_loop_free(loop);
}

static void g5_free_inside_own_posted_function_aborts_body(void *ctx)
{
    (void)ctx;
    tern_loop *loop = loop_new_default();
    cr_assert_eq(tern_post(loop, free_inside_post, NULL), 0);
    tern_loop_run(loop);
}

Test(contract, g5_free_inside_own_posted_function_aborts, .timeout = TEST_TIMEOUT)
{
    expect_abort(g5_free_inside_own_posted_function_aborts_body, NULL, "tern_loop_free",
                 RULE_FREE_WHILE_RUNNING);
}

static void do_free(tern_loop *loop, void *ctx)
{
    (void)ctx;
    tern_loop_free(loop);
}

static void g5_free_from_a_helper_thread_while_running_aborts_body(void *ctx)
{
    (void)ctx;
    tern_loop *loop = loop_new_default();
    struct foreign f = { .fn = do_free };
    cr_assert_eq(tern_defer(loop, call_from_foreign_thread, &f), 0);
    tern_loop_run(loop);
}

Test(contract, g5_free_from_a_helper_thread_while_running_aborts, .timeout = TEST_TIMEOUT)
{
    expect_abort(g5_free_from_a_helper_thread_while_running_aborts_body, NULL, "tern_loop_free",
                 RULE_FREE_WHILE_RUNNING);
}

static void do_timer_stop(tern_loop *loop, void *ctx)
{
    tern_timer_stop(loop, ((struct id_ctx *)ctx)->id);
}

static void arm_then_stop_from_helper(tern_loop *loop, void *arg)
{
    struct foreign *f = arg;
    struct id_ctx *c = f->ctx;
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, noop_timer, NULL, &c->id), 0);
    call_from_foreign_thread(loop, f);
}

static void g5_timer_stop_from_a_helper_thread_aborts_body(void *ctx)
{
    (void)ctx;
    tern_loop *loop = loop_new_default();
    struct id_ctx c = { 0 };
    struct foreign f = { .fn = do_timer_stop, .ctx = &c };
    cr_assert_eq(tern_defer(loop, arm_then_stop_from_helper, &f), 0);
    tern_loop_run_once(loop, 0);
    tern_loop_free(loop);
}

Test(contract, g5_timer_stop_from_a_helper_thread_aborts, .timeout = TEST_TIMEOUT)
{
    expect_abort(g5_timer_stop_from_a_helper_thread_aborts_body, NULL, "tern_timer_stop",
                 RULE_LOOP_ONLY);
}

static void do_io_stop(tern_loop *loop, void *ctx)
{
    tern_io_stop(loop, ((struct id_ctx *)ctx)->id);
}

static void do_io_modify(tern_loop *loop, void *ctx)
{
    tern_io_modify(loop, ((struct id_ctx *)ctx)->id, TERN_WRITABLE);
}

static void io_helper_case(foreign_fn fn)
{
    tern_loop *loop = loop_new_default();
    int p[2];
    make_pipe(p);
    struct id_ctx c = { 0 };
    cr_assert_eq(tern_io_start(loop, p[0], TERN_READABLE, noop_io, NULL, &c.id), 0);
    struct foreign f = { .fn = fn, .ctx = &c };
    cr_assert_eq(tern_defer(loop, call_from_foreign_thread, &f), 0);
    tern_loop_run_once(loop, 0);
    tern_loop_free(loop);
}

static void g5_io_stop_from_a_helper_thread_aborts_body(void *ctx)
{
    (void)ctx;
    io_helper_case(do_io_stop);
}

Test(contract, g5_io_stop_from_a_helper_thread_aborts, .timeout = TEST_TIMEOUT)
{
    expect_abort(g5_io_stop_from_a_helper_thread_aborts_body, NULL, "tern_io_stop", RULE_LOOP_ONLY);
}

static void io_modify_from_a_helper_thread_aborts_body(void *ctx)
{
    (void)ctx;
    io_helper_case(do_io_modify);
}

Test(contract, io_modify_from_a_helper_thread_aborts, .timeout = TEST_TIMEOUT)
{
    expect_abort(io_modify_from_a_helper_thread_aborts_body, NULL, "tern_io_modify",
                 RULE_LOOP_ONLY);
}

/*
 * A NULL loop is reported as what the caller did, not as the expression
 * that caught it, and the report names the file from the project root
 * (runtime/...), whatever directory the build ran in.
 */
static void null_loop_body(void *ctx)
{
    (void)ctx;
    tern_id id;
    tern_timer_start(NULL, 1000, 0, noop_timer, NULL, &id);
}

Test(contract, a_null_loop_is_reported_as_such_from_a_project_path, .timeout = TEST_TIMEOUT)
{
    expect_abort(null_loop_body, NULL, "tern_timer_start", "REQUIRE failed: NULL or freed loop");
    cr_assert(strncmp(abort_report, "tern: runtime/", strlen("tern: runtime/")) == 0,
              "the report does not name a path from the project root: %s", abort_report);
    cr_assert_null(strstr(abort_report, "../"), "a build-relative path: %s", abort_report);
}

static void null_group_body(void *ctx)
{
    (void)ctx;
    tern_group_size(NULL);
}

Test(contract, a_null_group_is_reported_as_such, .timeout = TEST_TIMEOUT)
{
    expect_abort(null_group_body, NULL, "tern_group_size", "REQUIRE failed: NULL or freed group");
    cr_assert(strncmp(abort_report, "tern: runtime/", strlen("tern: runtime/")) == 0,
              "the report does not name a path from the project root: %s", abort_report);
}
