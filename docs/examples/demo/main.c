/*
 * tern-demo: a small HTTP/1.1 server that sheds load instead of queueing.
 *
 *   tern-demo [--host 127.0.0.1] [--port 8080] [--threads 2] [--queue 64]
 *             [--long-max 64] [--shed-wait-ms 50] [--max-rounds 1000000]
 *             [--files DIR]
 *
 * On SIGINT or SIGTERM it stops accepting, closes idle keep-alive
 * connections, lets every request in flight finish (a /slow stream runs to
 * its end), prints its final statistics and exits 0. A second signal, or
 * 30 s of draining, cancels what is still running.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo.h"

#define DRAIN_LIMIT_NS (30ull * 1000 * 1000 * 1000)

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--host ADDR] [--port N] [--threads N] [--queue N] [--long-max N]\n"
            "          [--shed-wait-ms N] [--max-rounds N] [--files DIR]\n",
            argv0);
    exit(2);
}

static unsigned long number(const char *s, const char *argv0)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno != 0 || *s == '\0' || *end != '\0')
        usage(argv0);
    return v;
}

/* Cancel every job still running and close every connection. */
static void force_stop(struct server *srv)
{
    for (struct conn *c = srv->conn_list; c != NULL; c = c->next)
        if (c->job != NULL)
            tern_cancel(srv->loop, c->job->id);
    for (struct conn *c = srv->conn_list, *next; c != NULL; c = next) {
        next = c->next;
        http_close(c);
    }
}

static void drain_limit(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    struct server *srv = arg;
    srv->drain_timer = 0;
    fprintf(stderr, "tern-demo: drain limit reached, cancelling what is left\n");
    force_stop(srv);
}

/*
 * Draining ends when the last connection has closed and the last job has
 * completed. Stopping the loop explicitly (rather than waiting for it to
 * run out of referenced work) also ends the run at once when something
 * unreferenced, like the drain-limit timer, is still armed.
 */
void server_maybe_done(struct server *srv)
{
    if (!srv->draining || srv->conns > 0 || srv->jobs > 0)
        return;
    if (srv->drain_timer != 0) {
        tern_timer_stop(srv->loop, srv->drain_timer);
        srv->drain_timer = 0;
    }
    tern_loop_stop(srv->loop);
}

static void on_signal(tern_loop *loop, tern_id id, int signo, void *arg)
{
    (void)id;
    struct server *srv = arg;
    if (srv->draining) {
        fprintf(stderr, "tern-demo: %s again, cancelling what is left\n", strsignal(signo));
        force_stop(srv);
        return;
    }
    fprintf(stderr, "tern-demo: %s, draining %u connection(s), %u job(s)\n", strsignal(signo),
            srv->conns, srv->jobs);
    srv->draining = true;
    tern_stream_close(loop, srv->listener);
    srv->listener = 0;
    http_close_idle(srv);
    /* The watchers stay for a second signal but no longer keep the loop
     * alive: tern_loop_run returns once the last connection has closed. */
    tern_unref(loop, srv->sigint);
    tern_unref(loop, srv->sigterm);
    if (tern_timer_start(loop, DRAIN_LIMIT_NS, 0, drain_limit, srv, &srv->drain_timer) == 0)
        tern_unref(loop, srv->drain_timer);
    server_maybe_done(srv);
}

static void print_final(struct server *srv)
{
    char buf[2048];
    stats_json(srv, buf, sizeof(buf));
    printf("final statistics:\n%s", buf);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    const char *host = "127.0.0.1";
    unsigned long port = 8080;
    tern_pool_config pool;
    tern_pool_config_init(&pool);
    pool.threads = 2;
    pool.queue_capacity = 64;
    pool.long_threads_max = 64;
    struct server srv = {.shed_wait_ns = 50ull * 1000 * 1000, .max_rounds = 1000000};
    const char *files_dir = NULL;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc)
            usage(argv[0]);
        const char *v = argv[++i];
        if (strcmp(a, "--host") == 0)
            host = v;
        else if (strcmp(a, "--port") == 0)
            port = number(v, argv[0]);
        else if (strcmp(a, "--threads") == 0)
            pool.threads = (unsigned)number(v, argv[0]);
        else if (strcmp(a, "--queue") == 0)
            pool.queue_capacity = (unsigned)number(v, argv[0]);
        else if (strcmp(a, "--long-max") == 0)
            pool.long_threads_max = (unsigned)number(v, argv[0]);
        else if (strcmp(a, "--shed-wait-ms") == 0)
            srv.shed_wait_ns = number(v, argv[0]) * 1000 * 1000;
        else if (strcmp(a, "--max-rounds") == 0)
            srv.max_rounds = (unsigned)number(v, argv[0]);
        else if (strcmp(a, "--files") == 0)
            files_dir = v;
        else
            usage(argv[0]);
    }

    int files_rc = files_dir != NULL ? files_init(&srv, files_dir) : 0;
    if (files_rc < 0) {
        fprintf(stderr, "tern-demo: --files %s: %s\n", files_dir, tern_strerror(files_rc));
        return 1;
    }
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.pool = &pool;
    int rc = tern_loop_new(&srv.loop, &opts);
    if (rc < 0) {
        fprintf(stderr, "tern-demo: tern_loop_new: %s\n", tern_strerror(rc));
        return 1;
    }
    rc = tern_tcp_listen(srv.loop, host, (unsigned)port, TERN_TCP_BACKLOG_DEFAULT, 0, http_accept,
                         &srv, &srv.listener);
    if (rc == 0)
        rc = tern_tcp_port(srv.loop, srv.listener, &srv.port);
    if (rc == 0)
        rc = tern_signal_start(srv.loop, SIGINT, on_signal, &srv, &srv.sigint);
    if (rc == 0)
        rc = tern_signal_start(srv.loop, SIGTERM, on_signal, &srv, &srv.sigterm);
    if (rc < 0) {
        fprintf(stderr, "tern-demo: cannot serve on %s:%lu: %s\n", host, port, tern_strerror(rc));
        tern_loop_free(srv.loop);
        return 1;
    }
    printf("tern-demo listening on http://%s:%u (pool: %u threads, queue %u; shed above "
           "%llu ms queue-wait p99)\n",
           host, srv.port, pool.threads, pool.queue_capacity,
           (unsigned long long)(srv.shed_wait_ns / 1000000));
    fflush(stdout);

    tern_loop_run(srv.loop);
    print_final(&srv);
    tern_loop_free(srv.loop);
    tern_pool_shutdown(TERN_POOL_DRAIN, 5ull * 1000 * 1000 * 1000);
    free(srv.files_root);
    return 0;
}
