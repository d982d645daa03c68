/*
 * The pool's configuration: its built-in defaults, the bounds a start
 * checks, and the environment, as UV_THREADPOOL_SIZE is libuv's: the
 * variables below change the defaults tern_pool_config_init fills in (and
 * so what a NULL configuration means). A field a program sets after
 * tern_pool_config_init wins over its variable.
 *
 * The environment is read once, at the first configuration or pool start.
 * A variable that is set but not a decimal number in its field's range is
 * never replaced by a default: every pool start fails with -EINVAL, and
 * the first failure prints one line naming the variable and its value.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "pool_p.h"

#define NS_PER_MS UINT64_C(1000000)

/* X(variable, field of tern_pool_config, unit in the field per unit of the variable) */
#define TERN__POOL_ENV(X)                                \
    X(TERN_POOL_THREADS, threads, 1)                     \
    X(TERN_POOL_QUEUE_CAPACITY, queue_capacity, 1)       \
    X(TERN_POOL_LONG_THREADS_MAX, long_threads_max, 1)   \
    X(TERN_POOL_LONG_IDLE_TIMEOUT_MS, long_idle_timeout_ns, NS_PER_MS)

void tern_pool_config_init(tern_pool_config *cfg)
{
    TERN_REQUIRE(cfg != NULL);
    tern__pool_env_apply(cfg);
}

void tern__pool_config_defaults(tern_pool_config *cfg)
{
    *cfg = (tern_pool_config){
        .threads = 4,
        .queue_capacity = 1024,
        .long_threads_max = 512,
        .long_idle_timeout_ns = UINT64_C(10000000000),
    };
}

int tern__pool_config_check(const tern_pool_config *c)
{
    if (c->threads < 1 || c->threads > TERN__MAX_THREADS)
        return -EINVAL;
    if (c->queue_capacity < 1 || c->queue_capacity > TERN__COUNT_MAX)
        return -EINVAL;
    if (c->long_threads_max > 65536)
        return -EINVAL;
    if (c->long_idle_timeout_ns == 0 || c->long_idle_timeout_ns > (UINT64_C(1) << 62))
        return -EINVAL;
    return 0;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static tern_pool_config from_env;   /* the defaults with every good variable applied */
static char bad[160];               /* "" or the first bad variable, described */
static _Atomic bool bad_reported;

/* A decimal number with nothing around it, times unit, without overflow. */
static bool parse(const char *s, uint64_t unit, uint64_t *out)
{
    if (*s < '0' || *s > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > UINT64_MAX / unit)
        return false;
    *out = (uint64_t)v * unit;
    return true;
}

static void read_env(void)
{
    tern__pool_config_defaults(&from_env);
    const char *s;
    uint64_t v;
#define READ(var, field, unit)                                                               \
    if ((s = getenv(#var)) != NULL && bad[0] == '\0') {                                      \
        tern_pool_config one;                                                                \
        tern__pool_config_defaults(&one);                                                    \
        if (parse(s, unit, &v)) {                                                            \
            one.field = (__typeof__(one.field))v;                                            \
            if (one.field == v && tern__pool_config_check(&one) == 0)                        \
                from_env.field = one.field;                                                  \
            else                                                                             \
                snprintf(bad, sizeof bad, "%s=\"%.40s\" is out of range for tern_pool_config." \
                         #field, #var, s);                                                   \
        } else {                                                                             \
            snprintf(bad, sizeof bad, "%s=\"%.40s\" is not a decimal number", #var, s);      \
        }                                                                                    \
    }
    TERN__POOL_ENV(READ)
#undef READ
}

void tern__pool_env_apply(tern_pool_config *cfg)
{
    pthread_once(&once, read_env);
    *cfg = from_env;
}

int tern__pool_env_check(void)
{
    pthread_once(&once, read_env);
    if (bad[0] == '\0')
        return 0;
    if (!atomic_exchange_explicit(&bad_reported, true, memory_order_relaxed))
        fprintf(stderr, "tern: %s: the pool does not start (docs/api.md, tern_pool_config)\n", bad);
    return -EINVAL;
}
