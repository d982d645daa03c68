/*
 * Post records, carved from per-producer blocks (inbound.h): the
 * allocator behind tern_post, so a post costs no malloc and the loop's
 * free of it no cross-thread free; and the runs a producer's posts
 * travel in, so a burst pays the shared lines once per run.
 */
#include <errno.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "check.h"
#include "fault.h"
#include "inbound_block.h"
#include "os_thread.h"
#include "platform.h"
#include "testing.h"

/*
 * A post is allocated by its producer and freed by the loop. Through
 * malloc that is a cross-thread free per post, which in glibc ends in the
 * producer's arena lock. Instead each producer thread carves records from
 * a 4 KiB block of its own, in 16-byte units: a run's first record (queue
 * link, function, argument, run word) takes two, every later post of the
 * run one (function and argument). The loop gives a run's units back with
 * one decrement of the block's count, and whoever drops the count to zero
 * retires the block. The producer holds one extra count while it carves.
 *
 * A run starts on a line of its own: the loop reads one run's posts while
 * the producer writes the next run's first record, and on a shared line
 * each write would take the line from the other's cache. The units
 * skipped to get there are the producer's, given back with its hold.
 */
#define BLOCK_SIZE 4096u
#define UNIT sizeof(struct tern__post_entry)
#define BLOCK_UNITS ((BLOCK_SIZE - TERN_CACHELINE) / UNIT)
#define HEAD_UNITS (sizeof(struct tern__inbound) / UNIT)

/*
 * Blocks come from slabs of SLAB_BLOCKS, mapped with their pages present
 * (tern__map_populated): a burst that outruns the loop needs fresh blocks
 * as fast as it posts, and through malloc each one cost a page fault or
 * two (aligned_alloc's header sits on the page before) and the arena's
 * lock. A slab is given back whole, once none of its blocks is out and
 * the spare list is past its bound.
 */
#define SLAB_BLOCKS 16u

struct node_block {
    alignas(TERN_CACHELINE) _Atomic unsigned refs;
    unsigned slab_out;       /* a slab's first block: its blocks not on the spare list */
    struct node_block *slab; /* the first block of this one's slab */
    struct node_block *spare_next, *spare_prev; /* on the spare list only */
    alignas(TERN_CACHELINE) struct tern__post_entry units[BLOCK_UNITS];
};
_Static_assert(sizeof(struct node_block) <= BLOCK_SIZE, "a node block fits its alignment");
/* The count the loop decrements for every run it frees has its line to
 * itself: the producer carving the next records never shares it. */
_Static_assert(offsetof(struct node_block, units) == TERN_CACHELINE,
               "a block's count is alone on the first line");
/* A run's first record is a whole number of units, so the posts after it
 * follow it unit by unit; on a 64-bit machine a block carries 252 posts
 * of one run, four to a line. */
_Static_assert(sizeof(struct tern__inbound) % UNIT == 0 && alignof(struct tern__inbound) <= UNIT,
               "a run's first record is whole units");

#define TLS __attribute__((tls_model("initial-exec")))
static _Thread_local struct node_block *carving TLS;
static _Thread_local unsigned carved TLS; /* units of `carving` handed out */
/* Units of `carving` skipped to start a run on a fresh line: the
 * producer's to give back, with its hold, when it retires the block. */
static _Thread_local unsigned skipped TLS;
static tern__tls_key_t carving_key;
static tern__once_t carving_once = TERN__ONCE_INIT;

/*
 * Spent blocks wait on a process-wide list for the next producer that
 * needs one: one lock per block, not per post. The list keeps what a
 * backlog of about 250 k posts needs (SPARE_MAX, 4 MiB): past its bound,
 * a slab whose blocks are all on it is unmapped, so once every block is
 * back the list holds at most the bound and one slab more. A process
 * that has to map a slab again after unmapping one has bursts larger than
 * the bound, and would pay for mapping and unmapping them every time:
 * the bound then rises to what is mapped, up to SPARE_CEILING (64 MiB,
 * about 4 M posts). The list is doubly linked, so a slab's blocks can
 * leave it from wherever they sit.
 */
#define SPARE_MAX 1024u
#define SPARE_CEILING 16384u
static tern__mutex_t spare_lock = TERN__MUTEX_INIT;
static struct node_block *spare;
static unsigned spare_len;
static unsigned spare_bound = SPARE_MAX;
static unsigned slabs_mapped;
static bool slab_unmapped; /* ever */

static struct node_block *slab_block(struct node_block *slab, unsigned i)
{
    return (struct node_block *)((char *)slab + (size_t)i * BLOCK_SIZE);
}

/* The spare list, under spare_lock. */
static void spare_push(struct node_block *b)
{
    b->spare_prev = NULL;
    b->spare_next = spare;
    if (spare != NULL)
        spare->spare_prev = b;
    spare = b;
    spare_len++;
}

static void spare_unlink(struct node_block *b)
{
    if (b->spare_prev != NULL)
        b->spare_prev->spare_next = b->spare_next;
    else
        spare = b->spare_next;
    if (b->spare_next != NULL)
        b->spare_next->spare_prev = b->spare_prev;
    spare_len--;
}

/* Take a slab none of whose blocks is out off the list; the caller
 * unmaps it once the lock is dropped. */
static struct node_block *slab_retire(struct node_block *slab)
{
    for (unsigned i = 0; i < SLAB_BLOCKS; i++)
        spare_unlink(slab_block(slab, i));
    slabs_mapped--;
    slab_unmapped = true;
    return slab;
}

static void block_release(struct node_block *b, unsigned n)
{
    if (atomic_fetch_sub_explicit(&b->refs, n, memory_order_acq_rel) != n)
        return;
    struct node_block *gone = NULL;
    tern__mutex_lock(&spare_lock);
    spare_push(b);
    if (--b->slab->slab_out == 0 && spare_len > spare_bound)
        gone = slab_retire(b->slab);
    tern__mutex_unlock(&spare_lock);
    if (gone != NULL)
        tern__unmap(gone, (size_t)SLAB_BLOCKS * BLOCK_SIZE);
}

static struct node_block *block_get(void)
{
    tern__mutex_lock(&spare_lock);
    struct node_block *b = spare;
    if (b != NULL) {
        spare_unlink(b);
        b->slab->slab_out++;
    }
    tern__mutex_unlock(&spare_lock);
    if (b != NULL)
        return b;
    struct node_block *slab = tern__map_populated((size_t)SLAB_BLOCKS * BLOCK_SIZE);
    if (slab == NULL)
        return NULL;
    for (unsigned i = 0; i < SLAB_BLOCKS; i++)
        slab_block(slab, i)->slab = slab;
    slab->slab_out = 1; /* the first block, returned */
    tern__mutex_lock(&spare_lock);
    unsigned mapped = ++slabs_mapped * SLAB_BLOCKS;
    if (slab_unmapped && spare_bound < mapped)
        spare_bound = mapped < SPARE_CEILING ? mapped : SPARE_CEILING;
    for (unsigned i = SLAB_BLOCKS - 1; i > 0; i--)
        spare_push(slab_block(slab, i));
    tern__mutex_unlock(&spare_lock);
    return slab;
}

/* fork(): never let the child inherit the spare lock held by a vanished thread. */
static void spare_before_fork(void)
{
    tern__mutex_lock(&spare_lock);
}

static void spare_after_fork(void)
{
    tern__mutex_unlock(&spare_lock);
}

static void run_forget(void);

/* The child's loops are new: its one thread's open run, a run to a loop
 * of the parent's, must never be extended there. */
static void spare_after_fork_child(void)
{
    tern__mutex_unlock(&spare_lock);
    run_forget();
}

__attribute__((constructor)) static void spare_fork_handlers(void)
{
    tern__atfork(spare_before_fork, spare_after_fork, spare_after_fork_child);
}

/*
 * The thread's open run: its first record, the loop it goes to, and its
 * word as this thread last wrote it. The run's posts are the last units
 * carved from `carving`, so the next unit carved would extend it; a new
 * block ends that (open_head = NULL).
 */
static _Thread_local struct tern__inbound *open_head TLS;
static _Thread_local const tern_loop *open_loop TLS;
static _Thread_local uint64_t open_word TLS;
/* The loop's runs_closed, read after the run's first record was enqueued. */
static _Thread_local unsigned open_drains TLS;
/* Credit the thread's next run or extension takes: doubles while its runs
 * fill, and follows the length of the last run the loop closed. */
#define CREDIT_MAX 64u
static _Thread_local unsigned credit_want TLS = 1;

static void run_forget(void)
{
    open_head = NULL;
}

/* Thread exit: give back the producer's hold and the units never carved. */
static void carving_exit(void *arg)
{
    (void)arg;
    if (carving != NULL)
        block_release(carving, 1 + skipped + (unsigned)(BLOCK_UNITS - carved));
    carving = NULL;
    open_head = NULL;
}

static void carving_init(void)
{
    tern__tls_create(&carving_key, carving_exit);
}

/* Where the next run's first record would go: the next line's first unit. */
#define LINE_UNITS (TERN_CACHELINE / UNIT)
static unsigned head_at(void)
{
    return (carved + LINE_UNITS - 1) & ~(LINE_UNITS - 1);
}

/*
 * The lines a producer fills are mostly ones the loop read a few runs ago
 * (a spent block comes back through the spare stack), so each write to a
 * fresh line must first take it from the loop's cache. The compare-and-
 * swap that counts every post in waits for that write, so the exchange
 * would stall the producer once a line; asked for PREFETCH_UNITS ahead
 * (four lines), it runs while the producer fills the lines before.
 */
#define PREFETCH_UNITS (4 * LINE_UNITS)
static void prefetch_ahead(unsigned unit)
{
    if (unit + PREFETCH_UNITS < BLOCK_UNITS)
        tern__prefetch_write(&carving->units[unit + PREFETCH_UNITS]);
}

/* A run's first record, from a fresh block when this one has no room. */
static struct tern__inbound *head_alloc(void)
{
    if (TERN_UNLIKELY(carving == NULL || head_at() + HEAD_UNITS > BLOCK_UNITS)) {
        if (tern__fault_hit(TERN__FAULT_ALLOC))
            return NULL;
        struct node_block *b = block_get();
        if (b == NULL)
            return NULL;
        atomic_init(&b->refs, (unsigned)BLOCK_UNITS + 1);
        tern__once(&carving_once, carving_init);
        if (carving != NULL)
            block_release(carving, 1 + skipped + (unsigned)(BLOCK_UNITS - carved));
        else
            tern__tls_set(carving_key, b); /* any non-NULL value arms the destructor */
        carving = b;
        carved = 0;
        skipped = 0;
        open_head = NULL;
        /* The first line is written now; the fifth is prefetch_ahead's. */
        for (unsigned u = LINE_UNITS; u < PREFETCH_UNITS; u += LINE_UNITS)
            tern__prefetch_write(&carving->units[u]);
    }
    unsigned at = head_at();
    prefetch_ahead(at);
    skipped += at - carved;
    carved = at;
    struct tern__inbound *in = (struct tern__inbound *)&carving->units[carved];
    carved += HEAD_UNITS;
    return in;
}

void tern__inbound_drop_block(void)
{
    carving_exit(NULL);
}

void tern__inbound_blocks(struct tern__test_blocks *b)
{
    tern__mutex_lock(&spare_lock);
    b->spare = spare_len;
    b->mapped = slabs_mapped * SLAB_BLOCKS;
    b->bound = spare_bound;
    tern__mutex_unlock(&spare_lock);
    b->spare_max = SPARE_MAX;
    b->spare_ceiling = SPARE_CEILING;
    b->slab = SLAB_BLOCKS;
}

static struct node_block *block_of(const void *p)
{
    return (struct node_block *)((uintptr_t)p & ~(uintptr_t)(BLOCK_SIZE - 1));
}

void tern__inbound_run_free(struct tern__inbound *in, unsigned length)
{
    block_release(block_of(in), (unsigned)HEAD_UNITS + length - 1);
}

bool tern__run_full(const struct tern__inbound *in, unsigned length)
{
    const struct node_block *b = block_of(in);
    size_t at = (size_t)((const struct tern__post_entry *)(const void *)in - b->units);
    return at + HEAD_UNITS + length - 1 >= BLOCK_UNITS;
}

/*
 * Runs. A producer's first post to a loop takes admission credit for
 * several (tern_post), is linked on the loop's queue and wakes it; its
 * next posts to that loop go into the units after it, and a
 * compare-and-swap on the first record's word counts each one in. That
 * line is the producer's own until the loop takes the queue and closes
 * the run with one atomic OR; the producer's next compare-and-swap then
 * fails, and it starts a new run. So a post made while the loop is behind
 * pays neither the queue's shared tail, nor the shared admission count,
 * nor the wake check; only the run's first post does.
 *
 * The compare-and-swap decides every race with the close: a post counted
 * in before it is run by that drain, one after it starts the next run.
 */
static unsigned clamp_credit(unsigned n)
{
    return n < 1 ? 1 : n > CREDIT_MAX ? CREDIT_MAX : n;
}

/*
 * Whether the open run goes to `loop` and may take the next unit. A drain
 * since it began has closed it, or is about to: leave it without a
 * compare-and-swap on a line the loop has taken (the close gives back
 * its unspent credit either way), so a thread that posts one at a time
 * pays no miss for its last run.
 */
static bool run_open_to(const tern_loop *loop, unsigned drains)
{
    if (open_head == NULL || open_loop != loop || carved >= BLOCK_UNITS)
        return false;
    if (drains != open_drains) {
        credit_want = clamp_credit(tern__run_length(open_word));
        open_head = NULL;
        return false;
    }
    return true;
}

/* Count the unit after the run's last in, adding `credit`; false when the
 * loop closed the run (its unspent credit went back with the close). */
static bool run_extend(tern_fn fn, void *arg, unsigned credit)
{
    if (carved % LINE_UNITS == 0)
        prefetch_ahead(carved);
    struct tern__post_entry *e = &carving->units[carved];
    e->fn = fn;
    e->arg = arg;
    uint64_t w = open_word;
    uint64_t next = w + ((uint64_t)credit << 32) + 1;
    /* Release: the entry's fields before the count that shows it. */
    if (!atomic_compare_exchange_strong_explicit(&open_head->run, &w, next, memory_order_release,
                                                 memory_order_relaxed)) {
        credit_want = clamp_credit(tern__run_length(w));
        open_head = NULL;
        return false;
    }
    carved++;
    open_word = next;
    return true;
}

bool tern__post_append(const tern_loop *loop, unsigned drains, tern_fn fn, void *arg)
{
    return run_open_to(loop, drains) && tern__run_length(open_word) < tern__run_credit(open_word) &&
           run_extend(fn, arg, 0);
}

unsigned tern__post_credit_wanted(const tern_loop *loop, unsigned drains)
{
    unsigned room; /* posts that fit where this one goes */
    if (run_open_to(loop, drains))
        room = (unsigned)(BLOCK_UNITS - carved);
    else if (carving != NULL && head_at() + HEAD_UNITS <= BLOCK_UNITS)
        room = (unsigned)(BLOCK_UNITS - head_at() - HEAD_UNITS + 1);
    else
        room = (unsigned)(BLOCK_UNITS - HEAD_UNITS + 1);
    return credit_want < room ? credit_want : room;
}

struct tern__inbound *tern__post_push(const tern_loop *loop, unsigned drains, tern_fn fn, void *arg,
                                      unsigned *credit, int *rc)
{
    *rc = 0;
    if (run_open_to(loop, drains) && run_extend(fn, arg, *credit)) {
        credit_want = clamp_credit(2 * credit_want);
        return NULL;
    }
    struct tern__inbound *in = head_alloc();
    if (in == NULL) {
        *rc = -ENOMEM;
        return NULL;
    }
    /* Credit taken to extend a run the loop had just closed: a new run's
     * first record takes one unit more, so the block may hold one post
     * fewer than was counted for. Keep no credit that cannot be spent. */
    unsigned room = 1 + (unsigned)(BLOCK_UNITS - carved);
    if (*credit > room)
        *credit = room;
    in->fn = fn;
    in->u.arg = arg;
    /* Published by the queue's enqueue, a full barrier. */
    uint64_t w = ((uint64_t)*credit << 32) | 1;
    atomic_store_explicit(&in->run, w, memory_order_relaxed);
    open_head = in;
    open_loop = loop;
    open_word = w;
    return in;
}

void tern__post_began(unsigned drains)
{
    open_drains = drains;
}
