/*
 * Connections: bytes in, http-parser over them, answers out.
 *
 * Pipelining. A client may send requests without waiting for the answers
 * (HTTP/1.1 pipelining), and the answers must go back in the order the
 * requests came. So each parsed request takes its place in the
 * connection's queue of answers owed (http_reserve): an answer known at
 * once (a 404, a 503) fills its place at once, a /hash fills it when its
 * job's done runs, and whatever is ready at the head of the queue is
 * written. One connection can thus have several /hash jobs in flight, at
 * most its owner's cap (routes.c); beyond that tern refuses the job and
 * the request is answered 503 in its turn. /slow and /files own the
 * connection while they run (a stream of chunks, a chain of file
 * requests), so such a request waits ("held") until the answers before it
 * are out, and parsing stops until it is done. Parsing also stops at
 * PIPELINE_MAX answers owed. Bytes that arrive meanwhile wait in `in`;
 * reading goes on up to IN_MAX, so a client that hangs up is noticed even
 * while its jobs run, and its hang-up closes its owner: the hashes it
 * still had queued never run.
 *
 * Bounds on the client. Each connection has one timer on its loop's
 * deadline heap, running only while the server owes the client nothing:
 * the idle bound (--idle-timeout-ms) while it is between requests, the
 * request bound (--request-timeout-ms) once a request has begun and is
 * still incomplete. Bytes that arrive do not restart either bound; only a
 * change of state does (a request completed, the answers owed went out),
 * so a client that trickles a request a byte at a time (a slowloris) is
 * closed when the request bound passes, like one that sends half a
 * request and stops. Either close is counted for /stats.
 *
 * A client that does not read, or reads slowly. Answers go to
 * tern_stream_write, which queues them until the socket takes them; past
 * the stream's high-water mark it returns 1. From then until the drain
 * callback the connection is "backlogged": no more of its requests are
 * parsed (so no more answers are made for it), nor is a held request
 * started. Reading goes on up to IN_MAX, so a hang-up is still noticed.
 * While the connection is backlogged, streams a /files or /slow answer,
 * or is shutting down with bytes still queued, the write bound
 * (--write-timeout-ms, WAIT_WRITE) judges progress, not time: each time
 * it passes, the connection is kept if any byte drained to the socket
 * since it was armed (or none is queued: the server is the one that is
 * late), and closed otherwise (slow_reader_closed). So a client that
 * reads slowly but steadily gets its whole answer, however long it
 * takes, and one that stops reading is closed between one and two
 * bounds after its last byte drained.
 *
 * Draining (SIGTERM). Idle connections are shut down rather than closed:
 * the bytes already queued for them go out first (under the write bound
 * above), then the connection closes. A connection with an answer in
 * progress (a /files or /slow stream, a /hash owed) finishes it, then
 * closes the same way. So every request in flight is answered whole
 * unless its client stops reading, or --drain-timeout-ms passes.
 *
 * Framing. A request whose body is over --max-body-bytes is refused 413
 * as soon as that is known: at the end of its headers for Content-Length,
 * at each chunk's header for a chunked body (the sizes add up). A request
 * to change protocols (an Upgrade header, or CONNECT) is refused 501: the
 * server speaks no other protocol, and the bytes after such a request are
 * not HTTP, so both refusals close the connection and nothing after them
 * is parsed.
 *
 * http-parser is lenient where a proxy in front of the server may not be,
 * and two parsers that disagree on where a request ends let a client hide
 * a second request inside the first (request smuggling). So these are
 * refused 400 and the connection closed, nothing after them answered:
 *   - a header name with a space in it ("Transfer-Encoding : chunked",
 *     which http-parser would take as Transfer-Encoding);
 *   - a chunk whose data is not followed by CRLF (http-parser takes any
 *     two bytes there); the bytes are checked here, in `in`, where the
 *     parser pauses at the end of each chunk's data;
 *   - Transfer-Encoding: chunked in an HTTP/1.0 request, whose framing 1.0 does
 *     not define (a chunked body there).
 */
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "demo.h"

/* Unparsed bytes a connection may hold before we stop reading it. */
#define IN_MAX (64 * 1024)
/* Answers a connection may owe before we stop parsing its requests. */
#define PIPELINE_MAX 64
/* Answer bytes queued in tern past which a connection is backlogged. */
#define HIGH_WATER (1024 * 1024)

static void conn_watch(struct conn *c);

static int on_message_begin(http_parser *p)
{
    struct conn *c = p->data;
    c->url_len = 0;
    c->url_too_long = false;
    c->in_request = true;
    c->refuse = 0;
    c->body_seen = 0;
    return 0;
}

/* Refuse the request now: pause, so it is answered before any body byte. */
static int refuse(http_parser *p, int code)
{
    struct conn *c = p->data;
    c->refuse = code;
    http_parser_pause(p, 1);
    return 0;
}

/* A header name holds token characters only; http-parser lets a space pass. */
static int on_header_field(http_parser *p, const char *at, size_t len)
{
    struct conn *c = p->data;
    if (c->refuse == 0 && (memchr(at, ' ', len) != NULL || memchr(at, '\t', len) != NULL))
        return refuse(p, 400);
    return 0;
}

static int on_headers_complete(http_parser *p)
{
    struct conn *c = p->data;
    if (c->refuse != 0)
        return 0; /* paused already: the refusal is answered */
    if ((p->flags & F_UPGRADE) || p->upgrade)
        return refuse(p, 501);
    if ((p->flags & F_CHUNKED) && p->http_major == 1 && p->http_minor == 0)
        return refuse(p, 400);
    /* ULLONG_MAX: no Content-Length (a chunked body is checked per chunk). */
    if (p->content_length != ULLONG_MAX && p->content_length > c->srv->max_body)
        return refuse(p, 413);
    return 0;
}

static int on_chunk_header(http_parser *p)
{
    struct conn *c = p->data;
    if (p->content_length > c->srv->max_body - c->body_seen)
        return refuse(p, 413);
    c->body_seen += p->content_length;
    return 0;
}

/*
 * A chunk's data ends here (the parser's remaining count is 0): pause, so
 * that process() checks the two bytes after it are CRLF before going on.
 * at + len is inside `in`, the buffer being parsed.
 */
static int on_body(http_parser *p, const char *at, size_t len)
{
    struct conn *c = p->data;
    if ((p->flags & F_CHUNKED) && p->content_length == 0) {
        c->crlf_at = (size_t)(at + len - c->in);
        c->crlf_due = true;
        http_parser_pause(p, 1);
    }
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
    struct conn *c = p->data;
    if (c->url_len + len >= URL_MAX) {
        c->url_too_long = true;
        return 0;
    }
    memcpy(c->url + c->url_len, at, len);
    c->url_len += len;
    return 0;
}

/* Pause here so exactly one request is handled before parsing goes on. */
static int on_message_complete(http_parser *p)
{
    struct conn *c = p->data;
    c->keep_alive = http_should_keep_alive(p) != 0;
    c->in_request = false;
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_body = on_body,
    .on_headers_complete = on_headers_complete,
    .on_chunk_header = on_chunk_header,
    .on_message_complete = on_message_complete,
};

static void write_done(tern_loop *loop, tern_id stream, int status, void *arg)
{
    (void)loop;
    (void)stream;
    (void)status; /* a client that went away is noticed by the read side */
    free(arg);
}

/* A write returned 1: hold the connection's requests until the drain callback. */
static void backlogged(struct conn *c)
{
    c->backlogged = true;
    conn_watch(c);
}

/* Every write of the connection goes here, so the write bound can see progress. */
static int stream_write(struct conn *c, const void *data, size_t len, tern_stream_cb cb, void *arg)
{
    tern_buf b = {(void *)data, len};
    int rc = tern_stream_write(c->srv->loop, c->id, &b, 1, cb, arg);
    if (rc >= 0)
        c->written += len;
    return rc;
}

int http_write_owned(struct conn *c, const void *data, size_t len, tern_stream_cb cb, void *arg)
{
    int rc = stream_write(c, data, len, cb, arg);
    if (rc < 0)
        http_close(c);
    else if (rc == 1)
        backlogged(c);
    return rc;
}

void http_write(struct conn *c, const char *data, size_t len)
{
    char *copy = malloc(len);
    if (copy == NULL) {
        http_close(c);
        return;
    }
    memcpy(copy, data, len);
    if (http_write_owned(c, copy, len, write_done, copy) < 0)
        free(copy);
}

static const char *reason(int code)
{
    switch (code) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Unknown";
    }
}

static void shut_then_close(tern_loop *loop, tern_id stream, int status, void *arg)
{
    (void)loop;
    (void)stream;
    (void)status;
    http_close(arg);
}

/* The last answer is queued: close once it is out (shutdown waits for the queue). */
static void shut_down(struct conn *c)
{
    c->shutting = true;
    c->keep_alive = false;
    conn_watch(c);
    if (tern_stream_shutdown(c->srv->loop, c->id, shut_then_close, c) < 0)
        http_close(c);
}

/* Write every answer that is ready at the head of the queue, in order. */
static void flush(struct conn *c)
{
    struct reply *r;
    while (!c->closing && !c->shutting && (r = c->replies) != NULL && r->ready) {
        c->replies = r->next;
        if (c->replies == NULL)
            c->replies_tail = NULL;
        c->nreplies--;
        bool close = r->close;
        int rc = stream_write(c, r->msg, r->len, write_done, r->msg);
        if (rc < 0)
            free(r->msg);
        free(r);
        if (rc < 0)
            http_close(c);
        else if (close)
            shut_down(c);
        if (rc == 1 && !c->closing)
            backlogged(c);
    }
}

struct reply *http_reserve(struct conn *c)
{
    struct reply *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        http_close(c);
        return NULL;
    }
    /* A request without keep-alive, or one parsed once the drain began, is the last. */
    r->keep = c->keep_alive && !c->srv->draining;
    if (!r->keep)
        c->keep_alive = false;
    if (c->replies_tail != NULL)
        c->replies_tail->next = r;
    else
        c->replies = r;
    c->replies_tail = r;
    c->nreplies++;
    return r;
}

void http_fill(struct conn *c, struct reply *r, int code, const char *type,
               const char *extra_headers, const char *body, size_t body_len)
{
    struct server *srv = c->srv;
    /*
     * Draining: the last answer owed says so. One with answers still owed
     * after it keeps the connection; the drain closes it once they are out.
     */
    bool close = !r->keep || (srv->draining && r->next == NULL);
    char head[512];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d %s\r\nServer: tern-demo\r\nContent-Type: %s\r\n"
                     "Content-Length: %zu\r\nConnection: %s\r\n%s\r\n",
                     code, reason(code), type, body_len, close ? "close" : "keep-alive",
                     extra_headers ? extra_headers : "");
    char *msg = malloc((size_t)n + body_len);
    if (msg == NULL) {
        http_close(c);
        return;
    }
    memcpy(msg, head, (size_t)n);
    memcpy(msg + n, body, body_len);
    srv->n.responses++;
    r->msg = msg;
    r->len = (size_t)n + body_len;
    r->close = close;
    r->job = NULL;
    r->ready = true;
    flush(c);
}

void http_respond(struct conn *c, int code, const char *type, const char *extra_headers,
                  const char *body, size_t body_len)
{
    struct reply *r = http_reserve(c);
    if (r != NULL)
        http_fill(c, r, code, type, extra_headers, body, body_len);
}

static void handle(struct conn *c)
{
    struct server *srv = c->srv;
    srv->n.requests++;
    if (c->refuse != 0) {
        c->keep_alive = false;
        if (c->refuse == 413) {
            srv->n.too_large++;
            http_respond(c, 413, "text/plain", NULL, "body too large\n", 15);
        } else if (c->refuse == 400) {
            srv->n.bad_request++;
            srv->n.framing_refused++;
            http_respond(c, 400, "text/plain", NULL, "ambiguous framing\n", 18);
        } else {
            srv->n.upgrade_refused++;
            http_respond(c, 501, "text/plain", NULL, "no protocol upgrades\n", 21);
        }
        return;
    }
    if (c->url_too_long) {
        c->keep_alive = false;
        http_respond(c, 414, "text/plain", NULL, "URI too long\n", 13);
        return;
    }
    if (c->parser.method != HTTP_GET) {
        srv->n.bad_request++;
        http_respond(c, 405, "text/plain", "Allow: GET\r\n", "GET only\n", 9);
        return;
    }
    struct http_parser_url u;
    http_parser_url_init(&u);
    if (http_parser_parse_url(c->url, c->url_len, 0, &u) != 0 || !(u.field_set & (1 << UF_PATH))) {
        srv->n.bad_request++;
        http_respond(c, 400, "text/plain", NULL, "bad URL\n", 8);
        return;
    }
    c->held_path = u.field_data[UF_PATH].off;
    c->held_path_len = u.field_data[UF_PATH].len;
    c->held_query = c->held_query_len = 0;
    if (u.field_set & (1 << UF_QUERY)) {
        c->held_query = u.field_data[UF_QUERY].off;
        c->held_query_len = u.field_data[UF_QUERY].len;
    }
    /* The url stays put while held: parsing, which would overwrite it, waits too. */
    c->held = !route_request(c, c->url + c->held_path, c->held_path_len,
                             c->url + c->held_query, c->held_query_len);
}

/* A request the parser could not take, or whose framing is refused: 400, then close. */
static void bad_request(struct conn *c, bool framing)
{
    c->srv->n.requests++;
    c->srv->n.bad_request++;
    if (framing)
        c->srv->n.framing_refused++;
    c->keep_alive = false;
    c->in_request = false;
    c->crlf_due = false;
    http_respond(c, 400, "text/plain", NULL, "bad request\n", 12);
}

/*
 * The parser paused at the end of a chunk's data: the next two bytes must
 * be CRLF. Returns 1 when they are (parsing goes on), 0 when they have not
 * all come yet, -1 when they are something else.
 */
static int chunk_crlf(struct conn *c)
{
    if (c->in_len - c->crlf_at < 2)
        return 0;
    c->crlf_due = false;
    return c->in[c->crlf_at] == '\r' && c->in[c->crlf_at + 1] == '\n' ? 1 : -1;
}

/* Parse and answer what is buffered, one request at a time, while allowed. */
static void process(struct conn *c)
{
    while (!c->busy && !c->held && !c->closing && !c->shutting && !c->backlogged && c->keep_alive &&
           !c->srv->draining && c->nreplies < PIPELINE_MAX && c->in_off < c->in_len) {
        if (c->crlf_due) {
            int ok = chunk_crlf(c);
            if (ok == 0)
                break; /* wait for the bytes after the chunk */
            if (ok < 0) {
                bad_request(c, true);
                return;
            }
            http_parser_pause(&c->parser, 0);
        }
        size_t n = http_parser_execute(&c->parser, &settings, c->in + c->in_off,
                                       c->in_len - c->in_off);
        c->in_off += n;
        enum http_errno err = HTTP_PARSER_ERRNO(&c->parser);
        if (err == HPE_PAUSED && c->crlf_due) {
            continue; /* a chunk's data ended: its CRLF is checked first */
        } else if (err == HPE_PAUSED) {
            http_parser_pause(&c->parser, 0);
            handle(c);
        } else if (err != HPE_OK) {
            bad_request(c, false);
            return;
        } else {
            break; /* a partial request: wait for more bytes */
        }
    }
    if (c->in_off == c->in_len && !c->crlf_due)
        c->in_off = c->in_len = 0;
}

static void on_read(tern_loop *loop, tern_id stream, int status, const void *data, size_t len,
                    void *arg);

void http_continue(struct conn *c)
{
    flush(c);
    if (c->closing || c->shutting)
        return;
    if (c->replies == NULL && !c->busy && !c->backlogged) {
        if (c->held) {
            c->held = route_request(c, c->url + c->held_path, c->held_path_len,
                                    c->url + c->held_query, c->held_query_len) == false;
        } else if (c->srv->draining || !c->keep_alive) {
            /* Everything owed is queued, and it was the last (a stream's
             * request said close, or the drain began): close once it is out. */
            shut_down(c);
            return;
        }
    }
    if (c->closing || c->shutting)
        return;
    process(c);
    if (c->closing || c->shutting)
        return;
    if (!c->reading && c->in_len - c->in_off <= IN_MAX &&
        tern_stream_read_start(c->srv->loop, c->id, on_read, c) == 0)
        c->reading = true;
    conn_watch(c);
}

static void on_read(tern_loop *loop, tern_id stream, int status, const void *data, size_t len,
                    void *arg)
{
    struct conn *c = arg;
    if (status < 0 || len == 0) {
        /* The client hung up (or reset): close its owner, stop its jobs. */
        http_close(c);
        return;
    }
    if (c->in_len + len > c->in_cap) {
        size_t cap = c->in_cap ? c->in_cap : 4096;
        while (cap < c->in_len + len)
            cap *= 2;
        char *in = realloc(c->in, cap);
        if (in == NULL) {
            http_close(c);
            return;
        }
        c->in = in;
        c->in_cap = cap;
    }
    memcpy(c->in + c->in_len, data, len);
    c->in_len += len;
    http_continue(c);
    if (!c->closing && c->in_len - c->in_off > IN_MAX && c->reading) {
        tern_stream_read_stop(loop, stream);
        c->reading = false;
    }
}

void http_request_done(struct conn *c)
{
    c->busy = false;
    c->job = NULL;
    if (!c->closing)
        http_continue(c);
}

/* Bytes handed to the stream that the socket has taken. */
static uint64_t drained(struct conn *c)
{
    size_t queued = 0;
    (void)tern_stream_write_queue_size(c->srv->loop, c->id, &queued);
    return c->written - queued;
}

static int arm(struct conn *c, uint64_t ns);

/*
 * A bound passed. The idle and request bounds close the connection; the
 * write bound closes it only if no byte drained since it was armed and
 * bytes are still queued, and otherwise starts over.
 */
static void on_bound(tern_loop *loop, tern_id id, void *arg)
{
    (void)id;
    struct conn *c = arg;
    c->timer = 0; /* a one-shot timer's id is stale once its callback starts */
    uint64_t now = tern_loop_now(loop);
    if (now > c->timer_due)
        c->srv->n.timer_lag_ns += now - c->timer_due;
    c->srv->n.timer_fired++;
    if (c->waiting == WAIT_WRITE) {
        size_t queued = 0;
        (void)tern_stream_write_queue_size(loop, c->id, &queued);
        uint64_t now_drained = c->written - queued;
        if (queued == 0 || now_drained != c->drained_at_arm) {
            c->drained_at_arm = now_drained;
            if (arm(c, c->srv->write_ns) < 0) {
                c->waiting = WAIT_NONE;
                http_close(c);
            }
            return;
        }
    }
    if (c->waiting == WAIT_REQUEST)
        c->srv->n.slowloris_closed++;
    else if (c->waiting == WAIT_WRITE)
        c->srv->n.slow_reader_closed++;
    else
        c->srv->n.idle_closed++;
    c->waiting = WAIT_NONE;
    http_close(c);
}

/*
 * Start the connection's timer for ns. It is unreferenced: it guards the
 * stream, which is what keeps the loop busy. 0 or a negative errno.
 */
static int arm(struct conn *c, uint64_t ns)
{
    tern_loop *loop = c->srv->loop;
    int rc = tern_timer_start(loop, ns, 0, on_bound, c, &c->timer);
    if (rc < 0)
        return rc;
    c->timer_due = tern_loop_now(loop) + ns;
    tern_unref(loop, c->timer);
    return 0;
}

/*
 * Arm the bound the connection's state calls for, if it changed: the write
 * bound while the client holds up bytes owed to it (backlogged), and while
 * a stream is answered or the last answer drains (the server is owed
 * progress, which the bound checks); the request bound while a request is
 * incomplete; the idle bound between requests; none while the server owes
 * an answer it is still making (a /hash in flight).
 */
static void conn_watch(struct conn *c)
{
    enum conn_wait want = WAIT_NONE;
    if (c->closing)
        want = WAIT_NONE;
    else if (c->backlogged || c->busy || c->shutting)
        want = WAIT_WRITE;
    else if (!c->shutting && !c->busy && !c->held && c->replies == NULL)
        want = c->in_request ? WAIT_REQUEST : WAIT_IDLE;
    if (want == c->waiting)
        return;
    tern_loop *loop = c->srv->loop;
    if (c->timer != 0) {
        tern_timer_stop(loop, c->timer);
        c->timer = 0;
    }
    c->waiting = want;
    if (want == WAIT_NONE)
        return;
    uint64_t ns = want == WAIT_REQUEST ? c->srv->request_ns
                  : want == WAIT_WRITE ? c->srv->write_ns
                                       : c->srv->idle_ns;
    if (want == WAIT_WRITE)
        c->drained_at_arm = drained(c);
    if (arm(c, ns) < 0) {
        /* Out of operations or memory: a connection nothing bounds is not kept. */
        c->waiting = WAIT_NONE;
        http_close(c);
    }
}

static void on_close(tern_loop *loop, tern_id stream, void *arg)
{
    (void)loop;
    (void)stream;
    struct conn *c = arg;
    struct server *srv = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->conn_list = c->next;
    if (c->next)
        c->next->prev = c->prev;
    srv->conns--;
    free(c->in);
    free(c);
    server_maybe_done(srv);
}

void http_close(struct conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    struct server *srv = c->srv;
    if (c->timer != 0) {
        tern_timer_stop(srv->loop, c->timer);
        c->timer = 0;
    }
    c->waiting = WAIT_NONE;
    if (c->job != NULL)
        route_abandon(c);
    /* Nobody will read the answers owed: their jobs finish unheard (conn = NULL). */
    for (struct reply *r = c->replies, *next; r != NULL; r = next) {
        next = r->next;
        if (r->job != NULL)
            r->job->conn = NULL;
        free(r->msg);
        free(r);
    }
    c->replies = c->replies_tail = NULL;
    c->nreplies = 0;
    if (c->owner != 0) {
        /* Its queued hashes never run; a running one is flagged. Each done says -ECANCELED. */
        tern_owner_close(srv->loop, c->owner);
        c->owner = 0;
        srv->owners--;
    }
    tern_stream_close(srv->loop, c->id);
}

void http_close_idle(struct server *srv)
{
    for (struct conn *c = srv->conn_list, *next; c != NULL; c = next) {
        next = c->next;
        if (c->closing || c->shutting || c->busy || c->replies != NULL || c->held)
            continue;
        size_t queued = 0;
        (void)tern_stream_write_queue_size(srv->loop, c->id, &queued);
        if (queued == 0) {
            http_close(c);
        } else {
            srv->n.drain_flushed++;
            shut_down(c); /* the answers queued go out first, under the write bound */
        }
    }
}

/* The answers queued drained to half the high-water mark: go on. */
static void on_drain(tern_loop *loop, tern_id stream, void *arg)
{
    (void)loop;
    (void)stream;
    struct conn *c = arg;
    c->backlogged = false;
    if (c->closing)
        return;
    if (c->shutting)
        conn_watch(c);
    else
        http_continue(c);
}

void http_accept(tern_loop *loop, tern_id listener, int status, tern_id stream, void *arg)
{
    (void)listener;
    struct server *srv = arg;
    if (status < 0) {
        /* Out of descriptors: tern pauses the listener and retries by itself. */
        return;
    }
    struct conn *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        tern_stream_close(loop, stream);
        return;
    }
    /* The connection's owner: its /hash jobs in flight count against owner_cap. */
    if (tern_owner_open(loop, srv->owner_cap, &c->owner) < 0) {
        free(c);
        tern_stream_close(loop, stream);
        return;
    }
    srv->owners++;
    c->srv = srv;
    c->id = stream;
    c->keep_alive = true;
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    int one = 1;
    int fd = tern_stream_fd(loop, stream);
    if (fd >= 0) /* answers are single writes: no reason to wait for Nagle */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    tern_stream_on_close(loop, stream, on_close, c);
    tern_stream_set_high_water(loop, stream, HIGH_WATER, on_drain, c);
    c->next = srv->conn_list;
    if (c->next)
        c->next->prev = c;
    srv->conn_list = c;
    srv->conns++;
    srv->n.accepted++;
    if (tern_stream_read_start(loop, stream, on_read, c) < 0) {
        http_close(c);
        return;
    }
    c->reading = true;
    conn_watch(c); /* the idle bound, until the first request begins */
}
