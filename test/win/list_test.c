/*
 * list_test: tern's own intrusive list (backends/list.h), container_of
 * (backends/container.h) and spin pause (backends/spin.h), as a plain
 * Windows program: the checks the Linux unit test runs (test/list_checks.h).
 * Exit status 0 when every check passed; closes with "N passed, N failed".
 */
#include <stdio.h>

static unsigned passed, failed;

#define LIST_CHECK(cond, what)                                               \
    do {                                                                     \
        int ok_ = (cond) != 0;                                               \
        printf("%s: %s (line %d)\n", ok_ ? "ok" : "FAIL", (what), __LINE__); \
        *(ok_ ? &passed : &failed) += 1;                                     \
    } while (0)

#include "../list_checks.h"

int main(void)
{
    list_checks();
    printf("%u passed, %u failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
