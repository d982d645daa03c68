/*
 * thread_test: the thread seam (backends/os_thread.h) as built for
 * Windows (backends/thread_win.c), run under wine by the Windows stage of
 * .ci/test. Each test checks one promise of the header: a mutex excludes,
 * a timed wait times out no earlier than its deadline and a signal ends
 * it, a broadcast wakes every waiter, once runs once, join hands back the
 * thread's value, a detached thread's record goes when it ends, identity
 * holds on threads tern did and did not start, a key's exit callback
 * runs with the value the thread set, a thread's name is its description,
 * the usable CPUs are the process's mask and a pin keeps a thread on one,
 * a sleep lasts at least what it asked (shorter than Windows' millisecond
 * too) and a yield lets a thread on the same CPU run.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <windows.h>

#include "os_thread.h"
#include "runner.h"

#define THREADS 4
#define ROUNDS 100000
#define ROUNDS_HANDLES 64

static tern__mutex_t lock = TERN__MUTEX_INIT;
static tern__cond_t cond = TERN__COND_INIT;
static long counter;       /* written only under lock */
static atomic_int inside;  /* threads inside the lock at once */
static atomic_int overlap; /* times a thread found another inside */

static void *count_up(void *arg)
{
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        tern__mutex_lock(&lock);
        if (atomic_fetch_add(&inside, 1) != 0)
            atomic_fetch_add(&overlap, 1);
        long c = counter;
        if ((i & 4095) == 0)
            Sleep(0); /* give up the core inside: an excluded thread must still wait */
        counter = c + 1;
        atomic_fetch_sub(&inside, 1);
        tern__mutex_unlock(&lock);
    }
    return NULL;
}

TEST(mutex_excludes_four_threads)
{
    tern__thread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK(tern__thread_start(&t[i], count_up, NULL) == 0);
    for (int i = 0; i < THREADS; i++)
        tern__thread_join(t[i], NULL);
    CHECK(counter == (long)THREADS * ROUNDS);
    CHECK(atomic_load(&overlap) == 0);
}

TEST(timed_wait_times_out_at_its_deadline)
{
    tern__cond_t c;
    tern__mutex_t m;
    CHECK(tern__cond_init(&c) == 0);
    tern__mutex_init(&m);
    tern__mutex_lock(&m);
    tern__deadline_t start = tern__cond_deadline(0);
    tern__deadline_t until = tern__cond_deadline(50000000u); /* 50 ms */
    bool timed_out = false;
    while (!timed_out)
        timed_out = tern__cond_timedwait(&c, &m, &until);
    tern__deadline_t end = tern__cond_deadline(0);
    tern__mutex_unlock(&m);
    CHECK(end >= until);
    CHECK(end - start >= 50000000u);
    CHECK(end - start < 5000000000u);
    tern__cond_destroy(&c);
    tern__mutex_destroy(&m);
}

static tern__mutex_t wake_lock = TERN__MUTEX_INIT;
static tern__cond_t wake_cond = TERN__COND_INIT;
static int woken;   /* under wake_lock */
static int waiting; /* under wake_lock */

static void *signal_later(void *arg)
{
    (void)arg;
    tern__mutex_lock(&wake_lock);
    woken = 1;
    tern__cond_signal(&wake_cond);
    tern__mutex_unlock(&wake_lock);
    return NULL;
}

TEST(timed_wait_is_ended_by_a_signal)
{
    tern__mutex_lock(&wake_lock);
    woken = 0;
    tern__thread_t t;
    CHECK(tern__thread_start(&t, signal_later, NULL) == 0);
    tern__deadline_t start = tern__cond_deadline(0);
    tern__deadline_t until = tern__cond_deadline(10000000000u); /* 10 s */
    bool timed_out = false;
    while (!woken && !timed_out)
        timed_out = tern__cond_timedwait(&wake_cond, &wake_lock, &until);
    tern__deadline_t end = tern__cond_deadline(0);
    tern__mutex_unlock(&wake_lock);
    tern__thread_join(t, NULL);
    CHECK(woken == 1);
    CHECK(!timed_out);
    CHECK(end - start < 5000000000u);
}

static void *wait_for_broadcast(void *arg)
{
    (void)arg;
    tern__mutex_lock(&wake_lock);
    waiting++;
    tern__cond_broadcast(&cond); /* tell the test one more waits */
    while (!woken)
        tern__cond_wait(&wake_cond, &wake_lock);
    waiting--;
    tern__mutex_unlock(&wake_lock);
    return NULL;
}

TEST(broadcast_wakes_every_waiter)
{
    tern__thread_t t[THREADS];
    tern__mutex_lock(&wake_lock);
    woken = 0;
    waiting = 0;
    tern__mutex_unlock(&wake_lock);
    for (int i = 0; i < THREADS; i++)
        CHECK(tern__thread_start(&t[i], wait_for_broadcast, NULL) == 0);
    tern__mutex_lock(&wake_lock);
    while (waiting < THREADS)
        tern__cond_wait(&cond, &wake_lock);
    woken = 1;
    tern__cond_broadcast(&wake_cond);
    tern__mutex_unlock(&wake_lock);
    for (int i = 0; i < THREADS; i++)
        tern__thread_join(t[i], NULL);
    CHECK(waiting == 0);
}

static tern__once_t once = TERN__ONCE_INIT;
static atomic_int once_runs;
static atomic_int once_seen; /* callers that found it run on return */

static void once_body(void)
{
    atomic_fetch_add(&once_runs, 1);
}

static void *call_once(void *arg)
{
    (void)arg;
    tern__once(&once, once_body);
    if (atomic_load(&once_runs) == 1)
        atomic_fetch_add(&once_seen, 1);
    return NULL;
}

TEST(once_runs_once)
{
    tern__thread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK(tern__thread_start(&t[i], call_once, NULL) == 0);
    call_once(NULL);
    for (int i = 0; i < THREADS; i++)
        tern__thread_join(t[i], NULL);
    CHECK(atomic_load(&once_runs) == 1);
    CHECK(atomic_load(&once_seen) == THREADS + 1);
}

static void *plus_one(void *arg)
{
    return (char *)arg + 1;
}

TEST(join_returns_the_value)
{
    static char base[2];
    tern__thread_t t;
    CHECK(tern__thread_start(&t, plus_one, base) == 0);
    void *result = NULL;
    tern__thread_join(t, &result);
    CHECK(result == base + 1);
}

static atomic_int detached_done;

static void *detach_self(void *arg)
{
    (void)arg;
    tern__thread_detach(tern__thread_self());
    atomic_store(&detached_done, 1);
    return NULL;
}

static void *report_self(void *arg)
{
    *(tern__thread_t *)arg = tern__thread_self();
    return NULL;
}

TEST(identity)
{
    tern__thread_t t, inner;
    CHECK(tern__thread_start(&t, report_self, &inner) == 0);
    tern__thread_join(t, NULL);
    CHECK(tern__thread_equal(inner, t));
    /* A thread tern did not start (this one) has one identity of its own. */
    CHECK(tern__thread_equal(tern__thread_self(), tern__thread_self()));
    CHECK(!tern__thread_equal(tern__thread_self(), t));
}

/* Waits up to 5 s for *flag, in 1 ms naps. */
static void await_flag(atomic_int *flag)
{
    tern__deadline_t until = tern__cond_deadline(5000000000u);
    tern__mutex_lock(&wake_lock);
    while (!atomic_load(flag) && tern__cond_deadline(0) < until) {
        tern__deadline_t nap = tern__cond_deadline(1000000u);
        tern__cond_timedwait(&wake_cond, &wake_lock, &nap);
    }
    tern__mutex_unlock(&wake_lock);
}

static atomic_int detached_now;

static void *run_detached(void *arg)
{
    (void)arg;
    atomic_fetch_add(&detached_now, 1);
    return NULL;
}

/* The value the next handle gets: a probe of the handle table. Freed
 * slots are reused, so handles left open push it up. */
static uintptr_t next_handle(void)
{
    HANDLE e = CreateEventA(NULL, FALSE, FALSE, NULL);
    CloseHandle(e);
    return (uintptr_t)e;
}

/*
 * Threads joined, detached by their owner and detached by themselves
 * leave no handle open. GetProcessHandleCount says so on Windows; wine 8
 * reports 0 handles whatever is open, so the table's next free value is
 * checked too: 64 rounds that each left a handle open would move it by
 * 64 slots or more, where a clean run leaves it within a few.
 */
TEST(detach_and_join_leave_no_handle)
{
    DWORD before = 0, after = 0;
    CHECK(GetProcessHandleCount(GetCurrentProcess(), &before));
    uintptr_t mark = next_handle();
    for (int round = 0; round < ROUNDS_HANDLES; round++) {
        tern__thread_t t;
        CHECK(tern__thread_start(&t, run_detached, NULL) == 0);
        tern__thread_join(t, NULL);
        CHECK(tern__thread_start(&t, run_detached, NULL) == 0);
        tern__thread_detach(t);
        atomic_store(&detached_done, 0);
        CHECK(tern__thread_start(&t, detach_self, NULL) == 0);
        await_flag(&detached_done);
        CHECK(atomic_load(&detached_done) == 1);
    }
    tern__deadline_t until = tern__cond_deadline(5000000000u);
    while (atomic_load(&detached_now) < 2 * ROUNDS_HANDLES && tern__cond_deadline(0) < until)
        Sleep(1);
    CHECK(atomic_load(&detached_now) == 2 * ROUNDS_HANDLES); /* joined and detached */
    Sleep(100); /* the detached threads' last steps after their flag */
    CHECK(GetProcessHandleCount(GetCurrentProcess(), &after));
    CHECK(after == before);
    uintptr_t moved = next_handle() - mark;
    CHECK(moved / sizeof(HANDLE) < ROUNDS_HANDLES / 4);
}

static tern__tls_key_t key;
static void *exit_value;

static void key_exit(void *v)
{
    exit_value = v;
}

static void *set_key(void *arg)
{
    tern__tls_set(key, arg);
    return NULL;
}

TEST(key_exit_runs_with_the_value)
{
    static char mark;
    CHECK(tern__tls_create(&key, key_exit) == 0);
    tern__thread_t t;
    CHECK(tern__thread_start(&t, set_key, &mark) == 0);
    tern__thread_join(t, NULL);
    CHECK(exit_value == &mark);
}

/* GetThreadDescription's type: looked up, as thread_win.c looks up its setter. */
typedef HRESULT(WINAPI *get_description_fn)(HANDLE, PWSTR *);

static get_description_fn find_get_description(void)
{
    FARPROC f = GetProcAddress(GetModuleHandleW(L"kernel32.dll"), "GetThreadDescription");
    return (get_description_fn)(void (*)(void))f;
}

static void *name_self(void *arg)
{
    tern__thread_name(arg);
    get_description_fn get = find_get_description();
    PWSTR wide = NULL;
    if (get == NULL || FAILED(get(GetCurrentThread(), &wide)))
        return NULL;
    static char narrow[32];
    int n = WideCharToMultiByte(CP_UTF8, 0, wide, -1, narrow, sizeof narrow, NULL, NULL);
    LocalFree(wide);
    return n > 0 ? narrow : NULL;
}

/* Where the system has thread descriptions (Windows 10 1607+, wine), the
 * name is the thread's description; a name too long for a POSIX thread
 * (more than 15 characters) leaves it as it was. */
TEST(thread_name_is_the_description)
{
    if (find_get_description() == NULL) {
        printf("(no GetThreadDescription here: naming is a no-op)\n");
        return;
    }
    tern__thread_t t;
    void *got = NULL;
    CHECK(tern__thread_start(&t, name_self, "tern-test-7") == 0);
    tern__thread_join(t, &got);
    CHECK(got != NULL && strcmp(got, "tern-test-7") == 0);
    CHECK(tern__thread_start(&t, name_self, "a-name-longer-than-15") == 0);
    tern__thread_join(t, &got);
    CHECK(got != NULL && strcmp(got, "") == 0);
}

/* The usable CPUs are the process's mask, lowest first. */
TEST(usable_cpus_are_the_process_mask)
{
    DWORD_PTR process, system;
    CHECK(GetProcessAffinityMask(GetCurrentProcess(), &process, &system));
    int cpus[TERN__CPUS_MAX];
    unsigned n = tern__cpus_usable(cpus, TERN__CPUS_MAX);
    CHECK(n >= 1);
    DWORD_PTR listed = 0;
    for (unsigned i = 0; i < n; i++) {
        CHECK(cpus[i] >= 0 && cpus[i] < TERN__CPUS_MAX);
        CHECK(i == 0 || cpus[i] > cpus[i - 1]);
        listed |= (DWORD_PTR)1 << cpus[i];
    }
    CHECK(listed == process);
    /* A short array gets the lowest ones. */
    int first[1];
    CHECK(tern__cpus_usable(first, 1) == 1 && first[0] == cpus[0]);
}

struct pinned {
    int cpu;
    int rc;
    DWORD_PTR mask; /* the thread's mask after the pin */
};

static void *pin_self(void *arg)
{
    struct pinned *p = arg;
    p->rc = tern__thread_pin(p->cpu);
    /* SetThreadAffinityMask answers with the mask it replaces: set it
     * twice to read the pin's. */
    DWORD_PTR all = 0, system;
    GetProcessAffinityMask(GetCurrentProcess(), &all, &system);
    p->mask = SetThreadAffinityMask(GetCurrentThread(), all);
    return NULL;
}

static struct pinned pin_on_thread(int cpu)
{
    struct pinned p = {.cpu = cpu};
    tern__thread_t t;
    if (tern__thread_start(&t, pin_self, &p) == 0)
        tern__thread_join(t, NULL);
    return p;
}

/* A pin keeps the thread on that one CPU; a CPU that does not exist is
 * refused with -EINVAL. */
TEST(pin_keeps_the_thread_on_one_cpu)
{
    int cpus[TERN__CPUS_MAX];
    unsigned n = tern__cpus_usable(cpus, TERN__CPUS_MAX);
    for (unsigned i = 0; i < n; i++) {
        struct pinned p = pin_on_thread(cpus[i]);
        CHECK(p.rc == 0);
        CHECK(p.mask == (DWORD_PTR)1 << cpus[i]);
    }
    CHECK(pin_on_thread(-1).rc == -EINVAL);
    CHECK(pin_on_thread(TERN__CPUS_MAX).rc == -EINVAL);
    if (cpus[n - 1] + 1 < TERN__CPUS_MAX)
        CHECK(pin_on_thread(cpus[n - 1] + 1).rc == -EINVAL);
}

static uint64_t qpc_ns(void)
{
    LARGE_INTEGER c, f;
    QueryPerformanceCounter(&c);
    QueryPerformanceFrequency(&f);
    return (uint64_t)c.QuadPart / (uint64_t)f.QuadPart * 1000000000u +
           (uint64_t)c.QuadPart % (uint64_t)f.QuadPart * 1000000000u / (uint64_t)f.QuadPart;
}

/* A sleep lasts at least its request, also under a millisecond (the pool's
 * shutdown polls every 200 us: a sleep that ended at once would spin). */
TEST(sleep_lasts_at_least_its_request)
{
    static const uint64_t asks[] = {1, 200000, 999999, 1500000};
    for (unsigned i = 0; i < sizeof asks / sizeof asks[0]; i++) {
        for (int round = 0; round < 5; round++) {
            uint64_t start = qpc_ns();
            tern__sleep_ns(asks[i]);
            CHECK(qpc_ns() - start >= asks[i]);
        }
    }
}

static atomic_int yield_flag;

static void *set_flag_pinned(void *arg)
{
    tern__thread_pin(*(int *)arg);
    atomic_store(&yield_flag, 1);
    return NULL;
}

/* With both threads pinned to one CPU, a spinner that yields lets the
 * other one run and set the flag it waits for. */
TEST(yield_lets_a_thread_on_the_same_cpu_run)
{
    int cpus[TERN__CPUS_MAX];
    tern__cpus_usable(cpus, TERN__CPUS_MAX);
    CHECK(tern__thread_pin(cpus[0]) == 0);
    atomic_store(&yield_flag, 0);
    tern__thread_t t;
    CHECK(tern__thread_start(&t, set_flag_pinned, &cpus[0]) == 0);
    uint64_t end = qpc_ns() + 20ull * 1000000000u; /* a liveness bound */
    while (atomic_load(&yield_flag) == 0 && qpc_ns() < end)
        tern__thread_yield();
    CHECK(atomic_load(&yield_flag) == 1);
    tern__thread_join(t, NULL);
    DWORD_PTR all = 0, system;
    GetProcessAffinityMask(GetCurrentProcess(), &all, &system);
    SetThreadAffinityMask(GetCurrentThread(), all); /* unpin the main thread */
}

static const struct runner_test tests[] = {
    RUNNER_TEST(mutex_excludes_four_threads),
    RUNNER_TEST(timed_wait_times_out_at_its_deadline),
    RUNNER_TEST(timed_wait_is_ended_by_a_signal),
    RUNNER_TEST(broadcast_wakes_every_waiter),
    RUNNER_TEST(once_runs_once),
    RUNNER_TEST(join_returns_the_value),
    RUNNER_TEST(identity),
    RUNNER_TEST(detach_and_join_leave_no_handle),
    RUNNER_TEST(key_exit_runs_with_the_value),
    RUNNER_TEST(thread_name_is_the_description),
    RUNNER_TEST(usable_cpus_are_the_process_mask),
    RUNNER_TEST(pin_keeps_the_thread_on_one_cpu),
    RUNNER_TEST(sleep_lasts_at_least_its_request),
    RUNNER_TEST(yield_lets_a_thread_on_the_same_cpu_run),
};

int main(void)
{
    return RUNNER_MAIN(tests);
}
