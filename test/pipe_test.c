/*
 * Pipes, FIFOs and TTYs as streams (include/tern/net.h), run on every
 * backend built: a pipe carries bytes in order with end of stream; a
 * pipe's write queue has the high-water mark, the drain callback and its
 * queued bytes readable; a FIFO opens as a stream; a pseudo-terminal gets
 * raw mode, normal mode back, and its window size (and is put back when
 * the stream closes); a regular file is refused and left as it was; a TTY
 * call on a pipe is -ENOTTY; reads land in caller-owned memory.
 */
#include "loop_helpers.h"

#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>

struct sink {
    char *buf;
    size_t len, cap;
    atomic_uint reads;
    atomic_bool eof;
    int status;
};

static void sink_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                      void *arg)
{
    (void)loop;
    (void)id;
    struct sink *s = arg;
    if (status < 0 || len == 0) {
        s->status = status;
        atomic_store(&s->eof, true);
        return;
    }
    if (s->len + len > s->cap) {
        s->cap = (s->len + len) * 2;
        s->buf = realloc(s->buf, s->cap);
        cr_assert_not_null(s->buf);
    }
    memcpy(s->buf + s->len, data, len);
    s->len += len;
    atomic_fetch_add(&s->reads, 1);
}

static atomic_uint writes_done, drains;
static int last_write_status;

static void on_write(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id, (void)arg;
    last_write_status = status;
    atomic_fetch_add(&writes_done, 1);
}

static void on_drain(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id, (void)arg;
    atomic_fetch_add(&drains, 1);
}

static void pattern(char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (char)(i * 31 + seed + i / 251);
}

BACKEND_TEST(pipe, bytes_flow_in_order_with_end_of_stream)
{
    tern_loop *loop = loop_new_backend(backend);
    int p[2];
    cr_assert_eq(pipe(p), 0); /* blocking, as a child's pipe would be */
    tern_id rd, wr;
    cr_assert_eq(tern_stream_open(loop, p[0], &rd), 0);
    cr_assert_eq(tern_stream_open(loop, p[1], &wr), 0);
    cr_assert(fcntl(p[0], F_GETFL) & O_NONBLOCK);
    enum { N = 1 << 20 };
    static char data[N];
    pattern(data, N, 3);
    atomic_store(&writes_done, 0);
    tern_buf b = {data, N};
    int rc = tern_stream_write(loop, wr, &b, 1, on_write, NULL);
    cr_assert(rc == 0 || rc == 1, "%s", tern_strerror(rc));
    struct sink s = {0};
    cr_assert_eq(tern_stream_read_start(loop, rd, sink_read, &s), 0);
    cr_assert(run_until_count(loop, &writes_done, 1, 10 * MS, 5000));
    cr_assert_eq(last_write_status, 0);
    /* Closing the write end is the reader's end of stream. */
    cr_assert_eq(tern_stream_close(loop, wr), 0);
    cr_assert(run_until_flag(loop, &s.eof, 10 * MS, 5000));
    cr_assert_eq(s.status, 0);
    cr_assert_eq(s.len, (size_t)N);
    cr_assert(memcmp(s.buf, data, N) == 0);
    cr_assert_eq(tern_stream_close(loop, rd), 0);
    cr_assert(run_until_nothing_live(loop));
    free(s.buf);
    loop_free_clean(loop);
}

BACKEND_TEST(pipe, high_water_mark_drain_and_queued_bytes)
{
    tern_loop *loop = loop_new_backend(backend);
    int p[2];
    make_pipe(p);
    tern_id wr;
    cr_assert_eq(tern_stream_open(loop, p[1], &wr), 0);
    atomic_store(&drains, 0);
    atomic_store(&writes_done, 0);
    cr_assert_eq(tern_stream_set_high_water(loop, wr, 256 * 1024, on_drain, NULL), 0);
    static char data[128 * 1024];
    tern_buf b = {data, sizeof data};
    int rc = 0;
    unsigned n = 0;
    while (rc == 0 && n < 64) {
        rc = tern_stream_write(loop, wr, &b, 1, on_write, NULL);
        cr_assert_geq(rc, 0, "%s", tern_strerror(rc));
        n++;
    }
    cr_assert_eq(rc, 1, "the high-water mark was never reported");
    size_t q;
    cr_assert_eq(tern_stream_write_queue_size(loop, wr, &q), 0);
    cr_assert_gt(q, 256 * 1024);
    /* Nobody reads: the queue stays, and no drain is told. */
    for (int i = 0; i < 5; i++)
        tern_loop_run_once(loop, 1 * MS);
    cr_assert_eq(atomic_load(&drains), 0);
    /* Read it all with plain reads; the drain follows, once. */
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (atomic_load(&writes_done) < n && mono_ns() < end) {
        drain_fd(p[0]);
        tern_loop_run_once(loop, 1 * MS);
    }
    cr_assert_eq(atomic_load(&writes_done), n);
    cr_assert(run_until_count(loop, &drains, 1, 1 * MS, 100));
    cr_assert_eq(tern_stream_write_queue_size(loop, wr, &q), 0);
    cr_assert_eq(q, 0);
    cr_assert_eq(atomic_load(&drains), 1);
    cr_assert_eq(tern_stream_close(loop, wr), 0);
    close(p[0]);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}

BACKEND_TEST(pipe, write_to_a_pipe_without_reader_is_epipe)
{
    signal(SIGPIPE, SIG_IGN);
    tern_loop *loop = loop_new_backend(backend);
    int p[2];
    make_pipe(p);
    close(p[0]);
    tern_id wr;
    cr_assert_eq(tern_stream_open(loop, p[1], &wr), 0);
    atomic_store(&writes_done, 0);
    tern_buf b = {"x", 1};
    cr_assert_eq(tern_stream_write(loop, wr, &b, 1, on_write, NULL), 0);
    cr_assert(run_until_count(loop, &writes_done, 1, 10 * MS, 100));
    cr_assert_eq(last_write_status, -EPIPE);
    cr_assert_eq(tern_stream_close(loop, wr), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}

BACKEND_TEST(pipe, fifo_opens_as_a_stream)
{
    tern_loop *loop = loop_new_backend(backend);
    char path[64];
    snprintf(path, sizeof path, "/tmp/tern-fifo-%d", (int)getpid());
    unlink(path);
    cr_assert_eq(mkfifo(path, 0600), 0);
    int r = open(path, O_RDONLY | O_NONBLOCK);
    cr_assert_geq(r, 0);
    int w = open(path, O_WRONLY | O_NONBLOCK);
    cr_assert_geq(w, 0);
    tern_id rd;
    cr_assert_eq(tern_stream_open(loop, r, &rd), 0);
    struct sink s = {0};
    cr_assert_eq(tern_stream_read_start(loop, rd, sink_read, &s), 0);
    cr_assert_eq(write(w, "fifo", 4), 4);
    cr_assert(run_until_count(loop, &s.reads, 1, 10 * MS, 1000));
    cr_assert_eq(s.len, 4);
    close(w);
    cr_assert(run_until_flag(loop, &s.eof, 10 * MS, 1000));
    cr_assert_eq(tern_stream_close(loop, rd), 0);
    cr_assert(run_until_nothing_live(loop));
    unlink(path);
    free(s.buf);
    loop_free_clean(loop);
}

BACKEND_TEST(pipe, regular_file_is_refused_and_left_as_it_was)
{
    tern_loop *loop = loop_new_backend(backend);
    char path[64];
    snprintf(path, sizeof path, "/tmp/tern-regular-%d", (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    cr_assert_geq(fd, 0);
    unlink(path);
    int fl = fcntl(fd, F_GETFL), fdfl = fcntl(fd, F_GETFD);
    tern_id id = 0;
    cr_assert_eq(tern_stream_open(loop, fd, &id), -EPERM);
    cr_assert_eq(fcntl(fd, F_GETFL), fl);
    cr_assert_eq(fcntl(fd, F_GETFD), fdfl);
    cr_assert_eq(loop_live(loop), 0);
    close(fd);
    int dir = open("/tmp", O_RDONLY | O_DIRECTORY);
    cr_assert_eq(tern_stream_open(loop, dir, &id), -EPERM);
    close(dir);
    loop_free_clean(loop);
}

BACKEND_TEST(pipe, tty_calls_on_a_pipe_are_enotty)
{
    tern_loop *loop = loop_new_backend(backend);
    int p[2];
    make_pipe(p);
    tern_id rd;
    cr_assert_eq(tern_stream_open(loop, p[0], &rd), 0);
    unsigned cols = 7, rows = 7;
    cr_assert_eq(tern_tty_set_mode(loop, rd, TERN_TTY_RAW), -ENOTTY);
    cr_assert_eq(tern_tty_winsize(loop, rd, &cols, &rows), -ENOTTY);
    cr_assert_eq(cols, 7);
    cr_assert_eq(tern_tty_set_mode(loop, rd, 9), -EINVAL);
    /* Refused without a trace: the pipe stays non-blocking and still reads. */
    cr_assert(fcntl(p[0], F_GETFL) & O_NONBLOCK);
    struct sink s = {0};
    cr_assert_eq(tern_stream_read_start(loop, rd, sink_read, &s), 0);
    cr_assert_eq(write(p[1], "ok", 2), 2);
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (s.len < 2 && mono_ns() < end)
        tern_loop_run_once(loop, 10 * (int64_t)MS);
    cr_assert_eq(s.len, 2);
    cr_assert_eq(memcmp(s.buf, "ok", 2), 0);
    free(s.buf);
    cr_assert_eq(tern_stream_close(loop, rd), 0);
    cr_assert_eq(tern_tty_set_mode(loop, rd, TERN_TTY_RAW), -ENOENT);
    close(p[1]);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}

/* A pseudo-terminal: the stream is the terminal side. */
static int open_pty(int *master)
{
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    cr_assert_geq(m, 0);
    cr_assert_eq(grantpt(m), 0);
    cr_assert_eq(unlockpt(m), 0);
    int t = open(ptsname(m), O_RDWR | O_NOCTTY);
    cr_assert_geq(t, 0);
    *master = m;
    return t;
}

BACKEND_TEST(pipe, tty_raw_mode_normal_mode_and_window_size)
{
    tern_loop *loop = loop_new_backend(backend);
    int m;
    int t = open_pty(&m);
    struct winsize ws = {.ws_row = 33, .ws_col = 101};
    cr_assert_eq(ioctl(m, TIOCSWINSZ, &ws), 0);
    struct termios before;
    cr_assert_eq(tcgetattr(t, &before), 0);
    cr_assert(before.c_lflag & ICANON);
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, t, &id), 0);
    unsigned cols, rows;
    cr_assert_eq(tern_tty_winsize(loop, id, &cols, &rows), 0);
    cr_assert_eq(cols, 101);
    cr_assert_eq(rows, 33);
    cr_assert_eq(tern_tty_set_mode(loop, id, TERN_TTY_RAW), 0);
    struct termios now;
    cr_assert_eq(tcgetattr(t, &now), 0);
    cr_assert(!(now.c_lflag & (ICANON | ECHO | ISIG)), "raw mode left line editing on");
    /* Raw: a byte arrives without a newline. */
    struct sink s = {0};
    cr_assert_eq(tern_stream_read_start(loop, id, sink_read, &s), 0);
    cr_assert_eq(write(m, "q", 1), 1);
    cr_assert(run_until_count(loop, &s.reads, 1, 10 * MS, 1000));
    cr_assert_eq(s.buf[0], 'q');
    cr_assert_eq(tern_tty_set_mode(loop, id, TERN_TTY_NORMAL), 0);
    cr_assert_eq(tcgetattr(t, &now), 0);
    cr_assert(now.c_lflag & ICANON);
    /* Raw again, then close: the terminal goes back as it was found. */
    cr_assert_eq(tern_tty_set_mode(loop, id, TERN_TTY_RAW), 0);
    int keep = dup(t);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert_eq(tcgetattr(keep, &now), 0);
    cr_assert(now.c_lflag & ICANON, "closing left the terminal raw");
    cr_assert(now.c_lflag & ECHO);
    close(keep);
    close(m);
    cr_assert(run_until_nothing_live(loop));
    free(s.buf);
    loop_free_clean(loop);
}

/* ---------------------------------------------------------------- */
/* Caller-owned read buffers                                         */
/* ---------------------------------------------------------------- */

struct arena {
    char mem[4096];
    size_t used;
    unsigned allocs;
    bool refuse;
    atomic_uint reads;
    atomic_uint nobufs;
    bool in_place;
};

static void *arena_alloc(tern_loop *loop, tern_id id, size_t *len, void *arg)
{
    (void)loop, (void)id;
    struct arena *a = arg;
    cr_assert_eq(*len, 65536);
    a->allocs++;
    if (a->refuse)
        return NULL;
    *len = sizeof a->mem - a->used < 5 ? sizeof a->mem - a->used : 5;
    return a->mem + a->used;
}

static void arena_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                       void *arg)
{
    (void)loop, (void)id;
    struct arena *a = arg;
    if (status == -ENOBUFS) {
        atomic_fetch_add(&a->nobufs, 1);
        return;
    }
    cr_assert_eq(status, 0);
    if (len == 0)
        return;
    /* The data is where the allocator said: the parser reads in place. */
    a->in_place = data == a->mem + a->used;
    cr_assert(a->in_place, "the read did not land in the caller's memory");
    cr_assert_leq(len, 5);
    a->used += len;
    atomic_fetch_add(&a->reads, 1);
}

BACKEND_TEST(pipe, reads_land_in_caller_memory)
{
    tern_loop *loop = loop_new_backend(backend);
    int p[2];
    make_pipe(p);
    tern_id rd;
    cr_assert_eq(tern_stream_open(loop, p[0], &rd), 0);
    static struct arena a;
    memset(&a, 0, sizeof a);
    cr_assert_eq(tern_stream_read_start_alloc(loop, rd, NULL, arena_read, &a), -EINVAL);
    cr_assert_eq(tern_stream_read_start_alloc(loop, rd, arena_alloc, arena_read, &a), 0);
    cr_assert_eq(write(p[1], "hello, world", 12), 12);
    /* Each read is at most what the allocator offered (5 bytes). */
    for (unsigned t = 0; t < 1000 && a.used < 12; t++)
        tern_loop_run_once(loop, 10 * MS);
    cr_assert_eq(a.used, 12);
    cr_assert_geq(atomic_load(&a.reads), 3);
    cr_assert(memcmp(a.mem, "hello, world", 12) == 0);
    /* An allocator that has nothing: -ENOBUFS, reading goes on. */
    a.refuse = true;
    cr_assert_eq(write(p[1], "!", 1), 1);
    cr_assert(run_until_count(loop, &a.nobufs, 1, 10 * MS, 1000));
    a.refuse = false;
    cr_assert(run_until_count(loop, &a.reads, atomic_load(&a.reads) + 1, 10 * MS, 1000));
    cr_assert_eq(a.mem[12], '!');
    /* read_start goes back to tern's own buffer: the allocator is not asked. */
    struct sink s = {0};
    unsigned allocs = a.allocs;
    cr_assert_eq(tern_stream_read_start(loop, rd, sink_read, &s), 0);
    cr_assert_eq(write(p[1], "zz", 2), 2);
    cr_assert(run_until_count(loop, &s.reads, 1, 10 * MS, 1000));
    cr_assert_eq(a.allocs, allocs);
    cr_assert_eq(tern_stream_close(loop, rd), 0);
    close(p[1]);
    cr_assert(run_until_nothing_live(loop));
    free(s.buf);
    loop_free_clean(loop);
}

/* An allocator that closes the stream: no read happens, nothing breaks. */
static void *closing_alloc(tern_loop *loop, tern_id id, size_t *len, void *arg)
{
    (void)len;
    (*(unsigned *)arg)++;
    cr_assert_eq(tern_stream_close(loop, id), 0);
    return NULL;
}

static void no_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                    void *arg)
{
    (void)loop, (void)id, (void)status, (void)data, (void)len, (void)arg;
    cr_assert_fail("read callback ran after the allocator closed the stream");
}

BACKEND_TEST(pipe, allocator_that_closes_the_stream)
{
    tern_loop *loop = loop_new_backend(backend);
    int p[2];
    make_pipe(p);
    tern_id rd;
    cr_assert_eq(tern_stream_open(loop, p[0], &rd), 0);
    static unsigned calls;
    calls = 0;
    cr_assert_eq(tern_stream_read_start_alloc(loop, rd, closing_alloc, no_read, &calls), 0);
    write_byte(p[1]);
    cr_assert(run_until_nothing_live(loop));
    cr_assert_eq(calls, 1);
    close(p[1]);
    loop_free_clean(loop);
}

static void count_io(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    (void)loop, (void)id, (void)fd;
    if (events & TERN_READABLE)
        atomic_fetch_add((atomic_uint *)arg, 1);
}

/*
 * A character device that is always ready (/dev/null, a daemon's stdin):
 * adopted as a stream, a write to it completes and a read reaches end of
 * stream, on every backend; a watcher on it reports it readable.
 */
BACKEND_TEST(pipe, dev_null_is_always_ready)
{
    /* Not kqueue: libkqueue (how kqueue runs here) accepts a /dev/null
     * filter and never reports it, so the case is epoll's and poll's. */
    if (strcmp(backend, "kqueue") == 0) {
        cr_log_info("kqueue: /dev/null is not checked on this backend");
        return;
    }
    tern_loop *loop = loop_new_backend(backend);
    int fd = open("/dev/null", O_RDWR);
    cr_assert_geq(fd, 0);
    tern_id id = 0;
    cr_assert_eq(tern_stream_open(loop, fd, &id), 0);
    atomic_store(&writes_done, 0);
    tern_buf b = {"x", 1};
    cr_assert_eq(tern_stream_write(loop, id, &b, 1, on_write, NULL), 0);
    cr_assert(run_until_count(loop, &writes_done, 1, 10 * MS, 500));
    cr_assert_eq(last_write_status, 0);
    struct sink s = {0};
    int rc = tern_stream_read_start(loop, id, sink_read, &s);
    cr_assert_eq(rc, 0, "read_start on /dev/null: %s", tern_strerror(rc));
    cr_assert(run_until_flag(loop, &s.eof, 10 * MS, 500), "no end of stream from /dev/null");
    cr_assert_eq(s.status, 0);
    cr_assert_eq(s.len, 0);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert(run_until_nothing_live(loop));

    int w = open("/dev/null", O_RDONLY);
    cr_assert_geq(w, 0);
    atomic_uint n = 0;
    tern_id wid = 0;
    cr_assert_eq(tern_io_start(loop, w, TERN_READABLE, count_io, &n, &wid), 0);
    cr_assert(run_until_count(loop, &n, 2, 10 * MS, 500), "a /dev/null watcher never fired");
    cr_assert_eq(tern_io_stop(loop, wid), 0);
    close(w);
    loop_free_clean(loop);
}

/*
 * More always-ready devices than one wait reports (the loop's fired array
 * holds 256): every one is reported in its turn, none starved by those
 * ahead of it; a change of interest and a stop are kept for each.
 */
#define DEVICES 300

BACKEND_TEST(pipe, many_always_ready_devices_each_get_their_turn)
{
    /* Not kqueue: libkqueue never reports /dev/null (see above). */
    if (strcmp(backend, "kqueue") == 0)
        return;
    static int fds[DEVICES];
    static atomic_uint n[DEVICES];
    static tern_id ids[DEVICES];
    tern_loop *loop = loop_new_backend(backend);
    for (int i = 0; i < DEVICES; i++) {
        fds[i] = open("/dev/null", O_RDONLY);
        cr_assert_geq(fds[i], 0);
        atomic_store(&n[i], 0);
        cr_assert_eq(tern_io_start(loop, fds[i], TERN_READABLE, count_io, &n[i], &ids[i]), 0);
    }
    cr_assert_eq(tern_io_modify(loop, ids[0], TERN_READABLE | TERN_WRITABLE), 0);
    uint64_t end = mono_ns() + LIVENESS_NS;
    int seen = 0;
    while (seen < DEVICES && mono_ns() < end) {
        tern_loop_run_once(loop, 0);
        seen = 0;
        for (int i = 0; i < DEVICES; i++)
            seen += atomic_load(&n[i]) > 0;
    }
    cr_assert_eq(seen, DEVICES, "%d of %d devices were reported", seen, DEVICES);
    for (int i = 0; i < DEVICES; i++) {
        cr_assert_eq(tern_io_stop(loop, ids[i]), 0);
        close(fds[i]);
    }
    loop_free_clean(loop);
}
