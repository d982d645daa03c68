/*
 * mpsc_checks.h: the checks of tern's own wait-free queue (backends/mpsc.h),
 * shared by the Linux stress program (test/stress/mpsc_stress.c, also run
 * under ThreadSanitizer) and the plain Windows program (test/win/queue_test.c).
 * Plain C11 and pthreads (winpthreads under mingw-w64). The including file
 * defines, before including this:
 *
 *   MPSC_CHECK(cond, fmt, ...)   count and print one check
 *   mpsc_sleep_ms(ms)            sleep
 *
 * mpsc_held_checks(): what one thread can pin down, and producers held
 * between their exchange and their link (the consumer must wait for the
 * link, never lose or reorder the node).
 * mpsc_race(producers, per, seed): producers race one consumer that
 * splices; every node is seen exactly once and in its producer's order,
 * and the "was empty" report is exact: the nodes that reported it are
 * precisely the first node of each splice.
 */
#ifndef TERN_MPSC_CHECKS_H
#define TERN_MPSC_CHECKS_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "mpsc.h"

struct mpsc_item {
    struct tern__mpsc_node node;
    unsigned producer;
    unsigned seq;
    _Atomic bool reported_empty; /* what its enqueue said */
    bool batch_first;            /* the consumer found it first in a splice */
};

#define MPSC_ITEM(n) ((struct mpsc_item *)(void *)((char *)(n) - offsetof(struct mpsc_item, node)))

static uint64_t mpsc_rng(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* ---- one thread, and producers held half-way -------------------------- */

struct mpsc_holder {
    struct tern__mpsc_head *h;
    struct tern__mpsc_tail *t;
    struct tern__mpsc_node *node;
    struct tern__mpsc_node *prev; /* what the claim followed */
    atomic_bool claimed;
};

/* Claim, let the consumer meet the gap, then link. */
static void *mpsc_hold(void *arg)
{
    struct mpsc_holder *ho = arg;
    tern__mpsc_node_init(ho->node);
    ho->prev = tern__mpsc_claim(ho->t, ho->node);
    atomic_store(&ho->claimed, true);
    mpsc_sleep_ms(100);
    tern__mpsc_link(ho->prev, ho->node);
    return NULL;
}

static void mpsc_start_holder(pthread_t *th, struct mpsc_holder *ho)
{
    atomic_init(&ho->claimed, false);
    MPSC_CHECK(pthread_create(th, NULL, mpsc_hold, ho) == 0, "a holding producer starts");
    while (!atomic_load(&ho->claimed))
        sched_yield();
}

/* Walk the consumer's queue into out[] (at most max); returns the count. */
static unsigned mpsc_walk(struct tern__mpsc_head *h, struct tern__mpsc_tail *t,
                          struct mpsc_item **out, unsigned max)
{
    unsigned n = 0;
    for (struct tern__mpsc_node *x = tern__mpsc_first(h, t); x != NULL && n < max;
         x = tern__mpsc_next(t, x))
        out[n++] = MPSC_ITEM(x);
    return n;
}

static void mpsc_held_checks(void)
{
    struct tern__mpsc_head h, lh;
    struct tern__mpsc_tail t, lt;
    struct mpsc_item it[4] = {{.seq = 0}, {.seq = 1}, {.seq = 2}, {.seq = 3}};
    struct mpsc_item *got[8];

    tern__mpsc_init(&h, &t);
    tern__mpsc_init(&lh, &lt);
    MPSC_CHECK(tern__mpsc_empty(&h, &t), "a new queue is empty");
    MPSC_CHECK(!tern__mpsc_splice(&lh, &lt, &h, &t), "splicing an empty queue takes nothing");
    MPSC_CHECK(tern__mpsc_first(&lh, &lt) == NULL, "an empty queue walks as nothing");

    tern__mpsc_node_init(&it[0].node);
    MPSC_CHECK(tern__mpsc_enqueue(&h, &t, &it[0].node), "the first enqueue finds it empty");
    tern__mpsc_node_init(&it[1].node);
    MPSC_CHECK(!tern__mpsc_enqueue(&h, &t, &it[1].node), "the second does not");
    MPSC_CHECK(!tern__mpsc_empty(&h, &t), "a queue with nodes is not empty");
    MPSC_CHECK(tern__mpsc_splice(&lh, &lt, &h, &t), "a splice takes them");
    MPSC_CHECK(tern__mpsc_empty(&h, &t), "and leaves the source empty");
    tern__mpsc_node_init(&it[2].node);
    MPSC_CHECK(tern__mpsc_enqueue(&h, &t, &it[2].node), "after a splice, empty is reported again");
    /* A second splice appends to the consumer's queue. */
    MPSC_CHECK(tern__mpsc_splice(&lh, &lt, &h, &t), "a second splice takes the next");
    unsigned n = mpsc_walk(&lh, &lt, got, 8);
    MPSC_CHECK(n == 3 && got[0] == &it[0] && got[1] == &it[1] && got[2] == &it[2],
               "two splices walk in enqueue order (%u nodes)", n);

    /* A producer held after its exchange, with the queue empty before it. */
    tern__mpsc_init(&lh, &lt);
    pthread_t th;
    struct mpsc_holder ho = {.h = &h, .t = &t, .node = &it[3].node};
    mpsc_start_holder(&th, &ho);
    MPSC_CHECK(!tern__mpsc_empty(&h, &t), "a claimed, unlinked node is not empty");
    MPSC_CHECK(tern__mpsc_splice(&lh, &lt, &h, &t), "the splice waits for the link");
    n = mpsc_walk(&lh, &lt, got, 8);
    MPSC_CHECK(n == 1 && got[0] == &it[3], "and takes the held node (%u nodes)", n);
    MPSC_CHECK(ho.prev == &h.stub, "the held claim followed the stub: it was first");
    pthread_join(th, NULL);

    /* A producer held between two that finished: the walk waits at the gap. */
    tern__mpsc_init(&lh, &lt);
    tern__mpsc_node_init(&it[0].node);
    (void)tern__mpsc_enqueue(&h, &t, &it[0].node);
    ho = (struct mpsc_holder){.h = &h, .t = &t, .node = &it[1].node};
    mpsc_start_holder(&th, &ho);
    tern__mpsc_node_init(&it[2].node);
    MPSC_CHECK(!tern__mpsc_enqueue(&h, &t, &it[2].node), "a node after a held one: not empty");
    MPSC_CHECK(tern__mpsc_splice(&lh, &lt, &h, &t), "the splice takes all three");
    n = mpsc_walk(&lh, &lt, got, 8);
    MPSC_CHECK(n == 3 && got[0] == &it[0] && got[1] == &it[1] && got[2] == &it[2],
               "the walk waits at the gap and keeps the order (%u nodes)", n);
    pthread_join(th, NULL);
    MPSC_CHECK(tern__mpsc_empty(&h, &t), "the queue ends empty");
}

/* ---- producers racing one consumer ----------------------------------- */

#define MPSC_MAX_PRODUCERS 16

struct mpsc_race {
    struct tern__mpsc_head h;
    struct tern__mpsc_tail t;
    struct mpsc_item *items; /* producer p's are items[p * per ...] */
    unsigned producers, per;
    uint64_t seed;
    unsigned long long reported[MPSC_MAX_PRODUCERS]; /* "was empty", per producer */
};

struct mpsc_producer {
    struct mpsc_race *r;
    unsigned p;
};

static void *mpsc_produce(void *arg)
{
    struct mpsc_producer *pr = arg;
    struct mpsc_race *r = pr->r;
    uint64_t rng = r->seed ^ (UINT64_C(0x100000001b3) * (pr->p + 1));
    unsigned long long reported = 0;
    for (unsigned i = 0; i < r->per; i++) {
        struct mpsc_item *it = &r->items[(size_t)pr->p * r->per + i];
        /* Now and then let the others and the consumer run, so splices
         * come both between enqueues and among them. */
        if (mpsc_rng(&rng) % 8 == 0)
            sched_yield();
        tern__mpsc_node_init(&it->node);
        bool empty = tern__mpsc_enqueue(&r->h, &r->t, &it->node);
        atomic_store_explicit(&it->reported_empty, empty, memory_order_relaxed);
        reported += empty;
    }
    r->reported[pr->p] = reported;
    return NULL;
}

static void mpsc_race(unsigned producers, unsigned per, uint64_t seed)
{
    struct mpsc_race r = {.producers = producers, .per = per, .seed = seed};
    size_t total = (size_t)producers * per;
    r.items = calloc(total, sizeof(*r.items));
    unsigned *expected = calloc(producers, sizeof(*expected));
    MPSC_CHECK(r.items != NULL && expected != NULL && producers <= MPSC_MAX_PRODUCERS,
               "%u producers of %u nodes set up", producers, per);
    if (r.items == NULL || expected == NULL || producers > MPSC_MAX_PRODUCERS)
        exit(1);
    for (unsigned p = 0; p < producers; p++)
        for (unsigned i = 0; i < per; i++)
            r.items[(size_t)p * per + i] = (struct mpsc_item){.producer = p, .seq = i};
    tern__mpsc_init(&r.h, &r.t);

    pthread_t th[MPSC_MAX_PRODUCERS];
    struct mpsc_producer pr[MPSC_MAX_PRODUCERS];
    for (unsigned p = 0; p < producers; p++) {
        pr[p] = (struct mpsc_producer){&r, p};
        MPSC_CHECK(pthread_create(&th[p], NULL, mpsc_produce, &pr[p]) == 0, "producer %u starts",
                   p);
    }

    uint64_t rng = seed;
    size_t seen = 0;
    unsigned long long batches = 0, out_of_order = 0, biggest = 0;
    while (seen < total) {
        struct tern__mpsc_head lh;
        struct tern__mpsc_tail lt;
        tern__mpsc_init(&lh, &lt);
        if (!tern__mpsc_splice(&lh, &lt, &r.h, &r.t)) {
            sched_yield();
            continue;
        }
        batches++;
        unsigned long long in_batch = 0;
        for (struct tern__mpsc_node *x = tern__mpsc_first(&lh, &lt), *nx; x != NULL; x = nx) {
            nx = tern__mpsc_next(&lt, x); /* before the node is touched, as a freeing walk */
            struct mpsc_item *it = MPSC_ITEM(x);
            it->batch_first = in_batch++ == 0;
            out_of_order += it->seq != expected[it->producer]++;
            seen++;
        }
        biggest = in_batch > biggest ? in_batch : biggest;
        /* Sometimes fall behind, so splices take long chains. */
        for (uint64_t k = mpsc_rng(&rng) % 4 == 0 ? mpsc_rng(&rng) % 64 : 0; k > 0; k--)
            sched_yield();
    }
    unsigned long long reported = 0;
    for (unsigned p = 0; p < producers; p++) {
        pthread_join(th[p], NULL);
        reported += r.reported[p];
    }
    size_t mismatched = 0;
    for (size_t i = 0; i < total; i++)
        mismatched += atomic_load(&r.items[i].reported_empty) != r.items[i].batch_first;
    unsigned short_producers = 0;
    for (unsigned p = 0; p < producers; p++)
        short_producers += expected[p] != per;

    MPSC_CHECK(seen == total && short_producers == 0 && out_of_order == 0,
               "%zu nodes seen once each, in each producer's order (%u producers short, "
               "%llu out of order)",
               seen, short_producers, out_of_order);
    MPSC_CHECK(reported == batches,
               "\"was empty\" reported %llu times, once per splice (%llu splices, longest %llu)",
               reported, batches, biggest);
    MPSC_CHECK(mismatched == 0, "exactly the first node of each splice reported it (%zu differ)",
               mismatched);
    MPSC_CHECK(tern__mpsc_empty(&r.h, &r.t), "the queue ends empty");
    free(expected);
    free(r.items);
}

#endif
