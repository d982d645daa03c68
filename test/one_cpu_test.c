/*
 * The loop and the threads that hand it work on one CPU:
 * a turn that took a little work from a waker on the loop's own CPU
 * yields once before it parks. Whoever holds the CPU, nothing handed
 * over is lost or run twice, and a loop with nothing left still parks
 * and returns. Each test pins its process's threads to one CPU before
 * the pool starts, so the workers it starts inherit the pin (criterion
 * runs each test in a process of its own).
 */
#include <criterion/criterion.h>

#include <sched.h>

#include "pool_helpers.h"

static void pin_to_one_cpu(void)
{
    int cpu = sched_getcpu();
    cr_assert_geq(cpu, 0);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    cr_assert_eq(pthread_setaffinity_np(pthread_self(), sizeof one, &one), 0);
}

static void shutdown_clean(void)
{
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}

/*
 * A loop keeps more jobs in flight than its spin serves (so turns that
 * take a job or two from a worker on its CPU yield), resubmitting from
 * each done until every job has run: each ran once and was delivered
 * once, in a run whose turns end by parking when the work is done.
 */
enum { JOBS = 20000, IN_FLIGHT = 64 };

static atomic_uint ran[JOBS];
static unsigned delivered[JOBS];
static unsigned submitted, done_total;

static void *count_run(tern_job *job, void *arg)
{
    (void)job;
    atomic_fetch_add(&ran[(uintptr_t)arg], 1);
    return arg;
}

static void resubmit(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)id;
    cr_assert_eq(status, 0);
    cr_assert_eq(result, arg);
    delivered[(uintptr_t)arg]++;
    done_total++;
    if (submitted < JOBS) {
        cr_assert_eq(tern_submit(loop, TERN_BOUNDED, count_run, resubmit,
                                 (void *)(uintptr_t)submitted, NULL),
                     0);
        submitted++;
    }
}

Test(one_cpu, jobs_from_workers_on_the_loops_cpu, .fini = shutdown_clean)
{
    pin_to_one_cpu();
    tern_pool_config cfg = ph_config(2, 1024, 4);
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.pool = &cfg;
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, &opts), 0);
    for (; submitted < IN_FLIGHT; submitted++)
        cr_assert_eq(tern_submit(loop, TERN_BOUNDED, count_run, resubmit,
                                 (void *)(uintptr_t)submitted, NULL),
                     0);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, done_total == JOBS);
    cr_assert(ok, "%u of %u dones", done_total, JOBS);
    for (unsigned i = 0; i < JOBS; i++) {
        cr_assert_eq(atomic_load(&ran[i]), 1, "job %u ran %u times", i, atomic_load(&ran[i]));
        cr_assert_eq(delivered[i], 1, "job %u delivered %u times", i, delivered[i]);
    }
    /* Nothing live: the loop parks and run returns at once. */
    cr_assert_eq(tern_loop_run(loop), 0);
    tern_loop_free(loop);
}
