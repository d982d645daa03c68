/*
 * tern_loop_memory_bytes: the bytes a loop holds, summed from its own
 * containers on its own thread (so nothing is published per turn).
 */
#include "admit.h"
#include "job_p.h"
#include "loop_p.h"

uint64_t tern_loop_memory_bytes(const tern_loop *loop)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    const tern_loop *l = loop;
    uint64_t bytes = sizeof(*l);
    if (l->ids.slots != NULL)
        bytes += (l->ids.mask + 1) * sizeof(struct tern__idmap_slot);
    bytes += (uint64_t)l->heap.cap * sizeof(struct tern__heap_entry) +
             (uint64_t)l->heap.ops_cap * sizeof(*l->heap.ops);
    bytes += (uint64_t)l->timers.rec_cap * sizeof(struct tern__timer) +
             (uint64_t)l->timers.chunk_no_cap * sizeof(uint32_t) +
             (l->timers.map != NULL ? ((uint64_t)l->timers.map_mask + 1) * sizeof(uint64_t) : 0) +
             (uint64_t)l->timers.repeat_cap * sizeof(struct tern__timer_repeat);
    bytes += tern__slab_bytes(&l->defers);
    bytes += (uint64_t)l->fds_len * sizeof(*l->fds);
    /* Posts waiting on the inbound queue: their records, carved from the
     * producers' blocks, counted at the size of a run's later posts (a
     * run's first record is twice that; unspent credit is none). */
    bytes += tern__posts_pending(l) * sizeof(struct tern__post_entry);
    /* Job records: the loop's chunks of them (in flight, held by the pool
     * as tombstones, or free for reuse); the result ring. */
    bytes += tern__job_bytes(l);
    if (l->job_map != NULL)
        bytes += ((uint64_t)l->job_map_mask + 1) * sizeof(*l->job_map);
    if (l->ring != NULL)
        bytes += sizeof(*l->ring) + (l->ring->mask + 1) * sizeof(struct tern__ring_slot);
    return bytes;
}
