/*
 * The inbound queue: what other threads hand to the loop (posts, and
 * cancels by id), and the wake word they use to rouse it. inbound.c has
 * the protocol; this is a cds_wfcq of records, one per post or cancel.
 */
#ifndef TERN_INBOUND_H
#define TERN_INBOUND_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <urcu/wfcqueue.h>

#include "tern.h"

/*
 * A post carries its function, never NULL (tern_post refuses that), so a
 * record without one is a cancel: no kind field.
 *
 * Posts travel in runs (inbound_block.c): only a run's first record is
 * linked on the queue; the producer's later posts to the same loop sit
 * after it in its block, and `run` on the first record counts them and
 * the admission credit the producer took for the run. The loop closes a
 * run (TERN__RUN_CLOSED) once it stops growing (inbound.c); from then on
 * the word is the loop's, and the producer starts a new run.
 */
struct tern__inbound {
    struct cds_wfcq_node node;
    tern_fn fn; /* NULL: a cancel of u.cancel_id */
    union {
        void *arg;
        tern_id cancel_id;
    } u;
    _Atomic uint64_t run; /* a run's first record only: closed | credit << 32 | length */
};

#define TERN__RUN_CLOSED (UINT64_C(1) << 63)

static inline unsigned tern__run_length(uint64_t run)
{
    return (uint32_t)run;
}

static inline unsigned tern__run_credit(uint64_t run)
{
    return (unsigned)(run >> 32) & 0x7fffffffu;
}

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

/* A post after the first of its run: function and argument, no link. */
struct tern__post_entry {
    tern_fn fn;
    void *arg;
};

/* The n-th post of the run `in` heads, n >= 1 (the first is `in` itself). */
static inline const struct tern__post_entry *tern__run_entry(const struct tern__inbound *in,
                                                             unsigned n)
{
    return (const struct tern__post_entry *)(in + 1) + (n - 1);
}

/*
 * Post records and runs (inbound_block.c), carved from a block of the
 * producing thread's own; any thread's calls. `drains` is the loop's
 * runs_closed as the caller read it first: a run whose first record was
 * enqueued under another value has been, or is being, closed.
 *
 * append: add fn(arg) to the calling thread's open run to `loop`, within
 * the credit the run already holds; true when done (nothing to enqueue,
 * no wake: the run's first record is still ahead of the loop).
 * credit_wanted: how much admission credit the thread's next post to
 * `loop` should take, for the run it extends or starts (1 and up, within
 * the block).
 * push: with *credit freshly admitted, extend the open run (NULL, *rc 0)
 * or start a new run with fn(arg) first (its record, to enqueue); NULL
 * and *rc -ENOMEM when no record could be had (or an injected fault).
 * It may lower *credit to what the run can spend: the caller gives back
 * the rest.
 * run_free: the loop gives back a closed run of `length` posts, one
 * atomic step.
 */
bool tern__post_append(const tern_loop *loop, unsigned drains, tern_fn fn, void *arg);
unsigned tern__post_credit_wanted(const tern_loop *loop, unsigned drains);
struct tern__inbound *tern__post_push(const tern_loop *loop, unsigned drains, tern_fn fn, void *arg,
                                      unsigned *credit, int *rc);
/* After enqueueing the run push returned: the loop's runs_closed, read
 * after the enqueue. */
void tern__post_began(unsigned drains);
void tern__inbound_run_free(struct tern__inbound *in, unsigned length);
/* Whether a run of `length` posts has filled its block: its producer
 * can add no more to it. */
bool tern__run_full(const struct tern__inbound *in, unsigned length);
/* Give back the calling thread's block of post records, as its exit does:
 * its next post allocates a fresh one (runtime/seams.c). */
void tern__inbound_drop_block(void);
/* The process's post blocks, for tern__test_inbound_blocks (testing.h). */
struct tern__test_blocks;
void tern__inbound_blocks(struct tern__test_blocks *b);

#endif
