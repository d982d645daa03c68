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
 */
#ifndef TERN_WIN_HANDLES_H
#define TERN_WIN_HANDLES_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <windows.h>

#include "tern.h"

#define HANDLES_GAP 4096u

struct handles {
    DWORD reported; /* GetProcessHandleCount (0 under wine) */
    unsigned open;  /* the walk's count */
};

static struct handles handles_now(void)
{
    struct handles h = {0, 0};
    if (!GetProcessHandleCount(GetCurrentProcess(), &h.reported))
        h.reported = (DWORD)-1;
    unsigned misses = 0;
    for (uintptr_t v = 4; misses < HANDLES_GAP; v += 4) {
        DWORD flags;
        if (GetHandleInformation((HANDLE)v, &flags)) {
            h.open++;
            misses = 0;
        } else {
            misses++;
        }
    }
    return h;
}

/* handles_warm_up: one loop made and freed on this thread, so its
 * thread-local records exist before the count is taken. */
static void handles_warm_up(void)
{
    tern_loop *loop = NULL;
    if (tern_loop_new(&loop, NULL) == 0)
        tern_loop_free(loop);
}

/* handles_same: whether both counts are back where they were; prints the
 * difference on stderr when not. */
static bool handles_same(struct handles before, struct handles after)
{
    if (before.reported == after.reported && before.open == after.open)
        return true;
    fprintf(stderr, "handles: GetProcessHandleCount %lu -> %lu, open (walk) %u -> %u\n",
            (unsigned long)before.reported, (unsigned long)after.reported, before.open, after.open);
    return false;
}

#endif /* TERN_WIN_HANDLES_H */
