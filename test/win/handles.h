/*
 * handles.h: how many handles the process holds, for the Windows programs'
 * leak checks. GetProcessHandleCount is the documented count, but wine 8
 * answers it with 0 whatever is open (docs/testing.md, "Under wine"), so
 * the programs also count by walking the handle table: every value the
 * kernel hands out is a multiple of 4, taken lowest free first, and
 * GetHandleInformation succeeds exactly for the open ones. The walk stops
 * after HANDLES_GAP values in a row that are not open, far past the
 * highest handle of a program this size. Both counts are compared before
 * and after; under wine the first is 0 both times, the second the real one.
 *
 * Take the "before" after the calling thread has used a loop once
 * (handles_warm_up): mingw's -posix gcc emulates _Thread_local through
 * winpthreads, which gives each thread that first touches one (tern's
 * current-loop and refusal records do) a record of 4 handles (the
 * thread's own, duplicated, an event and two semaphores) and closes them
 * only when that thread ends. A pool worker's are closed when it exits;
 * the main thread's stay until the process ends, and are no leak.
 *
 * The warm-up also makes every other thread of tern's touch its
 * thread-locals once (a pool job of each class, a one-member group), so
 * their numbering is done before the count.
 *
 * Events are counted apart and not compared. tern makes none (its locks,
 * waits and wake-ups are SRW locks, condition variables and the port),
 * while winpthreads makes one in each thread's record; and under load
 * (three copies of pool_test at once under wine) about one run in seventy
 * ended with one Event more than it began with, never more than one,
 * never another type, and for good (it was still there seconds later).
 * Every Event a traced run made came from winpthreads' record of a
 * thread; which of them outlives its thread was not pinned down. A leak
 * of tern's shows in the other types: a thread not joined keeps its
 * Thread handles, a loop its port, a watch its AFD helper (File).
 */
#ifndef TERN_WIN_HANDLES_H
#define TERN_WIN_HANDLES_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <windows.h>

#include "tern.h"

#define HANDLES_GAP 4096u
#define HANDLES_KEPT 256u /* open values remembered, to name a leak */

struct handles {
    DWORD reported;                /* GetProcessHandleCount (0 under wine), less the Events */
    unsigned open;                 /* the walk's count of open handles that are not Events */
    unsigned events;               /* the walk's Events (not compared: the comment at the top) */
    uintptr_t value[HANDLES_KEPT]; /* the first values counted in open, ascending */
};

/* handles_kind: the object type of an open handle (NtQueryObject's type
 * information, looked up in ntdll at run time), or "?" when not told. */
static void handles_kind(uintptr_t v, char *out, size_t room)
{
    typedef LONG(WINAPI * query_fn)(HANDLE, int, void *, ULONG, ULONG *);
    HMODULE ntdll = GetModuleHandleA("ntdll.dll");
    query_fn query =
        ntdll != NULL ? (query_fn)(void (*)(void))GetProcAddress(ntdll, "NtQueryObject") : NULL;
    union {
        struct {
            USHORT length, room;
            WCHAR *text;
        } name; /* the UNICODE_STRING that opens the type information */
        char space[1024];
    } info;
    snprintf(out, room, "?");
    if (query != NULL &&
        query((HANDLE)v, 2 /* ObjectTypeInformation */, &info, sizeof info, NULL) >= 0)
        snprintf(out, room, "%.*ls", (int)(info.name.length / sizeof(WCHAR)), info.name.text);
}

static struct handles handles_now(void)
{
    struct handles h = {0};
    if (!GetProcessHandleCount(GetCurrentProcess(), &h.reported))
        h.reported = (DWORD)-1;
    unsigned misses = 0;
    for (uintptr_t v = 4; misses < HANDLES_GAP; v += 4) {
        DWORD flags;
        if (GetHandleInformation((HANDLE)v, &flags)) {
            char kind[64];
            handles_kind(v, kind, sizeof kind);
            if (strcmp(kind, "Event") == 0) {
                h.events++;
            } else {
                if (h.open < HANDLES_KEPT)
                    h.value[h.open] = v;
                h.open++;
            }
            misses = 0;
        } else {
            misses++;
        }
    }
    if (h.reported != (DWORD)-1 && h.reported >= h.events)
        h.reported -= h.events;
    return h;
}

static void *handles_warm_work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

static void handles_warm_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)status, (void)result, (void)arg;
}

/* handles_warm_up: a loop on this thread with a job of each class
 * delivered, a one-member group run and ended, and the pool shut down,
 * so every thread-local of tern's is numbered and this thread's records
 * exist before the count is taken (the comment at the top). */
static void handles_warm_up(void)
{
    tern_loop *loop = NULL;
    if (tern_loop_new(&loop, NULL) == 0) {
        (void)tern_submit(loop, TERN_BOUNDED, handles_warm_work, handles_warm_done, NULL, NULL);
        (void)tern_submit(loop, TERN_LONG, handles_warm_work, handles_warm_done, NULL, NULL);
        (void)tern_loop_run(loop);
        tern_loop_free(loop);
    }
    tern_group_options o;
    tern_group_options_init(&o);
    o.loops = 1;
    tern_group *g = NULL;
    if (tern_group_new(&g, &o) == 0) {
        if (tern_group_start(g) == 0 && tern_group_shutdown(g) == 0)
            (void)tern_group_wait(g);
        tern_group_free(g);
    }
    (void)tern_pool_shutdown(TERN_POOL_DRAIN, UINT64_C(10000000000));
}

/* handles_name_new: prints each value open in now but not in then (within
 * the values both remember), with its object type. */
static void handles_name_new(struct handles then, struct handles now)
{
    unsigned kept_then = then.open < HANDLES_KEPT ? then.open : HANDLES_KEPT;
    unsigned kept_now = now.open < HANDLES_KEPT ? now.open : HANDLES_KEPT;
    for (unsigned i = 0; i < kept_now; i++) {
        bool known = false;
        for (unsigned k = 0; k < kept_then && !known; k++)
            known = then.value[k] == now.value[i];
        if (!known) {
            char kind[128];
            handles_kind(now.value[i], kind, sizeof kind);
            fprintf(stderr, "handles: %#llx (%s) is open in one count only\n",
                    (unsigned long long)now.value[i], kind);
        }
    }
}

/* handles_same: whether both counts are back where they were; prints the
 * difference on stderr when not. */
static bool handles_same(struct handles before, struct handles after)
{
    if (before.reported == after.reported && before.open == after.open)
        return true;
    fprintf(stderr,
            "handles: GetProcessHandleCount %lu -> %lu, open (walk) %u -> %u (Events, not "
            "compared: %u -> %u)\n",
            (unsigned long)before.reported, (unsigned long)after.reported, before.open, after.open,
            before.events, after.events);
    handles_name_new(before, after);
    handles_name_new(after, before);
    return false;
}

#endif /* TERN_WIN_HANDLES_H */
