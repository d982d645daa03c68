/*
 * What is still alive: tern_loop_walk and tern_loop_print_live list a
 * loop's live operations with their kind, id, age and reference, and a
 * loop group whose shutdown is held up by a forgotten timer says so
 * (tern_group_on_stall), naming the timer.
 *
 * No test sleeps in place of a condition: ages are compared with loop
 * time that a timer's firing proves has passed.
 */
#include "loop_helpers.h"

#include <criterion/redirect.h>
#include <signal.h>

#define WALK_MAX 16

struct seen {
    unsigned n;
    tern_op_info op[WALK_MAX];
};

static void collect(tern_loop *loop, const tern_op_info *op, void *arg)
{
    (void)loop;
    struct seen *s = arg;
    if (s->n < WALK_MAX)
        s->op[s->n] = *op;
    s->n++;
}

static const tern_op_info *find(const struct seen *s, tern_id id)
{
    for (unsigned i = 0; i < s->n && i < WALK_MAX; i++)
        if (s->op[i].id == id)
            return &s->op[i];
    return NULL;
}

static void noop_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
}

static void noop_io(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    (void)loop;
    (void)id;
    (void)fd;
    (void)events;
    (void)arg;
}

/* The unit of a birth stamp (tern_op_info.age_ns: within 2^20 ns). */
#define UNIT (UINT64_C(1) << 20)

/* Whether a walk's age is the exact loop time `exact`, to a unit. */
static bool within_a_unit(uint64_t age, uint64_t exact)
{
    return age + UNIT > exact && age < exact + UNIT;
}

struct walk_case {
    tern_id far, unref, io;
    struct seen seen;
    uint64_t fired_at, started_at;
    int walked;
};

/* 30 ms after the others started: walk from inside the loop. */
static void walk_now(tern_loop *loop, tern_id id, void *arg)
{
    (void)id;
    struct walk_case *c = arg;
    c->fired_at = tern_loop_now(loop);
    c->walked = tern_loop_walk(loop, collect, &c->seen);
    tern_loop_stop(loop); /* the other timers would hold the run for an hour */
}

Test(walk, lists_each_live_operation_with_kind_id_age_and_reference, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    struct walk_case c = {0};
    c.started_at = tern_loop_now(loop);
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, noop_timer, NULL, &c.far), 0);
    cr_assert_eq(tern_timer_start(loop, HOUR, HOUR, noop_timer, NULL, &c.unref), 0);
    cr_assert_eq(tern_unref(loop, c.unref), 0);
    cr_assert_eq(tern_io_start(loop, sv[0], TERN_READABLE, noop_io, NULL, &c.io), 0);
    cr_assert_eq(tern_timer_start(loop, 30 * MS, 0, walk_now, &c, NULL), 0);
    cr_assert_eq(tern_loop_run(loop), 1, "stopped with work live");
    cr_assert_neq(c.fired_at, 0u);

    /* The one-shot timer that walks has left before its callback runs. */
    cr_assert_eq(c.walked, 3, "walked %d operations, want the 3 started", c.walked);
    cr_assert_eq(c.seen.n, 3u);
    const tern_op_info *far = find(&c.seen, c.far);
    const tern_op_info *unref = find(&c.seen, c.unref);
    const tern_op_info *io = find(&c.seen, c.io);
    cr_assert(far != NULL && unref != NULL && io != NULL, "an id is missing from the walk");
    cr_assert_str_eq(far->kind, "timer");
    cr_assert_str_eq(unref->kind, "timer");
    cr_assert_str_eq(io->kind, "io");
    cr_assert(far->referenced);
    cr_assert(!unref->referenced, "a tern_unref'd timer is shown as unreferenced");
    cr_assert(io->referenced);
    uint64_t elapsed = c.fired_at - c.started_at;
    cr_assert_geq(elapsed, 30 * MS);
    /* Birth stamps count 2^20 ns units: an age is within one of the exact one. */
    cr_assert(within_a_unit(far->age_ns, elapsed),
              "a timer's age (%llu ns) is loop time since it started (%llu ns), to a unit",
              (unsigned long long)far->age_ns, (unsigned long long)elapsed);
    cr_assert(within_a_unit(io->age_ns, elapsed),
              "a watcher's age (%llu ns) is loop time since it started (%llu ns), to a unit",
              (unsigned long long)io->age_ns, (unsigned long long)elapsed);

    /* What ended is no longer shown. */
    cr_assert_eq(tern_timer_stop(loop, c.far), 0);
    cr_assert_eq(tern_io_stop(loop, c.io), 0);
    struct seen after = {0};
    cr_assert_eq(tern_loop_walk(loop, collect, &after), 1);
    cr_assert_eq(after.op[0].id, c.unref);
    cr_assert_eq(tern_timer_stop(loop, c.unref), 0);
    cr_assert_eq(tern_loop_walk(loop, collect, &after), 0);
    loop_free_clean(loop);
    close(sv[0]);
    close(sv[1]);
}

static void count_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    (*(unsigned *)arg)++;
}

/* The walk's age of each timer `want` names, checked against the loop time it started. */
struct aged {
    tern_id id;
    uint64_t started;
    const char *what;
};

static void check_ages(tern_loop *loop, const struct aged *want, unsigned n)
{
    struct seen s = {0};
    cr_assert_eq(tern_loop_walk(loop, collect, &s), (int)n);
    uint64_t now = tern_loop_now(loop);
    for (unsigned i = 0; i < n; i++) {
        const tern_op_info *op = find(&s, want[i].id);
        cr_assert(op != NULL, "%s is missing from the walk", want[i].what);
        cr_assert_str_eq(op->kind, "timer");
        uint64_t exact = now - want[i].started;
        cr_assert(within_a_unit(op->age_ns, exact),
                  "%s: age %llu ns, but it started %llu ns of loop time ago", want[i].what,
                  (unsigned long long)op->age_ns, (unsigned long long)exact);
    }
}

/*
 * A timer's age comes from a stamp in its record, whatever the record
 * is doing: armed, rearmed by its repeat, waiting on the due queue (a
 * one-shot, and a repeating one that is armed again while it waits), and
 * in a slot a stopped timer gave back, where the stamp must be the new
 * timer's and not the old one's.
 */
Test(walk, a_timers_age_holds_armed_rearmed_queued_and_in_a_reused_slot, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    unsigned repeats = 0, queued_calls = 0;
    uint64_t t0 = tern_loop_now(loop);
    tern_id armed, rearmed, gone;
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, noop_timer, NULL, &armed), 0);
    cr_assert_eq(tern_timer_start(loop, 10 * MS, 10 * MS, count_timer, &repeats, &rearmed), 0);
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, noop_timer, NULL, &gone), 0);
    cr_assert_eq(tern_timer_stop(loop, gone), 0); /* its slot heads the free list */

    /* At least 50 ms of loop time, and the repeating timer rearmed on the way. */
    uint64_t end = mono_ns() + LIVENESS_NS;
    while ((tern_loop_now(loop) < t0 + 50 * MS || repeats < 2) && mono_ns() < end)
        tern_loop_run_once(loop, 5 * (int64_t)MS);
    cr_assert_geq(repeats, 2u, "the repeating timer never rearmed");

    uint64_t t1 = tern_loop_now(loop);
    tern_id reused, one_shot, repeating;
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, noop_timer, NULL, &reused), 0);
    cr_assert_eq(tern_timer_start(loop, 0, 0, count_timer, &queued_calls, &one_shot), 0);
    cr_assert_eq(tern_timer_start(loop, 0, HOUR, count_timer, &queued_calls, &repeating), 0);
    /* Step 5 of this turn queues the two due timers; their callbacks wait for the next step 2. */
    tern_loop_run_once(loop, 0);
    cr_assert_eq(tern_loop_next_timeout(loop), 0, "the due timers wait on the due queue");
    cr_assert_eq(queued_calls, 0u);
    cr_assert_geq(tern_loop_now(loop) - t0, 50 * MS);

    const struct aged want[] = {
        {armed, t0, "an armed one-shot timer"},
        {rearmed, t0, "a repeating timer rearmed since it started"},
        {reused, t1, "a timer in a slot a stopped timer gave back"},
        {one_shot, t1, "a one-shot timer on the due queue"},
        {repeating, t1, "a repeating timer on the due queue, armed again"},
    };
    check_ages(loop, want, 5);

    /* The queued timers run; the repeating one stays, armed, with its age. */
    tern_loop_run_once(loop, 0);
    cr_assert_eq(queued_calls, 2u);
    const struct aged after[] = {
        {armed, t0, "an armed one-shot timer"},
        {rearmed, t0, "a repeating timer rearmed since it started"},
        {reused, t1, "a timer in a slot a stopped timer gave back"},
        {repeating, t1, "a repeating timer whose callback ran"},
    };
    check_ages(loop, after, 4);
    cr_assert_eq(tern_timer_stop(loop, armed), 0);
    cr_assert_eq(tern_timer_stop(loop, rearmed), 0);
    cr_assert_eq(tern_timer_stop(loop, reused), 0);
    cr_assert_eq(tern_timer_stop(loop, repeating), 0);
    loop_free_clean(loop);
}

static void *sleepy_work(tern_job *job, void *arg)
{
    (void)job;
    atomic_bool *release = arg;
    while (!atomic_load(release))
        sched_yield();
    return NULL;
}

static void job_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop;
    (void)id;
    (void)status;
    (void)result;
    (void)arg;
}

Test(walk, shows_a_job_in_flight, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    atomic_bool release = false;
    tern_id job = 0;
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, sleepy_work, job_done, &release, &job), 0);
    struct seen s = {0};
    cr_assert_geq(tern_loop_walk(loop, collect, &s), 1);
    const tern_op_info *j = find(&s, job);
    cr_assert(j != NULL, "the submitted job is not in the walk");
    cr_assert_str_eq(j->kind, "job");
    cr_assert(j->referenced);
    atomic_store(&release, true);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}

Test(walk, prints_one_line_per_operation, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    tern_id a, b;
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, noop_timer, NULL, &a), 0);
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, noop_timer, NULL, &b), 0);
    cr_assert_eq(tern_unref(loop, b), 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    cr_assert_not_null(out);
    cr_assert_eq(tern_loop_print_live(loop, out), 2);
    cr_assert_eq(fclose(out), 0);
    char want_a[128], want_b[128];
    snprintf(want_a, sizeof want_a, "  %-10s id %-20llu age 0.000 ms  referenced\n", "timer",
             (unsigned long long)a);
    snprintf(want_b, sizeof want_b, "  %-10s id %-20llu age 0.000 ms  unreferenced\n", "timer",
             (unsigned long long)b);
    cr_assert_not_null(strstr(buf, want_a), "no line for the referenced timer in:\n%s", buf);
    cr_assert_not_null(strstr(buf, want_b), "no line for the unreferenced timer in:\n%s", buf);
    free(buf);
    cr_assert_eq(tern_timer_stop(loop, a), 0);
    cr_assert_eq(tern_timer_stop(loop, b), 0);
    loop_free_clean(loop);
}

Test(walk, a_stream_that_refuses_writes_is_an_error, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    tern_id a;
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, noop_timer, NULL, &a), 0);
    FILE *ro = fopen("/dev/null", "r"); /* open for reading: every write fails */
    cr_assert_not_null(ro);
    cr_assert_eq(tern_loop_print_live(loop, ro), -EIO);
    fclose(ro);
    cr_assert_eq(tern_timer_stop(loop, a), 0);
    loop_free_clean(loop);
}

static void start_in_walk(tern_loop *loop, const tern_op_info *op, void *arg)
{
    (void)op;
    (void)arg;
    tern_timer_start(loop, HOUR, 0, noop_timer, NULL, NULL);
}

Test(walk, a_callback_that_starts_an_operation_aborts, .signal = SIGABRT,
     .init = cr_redirect_stderr, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, noop_timer, NULL, NULL), 0);
    tern_loop_walk(loop, start_in_walk, NULL);
}

/* ---------------------------------------------------------------- */
/* A group shutdown held up by a forgotten timer                    */
/* ---------------------------------------------------------------- */

/*
 * Loop 0's setup starts a referenced timer and no teardown stops it: the
 * shutdown waits for it. It fires after `hold`, well past the stall bound,
 * so the test ends on its own whether or not the report came.
 */
struct forgot {
    tern_group *g;
    uint64_t hold;
    tern_id timer;
    atomic_uint reports;
    unsigned index;
    uint64_t waited;
    struct seen seen;
};

static void forgot_setup(tern_loop *loop, unsigned index, void *arg)
{
    struct forgot *f = arg;
    if (index == 0)
        cr_assert_eq(tern_timer_start(loop, f->hold, 0, noop_timer, NULL, &f->timer), 0);
}

static void forgot_report(tern_loop *loop, unsigned index, uint64_t waited_ns, void *arg)
{
    struct forgot *f = arg;
    f->index = index;
    f->waited = waited_ns;
    tern_loop_walk(loop, collect, &f->seen);
    atomic_fetch_add(&f->reports, 1);
}

static tern_group *forgot_group(struct forgot *f, uint64_t after, tern_group_stall_fn fn)
{
    tern_group_options go;
    tern_group_options_init(&go);
    go.loops = 2;
    go.name = "stall";
    cr_assert_eq(tern_group_new(&f->g, &go), 0);
    cr_assert_eq(tern_group_on_setup(f->g, forgot_setup, f), 0);
    cr_assert_eq(tern_group_on_stall(f->g, after, fn, f), 0);
    return f->g;
}

Test(group_stall, a_forgotten_timer_is_named_to_the_callback, .timeout = TEST_TIMEOUT)
{
    struct forgot f = {.hold = 400 * MS};
    tern_group *g = forgot_group(&f, 50 * MS, forgot_report);
    cr_assert_eq(tern_group_start(g), 0);
    cr_assert_eq(tern_group_on_stall(g, 50 * MS, forgot_report, &f), -EINVAL,
                 "the bound is set before start");
    cr_assert_eq(tern_group_shutdown(g), 0);
    cr_assert_eq(tern_group_wait(g), 0);
    tern_group_free(g);
    cr_assert_eq(atomic_load(&f.reports), 1u, "one report, from the one loop held up");
    cr_assert_eq(f.index, 0u);
    cr_assert_geq(f.waited, 50 * MS);
    const tern_op_info *t = find(&f.seen, f.timer);
    cr_assert(t != NULL, "the report's walk does not show the forgotten timer");
    cr_assert_str_eq(t->kind, "timer");
    cr_assert(t->referenced);
    cr_assert_gt(t->age_ns + UNIT, 50 * MS, "the timer had lived at least the bound, to a unit");
}

Test(group_stall, without_a_callback_stderr_names_the_timer, .init = cr_redirect_stderr,
     .timeout = TEST_TIMEOUT)
{
    struct forgot f = {.hold = 400 * MS};
    tern_group *g = forgot_group(&f, 50 * MS, NULL);
    cr_assert_eq(tern_group_start(g), 0);
    cr_assert_eq(tern_group_shutdown(g), 0);
    cr_assert_eq(tern_group_wait(g), 0);
    tern_group_free(g);
    /* End the redirected stream, so reading it meets its end. */
    fflush(stderr);
    FILE *err = cr_get_redirected_stderr();
    int devnull = open("/dev/null", O_WRONLY);
    cr_assert_geq(devnull, 0);
    cr_assert_eq(dup2(devnull, STDERR_FILENO), STDERR_FILENO);
    close(devnull);
    char text[4096];
    size_t len = fread(text, 1, sizeof text - 1, err);
    text[len] = '\0';
    char id[64];
    snprintf(id, sizeof id, "timer      id %llu ", (unsigned long long)f.timer);
    cr_assert_not_null(strstr(text, "tern: group stall, loop 0: shutdown has waited "),
                       "no report header in:\n%s", text);
    cr_assert_not_null(strstr(text, id), "the forgotten timer is not named in:\n%s", text);
    cr_assert_not_null(strstr(text, "  referenced\n"), "not shown referenced in:\n%s", text);
    cr_assert_null(strstr(text, "loop 1:"), "loop 1 had nothing live, yet reported:\n%s", text);
}

Test(group_stall, a_bound_of_zero_never_reports, .timeout = TEST_TIMEOUT)
{
    struct forgot f = {.hold = 100 * MS};
    tern_group *g = forgot_group(&f, 0, forgot_report);
    cr_assert_eq(tern_group_start(g), 0);
    cr_assert_eq(tern_group_shutdown(g), 0);
    cr_assert_eq(tern_group_wait(g), 0);
    tern_group_free(g);
    cr_assert_eq(atomic_load(&f.reports), 0u);
}
