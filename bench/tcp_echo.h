/*
 * A TCP echo server on its own thread and its own tern loop, for the TCP
 * benchmarks: every byte a client sends comes back. Twin: tcp_echo_uv.h.
 *
 * The server copies what it reads into a fresh buffer for the write,
 * because a tern read callback's data lives only until it returns; the
 * libuv twin does the same copy, so the servers do equal work per echo.
 */
#ifndef TERN_BENCH_TCP_ECHO_H
#define TERN_BENCH_TCP_ECHO_H

#include "bench.h"

#include <pthread.h>
#include <sys/resource.h>
#include <tern.h>

typedef struct echo_server {
    pthread_t thread;
    tern_loop *loop;
    _Atomic uint64_t port; /* 0 until the server listens */
} echo_server;

static void echo_written(tern_loop *loop, tern_id stream, int status, void *arg)
{
    (void)loop, (void)stream, (void)status;
    free(arg);
}

static void echo_read(tern_loop *loop, tern_id stream, int status, const void *data,
                      size_t len, void *arg)
{
    (void)arg;
    if (status < 0 || len == 0) {
        tern_stream_close(loop, stream);
        return;
    }
    char *copy = malloc(len);
    BENCH_CHECK(copy != NULL, "malloc");
    memcpy(copy, data, len);
    tern_buf buf = {copy, len};
    int rc = tern_stream_write(loop, stream, &buf, 1, echo_written, copy);
    if (rc < 0) {
        free(copy);
        tern_stream_close(loop, stream);
    }
}

static void echo_accept(tern_loop *loop, tern_id listener, int status, tern_id stream,
                        void *arg)
{
    (void)listener, (void)arg;
    if (status < 0)
        return;
    if (tern_stream_read_start(loop, stream, echo_read, NULL) < 0)
        tern_stream_close(loop, stream);
}

static void *echo_main(void *arg)
{
    echo_server *s = arg;
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.max_operations = 1u << 20;
    opts.backend = bench_backend();
    int rc = tern_loop_new(&s->loop, &opts);
    BENCH_CHECK(rc == 0, "server tern_loop_new: %s", tern_strerror(rc));
    tern_id listener;
    rc = tern_tcp_listen(s->loop, "127.0.0.1", 0, TERN_TCP_BACKLOG_DEFAULT, 0, echo_accept,
                         NULL, &listener);
    BENCH_CHECK(rc == 0, "tern_tcp_listen: %s", tern_strerror(rc));
    unsigned port = 0;
    rc = tern_tcp_port(s->loop, listener, &port);
    BENCH_CHECK(rc == 0 && port != 0, "tern_tcp_port: %s", tern_strerror(rc));
    atomic_store_explicit(&s->port, port, memory_order_release);
    tern_loop_run(s->loop);
    tern_loop_free(s->loop);
    return NULL;
}

/* Start the server and return its port once it listens. */
static unsigned echo_start(echo_server *s)
{
    atomic_store(&s->port, 0);
    BENCH_CHECK(pthread_create(&s->thread, NULL, echo_main, s) == 0, "pthread_create");
    bench_wait_at_least(&s->port, 1);
    return (unsigned)atomic_load(&s->port);
}

/* Stop the server (tern_loop_stop is the one call any thread may make to
 * end a loop's run) and wait until its loop is freed. */
static void echo_stop(echo_server *s)
{
    tern_loop_stop(s->loop);
    pthread_join(s->thread, NULL);
}

/* Many connections need many descriptors: raise the soft limit to the hard
 * one, identically in both twins. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

#endif
