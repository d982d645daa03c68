/*
 * The io_uring backend's own promises, beside the conformance suite it
 * passes like every backend: a readiness posted for a descriptor that was
 * since replaced is never reported (a backend test, so every backend is
 * held to it); a loop asking for io_uring where the kernel refuses it runs
 * on epoll and says so; a forked child never touches its parent's ring;
 * the ring's creation is a descriptor site of the fault seam. And its
 * receive: a TCP stream is read with no receive system call of tern's; more
 * receives at once than the backend has buffers all complete; bytes taken
 * by the kernel before a stop come first after the restart; a loop freed
 * with receives in the kernel and bytes waiting frees everything.
 */
#include "uring_helpers.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "backend.h"
#include "fault.h"

struct count {
    atomic_uint calls;
    unsigned events;
};

static void count_cb(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    (void)loop;
    (void)id;
    (void)fd;
    struct count *c = arg;
    c->events |= events;
    atomic_fetch_add(&c->calls, 1);
}

/*
 * A descriptor number is stopped, made to name another file and watched
 * again within one turn; the old file then turns readable while the
 * kernel may still hold a poll on it. Nothing may be reported for the new
 * file until it has data itself.
 */
BACKEND_TEST(uring, readiness_of_a_replaced_file_is_never_reported)
{
    tern_loop *loop = loop_new_backend(backend);
    int a[2], b[2];
    make_pipe(a);
    make_pipe(b);
    int n = dup(a[0]);
    cr_assert_geq(n, 0);

    struct count old = {0}, now = {0};
    tern_id id;
    cr_assert_eq(tern_io_start(loop, n, TERN_READABLE, count_cb, &old, &id), 0);
    for (int i = 0; i < 3; i++)
        tern_loop_run_once(loop, 0); /* the first watch is in the kernel now */
    cr_assert_eq(atomic_load(&old.calls), 0);

    cr_assert_eq(tern_io_stop(loop, id), 0);
    cr_assert_eq(dup2(b[0], n), n);
    cr_assert_eq(tern_io_start(loop, n, TERN_READABLE, count_cb, &now, &id), 0);
    write_byte(a[1]);
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&now.calls), 0,
                 "the old file's readiness was reported for the new one");
    cr_assert_eq(atomic_load(&old.calls), 0, "a stopped watcher was called");

    write_byte(b[1]);
    cr_assert(run_until_count(loop, &now.calls, 1, 100 * (int64_t)MS, 200));
    cr_assert(now.events & TERN_READABLE);
    cr_assert_eq(tern_io_stop(loop, id), 0);
    loop_free_clean(loop);
    close(n);
    close(a[0]);
    close(a[1]);
    close(b[0]);
    close(b[1]);
}

static void *turn_once(void *arg)
{
    tern_loop_run_once(arg, 0);
    return NULL;
}

/*
 * A loop run by one thread and then another: the first thread made the
 * kernel's watch of the descriptor (io_uring ties a request to the thread
 * that submitted it) and has exited since. The watcher still fires.
 */
BACKEND_TEST(uring, a_watch_made_by_a_thread_that_exited_still_fires)
{
    tern_loop *loop = loop_new_backend(backend);
    int p[2];
    make_pipe(p);
    struct count c = {0};
    tern_id id;
    cr_assert_eq(tern_io_start(loop, p[0], TERN_READABLE, count_cb, &c, &id), 0);
    for (int i = 0; i < 2; i++) {
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, turn_once, loop), 0);
        cr_assert_eq(pthread_join(t, NULL), 0);
    }
    cr_assert_eq(atomic_load(&c.calls), 0);
    write_byte(p[1]);
    cr_assert(run_until_count(loop, &c.calls, 1, 100 * (int64_t)MS, 200));
    cr_assert_eq(tern_io_stop(loop, id), 0);
    loop_free_clean(loop);
    close(p[0]);
    close(p[1]);
}

#ifdef TERN_HAVE_IO_URING

static tern_loop *loop_asking_for(const char *backend)
{
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.backend = backend;
    return loop_new_opts(&o);
}

/* A watcher on a pipe is called once data arrives: the loop works. */
static void check_loop_works(tern_loop *loop)
{
    int p[2];
    make_pipe(p);
    struct count c = {0};
    tern_id id;
    cr_assert_eq(tern_io_start(loop, p[0], TERN_READABLE, count_cb, &c, &id), 0);
    write_byte(p[1]);
    cr_assert(run_until_count(loop, &c.calls, 1, 100 * (int64_t)MS, 200));
    cr_assert_eq(tern_io_stop(loop, id), 0);
    close(p[0]);
    close(p[1]);
}

Test(uring, asked_for_by_name_it_runs_on_io_uring_and_never_by_default)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    tern_loop *loop = loop_asking_for("io_uring");
    cr_assert_str_eq(tern_loop_backend_name(loop), "io_uring");
    check_loop_works(loop);
    loop_free_clean(loop);

    loop = loop_asking_for(NULL);
    cr_assert_str_eq(tern_loop_backend_name(loop), "epoll");
    loop_free_clean(loop);
}

/* Deny io_uring_setup with err, as a container's seccomp profile does
 * (EPERM), or an old kernel (ENOSYS), or a process out of locked memory
 * (ENOMEM). */
static void deny_io_uring_setup(unsigned err)
{
    deny_syscall(__NR_io_uring_setup, err);
    cr_assert_not(kernel_allows_io_uring(), "the filter did not deny io_uring_setup");
}

/* Criterion runs each test in a child of its own, so the filter dies with it. */
/* Every way a kernel refuses the ring that is not the caller's fault:
 * each leaves the loop on epoll, never an error the application sees. */
static const unsigned refusals[] = {EPERM, ENOSYS, ENOMEM, EACCES, EINVAL, EOPNOTSUPP};

ParameterizedTestParameters(uring, refused_by_the_kernel_a_loop_runs_on_epoll_and_says_so)
{
    return cr_make_param_array(unsigned, refusals, sizeof refusals / sizeof refusals[0]);
}

ParameterizedTest(unsigned *err, uring, refused_by_the_kernel_a_loop_runs_on_epoll_and_says_so)
{
    deny_io_uring_setup(*err);
    int before = count_open_fds();
    tern_loop *loop = loop_asking_for("io_uring");
    cr_assert_str_eq(tern_loop_backend_name(loop), "epoll");
    check_loop_works(loop);
    loop_free_clean(loop);
    cr_assert_eq(count_open_fds_settled(), before, "the refused ring left a descriptor open");
}

/*
 * More changes in one turn than the submission queue holds (its 256
 * entries): starting 300 watchers, and later stopping them, fills the
 * queue part way, so the backend submits what it has and goes on. Every
 * watcher must still fire once its pipe has data, and none after its
 * stop.
 */
#define MANY 300

Test(uring, a_turn_with_more_changes_than_the_queue_holds)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    static int p[MANY][2];
    static struct count c[MANY];
    static tern_id ids[MANY];
    tern_loop *loop = loop_asking_for("io_uring");
    cr_assert_str_eq(tern_loop_backend_name(loop), "io_uring");
    for (int i = 0; i < MANY; i++) {
        make_pipe(p[i]);
        write_byte(p[i][1]);
        memset(&c[i], 0, sizeof c[i]);
    }
    for (int i = 0; i < MANY; i++)
        cr_assert_eq(tern_io_start(loop, p[i][0], TERN_READABLE, count_cb, &c[i], &ids[i]), 0);
    uint64_t end = mono_ns() + LIVENESS_NS;
    int fired = 0;
    while (fired < MANY && mono_ns() < end) {
        tern_loop_run_once(loop, 10 * (int64_t)MS);
        fired = 0;
        for (int i = 0; i < MANY; i++)
            fired += atomic_load(&c[i].calls) > 0;
    }
    cr_assert_eq(fired, MANY, "%d of %d watchers fired", fired, MANY);
    for (int i = 0; i < MANY; i++)
        cr_assert_eq(tern_io_stop(loop, ids[i]), 0);
    unsigned calls[MANY];
    for (int i = 0; i < MANY; i++)
        calls[i] = atomic_load(&c[i].calls);
    for (int turn = 0; turn < 3; turn++)
        tern_loop_run_once(loop, 0);
    for (int i = 0; i < MANY; i++) {
        cr_assert_eq(atomic_load(&c[i].calls), calls[i], "watcher %d fired after its stop", i);
        close(p[i][0]);
        close(p[i][1]);
    }
    loop_free_clean(loop);
}

/*
 * The ring's creation is a descriptor site of the fault seam, so a loop
 * asking for io_uring has exactly as many as one on epoll (each backend
 * makes one descriptor of its own), and each failure is the loop's.
 */
static unsigned fd_sites_of_a_new_loop(const char *backend)
{
    for (uint64_t n = 1; n < 64; n++) {
        tern_loop_options o;
        tern_loop_options_init(&o);
        o.backend = backend;
        tern_loop *loop = NULL;
        tern__fault_arm(TERN__FAULT_FD, n);
        int rc = tern_loop_new(&loop, &o);
        bool fired = tern__fault_fired();
        tern__fault_arm(0, 0);
        if (!fired) {
            cr_assert_eq(rc, 0);
            cr_assert_str_eq(tern_loop_backend_name(loop), backend);
            loop_free_clean(loop);
            return (unsigned)n - 1;
        }
        cr_assert_eq(rc, -EMFILE, "%s, descriptor %u: %s", backend, (unsigned)n, tern_strerror(rc));
        cr_assert_null(loop);
    }
    cr_assert_fail("a new loop kept making descriptors");
    return 0;
}

Test(uring, the_rings_creation_is_a_fault_site)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    backend_warm_up("epoll"); /* whatever a first loop makes once for the process */
    int before = count_open_fds();
    unsigned epoll_sites = fd_sites_of_a_new_loop("epoll");
    cr_assert_gt(epoll_sites, 0);
    cr_assert_eq(fd_sites_of_a_new_loop("io_uring"), epoll_sites);
    cr_assert_eq(count_open_fds_settled(), before, "a failed loop left a descriptor open");
}

/*
 * The ring's memory is shared with the kernel; a child that submitted or
 * reaped through an inherited copy would corrupt its parent's loop. A
 * child that runs its parent's loop aborts, naming the rule, and the
 * parent's loop goes on working.
 */
Test(uring, a_forked_child_never_touches_the_parents_ring)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    tern_loop *loop = loop_asking_for("io_uring");
    int p[2];
    make_pipe(p);
    struct count c = {0};
    tern_id id;
    cr_assert_eq(tern_io_start(loop, p[0], TERN_READABLE, count_cb, &c, &id), 0);
    tern_loop_run_once(loop, 0);

    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        tern_loop_run_once(loop, 0);
        _exit(0);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
              "the child was not stopped by the contract (status %#x)", (unsigned)status);

    write_byte(p[1]);
    cr_assert(run_until_count(loop, &c.calls, 1, 100 * (int64_t)MS, 200));
    cr_assert_eq(tern_io_stop(loop, id), 0);
    loop_free_clean(loop);
    close(p[0]);
    close(p[1]);
}

/* ------------------------------------------------------------------ */
/* The receive: TCP streams read by the kernel into provided buffers    */
/* ------------------------------------------------------------------ */

/* A connected pair of TCP sockets on the loopback: *ours for tern, *peer
 * for the test (blocking). */
static void tcp_pair(int *ours, int *peer)
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(l, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    cr_assert_eq(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(l, 1), 0);
    cr_assert_eq(getsockname(l, (struct sockaddr *)&a, &al), 0);
    *peer = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(*peer, 0);
    cr_assert_eq(connect(*peer, (struct sockaddr *)&a, sizeof a), 0);
    *ours = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    cr_assert_geq(*ours, 0);
    close(l);
}

static unsigned char pattern(size_t i)
{
    return (unsigned char)(i * 7 + i / 251);
}

struct reader {
    char mem[100];       /* for reading into the caller's memory, a little at a time */
    size_t got;          /* bytes so far, each checked against pattern() */
    int end;             /* the status that ended reading, once ended */
    atomic_uint ended;   /* 1 once the end (0 or an error) came */
    unsigned calls;      /* read callbacks with bytes */
    unsigned stop_after; /* stop reading after this many callbacks (0: never) */
    bool stopped;
};

static void reader_cb(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                      void *arg)
{
    struct reader *r = arg;
    if (len == 0) {
        r->end = status;
        atomic_store(&r->ended, 1);
        return;
    }
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++)
        cr_assert_eq(p[i], pattern(r->got + i), "byte %zu out of order or wrong", r->got + i);
    r->got += len;
    if (++r->calls == r->stop_after) {
        cr_assert_eq(tern_stream_read_stop(loop, id), 0);
        r->stopped = true;
    }
}

static void *reader_alloc(tern_loop *loop, tern_id id, size_t *len, void *arg)
{
    (void)loop;
    (void)id;
    struct reader *r = arg;
    *len = sizeof r->mem;
    return r->mem;
}

static void send_pattern(int fd, size_t from, size_t n)
{
    unsigned char buf[8192];
    while (n > 0) {
        size_t k = n < sizeof buf ? n : sizeof buf;
        for (size_t i = 0; i < k; i++)
            buf[i] = pattern(from + i);
        cr_assert_eq(write(fd, buf, k), (ssize_t)k);
        from += k;
        n -= k;
    }
}

/*
 * With recvfrom denied to the process, a stream on io_uring still reads
 * every byte and the end: the kernel receives for it. On a backend that
 * reads by readiness the read fails with EPERM.
 */
Test(uring, a_tcp_stream_is_read_without_a_receive_call_of_its_own)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    tern_loop *loop = loop_asking_for("io_uring");
    int ours, peer;
    tcp_pair(&ours, &peer);
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, ours, &id), 0);
    deny_syscall(__NR_recvfrom, EPERM);
    struct reader r = {0};
    cr_assert_eq(tern_stream_read_start(loop, id, reader_cb, &r), 0);
    const size_t total = 300 * 1024;
    send_pattern(peer, 0, total);
    shutdown(peer, SHUT_WR);
    cr_assert(run_until_count(loop, &r.ended, 1, 100 * (int64_t)MS, 200));
    cr_assert_eq(r.end, 0, "reading ended with %s", strerror(-r.end));
    cr_assert_eq(r.got, total);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(peer);
}

/*
 * More sockets with bytes waiting than the backend has buffers (512):
 * the receives the kernel ends for want of a buffer are submitted again
 * once buffers come back, and every stream gets its bytes.
 */
#define CROWD 700

Test(uring, more_receives_at_once_than_buffers_all_complete)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    struct rlimit rl;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < 2 * CROWD + 64) {
        rl.rlim_cur = rl.rlim_max;
        if (rl.rlim_cur < 2 * CROWD + 64 || setrlimit(RLIMIT_NOFILE, &rl) != 0)
            cr_skip_test("too few descriptors for %d connections", CROWD);
    }
    tern_loop *loop = loop_asking_for("io_uring");
    static int peers[CROWD];
    static struct reader readers[CROWD];
    static tern_id ids[CROWD];
    for (int i = 0; i < CROWD; i++) {
        int ours;
        tcp_pair(&ours, &peers[i]);
        cr_assert_eq(tern_stream_open(loop, ours, &ids[i]), 0);
        readers[i] = (struct reader){0};
        send_pattern(peers[i], 0, 100);
        shutdown(peers[i], SHUT_WR);
    }
    static atomic_uint done;
    atomic_store(&done, 0);
    for (int i = 0; i < CROWD; i++)
        cr_assert_eq(tern_stream_read_start(loop, ids[i], reader_cb, &readers[i]), 0);
    uint64_t give_up = mono_ns() + LIVENESS_NS;
    for (;;) {
        unsigned n = 0;
        for (int i = 0; i < CROWD; i++)
            n += atomic_load(&readers[i].ended);
        if (n == CROWD)
            break;
        cr_assert_lt(mono_ns(), give_up, "%u of %d streams ended", n, CROWD);
        tern_loop_run_once(loop, 100 * (int64_t)MS);
    }
    for (int i = 0; i < CROWD; i++) {
        cr_assert_eq(readers[i].got, 100, "stream %d got %zu bytes", i, readers[i].got);
        cr_assert_eq(readers[i].end, 0);
        cr_assert_eq(tern_stream_close(loop, ids[i]), 0);
        close(peers[i]);
    }
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}

/*
 * Stopping cancels the receive, but what the kernel took before the
 * cancel was reaped comes first after reading starts again, in order,
 * with nothing lost: the peer writes in bursts while the stream stops
 * after each of its first callbacks.
 */
Test(uring, bytes_taken_before_a_stop_come_first_after_the_restart)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    tern_loop *loop = loop_asking_for("io_uring");
    int ours, peer;
    tcp_pair(&ours, &peer);
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, ours, &id), 0);
    struct reader r = {.stop_after = 1};
    cr_assert_eq(tern_stream_read_start(loop, id, reader_cb, &r), 0);
    size_t sent = 0;
    for (int round = 0; round < 20; round++) {
        /* Several sends, so several completions may land in one wait. */
        for (int k = 0; k < 4; k++) {
            send_pattern(peer, sent, 1000 + 37 * (size_t)round);
            sent += 1000 + 37 * (size_t)round;
        }
        uint64_t give_up = mono_ns() + LIVENESS_NS;
        while (!r.stopped) {
            cr_assert_lt(mono_ns(), give_up);
            tern_loop_run_once(loop, 10 * (int64_t)MS);
        }
        /* Stopped: a few turns in which nothing may be delivered. */
        size_t held = r.got;
        for (int t = 0; t < 3; t++)
            tern_loop_run_once(loop, 0);
        cr_assert_eq(r.got, held, "bytes delivered while reading was stopped");
        r.calls = 0;
        r.stop_after = round % 3 == 2 ? 5 : 1;
        r.stopped = false;
        /* Every third round into the caller's memory, 100 bytes at a time:
         * the waiting bytes are copied out of the backend's buffers. */
        if (round % 3 == 2)
            cr_assert_eq(tern_stream_read_start_alloc(loop, id, reader_alloc, reader_cb, &r), 0);
        else
            cr_assert_eq(tern_stream_read_start(loop, id, reader_cb, &r), 0);
    }
    r.stop_after = 0;
    shutdown(peer, SHUT_WR);
    cr_assert(run_until_count(loop, &r.ended, 1, 100 * (int64_t)MS, 200));
    cr_assert_eq(r.got, sent);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(peer);
}

/*
 * A loop freed while its streams' receives are in the kernel and bytes
 * wait in buffers: the free closes the streams, the receives are
 * cancelled and reaped before the buffers go (ASan and valgrind watch
 * this), and every descriptor is closed.
 */
Test(uring, a_loop_freed_with_receives_in_the_kernel_frees_everything)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    int before = count_open_fds();
    tern_loop *loop = loop_asking_for("io_uring");
    int peers[8];
    struct reader r[8];
    for (int i = 0; i < 8; i++) {
        int ours;
        tern_id id;
        tcp_pair(&ours, &peers[i]);
        cr_assert_eq(tern_stream_open(loop, ours, &id), 0);
        r[i] = (struct reader){0};
        cr_assert_eq(tern_stream_read_start(loop, id, reader_cb, &r[i]), 0);
        if (i % 2 == 0)
            send_pattern(peers[i], 0, 5000);
    }
    /* One turn submits the receives; the next reaps the bytes (step 4)
     * without delivering them (step 2 comes first). */
    tern_loop_run_once(loop, 0);
    tern_loop_run_once(loop, 50 * (int64_t)MS);
    tern_loop_free(loop);
    for (int i = 0; i < 8; i++) {
        cr_assert_eq(read(peers[i], (char[1]){0}, 1), 0, "stream %d not closed by the free", i);
        close(peers[i]);
    }
    cr_assert_eq(count_open_fds_settled(), before);
}

/*
 * More ends of stream in one wait than a wait reports completions (1,024):
 * the rest stay in the completion queue for the next wait, and every
 * stream sees its end once.
 */
#define ENDS 1100

Test(uring, more_ends_in_one_wait_than_it_reports_all_arrive)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    struct rlimit rl;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < 2 * ENDS + 64) {
        rl.rlim_cur = rl.rlim_max;
        if (rl.rlim_cur < 2 * ENDS + 64 || setrlimit(RLIMIT_NOFILE, &rl) != 0)
            cr_skip_test("too few descriptors for %d connections", ENDS);
    }
    tern_loop *loop = loop_asking_for("io_uring");
    static int peers[ENDS];
    static struct reader readers[ENDS];
    static tern_id ids[ENDS];
    for (int i = 0; i < ENDS; i++) {
        int ours;
        tcp_pair(&ours, &peers[i]);
        cr_assert_eq(tern_stream_open(loop, ours, &ids[i]), 0);
        readers[i] = (struct reader){.end = 1};
        cr_assert_eq(tern_stream_read_start(loop, ids[i], reader_cb, &readers[i]), 0);
    }
    tern_loop_run_once(loop, 0); /* the receives are in the kernel, waiting */
    for (int i = 0; i < ENDS; i++)
        shutdown(peers[i], SHUT_WR);
    uint64_t give_up = mono_ns() + LIVENESS_NS;
    for (;;) {
        unsigned n = 0;
        for (int i = 0; i < ENDS; i++)
            n += atomic_load(&readers[i].ended);
        if (n == ENDS)
            break;
        cr_assert_lt(mono_ns(), give_up, "%u of %d streams ended", n, ENDS);
        tern_loop_run_once(loop, 100 * (int64_t)MS);
    }
    for (int i = 0; i < ENDS; i++) {
        cr_assert_eq(readers[i].end, 0);
        cr_assert_eq(tern_stream_close(loop, ids[i]), 0);
        close(peers[i]);
    }
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}

/*
 * A kernel that refuses the buffer ring (io_uring_register denied, as a
 * seccomp profile may): the stream reads by readiness instead, and says
 * nothing of it.
 */
Test(uring, without_a_buffer_ring_a_stream_reads_by_readiness)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    tern_loop *loop = loop_asking_for("io_uring");
    deny_syscall(__NR_io_uring_register, EINVAL);
    for (int k = 0; k < 2; k++) { /* the second stream finds the receive already ruled out */
        int ours, peer;
        tcp_pair(&ours, &peer);
        tern_id id;
        cr_assert_eq(tern_stream_open(loop, ours, &id), 0);
        struct reader r = {0};
        cr_assert_eq(tern_stream_read_start(loop, id, reader_cb, &r), 0);
        send_pattern(peer, 0, 50000);
        shutdown(peer, SHUT_WR);
        cr_assert(run_until_count(loop, &r.ended, 1, 100 * (int64_t)MS, 200));
        cr_assert_eq(r.end, 0);
        cr_assert_eq(r.got, 50000);
        cr_assert_eq(tern_stream_close(loop, id), 0);
        cr_assert(run_until_nothing_live(loop));
        close(peer);
    }
    cr_assert_str_eq(tern_loop_backend_name(loop), "io_uring");
    loop_free_clean(loop);
}

/* Send n bytes of the pattern from `from` with one descriptor passed. */
static void send_with_fd(int sock, size_t from, size_t n, int passed)
{
    unsigned char buf[256];
    for (size_t i = 0; i < n; i++)
        buf[i] = pattern(from + i);
    union {
        char b[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } c;
    memset(&c, 0, sizeof c); /* the padding goes to the kernel too */
    struct iovec iov = {buf, n};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.b, .msg_controllen = sizeof c.b};
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(h), &passed, sizeof(int));
    cr_assert_eq(sendmsg(sock, &m, 0), (ssize_t)n);
}

struct fd_reader {
    struct reader r;
    int taken[8];
    unsigned ntaken;
};

static void fd_reader_cb(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                         void *arg)
{
    struct fd_reader *f = arg;
    reader_cb(loop, id, status, data, len, &f->r);
    int fd;
    while ((fd = tern_unix_take_fd(loop, id)) >= 0) {
        cr_assert_lt(f->ntaken, 8);
        f->taken[f->ntaken++] = fd;
    }
}

/*
 * A Unix-domain stream on io_uring receives as recvmsg does, in the
 * kernel: with recvmsg and recvfrom denied to the process, the bytes and
 * the descriptors passed with them both arrive, each descriptor by the
 * time the bytes it came with are delivered.
 */
Test(uring, a_unix_stream_receives_bytes_and_descriptors_without_a_call_of_its_own)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    tern_loop *loop = loop_asking_for("io_uring");
    int sp[2];
    make_socketpair(sp);
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, sp[0], &id), 0);
    struct fd_reader f = {0};
    cr_assert_eq(tern_stream_read_start(loop, id, fd_reader_cb, &f), 0);
    deny_syscall(__NR_recvmsg, EPERM);
    deny_syscall(__NR_recvfrom, EPERM);
    int p[2];
    make_pipe(p);
    for (int i = 0; i < 3; i++)
        send_with_fd(sp[1], 100 * (size_t)i, 100, p[1]);
    shutdown(sp[1], SHUT_WR);
    cr_assert(run_until_count(loop, &f.r.ended, 1, 100 * (int64_t)MS, 200));
    cr_assert_eq(f.r.end, 0, "reading ended with %s", strerror(-f.r.end));
    cr_assert_eq(f.r.got, 300);
    cr_assert_eq(f.ntaken, 3);
    for (unsigned i = 0; i < f.ntaken; i++) {
        cr_assert_eq(fcntl(f.taken[i], F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
        cr_assert_eq(write(f.taken[i], "x", 1), 1, "the passed pipe end does not work");
        close(f.taken[i]);
    }
    cr_assert_eq(drain_fd(p[0]), 3);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(sp[1]);
    close(p[0]);
    close(p[1]);
}

/*
 * Descriptors that came with bytes never delivered (reading stopped,
 * then the stream closed) are closed with the stream: none is left open.
 */
Test(uring, descriptors_that_came_with_bytes_never_delivered_are_closed)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    int before = count_open_fds();
    tern_loop *loop = loop_asking_for("io_uring");
    int sp[2], p[2];
    make_socketpair(sp);
    make_pipe(p);
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, sp[0], &id), 0);
    struct fd_reader f = {.r.stop_after = 1};
    cr_assert_eq(tern_stream_read_start(loop, id, fd_reader_cb, &f), 0);
    for (int i = 0; i < 4; i++)
        send_with_fd(sp[1], 100 * (size_t)i, 100, p[1]);
    uint64_t give_up = mono_ns() + LIVENESS_NS;
    while (!f.r.stopped) {
        cr_assert_lt(mono_ns(), give_up);
        tern_loop_run_once(loop, 10 * (int64_t)MS);
    }
    for (unsigned i = 0; i < f.ntaken; i++)
        close(f.taken[i]);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(sp[1]); /* sp[0] closed with the stream */
    close(p[0]);
    close(p[1]);
    cr_assert_eq(count_open_fds_settled(), before, "a passed descriptor was left open");
}

/* Whether the peer of a closed socket sees its end within a second. */
static bool peer_sees_end(int peer)
{
    struct pollfd p = {.fd = peer, .events = POLLIN | POLLRDHUP};
    return poll(&p, 1, 1000) == 1 && (p.revents & (POLLIN | POLLRDHUP | POLLHUP));
}

/*
 * Closing a stream closes its socket then, not at the loop's next turn:
 * the kernel's receive (or a watcher's poll) holds the file too, and the
 * peer would see no end while the loop is not run again.
 */
Test(uring, a_closed_streams_peer_sees_the_end_without_another_turn)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    tern_loop *loop = loop_asking_for("io_uring");
    int ours, peer;
    tcp_pair(&ours, &peer);
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, ours, &id), 0);
    struct reader r = {0};
    cr_assert_eq(tern_stream_read_start(loop, id, reader_cb, &r), 0);
    tern_loop_run_once(loop, 0); /* the receive is in the kernel */
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(peer_sees_end(peer), "the socket stayed open after tern_stream_close");
    close(peer);

    /* A watcher's poll: the same with tern_io_stop and the caller's close. */
    int p[2];
    make_socketpair(p);
    struct count c = {0};
    tern_id w;
    cr_assert_eq(tern_io_start(loop, p[0], TERN_READABLE, count_cb, &c, &w), 0);
    tern_loop_run_once(loop, 0);
    cr_assert_eq(tern_io_stop(loop, w), 0);
    close(p[0]);
    cr_assert(peer_sees_end(p[1]), "the socket stayed open after tern_io_stop and close");
    close(p[1]);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}

/*
 * A queue that takes no entry (full, its submit refused, as a completion
 * queue in overflow makes the kernel refuse it): a start is refused with
 * -EBUSY and changes nothing; a stop is never refused — the removal or
 * cancel is owed and goes with the next wait — and the descriptor cannot
 * be watched again before then; reading still delivers every byte.
 */
Test(uring, a_queue_that_takes_no_entry_refuses_starts_and_owes_stops)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    tern_loop *loop = loop_asking_for("io_uring");

    /* A stream: refused read_start, then reading (its receive keeps the
     * loop asking the kernel on every turn). */
    int ours, peer;
    tcp_pair(&ours, &peer);
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, ours, &id), 0);
    struct reader r = {.stop_after = 1};
    tern__uring_refuse_entries(1);
    cr_assert_eq(tern_stream_read_start(loop, id, reader_cb, &r), -EBUSY);
    cr_assert_eq(tern_stream_read_start(loop, id, reader_cb, &r), 0);

    /* A watcher: refused start, owed stop, no re-watch until it went. */
    int p[2];
    make_socketpair(p);
    struct count c = {0};
    tern_id w;
    tern__uring_refuse_entries(1);
    cr_assert_eq(tern_io_start(loop, p[0], TERN_READABLE, count_cb, &c, &w), -EBUSY);
    cr_assert_eq(tern_io_start(loop, p[0], TERN_READABLE, count_cb, &c, &w), 0);
    tern_loop_run_once(loop, 0);
    tern__uring_refuse_entries(1);
    cr_assert_eq(tern_io_stop(loop, w), 0);
    tern__uring_refuse_entries(1);
    cr_assert_eq(tern_io_start(loop, p[0], TERN_READABLE, count_cb, &c, &w), -EBUSY,
                 "watched again while the old poll's removal was still owed");
    tern_loop_run_once(loop, 0); /* the owed removal goes */
    close(p[0]);
    cr_assert(peer_sees_end(p[1]), "the owed removal never went: the socket stayed open");
    close(p[1]);

    /* The stream's callback stops reading while the queue takes nothing:
     * the cancel is owed, and the bytes still all arrive in order. */
    send_pattern(peer, 0, 1000);
    uint64_t give_up = mono_ns() + LIVENESS_NS;
    while (!r.stopped) {
        cr_assert_lt(mono_ns(), give_up);
        tern__uring_refuse_entries(1);
        tern_loop_run_once(loop, 10 * (int64_t)MS);
    }
    tern__uring_refuse_entries(0);
    send_pattern(peer, 1000, 5000);
    for (int t = 0; t < 3; t++)
        tern_loop_run_once(loop, 0);
    r.stop_after = 0;
    cr_assert_eq(tern_stream_read_start(loop, id, reader_cb, &r), 0);
    shutdown(peer, SHUT_WR);
    cr_assert(run_until_count(loop, &r.ended, 1, 100 * (int64_t)MS, 200));
    cr_assert_eq(r.got, 6000);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(peer);
}

/*
 * A loop freed while a receive's cancel is still owed: the free sends it
 * and reaps the receive's end before the buffers go.
 */
Test(uring, a_loop_freed_with_a_cancel_owed_frees_everything)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    int before = count_open_fds();
    tern_loop *loop = loop_asking_for("io_uring");
    int ours, peer;
    tcp_pair(&ours, &peer);
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, ours, &id), 0);
    struct reader r = {0};
    cr_assert_eq(tern_stream_read_start(loop, id, reader_cb, &r), 0);
    tern_loop_run_once(loop, 0);
    tern__uring_refuse_entries(1);
    cr_assert_eq(tern_stream_read_stop(loop, id), 0);
    tern_loop_free(loop);
    close(peer);
    cr_assert_eq(count_open_fds_settled(), before);
}

static void *null_alloc(tern_loop *loop, tern_id id, size_t *len, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
    *len = 0;
    return NULL;
}

static char zero_room[1];

static void *zero_alloc(tern_loop *loop, tern_id id, size_t *len, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
    *len = 0;
    return zero_room;
}

/* Switches to reading into tern's buffers from inside the allocator. */
static void *switching_alloc(tern_loop *loop, tern_id id, size_t *len, void *arg)
{
    struct reader *r = arg;
    cr_assert_eq(tern_stream_read_start(loop, id, reader_cb, r), 0);
    *len = sizeof r->mem;
    return r->mem;
}

static void *stopping_alloc(tern_loop *loop, tern_id id, size_t *len, void *arg)
{
    struct reader *r = arg;
    cr_assert_eq(tern_stream_read_stop(loop, id), 0);
    r->stopped = true;
    *len = sizeof r->mem;
    return r->mem;
}

struct status_reader {
    int status;
    atomic_uint calls;
};

static void status_cb(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                      void *arg)
{
    (void)data;
    (void)len;
    struct status_reader *sr = arg;
    sr->status = status;
    atomic_fetch_add(&sr->calls, 1);
    cr_assert_eq(tern_stream_read_stop(loop, id), 0);
}

/* Stop a reading stream once bytes have landed (a callback stops it). */
static void land_bytes(tern_loop *loop, tern_id id, int peer, struct reader *r)
{
    r->stop_after = 1;
    r->stopped = false;
    cr_assert_eq(tern_stream_read_start(loop, id, reader_cb, r), 0);
    send_pattern(peer, r->got, 100);
    uint64_t give_up = mono_ns() + LIVENESS_NS;
    while (!r->stopped) {
        cr_assert_lt(mono_ns(), give_up);
        tern_loop_run_once(loop, 10 * (int64_t)MS);
    }
    send_pattern(peer, r->got, 100); /* more lands while reading is stopped */
}

/*
 * Bytes waiting from the receive, read into a caller's allocator that
 * gives no memory (the callback gets -ENOBUFS and the bytes stay) or that
 * stops reading (nothing is delivered); the read fault seam's EINTR is
 * retried and its error ends reading, as when reading by readiness.
 */
Test(uring, waiting_bytes_meet_allocators_and_faults_as_a_read_does)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    tern_loop *loop = loop_asking_for("io_uring");
    int ours, peer;
    tcp_pair(&ours, &peer);
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, ours, &id), 0);
    struct reader r = {0};
    land_bytes(loop, id, peer, &r);

    struct status_reader sr = {0};
    cr_assert_eq(tern_stream_read_start_alloc(loop, id, null_alloc, status_cb, &sr), 0);
    cr_assert(run_until_count(loop, &sr.calls, 1, 100 * (int64_t)MS, 200));
    cr_assert_eq(sr.status, -ENOBUFS);
    /* A buffer of no room is no memory either. */
    cr_assert_eq(tern_stream_read_start_alloc(loop, id, zero_alloc, status_cb, &sr), 0);
    cr_assert(run_until_count(loop, &sr.calls, 2, 100 * (int64_t)MS, 200));
    cr_assert_eq(sr.status, -ENOBUFS);
    /* An allocator that switches to tern's buffers: its own buffer is not
     * used, and the bytes come on through the new callback, in order. */
    size_t before_switch = r.got;
    r.stop_after = r.calls + 1;
    r.stopped = false;
    cr_assert_eq(tern_stream_read_start_alloc(loop, id, switching_alloc, reader_cb, &r), 0);
    uint64_t give_up_switch = mono_ns() + LIVENESS_NS;
    while (!r.stopped) {
        cr_assert_lt(mono_ns(), give_up_switch);
        tern_loop_run_once(loop, 10 * (int64_t)MS);
    }
    cr_assert_gt(r.got, before_switch);
    send_pattern(peer, 200, 300); /* land_bytes sent 200 in all: more for what follows */

    r.stopped = false;
    cr_assert_eq(tern_stream_read_start_alloc(loop, id, stopping_alloc, reader_cb, &r), 0);
    uint64_t give_up = mono_ns() + LIVENESS_NS;
    while (!r.stopped) {
        cr_assert_lt(mono_ns(), give_up);
        tern_loop_run_once(loop, 10 * (int64_t)MS);
    }
    size_t held = r.got;

    /* EINTR from the seam is retried: the bytes still come, in order. */
    tern__fault_net_errno(-EINTR);
    tern__fault_arm(TERN__FAULT_STREAM, 1);
    r.stop_after = 0;
    cr_assert_eq(tern_stream_read_start(loop, id, reader_cb, &r), 0);
    give_up = mono_ns() + LIVENESS_NS;
    while (r.got < held + 100) {
        cr_assert_lt(mono_ns(), give_up);
        tern_loop_run_once(loop, 10 * (int64_t)MS);
    }
    cr_assert(tern__fault_fired());

    /* An error from the seam ends reading with it. */
    tern__fault_net_errno(-ECONNRESET);
    tern__fault_arm(TERN__FAULT_STREAM, 1);
    send_pattern(peer, r.got, 100);
    cr_assert(run_until_count(loop, &r.ended, 1, 100 * (int64_t)MS, 200));
    cr_assert_eq(r.end, -ECONNRESET);
    tern__fault_arm(0, 0);
    tern__fault_net_errno(-ENOBUFS);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(peer);
}

/*
 * The queue refusing entries inside a wait: the level re-checks it could
 * not queue are queued by the next wait (both ready watchers are reported
 * again), a change of interest is refused with -EBUSY and keeps the old
 * one, and an owed cancel the queue refuses again stays owed.
 */
Test(uring, a_wait_whose_queue_takes_no_entry_catches_up_on_the_next)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    tern_loop *loop = loop_asking_for("io_uring");
    int a[2], b[2];
    make_socketpair(a);
    make_socketpair(b);
    struct count ca = {0}, cb = {0};
    tern_id wa, wb;
    cr_assert_eq(tern_io_start(loop, a[0], TERN_READABLE, count_cb, &ca, &wa), 0);
    cr_assert_eq(tern_io_start(loop, b[0], TERN_READABLE, count_cb, &cb, &wb), 0);
    write_byte(a[1]);
    write_byte(b[1]);
    cr_assert(run_until_count(loop, &ca.calls, 1, 100 * (int64_t)MS, 200));
    cr_assert(run_until_count(loop, &cb.calls, 1, 100 * (int64_t)MS, 200));
    unsigned was_a = atomic_load(&ca.calls), was_b = atomic_load(&cb.calls);
    tern__uring_refuse_entries(1); /* the first re-check of the next wait */
    tern_loop_run_once(loop, 0);
    cr_assert(run_until_count(loop, &ca.calls, was_a + 1, 100 * (int64_t)MS, 200));
    cr_assert(run_until_count(loop, &cb.calls, was_b + 1, 100 * (int64_t)MS, 200));

    tern__uring_refuse_entries(1);
    cr_assert_eq(tern_io_modify(loop, wa, TERN_READABLE | TERN_WRITABLE), -EBUSY);
    cr_assert_eq(tern_io_modify(loop, wa, TERN_READABLE | TERN_WRITABLE), 0);
    cr_assert_eq(tern_io_stop(loop, wa), 0);
    cr_assert_eq(tern_io_stop(loop, wb), 0);

    int ours, peer;
    tcp_pair(&ours, &peer);
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, ours, &id), 0);
    struct reader r = {0};
    cr_assert_eq(tern_stream_read_start(loop, id, reader_cb, &r), 0);
    tern_loop_run_once(loop, 0);
    tern__uring_refuse_entries(2); /* the stop's cancel, and its first retry */
    cr_assert_eq(tern_stream_read_stop(loop, id), 0);
    tern_loop_run_once(loop, 0);
    tern_loop_run_once(loop, 0);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(peer_sees_end(peer), "the owed cancel never went: the socket stayed open");
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(peer);
    close(a[0]);
    close(a[1]);
    close(b[0]);
    close(b[1]);
}

struct turn_arg {
    tern_loop *loop;
};

static void *one_turn(void *arg)
{
    tern_loop_run_once(((struct turn_arg *)arg)->loop, 0);
    return NULL;
}

/*
 * A receive submitted by a thread that has since exited: the kernel ends
 * it (-ECANCELED, not asked for), and the backend submits it again, so
 * the stream run on by another thread still gets every byte.
 */
Test(uring, a_receive_made_by_a_thread_that_exited_still_reads)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    tern_loop *loop = loop_asking_for("io_uring");
    int ours, peer;
    tcp_pair(&ours, &peer);
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, ours, &id), 0);
    struct reader r = {0};
    cr_assert_eq(tern_stream_read_start(loop, id, reader_cb, &r), 0);
    struct turn_arg ta = {loop};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, one_turn, &ta), 0); /* it submits the receive */
    cr_assert_eq(pthread_join(t, NULL), 0);
    tern_loop_run_once(loop, 0);   /* reaps its end (-ECANCELED): to be submitted again */
    tern__uring_refuse_entries(1); /* the next wait cannot: the one after does */
    tern_loop_run_once(loop, 0);
    send_pattern(peer, 0, 20000);
    shutdown(peer, SHUT_WR);
    cr_assert(run_until_count(loop, &r.ended, 1, 100 * (int64_t)MS, 200));
    cr_assert_eq(r.end, 0);
    cr_assert_eq(r.got, 20000);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
    close(peer);
}

/*
 * A loop freed while receives wait to be submitted again (starved of
 * buffers, none back yet): they are not in the kernel, and the free lets
 * them go with the rest.
 */
Test(uring, a_loop_freed_with_starved_receives_frees_everything)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    struct rlimit rl;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < 2 * CROWD + 64) {
        rl.rlim_cur = rl.rlim_max;
        if (rl.rlim_cur < 2 * CROWD + 64 || setrlimit(RLIMIT_NOFILE, &rl) != 0)
            cr_skip_test("too few descriptors for %d connections", CROWD);
    }
    int before = count_open_fds();
    tern_loop *loop = loop_asking_for("io_uring");
    static int peers[CROWD];
    static struct reader readers[CROWD];
    static tern_id ids[CROWD];
    for (int i = 0; i < CROWD; i++) {
        int ours;
        tcp_pair(&ours, &peers[i]);
        cr_assert_eq(tern_stream_open(loop, ours, &ids[i]), 0);
        readers[i] = (struct reader){0};
        send_pattern(peers[i], 0, 100);
        cr_assert_eq(tern_stream_read_start(loop, ids[i], reader_cb, &readers[i]), 0);
    }
    /* One wait submits them all and reaps: 512 take a buffer, the rest
     * are ended for want of one and wait; nothing is delivered yet. */
    tern_loop_run_once(loop, 0);
    /* Stopped with their bytes undelivered, the 512 hold every buffer: a
     * wait must leave the starved ones waiting (no buffer is back). */
    for (int i = 0; i < CROWD; i++)
        cr_assert_eq(tern_stream_read_stop(loop, ids[i]), 0);
    tern_loop_run_once(loop, 0);
    tern_loop_free(loop);
    for (int i = 0; i < CROWD; i++)
        close(peers[i]);
    cr_assert_eq(count_open_fds_settled(), before);
}

/*
 * Every allocation starting to read can make (the buffers' mapping, the
 * backend's tables, the loop's landing records), failed in turn: the
 * start says -ENOMEM and leaves the stream as it was, and reading started
 * again gets every byte.
 */
Test(uring, each_allocation_of_a_read_start_failed_in_turn)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    for (uint64_t n = 1;; n++) {
        tern_loop *loop = loop_asking_for("io_uring");
        int ours, peer;
        tcp_pair(&ours, &peer);
        tern_id id;
        cr_assert_eq(tern_stream_open(loop, ours, &id), 0);
        struct reader r = {0};
        tern__fault_arm(TERN__FAULT_ALLOC, n);
        int rc = tern_stream_read_start(loop, id, reader_cb, &r);
        bool fired = tern__fault_fired();
        tern__fault_arm(0, 0);
        if (fired) {
            cr_assert_eq(rc, -ENOMEM, "allocation %llu failed: read_start said %d",
                         (unsigned long long)n, rc);
            cr_assert_eq(tern_stream_read_start(loop, id, reader_cb, &r), 0);
        } else {
            cr_assert_eq(rc, 0);
        }
        send_pattern(peer, 0, 3000);
        shutdown(peer, SHUT_WR);
        cr_assert(run_until_count(loop, &r.ended, 1, 100 * (int64_t)MS, 200));
        cr_assert_eq(r.got, 3000);
        cr_assert_eq(tern_stream_close(loop, id), 0);
        cr_assert(run_until_nothing_live(loop));
        loop_free_clean(loop);
        close(peer);
        if (!fired)
            break;
        cr_assert_lt(n, 64, "read_start makes more allocations than expected");
    }
}

/*
 * A watcher whose poll the kernel ended (its submitting thread exited),
 * changed before the next wait adds it again: the change adds a fresh
 * poll with the new interest, and the watcher fires for it.
 */
Test(uring, a_watcher_changed_while_its_poll_is_ended_gets_a_fresh_one)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    tern_loop *loop = loop_asking_for("io_uring");
    int p[2];
    make_socketpair(p);
    struct count c = {0};
    tern_id id;
    cr_assert_eq(tern_io_start(loop, p[0], TERN_READABLE, count_cb, &c, &id), 0);
    struct turn_arg ta = {loop};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, one_turn, &ta), 0);
    cr_assert_eq(pthread_join(t, NULL), 0);
    tern_loop_run_once(loop, 0); /* reaps the poll's end */
    cr_assert_eq(tern_io_modify(loop, id, TERN_READABLE | TERN_WRITABLE), 0);
    cr_assert(run_until_count(loop, &c.calls, 1, 100 * (int64_t)MS, 200));
    cr_assert(c.events & TERN_WRITABLE, "the new interest was not in force");
    cr_assert_eq(tern_io_stop(loop, id), 0);
    loop_free_clean(loop);
    close(p[0]);
    close(p[1]);
}

#endif
