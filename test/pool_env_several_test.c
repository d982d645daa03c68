/*
 * Several bad TERN_POOL_* variables at once (docs/api.md, "Configuration
 * from the environment"): the pool still refuses to start, and the one
 * line on stderr names the first bad variable in the documented order,
 * not the last one read and not one line per variable.
 *
 * Criterion runs each test in a fresh child process, and the variables
 * are read once, at the first configuration or pool start.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <stdlib.h>

#include "tern.h"

static const char *const every_variable[] = {
    "TERN_POOL_THREADS",     "TERN_POOL_QUEUE_CAPACITY", "TERN_POOL_LONG_THREADS_MAX",
    "TERN_POOL_LONG_IDLE_TIMEOUT_MS", "TERN_POOL_STALL_MS", "TERN_POOL_OVERFLOW_MAX",
    "TERN_POOL_OVERFLOW_IDLE_MS",
};
#define NVARS (sizeof every_variable / sizeof every_variable[0])

Test(pool_env_several, every_variable_bad_names_the_first_once, .init = cr_redirect_stderr)
{
    for (size_t i = 0; i < NVARS; i++)
        cr_assert_eq(setenv(every_variable[i], "many", 1), 0);
    cr_assert_eq(tern_pool_start(NULL), -EINVAL);
    cr_assert_eq(tern_pool_start(NULL), -EINVAL, "and every later start");
    tern_pool_stats st;
    tern_pool_stats_get(&st);
    cr_assert_eq(st.threads, 0u);
    fflush(stderr);
    cr_assert_stderr_eq_str("tern: TERN_POOL_THREADS=\"many\" is not a decimal number: the pool "
                            "does not start (docs/api.md, tern_pool_config)\n");
}

Test(pool_env_several, every_variable_but_the_first_bad_names_the_second,
     .init = cr_redirect_stderr)
{
    cr_assert_eq(setenv(every_variable[0], "2", 1), 0);
    for (size_t i = 1; i < NVARS; i++)
        cr_assert_eq(setenv(every_variable[i], "0", 1), 0);
    cr_assert_eq(tern_pool_start(NULL), -EINVAL);
    fflush(stderr);
    cr_assert_stderr_eq_str("tern: TERN_POOL_QUEUE_CAPACITY=\"0\" is out of range for "
                            "tern_pool_config.queue_capacity: the pool does not start "
                            "(docs/api.md, tern_pool_config)\n");
}
