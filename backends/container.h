/*
 * From a member's address back to the structure that holds it: how an
 * intrusive node (a queue node, a list link, an io watch) finds its owner.
 *
 * The unevaluated arm of the conditional makes the compiler compare the
 * pointer's type with the member's, so passing the wrong member is a
 * compile-time diagnostic (an error under werror), at no cost at run time.
 * Every layer may include this header (it is in backends/, the bottom).
 */
#ifndef TERN_CONTAINER_H
#define TERN_CONTAINER_H

#include <stddef.h>

#define tern__container_of(ptr, type, member) \
    ((type *)(void *)((char *)(1 ? (ptr) : &((type *)0)->member) - offsetof(type, member)))

#endif
