/*
 * Child processes (tern_process_spawn, kill, pid): exit status and
 * terminating signal; a program that cannot run is -ENOENT from the call
 * with no child left; stdio as streams, descriptors and /dev/null; no
 * descriptor of the parent leaks into the child; no zombie; another
 * library's child left alone; cancel and teardown with a child running
 * (-ECANCELED once, the child still reaped); unreferenced processes;
 * detached, cwd, env, uid/gid; bad input. Every backend.
 */
#include "exit_helpers.h"
#include "loop_helpers.h"

#include <signal.h>
#include <sys/wait.h>

#include "process_p.h"

/*
 * TERN_TEST_CHILD_NATIVE=1 (the process_test-native run in test/meson.build)
 * has every test's loops take exits from the backend's process filter where
 * it has one (kqueue's EVFILT_PROC; libkqueue on Linux) instead of a pidfd.
 * Criterion re-executes each test in a child, which runs this too.
 */
__attribute__((constructor)) static void child_source_from_env(void)
{
    const char *v = getenv("TERN_TEST_CHILD_NATIVE");
    if (v != NULL && strcmp(v, "1") == 0)
        (void)tern__child_native(true);
}

static char *sh_argv[] = {"sh", "-c", NULL, NULL};

static int spawn_sh(tern_loop *loop, const char *script, struct exit_seen *e, tern_id *idp)
{
    tern_process_options o;
    tern_process_options_init(&o);
    o.file = "/bin/sh";
    sh_argv[2] = (char *)script;
    o.argv = sh_argv;
    return tern_process_spawn(loop, &o, on_exit_cb, e, idp);
}

static void run_until_exit(tern_loop *loop, struct exit_seen *e)
{
    cr_assert(run_until_count(loop, &e->n, 1, 50 * (int64_t)MS, 2000), "no exit callback");
}

/* Zombies whose parent is this process, from /proc. */
static int zombies(void)
{
    DIR *d = opendir("/proc");
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        size_t len = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[len] = '\0';
        char *rp = strrchr(buf, ')');
        char state;
        int ppid;
        if (rp != NULL && sscanf(rp + 2, "%c %d", &state, &ppid) == 2 && ppid == getpid() &&
            state == 'Z')
            n++;
    }
    closedir(d);
    return n;
}

BACKEND_TEST(process, exit_status_and_signal)
{
    tern_loop *loop = loop_new_backend(backend);
    struct exit_seen e = {0};
    tern_id id;
    cr_assert_eq(spawn_sh(loop, "exit 7", &e, &id), 0);
    run_until_exit(loop, &e);
    cr_assert_eq(e.status, 0);
    cr_assert_eq(e.code, 7);
    cr_assert_eq(e.sig, 0);
    cr_assert_eq(e.id, id);

    struct exit_seen k = {0};
    cr_assert_eq(spawn_sh(loop, "exec sleep 30", &k, &id), 0);
    int pid;
    cr_assert_eq(tern_process_pid(loop, id, &pid), 0);
    cr_assert_gt(pid, 0);
    cr_assert_eq(tern_process_kill(loop, id, 0), 0);
    cr_assert_eq(tern_process_kill(loop, id, SIGKILL), 0);
    run_until_exit(loop, &k);
    cr_assert_eq(k.status, 0);
    cr_assert_eq(k.code, -1);
    cr_assert_eq(k.sig, SIGKILL);
    cr_assert_eq(tern_process_kill(loop, id, SIGKILL), -ENOENT, "stale after its callback");
    /* Exactly once: more turns bring nothing more. */
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 5 * (int64_t)MS);
    cr_assert_eq(atomic_load(&e.n), 1);
    cr_assert_eq(atomic_load(&k.n), 1);
    cr_assert_eq(zombies(), 0);
    loop_free_clean(loop);
}

BACKEND_TEST(process, missing_program_is_enoent)
{
    tern_loop *loop = loop_new_backend(backend);
    int fds = count_open_fds();
    struct exit_seen e = {0};
    tern_process_options o;
    tern_process_options_init(&o);
    o.file = "/nonexistent/program";
    cr_assert_eq(tern_process_spawn(loop, &o, on_exit_cb, &e, NULL), -ENOENT);
    o.file = "tern-no-such-program-anywhere";
    cr_assert_eq(tern_process_spawn(loop, &o, on_exit_cb, &e, NULL), -ENOENT);
    o.file = "/bin/sh";
    o.cwd = "/nonexistent/directory";
    cr_assert_eq(tern_process_spawn(loop, &o, on_exit_cb, &e, NULL), -ENOENT);
    /* A stdio stream opened before the launch failed is gone at once too. */
    tern_stdio io[2] = {{.kind = TERN_STDIO_IGNORE}, {.kind = TERN_STDIO_STREAM}};
    o.stdio = io;
    o.stdio_count = 2;
    cr_assert_eq(tern_process_spawn(loop, &o, on_exit_cb, &e, NULL), -ENOENT);
    cr_assert_eq(loop_live(loop), 0, "a refused spawn left its stdio stream live");
    int st;
    cr_assert_eq(waitpid(-1, &st, WNOHANG), -1, "a failed spawn left a child");
    cr_assert_eq(errno, ECHILD);
    cr_assert_eq(loop_live(loop), 0);
    cr_assert_eq(count_open_fds(), fds, "a failed spawn leaked a descriptor");
    cr_assert_eq(atomic_load(&e.n), 0);
    loop_free_clean(loop);
}

struct collect {
    char buf[4096];
    size_t len;
    atomic_bool eof;
};

static void on_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                    void *arg)
{
    (void)loop;
    (void)id;
    struct collect *c = arg;
    if (status < 0 || len == 0) {
        atomic_store(&c->eof, true);
        return;
    }
    if (c->len + len < sizeof(c->buf)) {
        memcpy(c->buf + c->len, data, len);
        c->len += len;
    }
}

static void on_written(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
    cr_assert_eq(status, 0);
}

BACKEND_TEST(process, stdio_streams)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_stdio io[3] = {{.kind = TERN_STDIO_STREAM}, {.kind = TERN_STDIO_STREAM},
                        {.kind = TERN_STDIO_INHERIT}};
    tern_process_options o;
    tern_process_options_init(&o);
    o.file = "cat"; /* searched in PATH */
    o.stdio = io;
    o.stdio_count = 3;
    struct exit_seen e = {0};
    cr_assert_eq(tern_process_spawn(loop, &o, on_exit_cb, &e, NULL), 0);
    cr_assert_neq(io[0].stream, 0);
    cr_assert_neq(io[1].stream, 0);
    struct collect out = {.len = 0};
    cr_assert_eq(tern_stream_read_start(loop, io[1].stream, on_read, &out), 0);
    tern_buf b = {.base = "hello, child", .len = 12};
    cr_assert_geq(tern_stream_write(loop, io[0].stream, &b, 1, on_written, NULL), 0);
    cr_assert_eq(tern_stream_shutdown(loop, io[0].stream, on_written, NULL), 0);
    cr_assert(run_until_flag(loop, &out.eof, 50 * (int64_t)MS, 2000));
    run_until_exit(loop, &e);
    cr_assert_eq(e.code, 0);
    cr_assert_eq(out.len, 12);
    cr_assert_eq(memcmp(out.buf, "hello, child", 12), 0);
    tern_stream_close(loop, io[0].stream);
    tern_stream_close(loop, io[1].stream);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}

BACKEND_TEST(process, no_descriptor_leaks_into_child)
{
    tern_loop *loop = loop_new_backend(backend);
    /* Another library's descriptors, opened without close-on-exec. */
    int p[2];
    cr_assert_eq(pipe(p), 0);
    cr_assert_eq(dup2(p[0], 40), 40);
    tern_stdio io[3] = {{.kind = TERN_STDIO_IGNORE}, {.kind = TERN_STDIO_STREAM},
                        {.kind = TERN_STDIO_IGNORE}};
    tern_process_options o;
    tern_process_options_init(&o);
    o.file = "/bin/ls";
    char *argv[] = {"ls", "-1", "/proc/self/fd", NULL};
    o.argv = argv;
    o.stdio = io;
    o.stdio_count = 3;
    struct exit_seen e = {0};
    cr_assert_eq(tern_process_spawn(loop, &o, on_exit_cb, &e, NULL), 0);
    struct collect out = {.len = 0};
    cr_assert_eq(tern_stream_read_start(loop, io[1].stream, on_read, &out), 0);
    cr_assert(run_until_flag(loop, &out.eof, 50 * (int64_t)MS, 2000));
    run_until_exit(loop, &e);
    cr_assert_eq(e.code, 0);
    out.buf[out.len] = '\0';
    /* 0, 1, 2, and the descriptor ls reads the directory through. */
    cr_assert_str_eq(out.buf, "0\n1\n2\n3\n", "the child had: %s", out.buf);
    tern_stream_close(loop, io[1].stream);
    cr_assert(run_until_nothing_live(loop));
    close(40);
    close(p[0]);
    close(p[1]);
    loop_free_clean(loop);
}

BACKEND_TEST(process, stdio_fd_and_ignore)
{
    tern_loop *loop = loop_new_backend(backend);
    int p[2];
    cr_assert_eq(pipe(p), 0);
    tern_stdio io[2] = {{.kind = TERN_STDIO_IGNORE}, {.kind = TERN_STDIO_FD, .fd = p[1]}};
    tern_process_options o;
    tern_process_options_init(&o);
    o.file = "/bin/sh";
    char *argv[] = {"sh", "-c", "if read x; then echo input; else echo eof; fi", NULL};
    o.argv = argv;
    o.stdio = io;
    o.stdio_count = 2;
    struct exit_seen e = {0};
    cr_assert_eq(tern_process_spawn(loop, &o, on_exit_cb, &e, NULL), 0);
    run_until_exit(loop, &e);
    close(p[1]);
    char buf[16] = {0};
    cr_assert_eq(read(p[0], buf, sizeof buf - 1), 4);
    cr_assert_str_eq(buf, "eof\n");
    close(p[0]);
    loop_free_clean(loop);
}

BACKEND_TEST(process, env_cwd_detached)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_process_options o;
    tern_process_options_init(&o);
    o.file = "/bin/sh";
    char *argv[] = {"sh", "-c",
                    "test \"$FOO\" = bar && test \"$(pwd)\" = / && "
                    "test \"$(cut -d' ' -f6 /proc/$$/stat)\" = $$",
                    NULL};
    char *envp[] = {"FOO=bar", "PATH=/usr/bin:/bin", NULL};
    o.argv = argv;
    o.envp = envp;
    o.cwd = "/";
    o.flags = TERN_PROCESS_DETACHED;
    struct exit_seen e = {0};
    cr_assert_eq(tern_process_spawn(loop, &o, on_exit_cb, &e, NULL), 0);
    run_until_exit(loop, &e);
    cr_assert_eq(e.code, 0, "environment, directory or session not as asked");
    /* The same script without the session fails its last test. */
    o.flags = 0;
    struct exit_seen f = {0};
    cr_assert_eq(tern_process_spawn(loop, &o, on_exit_cb, &f, NULL), 0);
    run_until_exit(loop, &f);
    cr_assert_neq(f.code, 0);
    loop_free_clean(loop);
}

BACKEND_TEST(process, uid_gid)
{
    if (geteuid() != 0) {
        cr_skip_test("setuid and setgid need root");
        return;
    }
    tern_loop *loop = loop_new_backend(backend);
    tern_process_options o;
    tern_process_options_init(&o);
    o.file = "/bin/sh";
    char *argv[] = {"sh", "-c", "test \"$(id -u)\" = 65534 && test \"$(id -g)\" = 65533", NULL};
    o.argv = argv;
    o.flags = TERN_PROCESS_SETUID | TERN_PROCESS_SETGID;
    o.uid = 65534;
    o.gid = 65533;
    struct exit_seen e = {0};
    cr_assert_eq(tern_process_spawn(loop, &o, on_exit_cb, &e, NULL), 0);
    run_until_exit(loop, &e);
    cr_assert_eq(e.code, 0);
    loop_free_clean(loop);
}

/* Whether pid is a zombie now (ended, not yet reaped). */
static bool is_zombie(pid_t pid)
{
    return proc_state(pid) == 'Z';
}

BACKEND_TEST(process, other_children_left_alone)
{
    tern_loop *loop = loop_new_backend(backend);
    /* The test's own child, older than tern's and ended before them. */
    pid_t mine = fork();
    cr_assert_geq(mine, 0);
    if (mine == 0)
        _exit(3);
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (!is_zombie(mine) && mono_ns() < end)
        sleep_ns(MS);
    cr_assert(is_zombie(mine));
    struct exit_seen e[3] = {{0}};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(spawn_sh(loop, "exit 0", &e[i], NULL), 0);
    for (int i = 0; i < 3; i++)
        run_until_exit(loop, &e[i]);
    int st;
    cr_assert_eq(waitpid(mine, &st, 0), mine, "tern reaped a child that is not its own");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 3);
    loop_free_clean(loop);
}

struct cancel_twice {
    tern_id id;
    int first, second;
    atomic_bool done;
};

/* On the loop thread, so the cancel is resolved at once. */
static void cancel_now(tern_loop *loop, tern_id timer, void *arg)
{
    (void)timer;
    struct cancel_twice *c = arg;
    c->first = tern_cancel(loop, c->id);
    c->second = tern_cancel(loop, c->id);
    atomic_store(&c->done, true);
}

BACKEND_TEST(process, cancel_with_child_running)
{
    tern_loop *loop = loop_new_backend(backend);
    struct exit_seen e = {0};
    tern_id id;
    cr_assert_eq(spawn_sh(loop, "exec sleep 30", &e, &id), 0);
    int pid;
    cr_assert_eq(tern_process_pid(loop, id, &pid), 0);
    struct cancel_twice c = {.id = id};
    cr_assert_eq(tern_timer_start(loop, 0, 0, cancel_now, &c, NULL), 0);
    run_until_exit(loop, &e);
    cr_assert(atomic_load(&c.done));
    cr_assert_eq(c.first, TERN_CANCEL_STOPPED);
    cr_assert_eq(c.second, -ENOENT);
    cr_assert_eq(e.status, -ECANCELED);
    cr_assert_eq(access("/proc/self", F_OK), 0);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d", pid);
    cr_assert_eq(access(path, F_OK), 0, "cancel must not end the child");
    cr_assert_eq(kill(pid, SIGKILL), 0);
    cr_assert(wait_gone(pid), "the cancelled child was never reaped");
    cr_assert_eq(atomic_load(&e.n), 1);
    loop_free_clean(loop);
}

BACKEND_TEST(process, teardown_with_child_running)
{
    tern_loop *loop = loop_new_backend(backend);
    struct exit_seen e = {0};
    tern_id id;
    cr_assert_eq(spawn_sh(loop, "exec sleep 30", &e, &id), 0);
    int pid;
    cr_assert_eq(tern_process_pid(loop, id, &pid), 0);
    tern_loop_free(loop);
    cr_assert_eq(atomic_load(&e.n), 1);
    cr_assert_eq(e.status, -ECANCELED);
    cr_assert_eq(kill(pid, SIGKILL), 0);
    cr_assert(wait_gone(pid), "the child of a freed loop was never reaped");
    cr_assert_eq(zombies(), 0);
}

BACKEND_TEST(process, unreferenced)
{
    tern_loop *loop = loop_new_backend(backend);
    struct exit_seen e = {0};
    tern_id id;
    cr_assert_eq(spawn_sh(loop, "exec sleep 30", &e, &id), 0);
    cr_assert_eq(tern_unref(loop, id), 0);
    cr_assert_eq(tern_loop_run(loop), 0, "an unreferenced process kept the loop running");
    cr_assert_eq(tern_process_kill(loop, id, SIGTERM), 0);
    cr_assert_eq(tern_ref(loop, id), 0);
    run_until_exit(loop, &e);
    cr_assert_eq(e.sig, SIGTERM);
    loop_free_clean(loop);
}

BACKEND_TEST(process, bad_input)
{
    tern_loop *loop = loop_new_backend(backend);
    tern_process_options o;
    tern_process_options_init(&o);
    struct exit_seen e = {0};
    cr_assert_eq(tern_process_spawn(loop, &o, on_exit_cb, &e, NULL), -EINVAL, "no file");
    o.file = "/bin/true";
    cr_assert_eq(tern_process_spawn(loop, &o, NULL, &e, NULL), -EINVAL, "no callback");
    cr_assert_eq(tern_process_spawn(loop, NULL, on_exit_cb, &e, NULL), -EINVAL);
    tern_stdio io[1] = {{.kind = TERN_STDIO_FD, .fd = -1}};
    o.stdio = io;
    o.stdio_count = 1;
    cr_assert_eq(tern_process_spawn(loop, &o, on_exit_cb, &e, NULL), -EINVAL, "fd -1");
    io[0].kind = (tern_stdio_kind)9;
    cr_assert_eq(tern_process_spawn(loop, &o, on_exit_cb, &e, NULL), -EINVAL, "kind");
    o.stdio_count = 65;
    cr_assert_eq(tern_process_spawn(loop, &o, on_exit_cb, &e, NULL), -EINVAL, "count");
    o.stdio_count = 0;
    o.flags = 1u << 9;
    cr_assert_eq(tern_process_spawn(loop, &o, on_exit_cb, &e, NULL), -EINVAL, "flags");
    cr_assert_eq(tern_process_kill(loop, 0, SIGTERM), -EINVAL);
    cr_assert_eq(tern_process_kill(loop, 12345, SIGTERM), -ENOENT);
    int pid;
    cr_assert_eq(tern_process_pid(loop, 12345, &pid), -ENOENT);
    cr_assert_eq(loop_live(loop), 0);
    cr_assert_eq(atomic_load(&e.n), 0);
    loop_free_clean(loop);
}

/*
 * With the seam on, a kqueue loop watches each child through EVFILT_PROC
 * (counted), and the exits still come once each: one that ends after the
 * first look (only the filter can report it), one killed, one cancelled
 * and then reaped by the reaper. Other backends have no filter and keep
 * their pidfd (nothing counted).
 */
BACKEND_TEST(process, exits_through_backend_filter)
{
    (void)tern__child_native(true);
    bool filter = strcmp(backend, "kqueue") == 0;
    unsigned long before = tern__child_native_count();
    tern_loop *loop = loop_new_backend(backend);
    struct exit_seen late = {0}, killed = {0}, cancelled = {0};
    tern_id id;
    cr_assert_eq(spawn_sh(loop, "sleep 0.2; exit 5", &late, NULL), 0);
    cr_assert_eq(spawn_sh(loop, "exec sleep 30", &killed, &id), 0);
    cr_assert_eq(tern_process_kill(loop, id, SIGTERM), 0);
    cr_assert_eq(spawn_sh(loop, "exec sleep 30", &cancelled, &id), 0);
    int pid;
    cr_assert_eq(tern_process_pid(loop, id, &pid), 0);
    cr_assert_eq(tern__test_cancel_now(loop, id), TERN_CANCEL_STOPPED);
    run_until_exit(loop, &late);
    run_until_exit(loop, &killed);
    cr_assert_eq(late.code, 5);
    cr_assert_eq(killed.sig, SIGTERM);
    cr_assert_eq(atomic_load(&cancelled.n), 1);
    cr_assert_eq(cancelled.status, -ECANCELED);
    cr_assert_eq(tern__child_native_count() - before, filter ? 3ul : 0ul,
                 "children watched through the backend's process filter");
    cr_assert_eq(kill(pid, SIGKILL), 0);
    cr_assert(wait_gone(pid), "the cancelled child was never reaped");
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 5 * (int64_t)MS);
    cr_assert_eq(atomic_load(&late.n), 1);
    cr_assert_eq(atomic_load(&killed.n), 1);
    cr_assert_eq(zombies(), 0);
    loop_free_clean(loop);
}
