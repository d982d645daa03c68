/*
 * io_test: socket watches on Windows through the public API (tern_io_start,
 * tern_io_modify, tern_io_stop, tern_wait_fd) over loopback TCP pairs, on
 * the IOCP backend's AFD polls: readable only after the peer sends;
 * writable; readable and hang-up once the peer closes; interest moved from
 * read to write; nothing after a stop; 64 sockets each reported once per
 * event; tern_wait_fd's one outcome (the event, a timeout, a cancel); what
 * is not a socket refused with nothing admitted; a loop freed with watches
 * armed cancels their polls, waits for them and leaves no handle. Closes
 * with "N passed, N failed"; exit 0 when all pass.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "sockpair.h"
#include <windows.h>

#include "backend.h"
#include "handles.h"
#include "runner.h"
#include "tern.h"
#include "tern/wait.h"

#define MS 1000000ull

static tern_loop *new_loop(void)
{
    tern_loop *loop = NULL;
    CHECK(tern_loop_new(&loop, NULL) == 0);
    return loop;
}

struct seen {
    int calls;
    unsigned events; /* all the calls' events */
    unsigned last;
    bool consume; /* read a byte on each readable report */
    bool stop;    /* stop the watcher on the first call */
};

static void on_io(tern_loop *loop, tern_id id, tern_os_sock_t fd, unsigned events, void *arg)
{
    struct seen *s = arg;
    s->calls++;
    s->events |= events;
    s->last = events;
    if (s->consume && (events & TERN_READABLE)) {
        char c;
        CHECK(recv((SOCKET)fd, &c, 1, 0) == 1);
    }
    if (s->stop)
        CHECK(tern_io_stop(loop, id) == 0);
}

/* Turns for up to limit, until cond(arg) holds. */
static void run_until(tern_loop *loop, bool (*cond)(void *), void *arg, uint64_t limit)
{
    uint64_t t0 = tern_loop_now(loop);
    while (!cond(arg) && tern_loop_now(loop) - t0 < limit)
        CHECK(tern_loop_run_once(loop, (int64_t)(20 * MS)) >= 0);
}

static bool called(void *arg)
{
    return ((struct seen *)arg)->calls > 0;
}

/* n turns of up to `each` each. */
static void turns(tern_loop *loop, int n, uint64_t each)
{
    for (int i = 0; i < n; i++)
        CHECK(tern_loop_run_once(loop, (int64_t)each) >= 0);
}

TEST(readable_after_the_peer_sends_and_not_before)
{
    tern_loop *loop = new_loop();
    SOCKET a, s;
    CHECK(sockpair(&a, &s));
    struct seen seen = {.consume = true};
    tern_id id = 0;
    CHECK(tern_io_start(loop, s, TERN_READABLE, on_io, &seen, &id) == 0 && id != 0);
    turns(loop, 3, 20 * MS);
    CHECK(seen.calls == 0);
    CHECK(send(a, "x", 1, 0) == 1);
    run_until(loop, called, &seen, 1000 * MS);
    CHECK(seen.calls == 1 && seen.last == TERN_READABLE);
    turns(loop, 3, 20 * MS); /* consumed: not reported again */
    CHECK(seen.calls == 1);
    CHECK(tern_io_stop(loop, id) == 0);
    tern_loop_free(loop);
    closesocket(a);
    closesocket(s);
}

TEST(writable_and_level_while_it_holds)
{
    tern_loop *loop = new_loop();
    SOCKET a, s;
    CHECK(sockpair(&a, &s));
    struct seen seen = {0};
    tern_id id;
    CHECK(tern_io_start(loop, s, TERN_WRITABLE, on_io, &seen, &id) == 0);
    run_until(loop, called, &seen, 1000 * MS);
    CHECK(seen.last == TERN_WRITABLE);
    int before = seen.calls;
    turns(loop, 3, 100 * MS);
    CHECK(seen.calls >= before + 2); /* still writable: once per turn */
    CHECK(seen.events == TERN_WRITABLE);
    CHECK(tern_io_stop(loop, id) == 0);
    tern_loop_free(loop);
    closesocket(a);
    closesocket(s);
}

TEST(readable_and_hang_up_after_the_peer_closes)
{
    tern_loop *loop = new_loop();
    SOCKET a, s;
    CHECK(sockpair(&a, &s));
    struct seen seen = {0};
    tern_id id;
    CHECK(tern_io_start(loop, s, TERN_READABLE, on_io, &seen, &id) == 0);
    turns(loop, 2, 20 * MS);
    CHECK(seen.calls == 0);
    closesocket(a);
    run_until(loop, called, &seen, 1000 * MS);
    CHECK(seen.last == (TERN_READABLE | TERN_HANGUP));
    char c;
    CHECK(recv(s, &c, 1, 0) == 0); /* the end of the stream */
    CHECK(tern_io_stop(loop, id) == 0);
    tern_loop_free(loop);
    closesocket(s);
}

TEST(modify_moves_the_interest_from_read_to_write)
{
    tern_loop *loop = new_loop();
    SOCKET a, s;
    CHECK(sockpair(&a, &s));
    struct seen seen = {0};
    tern_id id;
    CHECK(tern_io_start(loop, s, TERN_READABLE, on_io, &seen, &id) == 0);
    turns(loop, 2, 20 * MS);
    CHECK(seen.calls == 0);
    CHECK(tern_io_modify(loop, id, TERN_WRITABLE) == 0);
    run_until(loop, called, &seen, 1000 * MS);
    CHECK(seen.calls >= 1 && seen.events == TERN_WRITABLE);
    CHECK(tern_io_modify(loop, id, TERN_READABLE) == 0);
    turns(loop, 1, 0); /* a report queued before the change is filtered */
    seen = (struct seen){.consume = true};
    turns(loop, 3, 20 * MS);
    CHECK(seen.calls == 0);
    CHECK(send(a, "x", 1, 0) == 1);
    run_until(loop, called, &seen, 1000 * MS);
    CHECK(seen.calls == 1 && seen.events == TERN_READABLE);
    CHECK(tern_io_stop(loop, id) == 0);
    tern_loop_free(loop);
    closesocket(a);
    closesocket(s);
}

TEST(after_a_stop_no_more_callbacks)
{
    tern_loop *loop = new_loop();
    SOCKET a, s;
    CHECK(sockpair(&a, &s));
    struct seen seen = {.stop = true};
    tern_id id;
    CHECK(tern_io_start(loop, s, TERN_READABLE, on_io, &seen, &id) == 0);
    CHECK(send(a, "x", 1, 0) == 1);
    run_until(loop, called, &seen, 1000 * MS);
    CHECK(seen.calls == 1);
    CHECK(send(a, "y", 1, 0) == 1);
    turns(loop, 3, 20 * MS); /* unread bytes, but the watch is gone */
    CHECK(seen.calls == 1);
    CHECK(tern_io_stop(loop, id) == -ENOENT);
    tern_loop_stats st;
    tern_loop_stats_get(loop, &st);
    CHECK(st.live_operations == 0);
    tern_loop_free(loop);
    closesocket(a);
    closesocket(s);
}

#define MANY 64

static struct seen many[MANY];

static bool all_called(void *arg)
{
    (void)arg;
    for (int i = 0; i < MANY; i++)
        if (many[i].calls == 0)
            return false;
    return true;
}

TEST(many_sockets_each_reported_once_per_event)
{
    tern_loop *loop = new_loop();
    SOCKET a[MANY], s[MANY];
    tern_id id[MANY];
    for (int i = 0; i < MANY; i++) {
        many[i] = (struct seen){.consume = true};
        CHECK(sockpair(&a[i], &s[i]));
        CHECK(tern_io_start(loop, s[i], TERN_READABLE, on_io, &many[i], &id[i]) == 0);
    }
    turns(loop, 1, 20 * MS);
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < MANY; i++) {
            many[i].calls = 0;
            CHECK(send(a[i], "x", 1, 0) == 1);
        }
        run_until(loop, all_called, NULL, 2000 * MS);
        turns(loop, 2, 20 * MS);
        for (int i = 0; i < MANY; i++)
            CHECK(many[i].calls == 1 && many[i].last == TERN_READABLE);
    }
    for (int i = 0; i < MANY; i++) {
        CHECK(tern_io_stop(loop, id[i]) == 0);
        closesocket(a[i]);
        closesocket(s[i]);
    }
    tern_loop_free(loop);
}

struct outcome {
    int calls;
    int status;
    uintptr_t result;
};

static void on_wait(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop;
    (void)id;
    struct outcome *o = arg;
    o->calls++;
    o->status = status;
    o->result = (uintptr_t)result;
}

static bool waited(void *arg)
{
    return ((struct outcome *)arg)->calls > 0;
}

TEST(wait_fd_reports_once)
{
    tern_loop *loop = new_loop();
    SOCKET a, s;
    CHECK(sockpair(&a, &s));
    struct outcome o = {0};
    CHECK(tern_wait_fd(loop, s, on_wait, &o, NULL, NULL) == 0);
    turns(loop, 2, 20 * MS);
    CHECK(o.calls == 0);
    CHECK(send(a, "x", 1, 0) == 1);
    run_until(loop, waited, &o, 1000 * MS);
    CHECK(o.calls == 1 && o.status == 0 && o.result == TERN_READABLE);
    turns(loop, 3, 20 * MS); /* unread, but the wait is over: once */
    CHECK(o.calls == 1);
    /* Watched again at once: the byte is still there. */
    o = (struct outcome){0};
    CHECK(tern_wait_fd(loop, s, on_wait, &o, NULL, NULL) == 0);
    run_until(loop, waited, &o, 1000 * MS);
    CHECK(o.calls == 1 && o.status == 0 && o.result == TERN_READABLE);
    /* A timeout, then a cancel: each its own one outcome. */
    char c;
    CHECK(recv(s, &c, 1, 0) == 1);
    o = (struct outcome){0};
    tern_job_options opts = {.timeout_ns = 30 * MS};
    CHECK(tern_wait_fd(loop, s, on_wait, &o, &opts, NULL) == 0);
    run_until(loop, waited, &o, 1000 * MS);
    CHECK(o.calls == 1 && o.status == -ETIMEDOUT);
    o = (struct outcome){0};
    tern_id id;
    CHECK(tern_wait_fd(loop, s, on_wait, &o, NULL, &id) == 0);
    turns(loop, 1, 10 * MS);
    CHECK(tern_cancel(loop, id) == TERN_CANCEL_REQUESTED); /* resolved in the next turn */
    run_until(loop, waited, &o, 1000 * MS);
    CHECK(o.calls == 1 && o.status == -ECANCELED);
    CHECK(send(a, "y", 1, 0) == 1);
    turns(loop, 2, 20 * MS);
    CHECK(o.calls == 1);
    tern_loop_free(loop);
    closesocket(a);
    closesocket(s);
}

TEST(what_is_not_a_socket_is_refused_and_admits_nothing)
{
    tern_loop *loop = new_loop();
    HANDLE ev = CreateEventA(NULL, FALSE, FALSE, NULL);
    struct seen seen = {0};
    struct outcome o = {0};
    tern_id id = 0;
    CHECK(tern_io_start(loop, (tern_os_sock_t)ev, TERN_READABLE, on_io, &seen, &id) == -ENOTSOCK);
    CHECK(tern_wait_fd(loop, (tern_os_sock_t)ev, on_wait, &o, NULL, &id) == -ENOTSOCK);
    CHECK(tern_io_start(loop, 0, TERN_READABLE, on_io, &seen, &id) == -ENOTSOCK);
    CHECK(id == 0);
    tern_loop_stats st;
    tern_loop_stats_get(loop, &st);
    CHECK(st.live_operations == 0);
    CHECK(tern_loop_run(loop) == 0); /* nothing was admitted */
    CHECK(seen.calls == 0 && o.calls == 0);
    tern_loop_free(loop);
    CloseHandle(ev);
}

TEST(a_loop_freed_with_watches_armed_drains_them_and_leaves_no_handle)
{
    handles_warm_up();
    SOCKET a[8], s[8];
    for (int i = 0; i < 8; i++)
        CHECK(sockpair(&a[i], &s[i]));
    struct handles before = handles_now();
    tern_loop *loop = new_loop();
    struct seen seen = {0};
    struct outcome o = {0};
    for (int i = 0; i < 7; i++)
        CHECK(tern_io_start(loop, s[i], TERN_READABLE, on_io, &seen, NULL) == 0);
    CHECK(tern_wait_fd(loop, s[7], on_wait, &o, NULL, NULL) == 0);
    turns(loop, 1, 10 * MS); /* eight polls in the kernel */
    CHECK(seen.calls == 0 && o.calls == 0);
    tern_loop_free(loop);
    CHECK(tern__iocp_close_drained() == 8);
    CHECK(o.calls == 1 && o.status == -ECANCELED);
    CHECK(seen.calls == 0);
    CHECK(handles_same(before, handles_now()));
    for (int i = 0; i < 8; i++) {
        closesocket(a[i]);
        closesocket(s[i]);
    }
}

static const struct runner_test tests[] = {
    RUNNER_TEST(readable_after_the_peer_sends_and_not_before),
    RUNNER_TEST(writable_and_level_while_it_holds),
    RUNNER_TEST(readable_and_hang_up_after_the_peer_closes),
    RUNNER_TEST(modify_moves_the_interest_from_read_to_write),
    RUNNER_TEST(after_a_stop_no_more_callbacks),
    RUNNER_TEST(many_sockets_each_reported_once_per_event),
    RUNNER_TEST(wait_fd_reports_once),
    RUNNER_TEST(what_is_not_a_socket_is_refused_and_admits_nothing),
    RUNNER_TEST(a_loop_freed_with_watches_armed_drains_them_and_leaves_no_handle),
};

int main(void)
{
    if (!sockpair_start())
        return 1;
    int rc = RUNNER_MAIN(tests);
    CHECK(tern_pool_shutdown(TERN_POOL_DRAIN, UINT64_MAX) == 0);
    return rc;
}
