/*
 * What a spawn does when the kernel refuses one of the calls on its path
 * (runtime/process/process.c, process_launch.c, process_exit.c). Each test
 * installs a seccomp filter in its own process (criterion runs every test
 * in a process of its own) that makes one system call fail with a chosen
 * errno; the launcher's child, which shares the process, inherits it.
 *
 * Checked: a step the child takes before execve (setsid, moving a stdio
 * source out of the way, dropping close-on-exec, dup3, setgid, setuid,
 * setgroups) that fails is the spawn's error, with no child, no descriptor
 * and no operation left; setgroups refused with EPERM is passed over, as
 * for a process that may not change its groups; without close_range the
 * child still closes every descriptor above its stdio; a launch the kernel
 * refuses is -ENOMEM or -EAGAIN; the parent's /dev/null and socket pair
 * failing refuse the spawn; a pidfd that cannot be opened or set up for a
 * started child ends that child and refuses the spawn; a probe of pidfd_open
 * that fails for a passing cause (EMFILE) uses the SIGCHLD fallback for that
 * child; a refused kill is the call's error; a spawn without PATH searches
 * the default one; a descriptor to inherit that is not open stays closed;
 * a SIGCHLD handler the fallback cannot install refuses the spawn.
 */
#include "exit_helpers.h"
#include "loop_helpers.h"
#include "seccomp_helpers.h"

#include <signal.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/wait.h>

static void options_sh(tern_process_options *o, const char *script)
{
    static char *argv[] = {"sh", "-c", NULL, NULL};
    tern_process_options_init(o);
    o->file = "/bin/sh";
    argv[2] = (char *)script;
    o->argv = argv;
}

static void run_until_exit(tern_loop *loop, struct exit_seen *e)
{
    cr_assert(run_until_count(loop, &e->n, 1, 50 * (int64_t)MS, 2000), "no exit callback");
}

/* No child of this process is left, not even a zombie. */
static void assert_no_child(void)
{
    int st;
    errno = 0;
    cr_assert_eq(waitpid(-1, &st, WNOHANG), -1, "a refused spawn left a child");
    cr_assert_eq(errno, ECHILD);
}

/*
 * The spawn of o is refused with want: no id given, no child, no
 * operation and no descriptor left, and the callback never runs.
 */
static void assert_refused(tern_loop *loop, tern_process_options *o, int want)
{
    int fds = count_open_fds();
    struct exit_seen e = {0};
    tern_id id = 0;
    int rc = tern_process_spawn(loop, o, on_exit_cb, &e, &id);
    cr_assert_eq(rc, want, "spawn: %s, not %s", tern_err_name(rc), tern_err_name(want));
    cr_assert_eq(id, 0);
    assert_no_child();
    cr_assert_eq(loop_live(loop), 0);
    cr_assert_eq(count_open_fds(), fds, "a refused spawn left a descriptor open");
    for (int i = 0; i < 3; i++)
        tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&e.n), 0);
}

/* A spawn of `true` that must work: its exit code 0 arrives once. */
static void assert_spawns(tern_loop *loop, tern_process_options *o)
{
    struct exit_seen e = {0};
    cr_assert_eq(tern_process_spawn(loop, o, on_exit_cb, &e, NULL), 0);
    run_until_exit(loop, &e);
    cr_assert_eq(e.status, 0);
    cr_assert_eq(e.code, 0);
    assert_no_child();
}

/* ------------------------------------------------------------------ */
/* The child's steps before execve                                     */
/* ------------------------------------------------------------------ */

/*
 * These refusals are the Linux launcher's calls (clone with CLONE_VFORK,
 * close_range, pidfds); a -Dportable=true build launches through the
 * fallbacks instead, whose refusals process_launch_test and
 * process_fallback_test cover.
 */
#if defined(TERN_PORTABLE)
TestSuite(refusals, .disabled = true);
#else
TestSuite(refusals);
#endif

Test(refusals, setsid_of_a_detached_child, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    refuse(SYS_setsid, EPERM);
    tern_process_options o;
    options_sh(&o, "exit 0");
    o.flags = TERN_PROCESS_DETACHED;
    assert_refused(loop, &o, -EPERM);
    o.flags = 0; /* the same spawn, not detached, does not call setsid */
    assert_spawns(loop, &o);
    loop_free_clean(loop);
}

/* stdio 0 from descriptor 1 and 1 from 0: each source is moved above the
 * targets first (F_DUPFD), and that move failing is the spawn's error. */
Test(refusals, moving_a_source_out_of_the_way, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    refuse_when(SYS_fcntl, 1, F_DUPFD, EMFILE, THIS_THREAD);
    tern_process_options o;
    options_sh(&o, "exit 0");
    tern_stdio io[2] = {{.kind = TERN_STDIO_FD, .fd = 1}, {.kind = TERN_STDIO_FD, .fd = 0}};
    o.stdio = io;
    o.stdio_count = 2;
    assert_refused(loop, &o, -EMFILE);
    loop_free_clean(loop);
}

/* An inherited descriptor loses close-on-exec (F_SETFD) in the child. */
Test(refusals, keeping_an_inherited_descriptor, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    refuse_when(SYS_fcntl, 1, F_SETFD, EBADF, THIS_THREAD);
    tern_process_options o;
    options_sh(&o, "exit 0"); /* no stdio given: 0, 1 and 2 are inherited */
    assert_refused(loop, &o, -EBADF);
    loop_free_clean(loop);
}

/*
 * A descriptor asked to be inherited that is not open: nothing to keep,
 * and the child starts without it (no error).
 */
Test(refusals, an_inherited_descriptor_that_is_closed_is_left_closed, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    int k = dup(0); /* the lowest descriptor free now; the spawn opens none before the launch */
    cr_assert_geq(k, 3);
    cr_assert_lt(k, 60);
    close(k);
    tern_process_options o;
    char script[96];
    snprintf(script, sizeof script, "if [ -e /proc/self/fd/%d ]; then exit 1; fi; exit 0", k);
    options_sh(&o, script);
    tern_stdio io[64];
    for (int i = 0; i <= k; i++)
        io[i] = (tern_stdio){.kind = TERN_STDIO_INHERIT};
    o.stdio = io;
    o.stdio_count = (unsigned)k + 1;
    assert_spawns(loop, &o);
    loop_free_clean(loop);
}

Test(refusals, dup3_of_a_stdio_source, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    refuse(SYS_dup3, EBADF);
    tern_process_options o;
    options_sh(&o, "exit 0");
    tern_stdio io[1] = {{.kind = TERN_STDIO_IGNORE}}; /* /dev/null, dup3'd to 0 */
    o.stdio = io;
    o.stdio_count = 1;
    assert_refused(loop, &o, -EBADF);
    loop_free_clean(loop);
}

Test(refusals, setgid, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    refuse(SYS_setgid, EPERM);
    tern_process_options o;
    options_sh(&o, "exit 0");
    o.flags = TERN_PROCESS_SETGID;
    o.gid = getgid();
    assert_refused(loop, &o, -EPERM);
    loop_free_clean(loop);
}

Test(refusals, setuid, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    refuse(SYS_setuid, EPERM);
    refuse(SYS_setgroups, EPERM); /* as for a process without the right */
    tern_process_options o;
    options_sh(&o, "exit 0");
    o.flags = TERN_PROCESS_SETUID;
    o.uid = getuid();
    assert_refused(loop, &o, -EPERM);
    loop_free_clean(loop);
}

/* Dropping the supplementary groups: EPERM means "not allowed to", and the
 * setuid that follows decides; any other error is the spawn's. */
Test(refusals, setgroups, .timeout = TEST_TIMEOUT)
{
    if (getuid() != 0)
        cr_skip_test("setuid to oneself needs no right, but the groups test needs root");
    tern_loop *loop = loop_new_default();
    refuse(SYS_setgroups, EPERM);
    tern_process_options o;
    options_sh(&o, "exit 0");
    o.flags = TERN_PROCESS_SETUID;
    o.uid = getuid();
    assert_spawns(loop, &o);
    refuse(SYS_setgroups, EINVAL);
    assert_refused(loop, &o, -EINVAL);
    loop_free_clean(loop);
}

/*
 * Without close_range (an older kernel: ENOSYS) the child closes each
 * descriptor up to the limit itself: one the parent opened without
 * close-on-exec is not in the program.
 */
Test(refusals, without_close_range_descriptors_are_still_closed, .timeout = TEST_TIMEOUT)
{
#ifndef SYS_close_range
    cr_skip_test("no close_range in this build");
#else
    tern_loop *loop = loop_new_default();
    int leak = fcntl(0, F_DUPFD, 40); /* no close-on-exec */
    cr_assert_geq(leak, 40);
    struct rlimit rl;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = 256; /* the descriptors the child closes one by one */
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    refuse(SYS_close_range, ENOSYS);
    tern_process_options o;
    char script[96];
    snprintf(script, sizeof script, "if [ -e /proc/self/fd/%d ]; then exit 1; fi; exit 0", leak);
    options_sh(&o, script);
    assert_spawns(loop, &o);
    /* The descriptor is the parent's still. */
    cr_assert_geq(fcntl(leak, F_GETFD), 0);
    close(leak);
    loop_free_clean(loop);
#endif
}

/* ------------------------------------------------------------------ */
/* The parent's calls                                                  */
/* ------------------------------------------------------------------ */

Test(refusals, the_launch_itself, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    tern_process_options o;
    options_sh(&o, "exit 0");
    refuse(SYS_clone, ENOMEM);
    assert_refused(loop, &o, -ENOMEM);
    refuse(SYS_clone, EAGAIN);
    assert_refused(loop, &o, -EAGAIN);
    refuse(SYS_clone, EPERM); /* any other cause: "try again" */
    assert_refused(loop, &o, -EAGAIN);
    loop_free_clean(loop);
}

Test(refusals, dev_null_for_an_ignored_descriptor, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    refuse_when(SYS_openat, 2, O_RDWR | O_CLOEXEC, ENFILE,
                THIS_THREAD); /* /dev/null as tern opens it */
    tern_process_options o;
    options_sh(&o, "exit 0");
    tern_stdio io[2] = {{.kind = TERN_STDIO_INHERIT}, {.kind = TERN_STDIO_IGNORE}};
    o.stdio = io;
    o.stdio_count = 2;
    assert_refused(loop, &o, -ENFILE);
    loop_free_clean(loop);
}

Test(refusals, socket_pair_for_a_stream, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    refuse(SYS_socketpair, ENFILE);
    tern_process_options o;
    options_sh(&o, "exit 0");
    tern_stdio io[2] = {{.kind = TERN_STDIO_INHERIT}, {.kind = TERN_STDIO_STREAM}};
    o.stdio = io;
    o.stdio_count = 2;
    assert_refused(loop, &o, -ENFILE);
    loop_free_clean(loop);
}

/*
 * The child started, but its pidfd cannot be opened (or made non-blocking):
 * nothing would report its end, so the spawn kills it, reaps it and is
 * refused. The first spawn finds pidfds working, so the second takes the
 * pidfd path.
 */
static void pidfd_refused(long nr, int argi, uint32_t value, int err)
{
    tern_loop *loop = loop_new_default();
    tern_process_options o;
    options_sh(&o, "exit 0");
    assert_spawns(loop, &o);
    refuse_when(nr, argi, value, err, THIS_THREAD);
    options_sh(&o, "exec sleep 30"); /* ends only when killed */
    assert_refused(loop, &o, -err);
    loop_free_clean(loop);
}

Test(refusals, pidfd_open_of_a_started_child, .timeout = TEST_TIMEOUT)
{
#ifndef SYS_pidfd_open
    cr_skip_test("no pidfd in this build");
#else
    pidfd_refused(SYS_pidfd_open, ANY_ARG, 0, EMFILE);
#endif
}

Test(refusals, pidfd_made_non_blocking, .timeout = TEST_TIMEOUT)
{
#ifndef SYS_pidfd_open
    cr_skip_test("no pidfd in this build");
#else
    pidfd_refused(SYS_fcntl, 1, F_SETFL, EINVAL);
#endif
}

/*
 * pidfd_open failing for a passing cause (EMFILE) when tern first asks
 * whether it works: that child uses the SIGCHLD fallback (its handler is
 * installed) and its exit is reported.
 */
Test(refusals, a_pidfd_probe_that_fails_for_now, .timeout = TEST_TIMEOUT)
{
#ifndef SYS_pidfd_open
    cr_skip_test("no pidfd in this build");
#else
    tern_loop *loop = loop_new_default();
    refuse(SYS_pidfd_open, EMFILE);
    tern_process_options o;
    options_sh(&o, "exit 3");
    struct exit_seen e = {0};
    cr_assert_eq(tern_process_spawn(loop, &o, on_exit_cb, &e, NULL), 0);
    struct sigaction sa;
    cr_assert_eq(sigaction(SIGCHLD, NULL, &sa), 0);
    cr_assert(sa.sa_flags & SA_SIGINFO, "the fallback's SIGCHLD handler is not installed");
    run_until_exit(loop, &e);
    cr_assert_eq(e.code, 3);
    assert_no_child();
    loop_free_clean(loop);
#endif
}

/* A refused kill is the call's error; the child still runs, and a kill
 * that works later ends it. */
Test(refusals, kill, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    tern_process_options o;
    options_sh(&o, "exec sleep 30");
    struct exit_seen e = {0};
    tern_id id;
    cr_assert_eq(tern_process_spawn(loop, &o, on_exit_cb, &e, &id), 0);
    int pid;
    cr_assert_eq(tern_process_pid(loop, id, &pid), 0);
    refuse(SYS_kill, EPERM);
    cr_assert_eq(tern_process_kill(loop, id, SIGTERM), -EPERM);
    tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&e.n), 0);
    /* kill is refused for this process now: end the child another way. */
    cr_assert_eq(syscall(SYS_tgkill, pid, pid, SIGKILL), 0);
    run_until_exit(loop, &e);
    cr_assert_eq(e.sig, SIGKILL);
    loop_free_clean(loop);
}

/* Without PATH in the environment a bare name is looked for in
 * /usr/local/bin, /usr/bin and /bin, as execvp does. */
Test(refusals, no_path_searches_the_default, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    cr_assert_eq(unsetenv("PATH"), 0);
    tern_process_options o;
    options_sh(&o, "exit 0");
    o.file = "sh";
    assert_spawns(loop, &o);
    o.file = "tern-no-such-program";
    assert_refused(loop, &o, -ENOENT);
    loop_free_clean(loop);
}

/*
 * Without pidfds, the first child on a loop installs the SIGCHLD handler;
 * when sigaction is refused the spawn is refused with its error, and the
 * loop's child list, wake object and watch are undone.
 */
Test(refusals, the_sigchld_handler_of_the_fallback, .timeout = TEST_TIMEOUT)
{
#ifndef SYS_pidfd_open
    cr_skip_test("no pidfd in this build");
#else
    tern_loop *loop = loop_new_default();
    refuse(SYS_pidfd_open, ENOSYS);
    refuse(SYS_rt_sigaction, EINVAL);
    tern_process_options o;
    options_sh(&o, "exit 0");
    assert_refused(loop, &o, -EINVAL);
    assert_refused(loop, &o, -EINVAL); /* and again: nothing was kept from the first */
    loop_free_clean(loop);
#endif
}
