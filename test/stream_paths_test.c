/*
 * A stream's less travelled paths (include/tern/net.h): a watcher the
 * backend refuses to widen fails the queued writes with the backend's
 * error and ends reading with it, each told once in step 2 and later
 * writes refused (-EPIPE); an interrupted write or read (EINTR) is tried
 * again; a write of more buffers than one system call gathers arrives
 * whole and in order; descriptors queued behind a plain write ride with
 * their own request's first byte; tern_stream_try_write refuses a stream
 * shut for writing (-EPIPE), retries an interrupted call, and a buffer too
 * large to count is refused by a queued write; an allocator that goes back
 * to tern's own buffer leaves its memory unused; a stream closed while a
 * drain is owed never hears the drain; tern_stream_open refuses a closed
 * descriptor (-EBADF) and, out of memory or failing at any of its system
 * calls, leaves the descriptor's flags as they were and nothing live; a
 * stream reads while its write waits for room, and the room finishes the
 * write without an empty read. Failures are injected through the stream fault seam
 * (backends/fault.h) with the errno each case needs.
 */
#include "net_paths_helpers.h"
#include "tested_backend.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>

static void pair(tern_loop *loop, tern_id *id, int *raw)
{
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    cr_assert_eq(tern_stream_open(loop, sv[0], id), 0);
    *raw = sv[1];
}

/* Write completions and reads, with in_call set around API calls that
 * must not run a callback. */
struct rec {
    atomic_uint done, reads, errors, drains, closed;
    int done_status[8];
    int read_status;
    char got[512];
    size_t got_len;
    bool in_call;
};

static void on_done(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id;
    struct rec *r = arg;
    cr_assert_not(r->in_call, "a write callback ran inside the API call that caused it");
    unsigned i = atomic_load(&r->done);
    cr_assert_lt(i, 8);
    r->done_status[i] = status;
    atomic_store(&r->done, i + 1);
}

static void on_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                    void *arg)
{
    (void)loop, (void)id;
    struct rec *r = arg;
    cr_assert_not(r->in_call, "a read callback ran inside an API call");
    if (status < 0) {
        r->read_status = status;
        atomic_fetch_add(&r->errors, 1);
        return;
    }
    cr_assert_leq(r->got_len + len, sizeof r->got);
    memcpy(r->got + r->got_len, data, len);
    r->got_len += len;
    atomic_fetch_add(&r->reads, 1);
}

static void on_drain(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id;
    atomic_fetch_add(&((struct rec *)arg)->drains, 1);
}

static void on_close(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id;
    atomic_fetch_add(&((struct rec *)arg)->closed, 1);
}

/*
 * The backend refuses to change the watcher: the stream's descriptor is
 * replaced under it (dup2), which drops epoll's registration, so the
 * EPOLL_CTL_MOD that adds TERN_WRITABLE for a write that met EAGAIN fails
 * with -ENOENT. A real cause of the same path is the kernel's ENOMEM.
 */
static void refused_watch(bool reading)
{
    tern_loop *loop = loop_new_epoll_or_skip();
    tern_id id;
    int raw;
    pair(loop, &id, &raw);
    static struct rec r;
    memset(&r, 0, sizeof r);
    cr_assert_eq(tern_stream_read_start(loop, id, on_read, &r), 0);
    if (!reading) /* the watcher stays, lazily, with TERN_READABLE */
        cr_assert_eq(tern_stream_read_stop(loop, id), 0);
    int fd = tern_stream_fd(loop, id);
    cr_assert_geq(fd, 0);
    int other[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, other), 0);
    cr_assert_eq(dup2(other[0], fd), fd);

    tern_buf buf = {"hello", 5};
    tern__fault_net_errno(-EAGAIN);
    tern__fault_arm(TERN__FAULT_STREAM, 1);
    r.in_call = true;
    cr_assert_eq(tern_stream_write(loop, id, &buf, 1, on_done, &r), 0);
    r.in_call = false;
    cr_assert(tern__fault_fired(), "the write was not refused: the test proves nothing");
    fault_off();
    size_t q = 1;
    cr_assert_eq(tern_stream_write_queue_size(loop, id, &q), 0);
    cr_assert_eq(q, 0, "a write that cannot wait for room stayed queued");
    cr_assert_eq(tern_stream_write(loop, id, &buf, 1, on_done, &r), -EPIPE,
                 "a write after the failure was taken");
    cr_assert_eq(tern_stream_try_write(loop, id, &buf, 1), -EPIPE,
                 "a try_write after the failure was tried");

    cr_assert(run_until_count(loop, &r.done, 1, 10 * (int64_t)MS, 500));
    cr_assert_eq(r.done_status[0], -ENOENT, "the write ended with %s",
                 tern_err_name(r.done_status[0]));
    if (reading) {
        cr_assert(run_until_count(loop, &r.errors, 1, 10 * (int64_t)MS, 500));
        cr_assert_eq(r.read_status, -ENOENT, "reading ended with %s",
                     tern_err_name(r.read_status));
    }
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&r.done), 1);
    cr_assert_eq(atomic_load(&r.errors), reading ? 1u : 0u, "reading was told %u errors",
                 atomic_load(&r.errors));
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(raw);
    close(other[0]);
    close(other[1]);
}

Test(stream_paths, a_refused_watcher_fails_the_write_and_ends_reading_in_step_2,
     .timeout = TEST_TIMEOUT)
{
    refused_watch(true);
}

Test(stream_paths, a_refused_watcher_fails_the_write_of_a_stream_not_reading,
     .timeout = TEST_TIMEOUT)
{
    refused_watch(false);
}

static size_t read_all(int fd, char *out, size_t want)
{
    size_t n = 0;
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (n < want && mono_ns() < end) {
        ssize_t r = recv(fd, out + n, want - n, MSG_DONTWAIT);
        if (r > 0)
            n += (size_t)r;
        else
            (void)fd_readable_now(fd, 10);
    }
    return n;
}

Test(stream_paths, an_interrupted_write_is_tried_again, .timeout = TEST_TIMEOUT)
{
    /* Readiness's own sendmsg: on epoll, whatever TERN_TEST_BACKEND says. */
    tern_loop *loop = loop_new_default();
    tern_id id;
    int raw;
    pair(loop, &id, &raw);
    static struct rec r;
    tern_buf buf = {"hello", 5};
    tern__fault_net_errno(-EINTR);
    tern__fault_arm(TERN__FAULT_STREAM, 1);
    cr_assert_eq(tern_stream_write(loop, id, &buf, 1, on_done, &r), 0);
    cr_assert(tern__fault_fired());
    fault_off();
    size_t q = 1;
    cr_assert_eq(tern_stream_write_queue_size(loop, id, &q), 0);
    cr_assert_eq(q, 0, "an interrupted write was not tried again at once");
    cr_assert(run_until_count(loop, &r.done, 1, 10 * (int64_t)MS, 500));
    cr_assert_eq(r.done_status[0], 0);
    char got[8];
    cr_assert_eq(read_all(raw, got, 5), 5);
    cr_assert(memcmp(got, "hello", 5) == 0);
    cr_assert_eq(recv(raw, got, sizeof got, MSG_DONTWAIT), -1, "more than was written arrived");
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(raw);
}

Test(stream_paths, an_interrupted_read_is_tried_again, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    tern_id id;
    int raw;
    pair(loop, &id, &raw);
    static struct rec r;
    cr_assert_eq(tern_stream_read_start(loop, id, on_read, &r), 0);
    cr_assert_eq(write(raw, "xyz", 3), 3);
    cr_assert(fd_readable_now(tern_stream_fd(loop, id), 1000));
    tern__fault_net_errno(-EINTR);
    tern__fault_arm(TERN__FAULT_STREAM, 1);
    cr_assert(run_until_count(loop, &r.reads, 1, 10 * (int64_t)MS, 500));
    cr_assert(tern__fault_fired(), "the read was not interrupted: the test proves nothing");
    fault_off();
    cr_assert_eq(atomic_load(&r.errors), 0, "an interrupted read was told: %s",
                 tern_err_name(r.read_status));
    cr_assert_eq(r.got_len, 3);
    cr_assert(memcmp(r.got, "xyz", 3) == 0);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(raw);
}

#define NBUFS 200 /* more than one sendmsg gathers (128) */

Test(stream_paths, a_write_of_more_buffers_than_one_call_gathers_arrives_in_order,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    tern_id id;
    int raw;
    pair(loop, &id, &raw);
    static struct rec r;
    static char bytes[NBUFS];
    static tern_buf bufs[NBUFS];
    for (unsigned i = 0; i < NBUFS; i++) {
        bytes[i] = (char)(' ' + i % 90);
        bufs[i] = (tern_buf){&bytes[i], 1};
    }
    cr_assert_eq(tern_stream_write(loop, id, bufs, NBUFS, on_done, &r), 0);
    /* Turned first: on io_uring the bytes leave with the next turn's enter. */
    cr_assert(run_until_count(loop, &r.done, 1, 10 * (int64_t)MS, 500));
    static char got[NBUFS + 1];
    cr_assert_eq(read_all(raw, got, NBUFS), NBUFS);
    cr_assert(memcmp(got, bytes, NBUFS) == 0, "the bytes arrived out of order");
    cr_assert_eq(r.done_status[0], 0);
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&r.done), 1);
    cr_assert_eq(recv(raw, got, sizeof got, MSG_DONTWAIT), -1, "more than was written arrived");
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(raw);
}

/* One byte read with recvmsg: the descriptors that came with it, if any. */
static int recv_one(int fd, char *c, int *passed)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * 4)];
        struct cmsghdr align;
    } cbuf;
    struct iovec iov = {.iov_base = c, .iov_len = 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf,
                         .msg_controllen = sizeof cbuf.buf};
    cr_assert(fd_readable_now(fd, 5000));
    ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    cr_assert_eq(n, 1);
    int k = 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm != NULL; cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t m = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < m; i++)
            memcpy(&passed[k++], CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
    }
    return k;
}

Test(stream_paths, descriptors_queued_behind_a_write_ride_with_their_own_first_byte,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    tern_id id;
    int raw;
    pair(loop, &id, &raw);
    static struct rec r;
    int p[2];
    cr_assert_eq(pipe(p), 0);
    tern_buf a = {"a", 1}, b = {"b", 1};
    /* "a" meets EAGAIN and waits for room; "b" and its descriptor queue behind. */
    tern__fault_net_errno(-EAGAIN);
    tern__fault_arm(TERN__FAULT_STREAM, 1);
    cr_assert_eq(tern_stream_write(loop, id, &a, 1, on_done, &r), 0);
    cr_assert(tern__fault_fired());
    fault_off();
    cr_assert_eq(tern_unix_write_fds(loop, id, &b, 1, &p[1], 1, on_done, &r), 0);
    size_t q = 0;
    cr_assert_eq(tern_stream_write_queue_size(loop, id, &q), 0);
    cr_assert_eq(q, 2, "the writes did not wait behind the refused one");
    cr_assert(run_until_count(loop, &r.done, 2, 10 * (int64_t)MS, 500));
    cr_assert_eq(r.done_status[0], 0);
    cr_assert_eq(r.done_status[1], 0);

    char c;
    int passed[4];
    cr_assert_eq(recv_one(raw, &c, passed), 0, "a descriptor came with the plain write's byte");
    cr_assert_eq(c, 'a');
    cr_assert_eq(recv_one(raw, &c, passed), 1, "the descriptor did not come with its byte");
    cr_assert_eq(c, 'b');
    /* It is the pipe's write end: what goes in comes out of p[0]. */
    cr_assert_eq(write(passed[0], "!", 1), 1);
    char got;
    cr_assert_eq(read(p[0], &got, 1), 1);
    cr_assert_eq(got, '!');
    close(passed[0]);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(raw);
    close(p[0]);
    close(p[1]);
}

static void on_shut(tern_loop *loop, tern_id id, int status, void *arg)
{
    on_done(loop, id, status, arg);
}

Test(stream_paths, try_write_retries_an_interrupted_call_and_refuses_a_shut_stream,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    tern_id id;
    int raw;
    pair(loop, &id, &raw);
    static struct rec r;
    tern_buf buf = {"abc", 3};
    tern__fault_net_errno(-EINTR);
    tern__fault_arm(TERN__FAULT_STREAM, 1);
    cr_assert_eq(tern_stream_try_write(loop, id, &buf, 1), 3);
    cr_assert(tern__fault_fired());
    fault_off();
    char got[8];
    cr_assert_eq(read_all(raw, got, 3), 3);
    cr_assert(memcmp(got, "abc", 3) == 0);

    cr_assert_eq(tern_stream_shutdown(loop, id, on_shut, &r), 0);
    cr_assert_eq(tern_stream_try_write(loop, id, &buf, 1), -EPIPE);
    cr_assert(run_until_count(loop, &r.done, 1, 10 * (int64_t)MS, 500));
    cr_assert_eq(r.done_status[0], 0);
    cr_assert_eq(recv(raw, got, sizeof got, 0), 0, "the peer did not see the end");
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(raw);
}

Test(stream_paths, a_buffer_too_large_to_count_is_refused, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    tern_id id;
    int raw;
    pair(loop, &id, &raw);
    static struct rec r;
    tern_buf bufs[2] = {{"a", 1}, {"b", SIZE_MAX / 2}};
    cr_assert_eq(tern_stream_write(loop, id, bufs, 2, on_done, &r), -EINVAL);
    size_t q = 1;
    cr_assert_eq(tern_stream_write_queue_size(loop, id, &q), 0);
    cr_assert_eq(q, 0);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(atomic_load(&r.done), 0, "a refused write was told");
    loop_free_clean(loop);
    close(raw);
}

/* The allocator goes back to tern's own buffer: its memory stays unused. */
static char caller_mem[64];

static void *switching_alloc(tern_loop *loop, tern_id id, size_t *len, void *arg)
{
    cr_assert_eq(tern_stream_read_start(loop, id, on_read, arg), 0);
    *len = sizeof caller_mem;
    return caller_mem;
}

Test(stream_paths, an_allocator_that_goes_back_to_terns_buffer_leaves_its_memory_unused,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    tern_id id;
    int raw;
    pair(loop, &id, &raw);
    static struct rec r;
    memset(caller_mem, '.', sizeof caller_mem);
    cr_assert_eq(tern_stream_read_start_alloc(loop, id, switching_alloc, on_read, &r), 0);
    cr_assert_eq(write(raw, "data", 4), 4);
    cr_assert(run_until_count(loop, &r.reads, 1, 10 * (int64_t)MS, 500));
    cr_assert_eq(r.got_len, 4);
    cr_assert(memcmp(r.got, "data", 4) == 0);
    for (size_t i = 0; i < sizeof caller_mem; i++)
        cr_assert_eq(caller_mem[i], '.', "the caller's memory was written at %zu", i);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(raw);
}

Test(stream_paths, a_stream_closed_while_a_drain_is_owed_never_hears_it,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    tern_id id;
    int raw;
    pair(loop, &id, &raw);
    static struct rec r;
    cr_assert_eq(tern_stream_set_high_water(loop, id, 2, on_drain, &r), 0);
    cr_assert_eq(tern_stream_on_close(loop, id, on_close, &r), 0);
    tern_buf buf = {"hello", 5};
    tern__fault_net_errno(-EAGAIN);
    tern__fault_arm(TERN__FAULT_STREAM, 1);
    cr_assert_eq(tern_stream_write(loop, id, &buf, 1, on_done, &r), 1,
                 "a write past the mark did not say back off");
    fault_off();
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(atomic_load(&r.done), 1);
    cr_assert_eq(r.done_status[0], -ECANCELED);
    cr_assert_eq(atomic_load(&r.closed), 1);
    cr_assert_eq(atomic_load(&r.drains), 0, "a closed stream heard its drain");
    loop_free_clean(loop);
    close(raw);
}

Test(stream_paths, open_refuses_a_closed_descriptor, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    int p[2];
    cr_assert_eq(pipe(p), 0);
    close(p[0]);
    close(p[1]);
    tern_id id = 0;
    cr_assert_eq(tern_stream_open(loop, p[0], &id), -EBADF);
    cr_assert_eq(id, 0);
    loop_free_clean(loop);
}

Test(stream_paths, open_out_of_memory_leaves_the_descriptor_as_it_was,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0); /* blocking, inherited */
    int fl = fcntl(sv[0], F_GETFL), fdfl = fcntl(sv[0], F_GETFD);
    tern_id id = 0;
    int rc = -1;
    for (uint64_t n = 1; n < 10; n++) {
        tern__fault_arm(TERN__FAULT_ALLOC, n);
        rc = tern_stream_open(loop, sv[0], &id);
        bool fired = tern__fault_fired();
        tern__fault_arm(0, 0);
        if (!fired)
            break;
        cr_assert_eq(rc, -ENOMEM, "allocation %llu failed: %s", (unsigned long long)n,
                     tern_err_name(rc));
        cr_assert_eq(fcntl(sv[0], F_GETFL), fl, "a refused open left the status flags changed");
        cr_assert_eq(fcntl(sv[0], F_GETFD), fdfl, "a refused open left close-on-exec changed");
        cr_assert_eq(loop_live(loop), 0);
    }
    cr_assert_eq(rc, 0, "the open never succeeded: %s", tern_err_name(rc));
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(sv[1]);
}

/* Enough streams that the loop's table of ids grows while adopting them. */
#define OPENS 200

Test(stream_paths, an_open_out_of_memory_at_any_step_leaves_nothing_live,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    static tern_id ids[OPENS];
    static int peers[OPENS];
    unsigned failed = 0;
    for (unsigned i = 0; i < OPENS; i++) {
        int sv[2];
        cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        peers[i] = sv[1];
        for (uint64_t n = 1;; n++) {
            tern__fault_arm(TERN__FAULT_ALLOC, n);
            int rc = tern_stream_open(loop, sv[0], &ids[i]);
            bool fired = tern__fault_fired();
            tern__fault_arm(0, 0);
            if (!fired) {
                cr_assert_eq(rc, 0, "open %u failed on its own: %s", i, tern_err_name(rc));
                break;
            }
            cr_assert_eq(rc, -ENOMEM, "open %u, allocation %llu: %s", i,
                         (unsigned long long)n, tern_err_name(rc));
            cr_assert_eq(loop_live(loop), i, "a refused open left an operation live");
            failed++;
        }
    }
    cr_assert_gt(failed, OPENS, "no open made more than one allocation: the table never grew");
    for (unsigned i = 0; i < OPENS; i++) {
        cr_assert_eq(tern_stream_close(loop, ids[i]), 0);
        close(peers[i]);
    }
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}

/* Each system call of an adoption fails once in turn: the descriptor's
 * flags stay as they were and nothing is left live. */
static void open_walk(int fd)
{
    tern_loop *loop = loop_new_tested();
    int fl = fcntl(fd, F_GETFL), fdfl = fcntl(fd, F_GETFD);
    tern_id id = 0;
    uint64_t n = 1;
    for (;; n++) {
        tern__fault_arm(TERN__FAULT_STREAM, n);
        int rc = tern_stream_open(loop, fd, &id);
        bool fired = tern__fault_fired();
        fault_off();
        if (!fired) {
            cr_assert_eq(rc, 0, "the open failed on its own: %s", tern_err_name(rc));
            break;
        }
        cr_assert_eq(rc, -ENOBUFS, "step %llu: %s", (unsigned long long)n, tern_err_name(rc));
        cr_assert_eq(fcntl(fd, F_GETFL), fl, "step %llu left the status flags changed",
                     (unsigned long long)n);
        cr_assert_eq(fcntl(fd, F_GETFD), fdfl, "step %llu left close-on-exec changed",
                     (unsigned long long)n);
        cr_assert_eq(loop_live(loop), 0);
    }
    cr_assert_gt(n, 3, "the open made only %llu stream calls", (unsigned long long)n - 1);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}

Test(stream_paths, an_adoption_failing_at_any_step_leaves_a_socket_as_it_was,
     .timeout = TEST_TIMEOUT)
{
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    open_walk(sv[0]);
    close(sv[1]);
}

Test(stream_paths, an_adoption_failing_at_any_step_leaves_a_pipe_as_it_was,
     .timeout = TEST_TIMEOUT)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    open_walk(p[0]);
    close(p[1]);
}

/*
 * Reading and writing at once, each readiness acting on its own half: a
 * stream with a write waiting for room reads what arrives (readable, not
 * writable), and the room that comes later finishes the write without a
 * read that finds nothing.
 */
#define BIG (4u << 20)

Test(stream_paths, a_stream_reads_while_its_write_waits_for_room, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    tern_id id;
    int raw;
    pair(loop, &id, &raw);
    static struct rec r;
    static char big[BIG];
    memset(big, 'w', sizeof big);
    cr_assert_eq(tern_stream_read_start(loop, id, on_read, &r), 0);
    tern_buf buf = {big, sizeof big};
    cr_assert_geq(tern_stream_write(loop, id, &buf, 1, on_done, &r), 0);
    size_t q = 0;
    cr_assert_eq(tern_stream_write_queue_size(loop, id, &q), 0);
    cr_assert_gt(q, 0, "the socket took 4 MB at once; the test proves nothing");

    cr_assert_eq(write(raw, "in", 2), 2);
    cr_assert(run_until_count(loop, &r.reads, 1, 10 * (int64_t)MS, 500));
    cr_assert_eq(r.got_len, 2);
    cr_assert(memcmp(r.got, "in", 2) == 0);
    cr_assert_eq(atomic_load(&r.done), 0, "the write completed with its bytes unread");

    static char sink[BIG];
    size_t n = 0;
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (n < BIG && mono_ns() < end) {
        ssize_t got = recv(raw, sink + n, BIG - n, MSG_DONTWAIT);
        if (got > 0)
            n += (size_t)got;
        else
            tern_loop_run_once(loop, 1 * (int64_t)MS);
    }
    cr_assert_eq(n, (size_t)BIG, "%zu of %u bytes arrived", n, BIG);
    cr_assert(run_until_count(loop, &r.done, 1, 10 * (int64_t)MS, 500));
    cr_assert_eq(r.done_status[0], 0);
    cr_assert_eq(atomic_load(&r.reads), 1, "a read came without bytes");
    cr_assert_eq(atomic_load(&r.errors), 0);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(raw);
}
