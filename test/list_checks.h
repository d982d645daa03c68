/*
 * list_checks.h: the checks of tern's own intrusive list (backends/list.h),
 * its container_of (backends/container.h) and its spin pause
 * (backends/spin.h), shared by the Linux unit test (test/list_test.c) and
 * the plain Windows program (test/win/list_test.c). Plain C11. The
 * including file defines, before including this:
 *
 *   LIST_CHECK(cond, what)   count and print one check (what: a string)
 *
 * list_checks(): every check, one thread.
 */
#ifndef TERN_LIST_CHECKS_H
#define TERN_LIST_CHECKS_H

#include <stdbool.h>
#include <stddef.h>

#include "container.h"
#include "list.h"
#include "spin.h"

struct list_item {
    int pad[3]; /* the link sits past the start: container_of must subtract */
    struct tern__list link;
    int v;
};

/* Whether head holds exactly want[0..n) forwards, and the same backwards. */
static bool list_holds(struct tern__list *head, const int *want, int n)
{
    int i = 0;
    struct list_item *it;
    tern__list_for_each(it, head, struct list_item, link)
    {
        if (i >= n || it->v != want[i])
            return false;
        i++;
    }
    if (i != n)
        return false;
    for (struct tern__list *l = head->prev; l != head; l = l->prev) {
        if (i == 0 || tern__container_of(l, struct list_item, link)->v != want[i - 1])
            return false;
        if (l->next->prev != l || l->prev->next != l)
            return false;
        i--;
    }
    return i == 0 && tern__list_empty(head) == (n == 0);
}

static void list_checks(void)
{
    struct list_item a = {.v = 1}, b = {.v = 2}, c = {.v = 3}, d = {.v = 4};

    LIST_CHECK(tern__container_of(&b.link, struct list_item, link) == &b,
               "container_of finds the structure from a member past its start");
    LIST_CHECK(tern__container_of(&b.pad, struct list_item, pad) == &b,
               "container_of finds the structure from its first member");

    struct tern__list head;
    tern__list_init(&head);
    LIST_CHECK(tern__list_empty(&head) && head.next == &head && head.prev == &head,
               "a new head is empty and points at itself");

    tern__list_add(&a.link, &head);
    tern__list_add(&b.link, &head);
    tern__list_add(&c.link, &head);
    LIST_CHECK(list_holds(&head, (const int[]){3, 2, 1}, 3), "add links first: 3 2 1");
    LIST_CHECK(tern__list_first(&head, struct list_item, link) == &c, "first is the last added");

    tern__list_del(&b.link);
    LIST_CHECK(list_holds(&head, (const int[]){3, 1}, 2), "a middle member unlinks: 3 1");
    tern__list_del(&a.link);
    LIST_CHECK(list_holds(&head, (const int[]){3}, 1), "the last member unlinks: 3");
    tern__list_add(&a.link, &head);
    LIST_CHECK(list_holds(&head, (const int[]){1, 3}, 2), "an unlinked member links again: 1 3");
    tern__list_del(&a.link);
    tern__list_del(&c.link);
    LIST_CHECK(list_holds(&head, (const int[]){0}, 0), "unlinking every member empties the list");

    struct tern__list from, to;
    tern__list_init(&from);
    tern__list_init(&to);
    tern__list_add(&a.link, &to);
    tern__list_splice(&from, &to);
    LIST_CHECK(list_holds(&to, (const int[]){1}, 1) && list_holds(&from, (const int[]){0}, 0),
               "splicing an empty list changes nothing");

    tern__list_add(&b.link, &from);
    tern__list_add(&c.link, &from);
    tern__list_splice(&from, &to);
    LIST_CHECK(list_holds(&to, (const int[]){3, 2, 1}, 3),
               "a splice puts its members first, in order");
    LIST_CHECK(list_holds(&from, (const int[]){0}, 0), "a splice leaves its source empty");

    tern__list_add(&d.link, &from);
    struct tern__list empty;
    tern__list_init(&empty);
    tern__list_splice(&from, &empty);
    LIST_CHECK(list_holds(&empty, (const int[]){4}, 1), "a splice into an empty list: 4");

    int seen = 0, sum = 0;
    struct list_item *it, *nx;
    tern__list_for_each_safe(it, nx, &to, struct list_item, link)
    {
        tern__list_del(&it->link);
        it->link.next = it->link.prev = NULL; /* as a free would leave it */
        seen++;
        sum += it->v;
    }
    LIST_CHECK(seen == 3 && sum == 6 && tern__list_empty(&to),
               "the safe walk survives unlinking each member it visits");

    for (int i = 0; i < 100; i++)
        tern__spin_pause();
    LIST_CHECK(true, "the spin pause runs");
}

#endif
