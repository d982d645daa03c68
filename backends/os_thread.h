/*
 * The thread seam: tern's own names for the threads, locks, condition
 * variables, once-flags and thread-local keys the runtime and the pool
 * use, so that no file above backends/ calls pthread_* directly (the few
 * that stay POSIX-only by nature are listed in docs/design.md, "The OS
 * seam"). On POSIX every call is an inline wrapper over pthreads, so a
 * lock, a wait or a wake costs what it did before the seam: no extra
 * call, no extra branch. On Windows (_WIN32) the types are opaque words
 * the size of an SRWLOCK, CONDITION_VARIABLE and INIT_ONCE, and the calls
 * live in backends/thread_win.c, which is compiled only there; no
 * <windows.h> reaches the files that include this one.
 *
 * Rules common to both: a mutex is not recursive; unlocking one the
 * caller does not hold, or destroying one that is held or waited on, is
 * undefined (as in POSIX). A timed wait measures the monotonic clock
 * where the system has one for condition variables (tern__cond_init), so
 * a step of the wall clock neither stretches nor cuts it.
 */
#ifndef TERN_OS_THREAD_H
#define TERN_OS_THREAD_H

#include <stdbool.h>
#include <stdint.h>

#ifndef _WIN32 /* POSIX */

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <time.h>

typedef pthread_mutex_t tern__mutex_t;
typedef pthread_cond_t tern__cond_t;
typedef pthread_once_t tern__once_t;
typedef pthread_t tern__thread_t;
typedef pthread_key_t tern__tls_key_t;
/* An absolute time in the clock tern__cond_init chose. */
typedef struct timespec tern__deadline_t;

#define TERN__MUTEX_INIT PTHREAD_MUTEX_INITIALIZER
/* For untimed waits only: a timed wait needs tern__cond_init's clock. */
#define TERN__COND_INIT PTHREAD_COND_INITIALIZER
#define TERN__ONCE_INIT PTHREAD_ONCE_INIT

/* tern__mutex_init: a default (non-recursive) mutex; cannot fail on the
 * systems tern runs on (glibc, the BSDs and macOS allocate nothing). */
static inline void tern__mutex_init(tern__mutex_t *m)
{
    pthread_mutex_init(m, NULL);
}
static inline void tern__mutex_destroy(tern__mutex_t *m)
{
    pthread_mutex_destroy(m);
}
static inline void tern__mutex_lock(tern__mutex_t *m)
{
    pthread_mutex_lock(m);
}
static inline void tern__mutex_unlock(tern__mutex_t *m)
{
    pthread_mutex_unlock(m);
}

static inline void tern__cond_destroy(tern__cond_t *c)
{
    pthread_cond_destroy(c);
}
static inline void tern__cond_wait(tern__cond_t *c, tern__mutex_t *m)
{
    pthread_cond_wait(c, m);
}
/* tern__cond_timedwait: wait until signalled or until the deadline;
 * true when the deadline passed (a wake may still be owed: recheck). */
static inline bool tern__cond_timedwait(tern__cond_t *c, tern__mutex_t *m,
                                        const tern__deadline_t *until)
{
    return pthread_cond_timedwait(c, m, until) != 0;
}
static inline void tern__cond_signal(tern__cond_t *c)
{
    pthread_cond_signal(c);
}
static inline void tern__cond_broadcast(tern__cond_t *c)
{
    pthread_cond_broadcast(c);
}

/* tern__once: run fn exactly once for o, however many threads race here;
 * every caller returns after it ran. */
static inline void tern__once(tern__once_t *o, void (*fn)(void))
{
    pthread_once(o, fn);
}

/*
 * tern__thread_start: start fn(arg) on a new thread with every signal
 * blocked (it inherits the creator's mask, so the mask is filled around
 * the create and put back), so signals meant for a loop's signalfd never
 * land on a pool worker. The thread must be joined or detached once.
 * Returns 0 or a negative errno (-EAGAIN: the system refused a thread).
 * Call it through tern__thread_create (backends/fault.h), which a test
 * can make fail.
 */
static inline int tern__thread_start(tern__thread_t *t, void *(*fn)(void *), void *arg)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(t, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return -rc;
}
/* tern__thread_join: wait for t to end; *result (when not NULL) gets fn's value. */
static inline void tern__thread_join(tern__thread_t t, void **result)
{
    pthread_join(t, result);
}
/* tern__thread_detach: nobody will join t; its resources go when it ends. */
static inline void tern__thread_detach(tern__thread_t t)
{
    pthread_detach(t);
}
static inline tern__thread_t tern__thread_self(void)
{
    return pthread_self();
}
static inline bool tern__thread_equal(tern__thread_t a, tern__thread_t b)
{
    return pthread_equal(a, b) != 0;
}

/*
 * tern__tls_create: a thread-local key; at_exit(value) runs when a thread
 * that set a non-NULL value ends. Returns 0 or a negative errno.
 */
static inline int tern__tls_create(tern__tls_key_t *k, void (*at_exit)(void *))
{
    return -pthread_key_create(k, at_exit);
}
static inline void tern__tls_set(tern__tls_key_t k, void *v)
{
    pthread_setspecific(k, v);
}

/*
 * tern__atfork: handlers around fork (pthread_atfork); where there is no
 * fork (Windows) nothing is registered. Registration cannot be undone.
 */
static inline void tern__atfork(void (*before)(void), void (*parent)(void), void (*child)(void))
{
    pthread_atfork(before, parent, child);
}

/* tern__thread_yield: let another ready thread run on this CPU (a
 * spinner whose partner may share its core). */
static inline void tern__thread_yield(void)
{
    sched_yield();
}

/*
 * tern__sleep_ns: sleep at least ns nanoseconds (under a second), a pause
 * between polls and never a timer; a signal may end it early on POSIX.
 */
static inline void tern__sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)ns};
    nanosleep(&ts, NULL);
}

#else /* _WIN32: backends/thread_win.c */

typedef struct {
    void *word; /* an SRWLOCK */
} tern__mutex_t;
typedef struct {
    void *word; /* a CONDITION_VARIABLE */
} tern__cond_t;
typedef struct {
    void *word; /* an INIT_ONCE */
} tern__once_t;
/* A thread tern started, or the record of the calling thread (tern__thread_self). */
typedef struct tern__thread_rec *tern__thread_t;
/* A fiber-local storage index. */
typedef unsigned long tern__tls_key_t;
/* A deadline: the monotonic clock's nanoseconds (tern__cond_deadline). */
typedef uint64_t tern__deadline_t;

#define TERN__MUTEX_INIT \
    {                    \
        0                \
    }
#define TERN__COND_INIT \
    {                   \
        0               \
    }
#define TERN__ONCE_INIT \
    {                   \
        0               \
    }

void tern__mutex_init(tern__mutex_t *m);
void tern__mutex_destroy(tern__mutex_t *m);
void tern__mutex_lock(tern__mutex_t *m);
void tern__mutex_unlock(tern__mutex_t *m);
void tern__cond_destroy(tern__cond_t *c);
void tern__cond_wait(tern__cond_t *c, tern__mutex_t *m);
bool tern__cond_timedwait(tern__cond_t *c, tern__mutex_t *m, const tern__deadline_t *until);
void tern__cond_signal(tern__cond_t *c);
void tern__cond_broadcast(tern__cond_t *c);
void tern__once(tern__once_t *o, void (*fn)(void));
int tern__thread_start(tern__thread_t *t, void *(*fn)(void *), void *arg);
void tern__thread_join(tern__thread_t t, void **result);
void tern__thread_detach(tern__thread_t t);
tern__thread_t tern__thread_self(void);
bool tern__thread_equal(tern__thread_t a, tern__thread_t b);
int tern__tls_create(tern__tls_key_t *k, void (*at_exit)(void *));
void tern__tls_set(tern__tls_key_t k, void *v);
void tern__atfork(void (*before)(void), void (*parent)(void), void (*child)(void));
void tern__thread_yield(void);
/* Rounded up to whole milliseconds: Windows sleeps no finer. */
void tern__sleep_ns(uint64_t ns);

#endif

/*
 * tern__cond_init (backends/platform.c on POSIX): a condition variable
 * whose timed waits measure CLOCK_MONOTONIC where pthread_condattr_setclock
 * exists, CLOCK_REALTIME elsewhere (macOS), QueryPerformanceCounter on
 * Windows. Returns 0 or a negative errno.
 */
int tern__cond_init(tern__cond_t *c);

/* tern__cond_deadline: ns nanoseconds from now, in the clock
 * tern__cond_init chose: what tern__cond_timedwait takes. */
tern__deadline_t tern__cond_deadline(uint64_t ns);

/*
 * Names and CPUs of threads (backends/platform.c on POSIX, thread_win.c
 * on Windows). Best effort everywhere: a thread that could not be named
 * or pinned still runs correctly, so callers may ignore the results.
 */

/* tern__thread_name: name the calling thread (15 characters at most); a
 * no-op where the system cannot. Names show in top -H, gdb, perf, and
 * (SetThreadDescription, where Windows has it) in debuggers. */
void tern__thread_name(const char *name);

/* The most CPUs tern__cpus_usable reports: a Windows process's affinity
 * is one mask of a processor group's 64. */
#ifdef _WIN32
#define TERN__CPUS_MAX 64
#else
#define TERN__CPUS_MAX 1024
#endif

/*
 * tern__cpus_usable: the CPUs the process may run on (its affinity mask),
 * lowest first, into cpus[0..cap) (cap >= 1); returns their count, at
 * least 1: CPU 0 alone when the system cannot say.
 */
unsigned tern__cpus_usable(int *cpus, unsigned cap);

/*
 * tern__thread_pin: keep the calling thread on CPU cpu from now on.
 * Returns 0, -EINVAL (no such CPU: cpu < 0, past TERN__CPUS_MAX, or
 * outside the process's mask) or -ENOTSUP where the system cannot pin.
 */
int tern__thread_pin(int cpu);

#endif /* TERN_OS_THREAD_H */
