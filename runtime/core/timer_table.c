/*
 * The timer table: where a loop's timer records live, and what a timer's
 * id means. (The timers' behaviour is in timer.c.)
 *
 * Records sit in one array by slot, grown 256 at a time (a chunk) as the
 * loop needs them and kept until it is freed; a slot is chunk * 256 +
 * offset. Slots are handed out in order, then reused from a LIFO free
 * list, so a reused record is usually still in cache.
 *
 * Ids. A timer's id is
 *
 *     bit 63: 1 (a timer; the process-wide id counter never gets there)
 *     bits 38..62: the chunk's process-wide number (25 bits)
 *     bits 30..37: the offset in the chunk (8 bits)
 *     bits 0..29: the slot's generation (30 bits)
 *
 * so finding a timer is a lookup of the chunk number in a small per-loop
 * map, an index, and a compare of the generation: no per-timer map entry.
 * An id must never be handed out twice in the process and must never name
 * another loop's timer; the two halves of that:
 *
 * - A slot's generation goes up by one each time a timer in it finishes,
 *   which makes every id of that slot stale. A slot whose generation
 *   reaches 2^30 is retired for good (never reused; 32 bytes stay with
 *   the loop), instead of wrapping.
 * - Chunk numbers belong to one loop at a time. A process-wide registry
 *   (numbers.c) hands them out; a loop that is freed gives them back with a floor,
 *   the highest generation any slot of the chunk reached, and the next
 *   owner starts every slot of it there. So a (number, offset,
 *   generation) triple is never issued twice, and another loop's id names
 *   a chunk this loop does not own, or one it owns at generations the
 *   other never issued: -ENOENT either way. A chunk returned with a floor
 *   past 2^29 is burned instead (never handed out again): each burned
 *   number took at least 2^29 timers through one slot, and there are
 *   2^25 numbers, so the process runs out (tern_timer_start says -ENOMEM)
 *   only after 2^54 timers started in that one pattern, decades at ten
 *   million a second.
 */
#include <errno.h>
#include <stdlib.h>

#include "loop_p.h"
#include "os_thread.h"
#include "testing.h"
#include "timer_table.h"

#define GEN_LIMIT TERN__TIMER_GEN_LIMIT
#define NO_LIMIT (UINT32_C(1) << TERN__TIMER_NO_BITS)
#define OFFSET_SHIFT TERN__TIMER_OFFSET_SHIFT
#define NO_SHIFT TERN__TIMER_NO_SHIFT

/* ------------------------------------------------------------------ */
/* Chunk numbers -> chunk index (per loop)                             */
/* ------------------------------------------------------------------ */

static uint32_t map_hash(uint32_t no, uint32_t mask)
{
    return (uint32_t)((no * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & mask;
}

static void map_place(uint64_t *map, uint32_t mask, uint64_t e)
{
    uint32_t i = map_hash((uint32_t)(e >> 32) - 1, mask);
    while (map[i] != 0)
        i = (i + 1) & mask;
    map[i] = e;
}

/* Room for one more chunk: the map stays at most half full. */
static int map_reserve(struct tern__timer_table *t)
{
    uint32_t cap = t->map ? t->map_mask + 1 : 0;
    if (2 * (t->nchunks + 1) <= cap)
        return 0;
    uint32_t ncap = cap ? 2 * cap : 16;
    uint64_t *map = tern__calloc(ncap, sizeof(*map));
    if (map == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < cap; i++)
        if (t->map[i] != 0)
            map_place(map, ncap - 1, t->map[i]);
    free(t->map);
    t->map = map;
    t->map_mask = ncap - 1;
    return 0;
}

static uint32_t map_find(const struct tern__timer_table *t, uint32_t no)
{
    if (t->map == NULL)
        return UINT32_MAX;
    for (uint32_t i = map_hash(no, t->map_mask); t->map[i] != 0; i = (i + 1) & t->map_mask)
        if ((uint32_t)(t->map[i] >> 32) == no + 1)
            return (uint32_t)t->map[i];
    return UINT32_MAX;
}

/* ------------------------------------------------------------------ */
/* Slots                                                               */
/* ------------------------------------------------------------------ */

static int add_chunk(struct tern__timer_table *t)
{
    if (t->nchunks == TERN__HEAP_OP >> TERN__TIMER_CHUNK_BITS)
        return -ENOMEM; /* slots must stay below TERN__HEAP_OP */
    if (t->nchunks == t->chunk_no_cap) {
        uint32_t ncap = t->chunk_no_cap ? 2 * t->chunk_no_cap : 4;
        uint32_t *nos = tern__realloc(t->chunk_no, ncap * sizeof(*nos));
        if (nos == NULL)
            return -ENOMEM;
        t->chunk_no = nos;
        t->chunk_no_cap = ncap;
    }
    uint32_t first = t->nchunks * TERN__TIMER_CHUNK;
    if (first == t->rec_cap) {
        uint32_t ncap = t->rec_cap ? 2 * t->rec_cap : TERN__TIMER_CHUNK;
        struct tern__timer *rec = tern__realloc(t->rec, (size_t)ncap * sizeof(*rec));
        if (rec == NULL)
            return -ENOMEM;
        t->rec = rec;
        t->rec_cap = ncap;
    }
    if (map_reserve(t) < 0)
        return -ENOMEM;
    uint32_t no, floor;
    if (tern__numbers_take(&tern__timer_numbers, &no, &floor) < 0)
        return -ENOMEM;
    for (uint32_t i = first; i < first + TERN__TIMER_CHUNK; i++)
        t->rec[i] = (struct tern__timer){.heap = UINT32_MAX, .gen = floor};
    t->chunk_no[t->nchunks] = no;
    map_place(t->map, t->map_mask, ((uint64_t)no + 1) << 32 | t->nchunks);
    t->nchunks++;
    return 0;
}

/* The inline fast path found no free slot and no room: add a chunk. */
int tern__timer_slot_alloc_slow(struct tern__timer_table *t, uint32_t *slot)
{
    if (t->free != TERN__SLOT_NONE || t->used < t->nchunks * TERN__TIMER_CHUNK)
        return tern__timer_slot_alloc(t, slot);
    int rc = add_chunk(t);
    if (rc < 0)
        return rc;
    *slot = t->used++;
    return 0;
}

/*
 * The slot of the live timer `id` names in this table, or TERN__SLOT_NONE
 * (not a timer id, a chunk this loop does not own, a stale generation,
 * a free slot). Internal timers are left to the caller.
 */
uint32_t tern__timer_slot_of(const struct tern__timer_table *t, tern_id id)
{
    if (!tern__timer_id(id))
        return TERN__SLOT_NONE;
    uint32_t chunk = map_find(t, (uint32_t)(id >> NO_SHIFT) & (NO_LIMIT - 1));
    if (chunk == UINT32_MAX)
        return TERN__SLOT_NONE;
    uint32_t slot = chunk << TERN__TIMER_CHUNK_BITS |
                    ((uint32_t)(id >> OFFSET_SHIFT) & (TERN__TIMER_CHUNK - 1));
    const struct tern__timer *r = tern__timer_at(t, slot);
    if (r->cb == NULL || r->gen != (uint32_t)(id & (GEN_LIMIT - 1)))
        return TERN__SLOT_NONE;
    return slot;
}

/* ------------------------------------------------------------------ */
/* Periods of repeating timers                                         */
/* ------------------------------------------------------------------ */

/* A repeat index for period (1-based, 0 on failure). */
uint32_t tern__timer_repeat_alloc(struct tern__timer_table *t, uint64_t period)
{
    uint32_t ix;
    if (t->repeat_free != 0) {
        ix = t->repeat_free - 1;
        t->repeat_free = t->repeat[ix].next;
    } else {
        if (t->repeat_used == t->repeat_cap) {
            uint32_t ncap = t->repeat_cap ? 2 * t->repeat_cap : 16;
            if (ncap > (UINT32_MAX >> 4))
                return 0; /* the index has 28 bits in the record */
            struct tern__timer_repeat *v = tern__realloc(t->repeat, ncap * sizeof(*v));
            if (v == NULL)
                return 0;
            t->repeat = v;
            t->repeat_cap = ncap;
        }
        ix = t->repeat_used++;
    }
    t->repeat[ix] = (struct tern__timer_repeat){.period = period, .next = TERN__SLOT_NONE};
    return ix + 1;
}

void tern__timer_repeat_free(struct tern__timer_table *t, uint32_t ix)
{
    t->repeat[ix - 1].next = t->repeat_free;
    t->repeat_free = ix;
}

/* ------------------------------------------------------------------ */
/* Teardown                                                            */
/* ------------------------------------------------------------------ */

void tern__timer_table_destroy(struct tern__timer_table *t)
{
    for (uint32_t c = 0; c < t->nchunks; c++) {
        uint32_t floor = 0;
        for (uint32_t i = c * TERN__TIMER_CHUNK; i < (c + 1) * TERN__TIMER_CHUNK; i++)
            if (t->rec[i].gen > floor)
                floor = t->rec[i].gen;
        tern__numbers_give_back(&tern__timer_numbers, t->chunk_no[c], floor);
    }
    free(t->rec);
    free(t->chunk_no);
    free(t->map);
    free(t->repeat);
    t->rec = NULL;
    t->chunk_no = NULL;
    t->map = NULL;
    t->repeat = NULL;
    t->nchunks = t->chunk_no_cap = t->rec_cap = t->used = 0;
}
