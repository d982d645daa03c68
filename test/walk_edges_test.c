/*
 * tern_loop_walk and tern_loop_print_live at their edges: a stream already
 * in error is reported even when no line is written, and a walk callback
 * that starts an operation with an id (not a timer) while it is shown a
 * timer aborts, naming the rule, as one that starts a timer does. So does
 * one that starts a timer or opens an owner while it is shown a job (the
 * job records come first) or an operation with an id (an owner), right
 * after that callback: the walk never goes on to show the timer started.
 */
#include "abort_helpers.h"
#include "loop_helpers.h"

static void noop_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
}

Test(walk_edges, a_stream_already_in_error_is_an_error_with_nothing_live,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    FILE *full = fopen("/dev/full", "w");
    cr_assert_not_null(full);
    setvbuf(full, NULL, _IONBF, 0);
    cr_assert_eq(fputc('x', full), EOF, "/dev/full refuses every write");
    cr_assert(ferror(full));
    cr_assert_eq(tern_loop_print_live(loop, full), -EIO,
                 "no line was written, but the stream reports an error");
    fclose(full);

    /* The same loop and nothing live, on a sound stream: 0 lines, no error. */
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    cr_assert_not_null(out);
    cr_assert_eq(tern_loop_print_live(loop, out), 0);
    cr_assert_eq(fclose(out), 0);
    cr_assert_eq(len, 0u);
    free(buf);
    loop_free_clean(loop);
}

static void open_owner_in_walk(tern_loop *loop, const tern_op_info *op, void *arg)
{
    (void)op;
    (void)arg;
    tern_id owner;
    tern_owner_open(loop, 1, &owner);
}

static void walk_opens_an_owner(void *ctx)
{
    (void)ctx;
    tern_loop *loop = NULL;
    if (tern_loop_new(&loop, NULL) != 0)
        child_exit(3);
    if (tern_timer_start(loop, HOUR, 0, noop_timer, NULL, NULL) != 0)
        child_exit(4);
    tern_loop_walk(loop, open_owner_in_walk, NULL);
}

Test(walk_edges, a_callback_that_opens_an_owner_while_shown_a_timer_aborts,
     .timeout = TEST_TIMEOUT)
{
    expect_abort(walk_opens_an_owner, NULL, "tern_loop_walk",
                 "tern_loop_walk's callback started or ended an operation");
}

/* What the callback does when shown its first operation. */
enum walk_act { START_TIMER, OPEN_OWNER };

static void act_in_walk(tern_loop *loop, const tern_op_info *op, void *arg)
{
    (void)op;
    static unsigned calls;
    if (++calls > 1)
        child_exit(8); /* the walk went on past the operation the callback changed */
    tern_id id;
    if (*(const enum walk_act *)arg == START_TIMER)
        tern_timer_start(loop, HOUR, 0, noop_timer, NULL, NULL);
    else
        tern_owner_open(loop, 1, &id);
}

static void *idle_work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

static void idle_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)status, (void)result, (void)arg;
}

/* ctx: {enum walk_act, bool shown a job (else an owner)}. Nothing else is
 * live, so the first operation shown is that one. */
struct walk_case {
    enum walk_act act;
    bool job;
};

static void walk_acts_body(void *ctx)
{
    struct walk_case *c = ctx;
    tern_loop *loop = NULL;
    if (tern_loop_new(&loop, NULL) != 0)
        child_exit(3);
    tern_id id;
    if (c->job) {
        if (tern_submit(loop, TERN_BOUNDED, idle_work, idle_done, NULL, &id) != 0)
            child_exit(4);
    } else if (tern_owner_open(loop, 1, &id) != 0) {
        child_exit(4);
    }
    tern_loop_walk(loop, act_in_walk, &c->act);
}

#define RULE_WALK "tern_loop_walk's callback started or ended an operation"

Test(walk_edges, a_callback_that_starts_a_timer_while_shown_a_job_aborts,
     .timeout = TEST_TIMEOUT)
{
    struct walk_case c = {START_TIMER, true};
    expect_abort(walk_acts_body, &c, "tern_loop_walk", RULE_WALK);
}

Test(walk_edges, a_callback_that_opens_an_owner_while_shown_a_job_aborts,
     .timeout = TEST_TIMEOUT)
{
    struct walk_case c = {OPEN_OWNER, true};
    expect_abort(walk_acts_body, &c, "tern_loop_walk", RULE_WALK);
}

Test(walk_edges, a_callback_that_starts_a_timer_while_shown_an_owner_aborts,
     .timeout = TEST_TIMEOUT)
{
    struct walk_case c = {START_TIMER, false};
    expect_abort(walk_acts_body, &c, "tern_loop_walk", RULE_WALK);
}

Test(walk_edges, a_callback_that_opens_an_owner_while_shown_an_owner_aborts,
     .timeout = TEST_TIMEOUT)
{
    struct walk_case c = {OPEN_OWNER, false};
    expect_abort(walk_acts_body, &c, "tern_loop_walk", RULE_WALK);
}
