/*
 * How a forked test child ends: child_exit(status) is _exit(status), after
 * writing the child's coverage counters in a coverage build (meson
 * -Db_coverage=true defines TERN_COVERAGE). _exit skips the exit-time
 * write, so without this what only a child runs would never count.
 */
#ifndef TERN_TEST_CHILD_EXIT_H
#define TERN_TEST_CHILD_EXIT_H

#include <unistd.h>

#if defined(TERN_COVERAGE)
void __gcov_dump(void);
#endif

static inline _Noreturn void child_exit(int status)
{
#if defined(TERN_COVERAGE)
    __gcov_dump();
#endif
    _exit(status);
}

#endif
