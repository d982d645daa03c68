/*
 * Clocks. The loop's clock is CLOCK_MONOTONIC in nanoseconds. The pool's
 * latency figures use a cheaper tick counter: a job stamps the time three
 * times, and three clock_gettime calls are a large part of an empty job.
 * On x86 with an invariant TSC (CPUID says so: a constant rate through
 * frequency changes and sleep states) the tick is the TSC;
 * elsewhere, and in portable builds, it is the monotonic clock.
 * Ticks become nanoseconds only when statistics are read, with a rate
 * measured over the whole time since the first tick was taken.
 */
#include <stdatomic.h>
#include <time.h>

#include "check.h"
#include "clock.h"
#include "platform.h"

#ifdef TERN_HAVE_TSC
#include <x86intrin.h>
#endif

uint64_t tern__clock_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#ifdef TERN_HAVE_TSC
static _Atomic uint64_t base_ticks, base_ns;
static _Atomic int use_tsc = -1; /* -1: not asked yet */

static bool tsc(void)
{
    int u = atomic_load_explicit(&use_tsc, memory_order_relaxed);
    if (TERN_UNLIKELY(u < 0)) {
        u = tern__tsc_invariant();
        atomic_store_explicit(&use_tsc, u, memory_order_relaxed);
    }
    return u;
}

static void set_base(void)
{
    uint64_t expected = 0;
    uint64_t ns = tern__clock_now();
    uint64_t t = __rdtsc();
    if (atomic_compare_exchange_strong(&base_ticks, &expected, t))
        atomic_store(&base_ns, ns);
}

uint64_t tern__ticks(void)
{
    if (!tsc())
        return tern__clock_now();
    if (TERN_UNLIKELY(atomic_load_explicit(&base_ticks, memory_order_relaxed) == 0))
        set_base();
    return __rdtsc();
}

double tern__ticks_per_ns(void)
{
    if (!tsc())
        return 1.0;
    uint64_t t0 = atomic_load(&base_ticks), n0 = atomic_load(&base_ns);
    if (t0 == 0 || n0 == 0)
        return 1.0;
    uint64_t t = __rdtsc(), n = tern__clock_now();
    if (n <= n0 + 1000 || t <= t0)
        return 1.0; /* too early to tell; figures this young are noise anyway */
    return (double)(t - t0) / (double)(n - n0);
}
#else
uint64_t tern__ticks(void)
{
    return tern__clock_now();
}

double tern__ticks_per_ns(void)
{
    return 1.0;
}
#endif
