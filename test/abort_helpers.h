/*
 * Abort tests that check *why* the process died.
 *
 * Criterion's `.signal = SIGABRT` accepts any abort: glibc's double-free
 * check, an AddressSanitizer report with abort_on_error=1, or an assert in
 * a library would all pass a test that means "tern_timer_start aborted
 * because a foreign thread called it". Criterion cannot read the stderr of
 * a test that dies, so expect_abort() forks a child of its own, points the
 * child's stderr at a pipe, runs the offending call there, and in the
 * parent requires both: the child was killed by SIGABRT, and what it
 * printed contains the line backends/check.c writes for a failed check,
 *
 *     tern: <file>:<line>: <function>: <KIND> failed: <rule>
 *
 * naming the function and the rule the test is about. Under ASan the suite
 * runs with abort_on_error=0, so a sanitizer report is an exit(1) and
 * fails here instead of passing as an abort.
 *
 * The wait for the child is bounded (ABORT_WAIT_NS); a child still alive
 * then is killed and the test fails with what it had printed so far.
 */
#ifndef TERN_TEST_ABORT_HELPERS_H
#define TERN_TEST_ABORT_HELPERS_H

#include <criterion/criterion.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "child_exit.h"

/* How long the child may take to die. A liveness bound, not a speed
 * limit: a correct child aborts within milliseconds. */
#define ABORT_WAIT_NS (UINT64_C(20) * 1000000000)

/* The rules tern's contract checks print (runtime/loop/loop.c). Tests name
 * them here once, so a reworded rule breaks one line, not seventeen. */
#define RULE_LOOP_ONLY "loop-only call from a thread that is not running this loop"
#define RULE_RUNNING_ELSEWHERE "the loop is already running on another thread"
#define RULE_OWN_CALLBACK "called from inside the loop's own callback"
#define RULE_FREE_WHILE_RUNNING "the loop is running: teardown must be serialised with dispatch"

static inline uint64_t abort_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000 + (uint64_t)ts.tv_nsec;
}

/* The first line of text that starts with "tern: " (the check's report), or NULL. */
static inline const char *abort_report_line(const char *text, char *line, size_t cap)
{
    for (const char *p = text; p != NULL && *p != '\0';) {
        const char *end = strchr(p, '\n');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (strncmp(p, "tern: ", 6) == 0) {
            if (len >= cap)
                len = cap - 1;
            memcpy(line, p, len);
            line[len] = '\0';
            return line;
        }
        p = end != NULL ? end + 1 : NULL;
    }
    return NULL;
}

/* The report line of the last expect_abort, for tests that check more of
 * it (the file it names, for one). */
static char abort_report[1024];

/*
 * Run body(ctx) in a forked child and require that it dies of SIGABRT
 * after tern reports a failed check in function `fn` whose text contains
 * `rule`. If body returns, the child exits 0 and the test fails.
 * Call from the test's main thread before the test starts any thread or
 * loop of its own (the child inherits only the calling thread).
 */
static inline void expect_abort(void (*body)(void *ctx), void *ctx, const char *fn,
                                const char *rule)
{
    int pipefd[2];
    cr_assert_eq(pipe(pipefd), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(pipefd[1], STDERR_FILENO);
        close(pipefd[0]);
        close(pipefd[1]);
        body(ctx);
        child_exit(0); /* no atexit handlers, no leak check: the parent decides */
    }
    close(pipefd[1]);

    static char buf[16384];
    size_t len = 0;
    bool eof = false;
    uint64_t deadline = abort_now_ns() + ABORT_WAIT_NS;
    while (!eof) {
        uint64_t now = abort_now_ns();
        if (now >= deadline)
            break;
        struct pollfd p = {.fd = pipefd[0], .events = POLLIN};
        int rc = poll(&p, 1, (int)((deadline - now) / 1000000) + 1);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            continue; /* the deadline check above ends the wait */
        char scratch[512];
        ssize_t n = read(pipefd[0], len < sizeof buf - 1 ? buf + len : scratch,
                         len < sizeof buf - 1 ? sizeof buf - 1 - len : sizeof scratch);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            eof = true;
        else if (len < sizeof buf - 1)
            len += (size_t)n;
    }
    buf[len] = '\0';
    close(pipefd[0]);

    int status = 0;
    if (!eof) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        cr_assert_fail("the child neither aborted nor exited within %llu s "
                       "(expected %s to abort: %s); it printed:\n%s",
                       (unsigned long long)(ABORT_WAIT_NS / 1000000000), fn, rule, buf);
    }
    pid_t w;
    while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    cr_assert_eq(w, pid, "waitpid: %s", strerror(errno));

    if (WIFEXITED(status))
        cr_assert_fail("the child exited with status %d instead of aborting in %s (%s) "
                       "(0: the call returned; 1: a sanitizer report); stderr:\n%s",
                       WEXITSTATUS(status), fn, rule, buf);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
              "the child died of signal %d, not SIGABRT (expected %s: %s); stderr:\n%s",
              WIFSIGNALED(status) ? WTERMSIG(status) : 0, fn, rule, buf);

    char line[1024];
    const char *report = abort_report_line(buf, line, sizeof line);
    cr_assert_not_null(report,
                       "SIGABRT, but not from a tern check (expected %s: %s); stderr:\n%s", fn,
                       rule, buf);
    snprintf(abort_report, sizeof abort_report, "%s", report);
    char who[256];
    snprintf(who, sizeof who, ": %s: ", fn);
    cr_assert_not_null(strstr(report, who), "the abort does not name %s: %s", fn, report);
    cr_assert_not_null(strstr(report, rule), "the abort does not state the rule \"%s\": %s", rule,
                       report);
}

#endif
