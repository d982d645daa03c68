/*
 * An intrusive circular doubly linked list: a tern__list is both a list's
 * head and the link a member holds, so unlinking a member is O(1) and
 * needs no walk. Only what the long class's worker lists (pool/long.c)
 * use. Not thread-safe: the owner of the list serialises every call.
 *
 * An empty head points at itself. An unlinked member's link is left as
 * it was (stale); it may be added again, but not deleted twice.
 */
#ifndef TERN_LIST_H
#define TERN_LIST_H

#include <stdbool.h>

#include "container.h"

struct tern__list {
    struct tern__list *next, *prev;
};

static inline void tern__list_init(struct tern__list *head)
{
    head->next = head;
    head->prev = head;
}

static inline bool tern__list_empty(const struct tern__list *head)
{
    return head->next == head;
}

/* Link n first on head's list. */
static inline void tern__list_add(struct tern__list *n, struct tern__list *head)
{
    n->next = head->next;
    n->prev = head;
    head->next->prev = n;
    head->next = n;
}

/* Unlink n from whatever list holds it. */
static inline void tern__list_del(struct tern__list *n)
{
    n->next->prev = n->prev;
    n->prev->next = n->next;
}

/* Move every member of from to the front of to, in order; from is left empty. */
static inline void tern__list_splice(struct tern__list *from, struct tern__list *to)
{
    if (tern__list_empty(from))
        return;
    from->next->prev = to;
    from->prev->next = to->next;
    to->next->prev = from->prev;
    to->next = from->next;
    tern__list_init(from);
}

/* The structure holding head's first link (the list must not be empty). */
#define tern__list_first(head, type, member) tern__container_of((head)->next, type, member)

/* Each structure (a type) on head's list, first to last; pos must stay linked. */
#define tern__list_for_each(pos, head, type, member)                                       \
    for ((pos) = tern__container_of((head)->next, type, member); &(pos)->member != (head); \
         (pos) = tern__container_of((pos)->member.next, type, member))

/* The same, where the body may unlink or free pos (nx holds the next). */
#define tern__list_for_each_safe(pos, nx, head, type, member)        \
    for ((pos) = tern__container_of((head)->next, type, member),     \
        (nx) = tern__container_of((pos)->member.next, type, member); \
         &(pos)->member != (head);                                   \
         (pos) = (nx), (nx) = tern__container_of((nx)->member.next, type, member))

#endif
