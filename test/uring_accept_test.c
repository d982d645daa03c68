/*
 * The io_uring backend's accept (TERN__DO_ACCEPT): a TCP or Unix-domain
 * listener takes its connections with one multishot accept, with no
 * accept system call of tern's (proved under a seccomp filter that denies
 * accept and accept4); many connections come in one wait and are handed
 * out a batch per turn, in order; a descriptor table that is full backs
 * the listener off as accept4's EMFILE does; a listener closed (or a loop
 * freed) with connections the kernel accepted for it leaks none of them;
 * a submission the queue refuses leaves the listener on readiness and a
 * cancel the queue refuses still goes; a kernel that refuses multishot
 * accept leaves every listener on readiness; the fault seam's sites are
 * walked on the way.
 */
#include "uring_helpers.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/un.h>

#include "backend.h"
#include "fault.h"

#ifdef TERN_HAVE_IO_URING

static void deny_accept(unsigned err)
{
#ifdef __NR_accept
    static const long nrs[] = {__NR_accept, __NR_accept4};
#else
    static const long nrs[] = {__NR_accept4};
#endif
    deny_syscalls(nrs, sizeof nrs / sizeof nrs[0], -1, err);
}

/* A listener that keeps what it accepted, in order, and its notices. */
#define MAXC 64

struct server {
    tern_id listener;
    unsigned port;
    atomic_uint accepted;
    tern_id conns[MAXC];
    atomic_uint backoffs;
    int backoff_status;
    atomic_uint closed;
};

static void on_accept(tern_loop *loop, tern_id id, int status, tern_id conn, void *arg)
{
    (void)loop;
    (void)id;
    struct server *s = arg;
    if (status < 0) {
        s->backoff_status = status;
        atomic_fetch_add(&s->backoffs, 1);
        return;
    }
    unsigned n = atomic_load(&s->accepted);
    cr_assert_lt(n, MAXC);
    s->conns[n] = conn;
    atomic_fetch_add(&s->accepted, 1);
}

static void on_close(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    atomic_fetch_add(&((struct server *)arg)->closed, 1);
}

static void listen_tcp(tern_loop *loop, struct server *s)
{
    memset(s, 0, sizeof *s);
    int rc = tern_tcp_listen(loop, "127.0.0.1", 0, TERN_TCP_BACKLOG_DEFAULT, 0, on_accept, s,
                             &s->listener);
    cr_assert_eq(rc, 0, "listen: %s", tern_strerror(rc));
    cr_assert_eq(tern_tcp_port(loop, s->listener, &s->port), 0);
    cr_assert_eq(tern_stream_on_close(loop, s->listener, on_close, s), 0);
}

/* A client socket connected to the listener (the kernel completes the
 * handshake; whether tern accepted it is the test's question). */
static int dial(const struct server *s)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                            .sin_port = htons((uint16_t)s->port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0, "connect: %s", strerror(errno));
    return fd;
}

static void close_all(tern_loop *loop, struct server *s, int *clients, unsigned n)
{
    for (unsigned i = 0; i < atomic_load(&s->accepted); i++)
        cr_assert_eq(tern_stream_close(loop, s->conns[i]), 0);
    cr_assert_eq(tern_stream_close(loop, s->listener), 0);
    for (unsigned i = 0; i < n; i++)
        close(clients[i]);
    cr_assert(run_until_nothing_live(loop));
}

/* The bytes an accepted stream reads come back to the test through this. */
struct echo {
    atomic_uint got;
};

static void echo_cb(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                    void *arg)
{
    struct echo *e = arg;
    if (status < 0 || len == 0)
        return;
    tern_buf b = {.base = data, .len = len};
    cr_assert_eq(tern_stream_try_write(loop, id, &b, 1), (int)len);
    atomic_fetch_add(&e->got, (unsigned)len);
}

/*
 * With accept and accept4 denied, a TCP listener still takes every
 * connection (the ring accepts them), in the order they came, and what it
 * accepted works as a stream.
 */
Test(uring_accept, a_listener_accepts_with_no_accept_call_of_its_own)
{
    tern_loop *loop = uring_loop();
    static struct server s;
    listen_tcp(loop, &s);
    deny_accept(ENOSYS);
    int c[3];
    for (int i = 0; i < 3; i++) {
        c[i] = dial(&s);
        cr_assert(run_until_count(loop, &s.accepted, (unsigned)i + 1, 10 * MS, 500),
                  "connection %d not accepted", i);
        cr_assert_eq(atomic_load(&s.backoffs), 0);
    }
    /* In order: the first stream accepted is the first client's. */
    static struct echo e;
    cr_assert_eq(tern_stream_read_start(loop, s.conns[0], echo_cb, &e), 0);
    cr_assert_eq(write(c[0], "ping", 4), 4);
    cr_assert(run_until_count(loop, &e.got, 4, 10 * MS, 500));
    char buf[4];
    cr_assert(fd_readable_now(c[0], 1000));
    cr_assert_eq(read(c[0], buf, 4), 4);
    cr_assert(memcmp(buf, "ping", 4) == 0);
    close_all(loop, &s, c, 3);
    loop_free_clean(loop);
}

/* The same for a Unix-domain listener: its connections read as Unix
 * streams (tern_unix_take_fd asks a listener for nothing). */
Test(uring_accept, a_unix_listener_accepts_with_no_accept_call_of_its_own)
{
    tern_loop *loop = uring_loop();
    char path[64];
    snprintf(path, sizeof path, "/tmp/tern-uring-accept-%d", (int)getpid());
    (void)unlink(path);
    static struct server s;
    memset(&s, 0, sizeof s);
    cr_assert_eq(tern_unix_listen(loop, path, TERN_TCP_BACKLOG_DEFAULT, on_accept, &s, &s.listener),
                 0);
    deny_accept(ENOSYS);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, path, strlen(path) + 1);
    int c[2];
    for (int i = 0; i < 2; i++) {
        c[i] = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        cr_assert_eq(connect(c[i], (struct sockaddr *)&a, sizeof a), 0);
    }
    cr_assert(run_until_count(loop, &s.accepted, 2, 10 * MS, 500));
    cr_assert_eq(tern_unix_take_fd(loop, s.listener), -EAGAIN);
    static struct echo e;
    cr_assert_eq(tern_stream_read_start(loop, s.conns[1], echo_cb, &e), 0);
    cr_assert_eq(write(c[1], "pong", 4), 4);
    cr_assert(run_until_count(loop, &e.got, 4, 10 * MS, 500));
    close_all(loop, &s, c, 2);
    (void)unlink(path);
    loop_free_clean(loop);
}

/*
 * Many connections made while the loop is not running: one wait reaps
 * them all, the next turns hand them out a batch (32) at a time, in
 * order, and no accept call is made for any.
 */
#define MANY 50

Test(uring_accept, many_connections_come_in_one_wait_and_go_out_a_batch_a_turn)
{
    tern_loop *loop = uring_loop();
    static struct server s;
    listen_tcp(loop, &s);
    tern_loop_run_once(loop, 0); /* the accept is in the kernel */
    deny_accept(ENOSYS);
    int c[MANY];
    for (int i = 0; i < MANY; i++)
        c[i] = dial(&s);
    tern_loop_run_once(loop, 100 * (int64_t)MS); /* step 4 reaps them, nothing handed out yet */
    tern_loop_run_once(loop, 0);
    unsigned first = atomic_load(&s.accepted);
    cr_assert_eq(first, 32, "a turn handed out %u", first);
    tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&s.accepted), MANY);
    /* In order: each accepted stream's peer is the client dialled then. */
    for (int i = 0; i < MANY; i++) {
        struct sockaddr_in mine, peer;
        socklen_t l1 = sizeof mine, l2 = sizeof peer;
        cr_assert_eq(getsockname(c[i], (struct sockaddr *)&mine, &l1), 0);
        int fd = tern_stream_fd(loop, s.conns[i]);
        cr_assert_geq(fd, 0);
        cr_assert_eq(getpeername(fd, (struct sockaddr *)&peer, &l2), 0);
        cr_assert_eq(mine.sin_port, peer.sin_port, "connection %d out of order", i);
    }
    close_all(loop, &s, c, MANY);
    loop_free_clean(loop);
}

static void *turn_once(void *arg)
{
    tern_loop_run_once(arg, 0);
    return NULL;
}

/*
 * The accept was submitted by a thread that has exited since (a loop may
 * be run by one thread after another), which ends it with -ECANCELED that
 * no one asked for: the backend submits it again, and the listener goes
 * on accepting with no notice.
 */
Test(uring_accept, an_accept_submitted_by_a_thread_that_exited_goes_on)
{
    tern_loop *loop = uring_loop();
    int before = count_open_fds();
    static struct server s, u;
    listen_tcp(loop, &s);
    listen_tcp(loop, &u);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, turn_once, loop), 0);
    cr_assert_eq(pthread_join(t, NULL), 0);
    /* Both ends are reaped here; one listener closes before its accept
     * is submitted again, and is never submitted. */
    tern_loop_run_once(loop, 0);
    cr_assert_eq(tern_stream_close(loop, u.listener), 0);
    int c[2];
    for (int i = 0; i < 2; i++) {
        c[i] = dial(&s);
        cr_assert(run_until_count(loop, &s.accepted, (unsigned)i + 1, 10 * MS, 500));
    }
    cr_assert_eq(atomic_load(&s.backoffs), 0);
    cr_assert_eq(atomic_load(&u.closed), 1);
    close_all(loop, &s, c, 2);
    cr_assert_eq(count_open_fds_settled(), before, "a descriptor was left open");
    loop_free_clean(loop);
}

/*
 * A full descriptor table: the kernel's accept fails with EMFILE and the
 * listener backs off as it does on accept4's (one notice, the pause),
 * and the connections the kernel had accepted before the failure wait out
 * the pause and then come first, in order; the one left in the kernel's
 * queue comes after, once descriptors are free again.
 */
Test(uring_accept, a_full_descriptor_table_backs_the_listener_off)
{
    struct rlimit old, r;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
    int lowest = dup(0);
    cr_assert_geq(lowest, 0);
    close(lowest);
    r = old;
    r.rlim_cur = (rlim_t)lowest + 64; /* before the accept: io_uring applies it at submission */
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &r), 0);
    tern_loop *loop = uring_loop();
    static struct server s;
    listen_tcp(loop, &s);
    tern_loop_run_once(loop, 0);
    int c[3];
    for (int i = 0; i < 3; i++)
        c[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int fill[128], nfill = 0, f;
    while (nfill < 128 && (f = dup(0)) >= 0)
        fill[nfill++] = f;
    cr_assert_lt(nfill, 128);
    close(fill[--nfill]); /* room for two connections */
    close(fill[--nfill]);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                            .sin_port = htons((uint16_t)s.port)};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(connect(c[i], (struct sockaddr *)&a, sizeof a), 0);
    /* The kernel takes two, and the third finds the table full. */
    cr_assert(run_until_count(loop, &s.backoffs, 1, 10 * MS, 500));
    cr_assert_eq(s.backoff_status, -EMFILE);
    cr_assert_eq(atomic_load(&s.accepted), 0, "handed out during the pause");
    while (nfill > 0)
        close(fill[--nfill]);
    cr_assert(run_until_count(loop, &s.accepted, 3, 10 * MS, 1000));
    cr_assert_eq(atomic_load(&s.backoffs), 1, "one notice per pause");
    for (int i = 0; i < 3; i++) {
        struct sockaddr_in mine, peer;
        socklen_t l1 = sizeof mine, l2 = sizeof peer;
        cr_assert_eq(getsockname(c[i], (struct sockaddr *)&mine, &l1), 0);
        cr_assert_eq(getpeername(tern_stream_fd(loop, s.conns[i]), (struct sockaddr *)&peer, &l2),
                     0);
        cr_assert_eq(mine.sin_port, peer.sin_port, "connection %d out of order", i);
    }
    close_all(loop, &s, c, 3);
    loop_free_clean(loop);
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
}

/*
 * A listener closed with connections the kernel accepted for it: some
 * reaped and not yet handed out, some still in the completion queue, some
 * accepted after the close by the accept until its cancel lands. None is
 * handed out, none stays open.
 */
Test(uring_accept, a_listener_closed_with_accepted_connections_leaks_none)
{
    tern_loop *loop = uring_loop();
    int before = count_open_fds();
    static struct server s;
    listen_tcp(loop, &s);
    tern_loop_run_once(loop, 0);
    int c[8];
    for (int i = 0; i < 4; i++)
        c[i] = dial(&s);
    tern_loop_run_once(loop, 100 * (int64_t)MS); /* reaped: waiting to be handed out */
    for (int i = 4; i < 8; i++)
        c[i] = dial(&s); /* accepted by the kernel, in the completion queue */
    cr_assert_eq(tern_stream_close(loop, s.listener), 0);
    cr_assert(run_until_count(loop, &s.closed, 1, 10 * MS, 500));
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(atomic_load(&s.accepted), 0);
    for (int i = 0; i < 8; i++)
        close(c[i]);
    cr_assert_eq(count_open_fds_settled(), before, "an accepted descriptor was left open");
    loop_free_clean(loop);
}

/* A loop freed with the accept in the kernel and its completions not yet
 * reaped: the connections are closed with it. */
Test(uring_accept, a_loop_freed_with_an_accept_in_the_kernel_leaks_nothing)
{
    int before = count_open_fds();
    tern_loop *loop = uring_loop();
    static struct server s;
    listen_tcp(loop, &s);
    tern_loop_run_once(loop, 0);
    int c[4];
    for (int i = 0; i < 4; i++)
        c[i] = dial(&s);
    tern_loop_free(loop); /* the listener goes with it, its accept cancelled and drained */
    for (int i = 0; i < 4; i++)
        close(c[i]);
    cr_assert_eq(count_open_fds_settled(), before, "an accepted descriptor was left open");
}

/*
 * The queue refuses the accept's entry at listen: the listen is refused
 * (-EBUSY) and leaves nothing open; the next one works. It refuses the
 * cancel at close: the cancel goes with the next wait, and the socket is
 * closed then (nothing accepted for it meanwhile stays open).
 */
Test(uring_accept, refused_entries_fall_back_and_a_refused_cancel_still_goes)
{
    tern_loop *loop = uring_loop();
    int before = count_open_fds();
    static struct server s;
    tern__uring_refuse_entries(1);
    cr_assert_eq(tern_tcp_listen(loop, "127.0.0.1", 0, TERN_TCP_BACKLOG_DEFAULT, 0, on_accept, &s,
                                 &s.listener),
                 -EBUSY);
    cr_assert_eq(count_open_fds(), before, "a refused listen left its socket open");
    listen_tcp(loop, &s);
    int c[2];
    c[0] = dial(&s);
    cr_assert(run_until_count(loop, &s.accepted, 1, 10 * MS, 500));
    cr_assert_eq(tern_stream_close(loop, s.conns[0]), 0);
    cr_assert_eq(tern_stream_close(loop, s.listener), 0);
    cr_assert(run_until_nothing_live(loop));

    /* Now one whose cancel is refused. */
    listen_tcp(loop, &s);
    tern_loop_run_once(loop, 0);
    tern__uring_refuse_entries(1);
    cr_assert_eq(tern_stream_close(loop, s.listener), 0);
    c[1] = dial(&s); /* the accept still holds the socket until its cancel goes */
    cr_assert(run_until_count(loop, &s.closed, 1, 10 * MS, 500));
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(atomic_load(&s.accepted), 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                            .sin_port = htons((uint16_t)s.port)};
    int late = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_neq(connect(late, (struct sockaddr *)&a, sizeof a), 0, "the listener is still open");
    cr_assert_eq(errno, ECONNREFUSED);
    close(late);
    close(c[0]);
    close(c[1]);
    cr_assert_eq(count_open_fds_settled(), before, "an accepted descriptor was left open");
    loop_free_clean(loop);
}

/*
 * A kernel that refuses multishot accept: the listener takes the
 * connection by readiness instead, and so does every later one — shown by
 * accept4 being called (denied, it makes the listener back off).
 */
Test(uring_accept, a_kernel_without_multishot_accept_leaves_listeners_on_readiness)
{
    tern_loop *loop = uring_loop();
    static struct server s;
    tern__uring_refuse_accepts(1);
    listen_tcp(loop, &s);
    int c[2];
    c[0] = dial(&s);
    cr_assert(run_until_count(loop, &s.accepted, 1, 10 * MS, 500));
    cr_assert_eq(atomic_load(&s.backoffs), 0);
    static struct server t;
    listen_tcp(loop, &t);
    deny_accept(ENOSYS);
    c[1] = dial(&t);
    cr_assert(run_until_count(loop, &t.backoffs, 1, 10 * MS, 500));
    cr_assert_eq(t.backoff_status, -ENOSYS, "the second listener did not call accept4");
    cr_assert_str_eq(tern_loop_backend_name(loop), "io_uring");
    cr_assert_eq(tern_stream_close(loop, t.listener), 0);
    close(c[1]);
    close_all(loop, &s, c, 1);
    loop_free_clean(loop);
}

/*
 * The fault seam walks the hand-out as it walks accept4, a failure there
 * being one before the call, which leaves the connection queued: a
 * descriptor fault is the table full (a back-off; both connections wait
 * out the pause and then come with nothing else to wake the listener), a
 * stream fault that says EAGAIN leaves both for the next turn, one that
 * says the connection died tries again at once; an allocation fault is
 * the stream's record, which closes the connection and backs off.
 */
struct fault_case {
    unsigned mask;
    int err;    /* the stream seam's error, when mask is TERN__FAULT_STREAM */
    int notice; /* the back-off notice's status, 0 for none */
    unsigned accepted;
};

static const struct fault_case fault_cases[] = {
    {TERN__FAULT_FD, 0, -EMFILE, 2},
    {TERN__FAULT_ALLOC, 0, -ENOMEM, 1},
    {TERN__FAULT_STREAM, EAGAIN, 0, 2},
    {TERN__FAULT_STREAM, ECONNABORTED, 0, 2},
};

ParameterizedTestParameters(uring_accept, the_fault_seam_walks_the_hand_out)
{
    return cr_make_param_array(struct fault_case, fault_cases,
                               sizeof fault_cases / sizeof fault_cases[0]);
}

ParameterizedTest(const struct fault_case *fc, uring_accept, the_fault_seam_walks_the_hand_out)
{
    tern_loop *loop = uring_loop();
    int before = count_open_fds();
    static struct server s;
    listen_tcp(loop, &s);
    tern_loop_run_once(loop, 0);
    int c[2];
    c[0] = dial(&s);
    c[1] = dial(&s);
    tern_loop_run_once(loop, 100 * (int64_t)MS); /* both reaped, to be handed out next turn */
    cr_assert_eq(atomic_load(&s.accepted), 0);
    if (fc->mask == TERN__FAULT_STREAM)
        tern__fault_net_errno(-fc->err);
    tern__fault_arm(fc->mask, 1);
    tern_loop_run_once(loop, 0);
    cr_assert(tern__fault_fired());
    tern__fault_arm(0, 0);
    cr_assert(run_until_count(loop, &s.accepted, fc->accepted, 10 * MS, 500));
    if (fc->notice != 0) {
        cr_assert(run_until_count(loop, &s.backoffs, 1, 10 * MS, 500));
        cr_assert_eq(s.backoff_status, fc->notice);
    }
    cr_assert_eq(atomic_load(&s.backoffs), fc->notice != 0);
    for (int t = 0; t < 20; t++)
        tern_loop_run_once(loop, 10 * (int64_t)MS);
    cr_assert_eq(atomic_load(&s.accepted), fc->accepted);
    close_all(loop, &s, c, 2);
    cr_assert_eq(count_open_fds_settled(), before, "a descriptor was left open");
    loop_free_clean(loop);
}

#else

Test(uring_accept, skipped_without_io_uring)
{
    cr_skip_test("built without io_uring");
}

#endif
