/*
 * What the launcher does in the child before execve
 * (runtime/process/process_launch.c), seen from outside: stdio descriptors that
 * are each other's sources (a swap) end up swapped, not both the same;
 * an empty PATH element means the current directory, as execvp's does;
 * an exec error other than "not there" stops the PATH search and is the
 * spawn's error.
 */
#include "loop_helpers.h"

#include <sys/stat.h>
#include <sys/wait.h>

struct exit_seen {
    atomic_uint n;
    int status, code;
};

static void on_exit_cb(tern_loop *loop, tern_id id, int status, int code, int sig, void *arg)
{
    (void)loop, (void)id, (void)sig;
    struct exit_seen *e = arg;
    e->status = status;
    e->code = code;
    atomic_fetch_add(&e->n, 1);
}

static char dir[64];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/tern_launch.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void put_program(const char *name, const char *text)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    cr_assert_eq(chmod(path, 0755), 0);
}

static void teardown(void)
{
    const char *names[] = {"tern-here", "tern-junk", "true"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char path[128];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        (void)unlink(path);
    }
    cr_assert_eq(rmdir(dir), 0);
}

/* fd, moved above the low numbers first (so placing one pipe end never
 * closes another), becomes descriptor `at`; the old `at` is saved. */
static int high(int fd)
{
    int h = fcntl(fd, F_DUPFD_CLOEXEC, 20);
    cr_assert_geq(h, 20);
    close(fd);
    return h;
}

static void place(int fd, int at, int *saved)
{
    *saved = fcntl(at, F_DUPFD_CLOEXEC, 100);
    cr_assert_eq(dup2(fd, at), at);
    close(fd);
}

static void unplace(int at, int saved)
{
    close(at);
    if (saved >= 0) {
        cr_assert_eq(dup2(saved, at), at);
        close(saved);
    }
}

static size_t read_all(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    ssize_t r;
    while (n < cap - 1 && (r = read(fd, buf + n, cap - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = '\0';
    return n;
}

Test(launch, stdio_sources_that_are_targets_are_swapped, .timeout = TEST_TIMEOUT)
{
    int p[2], q[2];
    cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
    cr_assert_eq(pipe2(q, O_CLOEXEC), 0);
    int pw = high(p[1]), qw = high(q[1]);
    int saved8, saved9;
    place(pw, 8, &saved8); /* 8: P's write end */
    place(qw, 9, &saved9); /* 9: Q's write end */
    /* The loop after: its own descriptors must not be the ones replaced above. */
    tern_loop *loop = loop_new_default();
    tern_stdio io[10];
    for (int i = 0; i < 10; i++)
        io[i] = (tern_stdio){.kind = TERN_STDIO_INHERIT};
    io[8] = (tern_stdio){.kind = TERN_STDIO_FD, .fd = 9};
    io[9] = (tern_stdio){.kind = TERN_STDIO_FD, .fd = 8};
    tern_process_options o;
    tern_process_options_init(&o);
    char *argv[] = {"sh", "-c", "echo eight >&8; echo nine >&9", NULL};
    o.file = "/bin/sh";
    o.argv = argv;
    o.stdio = io;
    o.stdio_count = 10;
    struct exit_seen e = {0};
    int rc = tern_process_spawn(loop, &o, on_exit_cb, &e, NULL);
    unplace(8, saved8);
    unplace(9, saved9);
    cr_assert_eq(rc, 0, "spawn: %s", tern_err_name(rc));
    cr_assert(run_until_count(loop, &e.n, 1, 10 * (int64_t)MS, 2000));
    cr_assert_eq(e.code, 0);
    char got_p[64], got_q[64];
    read_all(p[0], got_p, sizeof got_p);
    read_all(q[0], got_q, sizeof got_q);
    cr_assert_str_eq(got_p, "nine\n", "the child's 9 is not the parent's 8");
    cr_assert_str_eq(got_q, "eight\n", "the child's 8 is not the parent's 9");
    close(p[0]);
    close(q[0]);
    loop_free_clean(loop);
}

static char *path_env(const char *value)
{
    const char *old = getenv("PATH");
    char *keep = old != NULL ? strdup(old) : NULL;
    cr_assert_eq(setenv("PATH", value, 1), 0);
    return keep;
}

static void path_restore(char *keep)
{
    if (keep != NULL) {
        setenv("PATH", keep, 1);
        free(keep);
    }
}

Test(launch, an_empty_path_element_is_the_current_directory, .init = setup, .fini = teardown,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    put_program("tern-here", "#!/bin/sh\nexit 42\n");
    char *keep = path_env("/nonexistent-a::/nonexistent-b");
    tern_process_options o;
    tern_process_options_init(&o);
    o.file = "tern-here";
    o.cwd = dir;
    struct exit_seen e = {0};
    int rc = tern_process_spawn(loop, &o, on_exit_cb, &e, NULL);
    path_restore(keep);
    cr_assert_eq(rc, 0, "spawn: %s", tern_err_name(rc));
    cr_assert(run_until_count(loop, &e.n, 1, 10 * (int64_t)MS, 2000));
    cr_assert_eq(e.code, 42);
    loop_free_clean(loop);
}

Test(launch, an_exec_error_other_than_absence_ends_the_search, .init = setup,
     .fini = teardown, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    /* Executable, but no format the kernel runs (no #! line, not ELF). */
    put_program("tern-junk", "\x01\x02\x03 not a program\n");
    char path[160];
    snprintf(path, sizeof path, "/nonexistent-a:%s:/bin", dir);
    char *keep = path_env(path);
    tern_process_options o;
    tern_process_options_init(&o);
    o.file = "tern-junk";
    struct exit_seen e = {0};
    int rc = tern_process_spawn(loop, &o, on_exit_cb, &e, NULL);
    path_restore(keep);
    cr_assert_eq(rc, -ENOEXEC, "spawn: %s", tern_err_name(rc));
    int st;
    cr_assert_eq(waitpid(-1, &st, WNOHANG), -1, "a failed spawn left a child");
    cr_assert_eq(loop_live(loop), 0);
    loop_free_clean(loop);
}

/*
 * A candidate the kernel will not run for want of permission (EACCES) does
 * not end the search, as execvp's does not: a later one that runs wins, and
 * only when none runs is the spawn's error -EACCES (not -ENOENT).
 */
Test(launch, a_candidate_without_permission_is_passed_over_and_reported_last, .init = setup,
     .fini = teardown, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    put_program("true", "#!/bin/sh\nexit 7\n");
    char path[160];
    snprintf(path, sizeof path, "%s/true", dir);
    cr_assert_eq(chmod(path, 0644), 0); /* no execute bit: EACCES, even for root */
    tern_process_options o;
    tern_process_options_init(&o);
    o.file = "true";

    snprintf(path, sizeof path, "%s:/bin:/usr/bin", dir);
    char *keep = path_env(path);
    struct exit_seen e = {0};
    int rc = tern_process_spawn(loop, &o, on_exit_cb, &e, NULL);
    path_restore(keep);
    cr_assert_eq(rc, 0, "spawn past the refused candidate: %s", tern_err_name(rc));
    cr_assert(run_until_count(loop, &e.n, 1, 10 * (int64_t)MS, 2000));
    cr_assert_eq(e.code, 0, "the refused candidate ran (exit %d), not true", e.code);

    snprintf(path, sizeof path, "/nonexistent-a:%s:/nonexistent-b", dir);
    keep = path_env(path);
    rc = tern_process_spawn(loop, &o, on_exit_cb, &e, NULL);
    path_restore(keep);
    cr_assert_eq(rc, -EACCES, "spawn with only the refused candidate: %s", tern_err_name(rc));
    int st;
    cr_assert_eq(waitpid(-1, &st, WNOHANG), -1, "a failed spawn left a child");
    cr_assert_eq(loop_live(loop), 0);
    loop_free_clean(loop);
}
