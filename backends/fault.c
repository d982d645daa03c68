/*
 * The fault seam (see fault.h). A test arms it with a mask of sites and
 * an ordinal; every checked call over those sites counts, and the nth one
 * fails. Disarmed, a site costs one relaxed load of
 * `tern__fault_armed_mask` (inline for a stream's system calls).
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "pages.h"

_Atomic unsigned tern__fault_armed_mask;
static _Atomic uint64_t target;
static _Atomic uint64_t counted;
static _Atomic bool fired;
static _Atomic int fs_errno = -EIO;
static _Atomic int net_errno = -ENOBUFS;

void tern__fault_arm(unsigned mask, uint64_t nth)
{
    atomic_store(&tern__fault_armed_mask, 0);
    atomic_store(&counted, 0);
    atomic_store(&fired, false);
    atomic_store(&target, nth);
    if (nth != 0)
        atomic_store(&tern__fault_armed_mask, mask);
}

bool tern__fault_fired(void)
{
    return atomic_load(&fired);
}

bool tern__fault_hit(enum tern__fault_site site)
{
    if (!tern__fault_site_armed(site))
        return false;
    uint64_t n = atomic_fetch_add(&counted, 1) + 1;
    if (n != atomic_load(&target))
        return false;
    atomic_store(&fired, true);
    return true;
}

void *tern__malloc(size_t size)
{
    return tern__fault_hit(TERN__FAULT_ALLOC) ? NULL : malloc(size);
}

void *tern__calloc(size_t n, size_t size)
{
    return tern__fault_hit(TERN__FAULT_ALLOC) ? NULL : calloc(n, size);
}

void *tern__realloc(void *p, size_t size)
{
    return tern__fault_hit(TERN__FAULT_ALLOC) ? NULL : realloc(p, size);
}

void *tern__calloc_aligned(size_t align, size_t size)
{
    if (tern__fault_hit(TERN__FAULT_ALLOC))
        return NULL;
    size = (size + align - 1) & ~(align - 1); /* aligned_alloc wants a multiple */
    void *p = tern__aligned_alloc(align, size);
    if (p != NULL)
        memset(p, 0, size);
    return p;
}

#define LAZY_MIN (256u << 10) /* below this, calloc's own pages are fine */

void *tern__calloc_lazy(size_t n, size_t size)
{
    if (tern__fault_hit(TERN__FAULT_ALLOC))
        return NULL;
    if (size != 0 && n > SIZE_MAX / size)
        return NULL;
    if (n * size < LAZY_MIN)
        return calloc(n, size);
    return tern__pages_lazy(n * size);
}

void tern__free_lazy(void *p, size_t n, size_t size)
{
    if (p == NULL)
        return;
    if (n * size < LAZY_MIN)
        free(p);
    else
        tern__pages_free(p, n * size);
}

void tern__free(void *p)
{
    free(p);
}

int tern__thread_create(tern__thread_t *t, void *(*fn)(void *), void *arg)
{
    if (tern__fault_hit(TERN__FAULT_THREAD))
        return -EAGAIN;
    /* Every signal blocked on the new thread (os_thread.h). */
    return tern__thread_start(t, fn, arg);
}

int tern__fd_fault(void)
{
    return tern__fault_hit(TERN__FAULT_FD) ? -EMFILE : 0;
}

void tern__fault_fs_errno(int err)
{
    atomic_store(&fs_errno, err < 0 ? err : -err);
}

/* The hold: none, armed (a call to come is held), or a call is held. */
enum { HOLD_NONE, HOLD_ARMED, HOLD_HELD };
static _Atomic int hold = HOLD_NONE;
static unsigned hold_skip; /* armed: calls still let through first (hold_lock) */
static tern__mutex_t hold_lock = TERN__MUTEX_INIT;
static tern__cond_t hold_cond = TERN__COND_INIT;

void tern__fault_fs_hold_after(unsigned calls)
{
    tern__mutex_lock(&hold_lock);
    hold_skip = calls;
    atomic_store(&hold, HOLD_ARMED);
    tern__mutex_unlock(&hold_lock);
}

void tern__fault_fs_hold(void)
{
    tern__fault_fs_hold_after(0);
}

bool tern__fault_fs_held(void)
{
    return atomic_load(&hold) == HOLD_HELD;
}

void tern__fault_fs_release(void)
{
    tern__mutex_lock(&hold_lock);
    atomic_store(&hold, HOLD_NONE);
    tern__cond_broadcast(&hold_cond);
    tern__mutex_unlock(&hold_lock);
}

/* The first caller to find the hold armed with nothing left to let
 * through takes it and waits for release. */
static void hold_here(void)
{
    tern__mutex_lock(&hold_lock);
    if (atomic_load(&hold) == HOLD_ARMED && hold_skip > 0) {
        hold_skip--;
    } else if (atomic_load(&hold) == HOLD_ARMED) {
        atomic_store(&hold, HOLD_HELD);
        while (atomic_load(&hold) == HOLD_HELD)
            tern__cond_wait(&hold_cond, &hold_lock);
    }
    tern__mutex_unlock(&hold_lock);
}

int tern__fs_fault(void)
{
    /* Disarmed, one more relaxed load; the lock is taken only when armed. */
    if (atomic_load_explicit(&hold, memory_order_relaxed) == HOLD_ARMED)
        hold_here();
    return tern__fault_hit(TERN__FAULT_FS) ? atomic_load(&fs_errno) : 0;
}

int tern__fs_fault_made(void)
{
    return tern__fault_hit(TERN__FAULT_FS) ? atomic_load(&fs_errno) : 0;
}

int tern__net_fault_slow(void)
{
    return tern__fault_hit(TERN__FAULT_NET) ? atomic_load(&net_errno) : 0;
}

void tern__fault_net_errno(int err)
{
    atomic_store(&net_errno, err < 0 ? err : -err);
}

int tern__stream_fault_slow(void)
{
    return tern__fault_hit(TERN__FAULT_STREAM) ? atomic_load(&net_errno) : 0;
}
