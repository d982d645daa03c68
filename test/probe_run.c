/*
 * The running example test/probes_test.sh traces: one loop submits `jobs`
 * bounded jobs through a result ring of 16 (so some submissions are
 * refused, cause undelivered, and retried after a turn), posts `posts`
 * functions to itself, runs until nothing is live, and prints what it
 * counted itself, for the tracer's counts to be compared with:
 *
 *   submitted N refused R done D posts P turns T wakes W
 *
 * With a third argument "wait" it first reads one byte from stdin, so the
 * tracer can attach (filtered on this pid) before anything fires.
 * Exits non-zero if any count is not what it asked for.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tern.h"

static unsigned done_count, post_count;

static void *work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

static void done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop;
    (void)id;
    (void)result;
    (void)arg;
    if (status == 0)
        done_count++;
}

static void posted(tern_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
    post_count++;
}

int main(int argc, char **argv)
{
    unsigned jobs = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 100;
    unsigned posts = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : 10;
    if (argc > 3 && strcmp(argv[3], "wait") == 0) {
        char c;
        if (read(STDIN_FILENO, &c, 1) != 1)
            return 2;
    }
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.max_undelivered = 16;
    tern_loop *loop = NULL;
    int rc = tern_loop_new(&loop, &o);
    if (rc < 0) {
        fprintf(stderr, "tern_loop_new: %s\n", tern_strerror(rc));
        return 1;
    }
    unsigned refused = 0;
    for (unsigned i = 0; i < posts; i++)
        if ((rc = tern_post(loop, posted, NULL)) < 0) {
            fprintf(stderr, "tern_post: %s\n", tern_strerror(rc));
            return 1;
        }
    for (unsigned i = 0; i < jobs; i++) {
        while ((rc = tern_submit(loop, TERN_BOUNDED, work, done, NULL, NULL)) == -EAGAIN) {
            refused++;
            tern_loop_run_once(loop, -1);
        }
        if (rc < 0) {
            fprintf(stderr, "tern_submit: %s\n", tern_strerror(rc));
            return 1;
        }
    }
    tern_loop_run(loop);
    tern_loop_stats st;
    tern_loop_stats_get(loop, &st);
    tern_loop_free(loop);
    printf("submitted %u refused %u done %u posts %u turns %" PRIu64 " wakes %" PRIu64 "\n",
           jobs, refused, done_count, post_count, st.turns, st.wake_syscalls);
    return done_count == jobs && post_count == posts ? 0 : 1;
}
