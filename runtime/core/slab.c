/*
 * A loop-local allocator for fixed-size records (timers, defers): chunks
 * of many records and a free list threaded through the free ones. No
 * header per record and no lock, since only the loop's thread allocates
 * and frees; a million timers cost a million records, not a million
 * malloc chunks. Chunks go back only when the loop is freed: a loop keeps
 * the memory of its peak.
 */
#include <errno.h>
#include <stdlib.h>

#include "loop_p.h"

struct tern__slab_chunk {
    struct tern__slab_chunk *next;
    alignas(16) unsigned char data[];
};

void tern__slab_init(struct tern__slab *s, size_t size)
{
    /* Room for the free-list link, and 16-byte alignment for the record. */
    size = size < sizeof(void *) ? sizeof(void *) : size;
    s->size = (size + 15) & ~(size_t)15;
    s->free = NULL;
    s->chunks = NULL;
    s->next_chunk = 64;
}

void *tern__slab_alloc(struct tern__slab *s)
{
    if (TERN_UNLIKELY(s->free == NULL)) {
        size_t n = s->next_chunk;
        struct tern__slab_chunk *c = tern__malloc(sizeof(*c) + n * s->size);
        if (c == NULL)
            return NULL;
        c->next = s->chunks;
        s->chunks = c;
        /* Chunks grow with the loop's appetite, up to 64k records each. */
        if (s->next_chunk < 65536)
            s->next_chunk *= 2;
        for (size_t i = n; i-- > 0;) {
            void **rec = (void **)(c->data + i * s->size);
            *rec = s->free;
            s->free = rec;
        }
    }
    void **rec = s->free;
    s->free = *rec;
    return rec;
}

void tern__slab_free(struct tern__slab *s, void *p)
{
    *(void **)p = s->free;
    s->free = p;
}

uint64_t tern__slab_bytes(const struct tern__slab *s)
{
    /* Chunk k (oldest first) holds 64 << k records, at most 64k (tern__slab_alloc). */
    uint64_t bytes = 0;
    size_t n = 64;
    for (const struct tern__slab_chunk *c = s->chunks; c != NULL; c = c->next) {
        bytes += sizeof(*c) + n * s->size;
        if (n < 65536)
            n *= 2;
    }
    return bytes;
}

void tern__slab_destroy(struct tern__slab *s)
{
    while (s->chunks != NULL) {
        struct tern__slab_chunk *c = s->chunks;
        s->chunks = c->next;
        free(c);
    }
    s->free = NULL;
}
