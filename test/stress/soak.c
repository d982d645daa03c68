/*
 * soak: every feature at once, across several loops and threads, for a
 * bounded time; then every count is checked.
 *
 * Three loops (epoll; poll; epoll with TERN_LOOP_RCU), each on its own
 * thread, each driven by a 1 ms repeating tick that:
 *   - submits bounded jobs (a short hash) and long jobs (that sleep in
 *     small steps, watching tern_job_cancelled) and cancels some of them;
 *   - starts one-shot timers of 0-2 ms and stops some before they fire;
 *   - resolves "localhost" on the pool;
 *   - connects to a random loop's TCP echo listener (by number or by name),
 *     writes 1 B-64 KiB and checks the echo byte for byte, then closes.
 * Two foreign threads post to random loops, write bytes into socketpairs
 * the loops watch, and cancel recent job ids from outside. A churn thread
 * creates short-lived loops, gives them jobs, timers, posts and defers and
 * frees them with all of it in flight.
 *
 * At the end (two phases: stop starting work and let it finish; then
 * close listeners, timers and watchers) every count must balance: posts
 * accepted == run, jobs accepted == completions (each exactly once),
 * timers started == fired + stopped, lookups accepted == answered,
 * connections connected == accepted by a listener == echoed == closed,
 * bytes written to the socketpairs == bytes read by the watchers, nothing
 * live in any loop, and the pool's submitted == completed + cancelled +
 * timed_out.
 *
 * Duration: argv[1] or TERN_SOAK_SECONDS (seconds, default 10). Seed:
 * TERN_SEED (default 0x50a4ed; the work mix, thread timing still varies
 * run to run). Every wait is bounded by the harness's watchdog (stress.h). Network:
 * loopback only. Standalone, so it also runs under ThreadSanitizer and
 * valgrind. Ends with "N passed, N failed".
 */
#include <netdb.h>
#include <sys/socket.h>

#include "stress.h"

#define DEFAULT_SEED UINT64_C(0x50a4ed)
static uint64_t SEED; /* the run's seed (TERN_SEED), set in main */
#define LOOPS 3
#define POSTERS 2
#define PAIRS 2
#define RECENT 16
#define MSG_MAX 65536
#define MAX_JOBS 48      /* per loop in flight */
#define MAX_LONG 3       /* per loop in flight */
#define MAX_CONNS 6      /* per loop in flight */
#define MAX_LOOKUPS 2    /* per loop in flight */
#define WIND_DOWN_NS (UINT64_C(60) * 1000000000u) /* liveness backstop, not a bound on speed */
#define MS UINT64_C(1000000)

/* Violations seen inside callbacks: each is printed, and the run fails. */
static atomic_uint violations;

#define CHECK(cond, ...) STRESS_CHECK((cond), __VA_ARGS__)

#define VIOLATION(...)                                                                             \
    do {                                                                                           \
        atomic_fetch_add(&violations, 1);                                                          \
        printf("VIOLATION %s:%d: ", __FILE__, __LINE__);                                           \
        printf(__VA_ARGS__);                                                                       \
        printf("\n");                                                                              \
        fflush(stdout);                                                                            \
    } while (0)

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
                          .tv_nsec = (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * UINT64_C(2685821657736338717);
}

static unsigned rnd(uint64_t *s, unsigned n)
{
    return (unsigned)(rng_next(s) % n);
}

static unsigned char pattern[MSG_MAX]; /* what clients send; read-only once threads run */

/* ------------------------------------------------------------------ */
/* Per-loop state                                                      */
/* ------------------------------------------------------------------ */

enum { RUNNING = 0, ENDING = 1, CLOSING = 2 };

struct lstate {
    int index;
    tern_loop *loop;
    pthread_t thread;
    uint64_t rng;
    atomic_int phase;
    atomic_bool quiet, returned;
    int run_result;
    tern_id tick, listener;

    /* fd watchers on socketpairs: foreign threads write [1], the loop reads [0] */
    int sp[PAIRS][2];
    tern_id io[PAIRS];
    atomic_uint_fast64_t sp_written[PAIRS];
    uint64_t sp_read[PAIRS];

    /* counted on the loop thread unless atomic */
    atomic_uint_fast64_t posts_sent, posts_refused;
    uint64_t posts_ran, ticks;
    uint64_t jobs_accepted, jobs_refused, jobs_done, jobs_cancelled, cancels_asked;
    unsigned jobs_inflight, long_inflight;
    _Atomic tern_id recent_jobs[RECENT]; /* read by foreign cancellers */
    uint64_t timers_started, timers_fired, timers_stopped;
    tern_id recent_timers[8];
    uint64_t lookups_accepted, lookups_done;
    unsigned lookups_inflight;
    uint64_t conns_started, conns_connected, conns_echoed, conns_closed;
    unsigned conns_inflight;
    uint64_t bytes_echoed;
    uint64_t srv_accepted, srv_closed;
};

static struct lstate loops[LOOPS];
static unsigned ports[LOOPS];

/* ------------------------------------------------------------------ */
/* Jobs                                                                */
/* ------------------------------------------------------------------ */

#define JOB_MAGIC 0x10bb10bbu

struct job {
    unsigned magic;
    struct lstate *ls;
    tern_id id;
    bool is_long;
    unsigned spin;
};

static void *job_work(tern_job *job, void *arg)
{
    struct job *j = arg;
    if (j->is_long) {
        /* Holds its thread a few ms, as a connection would, unless cancelled. */
        for (unsigned i = 0; i < j->spin && !tern_job_cancelled(job); i++)
            sleep_ns(200000);
        return j;
    }
    uint64_t h = j->spin;
    for (unsigned i = 0; i < j->spin * 64 && !tern_job_cancelled(job); i++)
        h = h * 31 + i;
    return h == 42 ? NULL : j; /* keep the hash from being optimised away */
}

static void job_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop;
    struct job *j = arg;
    if (j->magic != JOB_MAGIC || j->id != id)
        VIOLATION("job completion for a job that is not live (twice?) id %" PRIu64, id);
    if (status != 0 && status != -ECANCELED)
        VIOLATION("job status %s", tern_err_name(status));
    if (result != j && !(result == NULL && status == -ECANCELED))
        VIOLATION("job result %p is not the job's", result);
    struct lstate *ls = j->ls;
    ls->jobs_done++;
    ls->jobs_cancelled += status == -ECANCELED;
    ls->jobs_inflight--;
    ls->long_inflight -= j->is_long;
    j->magic = 0;
    free(j);
}

static void submit_one(struct lstate *ls, bool is_long)
{
    struct job *j = malloc(sizeof(*j));
    *j = (struct job){.magic = JOB_MAGIC, .ls = ls, .is_long = is_long,
                      .spin = is_long ? 1 + rnd(&ls->rng, 25) : rnd(&ls->rng, 200)};
    int rc = tern_submit(ls->loop, is_long ? TERN_LONG : TERN_BOUNDED, job_work, job_done, j,
                         &j->id);
    if (rc < 0) {
        /* The pool may refuse honestly (queue full, long ceiling); nothing else. */
        if (rc != -EAGAIN)
            VIOLATION("tern_submit: %s", tern_err_name(rc));
        ls->jobs_refused++;
        free(j);
        return;
    }
    ls->jobs_accepted++;
    ls->jobs_inflight++;
    ls->long_inflight += is_long;
    atomic_store_explicit(&ls->recent_jobs[rnd(&ls->rng, RECENT)], j->id, memory_order_relaxed);
}

/* ------------------------------------------------------------------ */
/* Timers, lookups                                                     */
/* ------------------------------------------------------------------ */

static void timer_fired(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    ((struct lstate *)arg)->timers_fired++;
}

static void timers_tick(struct lstate *ls)
{
    for (unsigned k = rnd(&ls->rng, 3); k > 0; k--) {
        tern_id id;
        int rc = tern_timer_start(ls->loop, rnd(&ls->rng, 2000) * 1000ull, 0, timer_fired, ls, &id);
        if (rc < 0) {
            VIOLATION("tern_timer_start: %s", tern_err_name(rc));
            continue;
        }
        ls->timers_started++;
        ls->recent_timers[rnd(&ls->rng, 8)] = id;
    }
    if (rnd(&ls->rng, 4) == 0) {
        unsigned slot = rnd(&ls->rng, 8);
        tern_id id = ls->recent_timers[slot];
        ls->recent_timers[slot] = 0;
        if (id != 0) {
            int rc = tern_timer_stop(ls->loop, id);
            if (rc == 0)
                ls->timers_stopped++;
            else if (rc != -ENOENT) /* it fired already */
                VIOLATION("tern_timer_stop: %s", tern_err_name(rc));
        }
    }
}

static void lookup_cb(tern_loop *loop, tern_id id, int status, struct addrinfo *res, void *arg)
{
    (void)loop;
    (void)id;
    struct lstate *ls = arg;
    if (status != 0 || res == NULL)
        VIOLATION("lookup of localhost: %s", tern_err_name(status));
    tern_freeaddrinfo(res);
    ls->lookups_done++;
    ls->lookups_inflight--;
}

static void lookup_one(struct lstate *ls)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
    int rc = tern_resolve(ls->loop, "localhost", NULL, &hints, lookup_cb, ls, NULL);
    if (rc < 0) {
        if (rc != -EAGAIN)
            VIOLATION("tern_resolve: %s", tern_err_name(rc));
        return;
    }
    ls->lookups_accepted++;
    ls->lookups_inflight++;
}

/* ------------------------------------------------------------------ */
/* TCP: an echo server per loop, clients that check the echo           */
/* ------------------------------------------------------------------ */

static void srv_written(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop;
    (void)id;
    if (status != 0 && status != -ECANCELED && status != -EPIPE && status != -ECONNRESET)
        VIOLATION("echo write: %s", tern_err_name(status));
    free(arg);
}

static void srv_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                     void *arg)
{
    (void)arg;
    if (status < 0 || len == 0) {
        tern_stream_close(loop, id);
        return;
    }
    void *copy = malloc(len);
    memcpy(copy, data, len);
    tern_buf b = {copy, len};
    int rc = tern_stream_write(loop, id, &b, 1, srv_written, copy);
    if (rc < 0) {
        VIOLATION("echo tern_stream_write: %s", tern_err_name(rc));
        free(copy);
    }
}

static void srv_closed(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    ((struct lstate *)arg)->srv_closed++;
}

static void srv_accept(tern_loop *loop, tern_id listener, int status, tern_id stream, void *arg)
{
    (void)listener;
    struct lstate *ls = arg;
    if (status < 0) {
        VIOLATION("accept: %s", tern_err_name(status));
        return;
    }
    ls->srv_accepted++;
    int rc = tern_stream_on_close(loop, stream, srv_closed, ls);
    if (rc == 0)
        rc = tern_stream_read_start(loop, stream, srv_read, ls);
    if (rc < 0)
        VIOLATION("server stream setup: %s", tern_err_name(rc));
}

struct conn {
    struct lstate *ls;
    size_t len, got;
    bool connected, echoed;
};

static void cli_closed(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    struct conn *c = arg;
    c->ls->conns_closed++;
    c->ls->conns_inflight--;
    if (!c->echoed)
        VIOLATION("a client closed before its echo came back (%zu of %zu bytes)", c->got, c->len);
    free(c);
}

static void cli_written(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
    if (status != 0)
        VIOLATION("client write: %s", tern_err_name(status));
}

static void cli_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                     void *arg)
{
    struct conn *c = arg;
    if (status < 0 || len == 0) {
        VIOLATION("client read: %s after %zu of %zu bytes", status ? tern_err_name(status) : "EOF",
                  c->got, c->len);
        tern_stream_close(loop, id);
        return;
    }
    if (c->got + len > c->len || memcmp(data, pattern + c->got, len) != 0)
        VIOLATION("the echo differs from what was sent at byte %zu", c->got);
    c->got += len;
    if (c->got >= c->len) {
        c->echoed = true;
        c->ls->conns_echoed++;
        c->ls->bytes_echoed += c->len;
        tern_stream_close(loop, id);
    }
}

static void cli_connected(tern_loop *loop, tern_id id, int status, void *arg)
{
    struct conn *c = arg;
    if (status < 0) {
        VIOLATION("connect over loopback: %s", tern_err_name(status));
        return; /* the stream is closed; cli_closed follows */
    }
    c->connected = true;
    c->ls->conns_connected++;
    tern_buf b = {pattern, c->len};
    int rc = tern_stream_write(loop, id, &b, 1, cli_written, c);
    if (rc >= 0)
        rc = tern_stream_read_start(loop, id, cli_read, c);
    if (rc < 0) {
        VIOLATION("client setup: %s", tern_err_name(rc));
        tern_stream_close(loop, id);
    }
}

static void connect_one(struct lstate *ls)
{
    struct conn *c = calloc(1, sizeof(*c));
    c->ls = ls;
    c->len = 1 + rnd(&ls->rng, MSG_MAX);
    unsigned target = rnd(&ls->rng, LOOPS);
    const char *host = rnd(&ls->rng, 4) == 0 ? "localhost" : "127.0.0.1";
    tern_id id;
    int rc = tern_tcp_connect(ls->loop, host, ports[target], 0, cli_connected, c, &id);
    if (rc == 0)
        rc = tern_stream_on_close(ls->loop, id, cli_closed, c);
    if (rc < 0) {
        /* tern_stream_on_close cannot fail on a fresh id; a refused connect owes nothing. */
        if (rc != -EAGAIN)
            VIOLATION("tern_tcp_connect: %s", tern_err_name(rc));
        free(c);
        return;
    }
    ls->conns_started++;
    ls->conns_inflight++;
}

/* ------------------------------------------------------------------ */
/* fd watchers on socketpairs                                          */
/* ------------------------------------------------------------------ */

static uint64_t drain_pair(int fd)
{
    char buf[4096];
    uint64_t total = 0;
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0)
        total += (uint64_t)n;
    return total;
}

static void pair_readable(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    (void)loop;
    struct lstate *ls = arg;
    unsigned i = id == ls->io[0] ? 0 : 1;
    if (id != ls->io[i] || fd != ls->sp[i][0] || !(events & TERN_READABLE))
        VIOLATION("watcher callback for the wrong fd or event (%u)", events);
    ls->sp_read[i] += drain_pair(fd);
}

/* ------------------------------------------------------------------ */
/* The tick and the phases                                             */
/* ------------------------------------------------------------------ */

static void tick(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    struct lstate *ls = arg;
    ls->ticks++;
    if (atomic_load(&ls->phase) != RUNNING) {
        /* Ending: start nothing, and say when everything started is back. */
        if (ls->jobs_inflight == 0 && ls->conns_inflight == 0 && ls->lookups_inflight == 0)
            atomic_store(&ls->quiet, true);
        return;
    }
    for (unsigned k = rnd(&ls->rng, 5); k > 0 && ls->jobs_inflight < MAX_JOBS; k--)
        submit_one(ls, false);
    if (ls->long_inflight < MAX_LONG && rnd(&ls->rng, 4) == 0)
        submit_one(ls, true);
    if (rnd(&ls->rng, 3) == 0) {
        tern_id victim = atomic_load_explicit(&ls->recent_jobs[rnd(&ls->rng, RECENT)],
                                              memory_order_relaxed);
        if (victim != 0) {
            int rc = tern_cancel(loop, victim);
            if (rc < 0 && rc != -ENOENT)
                VIOLATION("tern_cancel: %s", tern_err_name(rc));
            ls->cancels_asked++;
        }
    }
    timers_tick(ls);
    if (ls->lookups_inflight < MAX_LOOKUPS && rnd(&ls->rng, 20) == 0)
        lookup_one(ls);
    if (ls->conns_inflight < MAX_CONNS && rnd(&ls->rng, 4) == 0)
        connect_one(ls);
}

static void post_ran(tern_loop *loop, void *arg)
{
    struct lstate *ls = arg;
    if (tern_loop_current() != loop || loop != ls->loop)
        VIOLATION("a post ran off its loop's thread");
    ls->posts_ran++;
}

static void phase_ending(tern_loop *loop, void *arg)
{
    (void)loop;
    atomic_store(&((struct lstate *)arg)->phase, ENDING);
}

/* Close what keeps the loop alive; tern_loop_run then returns 0. */
static void phase_closing(tern_loop *loop, void *arg)
{
    struct lstate *ls = arg;
    atomic_store(&ls->phase, CLOSING);
    if (tern_timer_stop(loop, ls->tick) != 0)
        VIOLATION("tick stop");
    if (tern_stream_close(loop, ls->listener) != 0)
        VIOLATION("listener close");
    for (unsigned i = 0; i < PAIRS; i++) {
        /* The writers have been joined: whatever they wrote is in the socket now. */
        ls->sp_read[i] += drain_pair(ls->sp[i][0]);
        if (tern_io_stop(loop, ls->io[i]) != 0)
            VIOLATION("watcher stop");
    }
}

static void *loop_main(void *arg)
{
    struct lstate *ls = arg;
    ls->run_result = tern_loop_run(ls->loop);
    atomic_store(&ls->returned, true);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Foreign threads: posters and the loop churn                         */
/* ------------------------------------------------------------------ */

static atomic_bool stop_foreign;
static atomic_uint_fast64_t foreign_cancels, churn_loops, churn_jobs;

static void *poster_main(void *arg)
{
    uint64_t rng = SEED ^ (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull;
    for (unsigned n = 0; !atomic_load(&stop_foreign); n++) {
        struct lstate *ls = &loops[rnd(&rng, LOOPS)];
        unsigned op = rnd(&rng, 8);
        if (op < 5) {
            int rc = tern_post(ls->loop, post_ran, ls);
            if (rc == 0)
                atomic_fetch_add(&ls->posts_sent, 1);
            else if (rc == -EAGAIN)
                atomic_fetch_add(&ls->posts_refused, 1);
            else
                VIOLATION("tern_post: %s", tern_err_name(rc));
        } else if (op < 7) {
            unsigned i = rnd(&rng, PAIRS);
            char bytes[16] = {0};
            ssize_t w = write(ls->sp[i][1], bytes, 1 + rnd(&rng, sizeof(bytes)));
            if (w > 0)
                atomic_fetch_add(&ls->sp_written[i], (uint64_t)w);
        } else {
            tern_id victim = atomic_load_explicit(&ls->recent_jobs[rnd(&rng, RECENT)],
                                                  memory_order_relaxed);
            /* Always queued: from a thread that is not running the loop. */
            if (victim != 0) {
                int rc = tern_cancel(ls->loop, victim);
                if (rc != TERN_CANCEL_REQUESTED)
                    VIOLATION("foreign tern_cancel: %s", tern_err_name(rc));
                atomic_fetch_add(&foreign_cancels, 1);
            }
        }
        if (n % 32 == 31)
            sleep_ns(100000); /* leave the two cores some air */
    }
    return NULL;
}

struct churn_job {
    atomic_uint done;
};

static void *churn_work(tern_job *job, void *arg)
{
    (void)arg;
    for (unsigned i = 0; i < 250 && !tern_job_cancelled(job); i++)
        sleep_ns(200000);
    return arg;
}

static void churn_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop;
    (void)id;
    (void)result;
    if (status != 0 && status != -ECANCELED)
        VIOLATION("churn job status %s", tern_err_name(status));
    atomic_fetch_add(&((struct churn_job *)arg)->done, 1);
}

static void churn_count(tern_loop *loop, void *arg)
{
    (void)loop;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

static void churn_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
}

/* Loops freed with jobs, timers, posts and defers in flight. */
static void *churn_main(void *arg)
{
    uint64_t rng = SEED ^ (uintptr_t)arg;
    while (!atomic_load(&stop_foreign)) {
        tern_loop *loop;
        if (tern_loop_new(&loop, NULL) != 0) {
            VIOLATION("churn tern_loop_new");
            return NULL;
        }
        struct churn_job jobs[4];
        bool accepted[4];
        atomic_uint ran = 0;
        unsigned posted = 0;
        for (unsigned i = 0; i < 4; i++) {
            atomic_init(&jobs[i].done, 0);
            int rc = tern_submit(loop, rnd(&rng, 2) ? TERN_LONG : TERN_BOUNDED, churn_work,
                                 churn_done, &jobs[i], NULL);
            accepted[i] = rc == 0;
            if (rc != 0 && rc != -EAGAIN)
                VIOLATION("churn tern_submit: %s", tern_err_name(rc));
        }
        tern_timer_start(loop, rnd(&rng, 1000) * 1000ull, 0, churn_timer, NULL, NULL);
        posted += tern_post(loop, churn_count, &ran) == 0;
        posted += tern_defer(loop, churn_count, &ran) == 0;
        for (unsigned k = rnd(&rng, 3); k > 0; k--)
            tern_loop_run_once(loop, 0);
        tern_loop_free(loop);
        /* Free returned: every accepted job has completed exactly once, posts and defers ran. */
        for (unsigned i = 0; i < 4; i++) {
            unsigned d = atomic_load(&jobs[i].done);
            if (d != (accepted[i] ? 1u : 0u))
                VIOLATION("churn job %u: %u completions after tern_loop_free (accepted %d)", i, d,
                          accepted[i]);
            churn_jobs += accepted[i];
        }
        if (atomic_load(&ran) != posted)
            VIOLATION("churn: %u of %u posts and defers ran before tern_loop_free returned",
                      atomic_load(&ran), posted);
        atomic_fetch_add(&churn_loops, 1);
        sleep_ns(2 * MS);
    }
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Setup, the run, the books                                           */
/* ------------------------------------------------------------------ */

static void setup_loop(struct lstate *ls, int index)
{
    static const char *const backends[LOOPS] = {"epoll", "poll", "epoll"};
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.backend = backends[index];
    o.flags = index == 2 ? TERN_LOOP_RCU : 0;
    ls->index = index;
    ls->rng = SEED + (uint64_t)index * 0x1000193;
    int rc = tern_loop_new(&ls->loop, &o);
    if (rc != 0) {
        printf("tern_loop_new(%s): %s\n", backends[index], tern_strerror(rc));
        exit(1);
    }
    rc = tern_tcp_listen(ls->loop, "127.0.0.1", 0, TERN_TCP_BACKLOG_DEFAULT, 0, srv_accept, ls,
                         &ls->listener);
    if (rc == 0)
        rc = tern_tcp_port(ls->loop, ls->listener, &ports[index]);
    for (unsigned i = 0; i < PAIRS && rc == 0; i++) {
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, ls->sp[i]) != 0)
            rc = -errno;
        else
            rc =
                tern_io_start(ls->loop, ls->sp[i][0], TERN_READABLE, pair_readable, ls, &ls->io[i]);
    }
    if (rc == 0)
        rc = tern_timer_start(ls->loop, MS, MS, tick, ls, &ls->tick);
    if (rc != 0) {
        printf("setting up loop %d: %s\n", index, tern_strerror(rc));
        exit(1);
    }
}

/* Post fn to every loop; then wait until every loop's flag is set. */
static bool all_loops(tern_fn fn, size_t flag_offset)
{
    for (int i = 0; i < LOOPS; i++)
        CHECK(tern_post(loops[i].loop, fn, &loops[i]) == 0, "posting a phase to loop %d", i);
    uint64_t end = mono_ns() + WIND_DOWN_NS;
    for (int i = 0; i < LOOPS; i++) {
        atomic_bool *flag = (atomic_bool *)((char *)&loops[i] + flag_offset);
        while (!atomic_load(flag)) {
            if (mono_ns() > end) {
                printf("loop %d did not wind down: jobs %u, conns %u, lookups %u in flight\n", i,
                       loops[i].jobs_inflight, loops[i].conns_inflight, loops[i].lookups_inflight);
                return false;
            }
            sleep_ns(MS);
        }
    }
    return true;
}

static void check_books(struct lstate *ls)
{
    int i = ls->index;
    tern_loop_stats st;
    tern_loop_stats_get(ls->loop, &st);
    CHECK(ls->run_result == 0, "loop %d: tern_loop_run returned %d with work live", i,
          ls->run_result);
    CHECK(st.live_operations == 0, "loop %d: %u operations still live", i, st.live_operations);
    CHECK(st.undelivered == 0, "loop %d: %u completions undelivered", i, st.undelivered);
    CHECK(ls->posts_ran == atomic_load(&ls->posts_sent), "loop %d: posts accepted %" PRIu64
          " but ran %" PRIu64, i, (uint64_t)atomic_load(&ls->posts_sent), ls->posts_ran);
    CHECK(ls->jobs_done == ls->jobs_accepted, "loop %d: jobs accepted %" PRIu64 ", completed %"
          PRIu64, i, ls->jobs_accepted, ls->jobs_done);
    CHECK(ls->jobs_inflight == 0 && ls->long_inflight == 0, "loop %d: jobs in flight", i);
    CHECK(ls->timers_fired + ls->timers_stopped == ls->timers_started, "loop %d: timers started %"
          PRIu64 " != fired %" PRIu64 " + stopped %" PRIu64, i, ls->timers_started,
          ls->timers_fired, ls->timers_stopped);
    CHECK(ls->lookups_done == ls->lookups_accepted, "loop %d: lookups %" PRIu64 " of %" PRIu64, i,
          ls->lookups_done, ls->lookups_accepted);
    CHECK(ls->conns_closed == ls->conns_started && ls->conns_echoed == ls->conns_started &&
              ls->conns_connected == ls->conns_started,
          "loop %d: connections started %" PRIu64 ", connected %" PRIu64 ", echoed %" PRIu64
          ", closed %" PRIu64, i, ls->conns_started, ls->conns_connected, ls->conns_echoed,
          ls->conns_closed);
    CHECK(ls->srv_closed == ls->srv_accepted, "loop %d: server streams accepted %" PRIu64
          ", closed %" PRIu64, i, ls->srv_accepted, ls->srv_closed);
    for (unsigned p = 0; p < PAIRS; p++)
        CHECK(ls->sp_read[p] == atomic_load(&ls->sp_written[p]), "loop %d pair %u: wrote %" PRIu64
              ", read %" PRIu64, i, p, (uint64_t)atomic_load(&ls->sp_written[p]), ls->sp_read[p]);
}

static double soak_seconds(int argc, char **argv)
{
    const char *s = argc > 1 ? argv[1] : getenv("TERN_SOAK_SECONDS");
    double v = s != NULL ? strtod(s, NULL) : 10.0;
    return v > 0 ? v : 10.0;
}

int main(int argc, char **argv)
{
    stress_init("soak", DEFAULT_SEED);
    SEED = stress_run_seed;
    double seconds = soak_seconds(argc, argv);
    uint64_t prng = SEED;
    for (size_t i = 0; i < sizeof(pattern); i++)
        pattern[i] = (unsigned char)rng_next(&prng);
    printf("soak: %.1f s, %d loops, %d posters, 1 churn thread, seed 0x%" PRIx64 "\n", seconds,
           LOOPS, POSTERS, SEED);

    for (int i = 0; i < LOOPS; i++) {
        static const char *const names[LOOPS] = {"0 (epoll)", "1 (poll)", "2 (epoll, RCU)"};
        setup_loop(&loops[i], i);
        stress_watch_loop(loops[i].loop, names[i]);
    }
    /* The soak's own length, plus a generous bound for winding down. */
    stress_phase("the soak runs, then its loops wind down",
                 (uint64_t)(seconds * 1e9) + 2 * WIND_DOWN_NS + 60 * STRESS_SEC);
    for (int i = 0; i < LOOPS; i++)
        pthread_create(&loops[i].thread, NULL, loop_main, &loops[i]);
    pthread_t posters[POSTERS], churn;
    for (uintptr_t i = 0; i < POSTERS; i++)
        pthread_create(&posters[i], NULL, poster_main, (void *)(i + 1));
    pthread_create(&churn, NULL, churn_main, (void *)7);

    uint64_t start = mono_ns();
    sleep_ns((uint64_t)(seconds * 1e9));
    atomic_store(&stop_foreign, true);
    for (int i = 0; i < POSTERS; i++)
        pthread_join(posters[i], NULL);
    pthread_join(churn, NULL);

    /* Stop starting work, let what was started finish; then close the rest. */
    bool wound = all_loops(phase_ending, offsetof(struct lstate, quiet)) &&
                 all_loops(phase_closing, offsetof(struct lstate, returned));
    CHECK(wound, "the loops wound down");
    if (!wound) /* threads are stuck inside loops that cannot be freed safely */
        stress_fail_now("the loops wound down");
    double elapsed = (double)(mono_ns() - start) / 1e9;
    for (int i = 0; i < LOOPS; i++)
        pthread_join(loops[i].thread, NULL);

    uint64_t posts = 0, jobs = 0, cancelled = 0, refused = 0, timers = 0, stopped = 0, lookups = 0;
    uint64_t conns = 0, bytes = 0, accepted = 0, pair_bytes = 0, ticks = 0, cancels = 0;
    for (int i = 0; i < LOOPS; i++) {
        struct lstate *ls = &loops[i];
        check_books(ls);
        posts += ls->posts_ran;
        jobs += ls->jobs_done;
        cancelled += ls->jobs_cancelled;
        refused += ls->jobs_refused;
        cancels += ls->cancels_asked;
        timers += ls->timers_fired;
        stopped += ls->timers_stopped;
        lookups += ls->lookups_done;
        conns += ls->conns_echoed;
        bytes += ls->bytes_echoed;
        accepted += ls->srv_accepted;
        ticks += ls->ticks;
        for (unsigned p = 0; p < PAIRS; p++)
            pair_bytes += ls->sp_read[p];
    }
    CHECK(accepted == conns, "listeners accepted %" PRIu64 " connections, clients echoed %" PRIu64,
          accepted, conns);
    CHECK(atomic_load(&violations) == 0, "%u violations inside callbacks (printed above)",
          atomic_load(&violations));
    CHECK(jobs > 0 && posts > 0 && timers > 0 && conns > 0 && lookups > 0 && pair_bytes > 0 &&
              atomic_load(&churn_loops) > 0,
          "every feature ran at least once");

    for (int i = 0; i < LOOPS; i++) {
        stress_loop_free(loops[i].loop);
        for (unsigned p = 0; p < PAIRS; p++) {
            close(loops[i].sp[p][0]);
            close(loops[i].sp[p][1]);
        }
    }
    tern_pool_stats ps;
    tern_pool_stats_get(&ps);
    CHECK(ps.submitted == ps.completed + ps.cancelled + ps.timed_out,
          "pool: submitted %" PRIu64 " != completed %" PRIu64 " + cancelled %" PRIu64
          " + timed out %" PRIu64, ps.submitted, ps.completed, ps.cancelled, ps.timed_out);
    CHECK(ps.queued == 0 && ps.busy == 0 && ps.long_busy == 0, "pool still busy: queued %u busy %u"
          " long_busy %u", ps.queued, ps.busy, ps.long_busy);
    CHECK(tern_pool_shutdown(TERN_POOL_DRAIN, UINT64_C(30) * 1000000000u) == 0, "pool shutdown");

    printf("soak: ran %.1f s: %" PRIu64 " ticks, %" PRIu64 " posts, %" PRIu64 " jobs (%" PRIu64
           " cancelled of %" PRIu64 " cancel requests + %" PRIu64 " foreign, %" PRIu64
           " refused), %" PRIu64 " timers fired + %" PRIu64 " stopped, %" PRIu64 " lookups, %"
           PRIu64 " TCP echoes (%" PRIu64 " bytes), %" PRIu64 " bytes through watched "
           "socketpairs, %" PRIu64 " loops freed with %" PRIu64 " jobs in flight\n",
           elapsed, ticks, posts, jobs, cancelled, cancels,
           (uint64_t)atomic_load(&foreign_cancels), refused, timers, stopped, lookups, conns,
           bytes, pair_bytes, (uint64_t)atomic_load(&churn_loops),
           (uint64_t)atomic_load(&churn_jobs));
    stress_phase_end();
    return stress_summary();
}
