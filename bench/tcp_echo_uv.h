/*
 * A TCP echo server on its own thread and its own libuv loop, twin of
 * tcp_echo.h: reads land in one static buffer and each echo copies them
 * into a fresh buffer for the write, exactly the work the tern server does.
 */
#ifndef TERN_BENCH_TCP_ECHO_UV_H
#define TERN_BENCH_TCP_ECHO_UV_H

#include "bench.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <uv.h>

typedef struct echo_server {
    pthread_t thread;
    uv_loop_t loop;
    uv_tcp_t listener;
    uv_async_t stop;
    _Atomic uint64_t port;
} echo_server;

typedef struct echo_write {
    uv_write_t req;
    char data[];
} echo_write;

static char echo_buffer[65536];

static void echo_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)h, (void)suggested;
    *buf = uv_buf_init(echo_buffer, sizeof echo_buffer);
}

static void echo_free_handle(uv_handle_t *h)
{
    free(h);
}

static void echo_written(uv_write_t *req, int status)
{
    (void)status;
    free(req);
}

static void echo_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    if (nread < 0) {
        uv_close((uv_handle_t *)stream, echo_free_handle);
        return;
    }
    if (nread == 0)
        return;
    echo_write *w = malloc(sizeof *w + (size_t)nread);
    BENCH_CHECK(w != NULL, "malloc");
    memcpy(w->data, buf->base, (size_t)nread);
    uv_buf_t out = uv_buf_init(w->data, (unsigned)nread);
    if (uv_write(&w->req, stream, &out, 1, echo_written) < 0) {
        free(w);
        uv_close((uv_handle_t *)stream, echo_free_handle);
    }
}

static void echo_accept(uv_stream_t *listener, int status)
{
    if (status < 0)
        return;
    uv_tcp_t *client = malloc(sizeof *client);
    BENCH_CHECK(client != NULL, "malloc");
    uv_tcp_init(listener->loop, client);
    client->data = client; /* marks a handle the server must free */
    if (uv_accept(listener, (uv_stream_t *)client) < 0 ||
        uv_read_start((uv_stream_t *)client, echo_alloc, echo_read) < 0)
        uv_close((uv_handle_t *)client, echo_free_handle);
}

static void echo_close_one(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, h->data != NULL ? echo_free_handle : NULL);
}

static void echo_on_stop(uv_async_t *a)
{
    uv_walk(a->loop, echo_close_one, NULL);
}

static void *echo_main(void *arg)
{
    echo_server *s = arg;
    BENCH_CHECK(uv_loop_init(&s->loop) == 0, "uv_loop_init");
    uv_async_init(&s->loop, &s->stop, echo_on_stop);
    s->stop.data = NULL;
    uv_tcp_init(&s->loop, &s->listener);
    s->listener.data = NULL;
    struct sockaddr_in addr;
    uv_ip4_addr("127.0.0.1", 0, &addr);
    int rc = uv_tcp_bind(&s->listener, (const struct sockaddr *)&addr, 0);
    BENCH_CHECK(rc == 0, "uv_tcp_bind: %s", uv_strerror(rc));
    rc = uv_listen((uv_stream_t *)&s->listener, SOMAXCONN, echo_accept);
    BENCH_CHECK(rc == 0, "uv_listen: %s", uv_strerror(rc));
    struct sockaddr_in bound;
    int len = sizeof bound;
    uv_tcp_getsockname(&s->listener, (struct sockaddr *)&bound, &len);
    atomic_store_explicit(&s->port, ntohs(bound.sin_port), memory_order_release);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    uv_loop_close(&s->loop);
    return NULL;
}

static unsigned echo_start(echo_server *s)
{
    atomic_store(&s->port, 0);
    BENCH_CHECK(pthread_create(&s->thread, NULL, echo_main, s) == 0, "pthread_create");
    bench_wait_at_least(&s->port, 1);
    return (unsigned)atomic_load(&s->port);
}

/* uv_async_send is the one libuv call another thread may make; the
 * server's callback closes every handle so its uv_run returns. */
static void echo_stop(echo_server *s)
{
    uv_async_send(&s->stop);
    pthread_join(s->thread, NULL);
}

static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

#endif
