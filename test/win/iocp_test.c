/*
 * iocp_test: the IOCP backend (backends/iocp.c) through its ops, as the
 * loop drives it: a wait returns for its timeout, never before it, and for
 * a wake from another thread; each wake is taken once, whether a wait
 * retrieved its packet first or the loop took it before any wait did
 * (the packet is then dropped by the next wait, which does not report it
 * again); descriptors are refused honestly; an allocation failure leaves
 * nothing open. Closes with "N passed, N failed"; exit 0 when all pass.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
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

TEST(descriptors_are_refused_not_pretended)
{
    struct tern__backend b = open_backend();
    CHECK(b.ops->modify(&b, 3, 0, TERN_READABLE) == -EOPNOTSUPP);
    CHECK(b.ops->modify(&b, 3, 0, TERN_WRITABLE) == -EOPNOTSUPP);
    CHECK(b.ops->modify(&b, 3, TERN_READABLE, 0) == 0); /* a delete has nothing to undo */
    CHECK(b.ops->signal == NULL && b.ops->proc == NULL && !b.ops->vnode);
    CHECK(b.completes == 0);
    b.ops->close(&b);
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
    RUNNER_TEST(descriptors_are_refused_not_pretended),
    RUNNER_TEST(an_allocation_failure_opens_nothing),
};

int main(void)
{
    return RUNNER_MAIN(tests);
}
