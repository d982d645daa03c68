/*
 * The post record and its runs (inbound_block.c): what a producer writes
 * and the loop reads, and the blocks each producing thread carves them
 * from. The run's helpers are inline: the loop reads them per post.
 */
#ifndef TERN_INBOUND_BLOCK_H
#define TERN_INBOUND_BLOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "tern.h"
#include "wfq.h"

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
    tern__wfq_node node;
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
 * its next post allocates a fresh one (runtime/loop/seams.c). */
void tern__inbound_drop_block(void);
/* The process's post blocks, for tern__test_inbound_blocks (testing.h). */
struct tern__test_blocks;
void tern__inbound_blocks(struct tern__test_blocks *b);

#endif
