/*
 * tern's own intrusive list (backends/list.h) and container_of
 * (backends/container.h): the checks in test/list_checks.h, which the
 * Windows program test/win/list_test.c runs as well.
 */
#include <criterion/criterion.h>

#define LIST_CHECK(cond, what) cr_expect((cond), "%s", (what))
#include "list_checks.h"

Test(list, operations)
{
    list_checks();
}
