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
    bool draining;         /* shutting down: finish in-flight work, accept nothing */
    _Atomic unsigned conns; /* open connections */
    _Atomic unsigned jobs;  /* pool jobs in flight */
    struct conn *conn_list;
    char *files_root;      /* --files: the real path served under /files/, or NULL */
    struct counters n;
};

/* A pool job that answers a request; both job kinds start with this. */
struct job_base {
    struct server *srv;
    struct conn *conn; /* NULL once the client went away */
    tern_id id;
    bool is_slow;
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
    bool busy;         /* answering asynchronously (a pool job) */
    bool reading;
    bool closing;
    struct job_base *job;
};

/* http.c */
void http_accept(tern_loop *loop, tern_id listener, int status, tern_id stream, void *arg);
/* Answer the current request with a complete response (copied). */
void http_respond(struct conn *c, int code, const char *type, const char *extra_headers,
                  const char *body, size_t body_len);
/* Write raw bytes (copied) on the connection. */
void http_write(struct conn *c, const char *data, size_t len);
/* The asynchronous answer is complete: parse what waits, or close. */
void http_request_done(struct conn *c);
void http_close(struct conn *c);
/* Close every idle connection (draining). */
void http_close_idle(struct server *srv);

/* routes.c */
void route_request(struct conn *c, const char *path, size_t path_len, const char *query,
                   size_t query_len);
/* A client went away while its job ran: stop the job. */
void route_abandon(struct conn *c);
int stats_json(struct server *srv, char *buf, size_t cap);
/* Whether a new pool job would wait longer than the bound: shed it. */
bool server_over_wait_bound(struct server *srv);

/* files.c */
/* Serve dir under /files/ (its real path is kept): 0 or a negative errno. */
int files_init(struct server *srv, const char *dir);
/* GET /files/<rel>: rel is the raw (percent-encoded) rest of the path. */
void route_files(struct conn *c, const char *rel, size_t len);

/* main.c */
void server_maybe_done(struct server *srv);

/* loops.c */
/* Every loop's counters added up, with open connections and jobs. */
void app_totals(const struct server *srv, struct counters *total, unsigned *conns,
                unsigned *jobs);
/* "[{"loop":0,"requests":N,...},...]": each loop's share of the work. */
int app_loops_json(const struct server *srv, char *buf, size_t cap);

#endif
