/*
 * The UDP scenarios' shared body (udp_pingpong.c, udp_pound.c): one loop
 * holds an echo socket and a client socket on loopback. The client keeps
 * `inflight` datagrams of `size` bytes outstanding; each echo that comes
 * back sends the next, until `count` echoes came back. The echo socket
 * copies each datagram into a slot of its own (a send's bytes must stay
 * valid until it completes) and sends it back to its sender.
 * Twin: udp_bench_uv.h, the same shape on libuv.
 */
#ifndef TERN_BENCH_UDP_H
#define TERN_BENCH_UDP_H

#include <errno.h>
#include <string.h>

#include "bench.h"
#include "tern.h"

#define UDP_SLOTS 1024 /* echo copies in flight; more than inflight allows */
#define UDP_MAX 2048

static struct {
    tern_id echo, client;
    struct sockaddr_storage echo_addr;
    unsigned long target, got, sent, inflight;
    size_t size;
    char msg[UDP_MAX];
    char slot[UDP_SLOTS][UDP_MAX];
    unsigned next_slot;
    uint64_t t0, t1;
    bench_calls c0, c1;
    uint64_t turns;
} ub;

static void udp_sent(tern_loop *loop, tern_id sock, int status, void *arg)
{
    (void)loop, (void)sock, (void)arg;
    BENCH_CHECK(status == 0 || status == -ECANCELED, "send: %s", tern_strerror(status));
}

static void udp_send_ping(tern_loop *loop)
{
    tern_buf b = {ub.msg, ub.size};
    int rc = tern_udp_send(loop, ub.client, &b, 1, (struct sockaddr *)&ub.echo_addr, udp_sent,
                           NULL);
    BENCH_CHECK(rc >= 0, "tern_udp_send: %s", tern_strerror(rc));
    ub.sent++;
}

static void udp_on_echo_recv(tern_loop *loop, tern_id sock, int status, const void *data,
                             size_t len, const struct sockaddr *from, unsigned flags, void *arg)
{
    (void)flags, (void)arg;
    BENCH_CHECK(status == 0, "echo recv: %s", tern_strerror(status));
    char *copy = ub.slot[ub.next_slot++ % UDP_SLOTS];
    memcpy(copy, data, len);
    tern_buf b = {copy, len};
    int rc = tern_udp_send(loop, sock, &b, 1, from, udp_sent, NULL);
    BENCH_CHECK(rc >= 0, "echo send: %s", tern_strerror(rc));
}

static void udp_on_client_recv(tern_loop *loop, tern_id sock, int status, const void *data,
                               size_t len, const struct sockaddr *from, unsigned flags,
                               void *arg)
{
    (void)sock, (void)data, (void)from, (void)flags, (void)arg;
    BENCH_CHECK(status == 0 && len == ub.size, "client recv: %s", tern_strerror(status));
    if (++ub.got == ub.target) {
        ub.t1 = bench_now_ns();
        ub.c1 = bench_calls_now();
        tern_loop_stats st;
        tern_loop_stats_get(loop, &st);
        ub.turns = st.turns - ub.turns;
        tern_udp_close(loop, ub.client);
        tern_udp_close(loop, ub.echo);
        return;
    }
    if (ub.sent < ub.target)
        udp_send_ping(loop);
}

/* Run the scenario; returns echoes per second. */
static double udp_bench_run(unsigned long count, unsigned long inflight, size_t size)
{
    BENCH_CHECK(count > 0 && inflight > 0 && inflight < UDP_SLOTS / 2 && size > 0 &&
                    size <= UDP_MAX,
                "count, inflight or size");
    ub.target = count;
    ub.inflight = inflight;
    ub.size = size;
    memset(ub.msg, 'p', size);
    tern_loop *loop;
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.backend = bench_backend();
    int rc = tern_loop_new(&loop, &opts);
    BENCH_CHECK(rc == 0, "tern_loop_new: %s", tern_strerror(rc));
    bench_backend_report(tern_loop_backend_name(loop));
    rc = tern_udp_bind(loop, "127.0.0.1", 0, 0, &ub.echo);
    BENCH_CHECK(rc == 0, "bind: %s", tern_strerror(rc));
    rc = tern_udp_bind(loop, "127.0.0.1", 0, 0, &ub.client);
    BENCH_CHECK(rc == 0, "bind: %s", tern_strerror(rc));
    unsigned port;
    tern_udp_port(loop, ub.echo, &port);
    tern_sockaddr_parse("127.0.0.1", port, &ub.echo_addr);
    rc = tern_udp_recv_start(loop, ub.echo, UDP_MAX, udp_on_echo_recv, NULL);
    BENCH_CHECK(rc == 0, "recv_start: %s", tern_strerror(rc));
    rc = tern_udp_recv_start(loop, ub.client, UDP_MAX, udp_on_client_recv, NULL);
    BENCH_CHECK(rc == 0, "recv_start: %s", tern_strerror(rc));
    tern_loop_stats st;
    tern_loop_stats_get(loop, &st);
    ub.turns = st.turns;
    ub.c0 = bench_calls_now();
    ub.t0 = bench_now_ns();
    for (unsigned long i = 0; i < inflight && ub.sent < count; i++)
        udp_send_ping(loop);
    tern_loop_run(loop);
    BENCH_CHECK(ub.got == count, "echoes %lu of %lu (a datagram was lost)", ub.got, count);
    tern_loop_free(loop);
    tern_pool_shutdown(TERN_POOL_DRAIN, 1000000000u);
    return (double)ub.got / ((double)(ub.t1 - ub.t0) / 1e9);
}

/* The last run's system calls per echo (bench.h), figures named name_*. */
static void udp_bench_calls(const char *name)
{
    bench_calls_figures(name, ub.c0, ub.c1, (double)ub.got, "echo");
    bench_enters_per_turn(name, ub.c0, ub.c1, ub.turns);
}

#endif
