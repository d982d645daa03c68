/*
 * Shared helpers for tern's benchmarks and their libuv twins.
 *
 * Both sides of every pair include this header and nothing else of the
 * other's, so the clock, the parameter parsing, the resource readings and
 * the output format are identical by construction and cannot tilt a ratio.
 *
 * Output: one line per figure, "figure=<name> value=<number> unit=<unit>",
 * which bench/run parses. Anything else a benchmark prints goes to stderr.
 */
#ifndef TERN_BENCH_H
#define TERN_BENCH_H

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/*
 * The backend a tern benchmark's loops ask for: TERN_BENCH_BACKEND
 * ("epoll", "poll", "io_uring"...), or NULL (the default) when unset, so
 * backends can be compared on one program. libuv twins ignore it.
 */
static inline const char *bench_backend(void)
{
    const char *b = getenv("TERN_BENCH_BACKEND");
    return b != NULL && b[0] != '\0' ? b : NULL;
}

/* CLOCK_MONOTONIC in nanoseconds, the clock tern itself uses. */
static inline uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* User plus system CPU seconds of the whole process (every thread), so a
 * runtime that spins on an idle core pays for it here. */
static inline double bench_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* Peak resident set of the process in bytes (ru_maxrss is in KiB on Linux). */
static inline double bench_peak_rss_bytes(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss * 1024.0;
}

/* Current resident set in bytes, from /proc/self/statm; 0 if unreadable. */
static inline double bench_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    if (f == NULL)
        return 0;
    if (fscanf(f, "%lu %lu", &size, &resident) != 2)
        resident = 0;
    fclose(f);
    return (double)resident * (double)sysconf(_SC_PAGESIZE);
}

/*
 * A parameter given on the command line as key=value (e.g. "jobs=1000000").
 * Unknown keys are ignored so the driver can pass one argument list to both
 * twins; a malformed number aborts, because a silently defaulted parameter
 * would make a ratio compare two different experiments.
 */
static inline unsigned long bench_arg(int argc, char **argv, const char *key,
                                      unsigned long def)
{
    size_t klen = strlen(key);
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], key, klen) == 0 && argv[i][klen] == '=') {
            char *end = NULL;
            unsigned long v = strtoul(argv[i] + klen + 1, &end, 10);
            if (end == argv[i] + klen + 1 || *end != '\0') {
                fprintf(stderr, "bad value for %s: %s\n", key, argv[i]);
                exit(2);
            }
            return v;
        }
    }
    return def;
}

/* A string parameter (key=value); def when absent. */
static inline const char *bench_arg_str(int argc, char **argv, const char *key,
                                        const char *def)
{
    size_t klen = strlen(key);
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], key, klen) == 0 && argv[i][klen] == '=')
            return argv[i] + klen + 1;
    return def;
}

/* Print one figure in the format bench/run reads. */
static inline void bench_figure(const char *name, double value, const char *unit)
{
    printf("figure=%s value=%.6g unit=%s\n", name, value, unit);
    fflush(stdout);
}

/* Abort the benchmark with a message: a failed call means the figure
 * would not measure what it claims to. */
#define BENCH_CHECK(cond, ...)                                                   \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                 \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

/* One spin iteration's pause, so a spinning waiter lends the core's
 * pipeline to its sibling instead of hammering the cache line. */
static inline void bench_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/*
 * Wait until *word reaches at least target. It spins briefly, then yields
 * the core: with more threads than the machine's two cores, a pure spin
 * would steal the core the loop needs to make progress. Both twins wait
 * this way, so the waiting policy never differs between them.
 */
static inline void bench_wait_at_least(const _Atomic uint64_t *word, uint64_t target)
{
    unsigned spins = 0;
    while (atomic_load_explicit(word, memory_order_acquire) < target) {
        if (++spins < 2000)
            bench_relax();
        else
            sched_yield();
    }
}

static int bench_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sort samples in place, ascending, for bench_quantile(). */
static inline void bench_sort(uint64_t *v, size_t n)
{
    qsort(v, n, sizeof v[0], bench_cmp_u64);
}

/* The q-quantile (0..1) of n samples already sorted by bench_sort(). */
static inline uint64_t bench_quantile(const uint64_t *v, size_t n, double q)
{
    if (n == 0)
        return 0;
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

#endif
