/*
 * Memory as the system hands it out, below the fault seam (fault.c is the
 * only caller): pages that cost nothing until touched, and aligned blocks.
 * backends/pages.c on POSIX, pages_win.c on Windows, chosen by meson.
 * Any thread; nothing here fails but by returning NULL.
 */
#ifndef TERN_PAGES_H
#define TERN_PAGES_H

#include <stddef.h>

/*
 * tern__pages_lazy: size bytes of zeroed anonymous memory whose pages cost
 * nothing until first touched (no MAP_POPULATE); NULL on failure. Given
 * back with tern__pages_free and the same size.
 */
void *tern__pages_lazy(size_t size);
void tern__pages_free(void *p, size_t size);

/*
 * tern__aligned_alloc: size bytes (a multiple of align) aligned to align,
 * uninitialised, NULL on failure: C11's aligned_alloc on POSIX,
 * _aligned_malloc on Windows, whose blocks only _aligned_free may give
 * back. So every block from tern__calloc_aligned (fault.h) is freed with
 * tern__free_aligned, on every system.
 */
void *tern__aligned_alloc(size_t align, size_t size);
void tern__free_aligned(void *p);

#endif
