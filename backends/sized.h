/*
 * Growable public structs (docs/api.md, "How the ABI grows"): the library
 * fills a struct a caller compiled against an older or newer header. The
 * caller passes the size it knows; the library copies its complete
 * snapshot up to that size and zeroes whatever lies beyond its own struct.
 */
#ifndef TERN_SIZED_H
#define TERN_SIZED_H

#include <stddef.h>
#include <string.h>

static inline void tern__copy_sized(void *out, size_t size, const void *full, size_t full_size)
{
    memcpy(out, full, size < full_size ? size : full_size);
    if (size > full_size)
        memset((char *)out + full_size, 0, size - full_size);
}

#endif
