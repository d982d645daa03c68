/*
 * Every public call's argument checks (SPEC §8, "misuse aborts"): a
 * call given a NULL loop or group, or one already freed, aborts with a
 * report that names the call and says "NULL or freed loop" (or group);
 * a NULL where the contract asks for an out-pointer or a callback aborts
 * naming that argument. Nothing of the call's work may happen first, so
 * each call is made with arguments that would otherwise be accepted.
 *
 * "Freed" is what a freed loop or group looks like to the check: both
 * clear their magic word before their memory goes back to the allocator,
 * so a block of zeroes stands for one (reading real freed memory would be
 * undefined behaviour in the test itself).
 *
 * Each call runs in a forked child (abort_helpers.h), which must die of
 * SIGABRT after printing tern's report with the call's name and the rule.
 * The loop calls are made once more by a forked child on its parent's
 * live loop, which each must refuse the same way.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <netinet/in.h>
#include <stdalign.h>
#include <stdio.h>
#include <string.h>

#include "abort_helpers.h"
#include "tern.h"
#include "tern/fs.h"
#include "tern/group.h"
#include "tern/net.h"
#include "tern/process.h"
#include "tern/udp.h"
#include "tern/wait.h"
#include "tern/watch.h"
#include "tern/admission.h"
#include "tern/batch.h"

#define TEST_TIMEOUT 60

#define RULE_LOOP "REQUIRE failed: NULL or freed loop"
#define RULE_GROUP "REQUIRE failed: NULL or freed group"

/* What a freed loop or group reads as: its magic word cleared. Larger than
 * either record's head, where the magic sits. */
static alignas(64) unsigned char freed_block[1 << 16];

static void noop_fn(tern_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
}
static void noop_group_fn(tern_loop *loop, unsigned index, void *arg)
{
    (void)loop;
    (void)index;
    (void)arg;
}

/* Callbacks of every shape the calls below take; none is ever called. */
static void *const any_cb = (void *)noop_fn;

static char byte;
static tern_buf one_buf = {.base = &byte, .len = 1};

/*
 * X(name, expected function in the report, call with loop L). Each call's
 * other arguments are ones the call would accept on a live loop.
 */
#define LOOP_CALLS(X)                                                                            \
    X(cancel, "tern_cancel", tern_cancel(L, 1))                                                 \
    X(defer, "tern_defer", tern_defer(L, noop_fn, NULL))                                        \
    X(post, "tern_post", tern_post(L, noop_fn, NULL))                                           \
    X(hook_start, "tern_hook_start", tern_hook_start(L, 0, any_cb, NULL, &id))                  \
    X(hook_stop, "tern_hook_stop", tern_hook_stop(L, 1))                                        \
    X(io_start, "tern_io_start", tern_io_start(L, 0, TERN_READABLE, any_cb, NULL, &id))     \
    X(io_modify, "tern_io_modify", tern_io_modify(L, 1, TERN_READABLE))                      \
    X(io_stop, "tern_io_stop", tern_io_stop(L, 1))                                              \
    X(backend_fd, "tern_loop_backend_fd", tern_loop_backend_fd(L))                              \
    X(backend_name, "tern_loop_backend_name", tern_loop_backend_name(L) != NULL)                \
    X(loop_free, "tern_loop_free", (tern_loop_free(L), 0))                                      \
    X(keepalive, "tern_loop_keepalive", tern_loop_keepalive(L, true))                           \
    X(last_refusal, "tern_loop_last_refusal", tern_loop_last_refusal(L))                  \
    X(next_timeout, "tern_loop_next_timeout", tern_loop_next_timeout(L))                        \
    X(now, "tern_loop_now", tern_loop_now(L))                                                   \
    X(print_live, "tern_loop_print_live", tern_loop_print_live(L, stderr))                      \
    X(run, "tern_loop_run", tern_loop_run(L))                                                   \
    X(run_once, "tern_loop_run_once", tern_loop_run_once(L, 0))                                 \
    X(stats_read, "tern_loop_stats_read", (tern_loop_stats_read(L, &ls, sizeof ls), 0))         \
    X(stop, "tern_loop_stop", tern_loop_stop(L))                                                \
    X(walk, "tern_loop_walk", tern_loop_walk(L, any_cb, NULL))                                  \
    X(owner_close, "tern_owner_close", tern_owner_close(L, 1))                                  \
    X(owner_open, "tern_owner_open", tern_owner_open(L, 1, &id))                                \
    X(owner_stats, "tern_owner_stats_read", tern_owner_stats_read(L, 1, &os, sizeof os))        \
    X(process_kill, "tern_process_kill", tern_process_kill(L, 1, SIGTERM))                      \
    X(process_pid, "tern_process_pid", tern_process_pid(L, 1, &pid))                            \
    X(process_spawn, "tern_process_spawn", tern_process_spawn(L, &po, any_cb, NULL, &id))       \
    X(ref, "tern_ref", tern_ref(L, 1))                                                          \
    X(unref, "tern_unref", tern_unref(L, 1))                                                    \
    X(resolve_addr, "tern_resolve_addr",                                                        \
      tern_resolve_addr(L, (struct sockaddr *)&sin, 0, any_cb, NULL, NULL, &id))                \
    X(resolve_with, "tern_resolve_with",                                                        \
      tern_resolve_with(L, "localhost", NULL, NULL, any_cb, NULL, NULL, &id))                   \
    X(signal_start, "tern_signal_start", tern_signal_start(L, SIGUSR2, any_cb, NULL, &id))      \
    X(signal_stop, "tern_signal_stop", tern_signal_stop(L, 1))                                  \
    X(stream_close, "tern_stream_close", tern_stream_close(L, 1))                               \
    X(stream_fd, "tern_stream_fd", tern_stream_fd(L, 1))                                        \
    X(stream_on_close, "tern_stream_on_close", tern_stream_on_close(L, 1, any_cb, NULL))        \
    X(stream_open, "tern_stream_open", tern_stream_open(L, 0, &id))                             \
    X(read_start, "tern_stream_read_start", tern_stream_read_start(L, 1, any_cb, NULL))         \
    X(read_start_alloc, "tern_stream_read_start_alloc",                                         \
      tern_stream_read_start_alloc(L, 1, any_cb, any_cb, NULL))                                 \
    X(read_stop, "tern_stream_read_stop", tern_stream_read_stop(L, 1))                          \
    X(high_water, "tern_stream_set_high_water",                                                 \
      tern_stream_set_high_water(L, 1, 1024, any_cb, NULL))                                     \
    X(shutdown, "tern_stream_shutdown", tern_stream_shutdown(L, 1, any_cb, NULL))               \
    X(try_write, "tern_stream_try_write", tern_stream_try_write(L, 1, &one_buf, 1))             \
    X(write, "tern_stream_write", tern_stream_write(L, 1, &one_buf, 1, any_cb, NULL))           \
    X(write_queue, "tern_stream_write_queue_size", tern_stream_write_queue_size(L, 1, &size))   \
    X(submit, "tern_submit", tern_submit(L, TERN_BOUNDED, any_cb, any_cb, NULL, &id))           \
    X(submit_batch, "tern_submit_batch",                                                        \
      tern_submit_batch(L, TERN_BOUNDED, any_cb, any_cb, args, 1, NULL, &id))                   \
    X(submit_with, "tern_submit_with",                                                          \
      tern_submit_with(L, TERN_BOUNDED, any_cb, any_cb, NULL, NULL, &id))                       \
    X(tcp_connect, "tern_tcp_connect",                                                          \
      tern_tcp_connect(L, "127.0.0.1", 9, 0, any_cb, NULL, &id))                                \
    X(tcp_keepalive, "tern_tcp_keepalive", tern_tcp_keepalive(L, 1, true, 1, 1))                \
    X(tcp_listen, "tern_tcp_listen", tern_tcp_listen(L, "127.0.0.1", 0, 8, 0, any_cb, NULL, &id)) \
    X(tcp_listen_name, "tern_tcp_listen_name",                                                  \
      tern_tcp_listen_name(L, "localhost", 0, 8, 0, 0, any_cb, any_cb, NULL, &id))              \
    X(tcp_nodelay, "tern_tcp_nodelay", tern_tcp_nodelay(L, 1, true))                            \
    X(tcp_port, "tern_tcp_port", tern_tcp_port(L, 1, &port))                                    \
    X(timer_start, "tern_timer_start", tern_timer_start(L, 1000, 0, any_cb, NULL, &id))         \
    X(timer_stop, "tern_timer_stop", tern_timer_stop(L, 1))                                     \
    X(tty_set_mode, "tern_tty_set_mode", tern_tty_set_mode(L, 1, 0))                            \
    X(tty_winsize, "tern_tty_winsize", tern_tty_winsize(L, 1, &port, &port))                    \
    X(udp_bind, "tern_udp_bind", tern_udp_bind(L, "127.0.0.1", 0, 0, &id))                      \
    X(udp_close, "tern_udp_close", tern_udp_close(L, 1))                                        \
    X(udp_connect, "tern_udp_connect", tern_udp_connect(L, 1, (struct sockaddr *)&sin))         \
    X(udp_fd, "tern_udp_fd", tern_udp_fd(L, 1))                                                 \
    X(udp_membership, "tern_udp_membership",                                                    \
      tern_udp_membership(L, 1, "239.1.2.3", NULL, true))                                       \
    X(udp_mcast_if, "tern_udp_multicast_interface",                                             \
      tern_udp_multicast_interface(L, 1, "127.0.0.1"))                                          \
    X(udp_on_close, "tern_udp_on_close", tern_udp_on_close(L, 1, any_cb, NULL))                 \
    X(udp_port, "tern_udp_port", tern_udp_port(L, 1, &port))                                    \
    X(udp_recv_start, "tern_udp_recv_start", tern_udp_recv_start(L, 1, 64, any_cb, NULL))       \
    X(udp_recv_stop, "tern_udp_recv_stop", tern_udp_recv_stop(L, 1))                            \
    X(udp_send, "tern_udp_send",                                                                \
      tern_udp_send(L, 1, &one_buf, 1, (struct sockaddr *)&sin, any_cb, NULL))                  \
    X(udp_send_queue, "tern_udp_send_queue_size", tern_udp_send_queue_size(L, 1, &size, &size)) \
    X(udp_set, "tern_udp_set", tern_udp_set(L, 1, TERN_UDP_BROADCAST, 1))                       \
    X(udp_high_water, "tern_udp_set_high_water", tern_udp_set_high_water(L, 1, 64, any_cb, NULL)) \
    X(unix_connect, "tern_unix_connect", tern_unix_connect(L, "/nonexistent", any_cb, NULL, &id)) \
    X(unix_listen, "tern_unix_listen", tern_unix_listen(L, "/nonexistent", 8, any_cb, NULL, &id)) \
    X(unix_peer_cred, "tern_unix_peer_cred", tern_unix_peer_cred(L, 1, &cred))                  \
    X(unix_take_fd, "tern_unix_take_fd", tern_unix_take_fd(L, 1))                               \
    X(unix_write_fds, "tern_unix_write_fds",                                                    \
      tern_unix_write_fds(L, 1, &one_buf, 1, &fd0, 1, any_cb, NULL))                            \
    X(wait_call, "tern_wait_call", tern_wait_call(L, any_cb, any_cb, NULL, NULL, &id))          \
    X(wait_fd, "tern_wait_fd", tern_wait_fd(L, 0, any_cb, NULL, NULL, &id))                     \
    X(watch_start, "tern_watch_start", tern_watch_start(L, "/", 1000000, any_cb, NULL, &id))    \
    X(watch_stop, "tern_watch_stop", tern_watch_stop(L, 1))                                     \
    X(fs_open, "req_new", tern_fs_open(L, "/", 0, 0, NULL, any_cb, NULL, &id))

/* The scratch every call above may write to; declared once per call. */
#define LOCALS                                                                                  \
    tern_id id = 0;                                                                             \
    tern_loop_stats ls;                                                                         \
    tern_owner_stats os;                                                                        \
    tern_process_options po;                                                                    \
    int pid = 0;                                                                                \
    int fd0 = 0;                                                                                \
    unsigned port = 0;                                                                          \
    size_t size = 0;                                                                            \
    tern_unix_cred cred;                                                                        \
    void *args[1] = {NULL};                                                                     \
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(9),                      \
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};                       \
    memset(&ls, 0, sizeof ls);                                                                  \
    memset(&os, 0, sizeof os);                                                                  \
    memset(&po, 0, sizeof po);                                                                  \
    memset(&cred, 0, sizeof cred);                                                              \
    (void)id, (void)pid, (void)fd0, (void)port, (void)size, (void)args, (void)sin

#define DEFINE_LOOP_CALL(name, fn, expr)                                                        \
    static void call_##name(tern_loop *L)                                                       \
    {                                                                                           \
        LOCALS;                                                                                 \
        (void)(expr);                                                                           \
    }
LOOP_CALLS(DEFINE_LOOP_CALL)

struct loop_call {
    const char *fn;
    void (*call)(tern_loop *L);
};

#define LOOP_ROW(name, fn, expr) {fn, call_##name},
static const struct loop_call loop_calls[] = {LOOP_CALLS(LOOP_ROW)};
#define N_LOOP_CALLS (sizeof loop_calls / sizeof loop_calls[0])

static void loop_call_body(void *ctx)
{
    const struct loop_call *c = ((void **)ctx)[0];
    tern_loop *loop = ((void **)ctx)[1];
    c->call(loop);
}

/* One parameter per call: criterion runs them in parallel processes. */
static size_t loop_index[N_LOOP_CALLS];

ParameterizedTestParameters(require, null_or_freed_loop)
{
    for (size_t i = 0; i < N_LOOP_CALLS; i++)
        loop_index[i] = i;
    return cr_make_param_array(size_t, loop_index, N_LOOP_CALLS);
}

ParameterizedTest(size_t *i, require, null_or_freed_loop, .timeout = TEST_TIMEOUT)
{
    const struct loop_call *c = &loop_calls[*i];
    void *null_ctx[2] = {(void *)c, NULL};
    expect_abort(loop_call_body, null_ctx, c->fn, RULE_LOOP);
    void *freed_ctx[2] = {(void *)c, freed_block};
    expect_abort(loop_call_body, freed_ctx, c->fn, RULE_LOOP);
}

/*
 * Every call once more, made by a forked child on its parent's live loop:
 * each aborts naming itself and the rule (the loop's backend and wake
 * descriptors are the parent's). The loop is the test process's; the
 * child is expect_abort's.
 */
#define RULE_FORKED "loop used in a forked child"

ParameterizedTestParameters(require, parents_loop_in_a_forked_child)
{
    for (size_t i = 0; i < N_LOOP_CALLS; i++)
        loop_index[i] = i;
    return cr_make_param_array(size_t, loop_index, N_LOOP_CALLS);
}

ParameterizedTest(size_t *i, require, parents_loop_in_a_forked_child, .timeout = TEST_TIMEOUT)
{
    const struct loop_call *c = &loop_calls[*i];
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    void *ctx[2] = {(void *)c, loop};
    expect_abort(loop_call_body, ctx, c->fn, RULE_FORKED);
    tern_loop_free(loop);
}

/* The same for every call that takes a group. */
#define GROUP_CALLS(X)                                                                           \
    X(broadcast, "tern_group_broadcast", tern_group_broadcast(G, noop_group_fn, NULL, NULL))     \
    X(group_free, "tern_group_free", (tern_group_free(G), 0))                                    \
    X(group_index, "tern_group_index", tern_group_index(G))                                      \
    X(group_loop, "tern_group_loop", tern_group_loop(G, 0) != NULL)                              \
    X(on_setup, "tern_group_on_setup", tern_group_on_setup(G, noop_group_fn, NULL))              \
    X(on_shutdown, "tern_group_on_shutdown", tern_group_on_shutdown(G, 0, noop_fn, NULL))        \
    X(on_stall, "tern_group_on_stall", tern_group_on_stall(G, 1000, any_cb, NULL))               \
    X(pause, "tern_group_pause", tern_group_pause(G))                                            \
    X(resume, "tern_group_resume", tern_group_resume(G))                                         \
    X(group_shutdown, "tern_group_shutdown", tern_group_shutdown(G))                             \
    X(group_size, "tern_group_size", tern_group_size(G))                                         \
    X(group_start, "tern_group_start", tern_group_start(G))                                      \
    X(group_wait, "tern_group_wait", tern_group_wait(G))

#define DEFINE_GROUP_CALL(name, fn, expr)                                                       \
    static void gcall_##name(tern_group *G) { (void)(expr); }
GROUP_CALLS(DEFINE_GROUP_CALL)

struct group_call {
    const char *fn;
    void (*call)(tern_group *G);
};

#define GROUP_ROW(name, fn, expr) {fn, gcall_##name},
static const struct group_call group_calls[] = {GROUP_CALLS(GROUP_ROW)};
#define N_GROUP_CALLS (sizeof group_calls / sizeof group_calls[0])

static void group_call_body(void *ctx)
{
    const struct group_call *c = ((void **)ctx)[0];
    c->call(((void **)ctx)[1]);
}

static size_t group_index[N_GROUP_CALLS];

ParameterizedTestParameters(require, null_or_freed_group)
{
    for (size_t i = 0; i < N_GROUP_CALLS; i++)
        group_index[i] = i;
    return cr_make_param_array(size_t, group_index, N_GROUP_CALLS);
}

ParameterizedTest(size_t *i, require, null_or_freed_group, .timeout = TEST_TIMEOUT)
{
    const struct group_call *c = &group_calls[*i];
    void *null_ctx[2] = {(void *)c, NULL};
    expect_abort(group_call_body, null_ctx, c->fn, RULE_GROUP);
    void *freed_ctx[2] = {(void *)c, freed_block};
    expect_abort(group_call_body, freed_ctx, c->fn, RULE_GROUP);
}

/*
 * A NULL where the contract asks for somewhere to write, or for a
 * callback, on a live loop: the report names the argument. X(name,
 * function, rule, call with live loop L).
 */
#define ARG_CALLS(X)                                                                             \
    X(loop_options, "tern_loop_options_init", "opts != NULL", tern_loop_options_init(NULL))      \
    X(loop_new, "tern_loop_new", "loopp != NULL", tern_loop_new(NULL, NULL))                     \
    X(group_options, "tern_group_options_init", "opts != NULL", tern_group_options_init(NULL))   \
    X(group_new, "tern_group_new", "groupp != NULL", tern_group_new(NULL, NULL))                 \
    X(job_options, "tern_job_options_init", "opts != NULL", tern_job_options_init(NULL))         \
    X(process_options, "tern_process_options_init", "opts != NULL",                              \
      tern_process_options_init(NULL))                                                           \
    X(fs_options, "tern_fs_options_init", "opts != NULL", tern_fs_options_init(NULL))            \
    X(job_id, "tern_job_id", "job != NULL", tern_job_id(NULL))                                   \
    X(job_cancelled, "tern_job_cancelled", "job != NULL", tern_job_cancelled(NULL))              \
    X(pool_config, "tern_pool_config_init", "cfg != NULL", tern_pool_config_init(NULL))          \
    X(watch_init, "tern_pool_watch_init", "w != NULL", tern_pool_watch_init(NULL))               \
    X(watch_set, "tern_pool_watch_set", "w != NULL", tern_pool_watch_set(NULL))                  \
    X(pool_stats_out, "tern_pool_stats_read", "out != NULL && size > 0",                         \
      (tern_pool_stats_read(NULL, sizeof(tern_pool_stats)), 0))                                  \
    X(pool_stats_size, "tern_pool_stats_read", "out != NULL && size > 0",                        \
      (tern_pool_stats_read(&ps, 0), 0))                                                         \
    X(worker_stats_out, "tern_pool_worker_stats_read", "out != NULL && size > 0",                \
      tern_pool_worker_stats_read(0, NULL, sizeof(tern_pool_worker_stats)))                      \
    X(worker_stats_size, "tern_pool_worker_stats_read", "out != NULL && size > 0",               \
      tern_pool_worker_stats_read(0, &ws, 0))                                                    \
    X(parse_host, "tern_sockaddr_parse", "host != NULL && out != NULL",                          \
      tern_sockaddr_parse(NULL, 1, &ss))                                                         \
    X(parse_out, "tern_sockaddr_parse", "host != NULL && out != NULL",                           \
      tern_sockaddr_parse("127.0.0.1", 1, NULL))                                                 \
    X(owner_open, "tern_owner_open", "ownerp != NULL", tern_owner_open(L, 1, NULL))              \
    X(owner_stats_out, "tern_owner_stats_read", "out != NULL && size > 0",                       \
      tern_owner_stats_read(L, 1, NULL, sizeof(tern_owner_stats)))                               \
    X(owner_stats_size, "tern_owner_stats_read", "out != NULL && size > 0",                      \
      tern_owner_stats_read(L, 1, &os, 0))                                                       \
    X(stats_out, "tern_loop_stats_read", "out != NULL && size > 0",                              \
      (tern_loop_stats_read(L, NULL, sizeof(tern_loop_stats)), 0))                               \
    X(stats_size, "tern_loop_stats_read", "out != NULL && size > 0",                             \
      (tern_loop_stats_read(L, &ls, 0), 0))                                                      \
    X(process_pid, "tern_process_pid", "pidp != NULL", tern_process_pid(L, 1, NULL))            \
    X(tcp_port, "tern_tcp_port", "portp != NULL", tern_tcp_port(L, 1, NULL))                     \
    X(tty_cols, "tern_tty_winsize", "cols != NULL && rows != NULL",                              \
      tern_tty_winsize(L, 1, NULL, &port))                                                       \
    X(tty_rows, "tern_tty_winsize", "cols != NULL && rows != NULL",                              \
      tern_tty_winsize(L, 1, &port, NULL))                                                       \
    X(udp_port, "tern_udp_port", "portp != NULL", tern_udp_port(L, 1, NULL))                     \
    X(udp_queue, "tern_udp_send_queue_size", "bytes != NULL",                                    \
      tern_udp_send_queue_size(L, 1, NULL, &size))                                               \
    X(peer_cred, "tern_unix_peer_cred", "out != NULL", tern_unix_peer_cred(L, 1, NULL))          \
    X(walk_cb, "tern_loop_walk", "cb != NULL", tern_loop_walk(L, NULL, NULL))                    \
    X(print_live, "tern_loop_print_live", "out != NULL", tern_loop_print_live(L, NULL))          \
    X(write_queue, "tern_stream_write_queue_size", "out != NULL",                                \
      tern_stream_write_queue_size(L, 1, NULL))

#define DEFINE_ARG_CALL(name, fn, rule, expr)                                                   \
    static void acall_##name(tern_loop *L)                                                      \
    {                                                                                           \
        struct sockaddr_storage ss;                                                             \
        tern_pool_stats ps;                                                                     \
        tern_pool_worker_stats ws;                                                              \
        LOCALS;                                                                                 \
        (void)L, (void)ss, (void)ps, (void)ws;                                                  \
        (void)(expr);                                                                           \
    }
ARG_CALLS(DEFINE_ARG_CALL)

struct arg_call {
    const char *fn;
    const char *rule;
    void (*call)(tern_loop *L);
};

#define ARG_ROW(name, fn, rule, expr) {fn, "REQUIRE failed: " rule, acall_##name},
static const struct arg_call arg_calls[] = {ARG_CALLS(ARG_ROW)};
#define N_ARG_CALLS (sizeof arg_calls / sizeof arg_calls[0])

/* The loop is made in the child, on the thread that then calls. */
static void arg_call_body(void *ctx)
{
    const struct arg_call *c = ctx;
    tern_loop *loop = NULL;
    if (tern_loop_new(&loop, NULL) != 0)
        child_exit(3);
    c->call(loop);
}

static size_t arg_index[N_ARG_CALLS];

ParameterizedTestParameters(require, null_argument)
{
    for (size_t i = 0; i < N_ARG_CALLS; i++)
        arg_index[i] = i;
    return cr_make_param_array(size_t, arg_index, N_ARG_CALLS);
}

ParameterizedTest(size_t *i, require, null_argument, .timeout = TEST_TIMEOUT)
{
    const struct arg_call *c = &arg_calls[*i];
    expect_abort(arg_call_body, (void *)c, c->fn, c->rule);
}
