/*
 * Job records: a loop's own chunks of them, with a free list threaded
 * through the free ones, as slab.c does for timers' and defers' records,
 * but with one difference that slab.c cannot absorb: a pool thread may be
 * the last to hold a record.
 *
 * A job cancelled while queued is delivered (its done runs) at once, but
 * the bounded queue still points at it until a worker or a shutdown meets
 * the tombstone and hands it back. Such a record is "held": the loop has
 * let go of it, and it is neither free nor the loop's to reuse. The hand-
 * back (a pool thread) pushes it onto its chunk's `returned` stack, which
 * the loop empties into its free list when it runs out of free records.
 * A chunk counts its held records in `held` (two per record; bit 0 says
 * the loop is gone): when the loop is freed, a chunk with none held goes
 * at once, and one with records still held is left to the hand-back of
 * its last one. So the loop never waits for the pool, and the pool never
 * touches a freed loop.
 *
 * Chunks grow from 64 records to 256. A long-lived server must not keep
 * the records of a burst for ever, so a chunk whose records are all free
 * goes back at the turn's kick (tern__job_records_trim), as long as
 * TERN__JOB_FREE_KEPT free records stay for the next burst to reuse; the
 * oldest chunks are the ones kept. The allocator itself only counts the
 * loop's free records; the trim counts them by chunk, when it is due.
 *
 * Ids. A job's id names its record: the chunk's number, the offset in
 * it, and the record's generation (op_types.h, TERN__JOB_ID), laid out and
 * kept unique as timer ids are (timer_table.c says how): a record's
 * generation goes up with each id it is given, a record whose generation
 * reaches 2^30 is retired (never reused), and chunk numbers come from a
 * process-wide registry (numbers.c) that hands a freed loop's numbers on
 * with the floor their generations reached. So finding a job is a probe
 * of a small per-loop map of chunk numbers, an index and a compare with
 * the id the record holds (zeroed when the op finishes): no entry per
 * job in the loop's id map.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "job_p.h"

/*
 * A chunk left to its last hand-back is reachable only through the
 * bounded queue's cells, which hold a record's address packed with other
 * bits (backends/ring.h), so LeakSanitizer, which looks for plain
 * pointers, would call it leaked while a tombstone of it waits in the
 * queue. Under AddressSanitizer the chunk is marked as not leaked when
 * its loop lets go of it; what it points to stays reachable through it.
 * A tombstone the pool lost for good would still show, in the pool's
 * in-flight count and tombstone figure, not as a leak.
 */
#if defined(__SANITIZE_ADDRESS__)
#define TERN_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TERN_ASAN 1
#endif
#endif
#ifdef TERN_ASAN
#include <sanitizer/lsan_interface.h>
#define LEFT_TO_THE_POOL(c) __lsan_ignore_object(c)
#else
#define LEFT_TO_THE_POOL(c) ((void)(c))
#endif

#define FIRST_CHUNK 64u
#define LAST_CHUNK 256u
#define ORPHANED 1u

static uint64_t chunk_bytes(uint32_t cap)
{
    return sizeof(struct tern__job_chunk) + (uint64_t)cap * sizeof(tern_job);
}

static void chunk_free(struct tern__job_chunk *c)
{
    free(c->owned);
    free(c);
}

int tern__job_owned_reserve(tern_loop *loop, tern_job *job)
{
    struct tern__job_chunk *c = tern__job_chunk(job);
    if (c->owned != NULL)
        return 0;
    c->owned = tern__calloc(c->cap, sizeof(*c->owned));
    if (c->owned == NULL)
        return -ENOMEM;
    loop->job_bytes += (uint64_t)c->cap * sizeof(*c->owned);
    loop->jobs_owned = true;
    return 0;
}

/* Take back every record the pool returned; true if any came back. */
static bool reclaim(tern_loop *loop)
{
    bool any = false;
    for (struct tern__job_chunk *c = loop->job_chunks; c != NULL && loop->jobs_held > 0;
         c = c->next) {
        if (atomic_load_explicit(&c->returned, memory_order_relaxed) == NULL)
            continue;
        /* Acquire: pairs with the hand-back's release push. */
        tern_job *job = atomic_exchange_explicit(&c->returned, NULL, memory_order_acquire);
        while (job != NULL) {
            tern_job *next = (tern_job *)job->op.ready_next;
            tern__job_release(loop, job);
            TERN_DECREMENT(loop->jobs_held);
            any = true;
            job = next;
        }
    }
    return any;
}

static uint32_t map_hash(uint32_t no, uint32_t mask)
{
    return (uint32_t)((no * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & mask;
}

static void map_place(struct tern__job_chunk **map, uint32_t mask, struct tern__job_chunk *c)
{
    uint32_t i = map_hash(c->no, mask);
    while (map[i] != NULL)
        i = (i + 1) & mask;
    map[i] = c;
}

/* Room for one more chunk: the map stays at most half full. */
static bool map_reserve(tern_loop *loop)
{
    uint32_t cap = loop->job_map != NULL ? loop->job_map_mask + 1 : 0;
    if (2 * (loop->job_nchunks + 1) <= cap)
        return true;
    uint32_t ncap = cap ? 2 * cap : 16;
    struct tern__job_chunk **map = tern__calloc(ncap, sizeof(*map));
    if (map == NULL)
        return false;
    for (uint32_t i = 0; i < cap; i++)
        if (loop->job_map[i] != NULL)
            map_place(map, ncap - 1, loop->job_map[i]);
    free(loop->job_map);
    loop->job_map = map;
    loop->job_map_mask = ncap - 1;
    return true;
}

static bool grow(tern_loop *loop)
{
    uint32_t cap = loop->job_chunk_next != 0 ? loop->job_chunk_next : FIRST_CHUNK;
    if (!map_reserve(loop))
        return false;
    struct tern__job_chunk *c = tern__malloc(chunk_bytes(cap));
    if (c == NULL)
        return false;
    uint32_t floor;
    if (tern__numbers_take(&tern__job_numbers, &c->no, &floor) < 0) {
        free(c);
        return false;
    }
    c->next = loop->job_chunks;
    c->loop = loop;
    c->cap = cap;
    c->owned = NULL;
    atomic_init(&c->returned, NULL);
    atomic_init(&c->held, 0);
    c->nfree = 0;
    loop->job_chunks = c;
    map_place(loop->job_map, loop->job_map_mask, c);
    loop->job_nchunks++;
    loop->job_bytes += chunk_bytes(cap);
    loop->job_chunk_next = cap < LAST_CHUNK ? 2 * cap : LAST_CHUNK;
    for (uint32_t i = cap; i-- > 0;) {
        c->recs[i].work.client_byte = (uint8_t)i;
        c->recs[i].work.client_word = floor;
        c->recs[i].op.id = 0;
        tern__job_release(loop, &c->recs[i]);
    }
    return true;
}

tern_id tern__job_id_issue(tern_job *job)
{
    const struct tern__job_chunk *c = tern__job_chunk(job);
    uint64_t offset = job->work.client_byte;
    uint32_t gen = tern__job_gen(job);
    job->work.client_word++; /* the generation: below TERN__GEN_LIMIT, so it stays in its bits */
    return TERN__JOB_ID | (uint64_t)c->no << TERN__JOB_NO_SHIFT | offset << TERN__JOB_OFFSET_SHIFT |
           gen;
}

struct tern__op *tern__job_find(const tern_loop *loop, tern_id id)
{
    if (loop->job_map == NULL)
        return NULL;
    uint32_t no = (uint32_t)(id >> TERN__JOB_NO_SHIFT) & ((UINT32_C(1) << TERN__JOB_NO_BITS) - 1);
    uint32_t offset =
        (uint32_t)(id >> TERN__JOB_OFFSET_SHIFT) & ((UINT32_C(1) << TERN__JOB_OFFSET_BITS) - 1);
    for (uint32_t i = map_hash(no, loop->job_map_mask); loop->job_map[i] != NULL;
         i = (i + 1) & loop->job_map_mask) {
        struct tern__job_chunk *c = loop->job_map[i];
        if (c->no != no)
            continue;
        /* A free, held or anonymous record holds id 0, never a job id. */
        return offset < c->cap && c->recs[offset].op.id == id ? &c->recs[offset].op : NULL;
    }
    return NULL;
}

tern_job *tern__job_alloc(tern_loop *loop)
{
    if (TERN_UNLIKELY(loop->job_free == NULL)) {
        if (!(loop->jobs_held > 0 && reclaim(loop)) && !grow(loop))
            return NULL;
    }
    tern_job *job = loop->job_free;
    loop->job_free = (tern_job *)job->op.ready_next;
    loop->job_nfree--;
    return job;
}

void tern__job_release(tern_loop *loop, tern_job *job)
{
    if (TERN_UNLIKELY(tern__job_gen(job) >= TERN__GEN_LIMIT))
        return; /* retired: its ids would come round again */
    job->op.ready_next = (struct tern__op *)loop->job_free;
    loop->job_free = job;
    loop->job_nfree++;
}

void tern__job_held(tern_loop *loop, tern_job *job)
{
    loop->jobs_held++;
    atomic_fetch_add_explicit(&tern__job_chunk(job)->held, 2, memory_order_relaxed);
}

void tern__job_returned(tern_job *job)
{
    struct tern__job_chunk *c = tern__job_chunk(job);
    tern_job *head = atomic_load_explicit(&c->returned, memory_order_relaxed);
    do
        job->op.ready_next = (struct tern__op *)head;
    while (!atomic_compare_exchange_weak_explicit(&c->returned, &head, job, memory_order_release,
                                                  memory_order_relaxed));
    /*
     * The count may dip below zero for a moment (this hand-back raced the
     * loop's tern__job_held for the same record); it is 2 * held | ORPHANED
     * once the loop is gone, and then only hand-backs change it. Acq_rel:
     * the freeing side sees every other side's last touch of the chunk.
     */
    uint32_t was = atomic_fetch_sub_explicit(&c->held, 2, memory_order_acq_rel);
    if (was == (2 | ORPHANED))
        chunk_free(c);
}

uint64_t tern__job_bytes(const tern_loop *loop)
{
    return loop->job_bytes;
}

/*
 * Hand c's number back to the registry, with the floor its records'
 * generations reached, so no id of c is ever issued again (see the top).
 */
static void number_give_back(struct tern__job_chunk *c)
{
    uint32_t floor = 0;
    for (uint32_t i = 0; i < c->cap; i++)
        floor = tern__job_gen(&c->recs[i]) > floor ? tern__job_gen(&c->recs[i]) : floor;
    tern__numbers_give_back(&tern__job_numbers, c->no, floor);
}

/* Place the loop's chunks in a map of the size they need now (or the old one, emptied). */
static void map_rebuild(tern_loop *loop)
{
    uint32_t ncap = 16;
    while (2 * (loop->job_nchunks + 1) > ncap)
        ncap *= 2;
    uint32_t cap = loop->job_map_mask + 1;
    struct tern__job_chunk **map = ncap < cap ? tern__calloc(ncap, sizeof(*map)) : NULL;
    if (map != NULL) {
        free(loop->job_map);
        loop->job_map = map;
        loop->job_map_mask = ncap - 1;
    } else {
        memset(loop->job_map, 0, cap * sizeof(*loop->job_map));
    }
    for (struct tern__job_chunk *c = loop->job_chunks; c != NULL; c = c->next)
        map_place(loop->job_map, loop->job_map_mask, c);
}

/* A chunk on its way out, while the free list is rid of its records. */
#define GOING UINT32_MAX

void tern__job_records_trim(tern_loop *loop)
{
    /*
     * Newest first, so the oldest (and smallest) chunks stay. A chunk the
     * pool still holds a record of has some not free; a hand-back that
     * has returned its last one may not have counted it out yet (`held`,
     * acquire), and must find the chunk there when it does.
     */
    for (struct tern__job_chunk *c = loop->job_chunks; c != NULL; c = c->next)
        c->nfree = 0;
    for (tern_job *job = loop->job_free; job != NULL; job = (tern_job *)job->op.ready_next)
        tern__job_chunk(job)->nfree++;
    struct tern__job_chunk *gone = NULL;
    for (struct tern__job_chunk **at = &loop->job_chunks; *at != NULL;) {
        struct tern__job_chunk *c = *at;
        if (c->nfree != c->cap || loop->job_nfree - c->cap < TERN__JOB_FREE_KEPT ||
            atomic_load_explicit(&c->held, memory_order_acquire) != 0) {
            at = &c->next;
            continue;
        }
        *at = c->next;
        c->next = gone;
        gone = c;
        loop->job_nfree -= c->cap;
        loop->job_nchunks--;
        c->nfree = GOING;
    }
    /* Walk again once the free records double, or when the loop is next quiet. */
    loop->job_trim_left = loop->job_nfree;
    loop->job_trim_at = loop->job_nfree > UINT_MAX / 2 ? UINT_MAX : 2 * loop->job_nfree;
    if (gone == NULL)
        return;
    for (tern_job **link = &loop->job_free; *link != NULL;) {
        tern_job *job = *link;
        if (tern__job_chunk(job)->nfree == GOING)
            *link = (tern_job *)job->op.ready_next;
        else
            link = (tern_job **)&job->op.ready_next;
    }
    while (gone != NULL) {
        struct tern__job_chunk *c = gone;
        gone = c->next;
        number_give_back(c);
        loop->job_bytes -= chunk_bytes(c->cap);
        if (c->owned != NULL)
            loop->job_bytes -= (uint64_t)c->cap * sizeof(*c->owned);
        chunk_free(c);
    }
    map_rebuild(loop);
}

void tern__job_records_destroy(tern_loop *loop)
{
    while (loop->job_chunks != NULL) {
        struct tern__job_chunk *c = loop->job_chunks;
        loop->job_chunks = c->next;
        number_give_back(c);
        /* Before the or: after it, the last hand-back may free the chunk. */
        LEFT_TO_THE_POOL(c);
        if (atomic_fetch_or_explicit(&c->held, ORPHANED, memory_order_acq_rel) == 0)
            chunk_free(c); /* else the hand-back of its last held record frees it */
    }
    free(loop->job_map);
    loop->job_map = NULL;
    loop->job_map_mask = loop->job_nchunks = 0;
    loop->job_free = NULL;
    loop->job_nfree = loop->job_trim_at = loop->job_trim_left = 0;
    loop->jobs_held = 0;
    loop->job_bytes = 0;
    loop->job_chunk_next = 0;
}
