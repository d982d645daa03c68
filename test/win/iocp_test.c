/*
 * iocp_test: the IOCP backend (backends/iocp.c) through its ops, as the
 * loop drives it: a wait returns for its timeout, never before it, and for
 * a wake from another thread; each wake is taken once, whether a wait
 * retrieved its packet first or the loop took it before any wait did
 * (the packet is then dropped by the next wait, which does not report it
 * again); sockets are watched through AFD polls, level-triggered: readable
 * only after the peer sends, writable, readable and hang-up when the peer
 * closes (hang-up and error for a reset), interest moved by modify, nothing
 * after a delete, 64 sockets each reported once per event, reports kept
 * across a wait with no room; what is not a socket is refused; close
 * cancels every poll in flight and waits for each; an allocation failure
 * leaves nothing open. Closes with "N passed, N failed"; exit 0 when all pass.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include "sockpair.h"
#include <windows.h>

#include "backend.h"
#include "clock.h"
#include "fault.h"
#include "os_thread.h"
#include "runner.h"
#include "tern.h"

#define MS 1000000ll

static struct tern__backend open_backend(void)
{
    struct tern__backend b = {.ops = tern__backend_find("iocp")};
    CHECK(b.ops != NULL);
    CHECK(b.ops->init(&b) == 0);
    return b;
}

TEST(it_is_the_default_and_wakes_itself)
{
    CHECK(tern__backend_find(NULL) == tern__backend_find("iocp"));
    CHECK(tern__backend_find("poll") == NULL);
    struct tern__backend b = open_backend();
    CHECK(b.wakes_itself);
    CHECK(b.fd == -1); /* nothing a host could watch */
    CHECK(b.ops->wake != NULL && b.ops->wake_take != NULL);
    b.ops->close(&b);
}

TEST(a_wait_lasts_its_timeout_and_no_less)
{
    struct tern__backend b = open_backend();
    struct tern__fired out[4];
    int64_t waits[] = {0, 1, 999999, 15 * MS, 20 * MS + 1};
    for (size_t i = 0; i < sizeof(waits) / sizeof(waits[0]); i++) {
        uint64_t t0 = tern__clock_now();
        CHECK(b.ops->wait(&b, waits[i], out, 4) == 0);
        uint64_t took = tern__clock_now() - t0;
        /* Rounded up to whole milliseconds: never shorter than asked. */
        CHECK(took >= (uint64_t)waits[i]);
        CHECK(took < (uint64_t)waits[i] + 500 * MS);
    }
    b.ops->close(&b);
}

struct waker {
    struct tern__backend *b;
    _Atomic int go;
};

static void *wake_later(void *arg)
{
    struct waker *w = arg;
    while (!atomic_load(&w->go))
        Sleep(1);
    Sleep(20);
    w->b->ops->wake(w->b);
    return NULL;
}

TEST(a_wake_from_another_thread_ends_an_endless_wait_and_is_taken_once)
{
    struct tern__backend b = open_backend();
    struct tern__fired out[4];
    CHECK(!b.ops->wake_take(&b)); /* nothing was woken */
    struct waker w = {.b = &b};
    tern__thread_t t;
    CHECK(tern__thread_start(&t, wake_later, &w) == 0);
    atomic_store(&w.go, 1);
    uint64_t t0 = tern__clock_now();
    CHECK(b.ops->wait(&b, -1, out, 4) == 0); /* a wake fires no entry */
    CHECK(tern__clock_now() - t0 >= 15 * MS);
    tern__thread_join(t, NULL);
    CHECK(b.ops->wake_take(&b));
    CHECK(!b.ops->wake_take(&b)); /* once */
    /* Taken: the next wait has nothing and lasts its timeout. */
    t0 = tern__clock_now();
    CHECK(b.ops->wait(&b, 30 * MS, out, 4) == 0);
    CHECK(tern__clock_now() - t0 >= 30 * MS);
    b.ops->close(&b);
}

TEST(a_wake_taken_before_any_wait_is_dropped_by_the_next_wait)
{
    struct tern__backend b = open_backend();
    struct tern__fired out[4];
    b.ops->wake(&b);
    CHECK(b.ops->wake_take(&b)); /* its packet is still in the port */
    CHECK(!b.ops->wake_take(&b));
    CHECK(b.ops->wait(&b, 0, out, 4) == 0); /* drops it */
    CHECK(!b.ops->wake_take(&b));           /* and does not count it again */
    /* A stale packet does not end an endless wait: only the next wake does. */
    b.ops->wake(&b);
    CHECK(b.ops->wake_take(&b)); /* stale again */
    struct waker w = {.b = &b};
    tern__thread_t t;
    CHECK(tern__thread_start(&t, wake_later, &w) == 0);
    atomic_store(&w.go, 1);
    uint64_t t0 = tern__clock_now();
    CHECK(b.ops->wait(&b, -1, out, 4) == 0);
    CHECK(tern__clock_now() - t0 >= 15 * MS); /* not ended by the stale one */
    tern__thread_join(t, NULL);
    CHECK(b.ops->wake_take(&b));
    CHECK(!b.ops->wake_take(&b));
    b.ops->close(&b);
}

TEST(many_wakes_each_taken_once)
{
    struct tern__backend b = open_backend();
    struct tern__fired out[4];
    /* The wake protocol makes one wake per park; the backend keeps count
     * across parks whichever of wait and take meets a packet first. */
    for (int i = 0; i < 100; i++) {
        b.ops->wake(&b);
        if (i % 2 == 0)
            CHECK(b.ops->wait(&b, -1, out, 4) == 0);
        CHECK(b.ops->wake_take(&b));
        CHECK(!b.ops->wake_take(&b));
    }
    CHECK(b.ops->wait(&b, 0, out, 4) == 0);
    uint64_t t0 = tern__clock_now();
    CHECK(b.ops->wait(&b, 10 * MS, out, 4) == 0); /* nothing left to end it early */
    CHECK(tern__clock_now() - t0 >= 10 * MS);
    b.ops->close(&b);
}

/* One wait: the events reported for fd (0: none), and how many entries named it. */
static unsigned wait_for(struct tern__backend *b, int64_t timeout, SOCKET fd, int *entries)
{
    struct tern__fired out[8];
    int n = b->ops->wait(b, timeout, out, 8);
    CHECK(n >= 0);
    unsigned ev = 0;
    *entries = 0;
    for (int i = 0; i < n; i++)
        if (out[i].fd == (int)fd) {
            ev |= out[i].events;
            ++*entries;
        }
    return ev;
}

/* Wait (up to a second) until fd reports something; its events. */
static unsigned next_report(struct tern__backend *b, SOCKET fd)
{
    uint64_t t0 = tern__clock_now();
    int k;
    unsigned ev;
    while ((ev = wait_for(b, 100 * MS, fd, &k)) == 0 && tern__clock_now() - t0 < 1000 * MS)
        ;
    CHECK(ev == 0 || k == 1); /* one entry per descriptor */
    return ev;
}

static unsigned quiet_for(struct tern__backend *b, SOCKET fd, int64_t timeout)
{
    int k;
    return wait_for(b, timeout, fd, &k);
}

TEST(a_socket_is_readable_after_the_peer_sends_and_not_before)
{
    struct tern__backend b = open_backend();
    SOCKET a, s;
    CHECK(sockpair(&a, &s));
    CHECK(b.ops->modify(&b, (int)s, 0, TERN_READABLE) == 0);
    CHECK(quiet_for(&b, s, 50 * MS) == 0);
    CHECK(send(a, "x", 1, 0) == 1);
    CHECK(next_report(&b, s) == TERN_READABLE);
    /* Level: left unread, it is reported again, and again. */
    CHECK(next_report(&b, s) == TERN_READABLE);
    CHECK(next_report(&b, s) == TERN_READABLE);
    char c;
    CHECK(recv(s, &c, 1, 0) == 1);
    CHECK(quiet_for(&b, s, 50 * MS) == 0);
    CHECK(b.ops->modify(&b, (int)s, TERN_READABLE, 0) == 0);
    b.ops->close(&b);
    closesocket(a);
    closesocket(s);
}

TEST(a_connected_socket_is_writable)
{
    struct tern__backend b = open_backend();
    SOCKET a, s;
    CHECK(sockpair(&a, &s));
    CHECK(b.ops->modify(&b, (int)s, 0, TERN_WRITABLE) == 0);
    CHECK(next_report(&b, s) == TERN_WRITABLE);
    CHECK(next_report(&b, s) == TERN_WRITABLE); /* still writable */
    b.ops->close(&b);
    closesocket(a);
    closesocket(s);
}

TEST(the_peer_closing_is_readable_and_hang_up_and_a_reset_an_error)
{
    struct tern__backend b = open_backend();
    SOCKET a, s;
    CHECK(sockpair(&a, &s));
    CHECK(b.ops->modify(&b, (int)s, 0, TERN_READABLE) == 0);
    CHECK(quiet_for(&b, s, 20 * MS) == 0);
    closesocket(a);
    CHECK(next_report(&b, s) == (TERN_READABLE | TERN_HANGUP));
    CHECK(b.ops->modify(&b, (int)s, TERN_READABLE, 0) == 0);
    closesocket(s);
    CHECK(sockpair(&a, &s));
    CHECK(b.ops->modify(&b, (int)s, 0, TERN_READABLE) == 0);
    CHECK(quiet_for(&b, s, 20 * MS) == 0);
    sockpair_reset(a);
    unsigned ev = next_report(&b, s);
    CHECK((ev & (TERN_HANGUP | TERN_ERROR)) == (TERN_HANGUP | TERN_ERROR));
    CHECK(b.ops->modify(&b, (int)s, TERN_READABLE, 0) == 0);
    b.ops->close(&b);
    closesocket(s);
}

TEST(modify_moves_the_interest_from_read_to_write_and_back)
{
    struct tern__backend b = open_backend();
    SOCKET a, s;
    CHECK(sockpair(&a, &s));
    CHECK(b.ops->modify(&b, (int)s, 0, TERN_READABLE) == 0);
    CHECK(quiet_for(&b, s, 20 * MS) == 0); /* a read poll is in flight */
    CHECK(b.ops->modify(&b, (int)s, TERN_READABLE, TERN_WRITABLE) == 0);
    CHECK(next_report(&b, s) == TERN_WRITABLE);
    CHECK(b.ops->modify(&b, (int)s, TERN_WRITABLE, TERN_READABLE) == 0);
    CHECK(quiet_for(&b, s, 50 * MS) == 0); /* writable no more reported */
    CHECK(send(a, "x", 1, 0) == 1);
    CHECK(next_report(&b, s) == TERN_READABLE);
    CHECK(b.ops->modify(&b, (int)s, TERN_READABLE, 0) == 0);
    b.ops->close(&b);
    closesocket(a);
    closesocket(s);
}

TEST(a_deleted_watch_reports_nothing_more)
{
    struct tern__backend b = open_backend();
    SOCKET a, s;
    CHECK(sockpair(&a, &s));
    CHECK(b.ops->modify(&b, (int)s, 0, TERN_READABLE) == 0);
    CHECK(quiet_for(&b, s, 20 * MS) == 0);
    CHECK(b.ops->modify(&b, (int)s, TERN_READABLE, 0) == 0);
    CHECK(send(a, "x", 1, 0) == 1);
    CHECK(quiet_for(&b, s, 50 * MS) == 0);
    /* Watched again under the same number: only the new watch reports. */
    CHECK(b.ops->modify(&b, (int)s, 0, TERN_READABLE) == 0);
    int k;
    CHECK(wait_for(&b, 1000 * MS, s, &k) == TERN_READABLE && k == 1);
    CHECK(b.ops->modify(&b, (int)s, TERN_READABLE, 0) == 0);
    /* Deleted after its poll completed but before a wait retrieved it:
     * the packet is dropped, not reported. */
    char c;
    CHECK(recv(s, &c, 1, 0) == 1);
    CHECK(b.ops->modify(&b, (int)s, 0, TERN_READABLE) == 0);
    CHECK(quiet_for(&b, s, 20 * MS) == 0);
    CHECK(send(a, "y", 1, 0) == 1);
    Sleep(50);
    CHECK(b.ops->modify(&b, (int)s, TERN_READABLE, 0) == 0);
    CHECK(quiet_for(&b, s, 50 * MS) == 0);
    b.ops->close(&b);
    closesocket(a);
    closesocket(s);
}

#define MANY 64

TEST(many_sockets_each_reported_once_per_event)
{
    struct tern__backend b = open_backend();
    SOCKET a[MANY], s[MANY];
    int seen[MANY] = {0};
    for (int i = 0; i < MANY; i++) {
        CHECK(sockpair(&a[i], &s[i]));
        CHECK(b.ops->modify(&b, (int)s[i], 0, TERN_READABLE) == 0);
    }
    CHECK(b.ops->wait(&b, 20 * MS, (struct tern__fired[4]){0}, 4) == 0);
    for (int i = 0; i < MANY; i++)
        CHECK(send(a[i], "x", 1, 0) == 1);
    int total = 0;
    uint64_t t0 = tern__clock_now();
    struct tern__fired out[16]; /* fewer than MANY: the rest wait for the next wait */
    while (total < MANY && tern__clock_now() - t0 < 2000 * MS) {
        int n = b.ops->wait(&b, 100 * MS, out, 16);
        CHECK(n >= 0 && n <= 16);
        for (int e = 0; e < n; e++)
            for (int i = 0; i < MANY; i++)
                if (out[e].fd == (int)s[i]) {
                    CHECK(out[e].events == TERN_READABLE);
                    seen[i]++;
                    total++;
                    char c;
                    CHECK(recv(s[i], &c, 1, 0) == 1);
                }
    }
    CHECK(b.ops->wait(&b, 50 * MS, out, 16) == 0); /* all consumed: nothing more */
    for (int i = 0; i < MANY; i++) {
        CHECK(seen[i] == 1);
        CHECK(b.ops->modify(&b, (int)s[i], TERN_READABLE, 0) == 0);
        closesocket(a[i]);
        closesocket(s[i]);
    }
    b.ops->close(&b);
}

TEST(reports_taken_by_a_wait_with_no_room_go_out_with_the_next)
{
    struct tern__backend b = open_backend();
    SOCKET a, s;
    CHECK(sockpair(&a, &s));
    CHECK(b.ops->modify(&b, (int)s, 0, TERN_READABLE) == 0);
    CHECK(quiet_for(&b, s, 20 * MS) == 0);
    CHECK(send(a, "x", 1, 0) == 1);
    Sleep(50); /* the poll's completion is in the port before the wake */
    b.ops->wake(&b);
    /* The idle member's sleep: room for nothing, returns for the wake only. */
    CHECK(b.ops->wait(&b, -1, NULL, 0) == 0);
    CHECK(b.ops->wake_take(&b));
    int k;
    CHECK(wait_for(&b, 0, s, &k) == TERN_READABLE && k == 1);
    CHECK(b.ops->modify(&b, (int)s, TERN_READABLE, 0) == 0);
    b.ops->close(&b);
    closesocket(a);
    closesocket(s);
}

TEST(what_is_not_a_socket_is_refused_and_changes_nothing)
{
    struct tern__backend b = open_backend();
    HANDLE ev = CreateEventA(NULL, FALSE, FALSE, NULL);
    CHECK(b.ops->modify(&b, (int)(uintptr_t)ev, 0, TERN_READABLE) == -ENOTSOCK);
    CHECK(b.ops->modify(&b, (int)(uintptr_t)ev, 0, TERN_WRITABLE) == -ENOTSOCK);
    CHECK(b.ops->modify(&b, (int)(uintptr_t)ev, TERN_READABLE, 0) == 0); /* nothing to undo */
    CHECK(quiet_for(&b, 0, 10 * MS) == 0);
    b.ops->close(&b);
    CHECK(tern__iocp_close_drained() == 0);
    CloseHandle(ev);
    CHECK(b.ops->signal == NULL && b.ops->proc == NULL && !b.ops->vnode);
    CHECK(b.completes == 0);
}

TEST(close_cancels_polls_in_flight_and_waits_for_each)
{
    struct tern__backend b = open_backend();
    SOCKET a[8], s[8];
    for (int i = 0; i < 8; i++) {
        CHECK(sockpair(&a[i], &s[i]));
        CHECK(b.ops->modify(&b, (int)s[i], 0, TERN_READABLE) == 0);
    }
    CHECK(quiet_for(&b, 0, 10 * MS) == 0); /* eight polls in the kernel */
    /* Half deleted (cancelled, their completions not yet retrieved), half live. */
    for (int i = 0; i < 4; i++)
        CHECK(b.ops->modify(&b, (int)s[i], TERN_READABLE, 0) == 0);
    b.ops->close(&b);
    CHECK(tern__iocp_close_drained() == 8);
    for (int i = 0; i < 8; i++) {
        closesocket(a[i]);
        closesocket(s[i]);
    }
}

TEST(an_allocation_failure_opens_nothing)
{
    struct tern__backend b = {.ops = tern__backend_find("iocp")};
    tern__fault_arm(TERN__FAULT_ALLOC, 1);
    CHECK(b.ops->init(&b) == -ENOMEM);
    tern__fault_arm(0, 0);
    CHECK(b.state == NULL);
}

static const struct runner_test tests[] = {
    RUNNER_TEST(it_is_the_default_and_wakes_itself),
    RUNNER_TEST(a_wait_lasts_its_timeout_and_no_less),
    RUNNER_TEST(a_wake_from_another_thread_ends_an_endless_wait_and_is_taken_once),
    RUNNER_TEST(a_wake_taken_before_any_wait_is_dropped_by_the_next_wait),
    RUNNER_TEST(many_wakes_each_taken_once),
    RUNNER_TEST(a_socket_is_readable_after_the_peer_sends_and_not_before),
    RUNNER_TEST(a_connected_socket_is_writable),
    RUNNER_TEST(the_peer_closing_is_readable_and_hang_up_and_a_reset_an_error),
    RUNNER_TEST(modify_moves_the_interest_from_read_to_write_and_back),
    RUNNER_TEST(a_deleted_watch_reports_nothing_more),
    RUNNER_TEST(many_sockets_each_reported_once_per_event),
    RUNNER_TEST(reports_taken_by_a_wait_with_no_room_go_out_with_the_next),
    RUNNER_TEST(what_is_not_a_socket_is_refused_and_changes_nothing),
    RUNNER_TEST(close_cancels_polls_in_flight_and_waits_for_each),
    RUNNER_TEST(an_allocation_failure_opens_nothing),
};

int main(void)
{
    if (!sockpair_start())
        return 1;
    return RUNNER_MAIN(tests);
}
