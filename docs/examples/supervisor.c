/*
 * supervisor: keeps N worker processes running and stops them all on
 * SIGTERM.
 *
 * - each worker is /bin/sh running a small script, spawned with
 *   tern_process_spawn; its stdout is a tern stream (TERN_STDIO_STREAM)
 *   read line by line, its stdin /dev/null, its stderr inherited;
 * - a worker that exits is restarted from its exit callback (worker 0's
 *   script exits after one line, on purpose, to show it);
 * - on SIGTERM (tern_signal_start) the supervisor stops restarting,
 *   sends SIGTERM to every worker and lets the loop run until their exit
 *   callbacks have all come; tern_loop_run then returns by itself.
 *
 * Run alone it supervises for a while and then sends itself SIGTERM, so
 * the example ends: exits 0 when every worker produced output, worker 0
 * was restarted, and every worker was stopped. ./supervisor N (default 3).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tern.h"

#define MAX_WORKERS 16
#define RESTARTS_WANTED 3

struct worker {
    int index;
    tern_id process, out;
    unsigned lines, starts;
    bool running;
};

static struct worker workers[MAX_WORKERS];
static int n_workers = 3;
static bool stopping;
static tern_id sigterm_watch, self_stop_timer;

static void start_worker(tern_loop *loop, struct worker *w);

static void on_output(tern_loop *loop, tern_id stream, int status, const void *data, size_t len,
                      void *arg)
{
    struct worker *w = arg;
    if (status < 0 || len == 0) { /* end of the worker's output */
        tern_stream_close(loop, stream);
        return;
    }
    for (size_t i = 0; i < len; i++)
        if (((const char *)data)[i] == '\n')
            w->lines++;
}

static void on_worker_exit(tern_loop *loop, tern_id id, int status, int code, int sig,
                           void *arg)
{
    (void)id;
    struct worker *w = arg;
    w->running = false;
    printf("worker %d exited (status %s, code %d, signal %d)\n", w->index,
           tern_err_name(status), code, sig);
    if (!stopping)
        start_worker(loop, w);
}

static void start_worker(tern_loop *loop, struct worker *w)
{
    char *crashy[] = {"sh", "-c", "echo started; exit 3", NULL};
    char *steady[] = {"sh", "-c", "trap 'exit 0' TERM; while :; do echo tick; sleep 0.05; done",
                      NULL};
    tern_stdio io[3] = {{.kind = TERN_STDIO_IGNORE}, {.kind = TERN_STDIO_STREAM},
                        {.kind = TERN_STDIO_INHERIT}};
    tern_process_options o;
    tern_process_options_init(&o);
    o.file = "/bin/sh";
    o.argv = w->index == 0 ? crashy : steady;
    o.stdio = io;
    o.stdio_count = 3;
    int rc = tern_process_spawn(loop, &o, on_worker_exit, w, &w->process);
    if (rc < 0) {
        fprintf(stderr, "spawn worker %d: %s\n", w->index, tern_strerror(rc));
        return;
    }
    w->running = true;
    w->starts++;
    w->out = io[1].stream;
    tern_stream_read_start(loop, w->out, on_output, w);
}

static void on_sigterm(tern_loop *loop, tern_id id, int signo, void *arg)
{
    (void)id;
    (void)signo;
    (void)arg;
    printf("SIGTERM: stopping %d workers\n", n_workers);
    stopping = true;
    tern_signal_stop(loop, sigterm_watch);
    tern_timer_stop(loop, self_stop_timer);
    for (int i = 0; i < n_workers; i++)
        if (workers[i].running)
            tern_process_kill(loop, workers[i].process, SIGTERM);
    /* The loop runs on until every exit callback has come, then returns. */
}

/* Standing in for an operator: stop once worker 0 was restarted enough. */
static void check_progress(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
    bool all_spoke = true;
    for (int i = 1; i < n_workers; i++)
        all_spoke = all_spoke && workers[i].lines > 0;
    if (workers[0].starts > RESTARTS_WANTED && all_spoke)
        kill(getpid(), SIGTERM);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        n_workers = atoi(argv[1]);
    if (n_workers < 1 || n_workers > MAX_WORKERS)
        n_workers = 3;
    tern_loop *loop;
    int rc = tern_loop_new(&loop, NULL);
    if (rc < 0) {
        fprintf(stderr, "tern_loop_new: %s\n", tern_strerror(rc));
        return 1;
    }
    rc = tern_signal_start(loop, SIGTERM, on_sigterm, NULL, &sigterm_watch);
    if (rc < 0) {
        fprintf(stderr, "tern_signal_start: %s\n", tern_strerror(rc));
        return 1;
    }
    for (int i = 0; i < n_workers; i++) {
        workers[i].index = i;
        start_worker(loop, &workers[i]);
    }
    tern_timer_start(loop, 20 * 1000000ull, 20 * 1000000ull, check_progress, NULL,
                     &self_stop_timer);
    tern_loop_run(loop);
    tern_loop_free(loop);

    bool ok = workers[0].starts > RESTARTS_WANTED;
    for (int i = 0; i < n_workers; i++) {
        printf("worker %d: %u starts, %u lines\n", i, workers[i].starts, workers[i].lines);
        ok = ok && workers[i].lines > 0 && !workers[i].running;
    }
    printf("%s\n", ok ? "supervisor: ok" : "supervisor: FAILED");
    return ok ? 0 : 1;
}
