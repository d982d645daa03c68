/*
 * hello_loop: a tour of the loop in one small program.
 *
 * - a repeating timer ticks every 10 ms and stops itself after 5 ticks;
 * - another thread posts 1000 functions to the loop (the only cross-thread
 *   way in), writes a byte into a pipe, and posts a last function that
 *   lets the loop finish: the loop is kept alive (TERN_LOOP_KEEPALIVE) so
 *   it sleeps, rather than returning, while it waits for that thread;
 * - an fd watcher sees the byte and stops itself;
 * - a bounded pool job hashes a buffer off the loop and reports back;
 * - when nothing is live, tern_loop_run returns and we print the stats.
 *
 * Build: part of the meson build (docs/examples). Run: ./hello_loop
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "tern.h"

static int ticks, posts_seen, pipe_fds[2];

static void on_tick(tern_loop *loop, tern_id id, void *arg)
{
    (void)arg;
    if (++ticks == 5)
        tern_timer_stop(loop, id);
}

static void on_post(tern_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
    posts_seen++;
}

static void on_readable(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    (void)arg;
    char byte;
    if ((events & TERN_READABLE) && read(fd, &byte, 1) == 1)
        printf("watcher: read '%c' from the pipe\n", byte);
    tern_io_stop(loop, id);
}

/* The producer's last post: nothing more will come, stop keeping the loop alive. */
static void on_last_post(tern_loop *loop, void *arg)
{
    (void)arg;
    tern_loop_keepalive(loop, false);
}

static void post_retrying(tern_loop *loop, tern_fn fn)
{
    while (tern_post(loop, fn, NULL) == -EAGAIN)
        ; /* max_operations reached: the loop is behind; try again */
}

static void *producer(void *arg)
{
    tern_loop *loop = arg;
    for (int i = 0; i < 1000; i++)
        post_retrying(loop, on_post);
    if (write(pipe_fds[1], "x", 1) != 1)
        abort();
    post_retrying(loop, on_last_post); /* runs after the 1000: posts keep their order */
    return NULL;
}

/* FNV-1a over a megabyte: a stand-in for CPU work that must not block the loop. */
static void *hash_work(tern_job *job, void *arg)
{
    (void)job;
    (void)arg;
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < (1 << 20); i++)
        h = (h ^ (uint8_t)i) * 1099511628211ull;
    uint64_t *out = malloc(sizeof(*out));
    if (out != NULL)
        *out = h;
    return out;
}

static void hash_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop;
    (void)arg;
    if (status == 0 && result != NULL)
        printf("job %llu: hash %016llx\n", (unsigned long long)id,
               (unsigned long long)*(uint64_t *)result);
    free(result);
}

int main(void)
{
    tern_loop *loop;
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.flags = TERN_LOOP_KEEPALIVE; /* wait for the producer, however slow */
    int rc = tern_loop_new(&loop, &opts);
    if (rc < 0) {
        fprintf(stderr, "tern_loop_new: %s\n", tern_strerror(rc));
        return 1;
    }
    if (pipe(pipe_fds) < 0)
        return 1;
    if ((rc = tern_timer_start(loop, 10000000, 10000000, on_tick, NULL, NULL)) < 0 ||
        (rc = tern_io_start(loop, pipe_fds[0], TERN_READABLE, on_readable, NULL, NULL)) < 0 ||
        (rc = tern_submit(loop, TERN_BOUNDED, hash_work, hash_done, NULL, NULL)) < 0) {
        fprintf(stderr, "setup: %s\n", tern_strerror(rc));
        return 1;
    }
    pthread_t t;
    pthread_create(&t, NULL, producer, loop);

    /* Returns once the last post dropped the keep-alive and nothing else is live. */
    rc = tern_loop_run(loop);
    pthread_join(t, NULL);

    tern_loop_stats ls;
    tern_loop_stats_get(loop, &ls);
    printf("ticks %d, posts %d\n", ticks, posts_seen);
    printf("loop: turns %llu, posts %llu, wake syscalls %llu, events %llu, idle %.1f ms\n",
           (unsigned long long)ls.turns, (unsigned long long)ls.posts,
           (unsigned long long)ls.wake_syscalls, (unsigned long long)ls.events,
           ls.idle_ns / 1e6);
    tern_pool_stats ps;
    tern_pool_stats_get(&ps);
    printf("pool: threads %u, submitted %llu, completed %llu, run p50 %.1f us\n", ps.threads,
           (unsigned long long)ps.submitted, (unsigned long long)ps.completed,
           ps.run_p50_ns / 1e3);
    tern_loop_free(loop);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    tern_pool_shutdown(TERN_POOL_DRAIN, UINT64_MAX);
    return ticks == 5 && posts_seen == 1000 ? 0 : 1;
}
