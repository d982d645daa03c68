/*
 * Child processes refuse bad arguments as tern/process.h says, and the
 * refusal changes nothing: id 0 and signal numbers out of range are
 * -EINVAL and the child still runs; a spawn asking for descriptors with
 * no array is -EINVAL and starts nothing. Then a signal that ends the
 * child is reported as its term_signal, and afterwards the id is -ENOENT,
 * as it is between the end and the exit callback, and for an id of
 * another kind.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "tern.h"
#include "tern/process.h"

#define TEST_TIMEOUT 60

static int exits, exit_status, exit_code, exit_signal;

static void on_exit_cb(tern_loop *loop, tern_id id, int status, int code, int sig, void *arg)
{
    (void)loop, (void)id, (void)arg;
    exits++;
    exit_status = status;
    exit_code = code;
    exit_signal = sig;
}

static unsigned live(tern_loop *loop)
{
    tern_loop_stats s;
    tern_loop_stats_read(loop, &s, sizeof s);
    return s.live_operations;
}

Test(process_args, bad_arguments_are_refused_and_change_nothing, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);

    tern_process_options o;
    tern_process_options_init(&o);
    o.file = "sleep";
    char *const argv[] = {"sleep", "30", NULL};
    o.argv = argv;

    /* Descriptors asked for without an array: nothing starts. */
    tern_process_options bad = o;
    bad.stdio_count = 1;
    bad.stdio = NULL;
    tern_id none = 0;
    unsigned before = live(loop);
    cr_assert_eq(tern_process_spawn(loop, &bad, on_exit_cb, NULL, &none), -EINVAL);
    cr_assert_eq(none, 0);
    cr_assert_eq(live(loop), before);

    tern_id id = 0;
    cr_assert_eq(tern_process_spawn(loop, &o, on_exit_cb, NULL, &id), 0);
    int pid = 0;
    cr_assert_eq(tern_process_pid(loop, id, &pid), 0);
    cr_assert_gt(pid, 0);

    cr_assert_eq(tern_process_kill(loop, 0, SIGTERM), -EINVAL);
    cr_assert_eq(tern_process_kill(loop, id, -1), -EINVAL);
    cr_assert_eq(tern_process_kill(loop, id, NSIG), -EINVAL);
    int other = -1;
    cr_assert_eq(tern_process_pid(loop, 0, &other), -EINVAL);
    cr_assert_eq(other, -1, "a refused tern_process_pid wrote *pidp");
    /* Still there: signal 0 only checks. */
    cr_assert_eq(tern_process_kill(loop, id, 0), 0);
    cr_assert_eq(kill(pid, 0), 0);
    cr_assert_eq(exits, 0);

    cr_assert_eq(tern_process_kill(loop, id, SIGTERM), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(exits, 1);
    cr_assert_eq(exit_status, 0);
    cr_assert_eq(exit_signal, SIGTERM, "term_signal %d", exit_signal);
    cr_assert_eq(exit_code, -1, "exit_code %d for a child killed by a signal", exit_code);

    cr_assert_eq(tern_process_kill(loop, id, SIGTERM), -ENOENT);
    cr_assert_eq(tern_process_pid(loop, id, &other), -ENOENT);
    tern_loop_free(loop);
}

static tern_id child_id;
static int hook_enoent, hook_other;

/* A check hook runs before the callbacks that the last wait made ready:
 * once the child has been reaped, before its exit callback. */
static void check_kill(tern_loop *loop, tern_id id, void *arg)
{
    (void)id, (void)arg;
    if (exits != 0)
        return;
    int rc = tern_process_kill(loop, child_id, 0);
    if (rc == -ENOENT)
        hook_enoent++;
    else if (rc != 0)
        hook_other++;
}

/*
 * Between the child's end (seen and reaped) and its exit callback the
 * process is not running: a kill is -ENOENT, never a signal to a pid that
 * may be reused. An id of another kind is no process either.
 */
Test(process_args, kill_after_the_end_before_the_callback_is_enoent, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    tern_process_options o;
    tern_process_options_init(&o);
    o.file = "/bin/sh";
    char *const argv[] = {"sh", "-c", "exit 4", NULL};
    o.argv = argv;
    cr_assert_eq(tern_process_spawn(loop, &o, on_exit_cb, NULL, &child_id), 0);
    tern_id hook;
    cr_assert_eq(tern_hook_start(loop, TERN_HOOK_CHECK, check_kill, NULL, &hook), 0);
    int pid = -1;
    cr_assert_eq(tern_process_kill(loop, hook, SIGTERM), -ENOENT);
    cr_assert_eq(tern_process_pid(loop, hook, &pid), -ENOENT);
    cr_assert_eq(pid, -1);
    for (int i = 0; i < 2000 && exits == 0; i++)
        tern_loop_run_once(loop, 10 * 1000 * 1000);
    cr_assert_eq(exits, 1);
    cr_assert_eq(exit_code, 4);
    cr_assert_eq(hook_enoent, 1, "the check hook saw the ended child %d times", hook_enoent);
    cr_assert_eq(hook_other, 0);
    cr_assert_eq(tern_hook_stop(loop, hook), 0);
    tern_loop_free(loop);
}
