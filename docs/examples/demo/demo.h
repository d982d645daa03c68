/*
 * The demo server: a small HTTP/1.1 server on tern that sheds load.
 *
 *   main.c    options, the loop group and pool, signals, graceful shutdown
 *   loops.c   what spans the loops: totals, per-loop figures, SIGHUP's
 *             reconfiguration in exclusive mode
 *   http.c    connections: reading, parsing (http-parser), responding
 *   routes.c  the routes and the load-shedding decision
 *   files.c   /files/<path>: a directory served through tern's file requests
 *
 * The server runs on a loop group: one `struct server` per loop, each with
 * its own listener on the shared port (SO_REUSEPORT). Everything of a
 * server runs on its loop's thread, except the two work functions in
 * routes.c, which run on pool threads and touch only their own job record
 * (and tern_post, to hand chunks back to the loop). The counters are
 * atomics because /stats, served by any loop, adds up every loop's; the
 * shedding bound is a plain field that only SIGHUP's reconfiguration
 * writes, with every loop paused (tern_group_pause).
 *
 * Each connection is a tern owner with a small cap on its /hash jobs in
 * flight, so one client that pipelines hundreds of requests is refused
 * (503) beyond its cap instead of filling the pool's queue for everybody;
 * closing the connection closes the owner, which cancels its queued
 * hashes. Each connection also has one timer on its loop's deadline heap
 * that bounds how long it may sit idle or hold a request half-sent.
 */
#ifndef DEMO_H
#define DEMO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <http_parser.h>

#include "tern.h"

#define URL_MAX 2048

struct conn;

/*
 * What a loop counts; /stats and the final report add up every loop's.
 * Written by the loop's thread only, read from any (hence atomics).
 */
struct counters {
    _Atomic uint64_t accepted, requests, responses;
    _Atomic uint64_t ok, not_found, bad_request, shed_refused, shed_wait, shed_long;
    _Atomic uint64_t hash_done, slow_started, slow_completed, slow_cancelled;
    _Atomic uint64_t files_served, forbidden;
    _Atomic uint64_t hash_cancelled;   /* the client left: done got -ECANCELED, wrote nothing */
    _Atomic uint64_t hash_never_ran;   /* ... and its work never started (it was queued) */
    _Atomic uint64_t slowloris_closed; /* closed with a request still incomplete after the bound */
    _Atomic uint64_t idle_closed;      /* keep-alive connections closed after the idle bound */
    _Atomic uint64_t slow_reader_closed; /* owed bytes, none drained for the write bound */
    _Atomic uint64_t too_large;        /* bodies over --max-body-bytes, refused 413 */
    _Atomic uint64_t upgrade_refused;  /* protocol upgrades, refused 501 */
    _Atomic uint64_t block_done;       /* /block jobs that slept their time and were answered */
    _Atomic uint64_t files_over_budget; /* /files refused 503: the buffer budget was spent */
    _Atomic uint64_t files_no_fd;      /* /files refused 503: out of descriptors */
    _Atomic uint64_t framing_refused;  /* requests whose framing was ambiguous, refused 400 */
    _Atomic uint64_t drain_flushed;    /* connections the drain closed once their bytes were out */
    /* The demo's own bounded jobs (/hash, /block): queue wait and run time. */
    _Atomic uint64_t job_wait_ns, job_wait_count, job_run_ns, job_run_count;
    /* The connection timers that fired: how late, in total. */
    _Atomic uint64_t timer_lag_ns, timer_fired;
    /* Every -EAGAIN from tern_submit_with, by its cause (tern_loop_last_refusal). */
    _Atomic uint64_t refused[TERN_REFUSED_THREADS + 1];
};

struct app;

/* One per loop of the group. */
struct server {
    struct app *app;
    unsigned index;        /* the loop's index in the group */
    tern_loop *loop;
    tern_id listener;
    tern_id drain_timer;
    unsigned port;
    uint64_t shed_wait_ns; /* shed when the queue-wait p99 passes this (SIGHUP changes it) */
    unsigned max_rounds;
    unsigned owner_cap;    /* /hash jobs in flight per connection (its owner's cap) */
    uint64_t request_ns;   /* a started request must be complete within this (slowloris) */
    uint64_t idle_ns;      /* a keep-alive connection may wait this long for its next request */
    uint64_t write_ns;     /* a client owed bytes may drain none of them for this long */
    uint64_t max_body;     /* a request body over this is refused 413 */
    unsigned long fd_limit; /* RLIMIT_NOFILE's soft limit, as raised at start */
    size_t file_window;    /* bytes of one /files answer buffered at once */
    bool draining;         /* shutting down: finish in-flight work, accept nothing */
    bool drained;          /* ... and done: nothing left on this loop */
    _Atomic unsigned conns; /* open connections */
    _Atomic unsigned jobs;  /* pool jobs in flight */
    _Atomic unsigned owners;     /* open owners (one per connection) */
    _Atomic unsigned owner_jobs; /* /hash jobs in flight, every one counted by an owner */
    struct conn *conn_list;
    char *files_root;      /* --files: the real path served under /files/, or NULL */
    struct counters n;
};

/* A pool job that answers a request; every job kind starts with this. */
struct job_base {
    struct server *srv;
    struct conn *conn; /* NULL once the client went away */
    tern_id id;
    bool is_slow;
    uint64_t submitted_ns; /* clock_ns() at submission: the work times its queue wait */
};

/*
 * One answer owed on a connection, in request order. HTTP/1.1 answers
 * pipelined requests in the order they came, so a /hash answer that is
 * ready early waits behind the ones before it; an answer made at once (a
 * 503, a 404) is queued the same way.
 */
struct reply {
    struct reply *next;
    struct job_base *job; /* the /hash job that will fill it, or NULL */
    char *msg;            /* the whole response once filled */
    size_t len;
    bool keep;            /* the request allowed keep-alive (and no drain had begun) */
    bool close;           /* filled with "Connection: close": the last answer */
    bool ready;
};

/* What the connection's timer is bounding right now. */
enum conn_wait {
    WAIT_NONE,    /* the server owes an answer: no bound on the client */
    WAIT_IDLE,    /* between requests (keep-alive): the idle bound */
    WAIT_REQUEST, /* a request has begun and is incomplete: the request bound */
    WAIT_WRITE,   /* answers queued above the high-water mark: the write bound */
};

struct conn {
    struct server *srv;
    tern_id id;
    struct conn *prev, *next;
    http_parser parser;
    char *in;          /* received bytes not yet parsed */
    size_t in_len, in_off, in_cap;
    char url[URL_MAX];
    size_t url_len;
    bool url_too_long;
    bool keep_alive;   /* of the request being answered */
    bool busy;         /* answering /slow or /files (a pool job that owns the connection) */
    bool held;         /* a parsed /slow or /files waits until earlier answers are out */
    bool in_request;   /* the parser is inside a request (its first byte has come) */
    bool reading;
    bool closing;
    bool shutting;     /* the last answer is out; closing once the write side is shut */
    bool backlogged;   /* a write passed the high-water mark; no drain callback yet */
    int refuse;        /* 413 or 501: the request's headers are refused, or 0 */
    uint64_t body_seen; /* the request's chunk sizes so far (chunked bodies) */
    struct job_base *job; /* the /slow or /files job, while busy */
    tern_id owner;     /* this connection's /hash jobs count against it */
    struct reply *replies, *replies_tail; /* answers owed, oldest first */
    unsigned nreplies;
    size_t held_path, held_path_len, held_query, held_query_len; /* offsets into url */
    tern_id timer;     /* the idle or request bound, 0 when none runs */
    enum conn_wait waiting;
    uint64_t timer_due;  /* when the timer should fire (the loop's clock) */
    uint64_t written;    /* bytes handed to tern_stream_write, in all */
    uint64_t drained_at_arm; /* bytes drained to the socket when the write bound was armed */
    size_t crlf_at;      /* index in `in` where a chunk's data ended: CRLF must follow */
    bool crlf_due;       /* ... and that CRLF is not checked yet */
};

/* http.c */
void http_accept(tern_loop *loop, tern_id listener, int status, tern_id stream, void *arg);
/* Answer the current request with a complete response (copied). */
void http_respond(struct conn *c, int code, const char *type, const char *extra_headers,
                  const char *body, size_t body_len);
/* A place for the current request's answer, to be filled later; NULL if out of memory. */
struct reply *http_reserve(struct conn *c);
/* Fill a reserved answer (copied) and send what is ready, in order. */
void http_fill(struct conn *c, struct reply *r, int code, const char *type,
               const char *extra_headers, const char *body, size_t body_len);
/* Write raw bytes (copied) on the connection. */
void http_write(struct conn *c, const char *data, size_t len);
/*
 * Queue len bytes the caller keeps valid until cb runs (tern_stream_write's
 * contract); counted for the write bound. Returns tern_stream_write's
 * result; on 1 the connection is backlogged, on < 0 it is closed and cb
 * never runs.
 */
int http_write_owned(struct conn *c, const void *data, size_t len, tern_stream_cb cb, void *arg);
/* The /slow or /files answer is complete: go on as http_continue does. */
void http_request_done(struct conn *c);
/* Something was answered: send what is ready, start a held request, parse on. */
void http_continue(struct conn *c);
void http_close(struct conn *c);
/* Draining: close every idle connection once the bytes queued on it are out. */
void http_close_idle(struct server *srv);

/* routes.c */
/* Answer one request; false if it must wait until the answers before it are out. */
bool route_request(struct conn *c, const char *path, size_t path_len, const char *query,
                   size_t query_len);
/* A client went away while its job ran: stop the job. */
void route_abandon(struct conn *c);
/* /stats as asked on c (its own owner's counts included). */
int stats_json(struct conn *c, char *buf, size_t cap);
/* /metrics: the Prometheus text exposition, or -1 when it does not fit in cap (metrics.c). */
int metrics_text(struct conn *c, char *buf, size_t cap);
/* Whether a new pool job would wait longer than the bound: shed it. */
bool server_over_wait_bound(struct server *srv);
/* The monotonic clock in ns, on any thread (the jobs time themselves). */
uint64_t clock_ns(void);
/* A bounded job of the demo waited wait_ns in the queue and ran run_ns. */
void job_timed(struct server *srv, uint64_t wait_ns, uint64_t run_ns);

/* files.c */
/* Serve dir under /files/ (its real path is kept): 0 or a negative errno. */
int files_init(struct server *srv, const char *dir);
/* GET /files/<rel>: rel is the raw (percent-encoded) rest of the path. */
/* The budget's figures for /stats: bytes reserved now, and the budget. */
void files_budget(const struct server *srv, uint64_t *reserved, uint64_t *budget);
void route_files(struct conn *c, const char *rel, size_t len);

/* main.c */
void server_maybe_done(struct server *srv);

/* loops.c */
/* What is open or in flight now, every loop's added up. */
struct gauges {
    unsigned conns, jobs, owners, owner_jobs;
};
/* Every loop's counters and gauges added up. */
void app_totals(const struct server *srv, struct counters *total, struct gauges *g);
/* "{"queue_full":N,...,"owner_cap":N,...}": tern's refusals in total, by cause. */
int app_refusals_json(const struct counters *total, char *buf, size_t cap);
/* "[{"loop":0,"requests":N,...},...]": each loop's share of the work. */
int app_loops_json(const struct server *srv, char *buf, size_t cap);

#endif
