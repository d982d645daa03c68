/*
 * Post records, carved from per-producer blocks (inbound.h): the
 * allocator behind tern_post, so a post costs no malloc and the loop's
 * free of it no cross-thread free.
 */
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>

#include "check.h"
#include "fault.h"
#include "inbound.h"
#include "platform.h"
#include "testing.h"

/*
 * A post is allocated by its producer and freed by the loop. Through
 * malloc that is a cross-thread free per post, which in glibc ends in the
 * producer's arena lock. Instead each producer thread carves nodes from a
 * 4 KiB block of its own; the loop releases a node by one decrement of the
 * block's count, and whoever drops the count to zero frees the block. The
 * producer holds one extra count while it still carves from the block.
 */
#define BLOCK_SIZE 4096u
#define BLOCK_NODES ((BLOCK_SIZE - TERN_CACHELINE) / sizeof(struct tern__inbound))

struct node_block {
    alignas(TERN_CACHELINE) _Atomic unsigned refs;
    alignas(TERN_CACHELINE) struct tern__inbound nodes[BLOCK_NODES];
};
_Static_assert(sizeof(struct node_block) <= BLOCK_SIZE, "a node block fits its alignment");
/* The count the loop decrements on every post it frees has its line to
 * itself: the producer carving the next records never shares it. */
_Static_assert(offsetof(struct node_block, nodes) == TERN_CACHELINE,
               "a block's count is alone on the first line");
/* A post record is three words: a burst fills a line with fewer than
 * three, and a 4 KiB block carries 168 of them on a 64-bit machine. */
_Static_assert(sizeof(struct tern__inbound) == 3 * sizeof(void *) ||
                   sizeof(struct tern__inbound) == 2 * sizeof(void *) + sizeof(tern_id),
               "a post record is three words");

static _Thread_local struct node_block *carving __attribute__((tls_model("initial-exec")));
static _Thread_local unsigned carved __attribute__((tls_model("initial-exec")));
static pthread_key_t carving_key;
static pthread_once_t carving_once = PTHREAD_ONCE_INIT;

/*
 * Spent blocks wait on a small process-wide stack for the next producer
 * that needs one, instead of going back to malloc: freed by the loop into
 * the producer's arena, they cost an arena lock each way and, once glibc
 * trimmed them, fresh page faults. One lock per block, not per post.
 */
#define SPARE_MAX 64
static pthread_mutex_t spare_lock = PTHREAD_MUTEX_INITIALIZER;
static struct node_block *spare[SPARE_MAX];
static unsigned spare_len;

static void block_release(struct node_block *b, unsigned n)
{
    if (atomic_fetch_sub_explicit(&b->refs, n, memory_order_acq_rel) != n)
        return;
    pthread_mutex_lock(&spare_lock);
    if (spare_len < SPARE_MAX) {
        spare[spare_len++] = b;
        b = NULL;
    }
    pthread_mutex_unlock(&spare_lock);
    free(b);
}

static struct node_block *block_get(void)
{
    struct node_block *b = NULL;
    pthread_mutex_lock(&spare_lock);
    if (spare_len > 0)
        b = spare[--spare_len];
    pthread_mutex_unlock(&spare_lock);
    return b != NULL ? b : aligned_alloc(BLOCK_SIZE, BLOCK_SIZE);
}

/* fork(): never let the child inherit the spare lock held by a vanished thread. */
static void spare_before_fork(void)
{
    pthread_mutex_lock(&spare_lock);
}

static void spare_after_fork(void)
{
    pthread_mutex_unlock(&spare_lock);
}

__attribute__((constructor)) static void spare_fork_handlers(void)
{
    pthread_atfork(spare_before_fork, spare_after_fork, spare_after_fork);
}

/* Give the spares back to malloc at exit, so the process ends valgrind-clean. */
__attribute__((destructor)) static void spare_free(void)
{
    pthread_mutex_lock(&spare_lock);
    while (spare_len > 0)
        free(spare[--spare_len]);
    pthread_mutex_unlock(&spare_lock);
}

/* Thread exit: give back the producer's hold and the nodes never carved. */
static void carving_exit(void *arg)
{
    (void)arg;
    if (carving != NULL)
        block_release(carving, 1 + (unsigned)(BLOCK_NODES - carved));
    carving = NULL;
}

static void carving_init(void)
{
    pthread_key_create(&carving_key, carving_exit);
}

struct tern__inbound *tern__inbound_node_alloc(void)
{
    if (TERN_UNLIKELY(carving == NULL || carved == BLOCK_NODES)) {
        if (tern__fault_hit(TERN__FAULT_ALLOC))
            return NULL;
        struct node_block *b = block_get();
        if (b == NULL)
            return NULL;
        atomic_init(&b->refs, (unsigned)BLOCK_NODES + 1);
        pthread_once(&carving_once, carving_init);
        if (carving != NULL)
            block_release(carving, 1);
        else
            pthread_setspecific(carving_key, b); /* any non-NULL value arms the destructor */
        carving = b;
        carved = 0;
    }
    return &carving->nodes[carved++];
}

void tern__inbound_drop_block(void)
{
    carving_exit(NULL);
}

static struct node_block *block_of(const struct tern__inbound *in)
{
    return (struct node_block *)((uintptr_t)in & ~(uintptr_t)(BLOCK_SIZE - 1));
}

bool tern__inbound_same_block(const struct tern__inbound *a, const struct tern__inbound *b)
{
    return block_of(a) == block_of(b);
}

void tern__inbound_nodes_free(struct tern__inbound *in, unsigned n)
{
    block_release(block_of(in), n);
}
