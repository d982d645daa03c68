/*
 * runner.h: tern's own small test runner for the programs built for
 * Windows (criterion does not ship for mingw). A program defines its
 * tests with TEST, lists them in a table for runner_main, and checks
 * with CHECK; each test runs in turn, a failed CHECK marks its test
 * failed and the test goes on. The program prints "ok: NAME" or
 * "FAIL: NAME" per test, then "N passed, N failed", and exits 1 when any
 * failed: what meson test and .ci/count.py read. Only C11 and stdio, so
 * it builds with any compiler and runs under wine.
 *
 *     TEST(adds) { CHECK(1 + 1 == 2); }
 *     static const struct runner_test tests[] = {RUNNER_TEST(adds)};
 *     int main(void) { return RUNNER_MAIN(tests); }
 */
#ifndef TERN_WIN_RUNNER_H
#define TERN_WIN_RUNNER_H

#include <stdbool.h>
#include <stdio.h>

/* Whether the test now running has failed a check. */
static bool runner_failed;

#define TEST(name) static void name(void)

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            runner_failed = true;                                                    \
        }                                                                            \
    } while (0)

struct runner_test {
    const char *name;
    void (*fn)(void);
};

/* runner_main: run every test in tests[0..n), print the tally; 0 when all passed. */
static int runner_main(const struct runner_test *tests, int n)
{
    int passed = 0, failed = 0;
    for (int i = 0; i < n; i++) {
        runner_failed = false;
        tests[i].fn();
        printf("%s: %s\n", runner_failed ? "FAIL" : "ok", tests[i].name);
        fflush(stdout);
        if (runner_failed)
            failed++;
        else
            passed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed > 0;
}

/* RUNNER_TEST(name): a table entry, {"name", name}. */
#define RUNNER_TEST(name) \
    {                     \
#name, name       \
    }

/* RUNNER_MAIN(table): main's body for a static table of struct runner_test. */
#define RUNNER_MAIN(table) runner_main(table, (int)(sizeof(table) / sizeof((table)[0])))

#endif /* TERN_WIN_RUNNER_H */
