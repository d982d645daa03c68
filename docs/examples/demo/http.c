/*
 * Connections: bytes in, http-parser over them, responses out.
 *
 * One request is answered at a time per connection: the parser pauses on
 * each complete message, and parsing resumes only when its answer has been
 * queued (at once for static answers, when the pool job finishes for
 * /hash and /slow). Bytes that arrive meanwhile wait in `in`; reading goes
 * on, so a client that hangs up is noticed even while its job runs.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "demo.h"

/* Unparsed bytes a busy connection may hold before we stop reading it. */
#define IN_MAX (64 * 1024)

static int on_message_begin(http_parser *p)
{
    struct conn *c = p->data;
    c->url_len = 0;
    c->url_too_long = false;
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
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_message_complete = on_message_complete,
};

static void write_done(tern_loop *loop, tern_id stream, int status, void *arg)
{
    (void)loop;
    (void)stream;
    (void)status; /* a client that went away is noticed by the read side */
    free(arg);
}

void http_write(struct conn *c, const char *data, size_t len)
{
    char *copy = malloc(len);
    if (copy == NULL) {
        http_close(c);
        return;
    }
    memcpy(copy, data, len);
    tern_buf b = {copy, len};
    int rc = tern_stream_write(c->srv->loop, c->id, &b, 1, write_done, copy);
    if (rc < 0) {
        free(copy);
        http_close(c);
    }
}

static const char *reason(int code)
{
    switch (code) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 414: return "URI Too Long";
    case 500: return "Internal Server Error";
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

void http_respond(struct conn *c, int code, const char *type, const char *extra_headers,
                  const char *body, size_t body_len)
{
    struct server *srv = c->srv;
    bool keep = c->keep_alive && !srv->draining;
    char head[512];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d %s\r\nServer: tern-demo\r\nContent-Type: %s\r\n"
                     "Content-Length: %zu\r\nConnection: %s\r\n%s\r\n",
                     code, reason(code), type, body_len, keep ? "keep-alive" : "close",
                     extra_headers ? extra_headers : "");
    char *msg = malloc((size_t)n + body_len);
    if (msg == NULL) {
        http_close(c);
        return;
    }
    memcpy(msg, head, (size_t)n);
    memcpy(msg + n, body, body_len);
    srv->n.responses++;
    tern_buf b = {msg, (size_t)n + body_len};
    if (tern_stream_write(srv->loop, c->id, &b, 1, write_done, msg) < 0) {
        free(msg);
        http_close(c);
        return;
    }
    if (!keep) {
        c->keep_alive = false;
        /* Close once the answer is out: shutdown waits for the queue. */
        if (tern_stream_shutdown(srv->loop, c->id, shut_then_close, c) < 0)
            http_close(c);
    }
}

static void handle(struct conn *c)
{
    struct server *srv = c->srv;
    srv->n.requests++;
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
    const char *query = "";
    size_t query_len = 0;
    if (u.field_set & (1 << UF_QUERY)) {
        query = c->url + u.field_data[UF_QUERY].off;
        query_len = u.field_data[UF_QUERY].len;
    }
    route_request(c, c->url + u.field_data[UF_PATH].off, u.field_data[UF_PATH].len, query,
                  query_len);
}

/* Parse and answer what is buffered, one request at a time. */
static void process(struct conn *c)
{
    while (!c->busy && !c->closing && c->keep_alive && c->in_off < c->in_len) {
        size_t n = http_parser_execute(&c->parser, &settings, c->in + c->in_off,
                                       c->in_len - c->in_off);
        c->in_off += n;
        enum http_errno err = HTTP_PARSER_ERRNO(&c->parser);
        if (err == HPE_PAUSED) {
            http_parser_pause(&c->parser, 0);
            handle(c);
        } else if (err != HPE_OK) {
            c->srv->n.requests++;
            c->srv->n.bad_request++;
            c->keep_alive = false;
            http_respond(c, 400, "text/plain", NULL, "bad request\n", 12);
            return;
        } else {
            break; /* a partial request: wait for more bytes */
        }
    }
    if (c->in_off == c->in_len)
        c->in_off = c->in_len = 0;
}

static void on_read(tern_loop *loop, tern_id stream, int status, const void *data, size_t len,
                    void *arg)
{
    struct conn *c = arg;
    if (status < 0 || len == 0) {
        /* The client hung up (or reset): stop any job answering it. */
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
    process(c);
    if (!c->closing && c->in_len - c->in_off > IN_MAX && c->reading) {
        tern_stream_read_stop(loop, stream);
        c->reading = false;
    }
}

void http_request_done(struct conn *c)
{
    c->busy = false;
    c->job = NULL;
    if (c->closing)
        return;
    if (c->srv->draining && c->keep_alive) {
        /* The answer went out with keep-alive before the drain began. */
        c->keep_alive = false;
        if (tern_stream_shutdown(c->srv->loop, c->id, shut_then_close, c) < 0)
            http_close(c);
        return;
    }
    if (!c->reading && tern_stream_read_start(c->srv->loop, c->id, on_read, c) == 0)
        c->reading = true;
    process(c);
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
    if (c->job != NULL)
        route_abandon(c);
    tern_stream_close(c->srv->loop, c->id);
}

void http_close_idle(struct server *srv)
{
    for (struct conn *c = srv->conn_list, *next; c != NULL; c = next) {
        next = c->next;
        if (!c->busy)
            http_close(c);
    }
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
}
