/*
 * Loop groups at their edges (SPEC §15): a group's calls made from a loop
 * thread of another group (that thread is a stranger to it: not its
 * member, not its own thread), a broadcast without a done callback, a
 * broadcast refused for memory, a teardown post refused for memory (the
 * member posts it again), and pinning when the process cannot read its
 * own CPU affinity (every loop is pinned to CPU 0).
 *
 * Every wait is on a condition, bounded by LIVENESS_NS.
 */
#include "group_helpers.h"
#include "loop_helpers.h"
#include "seccomp_helpers.h"

#include <stddef.h>


static tern_group *group_make(unsigned n, const char *name, bool pin)
{
    tern_group_options go;
    tern_group_options_init(&go);
    go.loops = n;
    go.name = name;
    go.pin = pin;
    tern_group *g = NULL;
    int rc = tern_group_new(&g, &go);
    cr_assert_eq(rc, 0, "tern_group_new: %s", tern_strerror(rc));
    return g;
}

/* ---------------------------------------------------------------- */
/* Another group's loop thread                                      */
/* ---------------------------------------------------------------- */

struct stranger {
    tern_group *other;
    int other_index, wait_before_start, start, pause, resume;
    atomic_uint done;
};

/* Runs on group A's loop thread and works group B from there. */
static void work_other_group(tern_loop *loop, unsigned index, void *arg)
{
    (void)loop;
    (void)index;
    struct stranger *s = arg;
    s->other_index = tern_group_index(s->other);
    s->wait_before_start = tern_group_wait(s->other);
    s->start = tern_group_start(s->other);
    s->pause = tern_group_pause(s->other);
    s->resume = s->pause == 0 ? tern_group_resume(s->other) : -1;
}

static void stranger_done(tern_loop *loop, void *arg)
{
    (void)loop;
    struct stranger *s = arg;
    atomic_store(&s->done, 1);
}

Test(group_edges, another_groups_loop_thread_is_a_stranger_to_the_group, .timeout = TEST_TIMEOUT)
{
    tern_group *a = group_make(1, "ga", false);
    tern_group *b = group_make(2, "gb", false);
    cr_assert_eq(tern_group_start(a), 0);
    struct stranger s = {.other = b};
    cr_assert_eq(tern_group_broadcast(a, work_other_group, stranger_done, &s), 0);
    wait_at_least(&s.done, 1, "the broadcast on group A");
    cr_assert_eq(s.other_index, -ENOENT, "group B's index on A's thread: %d", s.other_index);
    cr_assert_eq(s.wait_before_start, -EINVAL,
                 "waiting for B before its start, from A's thread, is refused, not fatal: %d",
                 s.wait_before_start);
    cr_assert_eq(s.start, 0, "A's thread may start B: %s", tern_strerror(s.start));
    cr_assert_eq(s.pause, 0, "A's thread pauses B as an outsider: %s", tern_strerror(s.pause));
    cr_assert_eq(s.resume, 0, "and resumes it: %s", tern_strerror(s.resume));
    group_end(b);
    group_end(a);
}

/* ---------------------------------------------------------------- */
/* Broadcasts                                                       */
/* ---------------------------------------------------------------- */

struct seen {
    atomic_uint runs;
    atomic_uint mask;
};

static void note_run(tern_loop *loop, unsigned index, void *arg)
{
    (void)loop;
    struct seen *s = arg;
    atomic_fetch_or(&s->mask, 1u << index);
    atomic_fetch_add(&s->runs, 1);
}

Test(group_edges, a_broadcast_without_done_runs_once_on_every_loop, .timeout = TEST_TIMEOUT)
{
    tern_group *g = group_make(3, "gnd", false);
    cr_assert_eq(tern_group_start(g), 0);
    struct seen s = {0};
    cr_assert_eq(tern_group_broadcast(g, note_run, NULL, &s), 0);
    wait_at_least(&s.runs, 3, "broadcast runs");
    group_end(g);
    cr_assert_eq(atomic_load(&s.runs), 3, "once per loop, not more");
    cr_assert_eq(atomic_load(&s.mask), 7u, "on every loop");
}

Test(group_edges, a_broadcast_refused_for_memory_runs_nowhere, .timeout = TEST_TIMEOUT)
{
    tern_group *g = group_make(2, "gnm", false);
    cr_assert_eq(tern_group_start(g), 0);
    struct seen s = {0};
    /* The members sleep with nothing to do: the broadcast's record is the
     * first allocation from here on. */
    tern__fault_arm(TERN__FAULT_ALLOC, 1);
    int rc = tern_group_broadcast(g, note_run, NULL, &s);
    bool fired = tern__fault_fired();
    tern__fault_arm(0, 0);
    cr_assert(fired, "the broadcast allocates its record");
    cr_assert_eq(rc, -ENOMEM, "refused: %s", tern_strerror(rc));
    /* A later broadcast runs, and the refused one never does. */
    cr_assert_eq(tern_group_broadcast(g, note_run, NULL, &s), 0);
    wait_at_least(&s.runs, 2, "the accepted broadcast");
    group_end(g);
    cr_assert_eq(atomic_load(&s.runs), 2, "only the accepted broadcast ran");
}

/* ---------------------------------------------------------------- */
/* Shutdown                                                         */
/* ---------------------------------------------------------------- */

static void count_teardown(tern_loop *loop, void *arg)
{
    (void)loop;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

Test(group_edges, a_teardown_post_refused_for_memory_is_posted_again, .timeout = TEST_TIMEOUT)
{
    tern_group *g = group_make(1, "gtd", false);
    atomic_uint teardowns = 0;
    cr_assert_eq(tern_group_on_shutdown(g, 0, count_teardown, &teardowns), 0);
    cr_assert_eq(tern_group_start(g), 0);
    /* The member has never posted, so its teardown post needs a fresh
     * block of post records: the first allocation after the shutdown
     * signal. It fails once; the member must try again, not hang. */
    tern__fault_arm(TERN__FAULT_ALLOC, 1);
    cr_assert_eq(tern_group_shutdown(g), 0);
    cr_assert_eq(tern_group_wait(g), 0);
    bool fired = tern__fault_fired();
    tern__fault_arm(0, 0);
    tern_group_free(g);
    cr_assert(fired, "the teardown post met the injected failure");
    cr_assert_eq(atomic_load(&teardowns), 1, "teardown ran once: %u", atomic_load(&teardowns));
}

/* ---------------------------------------------------------------- */
/* Pinning without the affinity mask                                */
/* ---------------------------------------------------------------- */

/* sched_getaffinity fails with EPERM in this test's process from now on. */
static void without_getaffinity(void)
{
    /* Only the calls that ask for the calling thread (pid 0), as tern's
     * do: a sanitizer asks by thread id for every thread it starts. */
    refuse_when(SYS_sched_getaffinity, 0, 0, EPERM, THIS_THREAD);
    cpu_set_t set;
    cr_assert_neq(sched_getaffinity(0, sizeof(set), &set), 0);
}

struct pinned {
    char cpus[2][64];
    atomic_uint runs;
};

/* The kernel's word for the calling thread's allowed CPUs (no syscall the
 * filter refuses). */
static void read_allowed(tern_loop *loop, unsigned index, void *arg)
{
    (void)loop;
    struct pinned *p = arg;
    FILE *f = fopen("/proc/thread-self/status", "r");
    char line[256];
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "Cpus_allowed_list:", 18) == 0) {
            const char *v = line + 18;
            while (*v == ' ' || *v == '\t')
                v++;
            snprintf(p->cpus[index], sizeof(p->cpus[index]), "%.*s", (int)strcspn(v, "\n"), v);
        }
    if (f != NULL)
        fclose(f);
    atomic_fetch_add(&p->runs, 1);
}

Test(group_edges, pinning_without_the_affinity_mask_pins_to_cpu_0, .timeout = TEST_TIMEOUT)
{
    without_getaffinity();
    tern_group *g = group_make(2, "gpin", true);
    cr_assert_eq(tern_group_start(g), 0);
    struct pinned p = {0};
    cr_assert_eq(tern_group_broadcast(g, read_allowed, NULL, &p), 0);
    wait_at_least(&p.runs, 2, "the broadcast");
    group_end(g);
    for (unsigned i = 0; i < 2; i++)
        cr_assert_str_eq(p.cpus[i], "0", "loop %u runs on CPUs \"%s\", not CPU 0 alone", i,
                         p.cpus[i]);
}
