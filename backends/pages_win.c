/*
 * Memory below the fault seam on Windows (pages.h). VirtualAlloc's
 * committed pages are zero and cost nothing until touched, which is what
 * tern__pages_lazy promises. Aligned blocks come from _aligned_malloc and
 * go back through _aligned_free (free() on one corrupts the heap), hence
 * tern__free_aligned beside tern__calloc_aligned.
 */
#include <malloc.h>
#include <windows.h>

#include "pages.h"

void *tern__pages_lazy(size_t size)
{
    return VirtualAlloc(NULL, size, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
}

void tern__pages_free(void *p, size_t size)
{
    (void)size; /* MEM_RELEASE frees the whole reservation and wants 0 */
    VirtualFree(p, 0, MEM_RELEASE);
}

void *tern__aligned_alloc(size_t align, size_t size)
{
    return _aligned_malloc(size, align);
}

void tern__free_aligned(void *p)
{
    _aligned_free(p);
}
