/*
 * Loop groups at the edges of their contract (tern/group.h): pinning puts
 * each loop's thread on one CPU; registration refuses what it must
 * (-EINVAL) and grows past its first block keeping order; an allocation
 * or thread creation that fails returns its error and loses nothing
 * already registered, and a start that failed can be made again; and the
 * calls that would deadlock or free running threads abort, naming the rule.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "abort_helpers.h"
#include "tern.h"
#include "tern/group.h"
#include "testing.h"

#define TEST_TIMEOUT 60
#define LOOPS 2
#define MANY 6 /* more than one block of registrations */

static tern_group *make_group(unsigned loops, bool pin)
{
    tern_group_options o;
    tern_group_options_init(&o);
    o.loops = loops;
    o.pin = pin;
    tern_group *g = NULL;
    cr_assert_eq(tern_group_new(&g, &o), 0);
    return g;
}

static void finish(tern_group *g)
{
    cr_assert_eq(tern_group_shutdown(g), 0);
    cr_assert_eq(tern_group_wait(g), 0);
    tern_group_free(g);
}

/* ---- pinning ---- */

static int pinned_cpu[LOOPS];
static int pinned_count[LOOPS];

static void record_affinity(tern_loop *loop, unsigned index, void *arg)
{
    (void)loop, (void)arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
    pinned_count[index] = CPU_COUNT(&set);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            pinned_cpu[index] = c;
}

Test(group_contract, pin_puts_loop_i_on_the_i_th_usable_cpu, .timeout = TEST_TIMEOUT)
{
    cpu_set_t usable;
    CPU_ZERO(&usable);
    cr_assert_eq(sched_getaffinity(0, sizeof usable, &usable), 0);
    int cpus[CPU_SETSIZE], n = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &usable))
            cpus[n++] = c;
    cr_assert_gt(n, 0);

    tern_group *g = make_group(LOOPS, true);
    cr_assert_eq(tern_group_on_setup(g, record_affinity, NULL), 0);
    cr_assert_eq(tern_group_start(g), 0);
    finish(g);
    for (unsigned i = 0; i < LOOPS; i++) {
        cr_expect_eq(pinned_count[i], 1, "loop %u may run on %d CPUs, not one", i,
                     pinned_count[i]);
        cr_expect_eq(pinned_cpu[i], cpus[i % (unsigned)n], "loop %u is on CPU %d, not %d", i,
                     pinned_cpu[i], cpus[i % (unsigned)n]);
    }
}

/* ---- registration ---- */

static atomic_int setup_log[LOOPS][MANY + 1];
static atomic_int setup_seen[LOOPS];
static int teardown_log[MANY + 1];
static int teardown_seen;

static void setup_step(tern_loop *loop, unsigned index, void *arg)
{
    (void)loop;
    int k = atomic_fetch_add(&setup_seen[index], 1);
    if (k <= MANY)
        setup_log[index][k] = (int)(intptr_t)arg;
}

static void teardown_step(tern_loop *loop, void *arg)
{
    (void)loop;
    if (teardown_seen <= MANY)
        teardown_log[teardown_seen] = (int)(intptr_t)arg;
    teardown_seen++;
}

Test(group_contract, registration_refuses_bad_arguments_and_keeps_order, .timeout = TEST_TIMEOUT)
{
    tern_group *g = make_group(LOOPS, false);
    cr_assert_eq(tern_group_on_shutdown(g, 0, NULL, NULL), -EINVAL);
    cr_assert_eq(tern_group_on_shutdown(g, LOOPS, teardown_step, (void *)(intptr_t)99), -EINVAL);
    cr_assert_eq(tern_group_on_setup(g, NULL, NULL), -EINVAL);
    for (int k = 0; k < MANY; k++) {
        cr_assert_eq(tern_group_on_setup(g, setup_step, (void *)(intptr_t)k), 0);
        cr_assert_eq(tern_group_on_shutdown(g, LOOPS - 1, teardown_step, (void *)(intptr_t)k), 0);
    }
    cr_assert_eq(tern_group_start(g), 0);
    cr_assert_eq(tern_group_on_setup(g, setup_step, (void *)(intptr_t)99), -EINVAL,
                 "a setup callback registered after the start");
    finish(g);
    for (unsigned i = 0; i < LOOPS; i++) {
        cr_assert_eq(atomic_load(&setup_seen[i]), MANY, "loop %u ran %d setup callbacks", i,
                     atomic_load(&setup_seen[i]));
        for (int k = 0; k < MANY; k++)
            cr_expect_eq(setup_log[i][k], k, "loop %u's setup %d was callback %d", i, k,
                         setup_log[i][k]);
    }
    cr_assert_eq(teardown_seen, MANY, "%d teardown callbacks ran", teardown_seen);
    for (int k = 0; k < MANY; k++)
        cr_expect_eq(teardown_log[k], k);
}

Test(group_contract, a_registration_without_memory_loses_nothing, .timeout = TEST_TIMEOUT)
{
    tern_group *g = make_group(1, false);
    /* Fill the first block, then make its growth fail. */
    for (int k = 0; k < 4; k++) {
        cr_assert_eq(tern_group_on_setup(g, setup_step, (void *)(intptr_t)k), 0);
        cr_assert_eq(tern_group_on_shutdown(g, 0, teardown_step, (void *)(intptr_t)k), 0);
    }
    tern__fault_arm(TERN__FAULT_ALLOC, 1);
    int rc = tern_group_on_setup(g, setup_step, (void *)(intptr_t)99);
    bool fired = tern__fault_fired();
    tern__fault_arm(0, 0);
    cr_assert(fired);
    cr_assert_eq(rc, -ENOMEM);
    tern__fault_arm(TERN__FAULT_ALLOC, 1);
    rc = tern_group_on_shutdown(g, 0, teardown_step, (void *)(intptr_t)99);
    fired = tern__fault_fired();
    tern__fault_arm(0, 0);
    cr_assert(fired);
    cr_assert_eq(rc, -ENOMEM);

    cr_assert_eq(tern_group_start(g), 0);
    finish(g);
    cr_assert_eq(atomic_load(&setup_seen[0]), 4);
    cr_assert_eq(teardown_seen, 4);
    for (int k = 0; k < 4; k++) {
        cr_expect_eq(setup_log[0][k], k);
        cr_expect_eq(teardown_log[k], k);
    }
}

/* ---- a start that fails ---- */

Test(group_contract, a_start_without_threads_runs_nothing_and_can_be_retried,
     .timeout = TEST_TIMEOUT)
{
    tern_group *g = make_group(LOOPS, false);
    cr_assert_eq(tern_group_on_setup(g, setup_step, NULL), 0);
    /* The second loop's thread cannot be made. */
    tern__fault_arm(TERN__FAULT_THREAD, 2);
    int rc = tern_group_start(g);
    bool fired = tern__fault_fired();
    tern__fault_arm(0, 0);
    cr_assert(fired);
    cr_assert_eq(rc, -EAGAIN);
    for (unsigned i = 0; i < LOOPS; i++)
        cr_assert_eq(atomic_load(&setup_seen[i]), 0, "loop %u ran setup after a failed start", i);
    cr_assert_eq(tern_group_wait(g), -EINVAL, "a group whose start failed has nothing to wait for");

    cr_assert_eq(tern_group_start(g), 0);
    cr_assert_eq(tern_group_start(g), -EINVAL, "a second start of a running group");
    finish(g);
    for (unsigned i = 0; i < LOOPS; i++)
        cr_assert_eq(atomic_load(&setup_seen[i]), 1, "loop %u ran setup %d times", i,
                     atomic_load(&setup_seen[i]));
}

Test(group_contract, a_group_without_memory_is_not_made, .timeout = TEST_TIMEOUT)
{
    /* Every allocation tern_group_new makes, failed in turn. */
    uint64_t n;
    for (n = 1; n < 1000; n++) {
        tern_group_options o;
        tern_group_options_init(&o);
        o.loops = LOOPS;
        tern_group *g = (tern_group *)&n; /* must be left alone on failure */
        tern__fault_arm(TERN__FAULT_ALL, n);
        int rc = tern_group_new(&g, &o);
        bool fired = tern__fault_fired();
        tern__fault_arm(0, 0);
        if (!fired) {
            cr_assert_eq(rc, 0);
            tern_group_free(g);
            break;
        }
        cr_assert(rc == -ENOMEM || rc == -EMFILE || rc == -EAGAIN,
                  "failure %llu: tern_group_new returned %d", (unsigned long long)n, rc);
        cr_assert_eq(g, (tern_group *)&n, "failure %llu: *groupp was written",
                     (unsigned long long)n);
    }
    cr_assert_gt(n, 1, "tern_group_new reached no checked call");
}

/* ---- aborts ---- */

static void resume_unheld_body(void *ctx)
{
    (void)ctx;
    tern_group *g = NULL;
    tern_group_options o;
    tern_group_options_init(&o);
    o.loops = 1;
    if (tern_group_new(&g, &o) != 0)
        child_exit(3);
    tern_group_resume(g);
}

Test(group_contract, resume_without_the_pause_aborts, .timeout = TEST_TIMEOUT)
{
    expect_abort(resume_unheld_body, NULL, "tern_group_resume",
                 "called by a thread that does not hold the group's exclusive mode");
}

static void free_running_body(void *ctx)
{
    (void)ctx;
    tern_group *g = NULL;
    tern_group_options o;
    tern_group_options_init(&o);
    o.loops = 1;
    if (tern_group_new(&g, &o) != 0 || tern_group_start(g) != 0)
        child_exit(3);
    tern_group_free(g);
}

Test(group_contract, free_of_a_running_group_aborts, .timeout = TEST_TIMEOUT)
{
    expect_abort(free_running_body, NULL, "tern_group_free", "the group's threads still run");
}

static tern_group *self_group;

static void start_self(tern_loop *loop, unsigned index, void *arg)
{
    (void)loop, (void)index, (void)arg;
    tern_group_start(self_group);
}

static void wait_self(tern_loop *loop, unsigned index, void *arg)
{
    (void)loop, (void)index, (void)arg;
    tern_group_wait(self_group);
}

static void from_member_body(void *ctx)
{
    tern_group_options o;
    tern_group_options_init(&o);
    o.loops = 1;
    if (tern_group_new(&self_group, &o) != 0 ||
        tern_group_on_setup(self_group, (tern_group_fn)ctx, NULL) != 0 ||
        tern_group_start(self_group) != 0)
        child_exit(3);
    tern_group_wait(self_group); /* the member aborts the process first */
    child_exit(0);
}

Test(group_contract, start_from_its_own_loop_aborts, .timeout = TEST_TIMEOUT)
{
    expect_abort(from_member_body, (void *)start_self, "tern_group_start",
                 "called from a loop thread of the same group");
}

Test(group_contract, wait_from_its_own_loop_aborts, .timeout = TEST_TIMEOUT)
{
    expect_abort(from_member_body, (void *)wait_self, "tern_group_wait",
                 "called from a loop thread of the same group (it would wait for itself)");
}
