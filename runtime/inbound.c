/*
 * The inbound queue and the wake protocol: the only ways another thread
 * reaches a loop.
 *
 * Inbound. Producers enqueue on a liburcu wait-free queue (cds_wfcq);
 * step 1 takes the whole queue with one splice, so a turn pays one
 * exchange however many posts arrived. Only the loop's thread splices
 * (G1), which is what lets us use the lock-free `__cds_wfcq_head` variant.
 *
 * Wake protocol. One word per loop: RUNNING, PARKING, NOTIFIED. Before it
 * blocks, the loop stores PARKING, issues a full fence and re-checks its
 * queues; a producer publishes first (the enqueue is a full barrier), then
 * reads the word and, only if it says PARKING, CASes it to NOTIFIED and
 * writes the eventfd. The two fences make it impossible for the loop to
 * miss an item and for the producer to miss the park (each sees the
 * other's store). Many producers during one park make one syscall between
 * them; a busy loop (RUNNING) receives any number of posts with none.
 *
 * A loop that no thread runs counts as asleep (PARKING): a host that
 * embeds it by watching tern_loop_backend_fd() must see a post arrive.
 * Exactly one eventfd write follows each move to NOTIFIED, and the loop
 * consumes exactly that one when it moves the word back to RUNNING, so the
 * descriptor is never left readable with nothing to say.
 */
#if !defined(__SANITIZE_THREAD__)
/*
 * Inline liburcu's queue for speed. Under TSan, call the library instead:
 * its accesses then stay invisible (uninstrumented), and the hand-over is
 * described to TSan by the annotations below.
 */
#define _LGPL_SOURCE
#endif
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include <urcu/wfcqueue.h>

#include "loop_p.h"

#if defined(__SANITIZE_THREAD__)
/* TSan cannot see liburcu's hand-over (asm); annotate it. */
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define TSAN_RELEASE(p) __tsan_release(p)
#define TSAN_ACQUIRE(p) __tsan_acquire(p)
#else
#define TSAN_RELEASE(p) ((void)0)
#define TSAN_ACQUIRE(p) ((void)0)
#endif

void tern__loop_wake(tern_loop *loop)
{
    /* Pairs with the fence after the PARKING store in turn.c's park(). */
    atomic_thread_fence(memory_order_seq_cst);
    unsigned state = atomic_load_explicit(&loop->wake_state, memory_order_relaxed);
    if (state != TERN__WAKE_PARKING)
        return;
    if (!atomic_compare_exchange_strong(&loop->wake_state, &state, TERN__WAKE_NOTIFIED))
        return; /* another producer got there first, or the loop woke */
    atomic_fetch_add_explicit(&loop->wake_syscalls, 1, memory_order_relaxed);
    uint64_t one = 1;
    ssize_t w = write(loop->wake_fd, &one, sizeof(one));
    (void)w; /* EAGAIN means the counter is already non-zero: still awake */
}

void tern__loop_awake(tern_loop *loop)
{
    unsigned old = atomic_exchange_explicit(&loop->wake_state, TERN__WAKE_RUNNING,
                                            memory_order_acquire);
    if (old != TERN__WAKE_NOTIFIED)
        return;
    /*
     * The producer that notified is committed to one write; it may not
     * have made it yet (a few instructions away, unless preempted).
     */
    uint64_t value;
    for (unsigned spins = 0; read(loop->wake_fd, &value, sizeof(value)) != sizeof(value); spins++)
        if (spins > 16)
            sched_yield();
}

bool tern__inbound_pending(tern_loop *loop)
{
    return !cds_wfcq_empty(&loop->in_head, &loop->in_tail);
}

static int enqueue(tern_loop *loop, struct tern__inbound *in)
{
    cds_wfcq_node_init(&in->node);
    TSAN_RELEASE(in);
    cds_wfcq_enqueue(&loop->in_head, &loop->in_tail, &in->node);
    tern__loop_wake(loop);
    return 0;
}

int tern_post(tern_loop *loop, tern_fn fn, void *arg)
{
    TERN__REQUIRE_LOOP(loop);
    if (fn == NULL)
        return -EINVAL;
    int rc = tern__op_admit(loop);
    if (rc < 0)
        return rc;
    struct tern__inbound *in = tern__malloc(sizeof(*in));
    if (in == NULL) {
        tern__op_unadmit(loop);
        return -ENOMEM;
    }
    in->kind = TERN__IN_POST;
    in->u.post.fn = fn;
    in->u.post.arg = arg;
    return enqueue(loop, in);
}

static int cancel_local(tern_loop *loop, tern_id id)
{
    struct tern__op *op = tern__op_find(loop, id);
    if (op == NULL)
        return -ENOENT;
    return op->cls->cancel(loop, op);
}

int tern_cancel(tern_loop *loop, tern_id id)
{
    TERN__REQUIRE_LOOP(loop);
    if (id == 0)
        return -EINVAL;
    uintptr_t owner = atomic_load_explicit(&loop->owner, memory_order_relaxed);
    if (owner == 0 || owner == tern__thread_token())
        return cancel_local(loop, id);
    /* A foreign thread: hand the request over; step 1 resolves it. */
    struct tern__inbound *in = tern__malloc(sizeof(*in));
    if (in == NULL)
        return -ENOMEM;
    in->kind = TERN__IN_CANCEL;
    in->u.cancel_id = id;
    return enqueue(loop, in);
}

/*
 * Step 1's first half. Posts run in arrival order (so each producer's
 * order is kept); cancellation requests are resolved after them, by live
 * id, so a post and a cancel that raced resolve the same way every time.
 */
void tern__inbound_drain(tern_loop *loop)
{
    struct __cds_wfcq_head head;
    struct cds_wfcq_tail tail;
    __cds_wfcq_init(&head, &tail);
    if (__cds_wfcq_splice_blocking(&head, &tail, &loop->in_head, &loop->in_tail) ==
        CDS_WFCQ_RET_SRC_EMPTY)
        return;

    struct cds_wfcq_node *node, *next;
    unsigned ran = 0;
    struct cds_wfcq_node *cancels = NULL, **cancels_end = &cancels;
    __cds_wfcq_for_each_blocking_safe(&head, &tail, node, next) {
        struct tern__inbound *in = caa_container_of(node, struct tern__inbound, node);
        TSAN_ACQUIRE(in);
        if (in->kind == TERN__IN_CANCEL) {
            /* Reuse the node's link to keep the cancels in order. */
            in->node.next = NULL;
            *cancels_end = &in->node;
            cancels_end = &in->node.next;
            continue;
        }
        tern_fn fn = in->u.post.fn;
        void *arg = in->u.post.arg;
        free(in);
        /* The post stops counting as live before it runs, as a timer does. */
        atomic_fetch_sub_explicit(&loop->live, 1, memory_order_relaxed);
        ran++;
        fn(loop, arg);
    }
    atomic_fetch_add_explicit(&loop->st_posts, ran, memory_order_relaxed);
    while (cancels != NULL) {
        struct tern__inbound *in = caa_container_of(cancels, struct tern__inbound, node);
        cancels = cancels->next;
        cancel_local(loop, in->u.cancel_id);
        free(in);
    }
}
