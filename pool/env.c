/*
 * The pool's configuration: its built-in defaults, the bounds a start
 * checks, and the environment, as UV_THREADPOOL_SIZE is libuv's: the
 * variables below change the defaults tern_pool_config_init fills in (and
 * so what a NULL configuration means). A field a program sets after
 * tern_pool_config_init wins over its variable.
 * The watchdog's settings (tern_pool_watch) come from their own variables
 * the same way, and live here too: they are process-wide, and the one
 * copy in force is tern__pool_watch_now.
 *
 * The environment is read once, at the first configuration or pool start.
 * A variable that is set but not a decimal number in its field's range is
 * never replaced by a default: every pool start fails with -EINVAL, and
 * the first failure prints one line naming the variable and its value.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "env.h"
#include "os_thread.h"
#include "pool_p.h"
#include "worker.h"

#define NS_PER_MS UINT64_C(1000000)

/* X(variable, field of tern_pool_config, unit in the field per unit of the variable) */
#define TERN__POOL_ENV(X)                              \
    X(TERN_POOL_THREADS, threads, 1)                   \
    X(TERN_POOL_QUEUE_CAPACITY, queue_capacity, 1)     \
    X(TERN_POOL_LONG_THREADS_MAX, long_threads_max, 1) \
    X(TERN_POOL_LONG_IDLE_TIMEOUT_MS, long_idle_timeout_ns, NS_PER_MS)

/* The same for tern_pool_watch. */
#define TERN__POOL_WATCH_ENV(X)                \
    X(TERN_POOL_STALL_MS, stall_ns, NS_PER_MS) \
    X(TERN_POOL_OVERFLOW_MAX, overflow_max, 1) \
    X(TERN_POOL_OVERFLOW_IDLE_MS, overflow_idle_ns, NS_PER_MS)

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
    if (c->long_idle_timeout_ns == 0 || c->long_idle_timeout_ns > TERN__DURATION_MAX_NS)
        return -EINVAL;
    return 0;
}

static tern__once_t once = TERN__ONCE_INIT;
static tern_pool_config from_env; /* the defaults with every good variable applied */
static tern_pool_watch watch_env; /* the same for the watchdog */
static char bad[160];             /* "" or the first bad variable, described */
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

static void watch_defaults(tern_pool_watch *w)
{
    *w = (tern_pool_watch){
        .stall_ns = UINT64_C(1000000000),
        .overflow_max = 4,
        .overflow_idle_ns = UINT64_C(5000000000),
    };
}

static int watch_check(const tern_pool_watch *w)
{
    if (w->stall_ns != 0 && (w->stall_ns < NS_PER_MS || w->stall_ns > TERN__DURATION_MAX_NS))
        return -EINVAL;
    if (w->overflow_max > TERN__MAX_OVERFLOW)
        return -EINVAL;
    if (w->overflow_idle_ns == 0 || w->overflow_idle_ns > TERN__DURATION_MAX_NS)
        return -EINVAL;
    return 0;
}

static void watch_store(const tern_pool_watch *w)
{
    atomic_store_explicit(&tern__pool_watch_now.stall_ns, w->stall_ns, memory_order_relaxed);
    atomic_store_explicit(&tern__pool_watch_now.overflow_max, w->overflow_max,
                          memory_order_relaxed);
    atomic_store_explicit(&tern__pool_watch_now.overflow_idle_ns, w->overflow_idle_ns,
                          memory_order_relaxed);
}

static void read_env(void)
{
    tern__pool_config_defaults(&from_env);
    watch_defaults(&watch_env);
    const char *s;
    uint64_t v;
#define READ(var, field, unit, type, dest, defaults, check)                                     \
    if ((s = getenv(#var)) != NULL && bad[0] == '\0') {                                         \
        type one;                                                                               \
        defaults(&one);                                                                         \
        if (parse(s, unit, &v)) {                                                               \
            one.field = (__typeof__(one.field))v;                                               \
            if (one.field == v && check(&one) == 0)                                             \
                dest.field = one.field;                                                         \
            else                                                                                \
                snprintf(bad, sizeof bad, "%s=\"%.40s\" is out of range for " #type "." #field, \
                         #var, s);                                                              \
        } else {                                                                                \
            snprintf(bad, sizeof bad, "%s=\"%.40s\" is not a decimal number", #var, s);         \
        }                                                                                       \
    }
#define READ_CONFIG(var, field, unit)                                              \
    READ(var, field, unit, tern_pool_config, from_env, tern__pool_config_defaults, \
         tern__pool_config_check)
#define READ_WATCH(var, field, unit) \
    READ(var, field, unit, tern_pool_watch, watch_env, watch_defaults, watch_check)
    TERN__POOL_ENV(READ_CONFIG)
    TERN__POOL_WATCH_ENV(READ_WATCH)
#undef READ_WATCH
#undef READ_CONFIG
#undef READ
    watch_store(&watch_env);
}

void tern__pool_env_apply(tern_pool_config *cfg)
{
    tern__once(&once, read_env);
    *cfg = from_env;
}

int tern__pool_env_check(void)
{
    tern__once(&once, read_env);
    if (bad[0] == '\0')
        return 0;
    if (!atomic_exchange_explicit(&bad_reported, true, memory_order_relaxed))
        fprintf(stderr, "tern: %s: the pool does not start (docs/api.md, tern_pool_config)\n", bad);
    return -EINVAL;
}

void tern__pool_watch_load(void)
{
    tern__once(&once, read_env);
}

void tern_pool_watch_init(tern_pool_watch *w)
{
    TERN_REQUIRE(w != NULL);
    tern__once(&once, read_env);
    *w = watch_env;
}

int tern_pool_watch_set(const tern_pool_watch *w)
{
    TERN_REQUIRE(w != NULL);
    if (watch_check(w) < 0)
        return -EINVAL;
    tern__once(&once, read_env); /* so the environment never overwrites this later */
    watch_store(w);
    return 0;
}
