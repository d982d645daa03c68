/*
 * Teardown (SPEC §1 "Teardown"): tern_loop_free with live timers,
 * watchers, deferred callbacks and unrun posts leaves nothing behind
 * (ASan and valgrind check the memory, this file checks descriptors and
 * callbacks): pending posts run during teardown, timers and watchers are
 * never called, new work is refused with -ESHUTDOWN, and afterwards no
 * callback of the loop ever runs. Pipe streams closed or freed with writes
 * queued and a read pending complete each write once (-ECANCELED) before
 * their one close callback, and close the pipe ends they own (UDP's and
 * Unix sockets' own cases are in udp_test.c and unix_test.c; UDP sends
 * waiting for room, which only the fault seam can hold back on loopback,
 * are here).
 */
#include "loop_helpers.h"

struct tally {
    atomic_uint timer_calls, io_calls, post_calls, defer_calls;
    atomic_uint shutdown_timer, shutdown_defer, shutdown_io;
    int fd;
};

static void tally_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    atomic_fetch_add(&((struct tally *)arg)->timer_calls, 1);
}

static void tally_io(tern_loop *loop, tern_id id, int fd, unsigned ev, void *arg)
{
    (void)loop;
    (void)id;
    (void)fd;
    (void)ev;
    atomic_fetch_add(&((struct tally *)arg)->io_calls, 1);
}

static void tally_defer(tern_loop *loop, void *arg)
{
    (void)loop;
    atomic_fetch_add(&((struct tally *)arg)->defer_calls, 1);
}

/* A post that runs during teardown tries to start new work: every
 * loop-only start is refused with -ESHUTDOWN and nothing is created. */
static void tally_post(tern_loop *loop, void *arg)
{
    struct tally *t = arg;
    atomic_fetch_add(&t->post_calls, 1);
    if (tern_timer_start(loop, 0, 0, tally_timer, t, NULL) == -ESHUTDOWN)
        atomic_fetch_add(&t->shutdown_timer, 1);
    if (tern_defer(loop, tally_defer, t) == -ESHUTDOWN)
        atomic_fetch_add(&t->shutdown_defer, 1);
    if (t->fd >= 0 && tern_io_start(loop, t->fd, TERN_READABLE, tally_io, t, NULL) == -ESHUTDOWN)
        atomic_fetch_add(&t->shutdown_io, 1);
}

struct foreign_posts {
    tern_loop *loop;
    struct tally *t;
    unsigned n;
};

static void *post_many(void *arg)
{
    struct foreign_posts *f = arg;
    for (unsigned i = 0; i < f->n; i++)
        cr_assert_eq(tern_post(f->loop, tally_post, f->t), 0);
    return NULL;
}

BACKEND_TEST(teardown, live_timers_watchers_and_unrun_posts)
{
    enum { NPOSTS = 100, NTIMERS = 50, NPIPES = 10 };
    backend_warm_up(backend);
    int fds_before = count_open_fds_settled();
    tern_loop *loop = loop_new_backend(backend);
    static struct tally t;
    memset(&t, 0, sizeof t);
    int spare[2];
    make_pipe(spare);
    t.fd = spare[0];

    /* Timers, some already expired and waiting in the ready queue. */
    for (unsigned i = 0; i < NTIMERS; i++)
        cr_assert_eq(tern_timer_start(loop, i % 2 ? HOUR : 0, i % 3 ? 0 : MS, tally_timer, &t,
                                      NULL), 0);
    cr_assert_eq(tern_loop_run_once(loop, 0), 1); /* expire the zero-delay ones */

    /* Watchers, some with readiness already queued. */
    int p[NPIPES][2];
    for (unsigned i = 0; i < NPIPES; i++) {
        make_pipe(p[i]);
        cr_assert_eq(tern_io_start(loop, p[i][0], TERN_READABLE, tally_io, &t, NULL), 0);
        if (i % 2)
            write_byte(p[i][1]);
    }
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, tally_timer, &t, NULL), 0);
    tern_loop_run_once(loop, 0); /* step 4 records the readiness */
    unsigned timer_calls = atomic_load(&t.timer_calls);
    unsigned io_calls = atomic_load(&t.io_calls);
    cr_assert_eq(io_calls, 0);

    /* Posts from another thread while nobody runs the loop. */
    struct foreign_posts f = { loop, &t, NPOSTS };
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, post_many, &f), 0);
    pthread_join(th, NULL);
    /* And a deferred callback nobody has run. */
    cr_assert_eq(tern_defer(loop, tally_defer, &t), 0);
    cr_assert_gt(loop_live(loop), NPOSTS);

    tern_loop_free(loop);

    cr_assert_eq(atomic_load(&t.post_calls), NPOSTS, "pending posts must run during teardown");
    cr_assert_eq(atomic_load(&t.timer_calls), timer_calls, "tern_loop_free called a timer");
    cr_assert_eq(atomic_load(&t.io_calls), io_calls, "tern_loop_free called a watcher");
    cr_assert_leq(atomic_load(&t.defer_calls), 1, "a deferred callback ran twice");
    cr_assert_eq(atomic_load(&t.shutdown_timer), NPOSTS, "timer_start during teardown");
    cr_assert_eq(atomic_load(&t.shutdown_defer), NPOSTS, "defer during teardown");
    cr_assert_eq(atomic_load(&t.shutdown_io), NPOSTS, "io_start during teardown");

    for (unsigned i = 0; i < NPIPES; i++) {
        close(p[i][0]);
        close(p[i][1]);
    }
    close(spare[0]);
    close(spare[1]);
    cr_assert_eq(count_open_fds_settled(), fds_before, "the loop left descriptors open");
}

/* The descriptors a loop opens are closed by tern_loop_free, however
 * the loop was used. */
BACKEND_TEST(teardown, no_descriptor_leaks_over_many_loops)
{
    backend_warm_up(backend);
    int before = count_open_fds_settled();
    for (int i = 0; i < 200; i++) {
        tern_loop *loop = loop_new_backend(backend);
        if (i % 2) {
            struct tally t = { .fd = -1 };
            cr_assert_eq(tern_timer_start(loop, 0, 0, tally_timer, &t, NULL), 0);
            cr_assert_eq(tern_loop_run(loop), 0);
        }
        loop_free_clean(loop);
    }
    cr_assert_eq(count_open_fds_settled(), before);
}

/* Freeing a loop releases its fds for other loops (G4 bookkeeping) and
 * leaves the fds themselves open (they are the caller's). */
BACKEND_TEST(teardown, free_releases_watched_fds_but_does_not_close_them)
{
    tern_loop *a = loop_new_backend(backend);
    int p[2];
    make_pipe(p);
    struct tally t = { .fd = -1 };
    cr_assert_eq(tern_io_start(a, p[0], TERN_READABLE, tally_io, &t, NULL), 0);
    tern_loop_free(a);
    cr_assert_neq(fcntl(p[0], F_GETFD), -1, "tern_loop_free closed a watched fd");
    tern_loop *b = loop_new_backend(backend);
    tern_id id = 0;
    cr_assert_eq(tern_io_start(b, p[0], TERN_READABLE, tally_io, &t, &id), 0);
    write_byte(p[1]);
    cr_assert(run_until_count(b, &t.io_calls, 1, 0, 20));
    cr_assert_eq(tern_io_stop(b, id), 0);
    close(p[0]);
    close(p[1]);
    loop_free_clean(b);
}

/* Posts made by other threads right up to the free are all run exactly
 * once: the producer is joined first (a post after free begins is a
 * contract violation), then the loop is freed without running it. */
BACKEND_TEST(teardown, posts_never_run_are_run_once_by_free)
{
    static struct tally t;
    memset(&t, 0, sizeof t);
    t.fd = -1;
    for (int round = 0; round < 20; round++) {
        tern_loop *loop = loop_new_backend(backend);
        struct foreign_posts f = { loop, &t, 50 };
        pthread_t th[2];
        for (int k = 0; k < 2; k++)
            cr_assert_eq(pthread_create(&th[k], NULL, post_many, &f), 0);
        for (int k = 0; k < 2; k++)
            pthread_join(th[k], NULL);
        tern_loop_free(loop);
    }
    cr_assert_eq(atomic_load(&t.post_calls), 20 * 2 * 50);
}

/* After free, a timer that was armed never fires: checked by freeing
 * the loop and waiting past the deadline with another loop running. */
static void mark(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

Test(teardown, no_callback_after_free, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    atomic_uint dead = 0, alive = 0;
    cr_assert_eq(tern_timer_start(loop, MS, 0, mark, &dead, NULL), 0);
    tern_loop_free(loop);
    tern_loop *other = loop_new_default();
    cr_assert_eq(tern_timer_start(other, 5 * MS, 0, mark, &alive, NULL), 0);
    cr_assert_eq(tern_loop_run(other), 0);
    cr_assert_eq(atomic_load(&alive), 1);
    cr_assert_eq(atomic_load(&dead), 0);
    loop_free_clean(other);
}

/* A loop that was stopped with work live can be freed from the thread
 * that ran it. */
static void stop_cb(tern_loop *loop, tern_id id, void *arg)
{
    (void)id;
    (void)arg;
    tern_loop_stop(loop);
}

Test(teardown, free_after_stop_with_work_live, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    atomic_uint n = 0;
    cr_assert_eq(tern_timer_start(loop, 0, MS, stop_cb, NULL, NULL), 0);
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, mark, &n, NULL), 0);
    cr_assert_eq(tern_loop_run(loop), 1);
    cr_assert_eq(loop_live(loop), 2);
    tern_loop_free(loop);
    cr_assert_eq(atomic_load(&n), 0);
}

/* A loop may be freed on a thread other than the one that ran it, once
 * the run has returned. */
static void *run_it(void *arg)
{
    tern_loop *loop = arg;
    cr_assert_eq(tern_loop_run(loop), 0);
    return NULL;
}

Test(teardown, free_on_another_thread_after_run, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    atomic_uint n = 0;
    cr_assert_eq(tern_timer_start(loop, MS, 0, mark, &n, NULL), 0);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, run_it, loop), 0);
    pthread_join(t, NULL);
    cr_assert_eq(atomic_load(&n), 1);
    loop_free_clean(loop);
}

/* ------------------------------------------------------------------ */
/* Pipes: closing and freeing with writes queued and a read pending    */
/* ------------------------------------------------------------------ */

#define PIPE_WRITES 8

struct pipe_log {
    atomic_uint done, closed, reads;
    unsigned pending_at_close; /* writes not yet completed when a close callback ran */
    int status[PIPE_WRITES];
};

static unsigned pipe_pending(const struct pipe_log *l)
{
    unsigned n = 0;
    for (unsigned i = 0; i < PIPE_WRITES; i++)
        n += l->status[i] == 1;
    return n;
}

static void pipe_written(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id;
    int *slot = arg;
    cr_assert_eq(*slot, 1, "a write completed twice");
    *slot = status;
}

static void pipe_closed(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id;
    struct pipe_log *l = arg;
    l->pending_at_close += pipe_pending(l);
    atomic_fetch_add(&l->closed, 1);
}

static void pipe_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                      void *arg)
{
    (void)loop, (void)id, (void)status, (void)data, (void)len;
    atomic_fetch_add(&((struct pipe_log *)arg)->reads, 1);
}

/* Fill a pipe's writer until writes queue: nobody reads the other end. */
static void queue_pipe_writes(tern_loop *loop, tern_id wr, struct pipe_log *l)
{
    static char data[256 * 1024];
    tern_buf b = {data, sizeof data};
    for (unsigned i = 0; i < PIPE_WRITES; i++) {
        l->status[i] = 1; /* pending */
        cr_assert_geq(tern_stream_write(loop, wr, &b, 1, pipe_written, &l->status[i]), 0);
    }
    size_t q = 0;
    cr_assert_eq(tern_stream_write_queue_size(loop, wr, &q), 0);
    cr_assert_gt(q, 0, "the pipe took every write: nothing is queued");
}

BACKEND_TEST(teardown, pipe_close_with_writes_queued_cancels_each_once)
{
    tern_loop *loop = loop_new_backend(backend);
    int p[2];
    make_pipe(p);
    tern_id wr;
    cr_assert_eq(tern_stream_open(loop, p[1], &wr), 0);
    struct pipe_log l = {0};
    cr_assert_eq(tern_stream_on_close(loop, wr, pipe_closed, &l), 0);
    queue_pipe_writes(loop, wr, &l);
    tern_loop_run_once(loop, 0);
    cr_assert_gt(pipe_pending(&l), 0);
    cr_assert_eq(tern_stream_close(loop, wr), 0);
    cr_assert(run_until_count(loop, &l.closed, 1, 10 * (int64_t)MS, 1000));
    cr_assert_eq(pipe_pending(&l), 0, "a queued write never completed");
    for (unsigned i = 0; i < PIPE_WRITES; i++)
        cr_assert(l.status[i] == 0 || l.status[i] == -ECANCELED, "write %u: %s", i,
                  tern_err_name(l.status[i]));
    cr_assert_eq(l.status[PIPE_WRITES - 1], -ECANCELED, "the last write went out unread");
    for (int t = 0; t < 3; t++)
        tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&l.closed), 1);
    cr_assert_eq(l.pending_at_close, 0, "the close callback came before the cancelled writes");
    close(p[0]);
    loop_free_clean(loop);
}

BACKEND_TEST(teardown, free_with_pipe_writes_queued_and_a_read_pending)
{
    backend_warm_up(backend);
    int fds = count_open_fds_settled();
    tern_loop *loop = loop_new_backend(backend);
    int w[2], r[2];
    make_pipe(w);
    make_pipe(r);
    tern_id wr, rd;
    cr_assert_eq(tern_stream_open(loop, w[1], &wr), 0);
    cr_assert_eq(tern_stream_open(loop, r[0], &rd), 0);
    struct pipe_log l = {0}, lr = {0};
    cr_assert_eq(tern_stream_on_close(loop, wr, pipe_closed, &l), 0);
    cr_assert_eq(tern_stream_on_close(loop, rd, pipe_closed, &lr), 0);
    cr_assert_eq(tern_stream_read_start(loop, rd, pipe_read, &lr), 0);
    queue_pipe_writes(loop, wr, &l);
    tern_loop_run_once(loop, 0);
    tern_loop_free(loop);
    cr_assert_eq(pipe_pending(&l), 0, "a queued write was not completed by the free");
    cr_assert_eq(l.status[PIPE_WRITES - 1], -ECANCELED);
    cr_assert_eq(atomic_load(&l.closed), 1, "the writer's close callback, once");
    cr_assert_eq(atomic_load(&lr.closed), 1, "the reader's close callback, once");
    cr_assert_eq(l.pending_at_close, 0, "the close callback came before the cancelled writes");
    cr_assert_eq(atomic_load(&lr.reads), 0, "a read callback ran with nothing written");
    close(w[0]);
    close(r[1]);
    cr_assert_eq(count_open_fds_settled(), fds, "a pipe end the streams owned stayed open");
}

/*
 * UDP sends waiting for room: the fault seam makes the first send meet
 * EAGAIN (what a full socket buffer answers; loopback otherwise takes
 * every datagram at once), so it and every send behind it stay queued
 * with the socket waiting to become writable. Closing it then, or freeing
 * the loop, completes each queued send exactly once with -ECANCELED, in
 * order, before the one close callback, and closes the descriptor.
 */
#define UDP_QUEUED 6

struct udp_log {
    int status[UDP_QUEUED]; /* 1: pending */
    unsigned order[UDP_QUEUED], done;
    unsigned pending_at_close;
    atomic_uint closed;
};

static void udp_sent_once(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id;
    int *slot = arg;
    cr_assert_eq(*slot, 1, "a send completed twice");
    *slot = status;
}

static void udp_closed_last(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id;
    struct udp_log *l = arg;
    for (unsigned i = 0; i < UDP_QUEUED; i++)
        l->pending_at_close += l->status[i] == 1;
    atomic_fetch_add(&l->closed, 1);
}

/* A bound socket with UDP_QUEUED sends queued behind one that met EAGAIN. */
static tern_id udp_queue_sends(tern_loop *loop, struct udp_log *l)
{
    tern_id u = 0, peer = 0;
    cr_assert_eq(tern_udp_bind(loop, "127.0.0.1", 0, 0, &u), 0);
    cr_assert_eq(tern_udp_bind(loop, "127.0.0.1", 0, 0, &peer), 0);
    unsigned port = 0;
    cr_assert_eq(tern_udp_port(loop, peer, &port), 0);
    struct sockaddr_storage to;
    cr_assert_eq(tern_sockaddr_parse("127.0.0.1", port, &to), 0);
    cr_assert_eq(tern_udp_on_close(loop, u, udp_closed_last, l), 0);
    static const tern_buf m = {"datagram", 8};
    tern__fault_net_errno(-EAGAIN);
    tern__fault_arm(TERN__FAULT_NET, 1);
    for (unsigned i = 0; i < UDP_QUEUED; i++) {
        l->status[i] = 1;
        cr_assert_geq(tern_udp_send(loop, u, &m, 1, (struct sockaddr *)&to, udp_sent_once,
                                    &l->status[i]),
                      0);
    }
    bool fired = tern__fault_fired();
    tern__fault_arm(0, 0);
    tern__fault_net_errno(-ENOBUFS);
    cr_assert(fired, "the first send never reached the seam");
    size_t bytes = 0, count = 0;
    cr_assert_eq(tern_udp_send_queue_size(loop, u, &bytes, &count), 0);
    cr_assert_eq(count, UDP_QUEUED, "%zu sends queued, %u made", count, UDP_QUEUED);
    cr_assert_eq(bytes, UDP_QUEUED * 8);
    cr_assert_eq(tern_udp_close(loop, peer), 0);
    return u;
}

static void udp_check_cancelled(const struct udp_log *l)
{
    for (unsigned i = 0; i < UDP_QUEUED; i++)
        cr_assert_eq(l->status[i], -ECANCELED, "send %u: %s", i, tern_err_name(l->status[i]));
    cr_assert_eq(atomic_load(&l->closed), 1, "the close callback, once");
    cr_assert_eq(l->pending_at_close, 0, "the close callback came before the cancelled sends");
}

BACKEND_TEST(teardown, udp_close_with_sends_waiting_for_room_cancels_each_once)
{
    backend_warm_up(backend);
    int fds = count_open_fds_settled();
    tern_loop *loop = loop_new_backend(backend);
    static struct udp_log l;
    memset(&l, 0, sizeof(l));
    tern_id u = udp_queue_sends(loop, &l);
    cr_assert_eq(tern_udp_close(loop, u), 0); /* before any turn could flush them */
    cr_assert(run_until_count(loop, &l.closed, 1, 10 * (int64_t)MS, 1000));
    for (int t = 0; t < 3; t++)
        tern_loop_run_once(loop, 0);
    udp_check_cancelled(&l);
    loop_free_clean(loop);
    cr_assert_eq(count_open_fds_settled(), fds, "a socket's descriptor stayed open");
}

BACKEND_TEST(teardown, free_with_udp_sends_waiting_for_room)
{
    backend_warm_up(backend);
    int fds = count_open_fds_settled();
    tern_loop *loop = loop_new_backend(backend);
    static struct udp_log l;
    memset(&l, 0, sizeof(l));
    (void)udp_queue_sends(loop, &l);
    tern_loop_free(loop);
    udp_check_cancelled(&l);
    cr_assert_eq(count_open_fds_settled(), fds, "a socket's descriptor stayed open");
}
