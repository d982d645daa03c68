/*
 * The routes, and when to say 503 instead of queueing.
 *
 * Shedding. A request that needs the pool is refused at once, with
 * Retry-After, when (a) tern refuses the job (tern_submit_with says
 * -EAGAIN; tern_loop_last_refusal names the limit: the connection's owner
 * cap, the pool's full queue, ...), or (b) jobs are queued right now and
 * the recent queue-wait p99 has passed the configured bound: queueing one
 * more would only make it wait longer than we promised. The "queued right
 * now" half matters: the percentile describes recent jobs, and once the
 * queue has emptied a new job would not wait at all, so shedding on the
 * percentile alone could go on refusing work an idle pool could do.
 *
 * Fairness. Every /hash job is submitted with its connection's owner
 * (http.c opens one per connection, cap --owner-cap), so a client that
 * pipelines hundreds of /hash requests has at most owner_cap of them in
 * the pool at once and the rest are refused with the cause "owner_cap",
 * while the queue stays open to everybody else. When the client goes
 * away, closing its owner cancels its queued hashes: their done gets
 * -ECANCELED and writes nothing (counted in hash_cancelled).
 *
 * The bound is read here, on the loop, without a lock: SIGHUP rewrites it
 * only in exclusive mode, when no loop runs (main.c, loops.c).
 *
 * /block?ms=N (1..BLOCK_MAX_MS) is a bounded job that blocks its worker
 * for N ms, as a read from a hung server or an open on a slow disk would:
 * work that was put on the bounded class but does not belong there. It
 * counts against the connection's owner cap like /hash. Enough of them
 * take every bounded worker; the pool's watchdog (main.c, --stall-ms and
 * --overflow-max) then sees the workers stalled and starts overflow
 * workers that keep the rest of the queue, /hash included, moving.
 *
 * /slow runs on the long class: it holds its worker for the whole stream,
 * which is what that class is for. Each chunk is posted back to the loop
 * (tern_post) and written there. Posts and the job's completion travel
 * different queues, so a chunk may reach the loop after `done`; the job
 * record is therefore counted (one reference per chunk in flight plus one
 * for done) and the stream is finished by whichever of them comes last.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

#include "demo.h"
#include "loops.h"

/* The longest a /block job may block its worker: 10 s. */
#define BLOCK_MAX_MS 10000

#define PAGE                                                                      \
    "<!doctype html>\n<html><head><title>tern demo</title></head><body>\n"        \
    "<h1>tern demo</h1>\n<ul>\n"                                                  \
    "<li><a href=\"/hash?rounds=1000\">/hash?rounds=N</a> PBKDF2 on the pool</li>\n" \
    "<li><a href=\"/slow?seconds=3\">/slow?seconds=S</a> a chunk a second</li>\n" \
    "<li><a href=\"/block?ms=2000\">/block?ms=N</a> a bounded job that blocks</li>\n" \
    "<li><a href=\"/stats\">/stats</a> pool and loop statistics</li>\n"           \
    "<li><a href=\"/metrics\">/metrics</a> the same for Prometheus</li>\n"         \
    "<li>/files/PATH a file from the --files directory</li>\n"                   \
    "</ul>\n</body></html>\n"

uint64_t clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Raise *max to v (any thread). */
static void raise_max(_Atomic uint64_t *max, uint64_t v)
{
    uint64_t cur = atomic_load_explicit(max, memory_order_relaxed);
    while (v > cur && !atomic_compare_exchange_weak_explicit(max, &cur, v, memory_order_relaxed,
                                                             memory_order_relaxed)) {
    }
}

/*
 * On the worker: the demo's own record of a bounded job's queue wait and
 * run time, exact for every job it ran (the pool's figures are sampled
 * percentiles over recent jobs, with no sum).
 */
void job_timed(struct server *srv, uint64_t wait_ns, uint64_t run_ns)
{
    atomic_fetch_add_explicit(&srv->n.job_wait_ns, wait_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&srv->n.job_wait_count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&srv->n.job_run_ns, run_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&srv->n.job_run_count, 1, memory_order_relaxed);
    raise_max(&srv->app->job_wait_max_ns, wait_ns);
    raise_max(&srv->app->job_run_max_ns, run_ns);
}

/* The value of name in a query string, as an unsigned number. */
static bool query_uint(const char *q, size_t len, const char *name, unsigned long *out)
{
    size_t nlen = strlen(name);
    for (size_t i = 0; i < len;) {
        size_t end = i;
        while (end < len && q[end] != '&')
            end++;
        if (end - i > nlen && memcmp(q + i, name, nlen) == 0 && q[i + nlen] == '=') {
            unsigned long v = 0;
            size_t j = i + nlen + 1;
            if (j == end || end - j > 9)
                return false;
            for (; j < end; j++) {
                if (q[j] < '0' || q[j] > '9')
                    return false;
                v = v * 10 + (unsigned long)(q[j] - '0');
            }
            *out = v;
            return true;
        }
        i = end + 1;
    }
    return false;
}

/*
 * Answer 503 with Retry-After into r (NULL: a new place for the current
 * request), the cause in the body: a tern_refusal_name, or "queue_wait".
 */
static void shed(struct conn *c, struct reply *r, _Atomic uint64_t *counter, const char *cause)
{
    (*counter)++;
    char body[64];
    int n = snprintf(body, sizeof(body), "overloaded (%s), retry\n", cause);
    if (r == NULL)
        http_respond(c, 503, "text/plain", "Retry-After: 1\r\n", body, (size_t)n);
    else
        http_fill(c, r, 503, "text/plain", "Retry-After: 1\r\n", body, (size_t)n);
}

/* tern refused a submission (-EAGAIN): count its cause, return its name. */
static const char *count_refusal(struct server *srv)
{
    tern_refusal cause = tern_loop_last_refusal(srv->loop);
    if ((unsigned)cause < sizeof(srv->n.refused) / sizeof(srv->n.refused[0]))
        srv->n.refused[cause]++;
    return tern_refusal_name(cause);
}

bool server_over_wait_bound(struct server *srv)
{
    tern_pool_stats ps;
    tern_pool_stats_get(&ps);
    return ps.queued > 0 && ps.wait_p99_ns > srv->shed_wait_ns;
}

/* ------------------------------------------------------------------ */
/* /hash                                                               */
/* ------------------------------------------------------------------ */

struct hash_job {
    struct job_base base; /* .conn is NULL once the connection closed */
    struct reply *reply;  /* its place among the connection's answers */
    bool ran;             /* the work started (read in done: the completion orders it) */
    unsigned rounds;
    int ok;
    unsigned char digest[32];
};

static void *hash_work(tern_job *job, void *arg)
{
    (void)job;
    struct hash_job *h = arg;
    h->ran = true;
    uint64_t start = clock_ns();
    static const unsigned char salt[] = "tern-demo-salt";
    h->ok = PKCS5_PBKDF2_HMAC("tern", 4, salt, sizeof(salt) - 1, (int)h->rounds, EVP_sha256(),
                              (int)sizeof(h->digest), h->digest);
    job_timed(h->base.srv, start - h->base.submitted_ns, clock_ns() - start);
    return h;
}

static void hash_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop;
    (void)id;
    (void)result;
    struct hash_job *h = arg;
    struct conn *c = h->base.conn;
    struct server *srv = h->base.srv;
    srv->jobs--;
    srv->owner_jobs--;
    if (c == NULL) {
        /* The client left and its owner was closed: nobody to answer. */
        if (status == -ECANCELED) {
            srv->n.hash_cancelled++;
            if (!h->ran)
                srv->n.hash_never_ran++; /* it was still queued: tombstoned */
        }
    } else {
        if (status == 0 && h->ok == 1) {
            char hex[2 * sizeof(h->digest) + 2];
            for (size_t i = 0; i < sizeof(h->digest); i++)
                snprintf(hex + 2 * i, 3, "%02x", h->digest[i]);
            hex[2 * sizeof(h->digest)] = '\n';
            srv->n.ok++;
            srv->n.hash_done++;
            http_fill(c, h->reply, 200, "text/plain", NULL, hex, sizeof(hex) - 1);
        } else {
            http_fill(c, h->reply, 500, "text/plain", NULL, "hash failed\n", 12);
        }
        http_continue(c);
    }
    free(h);
    server_maybe_done(srv);
}

static void route_hash(struct conn *c, const char *q, size_t qlen)
{
    struct server *srv = c->srv;
    unsigned long rounds = 1000;
    if (qlen > 0 && (!query_uint(q, qlen, "rounds", &rounds) || rounds < 1 ||
                     rounds > srv->max_rounds)) {
        srv->n.bad_request++;
        http_respond(c, 400, "text/plain", NULL, "rounds must be 1..max\n", 22);
        return;
    }
    if (server_over_wait_bound(srv)) {
        shed(c, NULL, &srv->n.shed_wait, "queue_wait");
        return;
    }
    struct hash_job *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        http_respond(c, 500, "text/plain", NULL, "out of memory\n", 14);
        return;
    }
    /* The answer's place comes first: a refusal below is answered in it, in order. */
    struct reply *r = http_reserve(c);
    if (r == NULL) {
        free(h); /* the connection is closed */
        return;
    }
    h->base.conn = c;
    h->base.srv = srv;
    h->reply = r;
    h->rounds = (unsigned)rounds;
    tern_job_options opts;
    tern_job_options_init(&opts);
    opts.owner = c->owner;
    h->base.submitted_ns = clock_ns();
    int rc = tern_submit_with(srv->loop, TERN_BOUNDED, hash_work, hash_done, h, &opts,
                              &h->base.id);
    if (rc < 0) {
        free(h);
        if (rc == -EAGAIN)
            shed(c, r, &srv->n.shed_refused, count_refusal(srv));
        else
            http_fill(c, r, 500, "text/plain", NULL, "submit failed\n", 14);
        return;
    }
    r->job = &h->base;
    srv->jobs++;
    srv->owner_jobs++;
}

/* ------------------------------------------------------------------ */
/* /block                                                              */
/* ------------------------------------------------------------------ */

struct block_job {
    struct job_base base; /* .conn is NULL once the connection closed */
    struct reply *reply;
    unsigned ms;
};

static void *block_work(tern_job *job, void *arg)
{
    struct block_job *b = arg;
    uint64_t start = clock_ns();
    /* Blocked, as far as the pool can tell, for the whole time; the sleep
     * is cut in slices only so that a closed connection frees the worker. */
    for (unsigned left = b->ms; left > 0 && !tern_job_cancelled(job);) {
        unsigned slice = left < 50 ? left : 50;
        nanosleep(&(struct timespec){0, (long)slice * 1000 * 1000}, NULL);
        left -= slice;
    }
    job_timed(b->base.srv, start - b->base.submitted_ns, clock_ns() - start);
    return b;
}

static void block_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop;
    (void)id;
    (void)result;
    struct block_job *b = arg;
    struct conn *c = b->base.conn;
    struct server *srv = b->base.srv;
    srv->jobs--;
    srv->owner_jobs--;
    if (c != NULL) {
        char body[64];
        int n = snprintf(body, sizeof(body), "blocked %u ms\n", b->ms);
        if (status == 0) {
            srv->n.ok++;
            srv->n.block_done++;
            http_fill(c, b->reply, 200, "text/plain", NULL, body, (size_t)n);
        } else {
            http_fill(c, b->reply, 500, "text/plain", NULL, "block failed\n", 13);
        }
        http_continue(c);
    }
    free(b);
    server_maybe_done(srv);
}

static void route_block(struct conn *c, const char *q, size_t qlen)
{
    struct server *srv = c->srv;
    unsigned long ms = 1000;
    if (qlen > 0 && (!query_uint(q, qlen, "ms", &ms) || ms < 1 || ms > BLOCK_MAX_MS)) {
        srv->n.bad_request++;
        http_respond(c, 400, "text/plain", NULL, "ms must be 1..10000\n", 20);
        return;
    }
    if (server_over_wait_bound(srv)) {
        shed(c, NULL, &srv->n.shed_wait, "queue_wait");
        return;
    }
    struct block_job *b = calloc(1, sizeof(*b));
    if (b == NULL) {
        http_respond(c, 500, "text/plain", NULL, "out of memory\n", 14);
        return;
    }
    struct reply *r = http_reserve(c);
    if (r == NULL) {
        free(b);
        return;
    }
    b->base.conn = c;
    b->base.srv = srv;
    b->reply = r;
    b->ms = (unsigned)ms;
    tern_job_options opts;
    tern_job_options_init(&opts);
    opts.owner = c->owner;
    b->base.submitted_ns = clock_ns();
    int rc = tern_submit_with(srv->loop, TERN_BOUNDED, block_work, block_done, b, &opts,
                              &b->base.id);
    if (rc < 0) {
        free(b);
        if (rc == -EAGAIN)
            shed(c, r, &srv->n.shed_refused, count_refusal(srv));
        else
            http_fill(c, r, 500, "text/plain", NULL, "submit failed\n", 14);
        return;
    }
    r->job = &b->base;
    srv->jobs++;
    srv->owner_jobs++;
}

/* ------------------------------------------------------------------ */
/* /slow                                                               */
/* ------------------------------------------------------------------ */

struct slow_job {
    struct job_base base; /* .conn is touched on the loop thread only */
    tern_loop *loop;
    unsigned seconds;
    _Atomic unsigned refs; /* done + chunks in flight */
    int status;
};

struct chunk {
    struct slow_job *job;
    unsigned n;
};

static void slow_finish(struct slow_job *s)
{
    struct conn *c = s->base.conn;
    if (c != NULL) {
        if (s->status == 0) {
            http_write(c, "0\r\n\r\n", 5);
            http_request_done(c);
        } else {
            http_close(c); /* a cut-short chunked body cannot be ended cleanly */
        }
    }
    struct server *srv = s->base.srv;
    free(s);
    srv->jobs--;
    server_maybe_done(srv);
}

static void slow_unref(struct slow_job *s)
{
    /* Pairs with the worker's increment before each tern_post. */
    if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1)
        slow_finish(s);
}

static void slow_chunk(tern_loop *loop, void *arg)
{
    (void)loop;
    struct chunk *ch = arg;
    struct slow_job *s = ch->job;
    if (s->base.conn != NULL) {
        char body[64], msg[96];
        int blen = snprintf(body, sizeof(body), "tick %u of %u\n", ch->n, s->seconds);
        int n = snprintf(msg, sizeof(msg), "%x\r\n%s\r\n", blen, body);
        http_write(s->base.conn, msg, (size_t)n);
    }
    free(ch);
    slow_unref(s);
}

static void *slow_work(tern_job *job, void *arg)
{
    struct slow_job *s = arg;
    for (unsigned i = 1; i <= s->seconds; i++) {
        /* Sleep the second in slices so a cancel is seen within 50 ms. */
        for (int slice = 0; slice < 20; slice++) {
            if (tern_job_cancelled(job))
                return s;
            nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
        }
        struct chunk *ch = malloc(sizeof(*ch));
        if (ch == NULL)
            continue;
        *ch = (struct chunk){s, i};
        atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
        if (tern_post(s->loop, slow_chunk, ch) < 0) {
            atomic_fetch_sub_explicit(&s->refs, 1, memory_order_relaxed);
            free(ch);
        }
    }
    return s;
}

static void slow_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop;
    (void)id;
    (void)result;
    struct slow_job *s = arg;
    s->status = status;
    if (status == -ECANCELED)
        s->base.srv->n.slow_cancelled++;
    else
        s->base.srv->n.slow_completed++;
    slow_unref(s);
}

static void route_slow(struct conn *c, const char *q, size_t qlen)
{
    struct server *srv = c->srv;
    unsigned long seconds = 3;
    if (qlen > 0 && (!query_uint(q, qlen, "seconds", &seconds) || seconds < 1 || seconds > 60)) {
        srv->n.bad_request++;
        http_respond(c, 400, "text/plain", NULL, "seconds must be 1..60\n", 22);
        return;
    }
    struct slow_job *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        http_respond(c, 500, "text/plain", NULL, "out of memory\n", 14);
        return;
    }
    s->base.conn = c;
    s->base.is_slow = true;
    s->base.srv = srv;
    s->loop = srv->loop;
    s->seconds = (unsigned)seconds;
    atomic_init(&s->refs, 1);
    int rc = tern_submit(srv->loop, TERN_LONG, slow_work, slow_done, s, &s->base.id);
    if (rc < 0) {
        free(s);
        if (rc == -EAGAIN)
            shed(c, NULL, &srv->n.shed_long, count_refusal(srv));
        else
            http_respond(c, 500, "text/plain", NULL, "submit failed\n", 14);
        return;
    }
    srv->jobs++;
    srv->n.slow_started++;
    srv->n.ok++;
    srv->n.responses++;
    c->busy = true;
    c->job = &s->base;
    static const char head[] = "HTTP/1.1 200 OK\r\nServer: tern-demo\r\n"
                               "Content-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n";
    http_write(c, head, sizeof(head) - 1);
}

/* ------------------------------------------------------------------ */
/* /, /stats, dispatch                                                 */
/* ------------------------------------------------------------------ */

int stats_json(struct conn *c, char *buf, size_t cap)
{
    struct server *srv = c->srv;
    tern_pool_stats p;
    tern_loop_stats l;
    tern_pool_stats_get(&p);
    tern_loop_stats_get(srv->loop, &l);
    struct counters total; /* every loop's, added up (loops.c) */
    struct gauges g;
    app_totals(srv, &total, &g);
    const struct counters *n = &total;
    char loops[1024], refusals[256];
    app_loops_json(srv, loops, sizeof(loops));
    app_refusals_json(n, refusals, sizeof(refusals));
    /* The asking connection's own owner: what tern_owner_stats_get says of it. */
    uint64_t file_reserved, file_budget;
    files_budget(srv, &file_reserved, &file_budget);
    tern_owner_stats mine = {0};
    tern_owner_stats_get(srv->loop, c->owner, &mine);
    return snprintf(
        buf, cap,
        "{\"server\":{\"accepted\":%" PRIu64 ",\"connections\":%u,\"requests\":%" PRIu64
        ",\"responses\":%" PRIu64 ",\"ok\":%" PRIu64 ",\"not_found\":%" PRIu64
        ",\"bad_request\":%" PRIu64 ",\"shed\":%" PRIu64 ",\"shed_refused\":%" PRIu64
        ",\"shed_wait\":%" PRIu64 ",\"shed_long\":%" PRIu64 ",\"hash_done\":%" PRIu64
        ",\"hash_cancelled\":%" PRIu64 ",\"hash_never_ran\":%" PRIu64
        ",\"slow_started\":%" PRIu64
        ",\"slow_completed\":%" PRIu64 ",\"slow_cancelled\":%" PRIu64
        ",\"files_served\":%" PRIu64 ",\"forbidden\":%" PRIu64
        ",\"jobs_in_flight\":%u,\"shed_wait_ms\":%" PRIu64 ",\"hashes_per_connection\":%u"
        ",\"owners\":%u,\"owner_jobs\":%u,\"slowloris_closed\":%" PRIu64
        ",\"idle_closed\":%" PRIu64 ",\"request_timeout_ms\":%" PRIu64
        ",\"idle_timeout_ms\":%" PRIu64 ",\"slow_reader_closed\":%" PRIu64
        ",\"too_large\":%" PRIu64 ",\"upgrade_refused\":%" PRIu64 ",\"fd_limit\":%lu"
        ",\"block_done\":%" PRIu64 ",\"write_timeout_ms\":%" PRIu64
        ",\"file_window\":%zu,\"file_budget\":%" PRIu64 ",\"file_reserved\":%" PRIu64
        ",\"files_over_budget\":%" PRIu64 ",\"files_no_fd\":%" PRIu64
        ",\"framing_refused\":%" PRIu64 ",\"drain_flushed\":%" PRIu64 "},\n"
        " \"refusals\":%s,\n"
        " \"connection_owner\":{\"cap\":%u,\"in_flight\":%u,\"jobs_accepted\":%" PRIu64
        ",\"jobs_refused\":%" PRIu64 "},\n"
        " \"loops\":%s,\n"
        " \"pool\":{\"threads\":%u,\"busy\":%u,\"queued\":%u,\"queued_peak\":%u,\"reserved\":%u,"
        "\"long_threads\":%u,\"long_busy\":%u,\"submitted\":%" PRIu64 ",\"completed\":%" PRIu64
        ",\"cancelled\":%" PRIu64 ",\"refused_queue_full\":%" PRIu64
        ",\"refused_long_ceiling\":%" PRIu64 ",\"wait_p50_ns\":%" PRIu64
        ",\"wait_p99_ns\":%" PRIu64 ",\"run_p50_ns\":%" PRIu64 ",\"run_p99_ns\":%" PRIu64
        ",\"timed_out\":%" PRIu64 ",\"stalls\":%" PRIu64 ",\"overflow_started\":%" PRIu64
        ",\"overflow_retired\":%" PRIu64 ",\"overflow_now\":%u},\n"
        " \"loop\":{\"turns\":%" PRIu64 ",\"posts\":%" PRIu64 ",\"wake_syscalls\":%" PRIu64
        ",\"events\":%" PRIu64 ",\"idle_ns\":%" PRIu64 ",\"live_operations\":%u,"
        "\"undelivered\":%u,\"undelivered_peak\":%u}}\n",
        n->accepted, g.conns, n->requests, n->responses, n->ok, n->not_found, n->bad_request,
        n->shed_refused + n->shed_wait + n->shed_long, n->shed_refused, n->shed_wait,
        n->shed_long, n->hash_done, n->hash_cancelled, n->hash_never_ran, n->slow_started,
        n->slow_completed, n->slow_cancelled, n->files_served, n->forbidden, g.jobs,
        srv->shed_wait_ns / 1000000, srv->owner_cap, g.owners, g.owner_jobs,
        n->slowloris_closed, n->idle_closed, srv->request_ns / 1000000, srv->idle_ns / 1000000,
        n->slow_reader_closed, n->too_large, n->upgrade_refused, srv->fd_limit, n->block_done,
        srv->write_ns / 1000000, srv->file_window, file_budget, file_reserved,
        n->files_over_budget, n->files_no_fd, n->framing_refused, n->drain_flushed, refusals,
        mine.cap, mine.in_flight,
        mine.accepted, mine.refused, loops, p.threads, p.busy, p.queued, p.queued_peak,
        p.reserved, p.long_threads, p.long_busy, p.submitted, p.completed, p.cancelled,
        p.refused_queue_full, p.refused_long_ceiling, p.wait_p50_ns, p.wait_p99_ns, p.run_p50_ns,
        p.run_p99_ns, p.timed_out, p.stalls, p.overflow_started, p.overflow_retired,
        p.overflow_now, l.turns, l.posts, l.wake_syscalls, l.events, l.idle_ns, l.live_operations,
        l.undelivered, l.undelivered_peak);
}

static bool is(const char *path, size_t len, const char *want)
{
    return len == strlen(want) && memcmp(path, want, len) == 0;
}

bool route_request(struct conn *c, const char *path, size_t path_len, const char *query,
                   size_t query_len)
{
    struct server *srv = c->srv;
    if (is(path, path_len, "/")) {
        srv->n.ok++;
        http_respond(c, 200, "text/html; charset=utf-8", NULL, PAGE, sizeof(PAGE) - 1);
    } else if (is(path, path_len, "/hash")) {
        route_hash(c, query, query_len);
    } else if (is(path, path_len, "/block")) {
        route_block(c, query, query_len);
    } else if (is(path, path_len, "/slow") ||
               (path_len > 7 && memcmp(path, "/files/", 7) == 0)) {
        /* These own the connection while they run: after the answers before them. */
        if (c->replies != NULL)
            return false;
        if (path[1] == 's')
            route_slow(c, query, query_len);
        else
            route_files(c, path + 7, path_len - 7);
    } else if (is(path, path_len, "/metrics")) {
        size_t cap = 65536;
        char *body = malloc(cap);
        int n = body != NULL ? metrics_text(c, body, cap) : -1;
        if (n < 0) {
            http_respond(c, 500, "text/plain", NULL, "metrics did not fit\n", 20);
        } else {
            srv->n.ok++;
            http_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, body, (size_t)n);
        }
        free(body);
    } else if (is(path, path_len, "/stats")) {
        char body[8192];
        int n = stats_json(c, body, sizeof(body));
        srv->n.ok++;
        http_respond(c, 200, "application/json", NULL, body, (size_t)n);
    } else {
        srv->n.not_found++;
        http_respond(c, 404, "text/plain", NULL, "not found\n", 10);
    }
    return true;
}

void route_abandon(struct conn *c)
{
    /* The job record outlives the connection: it learns the client is gone
     * (conn = NULL) and the job is asked to stop. A /slow job sees
     * tern_job_cancelled; a /files request sees conn == NULL at its next
     * step and closes what it opened. (/hash jobs are never c->job: closing
     * the connection's owner cancels them.) */
    struct job_base *j = c->job;
    j->conn = NULL;
    c->job = NULL;
    tern_cancel(c->srv->loop, j->id);
}
