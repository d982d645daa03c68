/*
 * Ids name only what the caller was given (SPEC: "a stale or unknown id is
 * -ENOENT, never a crash and never another operation").
 *
 * tern runs some things for itself: a connect's timeout and its name
 * lookup, every stream's fd watcher, a listener's back-off. They once were
 * public operations taking ids from the caller's counter, so the id next
 * to a stream's was usually one of them; now the watcher and the deadline
 * are embedded in the stream with no id, and the lookup's job is
 * anonymous (it never has an id). A caller that passes a wrong id (an off-by-one, a stale
 * variable) must get -ENOENT, not stop a stream's watcher or cancel a
 * connect's lookup behind its back — whether its call resolves at once
 * (on the loop's thread) or is queued and resolved in step 1 (any other
 * thread).
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
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

static atomic_uint accepted, backoffs;

static void on_accept(tern_loop *loop, tern_id listener, int status, tern_id stream, void *arg)
{
    (void)listener;
    (void)arg;
    if (status == 0) {
        atomic_fetch_add(&accepted, 1);
        tern_stream_close(loop, stream);
    } else {
        atomic_fetch_add(&backoffs, 1);
    }
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * SEC + (uint64_t)ts.tv_nsec;
}

/* A lookup that waits (bounded) until the test lets it go. */
static atomic_bool lookup_entered, lookup_release;

static int stalled_getaddrinfo(const char *host, const char *service,
                               const struct addrinfo *hints, struct addrinfo **res)
{
    (void)host;
    atomic_store(&lookup_entered, true);
    uint64_t end = mono_ns() + 20 * SEC;
    while (!atomic_load(&lookup_release) && mono_ns() < end)
        sched_yield();
    return getaddrinfo("127.0.0.1", service, hints, res);
}

/*
 * tern_cancel from a thread that does not hold the loop (here: the test
 * thread between turns) is queued and resolved by id in the next step 1,
 * where its answer is lost to the caller: every id of [first, last] but
 * `except`, queued, then one turn to resolve them.
 */
static void queue_cancels(tern_loop *loop, tern_id first, tern_id last, tern_id except)
{
    for (tern_id id = first; id <= last; id++)
        if (id != except)
            cr_assert_eq(tern_cancel(loop, id), TERN_CANCEL_REQUESTED);
    tern_loop_run_once(loop, 0);
}

static atomic_uint bytes_read;

static void on_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                    void *arg)
{
    (void)loop;
    (void)id;
    (void)status;
    (void)data;
    (void)arg;
    atomic_fetch_add(&bytes_read, (unsigned)len);
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
        cr_expect_eq(tern__test_cancel_now(loop, id), -ENOENT,
                     "tern__test_cancel_now(%llu) reached the connect's "
                     "own lookup or timer",
                     (unsigned long long)id);

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
    queue_cancels(loop, a + 1, a + 64, 0);
    /* The watcher still reports: the stream reads what the peer sends. */
    cr_assert_eq(write(sp[1], "x", 1), 1);
    for (int i = 0; i < 2000 && atomic_load(&bytes_read) == 0; i++)
        tern_loop_run_once(loop, MS);
    cr_expect_eq(atomic_load(&bytes_read), 1, "FAIL: the stream's watcher stopped reporting");
    cr_assert_eq(tern_stream_close(loop, a), 0);
    close(sp[1]);
    tern_loop_free(loop);
}

/*
 * The lookup is running (stalled) and the timeout armed when a burst of
 * stray cancels is queued and resolved in step 1: neither may be reached,
 * so once the lookup returns the connect succeeds — not -ECANCELED from a
 * cancelled lookup, not a timeout cut short.
 */
Test(ids, queued_cancels_cannot_reach_a_connects_lookup_or_timeout, .timeout = 60)
{
    tern_loop *loop;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    tern_id listener;
    cr_assert_eq(tern_tcp_listen(loop, "127.0.0.1", 0, 16, 0, on_accept, NULL, &listener), 0);
    unsigned port;
    cr_assert_eq(tern_tcp_port(loop, listener, &port), 0);
    tern__set_getaddrinfo(stalled_getaddrinfo);
    tern_id stream;
    cr_assert_eq(tern_tcp_connect(loop, "stalled.example", port, 10 * SEC, on_connect, NULL,
                                  &stream),
                 0);
    uint64_t end = mono_ns() + 20 * SEC;
    while (!atomic_load(&lookup_entered) && mono_ns() < end)
        tern_loop_run_once(loop, MS);
    cr_assert(atomic_load(&lookup_entered), "FAIL: the lookup never started");
    queue_cancels(loop, stream + 1, stream + 64, 0);
    for (tern_id id = stream + 1; id <= stream + 64; id++)
        cr_expect_eq(tern__test_cancel_now(loop, id), -ENOENT, "tern_cancel(%llu) reached the "
                     "connect's own lookup or timeout", (unsigned long long)id);
    atomic_store(&lookup_release, true);
    for (int i = 0; i < 2000 && connect_status == 1; i++)
        tern_loop_run_once(loop, MS);
    cr_expect_eq(connect_status, 0, "the connect was disturbed by stray cancels: %s",
                 tern_err_name(connect_status));
    tern__set_getaddrinfo(NULL);
    tern_loop_free(loop);
}

/*
 * A listener out of descriptors backs off on its deadline. Stray cancels
 * meanwhile (queued and at once) reach neither the deadline nor the
 * watcher: the back-off ends and the waiting connection is accepted.
 */
Test(ids, cancels_cannot_reach_a_listeners_backoff, .timeout = 60)
{
    tern_loop *loop;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    tern_id listener;
    cr_assert_eq(tern_tcp_listen(loop, "127.0.0.1", 0, 16, 0, on_accept, NULL, &listener), 0);
    unsigned port;
    cr_assert_eq(tern_tcp_port(loop, listener, &port), 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                            .sin_port = htons((uint16_t)port)};
    int cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(cfd, 0);
    cr_assert_eq(connect(cfd, (struct sockaddr *)&a, sizeof(a)), 0);
    tern__fault_arm(TERN__FAULT_FD, 1); /* the accept fails: EMFILE */
    for (int i = 0; i < 2000 && atomic_load(&backoffs) == 0; i++)
        tern_loop_run_once(loop, MS);
    tern__fault_arm(0, 0);
    cr_assert_eq(atomic_load(&backoffs), 1, "FAIL: no back-off began");
    cr_assert_eq(atomic_load(&accepted), 0);
    queue_cancels(loop, listener + 1, listener + 64, 0);
    for (tern_id id = listener + 1; id <= listener + 64; id++)
        cr_expect_eq(tern__test_cancel_now(loop, id), -ENOENT, "tern_cancel(%llu) reached the "
                     "listener's own deadline or watcher", (unsigned long long)id);
    uint64_t end = mono_ns() + 20 * SEC;
    while (atomic_load(&accepted) == 0 && mono_ns() < end)
        tern_loop_run_once(loop, 10 * MS);
    cr_expect_eq(atomic_load(&accepted), 1, "FAIL: the back-off never ended (%u accepted)",
                 atomic_load(&accepted));
    close(cfd);
    tern_loop_free(loop);
}
