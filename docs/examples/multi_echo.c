/*
 * multi_echo: an echo server on a loop group, one listener per loop.
 *
 * - tern_group_new makes N loops (default 2; ./multi_echo N); before the
 *   group starts, the main thread sets each loop up: a TCP listener on the
 *   same port with TERN_TCP_REUSEPORT, so the kernel spreads connections
 *   over the loops, and a teardown callback that closes it;
 * - tern_group_start runs each loop on its own thread ("echo-0", ...);
 * - the main thread then plays the client: 64 connections, a message on
 *   each, and checks every echo;
 * - it reads every loop's counters in exclusive mode (tern_group_pause):
 *   no loop runs meanwhile, so plain fields are safe to read;
 * - tern_group_shutdown runs each loop's teardown on that loop, the loops
 *   finish what is in flight, and tern_group_wait returns when all are gone.
 *
 * Exits 0 when every echo came back intact. Build: part of the meson build.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tern.h"

#define CLIENTS 64
#define MAX_LOOPS 16

/* Per loop; touched only by that loop's thread (or under exclusive mode). */
struct shard {
    tern_id listener;
    unsigned accepted, open, bytes;
};
static struct shard shards[MAX_LOOPS];
static tern_group *group;

static struct shard *my_shard(void)
{
    return &shards[tern_group_index(group)];
}

static void write_done(tern_loop *loop, tern_id stream, int status, void *arg)
{
    (void)loop, (void)stream, (void)status;
    free(arg);
}

static void on_read(tern_loop *loop, tern_id stream, int status, const void *data, size_t len,
                    void *arg)
{
    (void)arg;
    if (status < 0 || len == 0) { /* error or end of stream: done with it */
        tern_stream_close(loop, stream);
        my_shard()->open--;
        return;
    }
    void *copy = malloc(len);
    if (copy == NULL) {
        tern_stream_close(loop, stream);
        my_shard()->open--;
        return;
    }
    memcpy(copy, data, len);
    tern_buf b = {copy, len};
    if (tern_stream_write(loop, stream, &b, 1, write_done, copy) < 0)
        free(copy);
    my_shard()->bytes += (unsigned)len;
}

static void on_accept(tern_loop *loop, tern_id listener, int status, tern_id stream, void *arg)
{
    (void)listener, (void)arg;
    if (status < 0)
        return; /* out of descriptors: the listener backs off by itself */
    struct shard *s = my_shard();
    s->accepted++;
    s->open++;
    tern_stream_read_start(loop, stream, on_read, NULL);
}

/* Teardown, on each loop's own thread: stop accepting. Open connections
 * keep the loop running until their clients hang up. */
static void close_listener(tern_loop *loop, void *arg)
{
    struct shard *s = arg;
    tern_stream_close(loop, s->listener);
}

/* The client side, plain blocking sockets on the main thread. */
static int echo_once(unsigned port, int i)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char msg[64], back[64];
    int len = snprintf(msg, sizeof(msg), "hello from client %d\n", i);
    int ok = write(fd, msg, (size_t)len) == len;
    int got = 0;
    while (ok && got < len) {
        ssize_t n = read(fd, back + got, (size_t)(len - got));
        if (n <= 0)
            ok = 0;
        else
            got += (int)n;
    }
    close(fd);
    return ok && memcmp(msg, back, (size_t)len) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    unsigned n = argc > 1 ? (unsigned)atoi(argv[1]) : 2;
    if (n < 1 || n > MAX_LOOPS) {
        fprintf(stderr, "usage: %s [loops 1..%d]\n", argv[0], MAX_LOOPS);
        return 2;
    }
    tern_group_options go;
    tern_group_options_init(&go);
    go.loops = n;
    go.name = "echo";
    int rc = tern_group_new(&group, &go);
    if (rc < 0) {
        fprintf(stderr, "tern_group_new: %s\n", tern_strerror(rc));
        return 1;
    }
    /* Set up before start: the loops are not running yet, so loop-only
     * calls from this thread are allowed. The first listener picks the
     * port; the others share it. */
    unsigned port = 0;
    for (unsigned i = 0; i < n && rc == 0; i++) {
        tern_loop *loop = tern_group_loop(group, i);
        rc = tern_tcp_listen(loop, "127.0.0.1", port, TERN_TCP_BACKLOG_DEFAULT,
                             TERN_TCP_REUSEPORT, on_accept, NULL, &shards[i].listener);
        if (rc == 0 && port == 0)
            rc = tern_tcp_port(loop, shards[i].listener, &port);
        if (rc == 0)
            rc = tern_group_on_shutdown(group, i, close_listener, &shards[i]);
    }
    if (rc == 0)
        rc = tern_group_start(group);
    if (rc < 0) {
        fprintf(stderr, "setup: %s\n", tern_strerror(rc));
        tern_group_free(group);
        return 1;
    }
    printf("echo server on 127.0.0.1:%u, %u loops\n", port, n);

    int bad = 0;
    for (int i = 0; i < CLIENTS; i++)
        bad += echo_once(port, i) != 0;

    /* Exclusive mode: every loop stopped between turns, so the counters
     * can be read as plain fields. Connections may still be closing. */
    unsigned total = 0;
    if (tern_group_pause(group) == 0) {
        for (unsigned i = 0; i < n; i++) {
            printf("loop %u: %u connections, %u bytes echoed\n", i, shards[i].accepted,
                   shards[i].bytes);
            total += shards[i].accepted;
        }
        tern_group_resume(group);
    }

    tern_group_shutdown(group);
    tern_group_wait(group);
    tern_group_free(group);
    tern_pool_shutdown(TERN_POOL_DRAIN, UINT64_MAX);
    printf("%d of %d echoes intact, %u connections accepted\n", CLIENTS - bad, CLIENTS, total);
    return bad == 0 && total == CLIENTS ? 0 : 1;
}
