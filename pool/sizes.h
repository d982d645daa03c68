/*
 * The pool's fixed sizes, which several of its files' arrays are built
 * from. A header of its own, below every file that sizes an array by it.
 */
#ifndef TERN_POOL_SIZES_H
#define TERN_POOL_SIZES_H

#define TERN__MAX_THREADS 1024
#define TERN__MAX_OVERFLOW 64 /* overflow workers alive at once, at most */
/* Per-worker arrays: bounded workers first, overflow workers from TERN__MAX_THREADS. */
#define TERN__WORKER_SLOTS (TERN__MAX_THREADS + TERN__MAX_OVERFLOW)

#endif
