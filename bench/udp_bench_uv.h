/*
 * The UDP scenarios' shared body on libuv (udp_pingpong_uv.c,
 * udp_pound_uv.c), twin of udp_bench.h: one loop, an echo socket and a
 * client socket on loopback; `inflight` datagrams of `size` bytes
 * outstanding until `count` echoes came back. The echo copies each
 * datagram into a slot of its own and sends it back to its sender.
 * libuv is used as a typical application does: default flags (no
 * UV_UDP_RECVMMSG), one read buffer.
 */
#ifndef TERN_BENCH_UDP_UV_H
#define TERN_BENCH_UDP_UV_H

#include <string.h>
#include <uv.h>

#include "bench.h"

#define UDP_SLOTS 1024
#define UDP_MAX 2048

static struct {
    uv_udp_t echo, client;
    struct sockaddr_in echo_addr;
    unsigned long target, got, sent, inflight;
    size_t size;
    char msg[UDP_MAX];
    char slot[UDP_SLOTS][UDP_MAX];
    uv_udp_send_t req[UDP_SLOTS];
    unsigned next_slot, next_req;
    char rbuf[65536];
    uint64_t t0, t1;
    bench_calls c0, c1;
} ub;

static void udp_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)h, (void)suggested;
    *buf = uv_buf_init(ub.rbuf, sizeof ub.rbuf);
}

static void udp_sent(uv_udp_send_t *req, int status)
{
    (void)req;
    BENCH_CHECK(status == 0 || status == UV_ECANCELED, "send: %s", uv_strerror(status));
}

static void udp_send_ping(void)
{
    uv_buf_t b = uv_buf_init(ub.msg, (unsigned)ub.size);
    int rc = uv_udp_send(&ub.req[ub.next_req++ % UDP_SLOTS], &ub.client, &b, 1,
                         (const struct sockaddr *)&ub.echo_addr, udp_sent);
    BENCH_CHECK(rc == 0, "uv_udp_send: %s", uv_strerror(rc));
    ub.sent++;
}

static void udp_on_echo_recv(uv_udp_t *h, ssize_t nread, const uv_buf_t *buf,
                             const struct sockaddr *from, unsigned flags)
{
    (void)flags;
    if (nread == 0 && from == NULL)
        return;
    BENCH_CHECK(nread >= 0, "echo recv: %s", uv_strerror((int)nread));
    char *copy = ub.slot[ub.next_slot++ % UDP_SLOTS];
    memcpy(copy, buf->base, (size_t)nread);
    uv_buf_t b = uv_buf_init(copy, (unsigned)nread);
    int rc = uv_udp_send(&ub.req[ub.next_req++ % UDP_SLOTS], h, &b, 1, from, udp_sent);
    BENCH_CHECK(rc == 0, "echo send: %s", uv_strerror(rc));
}

static void udp_on_client_recv(uv_udp_t *h, ssize_t nread, const uv_buf_t *buf,
                               const struct sockaddr *from, unsigned flags)
{
    (void)h, (void)buf, (void)flags;
    if (nread == 0 && from == NULL)
        return;
    BENCH_CHECK(nread == (ssize_t)ub.size, "client recv: %zd", nread);
    if (++ub.got == ub.target) {
        ub.t1 = bench_now_ns();
        ub.c1 = bench_calls_now();
        uv_close((uv_handle_t *)&ub.client, NULL);
        uv_close((uv_handle_t *)&ub.echo, NULL);
        return;
    }
    if (ub.sent < ub.target)
        udp_send_ping();
}

static double udp_bench_run(unsigned long count, unsigned long inflight, size_t size)
{
    BENCH_CHECK(count > 0 && inflight > 0 && inflight < UDP_SLOTS / 2 && size > 0 &&
                    size <= UDP_MAX,
                "count, inflight or size");
    ub.target = count;
    ub.inflight = inflight;
    ub.size = size;
    memset(ub.msg, 'p', size);
    uv_loop_t *loop = uv_default_loop();
    struct sockaddr_in any;
    uv_ip4_addr("127.0.0.1", 0, &any);
    uv_udp_init(loop, &ub.echo);
    uv_udp_init(loop, &ub.client);
    int rc = uv_udp_bind(&ub.echo, (const struct sockaddr *)&any, 0);
    BENCH_CHECK(rc == 0, "bind: %s", uv_strerror(rc));
    rc = uv_udp_bind(&ub.client, (const struct sockaddr *)&any, 0);
    BENCH_CHECK(rc == 0, "bind: %s", uv_strerror(rc));
    int len = sizeof ub.echo_addr;
    uv_udp_getsockname(&ub.echo, (struct sockaddr *)&ub.echo_addr, &len);
    uv_udp_recv_start(&ub.echo, udp_alloc, udp_on_echo_recv);
    uv_udp_recv_start(&ub.client, udp_alloc, udp_on_client_recv);
    ub.c0 = bench_calls_now();
    ub.t0 = bench_now_ns();
    for (unsigned long i = 0; i < inflight && ub.sent < count; i++)
        udp_send_ping();
    uv_run(loop, UV_RUN_DEFAULT);
    BENCH_CHECK(ub.got == count, "echoes %lu of %lu (a datagram was lost)", ub.got, count);
    uv_loop_close(loop);
    return (double)ub.got / ((double)(ub.t1 - ub.t0) / 1e9);
}

/* The last run's system calls per echo (bench.h), figures named name_*. */
static void udp_bench_calls(const char *name)
{
    bench_calls_figures(name, ub.c0, ub.c1, (double)ub.got, "echo");
}

#endif
