/*
 * The guards every loop call runs first, in the build the suite tests
 * (optimised, as a user's release build is):
 *
 * - a loop that tern_loop_free has freed is refused as "NULL or freed
 *   loop": the cleared magic word must reach memory, though nothing in
 *   the library reads it again before the block goes back to the
 *   allocator;
 * - a loop used by a forked child aborts naming the call and the rule
 *   before the child touches the backend or wake descriptors it shares
 *   with its parent, and the parent's loop goes on working afterwards.
 *
 * Each misuse runs in a forked child (abort_helpers.h) that must die of
 * SIGABRT after tern's report.
 */
#include "loop_helpers.h"
#include "abort_helpers.h"


#define RULE_FREED "REQUIRE failed: NULL or freed loop"
#define RULE_FORKED "loop used in a forked child"

static void noop_fn(tern_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
}

static void noop_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
}

static void count_io(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    (void)loop;
    (void)id;
    (void)fd;
    (void)events;
    (*(int *)arg)++;
}

/* ---------------- a freed loop ---------------- */

/*
 * What a call on a freed loop reads depends on what the allocator did
 * with the block: glibc may write its own links over the magic word, or
 * merge the block into free space and leave every byte as tern left it.
 * The test takes the second case on purpose: in the child, free() keeps
 * every block it is given, so the call reads exactly what
 * tern_loop_free wrote. A free of its own replaces the allocator's only
 * where glibc offers the real one by another name, and not under a
 * sanitizer, whose allocator owns every block (AddressSanitizer reports
 * the freed block itself, an exit that expect_abort refuses as an abort).
 */
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define KEEPS_FREED_BLOCKS 1
void __libc_free(void *p);
static bool keep_freed_blocks;
void free(void *p)
{
    if (!keep_freed_blocks)
        __libc_free(p);
}
#else
#define KEEPS_FREED_BLOCKS 0
static bool keep_freed_blocks;
#endif

static tern_loop *freed_loop(void)
{
    tern_loop *loop = NULL;
    if (tern_loop_new(&loop, NULL) != 0)
        child_exit(2);
    keep_freed_blocks = true;
    tern_loop_free(loop);
    return loop;
}

static void timer_on_freed(void *ctx)
{
    (void)ctx;
    tern_timer_start(freed_loop(), 1000, 0, noop_timer, NULL, NULL);
}

static void post_on_freed(void *ctx)
{
    (void)ctx;
    tern_post(freed_loop(), noop_fn, NULL);
}

static void size_of_freed_group(void *ctx)
{
    (void)ctx;
    tern_group *g = NULL;
    tern_group_options opts;
    tern_group_options_init(&opts);
    opts.loops = 1;
    if (tern_group_new(&g, &opts) != 0)
        child_exit(2);
    keep_freed_blocks = true;
    tern_group_free(g);
    tern_group_size(g);
}

Test(loop_guards, a_call_on_a_freed_group_aborts, .timeout = TEST_TIMEOUT)
{
    if (!KEEPS_FREED_BLOCKS)
        cr_skip_test("free() cannot keep freed blocks in this build");
    expect_abort(size_of_freed_group, NULL, "tern_group_size",
                 "REQUIRE failed: NULL or freed group");
}

Test(loop_guards, a_call_on_a_freed_loop_aborts, .timeout = TEST_TIMEOUT)
{
    if (!KEEPS_FREED_BLOCKS)
        cr_skip_test("free() cannot keep freed blocks in this build");
    expect_abort(timer_on_freed, NULL, "tern_timer_start", RULE_FREED);
    expect_abort(post_on_freed, NULL, "tern_post", RULE_FREED);
}

/* ---------------- a forked child ---------------- */

struct parent {
    tern_loop *loop;
    int pipe[2];
};

static void child_io_start(void *ctx)
{
    struct parent *p = ctx;
    tern_io_start(p->loop, p->pipe[0], TERN_READABLE, count_io, NULL, NULL);
}

static void child_loop_free(void *ctx)
{
    struct parent *p = ctx;
    tern_loop_free(p->loop);
}

static void child_post(void *ctx)
{
    struct parent *p = ctx;
    tern_post(p->loop, noop_fn, NULL);
}

static void child_run_once(void *ctx)
{
    struct parent *p = ctx;
    tern_loop_run_once(p->loop, 0);
}

Test(loop_guards, a_forked_child_that_uses_the_parents_loop_aborts, .timeout = TEST_TIMEOUT)
{
    struct parent p;
    cr_assert_eq(tern_loop_new(&p.loop, NULL), 0);
    cr_assert_eq(pipe(p.pipe), 0);
    int fired = 0;
    tern_id id = 0;
    cr_assert_eq(tern_io_start(p.loop, p.pipe[0], TERN_READABLE, count_io, &fired, &id), 0);

    expect_abort(child_io_start, &p, "tern_io_start", RULE_FORKED);
    expect_abort(child_loop_free, &p, "tern_loop_free", RULE_FORKED);
    expect_abort(child_post, &p, "tern_post", RULE_FORKED);
    expect_abort(child_run_once, &p, "tern_loop_run_once", RULE_FORKED);

    /* The parent's watch is still in its backend, and nothing the child
     * tried reached the loop: one byte makes one report, an idle turn
     * makes none. */
    cr_assert_eq(tern_loop_run_once(p.loop, 0), 1);
    cr_assert_eq(fired, 0, "the loop reported a descriptor nothing had written to");
    cr_assert_eq(write(p.pipe[1], "x", 1), 1);
    while (fired == 0)
        tern_loop_run_once(p.loop, -1);
    cr_assert_eq(fired, 1);
    cr_assert_eq(tern_io_stop(p.loop, id), 0);
    tern_loop_free(p.loop);
    close(p.pipe[0]);
    close(p.pipe[1]);
}

/* A loop the child makes after the fork is the child's own. */
Test(loop_guards, a_forked_child_uses_a_loop_of_its_own, .timeout = TEST_TIMEOUT)
{
    tern_loop *parent = NULL;
    cr_assert_eq(tern_loop_new(&parent, NULL), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        tern_loop *own = NULL;
        if (tern_loop_new(&own, NULL) != 0)
            child_exit(2);
        if (tern_defer(own, noop_fn, NULL) != 0 ||
            tern_timer_start(own, 0, 0, noop_timer, NULL, NULL) != 0)
            child_exit(3);
        tern_loop_run(own);
        tern_loop_free(own);
        child_exit(0);
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child failed (status %#x)",
              status);
    tern_loop_free(parent);
}
