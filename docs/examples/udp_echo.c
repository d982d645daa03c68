/*
 * udp_echo: a UDP echo server and its client on one loop.
 *
 * - the server binds 127.0.0.1 on a port the kernel picks and echoes every
 *   datagram to its sender; a send's bytes must stay valid until its
 *   callback, so the server copies each datagram and frees the copy there;
 * - the server honours its send queue's high-water mark: when
 *   tern_udp_send returns 1 it stops receiving until the drain callback,
 *   so a peer that floods it cannot grow the queue without bound;
 * - the client connects its socket to the server (connected UDP: sends
 *   need no address, and only the server's datagrams are received), sends
 *   ten numbered datagrams and checks that each comes back intact;
 * - both close; the close callbacks run last, and the loop, owing nothing,
 *   returns from tern_loop_run.
 *
 * Exits 0 when every echo came back. Build: part of the meson build.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tern.h"

#define COUNT 10

static tern_id server, client;
static unsigned echoed, received;
static bool seen[COUNT];

static void echo_sent(tern_loop *loop, tern_id sock, int status, void *arg)
{
    (void)loop, (void)sock;
    if (status < 0 && status != -ECANCELED)
        fprintf(stderr, "udp_echo: echo failed: %s\n", tern_strerror(status));
    free(arg);
}

static void on_server_recv(tern_loop *loop, tern_id sock, int status, const void *data,
                           size_t len, const struct sockaddr *from, unsigned flags, void *arg);

static void server_drained(tern_loop *loop, tern_id sock, void *arg)
{
    (void)arg;
    tern_udp_recv_start(loop, sock, 0, on_server_recv, NULL); /* room again */
}

static void on_server_recv(tern_loop *loop, tern_id sock, int status, const void *data,
                           size_t len, const struct sockaddr *from, unsigned flags, void *arg)
{
    (void)arg;
    if (status < 0) /* a receive error is news, not the end of the socket */
        return;
    if (flags & TERN_UDP_TRUNCATED)
        fprintf(stderr, "udp_echo: a datagram was cut to %zu bytes\n", len);
    void *copy = malloc(len ? len : 1);
    if (copy == NULL)
        return; /* UDP may drop; so may we */
    memcpy(copy, data, len);
    tern_buf b = {copy, len};
    int rc = tern_udp_send(loop, sock, &b, 1, from, echo_sent, copy);
    if (rc < 0) {
        free(copy);
        return;
    }
    echoed++;
    if (rc == 1) /* past the high-water mark: stop taking work until it drains */
        tern_udp_recv_stop(loop, sock);
}

static void on_client_recv(tern_loop *loop, tern_id sock, int status, const void *data,
                           size_t len, const struct sockaddr *from, unsigned flags, void *arg)
{
    (void)sock, (void)from, (void)flags, (void)arg;
    if (status < 0) {
        fprintf(stderr, "udp_echo: client: %s\n", tern_strerror(status));
        return;
    }
    unsigned n;
    char text[32];
    if (len >= sizeof(text))
        return;
    memcpy(text, data, len);
    text[len] = '\0';
    if (sscanf(text, "datagram %u", &n) != 1 || n >= COUNT || seen[n])
        return;
    seen[n] = true;
    if (++received == COUNT) {
        tern_udp_close(loop, client);
        tern_udp_close(loop, server);
    }
}

static void on_close(tern_loop *loop, tern_id sock, void *arg)
{
    (void)loop, (void)sock;
    printf("udp_echo: %s closed\n", (const char *)arg);
}

static void check(int rc, const char *what)
{
    if (rc < 0) {
        fprintf(stderr, "udp_echo: %s: %s\n", what, tern_strerror(rc));
        exit(1);
    }
}

int main(void)
{
    tern_loop *loop;
    check(tern_loop_new(&loop, NULL), "tern_loop_new");

    check(tern_udp_bind(loop, "127.0.0.1", 0, 0, &server), "bind the server");
    check(tern_udp_set_high_water(loop, server, 64 * 1024, server_drained, NULL),
          "set the high-water mark");
    check(tern_udp_recv_start(loop, server, 0, on_server_recv, NULL), "server recv_start");
    check(tern_udp_on_close(loop, server, on_close, "server"), "on_close");
    unsigned port;
    check(tern_udp_port(loop, server, &port), "tern_udp_port");

    check(tern_udp_bind(loop, "127.0.0.1", 0, 0, &client), "bind the client");
    struct sockaddr_storage to;
    check(tern_sockaddr_parse("127.0.0.1", port, &to), "tern_sockaddr_parse");
    check(tern_udp_connect(loop, client, (struct sockaddr *)&to), "connect the client");
    check(tern_udp_recv_start(loop, client, 0, on_client_recv, NULL), "client recv_start");
    check(tern_udp_on_close(loop, client, on_close, "client"), "on_close");

    static char text[COUNT][32];
    for (unsigned i = 0; i < COUNT; i++) {
        int n = snprintf(text[i], sizeof(text[i]), "datagram %u", i);
        tern_buf b = {text[i], (size_t)n};
        check(tern_udp_send(loop, client, &b, 1, NULL, NULL, NULL), "client send");
    }

    check(tern_loop_run(loop), "tern_loop_run");
    tern_loop_free(loop);
    printf("udp_echo: %u of %u echoes came back (server echoed %u)\n", received, COUNT, echoed);
    return received == COUNT ? 0 : 1;
}
