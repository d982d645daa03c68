/*
 * Child processes refuse bad arguments as tern/process.h says, and the
 * refusal changes nothing: id 0 and signal numbers out of range are
 * -EINVAL and the child still runs; a spawn asking for descriptors with
 * no array is -EINVAL and starts nothing. Then a signal that ends the
 * child is reported as its term_signal, and afterwards the id is -ENOENT.
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
