/*
 * stress.h: what every stress program shares (docs/testing.md, "The stress
 * suite"). Header-only: each stress program is one translation unit and
 * includes this once.
 *
 *   stress_init(name, default_seed)  first thing in main (on the main
 *       thread): line-buffered stdout, prints "seed=0x..." (TERN_SEED
 *       replays a run), starts the TERN_CONTEND busy processes and the
 *       watchdog thread.
 *   stress_pool_stats()  the pool's statistics now, by value.
 *   stress_seed(stream)  a seed per thread or purpose, derived from the
 *       run's seed; stress_rng(&state) draws from it (splitmix64).
 *   STRESS_CHECK(cond, fmt, ...)  an "ok:"/"FAIL:" line, counted; any
 *       thread. stress_summary() prints "N passed, N failed" and returns
 *       the exit status.
 *   stress_phase(what, deadline_ns)  arms the watchdog: if the phase has
 *       not ended (the next stress_phase, or stress_phase_end) by then, the
 *       program prints "FAIL: <what>" and the state that explains it (each
 *       watched loop's stats, the pool's stats, the program's own counters
 *       through its report hook) and leaves with _exit(1). Every wait in a
 *       stress program happens inside a phase, so none can hang until
 *       meson's timeout.
 *   stress_watch_loop / stress_unwatch_loop / stress_loop_free  which
 *       loops the watchdog reports on.
 *   stress_on_report(fn)  the program's own counters, printed on failure.
 *
 * Environment:
 *   TERN_SEED=<hex or decimal>, or "random" (time-derived, printed).
 *   TERN_CONTEND=N  N busy processes (sh -c 'while :; do :; done') for the
 *       program's whole run; "cores" or -1 = one per online core; 0 or
 *       unset = quiet. They die with the program on every path: SIGKILL at
 *       exit (atexit) and on the watchdog's path, and PR_SET_PDEATHSIG in
 *       case the program is killed.
 *   TERN_WATCHDOG_SCALE=K  multiplies every phase deadline (slow builds:
 *       valgrind, TSan under contention).
 *   TERN_CHECK_BOOKS  stress_init sets it to 1 unless it is set already, so
 *       every loop a stress program creates audits its books at each turn's
 *       end and aborts naming the counter that disagrees (a wrapped or
 *       leaked credit is an abort with a message, not a hang).
 */
#ifndef TERN_STRESS_H
#define TERN_STRESS_H

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifndef _WIN32
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#else
#include <windows.h>

#include "errno_os.h" /* ESHUTDOWN, which mingw-w64's errno.h lacks */
#endif

#include "tern.h"

/* Whether ThreadSanitizer instruments this build (gcc says it one way,
 * clang the other): it runs everything 5-15 times slower, and cannot start
 * threads in the child of a multi-threaded fork. */
#if defined(__SANITIZE_THREAD__)
#define STRESS_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STRESS_UNDER_TSAN 1
#endif
#endif

/* Whether AddressSanitizer instruments this build. */
#if defined(__SANITIZE_ADDRESS__)
#define STRESS_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STRESS_UNDER_ASAN 1
#endif
#endif

#define STRESS_MS UINT64_C(1000000)
#define STRESS_SEC (UINT64_C(1000) * STRESS_MS)
#define STRESS_MAX_CONTENDERS 64
#define STRESS_MAX_LOOPS 16

static inline uint64_t stress_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * STRESS_SEC + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------ */
/* Seeds and the generator                                             */
/* ------------------------------------------------------------------ */

/* splitmix64: one add and a mix per draw, and any state (0 included) is a
 * good one, so seeds derived by adding a stream number need no care. */
static inline uint64_t stress_rng(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* A draw in [0, n). The modulo bias is irrelevant at these sizes. */
static inline uint64_t stress_below(uint64_t *state, uint64_t n)
{
    return n == 0 ? 0 : stress_rng(state) % n;
}

/* The pool's statistics now, by value (tern_pool_stats_get). */
static inline tern_pool_stats stress_pool_stats(void)
{
    tern_pool_stats p;
    tern_pool_stats_get(&p);
    return p;
}

static uint64_t stress_run_seed;

/* The seed for one thread or purpose: distinct streams of one run seed. */
static inline uint64_t stress_seed(uint64_t stream)
{
    uint64_t s = stress_run_seed ^ (stream * UINT64_C(0xd1342543de82ef95));
    return stress_rng(&s);
}

/* ------------------------------------------------------------------ */
/* Checks                                                              */
/* ------------------------------------------------------------------ */

/* Atomic: loop threads, workers and the watchdog all count. */
static atomic_uint stress_passed, stress_failed;
static const char *stress_name = "stress";

static void stress_vcheck(bool ok, const char *file, int line, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (ok) {
        atomic_fetch_add(&stress_passed, 1);
        printf("ok: %s\n", msg);
    } else {
        atomic_fetch_add(&stress_failed, 1);
        printf("FAIL: %s (%s:%d)\n", msg, file, line);
    }
}

/* The formats are C99's: on Windows the programs are built with
 * __USE_MINGW_ANSI_STDIO (test/win/meson.build), whose printf family is
 * gnu_printf, where printf's archetype would be Microsoft's. */
#ifdef _WIN32
#define STRESS_FORMAT gnu_printf
#else
#define STRESS_FORMAT printf
#endif
static void stress_check_at(bool ok, const char *file, int line, const char *fmt, ...)
    __attribute__((format(STRESS_FORMAT, 4, 5), unused));
static void stress_check_at(bool ok, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    stress_vcheck(ok, file, line, fmt, ap);
    va_end(ap);
}

#define STRESS_CHECK(cond, ...) stress_check_at((cond), __FILE__, __LINE__, __VA_ARGS__)

/* The closing line meson's log and .ci/count.py read; the exit status. */
static inline int stress_summary(void)
{
    unsigned p = atomic_load(&stress_passed), f = atomic_load(&stress_failed);
    printf("%s: seed=0x%016" PRIx64 "\n%u passed, %u failed\n", stress_name, stress_run_seed, p, f);
    fflush(stdout);
    return f == 0 ? 0 : 1;
}

/* ------------------------------------------------------------------ */
/* Contention: busy processes for the program's whole run              */
/* ------------------------------------------------------------------ */

#ifndef _WIN32 /* the busy processes are forked */

static pid_t stress_contenders[STRESS_MAX_CONTENDERS];
static int stress_ncontenders;
static pid_t stress_owner_pid; /* a forked child inherits the atexit hook; it must not act */

static void stress_stop_contenders(void)
{
    if (getpid() != stress_owner_pid)
        return;
    for (int i = 0; i < stress_ncontenders; i++)
        if (stress_contenders[i] > 0)
            kill(stress_contenders[i], SIGKILL);
    for (int i = 0; i < stress_ncontenders; i++)
        if (stress_contenders[i] > 0)
            while (waitpid(stress_contenders[i], NULL, 0) < 0 && errno == EINTR) {
            }
    stress_ncontenders = 0;
}

static int stress_contend_count(void)
{
    const char *s = getenv("TERN_CONTEND");
    if (s == NULL || *s == '\0')
        return 0;
    long n = strcmp(s, "cores") == 0 ? -1 : strtol(s, NULL, 0);
    if (n < 0)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 0)
        n = 1;
    return n > STRESS_MAX_CONTENDERS ? STRESS_MAX_CONTENDERS : (int)n;
}

/*
 * Must run on the thread that lives as long as the program (main's):
 * PR_SET_PDEATHSIG fires when the *thread* that forked the child exits.
 */
static void stress_start_contenders(int n)
{
    stress_owner_pid = getpid();
    atexit(stress_stop_contenders);
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            /* The parent may have died before prctl took effect. */
            if (getppid() != stress_owner_pid)
                _exit(0);
            /* Not on meson's pipes: a reader waiting for EOF must not wait on us. */
            int dn = open("/dev/null", O_RDWR);
            if (dn >= 0) {
                dup2(dn, 0), dup2(dn, 1), dup2(dn, 2);
                if (dn > 2)
                    close(dn);
            }
            execl("/bin/sh", "sh", "-c", "while :; do :; done", (char *)NULL);
            _exit(127);
        }
        if (pid < 0) {
            printf("%s: could not start busy process %d: %s\n", stress_name, i, strerror(errno));
            break;
        }
        stress_contenders[stress_ncontenders++] = pid;
    }
}

#else /* _WIN32 */

/* No fork on Windows: TERN_CONTEND is not offered there (stress_init says
 * so), and there is nothing to stop. */
static void stress_stop_contenders(void)
{
}

static int stress_contend_count(void)
{
    const char *s = getenv("TERN_CONTEND");
    return s != NULL && *s != '\0' && strcmp(s, "0") != 0 ? -1 : 0;
}

#endif /* _WIN32 */

/* ------------------------------------------------------------------ */
/* The watchdog                                                        */
/* ------------------------------------------------------------------ */

static struct {
    pthread_mutex_t lock; /* phase, loops; held by the watchdog while it reports */
    pthread_cond_t changed;
    const char *what;      /* the phase; NULL: disarmed */
    uint64_t deadline;     /* absolute, CLOCK_MONOTONIC */
    uint64_t generation;   /* bumped by every phase change */
    unsigned scale;
    tern_loop *loops[STRESS_MAX_LOOPS];
    const char *loop_names[STRESS_MAX_LOOPS];
    void (*report)(void);
    pthread_t thread;
} stress_dog = {.lock = PTHREAD_MUTEX_INITIALIZER, .scale = 1};

/* Sets the program's state printer, called (on the watchdog thread) after
 * the library's state when a phase overruns. Read the program's counters
 * with atomic loads: its own threads are still running. */
static inline void stress_on_report(void (*fn)(void))
{
    pthread_mutex_lock(&stress_dog.lock);
    stress_dog.report = fn;
    pthread_mutex_unlock(&stress_dog.lock);
}

static inline void stress_watch_loop(tern_loop *loop, const char *name)
{
    pthread_mutex_lock(&stress_dog.lock);
    for (int i = 0; i < STRESS_MAX_LOOPS; i++)
        if (stress_dog.loops[i] == NULL) {
            stress_dog.loops[i] = loop;
            stress_dog.loop_names[i] = name;
            break;
        }
    pthread_mutex_unlock(&stress_dog.lock);
}

static inline void stress_unwatch_loop(tern_loop *loop)
{
    pthread_mutex_lock(&stress_dog.lock);
    for (int i = 0; i < STRESS_MAX_LOOPS; i++)
        if (stress_dog.loops[i] == loop)
            stress_dog.loops[i] = NULL;
    pthread_mutex_unlock(&stress_dog.lock);
}

/*
 * tern_loop_free, still reported on while it runs (a free that never
 * returns is the hang this suite hunts). Hazard: if the deadline passes in
 * the instant between the free returning and the unwatch, the report reads
 * a freed loop; that only happens on a run that is failing anyway.
 */
static inline void stress_loop_free(tern_loop *loop)
{
    tern_loop_free(loop);
    stress_unwatch_loop(loop);
}

static void stress_report_state(void)
{
    for (int i = 0; i < STRESS_MAX_LOOPS; i++) {
        if (stress_dog.loops[i] == NULL)
            continue;
        tern_loop_stats s;
        tern_loop_stats_get(stress_dog.loops[i], &s);
        printf("  loop %s: undelivered %u (peak %u), live_operations %u, turns %" PRIu64
               ", posts %" PRIu64 ", events %" PRIu64 ", wake syscalls %" PRIu64 "\n",
               stress_dog.loop_names[i] ? stress_dog.loop_names[i] : "?", s.undelivered,
               s.undelivered_peak, s.live_operations, s.turns, s.posts, s.events,
               s.wake_syscalls);
    }
    tern_pool_stats p;
    tern_pool_stats_get(&p);
    printf("  pool: threads %u, busy %u, queued %u, long_threads %u, long_busy %u, submitted %"
           PRIu64 ", completed %" PRIu64 ", cancelled %" PRIu64 ", refused q%" PRIu64 " l%" PRIu64
           " u%" PRIu64 " o%" PRIu64 "\n",
           p.threads, p.busy, p.queued, p.long_threads, p.long_busy, p.submitted, p.completed,
           p.cancelled, p.refused_queue_full, p.refused_long_ceiling, p.refused_undelivered,
           p.refused_operations);
    if (stress_dog.report != NULL)
        stress_dog.report();
}

/* Report and leave; the caller holds stress_dog.lock. */
static void stress_fail_locked(const char *what) __attribute__((__noreturn__));
static void stress_fail_locked(const char *what)
{
    printf("FAIL: %s\n", what);
    stress_report_state();
    printf("%s: seed=0x%016" PRIx64 " (TERN_SEED replays the decisions)\n%u passed, %u failed\n",
           stress_name, stress_run_seed, atomic_load(&stress_passed),
           atomic_load(&stress_failed) + 1);
    fflush(stdout);
    stress_stop_contenders();
    _exit(1);
}

/*
 * The watchdog's wait deadline for a CLOCK_MONOTONIC instant. Its
 * condition variable measures CLOCK_MONOTONIC (pthread_condattr_setclock
 * in stress_init) except on Windows, where winpthreads' waits measure the
 * wall clock: there the time left is added to the wall clock's now.
 */
static struct timespec stress_cond_deadline(uint64_t deadline)
{
    uint64_t t = deadline;
#ifdef _WIN32
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    uint64_t now = stress_now(), left = deadline > now ? deadline - now : 0;
    t = (uint64_t)wall.tv_sec * STRESS_SEC + (uint64_t)wall.tv_nsec + left;
#endif
    return (struct timespec){.tv_sec = (time_t)(t / STRESS_SEC), .tv_nsec = (long)(t % STRESS_SEC)};
}

static void *stress_watchdog_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&stress_dog.lock);
    for (;;) {
        if (stress_dog.what == NULL) {
            pthread_cond_wait(&stress_dog.changed, &stress_dog.lock);
            continue;
        }
        struct timespec ts = stress_cond_deadline(stress_dog.deadline);
        uint64_t gen = stress_dog.generation;
        int rc = pthread_cond_timedwait(&stress_dog.changed, &stress_dog.lock, &ts);
        if (rc == ETIMEDOUT && gen == stress_dog.generation && stress_dog.what != NULL &&
            stress_now() >= stress_dog.deadline) {
            char what[256];
            snprintf(what, sizeof what, "%s (watchdog: the phase did not end in time)",
                     stress_dog.what);
            /* The lock stays held: the loops cannot be unwatched under us. */
            stress_fail_locked(what);
        }
    }
    return NULL;
}

/*
 * Starts a phase: the watchdog fails the program unless the next phase
 * (or stress_phase_end) comes within deadline_ns (times TERN_WATCHDOG_SCALE).
 * Deadlines are liveness bounds, never speed checks: set them many times
 * what a loaded machine needs.
 */
/* Report and leave, from any thread; never returns. For a program that
 * finds a state it cannot continue from (a hang it detected itself). */
static void stress_fail_now(const char *what) __attribute__((__noreturn__, unused));
static void stress_fail_now(const char *what)
{
    pthread_mutex_lock(&stress_dog.lock);
    stress_fail_locked(what);
}

static inline void stress_phase(const char *what, uint64_t deadline_ns)
{
    pthread_mutex_lock(&stress_dog.lock);
    stress_dog.what = what;
    stress_dog.deadline = stress_now() + deadline_ns * stress_dog.scale;
    stress_dog.generation++;
    pthread_cond_signal(&stress_dog.changed);
    pthread_mutex_unlock(&stress_dog.lock);
}

static inline void stress_phase_end(void)
{
    pthread_mutex_lock(&stress_dog.lock);
    stress_dog.what = NULL;
    stress_dog.generation++;
    pthread_cond_signal(&stress_dog.changed);
    pthread_mutex_unlock(&stress_dog.lock);
}

/* ------------------------------------------------------------------ */
/* Start                                                               */
/* ------------------------------------------------------------------ */

static uint64_t stress_parse_seed(uint64_t default_seed, bool *from_env)
{
    const char *s = getenv("TERN_SEED");
    *from_env = s != NULL && *s != '\0';
    if (!*from_env)
        return default_seed;
    if (strcmp(s, "random") == 0) {
        uint64_t t = stress_now() ^ ((uint64_t)getpid() << 32);
        return stress_rng(&t);
    }
    /* Base 0 takes 0x... as hex and plain digits as decimal; a bare hex
     * string with letters is read as hex too, as printed seeds are hex. */
    char *end;
    uint64_t v = strtoull(s, &end, 0);
    if (*end != '\0')
        v = strtoull(s, &end, 16);
    if (*end != '\0') {
        printf("%s: TERN_SEED=%s is not a number\n", stress_name, s);
        exit(2);
    }
    return v;
}

/*
 * Call first in main, on the main thread, before any other thread starts
 * (the busy processes are forked here, and their death signal is tied to
 * this thread).
 */
static inline void stress_init(const char *name, uint64_t default_seed)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    stress_name = name;
    /* Before any loop exists: loops read it when they are created. */
#ifndef _WIN32
    setenv("TERN_CHECK_BOOKS", "1", 0);
#else
    if (getenv("TERN_CHECK_BOOKS") == NULL)
        _putenv_s("TERN_CHECK_BOOKS", "1");
#endif
    bool from_env;
    stress_run_seed = stress_parse_seed(default_seed, &from_env);
    printf("seed=0x%016" PRIx64 "%s\n", stress_run_seed,
           from_env ? " (TERN_SEED)" : " (default; TERN_SEED=... replays another)");
    const char *sc = getenv("TERN_WATCHDOG_SCALE");
    if (sc != NULL && atoi(sc) > 0)
        stress_dog.scale = (unsigned)atoi(sc);
    int n = stress_contend_count();
#ifndef _WIN32
    stress_owner_pid = getpid();
    if (n > 0) {
        stress_start_contenders(n);
        printf("%s: contended by %d busy processes (TERN_CONTEND)\n", name, stress_ncontenders);
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&stress_dog.changed, &ca);
    pthread_condattr_destroy(&ca);
    /* The watchdog blocks every signal, like tern's own threads, so a
     * program's signal watchers see their signals on their loop threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&stress_dog.thread, NULL, stress_watchdog_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
#else
    if (n != 0)
        printf("%s: TERN_CONTEND ignored: no busy processes on Windows (no fork)\n", name);
    pthread_cond_init(&stress_dog.changed, NULL);
    int rc = pthread_create(&stress_dog.thread, NULL, stress_watchdog_main, NULL);
#endif
    if (rc != 0) {
        printf("%s: cannot start the watchdog: %s\n0 passed, 1 failed\n", name, strerror(rc));
        exit(1);
    }
    pthread_detach(stress_dog.thread);
}

#endif /* TERN_STRESS_H */
