/*
 * Stream writes at their edges (include/tern/net.h): a queued write of
 * several buffers that the socket takes only part of resumes exactly where
 * it stopped, across buffer boundaries, and its bytes arrive whole and in
 * order with one completion; tern_stream_try_write tries at most 128
 * non-empty buffers, writes nothing and says 0 when every buffer is empty,
 * and refuses a listener (-EINVAL), a stream still connecting (-ENOTCONN)
 * and a socket whose peer has gone (the send's own -EPIPE), each changing
 * nothing. Streams are adopted socketpair ends (tern_stream_open).
 */
#include "loop_helpers.h"
#include "tested_backend.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>

static atomic_uint done;
static int done_status;

static void on_done(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id, (void)arg;
    done_status = status;
    atomic_fetch_add(&done, 1);
}

static void pair(tern_loop *loop, tern_id *id, int *raw)
{
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    cr_assert_eq(tern_stream_open(loop, sv[0], id), 0);
    *raw = sv[1];
}

#define SMALL 1000
#define LARGE (4u << 20)
#define TAIL 10

Test(stream_write_edges, a_write_cut_short_resumes_across_its_buffers, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    tern_id id;
    int raw;
    pair(loop, &id, &raw);
    static char small[SMALL], large[LARGE], tail[TAIL];
    memset(small, 'a', sizeof small);
    for (size_t i = 0; i < sizeof large; i++)
        large[i] = (char)('0' + (i * 7 + i / 4096) % 61);
    memset(tail, 'z', sizeof tail);
    tern_buf bufs[3] = {{small, SMALL}, {large, LARGE}, {tail, TAIL}};
    atomic_store(&done, 0);
    cr_assert_geq(tern_stream_write(loop, id, bufs, 3, on_done, NULL), 0);
    size_t q = 0;
    cr_assert_eq(tern_stream_write_queue_size(loop, id, &q), 0);
    cr_assert_gt(q, 0, "the socket took 4 MB at once; the test proves nothing");

    /* Let it write into the full socket, then read it all back slowly. */
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&done), 0, "the write completed with its bytes unread");
    cr_assert_eq(fcntl(raw, F_SETFL, O_NONBLOCK), 0);
    static char got[SMALL + LARGE + TAIL];
    size_t n = 0;
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (n < sizeof got && mono_ns() < end) {
        ssize_t r = read(raw, got + n, 3000); /* less than a buffer: many short writes */
        if (r > 0)
            n += (size_t)r;
        else
            tern_loop_run_once(loop, 1 * (int64_t)MS);
    }
    cr_assert_eq(n, sizeof got, "%zu of %zu bytes arrived", n, sizeof got);
    cr_assert(memcmp(got, small, SMALL) == 0, "the first buffer's bytes");
    cr_assert(memcmp(got + SMALL, large, LARGE) == 0, "the second buffer's bytes");
    cr_assert(memcmp(got + SMALL + LARGE, tail, TAIL) == 0, "the last buffer's bytes");
    cr_assert(run_until_count(loop, &done, 1, 10 * (int64_t)MS, 500));
    cr_assert_eq(done_status, 0);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(atomic_load(&done), 1, "the write completed %u times", atomic_load(&done));
    close(raw);
    loop_free_clean(loop);
}

Test(stream_write_edges, try_write_tries_128_buffers_and_writes_nothing_for_empty_ones,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    tern_id id;
    int raw;
    pair(loop, &id, &raw);
    static char bytes[200];
    tern_buf many[200];
    for (int i = 0; i < 200; i++) {
        bytes[i] = (char)i;
        many[i] = (tern_buf){&bytes[i], 1};
    }
    /* Empty buffers in between are skipped, not counted among the 128. */
    many[3].len = 0;
    cr_assert_eq(tern_stream_try_write(loop, id, many, 200), 128);
    char got[256];
    cr_assert(fd_readable_now(raw, 5000));
    cr_assert_eq(read(raw, got, sizeof got), 128);
    for (int i = 0, k = 0; i < 129; i++) {
        if (i == 3)
            continue;
        cr_assert_eq(got[k++], (char)i, "byte %d", k);
    }

    tern_buf empty[2] = {{NULL, 0}, {bytes, 0}};
    cr_assert_eq(tern_stream_try_write(loop, id, empty, 2), 0);
    cr_assert_not(fd_readable_now(raw, 0), "an empty try_write wrote");

    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    close(raw);
    loop_free_clean(loop);
}

static void on_accept(tern_loop *loop, tern_id l, int status, tern_id s, void *arg)
{
    (void)loop, (void)l, (void)status, (void)s, (void)arg;
}

static void on_connect(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id, (void)status;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

Test(stream_write_edges, try_write_refuses_a_listener_a_connecting_stream_and_a_gone_peer,
     .timeout = TEST_TIMEOUT)
{
    signal(SIGPIPE, SIG_IGN);
    tern_loop *loop = loop_new_tested();
    tern_buf b = {"x", 1};
    size_t q = 1;

    char name[64];
    snprintf(name, sizeof name, "@tern-write-edges-%d", (int)getpid());
    tern_id listener, client;
    cr_assert_eq(tern_unix_listen(loop, name, TERN_TCP_BACKLOG_DEFAULT, on_accept, NULL,
                                  &listener), 0);
    cr_assert_eq(tern_stream_try_write(loop, listener, &b, 1), -EINVAL);
    /* A TCP connect is not connected before its callback (the lookup and
     * the connect happen later). */
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    cr_assert(l >= 0 && bind(l, (struct sockaddr *)&a, sizeof a) == 0 && listen(l, 4) == 0);
    cr_assert_eq(getsockname(l, (struct sockaddr *)&a, &alen), 0);
    static atomic_uint connected;
    cr_assert_eq(tern_tcp_connect(loop, "127.0.0.1", ntohs(a.sin_port), 0, on_connect,
                                  &connected, &client), 0);
    cr_assert_eq(tern_stream_try_write(loop, client, &b, 1), -ENOTCONN);
    cr_assert_eq(tern_stream_write_queue_size(loop, client, &q), 0);
    cr_assert_eq(q, 0, "a refused try_write queued");
    cr_assert(run_until_count(loop, &connected, 1, 10 * (int64_t)MS, 500));
    cr_assert_eq(tern_stream_close(loop, client), 0);
    close(l);
    cr_assert_eq(tern_stream_close(loop, listener), 0);

    tern_id id;
    int raw;
    pair(loop, &id, &raw);
    close(raw);
    cr_assert_eq(tern_stream_try_write(loop, id, &b, 1), -EPIPE);
    /* The send's own error leaves the stream writable as far as tern knows:
     * the same answer again, not a remembered one. */
    cr_assert_eq(tern_stream_try_write(loop, id, &b, 1), -EPIPE);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}
