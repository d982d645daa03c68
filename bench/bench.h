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
#include <time.h>
#include <unistd.h>
#ifdef _WIN32 /* a cross build run under wine: the resource readings ask Windows */
#include <winsock2.h> /* before windows.h, as libuv's uv.h needs */
#include <windows.h>
#include <psapi.h>
#else
#include <sys/resource.h>
#endif
#ifdef __linux__
#include <linux/perf_event.h>
#include <sys/syscall.h>
#endif

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

/*
 * Print which backend a tern loop got ("backend=<name>" on stdout), so
 * bench/run can tell a loop that asked for io_uring and silently got epoll
 * from one that runs on io_uring. libuv twins print nothing.
 */
static inline void bench_backend_report(const char *got)
{
    printf("backend=%s\n", got != NULL ? got : "?");
    fflush(stdout);
}

/* CLOCK_MONOTONIC in nanoseconds, the clock tern itself uses. */
static inline uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#ifdef _WIN32
/* FILETIME counts 100 ns ticks. */
static inline double bench_filetime_s(FILETIME t)
{
    return (double)(((uint64_t)t.dwHighDateTime << 32) | t.dwLowDateTime) / 1e7;
}

static inline double bench_cpu_s(void)
{
    FILETIME created, exited, kernel, user;
    if (!GetProcessTimes(GetCurrentProcess(), &created, &exited, &kernel, &user))
        return 0;
    return bench_filetime_s(kernel) + bench_filetime_s(user);
}

/* The working set stands for the resident set. */
static inline double bench_peak_rss_bytes(void)
{
    PROCESS_MEMORY_COUNTERS m;
    return GetProcessMemoryInfo(GetCurrentProcess(), &m, sizeof m) ? (double)m.PeakWorkingSetSize
                                                                    : 0;
}

static inline double bench_rss_bytes(void)
{
    PROCESS_MEMORY_COUNTERS m;
    return GetProcessMemoryInfo(GetCurrentProcess(), &m, sizeof m) ? (double)m.WorkingSetSize : 0;
}
#else
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
#endif

/* Set an environment variable for this process (libuv reads
 * UV_THREADPOOL_SIZE when its pool starts); Windows' C library spells it
 * _putenv_s. */
static inline void bench_setenv(const char *name, const char *value)
{
#ifdef _WIN32
    _putenv_s(name, value);
#else
    setenv(name, value, 1);
#endif
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

/*
 * System calls of the whole process (every thread), read before and after
 * a measured section; bench_calls_figures prints them per operation.
 *
 * rw: syscr + syscw of /proc/self/io, which the kernel always keeps. They
 * count read-like calls (read, readv, pread, sendfile's reads...) and
 * write-like ones (write, writev, pwrite...) only: recvmsg, sendmsg,
 * recvmmsg, sendmmsg, epoll_wait, io_uring_enter, openat, fstat and close
 * are not in them.
 *
 * all and enters: every system call, and io_uring_enter alone, counted by
 * perf counters on the tracepoints raw_syscalls:sys_enter and
 * syscalls:sys_enter_io_uring_enter. Only when TERN_BENCH_SYSCALLS=1 is
 * set (bench/run --syscalls), tracefs is mounted and perf_event_open
 * allows tracepoints: an enabled syscall tracepoint sends every system
 * call of the machine through the kernel's slower traced entry, so a run
 * that counts is slower, both twins alike, and its speed figures are not
 * the headline ones. bench_calls_init opens the counters with inherit
 * set: they count the threads created after it, so it is the first thing
 * main does.
 */
typedef struct bench_calls {
    uint64_t rw, all, enters;
} bench_calls;

static int bench_calls_fd[2] = {-1, -1};

#ifdef __linux__
/* The id of tracepoint event (e.g. "raw_syscalls/sys_enter") under the
 * first tracefs mount, or -1. */
static inline long bench_tracepoint_id(const char *event)
{
    FILE *m = fopen("/proc/mounts", "r");
    char dev[256], dir[512], type[64];
    long id = -1;
    if (m == NULL)
        return -1;
    while (id < 0 && fscanf(m, "%255s %511s %63s %*[^\n]", dev, dir, type) == 3) {
        char path[1024];
        const char *sub = strcmp(type, "tracefs") == 0 ? ""
                          : strcmp(type, "debugfs") == 0 ? "/tracing"
                                                         : NULL;
        if (sub == NULL)
            continue;
        snprintf(path, sizeof path, "%s%s/events/%s/id", dir, sub, event);
        FILE *f = fopen(path, "r");
        if (f != NULL) {
            if (fscanf(f, "%ld", &id) != 1)
                id = -1;
            fclose(f);
        }
    }
    fclose(m);
    return id;
}

static inline int bench_tracepoint_counter(const char *event)
{
    long id = bench_tracepoint_id(event);
    if (id < 0)
        return -1;
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_TRACEPOINT;
    a.config = (uint64_t)id;
    a.inherit = 1;
    return (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
}
#endif

static inline void bench_calls_init(void)
{
    const char *on = getenv("TERN_BENCH_SYSCALLS");
    if (on == NULL || strcmp(on, "1") != 0)
        return;
#ifdef __linux__
    bench_calls_fd[0] = bench_tracepoint_counter("raw_syscalls/sys_enter");
    bench_calls_fd[1] = bench_tracepoint_counter("syscalls/sys_enter_io_uring_enter");
#endif
    if (bench_calls_fd[0] < 0)
        fprintf(stderr, "TERN_BENCH_SYSCALLS: no syscall tracepoint counter (tracefs not "
                        "mounted, or perf_event_open refused): read-like and write-like "
                        "calls only\n");
}

static inline uint64_t bench_counter_read(int fd)
{
    uint64_t v = 0;
    if (fd < 0 || read(fd, &v, sizeof v) != (ssize_t)sizeof v)
        return 0;
    return v;
}

static inline bench_calls bench_calls_now(void)
{
    bench_calls c = {0, 0, 0};
    FILE *f = fopen("/proc/self/io", "r");
    if (f != NULL) {
        char key[64];
        unsigned long long v;
        while (fscanf(f, "%63[^:]: %llu\n", key, &v) == 2)
            if (strcmp(key, "syscr") == 0 || strcmp(key, "syscw") == 0)
                c.rw += v;
        fclose(f);
    }
    c.all = bench_counter_read(bench_calls_fd[0]);
    c.enters = bench_counter_read(bench_calls_fd[1]);
    return c;
}

/*
 * Print <name>_rw_calls (read-like and write-like calls per operation),
 * and when counted <name>_syscalls (every system call per operation) and
 * <name>_uring_enters (io_uring_enter calls per operation). per names the
 * operation: the unit is "calls/<per>".
 */
static inline void bench_calls_figures(const char *name, bench_calls a, bench_calls b,
                                       double ops, const char *per)
{
    char fig[128], unit[64];
    snprintf(unit, sizeof unit, "calls/%s", per);
    snprintf(fig, sizeof fig, "%s_rw_calls", name);
    bench_figure(fig, (double)(b.rw - a.rw) / ops, unit);
    if (bench_calls_fd[0] >= 0) {
        snprintf(fig, sizeof fig, "%s_syscalls", name);
        bench_figure(fig, (double)(b.all - a.all) / ops, unit);
    }
    if (bench_calls_fd[1] >= 0) {
        snprintf(fig, sizeof fig, "%s_uring_enters", name);
        bench_figure(fig, (double)(b.enters - a.enters) / ops, unit);
    }
}

/* tern only: <name>_enters_per_turn, io_uring_enter calls per loop turn
 * over the section (turns from tern_loop_stats), when they are counted. */
static inline void bench_enters_per_turn(const char *name, bench_calls a, bench_calls b,
                                         uint64_t turns)
{
    char fig[128];
    if (bench_calls_fd[1] < 0 || turns == 0)
        return;
    snprintf(fig, sizeof fig, "%s_enters_per_turn", name);
    bench_figure(fig, (double)(b.enters - a.enters) / (double)turns, "calls/turn");
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
