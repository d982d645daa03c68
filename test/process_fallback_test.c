/*
 * Child exits through the SIGCHLD fallback (runtime/process/process_exit.c), on a
 * kernel that has pidfd_open: each test first makes pidfd_open fail with
 * ENOSYS for its own process (a seccomp filter; criterion runs every test
 * in a process of its own), so tern takes the path it takes on an older
 * kernel or in a build without pidfds. Checked: the handler is installed
 * and chains to the one installed before it (SA_SIGINFO or not), and to
 * nothing after a default flagged SA_SIGINFO; exit codes and signals
 * arrive exactly once, for several children on a loop and for children on
 * two loops; a child tern did not start is never reaped by tern; a
 * cancelled child and a child whose loop was freed are reaped by the
 * reaper, woken by SIGCHLD (or killed and reaped at once when there is no
 * memory to list it); a spawn refused for memory or a
 * descriptor on the fallback's path leaves no child, no descriptor and no
 * operation behind.
 */
#include "exit_helpers.h"
#include "loop_helpers.h"
#include "seccomp_helpers.h"

#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>


/*
 * pidfd_open fails with ENOSYS in this process from now on (and in its
 * children, which only exec). Skips where the filter cannot be written.
 */
static void without_pidfd(void)
{
    refuse(SYS_pidfd_open, ENOSYS);
    cr_assert_eq(syscall(SYS_pidfd_open, getpid(), 0u), -1);
    cr_assert_eq(errno, ENOSYS);
}

static int spawn_sh(tern_loop *loop, const char *script, struct exit_seen *e, tern_id *idp)
{
    static char *argv[][4] = {{"sh", "-c", NULL, NULL}};
    tern_process_options o;
    tern_process_options_init(&o);
    o.file = "/bin/sh";
    argv[0][2] = (char *)script;
    o.argv = argv[0];
    return tern_process_spawn(loop, &o, on_exit_cb, e, idp);
}

static void run_until_exits(tern_loop *loop, struct exit_seen *e, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        cr_assert(run_until_count(loop, &e[i].n, 1, 50 * (int64_t)MS, 2000),
                  "child %u: no exit callback", i);
}

static bool tern_handler_installed(void)
{
    struct sigaction sa;
    cr_assert_eq(sigaction(SIGCHLD, NULL, &sa), 0);
    return (sa.sa_flags & SA_SIGINFO) && sa.sa_sigaction != NULL;
}

BACKEND_TEST(fallback, exit_code_and_signal_once)
{
    without_pidfd();
    tern_loop *loop = loop_new_backend(backend);
    struct exit_seen e[2] = {{0}};
    cr_assert_eq(spawn_sh(loop, "exit 7", &e[0], NULL), 0);
    cr_assert(tern_handler_installed(), "the fallback installed no SIGCHLD handler");
    tern_id id;
    cr_assert_eq(spawn_sh(loop, "exec sleep 30", &e[1], &id), 0);
    run_until_exits(loop, e, 1);
    cr_assert_eq(e[0].status, 0);
    cr_assert_eq(e[0].code, 7);
    cr_assert_eq(e[0].sig, 0);
    cr_assert_eq(tern_process_kill(loop, id, SIGKILL), 0);
    run_until_exits(loop, e + 1, 1);
    cr_assert_eq(e[1].code, -1);
    cr_assert_eq(e[1].sig, SIGKILL);
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 5 * (int64_t)MS);
    cr_assert_eq(atomic_load(&e[0].n), 1);
    cr_assert_eq(atomic_load(&e[1].n), 1);
    int st;
    cr_assert_eq(waitpid(-1, &st, WNOHANG), -1, "a child was left unreaped");
    loop_free_clean(loop);
}

/*
 * Three children listed on one loop end in the order last, first, middle:
 * each is unlinked from wherever it sits in the loop's list, and the
 * codes are each child's own.
 */
BACKEND_TEST(fallback, several_children_any_order)
{
    without_pidfd();
    tern_loop *loop = loop_new_backend(backend);
    struct exit_seen e[3] = {{0}};
    tern_id id[3];
    cr_assert_eq(spawn_sh(loop, "read x; exit 11", &e[0], &id[0]), 0);
    cr_assert_eq(spawn_sh(loop, "read x; exit 12", &e[1], &id[1]), 0);
    cr_assert_eq(spawn_sh(loop, "exit 13", &e[2], &id[2]), 0);
    run_until_exits(loop, e + 2, 1);
    cr_assert_eq(atomic_load(&e[0].n) + atomic_load(&e[1].n), 0);
    cr_assert_eq(tern_process_kill(loop, id[0], SIGTERM), 0);
    run_until_exits(loop, e, 1);
    cr_assert_eq(tern_process_kill(loop, id[1], SIGINT), 0);
    run_until_exits(loop, e + 1, 1);
    cr_assert_eq(e[0].sig, SIGTERM);
    cr_assert_eq(e[1].sig, SIGINT);
    cr_assert_eq(e[2].code, 13);
    loop_free_clean(loop);
}

/* Two loops with children at once: each loop's own table slot and wake. */
BACKEND_TEST(fallback, two_loops)
{
    without_pidfd();
    tern_loop *a = loop_new_backend(backend), *b = loop_new_backend(backend);
    struct exit_seen ea = {0}, eb = {0};
    cr_assert_eq(spawn_sh(a, "exit 21", &ea, NULL), 0);
    cr_assert_eq(spawn_sh(b, "exit 22", &eb, NULL), 0);
    run_until_exits(b, &eb, 1);
    run_until_exits(a, &ea, 1);
    cr_assert_eq(ea.code, 21);
    cr_assert_eq(eb.code, 22);
    loop_free_clean(a);
    loop_free_clean(b);
}

/* A child of this process that tern did not start stays ours to reap. */
BACKEND_TEST(fallback, other_child_left_alone)
{
    without_pidfd();
    pid_t mine = fork();
    cr_assert_geq(mine, 0);
    if (mine == 0)
        _exit(3);
    tern_loop *loop = loop_new_backend(backend);
    struct exit_seen e = {0};
    cr_assert_eq(spawn_sh(loop, "exit 0", &e, NULL), 0);
    run_until_exits(loop, &e, 1);
    /* Our child ended long ago; tern's SIGCHLD wake-ups must not have taken it. */
    int st;
    cr_assert_eq(waitpid(mine, &st, 0), mine, "tern reaped a child it did not start");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 3);
    loop_free_clean(loop);
}

static volatile sig_atomic_t chained_info, chained_plain;

static void app_info_handler(int signo, siginfo_t *info, void *ctx)
{
    (void)info, (void)ctx;
    if (signo == SIGCHLD)
        chained_info++;
}

static void app_plain_handler(int signo)
{
    if (signo == SIGCHLD)
        chained_plain++;
}

static void check_chained(const char *backend, volatile sig_atomic_t *count)
{
    tern_loop *loop = loop_new_backend(backend);
    struct exit_seen e = {0};
    cr_assert_eq(spawn_sh(loop, "exit 5", &e, NULL), 0);
    run_until_exits(loop, &e, 1);
    cr_assert_eq(e.code, 5);
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (*count == 0 && mono_ns() < end)
        sleep_ns(MS);
    cr_assert_gt(*count, 0, "the handler installed before tern's was not called");
    loop_free_clean(loop);
}

BACKEND_TEST(fallback, chains_to_a_siginfo_handler)
{
    without_pidfd();
    struct sigaction sa = {0};
    sa.sa_sigaction = app_info_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    cr_assert_eq(sigaction(SIGCHLD, &sa, NULL), 0);
    check_chained(backend, &chained_info);
}

/* SA_SIGINFO with no function (the default, so flagged): nothing to call. */
BACKEND_TEST(fallback, chains_to_nothing_after_a_flagged_default)
{
    without_pidfd();
    struct sigaction sa = {0};
    sa.sa_handler = SIG_DFL;
    sa.sa_flags = SA_SIGINFO;
    cr_assert_eq(sigaction(SIGCHLD, &sa, NULL), 0);
    tern_loop *loop = loop_new_backend(backend);
    struct exit_seen e = {0};
    cr_assert_eq(spawn_sh(loop, "exit 6", &e, NULL), 0);
    run_until_exits(loop, &e, 1);
    cr_assert_eq(e.code, 6);
    loop_free_clean(loop);
}

BACKEND_TEST(fallback, chains_to_a_plain_handler)
{
    without_pidfd();
    struct sigaction sa = {0};
    sa.sa_handler = app_plain_handler;
    sa.sa_flags = SA_RESTART;
    cr_assert_eq(sigaction(SIGCHLD, &sa, NULL), 0);
    check_chained(backend, &chained_plain);
}

/*
 * Cancelled while it runs: -ECANCELED once, and the child, unlinked from
 * the middle of the loop's list, goes to the reaper, which has no pidfd
 * for it and is woken by its SIGCHLD. Then the loop is freed with a child
 * still running: that one goes to the reaper too.
 */
BACKEND_TEST(fallback, cancelled_and_orphaned_children_are_reaped)
{
    without_pidfd();
    tern_loop *loop = loop_new_backend(backend);
    struct exit_seen e[3] = {{0}};
    tern_id id[3];
    int fds[2];
    blocking_pipe(fds); /* the children end when the write end closes */
    tern_process_options o;
    tern_process_options_init(&o);
    char *argv[] = {"sh", "-c", "read x", NULL};
    o.file = "/bin/sh";
    o.argv = argv;
    tern_stdio io[1] = {{.kind = TERN_STDIO_FD, .fd = fds[0]}};
    o.stdio = io;
    o.stdio_count = 1;
    for (int i = 0; i < 3; i++)
        cr_assert_eq(tern_process_spawn(loop, &o, on_exit_cb, &e[i], &id[i]), 0);
    close(fds[0]);
    int pid[3];
    for (int i = 0; i < 3; i++)
        cr_assert_eq(tern_process_pid(loop, id[i], &pid[i]), 0);
    cr_assert_eq(tern__test_cancel_now(loop, id[1]), TERN_CANCEL_STOPPED);
    run_until_exits(loop, e + 1, 1);
    cr_assert_eq(e[1].status, -ECANCELED);
    cr_assert_eq(kill(pid[1], 0), 0, "cancel signalled the child");
    cr_assert_eq(atomic_load(&e[0].n) + atomic_load(&e[2].n), 0);
    tern_loop_free(loop); /* children 0 and 2 still run: the reaper takes them */
    close(fds[1]);
    for (int i = 0; i < 3; i++)
        cr_assert(wait_gone(pid[i]), "child %d was never reaped", i);
}

/*
 * Every allocation and descriptor on a fallback spawn's path fails once,
 * in turn (the loop's child list, its wake object, the watch): the spawn
 * returns the error with no child started, no descriptor and no operation
 * left, and the next spawn on the same loop works.
 */
BACKEND_TEST(fallback, refused_spawn_leaves_nothing)
{
    without_pidfd();
    backend_warm_up(backend);
    int fds = count_open_fds_settled();
    unsigned refused = 0;
    for (uint64_t n = 1; n < 200; n++) {
        tern_loop *loop = loop_new_backend(backend);
        struct exit_seen e = {0};
        tern__fault_arm(TERN__FAULT_ALLOC | TERN__FAULT_FD, n);
        int rc = spawn_sh(loop, "exit 4", &e, NULL);
        bool fired = tern__fault_fired();
        tern__fault_arm(0, 0);
        if (!fired) {
            cr_assert_eq(rc, 0);
            run_until_exits(loop, &e, 1);
            cr_assert_eq(e.code, 4);
            loop_free_clean(loop);
            break;
        }
        if (rc == 0) { /* the failure hit something that retries or waits */
            run_until_exits(loop, &e, 1);
            cr_assert_eq(e.code, 4);
        } else {
            refused++;
            cr_assert(rc == -ENOMEM || rc == -EMFILE, "spawn %llu: %s", (unsigned long long)n,
                      tern_err_name(rc));
            int st;
            cr_assert_eq(waitpid(-1, &st, WNOHANG), -1, "a refused spawn left a child");
            cr_assert_eq(loop_live(loop), 0);
            /* The loop's child list went with the refusal: the next spawn builds it again. */
            cr_assert_eq(spawn_sh(loop, "exit 4", &e, NULL), 0);
            run_until_exits(loop, &e, 1);
        }
        loop_free_clean(loop);
        cr_assert_eq(count_open_fds_settled(), fds, "spawn %llu left a descriptor open",
                     (unsigned long long)n);
    }
    cr_assert_gt(refused, 2, "the walk reached too few failures to test anything");
}

/*
 * The reaper with children seen through SIGCHLD: no pidfd to wait on, so
 * the handler's signal on the reaper's wake object tells it; and when
 * that object could not be opened, its timed look still finds the end.
 */
static void orphan_reaped(const char *backend, bool no_wake, bool no_memory)
{
    tern_loop *loop = loop_new_backend(backend);
    int p[2];
    blocking_pipe(p);
    tern_process_options o;
    tern_process_options_init(&o);
    char *argv[] = {"sh", "-c", "read x", NULL};
    o.file = "/bin/sh";
    o.argv = argv;
    tern_stdio io[1] = {{.kind = TERN_STDIO_FD, .fd = p[0]}};
    o.stdio = io;
    o.stdio_count = 1;
    struct exit_seen e = {0};
    tern_id id;
    cr_assert_eq(tern_process_spawn(loop, &o, on_exit_cb, &e, &id), 0);
    close(p[0]);
    int pid;
    cr_assert_eq(tern_process_pid(loop, id, &pid), 0);
    if (no_wake || no_memory)
        tern__fault_arm(no_wake ? TERN__FAULT_FD : TERN__FAULT_ALLOC, 1);
    cr_assert_eq(tern__test_cancel_now(loop, id), TERN_CANCEL_STOPPED);
    if (no_wake || no_memory) {
        cr_assert(tern__fault_fired(), "the reaper opened or allocated nothing");
        tern__fault_arm(0, 0);
    }
    run_until_exits(loop, &e, 1);
    cr_assert_eq(e.status, -ECANCELED);
    if (no_memory) {
        /* Nowhere to list it: killed and reaped before the cancel returned. */
        cr_assert(wait_gone(pid), "the child outlived a reaper with no memory");
        close(p[1]);
        loop_free_clean(loop);
        return;
    }
    cr_assert_eq(kill(pid, 0), 0, "the child ended before its input did");
    close(p[1]);
    cr_assert(wait_gone(pid), "the orphan was never reaped");
    loop_free_clean(loop);
}

BACKEND_TEST(fallback, orphan_reaped_on_sigchld)
{
    without_pidfd();
    orphan_reaped(backend, false, false);
}

BACKEND_TEST(fallback, orphan_reaped_without_a_wake_object)
{
    without_pidfd();
    orphan_reaped(backend, true, false);
}

BACKEND_TEST(fallback, orphan_killed_when_there_is_no_memory_to_list_it)
{
    without_pidfd();
    orphan_reaped(backend, false, true);
}
