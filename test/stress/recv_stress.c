/*
 * recv_stress: streams read through io_uring's multishot receive while the
 * loop stops and starts reading at random, switches between tern's
 * buffers and the caller's, and closes streams part way, against a writer
 * thread that keeps every peer's socket as full as it can.
 *
 * Each round is one loop on io_uring with 48 TCP connections and 16
 * Unix-domain socket pairs. The writer sends each connection a stream of
 * a known pattern (0.5..6 MB in chunks of 1 byte..40 KB; on a Unix
 * pair every fifth chunk passes a descriptor), then shuts its side down.
 * The loop ticks every 500 us and, at random, stops or starts reading a
 * stream (into its own buffers or an allocator's 1 byte..4 KiB), and now
 * and then closes one; a read callback stops reading now and then too.
 * The round ends with the loop freed while receives are still in the
 * kernel and bytes wait in buffers (ASan, TSan and valgrind watch that).
 *
 * Checked: every byte delivered is the next byte of its stream's pattern
 * (nothing lost, repeated or reordered across stops, restarts and the
 * switch of buffers); a stream read to its end got exactly what the writer
 * sent and one descriptor per chunk that passed one; over the run, reads
 * were stopped and restarted with bytes waiting, streams were closed with
 * receives in flight, and the allocator read bytes the kernel had taken.
 * Bounded: 3 rounds, each until every stream has ended or been closed.
 */
#include "stress.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#define ROUNDS 3
#define TCP_CONNS 48
#define UNIX_CONNS 16
#define CONNS (TCP_CONNS + UNIX_CONNS)
#define ROUND_NS (60 * STRESS_SEC)

struct conn {
    int peer; /* the writer's end (nonblocking) */
    tern_id id;
    bool unix_pair;
    /* writer thread */
    size_t total, sent, chunk_left;
    unsigned chunk_no;
    uint64_t wrng;
    _Atomic size_t final_sent; /* published before the shutdown */
    _Atomic unsigned fds_sent;
    atomic_bool writer_done;
    /* loop thread */
    size_t got;
    unsigned fds_got;
    bool reading, alloc, ended, closed;
    char mem[4096];
    size_t cap;
};

static struct conn conns[CONNS];
static tern_loop *loop;
static uint64_t lrng;
static unsigned open_streams;
static unsigned long long restarts, closes_inflight, alloc_reads, cb_stops, ended_streams;
static int devnull;

static unsigned char pattern(unsigned c, size_t i)
{
    return (unsigned char)((i * 13 + c * 101) ^ (i >> 9));
}

static void tcp_pair(int *ours, int *peer)
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    STRESS_CHECK(l >= 0 && bind(l, (struct sockaddr *)&a, sizeof a) == 0 && listen(l, 1) == 0 &&
                     getsockname(l, (struct sockaddr *)&a, &al) == 0,
                 "a listener on the loopback");
    *peer = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    STRESS_CHECK(*peer >= 0 && connect(*peer, (struct sockaddr *)&a, sizeof a) == 0,
                 "connect on the loopback");
    *ours = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    STRESS_CHECK(*ours >= 0, "accept on the loopback");
    close(l);
}

/* ------------------------------------------------------------------ */
/* The writer                                                          */
/* ------------------------------------------------------------------ */

/* One nonblocking send of the next chunk's bytes; false when the socket is full or gone. */
static bool write_some(unsigned c)
{
    struct conn *k = &conns[c];
    if (k->chunk_left == 0) {
        k->chunk_left = 1 + stress_below(&k->wrng, 40000);
        if (k->chunk_left > k->total - k->sent)
            k->chunk_left = k->total - k->sent;
        k->chunk_no++;
    }
    unsigned char buf[40000];
    size_t n = k->chunk_left;
    for (size_t i = 0; i < n; i++)
        buf[i] = pattern(c, k->sent + i);
    struct iovec iov = {buf, n};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    union {
        char b[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } cm;
    memset(&cm, 0, sizeof cm);
    /* A descriptor goes with a chunk's first byte, every fifth chunk. */
    bool pass = k->unix_pair && k->chunk_no % 5 == 0 && k->chunk_left == n;
    if (pass) {
        m.msg_control = cm.b;
        m.msg_controllen = sizeof cm.b;
        struct cmsghdr *h = CMSG_FIRSTHDR(&m);
        h->cmsg_level = SOL_SOCKET;
        h->cmsg_type = SCM_RIGHTS;
        h->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(h), &devnull, sizeof(int));
    }
    ssize_t w = sendmsg(k->peer, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            atomic_store(&k->writer_done, true); /* closed by the loop */
        return false;
    }
    if (pass)
        atomic_fetch_add(&k->fds_sent, 1);
    k->sent += (size_t)w;
    k->chunk_left -= (size_t)w;
    if (k->sent == k->total) {
        atomic_store_explicit(&k->final_sent, k->sent, memory_order_release);
        shutdown(k->peer, SHUT_WR);
        atomic_store(&k->writer_done, true);
    }
    return true;
}

static void *writer_main(void *arg)
{
    (void)arg;
    for (;;) {
        struct pollfd p[CONNS];
        unsigned n = 0;
        bool progress = false;
        for (unsigned c = 0; c < CONNS; c++) {
            if (atomic_load(&conns[c].writer_done))
                continue;
            if (write_some(c))
                progress = true;
            if (!atomic_load(&conns[c].writer_done))
                p[n++] = (struct pollfd){.fd = conns[c].peer, .events = POLLOUT};
        }
        if (n == 0)
            return NULL;
        if (!progress)
            (void)poll(p, n, 10);
    }
}

/* ------------------------------------------------------------------ */
/* The loop                                                            */
/* ------------------------------------------------------------------ */

static void on_read(tern_loop *l, tern_id id, int status, const void *data, size_t len, void *arg);

static void *alloc_cb(tern_loop *l, tern_id id, size_t *len, void *arg)
{
    (void)l;
    (void)id;
    struct conn *k = arg;
    *len = k->cap;
    return k->mem;
}

static void take_fds(struct conn *k)
{
    int fd;
    while ((fd = tern_unix_take_fd(loop, k->id)) >= 0) {
        k->fds_got++;
        close(fd);
    }
}

static void on_close(tern_loop *l, tern_id id, void *arg)
{
    (void)l;
    (void)id;
    (void)arg;
    open_streams--;
}

static void close_stream(struct conn *k)
{
    if (k->unix_pair)
        take_fds(k);
    STRESS_CHECK(tern_stream_close(loop, k->id) == 0, "close");
    k->closed = true;
}

static void on_read(tern_loop *l, tern_id id, int status, const void *data, size_t len, void *arg)
{
    (void)l;
    (void)id;
    struct conn *k = arg;
    unsigned c = (unsigned)(k - conns);
    if (k->unix_pair)
        take_fds(k);
    if (len == 0) {
        STRESS_CHECK(status == 0, "stream %u ended with %s", c, tern_strerror(status));
        size_t sent = atomic_load_explicit(&k->final_sent, memory_order_acquire);
        STRESS_CHECK(k->got == sent, "stream %u: %zu bytes read, %zu sent", c, k->got, sent);
        STRESS_CHECK(k->fds_got == atomic_load(&k->fds_sent), "stream %u: %u descriptors of %u", c,
                     k->fds_got, atomic_load(&k->fds_sent));
        k->ended = true;
        k->reading = false;
        ended_streams++;
        close_stream(k);
        return;
    }
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++)
        if (p[i] != pattern(c, k->got + i)) {
            STRESS_CHECK(false, "stream %u: byte %zu wrong", c, k->got + i);
            break;
        }
    k->got += len;
    if (k->alloc)
        alloc_reads++;
    if (stress_below(&lrng, 50) == 0) {
        STRESS_CHECK(tern_stream_read_stop(loop, k->id) == 0, "read_stop in a callback");
        k->reading = false;
        cb_stops++;
    }
}

static void start_reading(struct conn *k)
{
    k->alloc = stress_below(&lrng, 4) == 0;
    k->cap = 1 + stress_below(&lrng, sizeof k->mem);
    int rc = k->alloc ? tern_stream_read_start_alloc(loop, k->id, alloc_cb, on_read, k)
                      : tern_stream_read_start(loop, k->id, on_read, k);
    STRESS_CHECK(rc == 0, "read_start: %s", tern_strerror(rc));
    k->reading = true;
}

static void on_tick(tern_loop *l, tern_id timer, void *arg)
{
    (void)l;
    (void)timer;
    (void)arg;
    for (unsigned i = 0; i < 16; i++) {
        struct conn *k = &conns[stress_below(&lrng, CONNS)];
        if (k->closed)
            continue;
        unsigned r = (unsigned)stress_below(&lrng, 100);
        if (r < 2) {
            closes_inflight += k->reading;
            close_stream(k);
        } else if (k->reading && r < 40) {
            STRESS_CHECK(tern_stream_read_stop(loop, k->id) == 0, "read_stop");
            k->reading = false;
        } else if (!k->reading) {
            start_reading(k);
            restarts++;
        }
    }
}

static void round_run(unsigned round)
{
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.backend = "io_uring";
    STRESS_CHECK(tern_loop_new(&loop, &o) == 0, "loop");
    lrng = stress_seed(round);
    memset(conns, 0, sizeof conns);
    for (unsigned c = 0; c < CONNS; c++) {
        struct conn *k = &conns[c];
        int ours;
        k->unix_pair = c >= TCP_CONNS;
        if (k->unix_pair) {
            int sp[2];
            STRESS_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0, "socketpair");
            ours = sp[0];
            k->peer = sp[1];
        } else {
            tcp_pair(&ours, &k->peer);
        }
        k->wrng = stress_seed(1000 + round * CONNS + c);
        k->total = 500000 + stress_below(&k->wrng, 5500000);
        STRESS_CHECK(tern_stream_open(loop, ours, &k->id) == 0, "stream_open");
        STRESS_CHECK(tern_stream_on_close(loop, k->id, on_close, k) == 0, "on_close");
        open_streams++;
        start_reading(k);
    }
    tern_id tick;
    STRESS_CHECK(tern_timer_start(loop, 500 * 1000, 500 * 1000, on_tick, NULL, &tick) == 0, "tick");
    pthread_t w;
    STRESS_CHECK(pthread_create(&w, NULL, writer_main, NULL) == 0, "writer");
    stress_watch_loop(loop, "recv_stress");
    stress_phase("a round of reads, stops and closes", ROUND_NS);
    /* Until every stream ended or was closed, then a little longer with
     * whatever the kernel still delivers, then free with receives live. */
    while (open_streams > 0)
        tern_loop_run_once(loop, 10 * STRESS_MS);
    /* Inside the phase: a socket tern closed but the kernel kept open
     * (a request still holding its file) stalls the writer here. */
    STRESS_CHECK(pthread_join(w, NULL) == 0, "writer join");
    stress_phase_end();
    stress_unwatch_loop(loop);
    tern_timer_stop(loop, tick);
    stress_loop_free(loop);
    for (unsigned c = 0; c < CONNS; c++)
        close(conns[c].peer);
}

static void report(void)
{
    printf("recv_stress: restarts %llu, closes with a receive in flight %llu, reads into the "
           "caller's memory %llu, stops in a callback %llu, streams read to their end %llu\n",
           restarts, closes_inflight, alloc_reads, cb_stops, ended_streams);
}

int main(void)
{
    stress_init("recv_stress", UINT64_C(0x5eed4ecf));
    stress_on_report(report);
    tern_loop *probe;
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.backend = "io_uring";
    if (tern_loop_new(&probe, &o) != 0 || strcmp(tern_loop_backend_name(probe), "io_uring") != 0) {
        printf("recv_stress: io_uring is not available here (skipped)\n");
        return 77;
    }
    tern_loop_free(probe);
    devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    for (unsigned round = 0; round < ROUNDS; round++)
        round_run(round);
    report();
    STRESS_CHECK(restarts > 0 && cb_stops > 0 && alloc_reads > 0,
                 "reads stopped and restarted (%llu), in callbacks (%llu), into the caller's "
                 "memory (%llu)",
                 restarts, cb_stops, alloc_reads);
    STRESS_CHECK(closes_inflight > 0 && ended_streams > 0,
                 "streams closed while reading (%llu) and read to their end (%llu)",
                 closes_inflight, ended_streams);
    close(devnull);
    return stress_summary();
}
