/*
 * The fault seam. Every allocation, thread creation and descriptor
 * creation in tern goes through here so a test can make the Nth such call
 * fail (tern__fault_arm). Disarmed, the cost is one relaxed load and a
 * branch (two loads for a file request's system call: the hold's flag
 * too); the stream and UDP seams are inline, so no call either.
 *
 * Tests reach these through the static library; they are not exported
 * from the shared one.
 */
#ifndef TERN_FAULT_H
#define TERN_FAULT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "os_thread.h"
#include "pages.h" /* tern__free_aligned, for tern__calloc_aligned's blocks */

enum tern__fault_site {
    TERN__FAULT_ALLOC = 1u << 0,  /* malloc, calloc, realloc */
    TERN__FAULT_THREAD = 1u << 1, /* tern__thread_start */
    TERN__FAULT_FD = 1u << 2,     /* eventfd, epoll_create, signalfd, socket, accept, pipe, open */
    TERN__FAULT_FS = 1u << 3,     /* each system call of a file request (runtime/fs*.c) */
    TERN__FAULT_NET = 1u << 4,    /* each system call of a UDP socket (runtime/net/udp*.c) */
    TERN__FAULT_STREAM = 1u << 5, /* each system call of a stream, listener or TTY (runtime/net/) */
    TERN__FAULT_ALL = 63u,
};

/* The sites armed now (0: disarmed). Read by the inline seams below;
 * hidden, so position-independent code reaches it directly, not through
 * the GOT: the disarmed check stays one load. */
extern __attribute__((visibility("hidden"))) _Atomic unsigned tern__fault_armed_mask;

/*
 * Make the nth checked call (1-based, counted over the sites in mask from
 * now on) fail, once. nth == 0 disarms. Checked calls are counted while
 * armed whether or not they fail, so a test can walk n = 1, 2, 3, ...
 * until tern__fault_fired() stays false.
 */
void tern__fault_arm(unsigned mask, uint64_t nth);
/* Whether the armed failure has been injected since the last arm. */
bool tern__fault_fired(void);

/* Called by the runtime at a site: true means "fail this call". */
bool tern__fault_hit(enum tern__fault_site site);

void *tern__malloc(size_t size);
void *tern__calloc(size_t n, size_t size);
void *tern__realloc(void *p, size_t size);
void tern__free(void *p);
/*
 * Zeroed memory aligned to `align` (a power of two; types with alignas).
 * Free it with tern__free_aligned (pages.h), not free: Windows keeps
 * aligned blocks apart (_aligned_free).
 */
void *tern__calloc_aligned(size_t align, size_t size);
/*
 * n zeroed elements whose pages cost nothing until touched: large arrays
 * (a ring sized for 2^31 credits) come straight from anonymous mmap, so
 * neither calloc's memset (which MALLOC_PERTURB_ forces even for mmapped
 * chunks) nor anything else writes them up front; small ones from calloc.
 * Free with tern__free_lazy and the same n and size. NULL on failure.
 */
void *tern__calloc_lazy(size_t n, size_t size);
void tern__free_lazy(void *p, size_t n, size_t size);

/*
 * Create a thread with every signal blocked (so signalfd and liburcu's
 * helpers see the signals on the loop thread only). Returns 0 or a
 * negative errno (-EAGAIN on injection).
 */
int tern__thread_create(tern__thread_t *t, void *(*fn)(void *), void *arg);

/*
 * Called just before a descriptor is created: 0 to go ahead, or -EMFILE
 * when a failure is injected (so nothing has to be closed again).
 */
int tern__fd_fault(void);

/*
 * Called just before each system call of a file request: 0 to go ahead,
 * or the negative errno set with tern__fault_fs_errno (-EIO unless set)
 * when a failure is injected, so a test can make any step of a request
 * fail with ENOSPC, EINTR or whatever it needs.
 */
int tern__fs_fault(void);
void tern__fault_fs_errno(int err);
/*
 * The same site for a call the kernel made through a backend (TERN__DO_FILE),
 * asked when its completion comes: 0, or the errno to report instead of
 * what the call did. Never holds: the loop's thread asks.
 */
int tern__fs_fault_made(void);

/*
 * Hold the next file-request system call inside the seam, before it is
 * made, until tern__fault_fs_release(): a test's way to keep a request
 * inside a step for as long as it likes, as a call that waits on a peer
 * would, on any kind of file. One hold at a time; release also disarms a
 * hold that nothing reached. tern__fault_fs_held says whether a call is
 * held now.
 */
void tern__fault_fs_hold(void);
/* The same hold, on the call that comes after `calls` more were let through
 * (tern__fault_fs_hold is tern__fault_fs_hold_after(0)). */
void tern__fault_fs_hold_after(unsigned calls);
bool tern__fault_fs_held(void);
void tern__fault_fs_release(void);

/*
 * Called just before each system call of a stream, a listener or a TTY
 * (runtime/net/ outside udp*.c: the reads, writes, descriptor passing,
 * accept, connect and its SO_ERROR, shutdown, bind, listen, the TCP
 * options, the peer's credentials, tcgetattr, tcsetattr and TIOCGWINSZ):
 * 0 to go ahead, or the same chosen errno as the UDP site's. A test so
 * makes a write meet -EAGAIN (and queue), a read meet -ECONNRESET, an
 * accept meet -ECONNABORTED, or any of them fail with -ENOBUFS.
 *
 * Inline, because a stream's read and write are the hot path: disarmed,
 * the seam is one relaxed load and a branch, no call.
 */
int tern__stream_fault_slow(void);
/* The errno both network sites inject from now on (-ENOBUFS by default). */
void tern__fault_net_errno(int err);

/* Whether a test armed this site: the whole disarmed cost of a seam. */
static inline bool tern__fault_site_armed(enum tern__fault_site site)
{
    return __builtin_expect(
        (atomic_load_explicit(&tern__fault_armed_mask, memory_order_relaxed) & site) != 0, 0);
}

static inline int tern__stream_fault(void)
{
    return tern__fault_site_armed(TERN__FAULT_STREAM) ? tern__stream_fault_slow() : 0;
}

/*
 * Called just before each system call of a UDP socket (bind, setsockopt,
 * connect, the receives and the sends): 0 to go ahead, or the negative
 * errno set with tern__fault_net_errno when a failure is injected. Unless
 * set, -ENOBUFS: an error every one of those calls can really return, so
 * each error path is walked with a cause it must handle. Inline like the
 * stream's: a datagram's receive and send are a hot path too.
 */
int tern__net_fault_slow(void);

static inline int tern__net_fault(void)
{
    return tern__fault_site_armed(TERN__FAULT_NET) ? tern__net_fault_slow() : 0;
}

#endif
