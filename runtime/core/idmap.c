/*
 * The id map: a loop's live operations by id. Open addressing with linear
 * probing over (id, op) pairs, kept at most 5/8 full, with backward-shift
 * deletion so no tombstones accumulate. The id is stored beside the
 * pointer so that probing, growing and deleting never touch the ops
 * themselves: with a million timers, a dereference per probe was a cache
 * miss per probe. Ids are mostly consecutive, so a multiplicative hash
 * spreads them well. (An identity-like hash would keep consecutive ids in
 * consecutive slots, but then a million timers form one run a million long
 * and every backward-shift deletion scans it: tried, and it hung.)
 *
 * Why not a slot+generation id for every op? Ids must never repeat in the
 * process and must not name another loop's operation; a 64-bit counter
 * gives that exactly, and the map turns it back into a pointer for the few
 * calls that take an id (cancel, stop, modify, ref). The two kinds that
 * come in millions, timers and jobs, pay for a table of their own instead
 * (timer_table.c, job_slab.c), with the same guarantees.
 */
#include <errno.h>
#include <stdlib.h>

#include "loop_p.h"

#define MIN_CAPACITY 64u

/*
 * The most a map of cap slots may hold: 5/8 of it. Linear probing's runs
 * grow sharply past about two thirds full; 5/8 keeps a miss (a stale id's
 * lookup, which probes to the run's end) short, and as a ratio of eighths
 * it costs a shift and an add, no division.
 */
static bool fits(size_t entries, size_t cap)
{
    return entries * 8 <= cap * 5;
}

static size_t hash(tern_id id, size_t mask)
{
    return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 24) & mask;
}

int tern__idmap_init(struct tern__idmap *m)
{
    m->slots = tern__calloc(MIN_CAPACITY, sizeof(*m->slots));
    if (m->slots == NULL)
        return -ENOMEM;
    m->mask = MIN_CAPACITY - 1;
    m->count = 0;
    return 0;
}

void tern__idmap_destroy(struct tern__idmap *m)
{
    free(m->slots);
    m->slots = NULL;
}

static void place(struct tern__idmap_slot *slots, size_t mask, struct tern__idmap_slot e)
{
    size_t i = hash(e.id, mask);
    while (slots[i].op != NULL)
        i = (i + 1) & mask;
    slots[i] = e;
}

int tern__idmap_reserve(struct tern__idmap *m, size_t extra)
{
    size_t need = m->count + extra;
    size_t cap = m->mask + 1;
    if (fits(need, cap))
        return 0;
    size_t ncap = cap;
    while (!fits(need, ncap))
        ncap *= 2;
    struct tern__idmap_slot *ns = tern__calloc(ncap, sizeof(*ns));
    if (ns == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < cap; i++)
        if (m->slots[i].op != NULL)
            place(ns, ncap - 1, m->slots[i]);
    free(m->slots);
    m->slots = ns;
    m->mask = ncap - 1;
    return 0;
}

int tern__idmap_insert(struct tern__idmap *m, struct tern__op *op)
{
    if (TERN_UNLIKELY(!fits(m->count + 1, m->mask + 1))) {
        int rc = tern__idmap_reserve(m, 1);
        if (rc < 0)
            return rc;
    }
    place(m->slots, m->mask, (struct tern__idmap_slot){op->id, op});
    m->count++;
    return 0;
}

struct tern__op *tern__idmap_find(const struct tern__idmap *m, tern_id id)
{
    for (size_t i = hash(id, m->mask); m->slots[i].op != NULL; i = (i + 1) & m->mask)
        if (m->slots[i].id == id)
            return m->slots[i].op;
    return NULL;
}

void tern__idmap_remove(struct tern__idmap *m, struct tern__op *op)
{
    size_t i = hash(op->id, m->mask);
    while (m->slots[i].op != op) {
        TERN_INSIST(m->slots[i].op != NULL);
        i = (i + 1) & m->mask;
    }
    /*
     * Backward shift: pull later members of the probe run into the hole
     * when their home slot does not lie (cyclically) between the hole and
     * their position, so lookups never stop early at a false empty slot.
     */
    size_t hole = i;
    for (size_t j = (i + 1) & m->mask; m->slots[j].op != NULL; j = (j + 1) & m->mask) {
        size_t home = hash(m->slots[j].id, m->mask);
        bool movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
        if (movable) {
            m->slots[hole] = m->slots[j];
            hole = j;
        }
    }
    m->slots[hole] = (struct tern__idmap_slot){0, NULL};
    m->count--;
}
