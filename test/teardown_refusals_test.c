/*
 * Work started while a loop is being freed (include/tern.h, "-ESHUTDOWN
 * while the loop is being freed"): a post still pending at tern_loop_free
 * runs during teardown and tries to start one of each kind of work a loop
 * takes beyond timers and watchers (teardown_test covers those): a name
 * lookup, a reverse lookup, an external wait on a descriptor and on a
 * call, a file watch, a child process, a UDP socket, a Unix listener, a
 * TCP connect, a file request, a job and a batch of jobs. Each is refused with -ESHUTDOWN,
 * nothing is created (no callback of any of them ever runs, no descriptor
 * is left open, no child is started).
 */
#include "loop_helpers.h"

#include <netinet/in.h>
#include <sys/wait.h>

static atomic_uint callbacks;
static unsigned refused, tried;
static int spare[2];

static void any_cb(void)
{
    atomic_fetch_add(&callbacks, 1);
}
static void resolve_cb(tern_loop *l, tern_id id, int st, struct addrinfo *res, void *a)
{
    (void)l, (void)id, (void)st, (void)a;
    tern_freeaddrinfo(res);
    any_cb();
}
static void name_cb(tern_loop *l, tern_id id, int st, const char *h, const char *s, void *a)
{
    (void)l, (void)id, (void)st, (void)h, (void)s, (void)a;
    any_cb();
}
static void done_cb(tern_loop *l, tern_id id, int st, void *r, void *a)
{
    (void)l, (void)id, (void)st, (void)r, (void)a;
    any_cb();
}
static void *work(tern_job *job, void *arg)
{
    (void)job, (void)arg;
    any_cb();
    return NULL;
}
static void watch_cb(tern_loop *l, tern_id id, int st, unsigned ev, const char *n, void *a)
{
    (void)l, (void)id, (void)st, (void)ev, (void)n, (void)a;
    any_cb();
}
static void exit_cb(tern_loop *l, tern_id id, int st, int code, int sig, void *a)
{
    (void)l, (void)id, (void)st, (void)code, (void)sig, (void)a;
    any_cb();
}
static void accept_cb(tern_loop *l, tern_id lid, int st, tern_id s, void *a)
{
    (void)l, (void)lid, (void)st, (void)s, (void)a;
    any_cb();
}
static void stream_cb(tern_loop *l, tern_id id, int st, void *a)
{
    (void)l, (void)id, (void)st, (void)a;
    any_cb();
}
static void fs_cb(tern_loop *l, tern_id id, int st, tern_fs_result *r, void *a)
{
    (void)l, (void)id, (void)st, (void)r, (void)a;
    any_cb();
}

static void expect_shutdown(int rc, const char *what)
{
    tried++;
    cr_assert_eq(rc, -ESHUTDOWN, "%s during teardown: %s", what, tern_err_name(rc));
    refused++;
}

static void start_everything(tern_loop *loop, void *arg)
{
    (void)arg;
    tern_id id = 0;
    expect_shutdown(tern_resolve(loop, "localhost", "80", NULL, resolve_cb, NULL, &id),
                    "tern_resolve");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    expect_shutdown(tern_resolve_addr(loop, (struct sockaddr *)&a, 0, name_cb, NULL, NULL, &id),
                    "tern_resolve_addr");
    expect_shutdown(tern_wait_fd(loop, spare[0], done_cb, NULL, NULL, &id), "tern_wait_fd");
    expect_shutdown(tern_wait_call(loop, work, done_cb, NULL, NULL, &id), "tern_wait_call");
    expect_shutdown(tern_watch_start(loop, "/tmp", 0, watch_cb, NULL, &id), "tern_watch_start");
    tern_process_options o;
    tern_process_options_init(&o);
    o.file = "/bin/true";
    expect_shutdown(tern_process_spawn(loop, &o, exit_cb, NULL, &id), "tern_process_spawn");
    expect_shutdown(tern_udp_bind(loop, "127.0.0.1", 0, 0, &id), "tern_udp_bind");
    char name[64];
    snprintf(name, sizeof name, "@tern-teardown-refusals-%d", (int)getpid());
    expect_shutdown(tern_unix_listen(loop, name, TERN_TCP_BACKLOG_DEFAULT, accept_cb, NULL, &id),
                    "tern_unix_listen");
    expect_shutdown(tern_tcp_connect(loop, "127.0.0.1", 9, 0, stream_cb, NULL, &id),
                    "tern_tcp_connect");
    expect_shutdown(tern_fs_stat(loop, "/tmp", NULL, fs_cb, NULL, &id), "tern_fs_stat");
    expect_shutdown(tern_submit(loop, TERN_BOUNDED, work, done_cb, NULL, &id), "tern_submit");
    void *args[2] = {NULL, NULL};
    tern_id ids[2] = {0, 0};
    expect_shutdown(tern_submit_batch(loop, TERN_BOUNDED, work, done_cb, args, 2, NULL, ids),
                    "tern_submit_batch");
}

Test(teardown_refusals, work_started_during_teardown_is_refused_and_never_runs,
     .timeout = TEST_TIMEOUT)
{
    make_pipe(spare);
    tern_loop *loop = loop_new_default();
    int fds = count_open_fds();
    cr_assert_eq(tern_post(loop, start_everything, NULL), 0);
    tern_loop_free(loop);
    cr_assert_eq(tried, 12, "the post did not run during teardown (%u tried)", tried);
    cr_assert_eq(refused, tried);
    sleep_ns(50 * MS); /* a job or a child started by mistake would show by now */
    cr_assert_eq(atomic_load(&callbacks), 0, "a refused start ran a callback");
    int st;
    cr_assert_eq(waitpid(-1, &st, WNOHANG), -1, "a refused spawn left a child");
    cr_assert_leq(count_open_fds(), fds, "a refused start left a descriptor open");
    close(spare[0]);
    close(spare[1]);
}
