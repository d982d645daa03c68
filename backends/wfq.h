/*
 * The queue seam: the one set of names the runtime calls for its
 * cross-thread queue of posts and cancels (runtime/core/inbound.c). On
 * Linux and the BSDs the names are liburcu's cds_wfcq with the lock-free
 * head, as the fixed choices say; on Windows, where liburcu's headers do
 * not build, they are tern's own queue (mpsc.h). Everything here is a
 * static inline function, a typedef or a macro over the chosen queue, so
 * on Linux a call compiles to exactly the liburcu call it names (inline
 * where the including file defines _LGPL_SOURCE, as inbound.c does).
 *
 *   tern__wfq_head, tern__wfq_tail   the two halves of a queue
 *   tern__wfq_node                   embedded in each record; its `next`
 *                                    is the consumer's to reuse once the
 *                                    record is off the queue
 *   tern__wfq_link                   the type of `next`, for a list the
 *                                    consumer threads through it
 *   tern__wfq_init, tern__wfq_node_init
 *   tern__wfq_enqueue(h, t, n)       any thread, wait-free, a full
 *                                    barrier; true when the queue was empty
 *   tern__wfq_empty(h, t)            any thread, a snapshot
 *   tern__wfq_splice(dh, dt, sh, st) the one consumer: everything at once;
 *                                    false when there was nothing
 *   tern__wfq_for_each(h, t, n)      walk the consumer's own queue;
 *   tern__wfq_for_each_safe(h, t, n, next)  one whose body may free `n`
 */
#ifndef TERN_WFQ_H
#define TERN_WFQ_H

#include <stdbool.h>

/*
 * TERN_WFQ_OWN (a test build's -D, never a product one) puts tern's own
 * queue under the runtime on Linux too, so the runtime's own suites can
 * run on it.
 */
#if defined(_WIN32) || defined(TERN_WFQ_OWN)

#include "mpsc.h"

typedef struct tern__mpsc_head tern__wfq_head;
typedef struct tern__mpsc_tail tern__wfq_tail;
typedef struct tern__mpsc_node tern__wfq_node;
typedef struct tern__mpsc_node *_Atomic tern__wfq_link;

static inline void tern__wfq_init(tern__wfq_head *h, tern__wfq_tail *t)
{
    tern__mpsc_init(h, t);
}

static inline void tern__wfq_node_init(tern__wfq_node *n)
{
    tern__mpsc_node_init(n);
}

static inline bool tern__wfq_enqueue(tern__wfq_head *h, tern__wfq_tail *t, tern__wfq_node *n)
{
    return tern__mpsc_enqueue(h, t, n);
}

static inline bool tern__wfq_empty(tern__wfq_head *h, tern__wfq_tail *t)
{
    return tern__mpsc_empty(h, t);
}

static inline bool tern__wfq_splice(tern__wfq_head *dh, tern__wfq_tail *dt, tern__wfq_head *sh,
                                    tern__wfq_tail *st)
{
    return tern__mpsc_splice(dh, dt, sh, st);
}

#define tern__wfq_for_each(h, t, n) \
    for ((n) = tern__mpsc_first(h, t); (n) != NULL; (n) = tern__mpsc_next(t, n))

#define tern__wfq_for_each_safe(h, t, n, nx)                                              \
    for ((n) = tern__mpsc_first(h, t), (nx) = (n) != NULL ? tern__mpsc_next(t, n) : NULL; \
         (n) != NULL; (n) = (nx), (nx) = (n) != NULL ? tern__mpsc_next(t, n) : NULL)

#else

#include <urcu/wfcqueue.h>

typedef struct __cds_wfcq_head tern__wfq_head;
typedef struct cds_wfcq_tail tern__wfq_tail;
typedef struct cds_wfcq_node tern__wfq_node;
typedef struct cds_wfcq_node *tern__wfq_link;

static inline void tern__wfq_init(tern__wfq_head *h, tern__wfq_tail *t)
{
    __cds_wfcq_init(h, t);
}

static inline void tern__wfq_node_init(tern__wfq_node *n)
{
    cds_wfcq_node_init(n);
}

/* liburcu's enqueue says whether the queue was NOT empty. */
static inline bool tern__wfq_enqueue(tern__wfq_head *h, tern__wfq_tail *t, tern__wfq_node *n)
{
    return !cds_wfcq_enqueue(h, t, n);
}

static inline bool tern__wfq_empty(tern__wfq_head *h, tern__wfq_tail *t)
{
    return cds_wfcq_empty(h, t);
}

static inline bool tern__wfq_splice(tern__wfq_head *dh, tern__wfq_tail *dt, tern__wfq_head *sh,
                                    tern__wfq_tail *st)
{
    return __cds_wfcq_splice_blocking(dh, dt, sh, st) != CDS_WFCQ_RET_SRC_EMPTY;
}

#define tern__wfq_for_each(h, t, n) __cds_wfcq_for_each_blocking(h, t, n)
#define tern__wfq_for_each_safe(h, t, n, nx) __cds_wfcq_for_each_blocking_safe(h, t, n, nx)

#endif

#endif
