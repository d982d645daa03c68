#include <stdio.h>
#include <stdlib.h>

#include "check.h"

#if defined(TERN_COVERAGE)
void __gcov_dump(void); /* libgcov: write this process's counters now */
#endif

/*
 * One place every failed check ends. It prints with a single fprintf so
 * that lines from several threads do not interleave, then aborts (a test
 * catches that as SIGABRT).
 */
noreturn void tern__check_failed(const char *file, int line, const char *func, const char *kind,
                                 const char *what)
{
    fprintf(stderr, "tern: %s:%d: %s: %s failed: %s\n", file, line, func, kind, what);
    fflush(stderr);
#if defined(TERN_COVERAGE)
    __gcov_dump(); /* abort() skips the exit-time write: the abort paths count */
#endif
    abort();
}
