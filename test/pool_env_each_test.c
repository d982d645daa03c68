/*
 * Every TERN_POOL_* variable (docs/api.md, "Configuration from the
 * environment"), the pool's and the watchdog's alike: a good value is
 * what tern_pool_config_init or tern_pool_watch_init then reports; a
 * word, or a number out of the field's range, fails the pool's start
 * with -EINVAL and one line naming the variable, its value and why; with
 * two bad variables the line names the first. The environment is read
 * once per process, so each case runs in its own (criterion's child).
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <criterion/redirect.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tern.h"

#define MS UINT64_C(1000000)

enum field { THREADS, QUEUE, LONG_MAX, LONG_IDLE, STALL, OVERFLOW_MAX, OVERFLOW_IDLE };

/* By value: a child process gets the parameter's bytes. */
struct env_case {
    char var[40];
    char value[32];
    enum field field;
    uint64_t expect;  /* the field's value when good */
    char why[64];     /* "" when good, else what the line says after the value */
};

static struct env_case cases[] = {
    {"TERN_POOL_THREADS", "3", THREADS, 3, ""},
    {"TERN_POOL_QUEUE_CAPACITY", "33", QUEUE, 33, ""},
    {"TERN_POOL_LONG_THREADS_MAX", "7", LONG_MAX, 7, ""},
    {"TERN_POOL_LONG_IDLE_TIMEOUT_MS", "250", LONG_IDLE, 250 * MS, ""},
    {"TERN_POOL_STALL_MS", "20", STALL, 20 * MS, ""},
    {"TERN_POOL_STALL_MS", "0", STALL, 0, ""},
    {"TERN_POOL_OVERFLOW_MAX", "2", OVERFLOW_MAX, 2, ""},
    {"TERN_POOL_OVERFLOW_IDLE_MS", "900", OVERFLOW_IDLE, 900 * MS, ""},
    {"TERN_POOL_THREADS", "0", THREADS, 0, "is out of range for tern_pool_config.threads"},
    {"TERN_POOL_THREADS", "1025", THREADS, 0, "is out of range for tern_pool_config.threads"},
    /* 2^32 + 3: a number the field cannot hold is refused, never cut to 3. */
    {"TERN_POOL_THREADS", "4294967299", THREADS, 0, "is out of range for tern_pool_config.threads"},
    {"TERN_POOL_QUEUE_CAPACITY", "cup", QUEUE, 0, "is not a decimal number"},
    {"TERN_POOL_QUEUE_CAPACITY", "0", QUEUE, 0,
     "is out of range for tern_pool_config.queue_capacity"},
    /* 2^32: cut, it would be 0, which this field allows. */
    {"TERN_POOL_LONG_THREADS_MAX", "4294967296", LONG_MAX, 0,
     "is out of range for tern_pool_config.long_threads_max"},
    {"TERN_POOL_OVERFLOW_MAX", "4294967298", OVERFLOW_MAX, 0,
     "is out of range for tern_pool_watch.overflow_max"},
    {"TERN_POOL_LONG_THREADS_MAX", "lots", LONG_MAX, 0, "is not a decimal number"},
    {"TERN_POOL_LONG_THREADS_MAX", "65537", LONG_MAX, 0,
     "is out of range for tern_pool_config.long_threads_max"},
    {"TERN_POOL_LONG_IDLE_TIMEOUT_MS", "0", LONG_IDLE, 0,
     "is out of range for tern_pool_config.long_idle_timeout_ns"},
    /* More milliseconds than 2^64 nanoseconds hold. */
    {"TERN_POOL_LONG_IDLE_TIMEOUT_MS", "18446744073710", LONG_IDLE, 0, "is not a decimal number"},
    {"TERN_POOL_STALL_MS", "never", STALL, 0, "is not a decimal number"},
    {"TERN_POOL_STALL_MS", "4611686018428", STALL, 0,
     "is out of range for tern_pool_watch.stall_ns"},
    {"TERN_POOL_OVERFLOW_MAX", "many", OVERFLOW_MAX, 0, "is not a decimal number"},
    {"TERN_POOL_OVERFLOW_MAX", "65", OVERFLOW_MAX, 0,
     "is out of range for tern_pool_watch.overflow_max"},
    {"TERN_POOL_OVERFLOW_IDLE_MS", "later", OVERFLOW_IDLE, 0, "is not a decimal number"},
    {"TERN_POOL_OVERFLOW_IDLE_MS", "0", OVERFLOW_IDLE, 0,
     "is out of range for tern_pool_watch.overflow_idle_ns"},
};

static uint64_t read_field(enum field f)
{
    tern_pool_config cfg;
    tern_pool_watch w;
    tern_pool_config_init(&cfg);
    tern_pool_watch_init(&w);
    switch (f) {
    case THREADS: return cfg.threads;
    case QUEUE: return cfg.queue_capacity;
    case LONG_MAX: return cfg.long_threads_max;
    case LONG_IDLE: return cfg.long_idle_timeout_ns;
    case STALL: return w.stall_ns;
    case OVERFLOW_MAX: return w.overflow_max;
    case OVERFLOW_IDLE: return w.overflow_idle_ns;
    }
    return 0;
}

ParameterizedTestParameters(pool_env_each, variable)
{
    return cr_make_param_array(struct env_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(struct env_case *c, pool_env_each, variable, .init = cr_redirect_stderr)
{
    cr_assert_eq(setenv(c->var, c->value, 1), 0);
    if (c->why[0] == '\0') {
        uint64_t got = read_field(c->field);
        cr_assert_eq(got, c->expect, "%s=%s gave %llu, not %llu", c->var, c->value,
                     (unsigned long long)got, (unsigned long long)c->expect);
        cr_assert_eq(tern_pool_start(NULL), 0, "%s=%s: the pool does not start", c->var,
                     c->value);
        cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * UINT64_C(1000000000)), 0);
        return;
    }
    cr_assert_eq(tern_pool_start(NULL), -EINVAL, "%s=%s started the pool", c->var, c->value);
    char line[256];
    snprintf(line, sizeof line,
             "tern: %s=\"%s\" %s: the pool does not start (docs/api.md, tern_pool_config)\n",
             c->var, c->value, c->why);
    fflush(stderr);
    cr_assert_stderr_eq_str(line);
}

Test(pool_env_each, of_two_bad_variables_the_first_is_named, .init = cr_redirect_stderr)
{
    setenv("TERN_POOL_THREADS", "two", 1);
    setenv("TERN_POOL_OVERFLOW_MAX", "many", 1);
    cr_assert_eq(tern_pool_start(NULL), -EINVAL);
    cr_assert_eq(tern_pool_start(NULL), -EINVAL);
    fflush(stderr);
    cr_assert_stderr_eq_str("tern: TERN_POOL_THREADS=\"two\" is not a decimal number: the pool "
                            "does not start (docs/api.md, tern_pool_config)\n");
}
