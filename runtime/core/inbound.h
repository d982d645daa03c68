/*
 * The inbound queue: what other threads hand to the loop (posts, and
 * cancels by id), and the wake word they use to rouse it. inbound.c has
 * the protocol; this is a wait-free queue (wfq.h) of records, one per post or cancel.
 */
#ifndef TERN_INBOUND_H
#define TERN_INBOUND_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "inbound_block.h"
#include "os_thread.h"
#include "tern.h"

/*
 * Cancel requests from other threads take their records from here, never
 * from malloc: a cancel must not fail for want of memory, which is when
 * it is needed most. The records are reserved with the loop; their pages
 * are touched only as they are first used (tern__calloc_lazy), and the
 * loop gives each one back as it resolves the request.
 */
#define TERN__CANCEL_RESERVE 65536u
struct tern__cancel_reserve {
    tern__mutex_t lock;
    struct tern__inbound *nodes; /* TERN__CANCEL_RESERVE records */
    tern__wfq_node *spare;       /* given back, linked through node.next */
    unsigned carved;             /* nodes[0..carved) have been handed out */
};
/* 0 or -ENOMEM (tern_loop_new's failure). */
int tern__cancel_reserve_init(struct tern__cancel_reserve *r);
/* After the loop's last drain: every record has been given back. */
void tern__cancel_reserve_destroy(struct tern__cancel_reserve *r);
/* A record for one foreign cancel, or NULL when all of them are waiting. */
struct tern__inbound *tern__cancel_node_get(struct tern__cancel_reserve *r);
/* Give a record back once its cancel is resolved. */
void tern__cancel_node_put(struct tern__cancel_reserve *r, struct tern__inbound *in);

/*
 * A run the loop has taken off the queue but not closed: its producer
 * may still be adding to it, and every drain runs what it added
 * (inbound.c). `seen` posts of it have run; `word` is the run word as
 * this drain read it.
 */
#define TERN__OPEN_RUNS 8u
struct tern__open_run {
    struct tern__inbound *head;
    uint64_t word;
    unsigned seen;
};

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
/*
 * Whether the inbound queue has anything, or the loop holds a run open
 * (a snapshot; the open runs are the loop's own, so only its thread, or
 * one ordered after it by a lock, may ask about another's loop).
 */
bool tern__inbound_pending(tern_loop *loop);
/* Step 1's first half: run posts, then resolve cancels. */
void tern__inbound_drain(tern_loop *loop);
/*
 * The loop is about to be let go (its run or run_once returns), or to
 * park with nothing but open runs (turn.c): close the runs it kept open,
 * so a producer's next post starts a run and wakes whoever watches the
 * loop. Posts counted into them before the close wait for the next
 * drain (tern__inbound_pending stays true).
 */
void tern__inbound_release(tern_loop *loop);
/* Nothing queued and no producer on its way in (teardown's last check). */
bool tern__inbound_quiet(tern_loop *loop);

#endif
