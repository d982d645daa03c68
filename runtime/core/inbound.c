/*
 * The inbound queue: posts and foreign cancels, the only ways another
 * thread hands a loop work (the result ring aside, job.c). Post records
 * come from inbound_block.c, cancel records from the loop's reserve
 * (cancel_reserve.c); a producer wakes the loop through wake.h.
 *
 * Inbound. Producers enqueue on a wait-free queue (wfq.h: liburcu's cds_wfcq,
 * or tern's own where liburcu does not build);
 * step 1 takes the whole queue with one splice, so a turn pays one
 * exchange however many posts arrived. Only the loop's thread splices
 * (G1), which is what lets us use the lock-free head.
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
#include <stdlib.h>
#include <unistd.h>

#include "container.h"
#include "loop_p.h"
#include "os_thread.h"
#include "probe.h"
#include "testing.h"
#include "wake.h"

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

static int enqueue(tern_loop *loop, struct tern__inbound *in)
{
    tern__wfq_node_init(&in->node);
    TSAN_RELEASE(in);
    /* The enqueue is a full barrier: it publishes before we read the word. */
    tern__wfq_enqueue(&loop->in_head, &loop->in_tail, &in->node);
    (void)tern__wake_checked(loop);
    return 0;
}

/*
 * Admission of `credit` posts at once: exact among posts (one counter),
 * read against the loop's ops. The count is taken before `closing` is
 * read, so tern_loop_free (which sets `closing`, then waits for posted ==
 * posts_done) either sees this credit and settles it, or we see it
 * closing and give the count back. Pairs with the seq_cst store of
 * `closing` in tern_loop_free().
 */
static int post_admit(tern_loop *loop, unsigned credit)
{
    uint64_t ticket =
        atomic_fetch_add_explicit(&loop->posted, credit, memory_order_seq_cst) + credit;
    uint64_t done = atomic_load_explicit(&loop->posts_done, memory_order_relaxed);
    /*
     * `ticket` counts this credit and all taken before it; `done` may
     * already count credit taken after it (its producers ran on while
     * this one was preempted between the two reads), so it can pass
     * `ticket`. This credit is still pending then: not a wrapped
     * difference that would refuse it far below the limit.
     */
    uint64_t pending = ticket > done + credit ? ticket - done : credit;
    int rc = 0;
    if (atomic_load_explicit(&loop->closing, memory_order_seq_cst)) {
        /* A group's destroy phase: scheduling is a violation, not a refusal. */
        if (atomic_load_explicit(&loop->sealed, memory_order_relaxed))
            tern__loop_sealed_failed();
        rc = -ESHUTDOWN;
    } else if (TERN_UNLIKELY(pending +
                                 atomic_load_explicit(&loop->ops_count, memory_order_relaxed) >
                             loop->max_operations))
        rc = -EAGAIN;
    if (TERN_UNLIKELY(rc < 0))
        /* Pairs with the acquire load in tern__inbound_quiet(). */
        atomic_fetch_sub_explicit(&loop->posted, credit, memory_order_release);
    return rc;
}

/*
 * A post joins its thread's open run to the loop when it can, with credit
 * the run already holds: no shared line, no wake (the run's first record
 * is still ahead of the loop, and that record's enqueue did the wake
 * check). Otherwise it takes credit for the run to come, and extends the
 * open run or starts one (inbound_block.c). Near max_operations, credit
 * for one post at a time: the refusal stays exact for one producer.
 */
int tern_post(tern_loop *loop, tern_fn fn, void *arg)
{
    TERN__REQUIRE_LOOP(loop);
    if (fn == NULL)
        return -EINVAL;
    /* Both on the wake word's line. */
    unsigned drains = atomic_load_explicit(&loop->runs_closed, memory_order_relaxed);
    if (TERN_LIKELY(!atomic_load_explicit(&loop->closing, memory_order_relaxed)) &&
        tern__post_append(loop, drains, fn, arg)) {
        TERN_PROBE(post, loop, fn);
        return 0;
    }
    unsigned credit = tern__post_credit_wanted(loop, drains);
    int rc = post_admit(loop, credit);
    if (rc == -EAGAIN && credit > 1)
        rc = post_admit(loop, credit = 1);
    if (TERN_UNLIKELY(rc < 0))
        return rc;
    unsigned kept = credit;
    struct tern__inbound *head = tern__post_push(loop, drains, fn, arg, &kept, &rc);
    if (TERN_UNLIKELY(rc < 0 || kept < credit)) {
        /* Pairs with the acquire load in tern__inbound_quiet(). */
        atomic_fetch_sub_explicit(&loop->posted, rc < 0 ? credit : credit - kept,
                                  memory_order_release);
        if (rc < 0)
            return rc;
    }
    TERN_PROBE(post, loop, fn);
    if (head != NULL) {
        (void)enqueue(loop, head);
        /* After the enqueue's full barrier: pairs with the drain's bump. */
        tern__post_began(atomic_load_explicit(&loop->runs_closed, memory_order_relaxed));
    }
    return 0;
}

/*
 * Whether no other thread is between admission and enqueue: every post
 * counted in `posted` has been taken off the queue, and no foreign cancel
 * is on its way in. Teardown drains until this holds with `closing` set;
 * from then on nothing can arrive.
 */
bool tern__inbound_quiet(tern_loop *loop)
{
    /* Pair with the release decrements in tern_post() and tern_cancel(). */
    return atomic_load_explicit(&loop->foreign_inflight, memory_order_acquire) == 0 &&
           atomic_load_explicit(&loop->posted, memory_order_acquire) ==
               atomic_load_explicit(&loop->posts_done, memory_order_relaxed) &&
           !tern__inbound_pending(loop);
}

/* Resolve a cancel by id on the thread that holds the loop. */
static int cancel_local(tern_loop *loop, tern_id id)
{
    if (tern__timer_id(id))
        return tern__timer_cancel(loop, id);
    struct tern__op *op = tern__op_find(loop, id);
    if (op == NULL)
        return -ENOENT;
    return op->cls->cancel(loop, op);
}

/*
 * A cancel from a thread that does not run the loop never touches the
 * loop's containers: it is queued, whoever holds the loop (nobody, or
 * another thread), and the next turn's step 1 resolves it by id — or
 * tern_loop_free's drain does. An unclaimed loop counts as asleep, so the
 * enqueue writes its wake fd and a host that watches it pumps the loop.
 *
 * The thread that claims the loop (inside a callback, or a host between
 * run_once calls on its own thread while claimed) resolves at once. Setup
 * code on an unclaimed loop is "another thread" here too: it cannot be
 * told apart from a third thread, and the whole point is that no two
 * threads ever touch the containers at once.
 *
 * Neither path allocates: the queued request's record comes from the
 * loop's reserve, so a cancel made under memory pressure still lands.
 */
int tern_cancel(tern_loop *loop, tern_id id)
{
    TERN__REQUIRE_LOOP(loop);
    if (id == 0)
        return -EINVAL;
    if (atomic_load_explicit(&loop->owner, memory_order_relaxed) == tern__thread_token())
        return cancel_local(loop, id);
    /*
     * Count ourselves in before looking at `closing`: tern_loop_free sets
     * `closing` and then waits for this count to drop, so either it sees
     * us and drains our request, or we see it closing and back off.
     * Pairs with the seq_cst store of `closing` in tern_loop_free().
     */
    atomic_fetch_add_explicit(&loop->foreign_inflight, 1, memory_order_seq_cst);
    int rc = -ESHUTDOWN;
    if (!atomic_load_explicit(&loop->closing, memory_order_seq_cst)) {
        struct tern__inbound *in = tern__cancel_node_get(&loop->cancels);
        rc = -EAGAIN;
        if (in != NULL) {
            in->fn = NULL;
            in->u.cancel_id = id;
            (void)enqueue(loop, in);
            rc = TERN_CANCEL_REQUESTED;
        }
    }
    /* Pairs with the acquire load in tern__inbound_quiet(). */
    atomic_fetch_sub_explicit(&loop->foreign_inflight, 1, memory_order_release);
    return rc;
}

/*
 * Runs the loop keeps open. A producer in a burst goes on adding to its
 * run after the loop took it: were every drain to close the runs it took
 * (as an empty queue's turn would have to before it parks), the
 * producer's next post would start a run again, paying the queue's tail,
 * the admission count and the wake check, a few cross-core misses, every
 * time the loop turned beside it. So a drain keeps a run it takes open
 * (up to TERN__OPEN_RUNS) and each later drain runs what was added since
 * (`seen` on); it closes a run once it has stopped growing, or filled its
 * block, and closes them all when the loop is let go or would otherwise
 * wait for them alone (tern__inbound_release; turn.c decides). While a
 * run is open the loop does not park (tern__inbound_pending says so): a
 * post added to an open run wakes nobody, so the loop must look again.
 */
bool tern__inbound_pending(tern_loop *loop)
{
    return loop->open_n != 0 || !tern__wfq_empty(&loop->in_head, &loop->in_tail);
}

/*
 * Close an open run: from here on its word is final. Unless the run has
 * filled its block (its producer cannot add to it), tell producers first
 * that a run has been closed, so its producer starts a new one without a
 * compare-and-swap on this line (inbound_block.c).
 */
static uint64_t run_close(tern_loop *loop, struct tern__inbound *in, uint64_t w, bool *told)
{
    if (!*told && !tern__run_full(in, tern__run_length(w))) {
        atomic_store_explicit(&loop->runs_closed,
                              atomic_load_explicit(&loop->runs_closed, memory_order_relaxed) + 1,
                              memory_order_relaxed);
        *told = true;
    }
    /* Acquire: the records the producer counted in before the close. */
    return atomic_fetch_or_explicit(&in->run, TERN__RUN_CLOSED, memory_order_acquire) |
           TERN__RUN_CLOSED;
}

/* Credit a closed run took and did not spend. */
static unsigned run_unspent(uint64_t w)
{
    return tern__run_credit(w) - tern__run_length(w);
}

/* Posts [from, to) of the run `in` heads. */
static void run_posts(tern_loop *loop, const struct tern__inbound *in, unsigned from, unsigned to)
{
    if (from == 0 && to > 0) {
        in->fn(loop, in->u.arg);
        from = 1;
    }
    for (unsigned k = from; k < to; k++) {
        const struct tern__post_entry *e = tern__run_entry(in, k);
        e->fn(loop, e->arg);
    }
}

static void settle(tern_loop *loop, uint64_t credit)
{
    atomic_store_explicit(&loop->posts_done,
                          atomic_load_explicit(&loop->posts_done, memory_order_relaxed) + credit,
                          memory_order_relaxed);
}

void tern__inbound_release(tern_loop *loop)
{
    bool told = false;
    uint64_t credit = 0;
    unsigned keep = 0;
    for (unsigned i = 0; i < loop->open_n; i++) {
        struct tern__open_run o = loop->open_runs[i];
        uint64_t w = atomic_load_explicit(&o.head->run, memory_order_acquire);
        if (!(w & TERN__RUN_CLOSED))
            w = run_close(loop, o.head, w, &told);
        if (tern__run_length(w) == o.seen) {
            credit += run_unspent(w);
            tern__inbound_run_free(o.head, o.seen);
            continue;
        }
        o.word = w; /* posts added before the close: the next drain's */
        loop->open_runs[keep++] = o;
    }
    loop->open_n = keep;
    settle(loop, credit);
}

/*
 * Step 1's first half. Posts run in arrival order (so each producer's
 * order is kept): the open runs first, then the runs just taken, in queue
 * order; cancellation requests are resolved after them, by live id, so a
 * post and a cancel that raced resolve the same way every time.
 */
void tern__inbound_drain(tern_loop *loop)
{
    tern__wfq_head head;
    tern__wfq_tail tail;
    tern__wfq_init(&head, &tail);
    bool took = !tern__wfq_empty(&loop->in_head, &loop->in_tail) &&
                tern__wfq_splice(&head, &tail, &loop->in_head, &loop->in_tail);
    unsigned was_open = loop->open_n;
    if (!took && was_open == 0)
        return;

    tern__wfq_node *node, *next;
    bool told = false;
    uint64_t credit = 0;

    /*
     * Read every run's word before running any post, so a post made by a
     * post joins a run of the next turn. The open runs are read after the
     * splice, whose exchange orders them: a producer's posts to a run it
     * left come before its next run's first record, so they run first.
     * Posts stop counting as live before they run, as a timer does: what
     * this drain will run, and the unspent credit of the runs it closes,
     * is settled with one store of the loop's own counter.
     */
    for (unsigned i = 0; i < was_open; i++) {
        struct tern__open_run *o = &loop->open_runs[i];
        uint64_t w = atomic_load_explicit(&o->head->run, memory_order_acquire);
        if (!(w & TERN__RUN_CLOSED) &&
            (tern__run_length(w) == o->seen || tern__run_full(o->head, tern__run_length(w))))
            w = run_close(loop, o->head, w, &told);
        o->word = w;
        credit += tern__run_length(w) - o->seen;
        if (w & TERN__RUN_CLOSED)
            credit += run_unspent(w);
    }
    if (took) {
        tern__wfq_for_each(&head, &tail, node)
        {
            struct tern__inbound *in = tern__container_of(node, struct tern__inbound, node);
            TSAN_ACQUIRE(in);
            if (tern__inbound_is_cancel(in))
                continue;
            uint64_t w = atomic_load_explicit(&in->run, memory_order_acquire);
            if (loop->open_n < TERN__OPEN_RUNS && !tern__run_full(in, tern__run_length(w))) {
                loop->open_runs[loop->open_n++] = (struct tern__open_run){in, w, 0};
                credit += tern__run_length(w);
            } else {
                credit += tern__run_credit(run_close(loop, in, w, &told));
            }
        }
    }
    settle(loop, credit);

    unsigned ran = 0;
    for (unsigned i = 0; i < was_open; i++) {
        struct tern__open_run *o = &loop->open_runs[i];
        unsigned n = tern__run_length(o->word);
        run_posts(loop, o->head, o->seen, n);
        ran += n - o->seen;
        o->seen = n;
    }
    /*
     * A run's posts follow its first record in one block
     * (inbound_block.c) and are given back together, with one atomic
     * step, once the run is closed and its functions have run.
     */
    tern__wfq_link cancels = NULL, *cancels_end = &cancels;
    unsigned kept = was_open;
    if (took) {
        tern__wfq_for_each_safe(&head, &tail, node, next)
        {
            struct tern__inbound *in = tern__container_of(node, struct tern__inbound, node);
            if (tern__inbound_is_cancel(in)) {
                /* Reuse the node's link to keep the cancels in order. */
                in->node.next = NULL;
                *cancels_end = &in->node;
                cancels_end = &in->node.next;
                continue;
            }
            /* Only the loop closes a run: the bit says which this drain kept. */
            uint64_t w = atomic_load_explicit(&in->run, memory_order_relaxed);
            if (!(w & TERN__RUN_CLOSED)) {
                struct tern__open_run *o = &loop->open_runs[kept++];
                o->seen = tern__run_length(o->word);
                run_posts(loop, in, 0, o->seen);
                ran += o->seen;
                continue;
            }
            unsigned n = tern__run_length(w);
            run_posts(loop, in, 0, n);
            tern__inbound_run_free(in, n);
            ran += n;
        }
    }
    /* The runs this drain closed leave the open list, which stays in order. */
    unsigned keep = 0;
    for (unsigned i = 0; i < loop->open_n; i++) {
        struct tern__open_run o = loop->open_runs[i];
        if (i < was_open && (o.word & TERN__RUN_CLOSED)) {
            tern__inbound_run_free(o.head, o.seen);
            continue;
        }
        loop->open_runs[keep++] = o;
    }
    loop->open_n = keep;
    atomic_fetch_add_explicit(&loop->st_posts, ran, memory_order_relaxed);
    loop->posts_ran = ran;
    while (cancels != NULL) {
        struct tern__inbound *in = tern__container_of(cancels, struct tern__inbound, node);
        cancels = cancels->next;
        cancel_local(loop, in->u.cancel_id);
        tern__cancel_node_put(&loop->cancels, in);
    }
}
