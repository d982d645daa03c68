/*
 * The inbound queue: what other threads hand to the loop (posts, and
 * cancels by id), and the wake word they use to rouse it. inbound.c has
 * the protocol; this is a cds_wfcq of records, one per post or cancel.
 */
#ifndef TERN_INBOUND_H
#define TERN_INBOUND_H

#include <pthread.h>
#include <stdbool.h>

#include <urcu/wfcqueue.h>

#include "tern.h"

/*
 * A post carries its function, never NULL (tern_post refuses that), so a
 * record without one is a cancel: no kind field, and a post record is
 * three words.
 */
struct tern__inbound {
    struct cds_wfcq_node node;
    tern_fn fn; /* NULL: a cancel of u.cancel_id */
    union {
        void *arg;
        tern_id cancel_id;
    } u;
};

static inline bool tern__inbound_is_cancel(const struct tern__inbound *in)
{
    return in->fn == NULL;
}

/*
 * Cancel requests from other threads take their records from here, never
 * from malloc: a cancel must not fail for want of memory, which is when
 * it is needed most. The records are reserved with the loop; their pages
 * are touched only as they are first used (tern__calloc_lazy), and the
 * loop gives each one back as it resolves the request.
 */
#define TERN__CANCEL_RESERVE 65536u
struct tern__cancel_reserve {
    pthread_mutex_t lock;
    struct tern__inbound *nodes;   /* TERN__CANCEL_RESERVE records */
    struct cds_wfcq_node *spare;   /* given back, linked through node.next */
    unsigned carved;               /* nodes[0..carved) have been handed out */
};
/* 0 or -ENOMEM (tern_loop_new's failure). */
int tern__cancel_reserve_init(struct tern__cancel_reserve *r);
/* After the loop's last drain: every record has been given back. */
void tern__cancel_reserve_destroy(struct tern__cancel_reserve *r);
/* A record for one foreign cancel, or NULL when all of them are waiting. */
struct tern__inbound *tern__cancel_node_get(struct tern__cancel_reserve *r);
/* Give a record back once its cancel is resolved. */
void tern__cancel_node_put(struct tern__cancel_reserve *r, struct tern__inbound *in);

/* The wake word: see wake.c for the protocol. */
enum { TERN__WAKE_RUNNING = 0, TERN__WAKE_PARKING = 1, TERN__WAKE_NOTIFIED = 2 };

/*
 * Wake the loop if it is parking or asleep (any thread, after publishing).
 * True when this call wrote the wake fd: the loop was asleep.
 */
bool tern__loop_wake(tern_loop *loop);
/*
 * The loop's side of a wake: set the word to RUNNING and, if a producer
 * had notified, consume its wake-up (an eventfd or pipe write, or the
 * backend's own). Called when a thread claims the loop and after every
 * backend wait.
 */
void tern__loop_awake(tern_loop *loop);
/* Whether the inbound queue has anything (any thread; a snapshot). */
bool tern__inbound_pending(tern_loop *loop);
/* Step 1's first half: run posts, then resolve cancels. */
void tern__inbound_drain(tern_loop *loop);
/* Nothing queued and no producer on its way in (teardown's last check). */
bool tern__inbound_quiet(tern_loop *loop);

/*
 * Post records (inbound_block.c), carved from a block of the producing
 * thread's own: node_alloc is any thread's, NULL when out of memory (or
 * an injected allocation fault). The loop gives records back once their
 * posts are off the queue, a run at a time: nodes_free gives back `in`
 * and n - 1 more records of the same block (same_block says which are),
 * with one atomic step for the run.
 */
struct tern__inbound *tern__inbound_node_alloc(void);
bool tern__inbound_same_block(const struct tern__inbound *a, const struct tern__inbound *b);
void tern__inbound_nodes_free(struct tern__inbound *in, unsigned n);
/* Give back the calling thread's block of post records, as its exit does:
 * its next post allocates a fresh one (runtime/seams.c). */
void tern__inbound_drop_block(void);

#endif
