/*
 * Operations whose id must go into a loop's id table when the table is
 * full and cannot grow (runtime/process/process.c, watch.c, wait.c): with the
 * table at its growth point (hooks fill it), every allocation on the
 * path of a spawn, a watch and a descriptor wait fails once in turn. Each
 * refused call returns -ENOMEM and leaves no operation, no descriptor and
 * no child; the same call then works once the allocation does.
 */
#include "loop_helpers.h"

#include <sys/stat.h>
#include <sys/wait.h>

/* The table starts with room for 40 ids (64 slots, 5/8 full): the 41st grows it. */
#define ROOM 40

static void on_hook(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id, (void)arg;
}

/* A loop whose id table holds ROOM ids: the next op added grows it. */
static tern_loop *loop_at_growth(tern_id hooks[ROOM])
{
    tern_loop *loop = loop_new_default();
    for (int i = 0; i < ROOM; i++)
        cr_assert_eq(tern_hook_start(loop, TERN_HOOK_CHECK, on_hook, NULL, &hooks[i]), 0);
    return loop;
}

static void loop_done(tern_loop *loop, tern_id hooks[ROOM])
{
    for (int i = 0; i < ROOM; i++)
        cr_assert_eq(tern_hook_stop(loop, hooks[i]), 0);
    cr_assert(run_until_nothing_live(loop), "%u operations left", loop_live(loop));
    loop_free_clean(loop);
}

/*
 * Walk n = 1, 2, ... arming the nth allocation of start(loop) until it
 * makes none; each refusal leaves nothing. Returns how many were refused.
 */
static unsigned walk(int (*start)(tern_loop *loop, tern_id *idp),
                     void (*finish)(tern_loop *loop, tern_id id))
{
    unsigned refused = 0;
    for (uint64_t n = 1; n < 50; n++) {
        tern_id hooks[ROOM];
        tern_loop *loop = loop_at_growth(hooks);
        int fds = count_open_fds();
        tern_id id = 0;
        tern__fault_arm(TERN__FAULT_ALLOC, n);
        int rc = start(loop, &id);
        bool fired = tern__fault_fired();
        tern__fault_arm(0, 0);
        if (rc < 0) {
            cr_assert(fired, "refused without an injected failure: %s", tern_err_name(rc));
            cr_assert_eq(rc, -ENOMEM, "allocation %llu: %s", (unsigned long long)n,
                         tern_err_name(rc));
            cr_assert_eq(id, 0);
            cr_assert_eq(loop_live(loop), ROOM, "a refused call left an operation");
            cr_assert_eq(count_open_fds(), fds, "a refused call left a descriptor open");
            int st;
            cr_assert_eq(waitpid(-1, &st, WNOHANG), -1, "a refused call left a child");
            refused++;
            cr_assert_eq(start(loop, &id), 0, "the call fails once the allocation works");
        }
        finish(loop, id);
        loop_done(loop, hooks);
        if (!fired)
            break;
    }
    return refused;
}

/* ------------------------------------------------------------------ */

static atomic_uint exits;

static void on_exit_cb(tern_loop *loop, tern_id id, int status, int code, int sig, void *arg)
{
    (void)loop, (void)id, (void)sig, (void)arg;
    cr_assert_eq(status, 0);
    cr_assert_eq(code, 9);
    atomic_fetch_add(&exits, 1);
}

static int start_spawn(tern_loop *loop, tern_id *idp)
{
    static char *argv[] = {"sh", "-c", "exit 9", NULL};
    tern_process_options o;
    tern_process_options_init(&o);
    o.file = "/bin/sh";
    o.argv = argv;
    return tern_process_spawn(loop, &o, on_exit_cb, NULL, idp);
}

static void finish_spawn(tern_loop *loop, tern_id id)
{
    (void)id;
    atomic_store(&exits, 0);
    cr_assert(run_until_count(loop, &exits, 1, 10 * (int64_t)MS, 2000), "no exit callback");
}

Test(ids_full, spawn, .timeout = TEST_TIMEOUT)
{
    cr_assert_gt(walk(start_spawn, finish_spawn), 0);
}

/* ------------------------------------------------------------------ */

static char dir[64];

static void on_watch(tern_loop *loop, tern_id id, int status, unsigned events, const char *name,
                     void *arg)
{
    (void)loop, (void)id, (void)status, (void)events, (void)name, (void)arg;
}

static int start_watch(tern_loop *loop, tern_id *idp)
{
    return tern_watch_start(loop, dir, 0, on_watch, NULL, idp);
}

static void finish_watch(tern_loop *loop, tern_id id)
{
    cr_assert_eq(tern_watch_stop(loop, id), 0);
}

Test(ids_full, watch, .timeout = TEST_TIMEOUT)
{
    snprintf(dir, sizeof dir, "/tmp/tern_ids_full.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    unsigned refused = walk(start_watch, finish_watch);
    cr_assert_eq(rmdir(dir), 0);
    cr_assert_gt(refused, 0);
}

/* ------------------------------------------------------------------ */

static int pipe_fds[2];
static atomic_uint waits_done;

static void on_wait(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)result, (void)arg;
    cr_assert_eq(status, -ECANCELED);
    atomic_fetch_add(&waits_done, 1);
}

static int start_wait(tern_loop *loop, tern_id *idp)
{
    tern_job_options o;
    tern_job_options_init(&o);
    o.timeout_ns = 10 * SEC; /* a deadline to claim as well */
    return tern_wait_fd(loop, pipe_fds[0], on_wait, NULL, &o, idp);
}

static void finish_wait(tern_loop *loop, tern_id id)
{
    atomic_store(&waits_done, 0);
    cr_assert_eq(tern__test_cancel_now(loop, id), TERN_CANCEL_STOPPED);
    cr_assert(run_until_count(loop, &waits_done, 1, 10 * (int64_t)MS, 1000));
}

Test(ids_full, wait, .timeout = TEST_TIMEOUT)
{
    cr_assert_eq(pipe2(pipe_fds, O_CLOEXEC), 0);
    unsigned refused = walk(start_wait, finish_wait);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    cr_assert_gt(refused, 0);
}
