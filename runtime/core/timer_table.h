/*
 * The timer table's slot allocation (timer_table.c): the fast path takes
 * a free slot or the next unused one inline, since every timer start pays
 * for it; the slow path grows the table. The table's layout is op_types.h's,
 * where the loop embeds it.
 */
#ifndef TERN_TIMER_TABLE_H
#define TERN_TIMER_TABLE_H

#include <stdint.h>

#include "check.h"
#include "op_types.h"

/* The table (timer_table.c). slot_alloc: 0 or -ENOMEM; the slot it gives is not armed. */
int tern__timer_slot_alloc_slow(struct tern__timer_table *t, uint32_t *slot);
static inline int tern__timer_slot_alloc(struct tern__timer_table *t, uint32_t *slot)
{
    if (TERN_LIKELY(t->free != TERN__SLOT_NONE)) {
        *slot = t->free;
        t->free = t->rec[*slot].next;
        t->rec[*slot].heap = UINT32_MAX; /* the word was its link: not armed */
        return 0;
    }
    if (TERN_LIKELY(t->used < t->nchunks * TERN__TIMER_CHUNK)) {
        *slot = t->used++;
        return 0;
    }
    return tern__timer_slot_alloc_slow(t, slot);
}

#endif
