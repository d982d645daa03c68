/*
 * tern's own wait-free queue: many producers, one consumer, C11 atomics
 * only, so it builds wherever liburcu does not (mingw-w64). It has the
 * shape of liburcu's cds_wfcq with a lock-free head, which is what the
 * runtime uses on Linux and the BSDs: wfq.h picks one or the other, and
 * the runtime names only wfq.h's calls (docs/design.md, "The OS seam").
 *
 * A queue is a head holding a stub node and a tail pointing at the last
 * node, or at the stub when the queue is empty. The head and tail are
 * separate objects so a caller can put them on separate cache lines.
 *
 * Producers (any number, any thread): tern__mpsc_enqueue, wait-free. It is
 * one exchange on the tail and one store linking the node behind the old
 * tail; it reports whether the queue was empty, exactly: true for the
 * enqueue whose exchange found the stub, which is the first node the
 * consumer's next splice takes.
 *
 * The consumer (one thread at a time; a caller that hands the role over
 * orders the hand-over itself): tern__mpsc_splice takes everything at once
 * into a queue of its own, and tern__mpsc_first / tern__mpsc_next walk it.
 * Both may wait: a producer preempted between its exchange and its link
 * store leaves the node before it unlinked for that long, and the walk
 * cannot step past the gap. That is the "blocking" of liburcu's
 * __cds_wfcq_splice_blocking; it waits for a few instructions of a running
 * producer, or a time slice of a preempted one.
 *
 * Ordering: an enqueue is a full barrier (a caller reads a wake word after
 * it and relies on that: wake.h), and everything written to a node before
 * its enqueue is visible to the consumer that reaches it through the walk.
 */
#ifndef TERN_MPSC_H
#define TERN_MPSC_H

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

struct tern__mpsc_node {
    /*
     * The link, written once by the producer that enqueues the node after
     * this one. The consumer may reuse it for a list of its own once the
     * node is off the queue (plain assignments are atomic stores then).
     */
    struct tern__mpsc_node *_Atomic next;
};

struct tern__mpsc_head {
    struct tern__mpsc_node stub;
};

struct tern__mpsc_tail {
    struct tern__mpsc_node *_Atomic last;
};

static inline void tern__mpsc_init(struct tern__mpsc_head *h, struct tern__mpsc_tail *t)
{
    atomic_init(&h->stub.next, NULL);
    atomic_init(&t->last, &h->stub);
}

/* Before every enqueue of a node: it is the last one, so it has no next. */
static inline void tern__mpsc_node_init(struct tern__mpsc_node *n)
{
    atomic_store_explicit(&n->next, NULL, memory_order_relaxed);
}

/*
 * The two halves of an enqueue. A test holds a producer between them to
 * make the consumer meet an unlinked node; nothing else calls them apart.
 * claim: the node becomes the tail; returns the node it follows.
 */
static inline struct tern__mpsc_node *tern__mpsc_claim(struct tern__mpsc_tail *t,
                                                       struct tern__mpsc_node *n)
{
    /*
     * seq_cst: releases the node's contents and the NULL link written
     * before (paired with the acquire in link_wait, through the link the
     * consumer follows), and is one total-order point among enqueues and
     * the consumer's exchange in splice.
     */
    struct tern__mpsc_node *prev = atomic_exchange_explicit(&t->last, n, memory_order_seq_cst);
    /*
     * The caller reads a wake word next and needs this enqueue to be a full
     * barrier before that load (wake.h, the Dekker pattern against the
     * loop's parking store). A seq_cst exchange orders later seq_cst
     * accesses only; the fence orders every later load, as liburcu's
     * exchange does.
     */
    atomic_thread_fence(memory_order_seq_cst);
    return prev;
}

/* link: make `n` reachable from the node it follows. */
static inline void tern__mpsc_link(struct tern__mpsc_node *prev, struct tern__mpsc_node *n)
{
    /* Release: pairs with the acquire in link_wait and tern__mpsc_next. */
    atomic_store_explicit(&prev->next, n, memory_order_release);
}

/* Any thread. True when the queue was empty before this node. */
static inline bool tern__mpsc_enqueue(struct tern__mpsc_head *h, struct tern__mpsc_tail *t,
                                      struct tern__mpsc_node *n)
{
    struct tern__mpsc_node *prev = tern__mpsc_claim(t, n);
    tern__mpsc_link(prev, n);
    return prev == &h->stub;
}

/*
 * A snapshot, any thread: nothing linked and nothing claimed. seq_cst loads
 * (plain loads on x86) so a consumer that has just published that it is
 * about to sleep sees an enqueue whose barrier came first (wake.c).
 */
static inline bool tern__mpsc_empty(struct tern__mpsc_head *h, struct tern__mpsc_tail *t)
{
    return atomic_load_explicit(&h->stub.next, memory_order_seq_cst) == NULL &&
           atomic_load_explicit(&t->last, memory_order_seq_cst) == &h->stub;
}

/*
 * The link after `n`, which a producer has claimed but may not have
 * written yet: wait for it. Yielding, not spinning: on a machine with
 * fewer cores than threads the producer may need this CPU to finish.
 */
static inline struct tern__mpsc_node *tern__mpsc_link_wait(struct tern__mpsc_node *n)
{
    struct tern__mpsc_node *next;
    /* Acquire: pairs with the release in tern__mpsc_link. */
    while ((next = atomic_load_explicit(&n->next, memory_order_acquire)) == NULL)
        sched_yield();
    return next;
}

/*
 * The consumer: move everything in the source queue to the end of `dh/dt`
 * (a queue of the consumer's own, or any queue: the append is an enqueue
 * of the whole chain). False when the source was empty. Only one thread
 * consumes the source at a time.
 */
static inline bool tern__mpsc_splice(struct tern__mpsc_head *dh, struct tern__mpsc_tail *dt,
                                     struct tern__mpsc_head *sh, struct tern__mpsc_tail *st)
{
    (void)dh;
    if (tern__mpsc_empty(sh, st))
        return false;
    /* Not empty: a node is linked behind the stub, or about to be. */
    struct tern__mpsc_node *first = tern__mpsc_link_wait(&sh->stub);
    /*
     * The stub is cleared before the tail goes back to it: the next
     * producer to find the stub links behind it, after this store (the
     * exchange below releases it; that producer's exchange reads ours).
     */
    atomic_store_explicit(&sh->stub.next, NULL, memory_order_relaxed);
    struct tern__mpsc_node *last =
        atomic_exchange_explicit(&st->last, &sh->stub, memory_order_seq_cst);
    tern__mpsc_link(atomic_exchange_explicit(&dt->last, last, memory_order_seq_cst), first);
    return true;
}

/* The consumer's walk of its own queue: its first node, or NULL. */
static inline struct tern__mpsc_node *tern__mpsc_first(struct tern__mpsc_head *h,
                                                       struct tern__mpsc_tail *t)
{
    return tern__mpsc_empty(h, t) ? NULL : tern__mpsc_link_wait(&h->stub);
}

/* The node after `n` in the consumer's queue, or NULL after the last. */
static inline struct tern__mpsc_node *tern__mpsc_next(struct tern__mpsc_tail *t,
                                                      struct tern__mpsc_node *n)
{
    if (atomic_load_explicit(&t->last, memory_order_relaxed) == n)
        return NULL;
    return tern__mpsc_link_wait(n);
}

#endif
