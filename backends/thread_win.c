/*
 * The thread seam on Windows (os_thread.h), compiled only there.
 *
 * Locks are SRWLOCKs, condition variables CONDITION_VARIABLEs and
 * once-flags INIT_ONCEs, each one pointer wide and statically
 * initialisable to zero, so os_thread.h declares them as opaque words and
 * no file above backends/ sees <windows.h>. None of them allocates, so
 * init cannot fail and destroy has nothing to free.
 *
 * Threads: a thread is a heap record shared by the thread and its owner
 * (two references; joining or detaching drops the owner's, the thread's
 * end drops its own, and the last one frees it). The thread's handle is
 * the owner's: join waits on it and closes it, detach closes it at once
 * (closing a handle does not end its thread). A thread tern did not start
 * (an application's loop thread) gets a thread-local record from
 * tern__thread_self, so identity is the record's address on every thread.
 *
 * Quirks: SleepConditionVariableSRW takes a relative timeout in
 * milliseconds and may report ERROR_TIMEOUT a little before it is due (the
 * timer's tick), so a timed wait converts tern's monotonic deadline,
 * rounds up, and waits again for what is left: "timed out" means the
 * deadline has passed by QueryPerformanceCounter. Fiber-local storage
 * (FlsAlloc) is used for keys because, unlike TlsAlloc, it runs a
 * callback when a thread ends. There is no fork, so tern__atfork
 * registers nothing. Sleep counts whole milliseconds (winpthreads'
 * nanosleep truncates to them, so a 200 us poll would not sleep at all
 * and its poller would spin): tern__sleep_ns rounds up instead.
 *
 * Names and CPUs: a thread's name is its description
 * (SetThreadDescription, wide characters), which exists from Windows 10
 * 1607 on, so it is looked up in kernel32 at run time and naming is a
 * no-op where it is missing. Affinity is one mask of 64 CPUs, the
 * process's processor group (GetProcessAffinityMask,
 * SetThreadAffinityMask): tern uses no other group.
 */
#include <errno.h>
#include <process.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <windows.h>

#include "error_win.h"
#include "os_thread.h"

_Static_assert(sizeof(tern__mutex_t) == sizeof(SRWLOCK), "tern__mutex_t holds an SRWLOCK");
_Static_assert(sizeof(tern__cond_t) == sizeof(CONDITION_VARIABLE),
               "tern__cond_t holds a CONDITION_VARIABLE");
_Static_assert(sizeof(tern__once_t) == sizeof(INIT_ONCE), "tern__once_t holds an INIT_ONCE");
_Static_assert(sizeof(tern__tls_key_t) == sizeof(DWORD), "tern__tls_key_t holds an FLS index");
/* tern__tls_create relies on x86-64's one calling convention. */
_Static_assert(sizeof(void *) == 8, "64-bit Windows only");

#define SRW(m) ((PSRWLOCK)(void *)&(m)->word)
#define CV(c) ((PCONDITION_VARIABLE)(void *)&(c)->word)

void tern__mutex_init(tern__mutex_t *m)
{
    InitializeSRWLock(SRW(m));
}

void tern__mutex_destroy(tern__mutex_t *m)
{
    (void)m; /* an SRWLOCK holds nothing to free */
}

void tern__mutex_lock(tern__mutex_t *m)
{
    AcquireSRWLockExclusive(SRW(m));
}

void tern__mutex_unlock(tern__mutex_t *m)
{
    ReleaseSRWLockExclusive(SRW(m));
}

int tern__cond_init(tern__cond_t *c)
{
    InitializeConditionVariable(CV(c));
    return 0;
}

void tern__cond_destroy(tern__cond_t *c)
{
    (void)c;
}

void tern__cond_wait(tern__cond_t *c, tern__mutex_t *m)
{
    SleepConditionVariableSRW(CV(c), SRW(m), INFINITE, 0);
}

/* The monotonic clock in nanoseconds, split so the product cannot overflow. */
static uint64_t monotonic_ns(void)
{
    LARGE_INTEGER count, freq;
    QueryPerformanceCounter(&count);
    QueryPerformanceFrequency(&freq);
    uint64_t c = (uint64_t)count.QuadPart, f = (uint64_t)freq.QuadPart;
    return c / f * 1000000000u + c % f * 1000000000u / f;
}

tern__deadline_t tern__cond_deadline(uint64_t ns)
{
    return monotonic_ns() + ns;
}

bool tern__cond_timedwait(tern__cond_t *c, tern__mutex_t *m, const tern__deadline_t *until)
{
    for (;;) {
        uint64_t now = monotonic_ns();
        if (now >= *until)
            return true;
        /* Rounded up to the next millisecond, and short of INFINITE. */
        uint64_t ms = (*until - now + 999999u) / 1000000u;
        DWORD wait = ms >= INFINITE ? INFINITE - 1 : (DWORD)ms;
        if (SleepConditionVariableSRW(CV(c), SRW(m), wait, 0))
            return false; /* woken (perhaps spuriously): the caller rechecks */
    }
}

void tern__cond_signal(tern__cond_t *c)
{
    WakeConditionVariable(CV(c));
}

void tern__cond_broadcast(tern__cond_t *c)
{
    WakeAllConditionVariable(CV(c));
}

/* InitOnceExecuteOnce passes a pointer, not a function: the function travels in a box. */
struct once_box {
    void (*fn)(void);
};

static BOOL CALLBACK once_run(PINIT_ONCE o, PVOID param, PVOID *context)
{
    (void)o;
    (void)context;
    ((struct once_box *)param)->fn();
    return TRUE;
}

void tern__once(tern__once_t *o, void (*fn)(void))
{
    struct once_box box = {fn};
    InitOnceExecuteOnce((PINIT_ONCE)(void *)&o->word, once_run, &box, NULL);
}

struct tern__thread_rec {
    HANDLE handle; /* the owner's; NULL in a record tern__thread_self made */
    void *(*fn)(void *);
    void *arg;
    void *result;
    atomic_int refs; /* the thread's and the owner's: the last one frees */
};

/* The calling thread's record: set by the trampoline on threads tern
 * started, made on first use (and never freed: it is thread-local) on
 * the others. */
static _Thread_local struct tern__thread_rec *current;
static _Thread_local struct tern__thread_rec foreign;

static void rec_release(struct tern__thread_rec *r)
{
    /* acq_rel: the thread's result written before its release is seen by
     * whoever frees. */
    if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) == 1)
        free(r);
}

static unsigned __stdcall trampoline(void *p)
{
    struct tern__thread_rec *r = p;
    current = r;
    r->result = r->fn(r->arg);
    current = NULL;
    rec_release(r);
    return 0;
}

int tern__thread_start(tern__thread_t *t, void *(*fn)(void *), void *arg)
{
    struct tern__thread_rec *r = malloc(sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    *r = (struct tern__thread_rec){.fn = fn, .arg = arg};
    atomic_init(&r->refs, 2);
    /* _beginthreadex, not CreateThread: the C runtime's per-thread state
     * is set up and torn down with the thread. Suspended until its handle
     * is in the record: a thread that detaches itself at once reads it,
     * and may free the record before this call would have stored it. */
    uintptr_t h = _beginthreadex(NULL, 0, trampoline, r, CREATE_SUSPENDED, NULL);
    if (h == 0) {
        free(r);
        return -EAGAIN;
    }
    r->handle = (HANDLE)h;
    *t = r;
    ResumeThread((HANDLE)h);
    return 0;
}

void tern__thread_join(tern__thread_t t, void **result)
{
    WaitForSingleObject(t->handle, INFINITE);
    CloseHandle(t->handle);
    if (result != NULL)
        *result = t->result;
    rec_release(t);
}

void tern__thread_detach(tern__thread_t t)
{
    CloseHandle(t->handle);
    rec_release(t);
}

tern__thread_t tern__thread_self(void)
{
    return current != NULL ? current : &foreign;
}

bool tern__thread_equal(tern__thread_t a, tern__thread_t b)
{
    return a == b;
}

int tern__tls_create(tern__tls_key_t *k, void (*at_exit)(void *))
{
    /* On x86-64 there is one calling convention, so the callback's NTAPI
     * is the C function's own; the cast goes through void (*)(void) so the
     * compiler sees it is meant. */
    DWORD i = FlsAlloc((PFLS_CALLBACK_FUNCTION)(void (*)(void))at_exit);
    if (i == FLS_OUT_OF_INDEXES)
        return -EAGAIN;
    *k = i;
    return 0;
}

void tern__tls_set(tern__tls_key_t k, void *v)
{
    FlsSetValue(k, v);
}

void tern__thread_yield(void)
{
    SwitchToThread();
}

void tern__sleep_ns(uint64_t ns)
{
    Sleep((DWORD)((ns + 999999u) / 1000000u));
}

void tern__atfork(void (*before)(void), void (*parent)(void), void (*child)(void))
{
    (void)before;
    (void)parent;
    (void)child;
}

/* SetThreadDescription's type, for the run-time lookup. */
typedef HRESULT(WINAPI *set_description_fn)(HANDLE, PCWSTR);

static set_description_fn set_description;
static tern__once_t set_description_once = TERN__ONCE_INIT;

static void find_set_description(void)
{
    HMODULE k = GetModuleHandleW(L"kernel32.dll");
    FARPROC f = k != NULL ? GetProcAddress(k, "SetThreadDescription") : NULL;
    /* Through void (*)(void), as in tern__tls_create: the cast is meant. */
    set_description = (set_description_fn)(void (*)(void))f;
}

void tern__thread_name(const char *name)
{
    tern__once(&set_description_once, find_set_description);
    if (set_description == NULL)
        return;
    WCHAR wide[16];
    if (MultiByteToWideChar(CP_UTF8, 0, name, -1, wide, 16) == 0)
        return; /* longer than a POSIX name may be: left unnamed, as there */
    (void)set_description(GetCurrentThread(), wide);
}

unsigned tern__cpus_usable(int *cpus, unsigned cap)
{
    DWORD_PTR process, system;
    unsigned n = 0;
    if (GetProcessAffinityMask(GetCurrentProcess(), &process, &system))
        for (int c = 0; c < TERN__CPUS_MAX && n < cap; c++)
            if (process & ((DWORD_PTR)1 << c))
                cpus[n++] = c;
    if (n == 0)
        cpus[n++] = 0;
    return n;
}

int tern__thread_pin(int cpu)
{
    if (cpu < 0 || cpu >= TERN__CPUS_MAX)
        return -EINVAL;
    /* Outside the process's mask the call fails with
     * ERROR_INVALID_PARAMETER, which the table reads as -EINVAL. */
    if (SetThreadAffinityMask(GetCurrentThread(), (DWORD_PTR)1 << cpu) == 0)
        return tern__error_win(GetLastError());
    return 0;
}
