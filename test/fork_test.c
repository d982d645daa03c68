/*
 * The pool survives fork() (SPEC §3): the child gets a fresh pool on first
 * use, whatever state the parent's pool was in, and the parent's pool goes
 * on working.
 *
 * The child reports through its exit status: 0 for success, otherwise the
 * number of the check that failed (see child_main). It leaves with _exit
 * so criterion's own exit handlers do not run twice.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child_exit.h"
#include "pool_helpers.h"

static void shutdown_clean(void)
{
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}

/* In the child: a new loop, a job of each class, both delivered. */
static int child_main(void)
{
    tern_loop *loop = NULL;
    if (tern_loop_new(&loop, NULL) != 0)
        return 10;
    ph_job b, l;
    ph_job_init(&b, NULL);
    ph_job_init(&l, NULL);
    if (ph_submit(loop, TERN_BOUNDED, &b) != 0)
        return 11;
    if (ph_submit(loop, TERN_LONG, &l) != 0)
        return 12;
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&b.done_calls) == 1 && atomic_load(&l.done_calls) == 1);
    if (!ok)
        return 13;
    if (b.status != 0 || l.status != 0 || b.done_result != &b || l.done_result != &l)
        return 14;
    /* A fresh pool counts only the child's own jobs. */
    tern_pool_stats s = ph_stats();
    if (s.submitted != 2)
        return 15;
    if (!tern__pool_running())
        return 16;
    tern_loop_free(loop);
    if (tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC) != 0)
        return 17;
    return 0;
}

/*
 * The parent's loop, kept where a leak checker in the child can still see
 * it: the child inherits it but must never use or free it, and that is
 * not a leak of the child's making.
 */
static tern_loop *parent_loop;

static void fork_and_check_child(void)
{
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0)
        child_exit(child_main());
    int wstatus = 0;
    cr_assert_eq(waitpid(pid, &wstatus, 0), pid);
    cr_assert(WIFEXITED(wstatus), "the child died (signal %d)",
              WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0);
    cr_assert_eq(WEXITSTATUS(wstatus), 0, "the child failed check %d", WEXITSTATUS(wstatus));
}

static void one_job(tern_loop *loop, tern_occupancy occ)
{
    ph_job j;
    ph_job_init(&j, NULL);
    cr_assert_eq(ph_submit(loop, occ, &j), 0);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&j.done_calls) == 1);
    cr_assert(ok);
    cr_assert_eq(j.status, 0);
}

Test(fork, child_gets_a_fresh_pool_after_the_parent_used_it)
{
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    parent_loop = loop;
    one_job(loop, TERN_BOUNDED);
    one_job(loop, TERN_LONG);

    fork_and_check_child();

    /* The parent's pool still works, with its threads and its counters. */
    one_job(loop, TERN_BOUNDED);
    one_job(loop, TERN_LONG);
    cr_assert_eq(ph_stats().submitted, 4u);
    tern_loop_free(loop);
    shutdown_clean();
}

Test(fork, child_gets_a_fresh_pool_while_parent_jobs_are_in_flight)
{
    /* Fork while every bounded worker is busy, jobs are queued and a long
     * job runs: the child must not inherit any of that. */
    tern_pool_config cfg = ph_config(2, 64, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    parent_loop = loop;
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job jobs[5];
    for (int i = 0; i < 5; i++) {
        ph_job_init(&jobs[i], &gate);
        cr_assert_eq(ph_submit(loop, i == 4 ? TERN_LONG : TERN_BOUNDED, &jobs[i]), 0);
    }
    cr_assert(ph_gate_wait_entered(&gate, 3));

    fork_and_check_child();

    ph_gate_open(&gate);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(jobs, 5) == 5);
    cr_assert(ok);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(jobs[i].status, 0);
    one_job(loop, TERN_BOUNDED);
    tern_loop_free(loop);
    ph_gate_destroy(&gate);
    shutdown_clean();
}

Test(fork, child_of_a_process_that_never_used_the_pool)
{
    fork_and_check_child();
    cr_assert(!tern__pool_running(), "the child's pool leaked into the parent");
}
