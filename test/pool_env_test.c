/*
 * The pool's configuration from the environment (docs/api.md,
 * "Configuration from the environment"): TERN_POOL_* variables change the
 * defaults; a field the program sets wins; a bad value fails every pool
 * start with -EINVAL and one line on stderr, never a silent default.
 *
 * Criterion runs each test in a fresh child process, and the variables are
 * read at the first configuration or pool start, so each test sets its
 * variables first.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "tern.h"

#define SEC UINT64_C(1000000000)

/* Workers count themselves in as they start: wait (bounded) for n. */
static void assert_threads(unsigned n)
{
    tern_pool_stats st;
    for (int i = 0; i < 1000; i++) {
        tern_pool_stats_get(&st);
        if (st.threads == n)
            return;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    cr_assert_eq(st.threads, n);
}

static void shutdown_clean(void)
{
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * SEC), 0);
}

Test(pool_env, variables_change_the_defaults)
{
    setenv("TERN_POOL_THREADS", "3", 1);
    setenv("TERN_POOL_QUEUE_CAPACITY", "77", 1);
    setenv("TERN_POOL_LONG_THREADS_MAX", "5", 1);
    setenv("TERN_POOL_LONG_IDLE_TIMEOUT_MS", "1500", 1);
    tern_pool_config cfg;
    tern_pool_config_init(&cfg);
    cr_assert_eq(cfg.threads, 3u);
    cr_assert_eq(cfg.queue_capacity, 77u);
    cr_assert_eq(cfg.long_threads_max, 5u);
    cr_assert_eq(cfg.long_idle_timeout_ns, 1500 * UINT64_C(1000000));
    cr_assert_eq(tern_pool_start(NULL), 0);
    assert_threads(3);
    /* NULL and the initialised configuration are the same one. */
    cr_assert_eq(tern_pool_start(&cfg), 0);
    shutdown_clean();
}

Test(pool_env, a_field_the_program_sets_wins)
{
    setenv("TERN_POOL_THREADS", "3", 1);
    tern_pool_config cfg;
    tern_pool_config_init(&cfg);
    cfg.threads = 2;
    cr_assert_eq(tern_pool_start(&cfg), 0);
    assert_threads(2);
    shutdown_clean();
}

static void *work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

static void done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop;
    (void)id;
    (void)status;
    (void)result;
    (void)arg;
}

Test(pool_env, a_word_is_an_error_at_first_use, .init = cr_redirect_stderr)
{
    setenv("TERN_POOL_THREADS", "four", 1);
    cr_assert_eq(tern_pool_start(NULL), -EINVAL);
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, work, done, NULL, NULL), -EINVAL);
    tern_loop_free(loop);
    tern_pool_stats st;
    tern_pool_stats_get(&st);
    cr_assert_eq(st.threads, 0u);
    fflush(stderr);
    cr_assert_stderr_eq_str("tern: TERN_POOL_THREADS=\"four\" is not a decimal number: the pool "
                            "does not start (docs/api.md, tern_pool_config)\n");
}

Test(pool_env, out_of_range_is_an_error, .init = cr_redirect_stderr)
{
    setenv("TERN_POOL_THREADS", "0", 1);
    cr_assert_eq(tern_pool_start(NULL), -EINVAL);
    cr_assert_eq(tern_pool_start(NULL), -EINVAL);
    fflush(stderr);
    cr_assert_stderr_eq_str("tern: TERN_POOL_THREADS=\"0\" is out of range for "
                            "tern_pool_config.threads: the pool does not start (docs/api.md, "
                            "tern_pool_config)\n");
}

/* Each value in its own process: the environment is read once per process. */
struct value {
    char s[32]; /* by value: a child process gets the parameter's bytes */
};
static struct value malformed[] = {{""}, {" 3"}, {"3 "}, {"+3"}, {"-3"}, {"3x"}, {"0x10"},
                                   {"1e3"}, {"99999999999999999999999"}, {"4294967296"}};

ParameterizedTestParameters(pool_env, every_malformed_number_is_refused)
{
    return cr_make_param_array(struct value, malformed, sizeof malformed / sizeof malformed[0]);
}

ParameterizedTest(struct value *value, pool_env, every_malformed_number_is_refused)
{
    cr_assert_eq(setenv("TERN_POOL_QUEUE_CAPACITY", value->s, 1), 0);
    cr_assert_eq(tern_pool_start(NULL), -EINVAL, "TERN_POOL_QUEUE_CAPACITY=\"%s\" started the pool",
                 value->s);
}

Test(pool_env, an_explicit_configuration_does_not_hide_a_bad_variable)
{
    setenv("TERN_POOL_LONG_IDLE_TIMEOUT_MS", "soon", 1);
    tern_pool_config cfg = {.threads = 2, .queue_capacity = 16, .long_threads_max = 4,
                            .long_idle_timeout_ns = SEC};
    cr_assert_eq(tern_pool_start(&cfg), -EINVAL);
}
