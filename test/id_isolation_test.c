/*
 * Ids name only what the caller was given (SPEC: "a stale or unknown id is
 * -ENOENT, never a crash and never another operation").
 *
 * tern runs some operations for itself: a connect's timeout timer and its
 * name lookup, every stream's fd watcher, a listener's back-off timer. They
 * take ids from the same counter as the caller's operations, so the id
 * next to a stream's is usually one of them. A caller that passes a wrong
 * id (an off-by-one, a stale variable) must get -ENOENT, not stop a
 * stream's watcher or cancel a connect's lookup behind its back.
 *
 * Not in test/list-reliability.txt yet: it fails until the runtime keeps
 * its internal operations out of reach of the public by-id calls.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tern.h"
#include "testing.h"

#define MS UINT64_C(1000000)
#define SEC UINT64_C(1000000000)

static int connect_status = 1;

static void on_connect(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
    connect_status = status;
}

static void on_accept(tern_loop *loop, tern_id listener, int status, tern_id stream, void *arg)
{
    (void)listener;
    (void)arg;
    if (status == 0)
        tern_stream_close(loop, stream);
}

static void on_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                    void *arg)
{
    (void)loop;
    (void)id;
    (void)status;
    (void)data;
    (void)len;
    (void)arg;
}

/* Every by-id call on an id the caller never received says -ENOENT. */
static void assert_strangers(tern_loop *loop, tern_id first, tern_id last, tern_id except)
{
    for (tern_id id = first; id <= last; id++) {
        if (id == except)
            continue;
        cr_expect_eq(tern_timer_stop(loop, id), -ENOENT, "tern_timer_stop(%llu) reached an "
                     "operation the caller was never given", (unsigned long long)id);
        cr_expect_eq(tern_io_modify(loop, id, TERN_READABLE), -ENOENT,
                     "tern_io_modify(%llu) reached an internal watcher", (unsigned long long)id);
        cr_expect_eq(tern_unref(loop, id), -ENOENT, "tern_unref(%llu) reached an internal "
                     "operation", (unsigned long long)id);
    }
}

Test(ids, connect_internals_out_of_reach, .timeout = 60)
{
    tern_loop *loop;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    tern_id listener;
    cr_assert_eq(tern_tcp_listen(loop, "127.0.0.1", 0, 16, 0, on_accept, NULL, &listener), 0);
    unsigned port;
    cr_assert_eq(tern_tcp_port(loop, listener, &port), 0);

    /* By name, with a timeout: a lookup job and a timer of tern's own. */
    tern_id stream;
    cr_assert_eq(tern_tcp_connect(loop, "localhost", port, 10 * SEC, on_connect, NULL, &stream),
                 0);
    assert_strangers(loop, stream + 1, stream + 8, 0);
    for (tern_id id = stream + 1; id <= stream + 8; id++)
        cr_expect_eq(tern__test_cancel_now(loop, id), -ENOENT, "tern__test_cancel_now(%llu) reached the connect's "
                     "own lookup or timer", (unsigned long long)id);

    for (int i = 0; i < 2000 && connect_status == 1; i++)
        tern_loop_run_once(loop, MS);
    cr_expect_eq(connect_status, 0, "the connect was disturbed by stray ids: %s",
                 tern_err_name(connect_status));
    tern_loop_free(loop);
}

Test(ids, stream_watcher_out_of_reach, .timeout = 60)
{
    tern_loop *loop;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    int sp[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    tern_id a;
    cr_assert_eq(tern_stream_open(loop, sp[0], &a), 0);
    cr_assert_eq(tern_stream_read_start(loop, a, on_read, NULL),
                 0);
    /* The stream's fd watcher now exists; its id is not the caller's. */
    assert_strangers(loop, a + 1, a + 4, 0);
    for (tern_id id = a + 1; id <= a + 4; id++)
        cr_expect_eq(tern_io_stop(loop, id), -ENOENT, "tern_io_stop(%llu) stopped the stream's "
                     "own watcher", (unsigned long long)id);
    cr_assert_eq(tern_stream_close(loop, a), 0);
    close(sp[1]);
    tern_loop_free(loop);
}
