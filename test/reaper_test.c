/*
 * The reaper (runtime/process/process_reap.c): children whose process operation
 * ended first are reaped whenever they end, and never left as zombies,
 * even when the reaper cannot have what it needs. Checked: many orphans at
 * once (the list grows past its first size) are each reaped as they end,
 * in any order; with no thread for the reaper, the child is killed and
 * reaped before the cancel returns, as with no memory to list it; with no
 * wake object, the reaper still reaps through the children's pidfds; with
 * no memory for its poll set, it looks on a timer and still reaps; a child
 * somebody else reaped is never reported and, cancelled, is let go.
 */
#include "exit_helpers.h"
#include "loop_helpers.h"

#include <signal.h>
#include <sys/wait.h>

/* A child running `script` with stdin from fd; its pid. */
static pid_t spawn_reading(tern_loop *loop, const char *script, int fd, struct exit_seen *e,
                           tern_id *idp)
{
    tern_process_options o;
    tern_process_options_init(&o);
    char *argv[] = {"sh", "-c", (char *)script, NULL};
    o.file = "/bin/sh";
    o.argv = argv;
    tern_stdio io[1] = {{.kind = TERN_STDIO_FD, .fd = fd}};
    o.stdio = io;
    o.stdio_count = 1;
    cr_assert_eq(tern_process_spawn(loop, &o, on_exit_cb, e, idp), 0);
    int pid;
    cr_assert_eq(tern_process_pid(loop, *idp, &pid), 0);
    return pid;
}

/* A child that blocks reading a pipe until *input, the pipe's write end,
 * is closed; its pid. */
static pid_t spawn_blocked(tern_loop *loop, struct exit_seen *e, tern_id *idp, int *input)
{
    int p[2];
    blocking_pipe(p);
    pid_t pid = spawn_reading(loop, "read x", p[0], e, idp);
    close(p[0]);
    *input = p[1];
    return pid;
}

/* Whether pid is gone already (reaped), without waiting. */
static bool gone_now(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d", (int)pid);
    return access(path, F_OK) < 0;
}

/* Whether pid has not ended: it has a /proc entry and is no zombie. */
static bool alive(pid_t pid)
{
    char state = proc_state(pid);
    return state != 0 && state != 'Z';
}

static void cancel_and_see_it(tern_loop *loop, tern_id id, struct exit_seen *e)
{
    cr_assert_eq(tern__test_cancel_now(loop, id), TERN_CANCEL_STOPPED);
    cr_assert(run_until_count(loop, &e->n, 1, 10 * (int64_t)MS, 1000));
    cr_assert_eq(e->status, -ECANCELED);
}

#define MANY 40 /* past the reaper's first list size (16) twice */

Test(reaper, many_orphans_each_reaped_as_it_ends, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    int input[MANY];
    pid_t pid[MANY];
    tern_id id[MANY];
    static struct exit_seen e[MANY];
    for (int i = 0; i < MANY; i++)
        pid[i] = spawn_blocked(loop, &e[i], &id[i], &input[i]);
    for (int i = 0; i < MANY; i++)
        cancel_and_see_it(loop, id[i], &e[i]);
    /* End them out of order: odd ones first, then the even ones. */
    for (int i = 1; i < MANY; i += 2)
        close(input[i]);
    for (int i = 1; i < MANY; i += 2)
        cr_assert(wait_gone(pid[i]), "orphan %d was never reaped", i);
    for (int i = 0; i < MANY; i += 2)
        cr_assert(alive(pid[i]), "orphan %d ended before its input did", i);
    for (int i = 0; i < MANY; i += 2)
        close(input[i]);
    for (int i = 0; i < MANY; i += 2)
        cr_assert(wait_gone(pid[i]), "orphan %d was never reaped", i);
    loop_free_clean(loop);
}

/*
 * No thread can be started for the reaper: rather than leave a zombie,
 * the cancel kills the child and reaps it before it returns.
 */
Test(reaper, no_thread_kills_and_reaps_at_once, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    struct exit_seen e = {0};
    tern_id id;
    int input;
    pid_t pid = spawn_blocked(loop, &e, &id, &input);
    tern__fault_arm(TERN__FAULT_THREAD, 1);
    cr_assert_eq(tern__test_cancel_now(loop, id), TERN_CANCEL_STOPPED);
    bool fired = tern__fault_fired();
    tern__fault_arm(0, 0);
    cr_assert(fired, "the cancel started no thread");
    /* Reaped already: its input is still open, so it ended only by the kill. */
    cr_assert(gone_now(pid), "the child outlived a reaper that could not start");
    cr_assert(run_until_count(loop, &e.n, 1, 10 * (int64_t)MS, 1000));
    cr_assert_eq(e.status, -ECANCELED);
    close(input);
    loop_free_clean(loop);
}

/*
 * No wake object for the reaper (its first descriptor fails): it still
 * starts, and the child's pidfd alone tells it of the end.
 */
Test(reaper, no_wake_object_still_reaps, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    struct exit_seen e = {0};
    tern_id id;
    int input;
    pid_t pid = spawn_blocked(loop, &e, &id, &input);
    tern__fault_arm(TERN__FAULT_FD, 1);
    cancel_and_see_it(loop, id, &e);
    bool fired = tern__fault_fired();
    tern__fault_arm(0, 0);
    cr_assert(fired, "the reaper opened no descriptor");
    sleep_ns(20 * MS);
    cr_assert(alive(pid), "the child ended before its input did");
    close(input);
    cr_assert(wait_gone(pid), "the child was never reaped");
    loop_free_clean(loop);
}

/*
 * No memory to list the orphan: as with no thread, the cancel kills the
 * child and reaps it (closing its pidfd) before it returns.
 */
/* The pidfds open in this process. */
static int pidfds_open(void)
{
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char link[300], target[64] = {0};
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        if (readlink(link, target, sizeof target - 1) > 0 &&
            strcmp(target, "anon_inode:[pidfd]") == 0)
            n++;
    }
    closedir(d);
    return n;
}

/* A child watched through a pidfd: none in a -Dportable=true build. */
#if defined(TERN_PORTABLE)
#define PIDFDS_BUILT false
#else
#define PIDFDS_BUILT true
#endif

Test(reaper, no_memory_for_the_list_kills_and_reaps_at_once, .timeout = TEST_TIMEOUT,
     .disabled = !PIDFDS_BUILT)
{
    tern_loop *loop = loop_new_default();
    struct exit_seen e = {0};
    tern_id id;
    int input;
    pid_t pid = spawn_blocked(loop, &e, &id, &input);
    cr_assert_eq(pidfds_open(), 1, "the child is not watched through a pidfd");
    tern__fault_arm(TERN__FAULT_ALLOC, 1);
    cr_assert_eq(tern__test_cancel_now(loop, id), TERN_CANCEL_STOPPED);
    bool fired = tern__fault_fired();
    tern__fault_arm(0, 0);
    cr_assert(fired, "the cancel allocated nothing");
    cr_assert(gone_now(pid), "the child outlived a reaper with no memory");
    cr_assert(run_until_count(loop, &e.n, 1, 10 * (int64_t)MS, 1000));
    cr_assert_eq(e.status, -ECANCELED);
    close(input);
    cr_assert_eq(pidfds_open(), 0, "the child's pidfd was left open");
    loop_free_clean(loop);
}

/*
 * The reaper's poll set cannot grow for a second orphan: it looks at its
 * children on a timer instead, and still reaps each as it ends; once the
 * set fits again it waits on the pidfds as before.
 */
Test(reaper, no_memory_for_the_poll_set_looks_on_a_timer, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    struct exit_seen ea = {0}, eb = {0};
    tern_id ida, idb;
    int ina, inb;
    pid_t a = spawn_blocked(loop, &ea, &ida, &ina);
    pid_t b = spawn_blocked(loop, &eb, &idb, &inb);
    cancel_and_see_it(loop, ida, &ea); /* the reaper starts with one orphan */
    /* The second orphan fits the list (16) but not the poll set (2): the
     * reaper's growth of that set is the next allocation. */
    tern__fault_arm(TERN__FAULT_ALLOC, 1);
    cr_assert_eq(tern__test_cancel_now(loop, idb), TERN_CANCEL_STOPPED);
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (!tern__fault_fired() && mono_ns() < end)
        sleep_ns(MS);
    bool fired = tern__fault_fired();
    tern__fault_arm(0, 0);
    cr_assert(fired, "the reaper never grew its poll set");
    cr_assert(run_until_count(loop, &eb.n, 1, 10 * (int64_t)MS, 1000));
    cr_assert_eq(eb.status, -ECANCELED);
    cr_assert(alive(a) && alive(b), "an orphan ended before its input did");
    close(inb);
    cr_assert(wait_gone(b), "the second orphan was never reaped");
    cr_assert(alive(a), "the first orphan ended before its input did");
    close(ina);
    cr_assert(wait_gone(a), "the first orphan was never reaped");
    loop_free_clean(loop);
}

/*
 * A child that somebody else's waitpid reaped first: its pidfd turns
 * readable, but the end is not tern's to see, so no exit callback comes
 * (the contract's "then never"); cancelled, it goes to the reaper, which
 * finds it gone (ECHILD) and lets it go, its thread ending with nothing
 * left to wait for.
 */
Test(reaper, a_child_reaped_by_someone_else_is_let_go, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    int p[2];
    blocking_pipe(p);
    struct exit_seen e = {0};
    tern_id id;
    pid_t pid = spawn_reading(loop, "exit 3", p[0], &e, &id);
    close(p[0]);
    close(p[1]);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 3);
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 2 * (int64_t)MS);
    cr_assert_eq(atomic_load(&e.n), 0, "an exit callback for a child tern never reaped");
    cancel_and_see_it(loop, id, &e);
    /* The hand-over started the reaper's thread (the flag is set under
     * its lock before the cancel returns); it must end by itself. Its
     * thread name is no witness: a thread that has not yet named itself
     * looked like one already gone. */
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (tern__test_reaper_running() && mono_ns() < end)
        sleep_ns(2 * MS);
    cr_assert(!tern__test_reaper_running(), "the reaper still waits for a child that is gone");
    loop_free_clean(loop);
}
