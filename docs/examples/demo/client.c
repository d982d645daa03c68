/*
 * tern-demo-client: the demo server's fairness and slowloris runs, from
 * the client's side. Plain sockets and poll(2), one thread: the client
 * that measures the server shares none of its code.
 *
 *   tern-demo-client fairness --port N [--host 127.0.0.1] [--polite 32]
 *                    [--requests 20] [--depth 100] [--greedy-min 300]
 *                    [--rounds 2000] [--deadline-s 120]
 *
 *     One greedy connection keeps --depth /hash requests pipelined (sent
 *     without waiting for answers) until every polite connection is done
 *     and it has sent at least --greedy-min; --polite connections each
 *     send --requests /hash requests one at a time, the next when the
 *     answer came. Prints, for each side, the requests sent, answers 200,
 *     503 (and how many of those carried Retry-After), anything else, and
 *     the latency percentiles (p50/p99, from the request's write to its
 *     answer's last byte) of the 200s and the 503s.
 *
 *   tern-demo-client slowloris --port N [--host ...] [--connections 100]
 *                    [--idle] [--deadline-s 60]
 *
 *     Opens --connections connections, sends half a request on each (with
 *     --idle: nothing at all) and holds them until the server closes
 *     them. Prints how many the server closed, how many it answered
 *     (none should be) and how many were still open at the deadline, and
 *     how long the closes took (min/max, from the half request's write).
 *
 * Exits 0 when every request got its answer (fairness) or every
 * connection was closed by the server (slowloris); 1 otherwise, with a
 * FAIL line that says what was found; 2 for a usage error. The test
 * (test/demo_test.sh) and .ci/demo judge the figures.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem, strndup (the build defines it too) */
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct opts {
    const char *host;
    unsigned port, polite, requests, depth, greedy_min, rounds, connections, deadline_s;
    bool idle;
};

/* Latencies of one kind of answer on one side, in ns. */
struct samples {
    uint64_t *v;
    size_t n, cap;
};

struct side {
    const char *name;
    unsigned sent, ok, refused, refused_retry_after, other;
    struct samples ok_ns, refused_ns;
};

struct conn {
    int fd;
    struct side *side;
    bool greedy;
    unsigned sent, answered; /* requests written, answers read */
    uint64_t *sent_at;       /* write time of each request, by index */
    size_t sent_cap;
    char out[512];           /* the request being written */
    size_t out_len, out_off;
    char *in;                /* bytes of answers not yet complete */
    size_t in_len, in_cap;
    bool done;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(p, c * elem);
    if (q == NULL) {
        fprintf(stderr, "FAIL: out of memory\n");
        exit(1);
    }
    *cap = c;
    return q;
}

static void add_sample(struct samples *s, uint64_t ns)
{
    s->v = grow(s->v, &s->cap, s->n + 1, sizeof(*s->v));
    s->v[s->n++] = ns;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The p-th percentile (nearest rank) in ms; s has samples. */
static double percentile_ms(struct samples *s, double p)
{
    qsort(s->v, s->n, sizeof(*s->v), cmp_u64);
    size_t rank = (size_t)(p / 100.0 * (double)s->n + 0.999999);
    if (rank < 1)
        rank = 1;
    return (double)s->v[rank - 1] / 1e6;
}

static int connect_to(const struct opts *o)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
    if (inet_pton(AF_INET, o->host, &sa.sin_addr) != 1) {
        fprintf(stderr, "FAIL: bad host %s (an IPv4 address)\n", o->host);
        exit(2);
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        fprintf(stderr, "FAIL: connect to %s:%u: %s\n", o->host, o->port, strerror(errno));
        exit(1);
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

/* ------------------------------------------------------------------ */
/* fairness                                                            */
/* ------------------------------------------------------------------ */

/* Queue the next request's bytes; it counts as sent once fully written. */
static void next_request(struct conn *c, const struct opts *o)
{
    c->out_len = (size_t)snprintf(c->out, sizeof(c->out),
                                  "GET /hash?rounds=%u&c=%s&n=%u HTTP/1.1\r\nHost: %s\r\n\r\n",
                                  o->rounds, c->greedy ? "greedy" : "polite", c->sent, o->host);
    c->out_off = 0;
}

/* Parse the complete answers in c->in; returns false on a malformed one. */
static bool read_answers(struct conn *c)
{
    size_t off = 0;
    for (;;) {
        char *end = memmem(c->in + off, c->in_len - off, "\r\n\r\n", 4);
        if (end == NULL)
            break;
        size_t head_len = (size_t)(end - (c->in + off)) + 4;
        int code = 0;
        long clen = -1;
        bool retry_after = false;
        char *head = strndup(c->in + off, head_len);
        if (head == NULL || sscanf(head, "HTTP/1.1 %d", &code) != 1) {
            fprintf(stderr, "FAIL: %s connection: not an HTTP/1.1 answer: %.40s\n",
                    c->side->name, c->in + off);
            free(head);
            return false;
        }
        for (char *line = strstr(head, "\r\n"); line != NULL; line = strstr(line + 2, "\r\n")) {
            if (strncasecmp(line + 2, "Content-Length:", 15) == 0)
                clen = strtol(line + 17, NULL, 10);
            else if (strncasecmp(line + 2, "Retry-After:", 12) == 0)
                retry_after = true;
        }
        free(head);
        if (clen < 0) {
            fprintf(stderr, "FAIL: %s connection: an answer (%d) without Content-Length\n",
                    c->side->name, code);
            return false;
        }
        if (c->in_len - off < head_len + (size_t)clen)
            break; /* the body is still on its way */
        off += head_len + (size_t)clen;
        if (c->answered >= c->sent) {
            fprintf(stderr, "FAIL: %s connection: an answer (%d) to no request\n",
                    c->side->name, code);
            return false;
        }
        uint64_t ns = now_ns() - c->sent_at[c->answered++];
        struct side *s = c->side;
        if (code == 200) {
            s->ok++;
            add_sample(&s->ok_ns, ns);
        } else if (code == 503) {
            s->refused++;
            s->refused_retry_after += retry_after;
            add_sample(&s->refused_ns, ns);
        } else {
            s->other++;
        }
    }
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
    return true;
}

/* Write what can be written of the pending request; true once it is all out. */
static bool write_some(struct conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return false;
        if (n < 0) {
            fprintf(stderr, "FAIL: %s connection: write: %s\n", c->side->name, strerror(errno));
            exit(1);
        }
        c->out_off += (size_t)n;
    }
    c->sent_at = grow(c->sent_at, &c->sent_cap, c->sent + 1, sizeof(*c->sent_at));
    c->sent_at[c->sent++] = now_ns();
    c->side->sent++;
    c->out_len = c->out_off = 0;
    return true;
}

static bool polite_all_done(const struct conn *conns, unsigned n)
{
    for (unsigned i = 1; i < n; i++)
        if (!conns[i].done)
            return false;
    return true;
}

/*
 * Whether c sends another request now: the greedy side while the polite
 * ones run (and until it has sent greedy_min), keeping depth unanswered;
 * a polite one when its last request has been answered.
 */
static bool wants_more(const struct conn *c, const struct opts *o, bool polite_done)
{
    if (c->greedy)
        return (!polite_done || c->sent < o->greedy_min) && c->sent - c->answered < o->depth;
    return c->sent == c->answered && c->sent < o->requests;
}

/* Write requests while c wants more and the socket takes them. */
static void pump(struct conn *c, const struct opts *o, bool polite_done)
{
    for (;;) {
        if (c->out_len == 0) {
            if (!wants_more(c, o, polite_done))
                return;
            next_request(c, o);
        }
        if (!write_some(c))
            return;
    }
}

/* "p50 X ms p99 Y ms", or "none" without samples. */
static const char *percentiles(struct samples *s, char *buf, size_t cap)
{
    if (s->n == 0)
        snprintf(buf, cap, "none");
    else
        snprintf(buf, cap, "p50 %.1f ms p99 %.1f ms", percentile_ms(s, 50), percentile_ms(s, 99));
    return buf;
}

static void print_side(struct side *s)
{
    char ok[64], refused[64];
    printf("%s: sent %u, served 200: %u, refused 503: %u (with Retry-After: %u), other: %u; "
           "latency of 200s %s; of 503s %s\n",
           s->name, s->sent, s->ok, s->refused, s->refused_retry_after, s->other,
           percentiles(&s->ok_ns, ok, sizeof(ok)),
           percentiles(&s->refused_ns, refused, sizeof(refused)));
}

static int fairness(const struct opts *o)
{
    struct side greedy = {.name = "greedy"}, polite = {.name = "polite"};
    unsigned n = o->polite + 1;
    struct conn *conns = calloc(n, sizeof(*conns));
    struct pollfd *pfd = calloc(n, sizeof(*pfd));
    int rc = 1;
    if (conns == NULL || pfd == NULL)
        goto out;
    for (unsigned i = 0; i < n; i++) {
        conns[i] = (struct conn){.fd = connect_to(o), .greedy = i == 0,
                                 .side = i == 0 ? &greedy : &polite};
    }
    printf("fairness: 1 greedy connection keeping %u /hash requests pipelined, %u polite "
           "connections sending %u each one at a time, rounds=%u\n",
           o->depth, o->polite, o->requests, o->rounds);
    fflush(stdout);
    uint64_t deadline = now_ns() + (uint64_t)o->deadline_s * 1000000000u;
    unsigned open = n;
    while (open > 0) {
        if (now_ns() > deadline) {
            fprintf(stderr,
                    "FAIL: gave up after %u s: %u connection(s) unfinished; greedy sent %u, "
                    "answered %u; polite sent %u, answered %u\n",
                    o->deadline_s, open, greedy.sent, greedy.ok + greedy.refused + greedy.other,
                    polite.sent, polite.ok + polite.refused + polite.other);
            goto out;
        }
        bool polite_done = polite_all_done(conns, n);
        for (unsigned i = 0; i < n; i++) {
            struct conn *c = &conns[i];
            if (!c->done)
                pump(c, o, polite_done);
            pfd[i] = (struct pollfd){.fd = c->done ? -1 : c->fd,
                                     .events = POLLIN | (c->out_len > 0 ? POLLOUT : 0)};
        }
        if (poll(pfd, n, 100) < 0 && errno != EINTR) {
            perror("poll");
            goto out;
        }
        for (unsigned i = 0; i < n; i++) {
            struct conn *c = &conns[i];
            if (c->done)
                continue;
            if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) {
                c->in = grow(c->in, &c->in_cap, c->in_len + 65536, 1);
                ssize_t r = read(c->fd, c->in + c->in_len, 65536);
                if (r < 0 && (errno == EAGAIN || errno == EINTR))
                    continue;
                if (r <= 0) {
                    fprintf(stderr, "FAIL: the server closed a %s connection with %u of its "
                                    "%u requests unanswered (%s)\n",
                            c->side->name, c->sent - c->answered, c->sent,
                            r < 0 ? strerror(errno) : "end of stream");
                    goto out;
                }
                c->in_len += (size_t)r;
                if (!read_answers(c))
                    goto out;
            }
            bool finished = c->greedy ? polite_all_done(conns, n) && c->sent >= o->greedy_min
                                      : c->sent >= o->requests;
            if (finished && c->answered == c->sent && c->out_len == 0) {
                c->done = true;
                close(c->fd);
                open--;
            }
        }
    }
    print_side(&greedy);
    print_side(&polite);
    rc = 0;
out:
    for (unsigned i = 0; conns != NULL && i < n; i++) {
        if (!conns[i].done && conns[i].fd > 0)
            close(conns[i].fd);
        free(conns[i].sent_at);
        free(conns[i].in);
    }
    free(conns);
    free(pfd);
    free(greedy.ok_ns.v);
    free(greedy.refused_ns.v);
    free(polite.ok_ns.v);
    free(polite.refused_ns.v);
    return rc;
}

/* ------------------------------------------------------------------ */
/* slowloris                                                           */
/* ------------------------------------------------------------------ */

static int slowloris(const struct opts *o)
{
    unsigned n = o->connections;
    struct pollfd *pfd = calloc(n, sizeof(*pfd));
    uint64_t *sent_at = calloc(n, sizeof(*sent_at));
    unsigned opened = 0, closed = 0, answered = 0, open = n;
    int rc = 1;
    if (pfd == NULL || sent_at == NULL)
        goto out;
    static const char half[] = "GET /hash?rounds=1 HTTP/1.1\r\nHost: slowloris\r\nX-Wait: ";
    for (unsigned i = 0; i < n; i++) {
        pfd[i] = (struct pollfd){.fd = connect_to(o), .events = POLLIN};
        opened++;
        if (!o->idle && write(pfd[i].fd, half, sizeof(half) - 1) != (ssize_t)sizeof(half) - 1) {
            fprintf(stderr, "FAIL: writing half a request: %s\n", strerror(errno));
            goto out;
        }
        sent_at[i] = now_ns();
    }
    printf("slowloris: %u connections holding %s\n", n,
           o->idle ? "nothing sent (idle)" : "half a request each");
    fflush(stdout);
    uint64_t min_ns = UINT64_MAX, max_ns = 0;
    uint64_t deadline = now_ns() + (uint64_t)o->deadline_s * 1000000000u;
    while (open > 0 && now_ns() < deadline) {
        if (poll(pfd, n, 100) < 0 && errno != EINTR) {
            perror("poll");
            goto out;
        }
        for (unsigned i = 0; i < n; i++) {
            if (pfd[i].fd < 0 || !(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char buf[4096];
            ssize_t r = read(pfd[i].fd, buf, sizeof(buf));
            if (r < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            if (r > 0) {
                answered++; /* the server answered half a request: not what we wait for */
                continue;
            }
            uint64_t ns = now_ns() - sent_at[i];
            min_ns = ns < min_ns ? ns : min_ns;
            max_ns = ns > max_ns ? ns : max_ns;
            closed++;
            open--;
            close(pfd[i].fd);
            pfd[i].fd = -1;
        }
    }
    printf("slowloris: closed by the server %u of %u, answered %u, still open %u; closed after "
           "min %.2f s, max %.2f s\n",
           closed, n, answered, open, closed ? (double)min_ns / 1e9 : 0.0,
           closed ? (double)max_ns / 1e9 : 0.0);
    if (open > 0)
        fprintf(stderr, "FAIL: %u of %u connections still open after %u s\n", open, n,
                o->deadline_s);
    rc = open == 0 && answered == 0 ? 0 : 1;
out:
    for (unsigned i = 0; i < opened; i++)
        if (pfd[i].fd >= 0)
            close(pfd[i].fd);
    free(pfd);
    free(sent_at);
    return rc;
}

/* ------------------------------------------------------------------ */

static void usage(void)
{
    fprintf(stderr,
            "usage: tern-demo-client fairness --port N [--host A] [--polite N] [--requests N]\n"
            "                        [--depth N] [--greedy-min N] [--rounds N] [--deadline-s N]\n"
            "       tern-demo-client slowloris --port N [--host A] [--connections N] [--idle]\n"
            "                        [--deadline-s N]\n");
    exit(2);
}

static unsigned number(const char *s)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno != 0 || *s == '\0' || *end != '\0' || v == 0 || v > 1000000)
        usage();
    return (unsigned)v;
}

int main(int argc, char **argv)
{
    struct opts o = {.host = "127.0.0.1", .polite = 32, .requests = 20, .depth = 100,
                     .greedy_min = 300, .rounds = 2000, .connections = 100, .deadline_s = 0};
    if (argc < 2)
        usage();
    const char *mode = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--idle") == 0) {
            o.idle = true;
            continue;
        }
        if (i + 1 >= argc)
            usage();
        const char *v = argv[++i];
        if (strcmp(a, "--host") == 0)
            o.host = v;
        else if (strcmp(a, "--port") == 0)
            o.port = number(v);
        else if (strcmp(a, "--polite") == 0)
            o.polite = number(v);
        else if (strcmp(a, "--requests") == 0)
            o.requests = number(v);
        else if (strcmp(a, "--depth") == 0)
            o.depth = number(v);
        else if (strcmp(a, "--greedy-min") == 0)
            o.greedy_min = number(v);
        else if (strcmp(a, "--rounds") == 0)
            o.rounds = number(v);
        else if (strcmp(a, "--connections") == 0)
            o.connections = number(v);
        else if (strcmp(a, "--deadline-s") == 0)
            o.deadline_s = number(v);
        else
            usage();
    }
    if (o.port == 0 || o.port > 65535)
        usage();
    if (strcmp(mode, "fairness") == 0) {
        if (o.deadline_s == 0)
            o.deadline_s = 120;
        return fairness(&o);
    }
    if (strcmp(mode, "slowloris") == 0) {
        if (o.deadline_s == 0)
            o.deadline_s = 60;
        return slowloris(&o);
    }
    usage();
}
