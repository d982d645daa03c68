/*
 * hash_server: a small HTTP/1.0 server that answers GET /NAME with the
 * 64-bit FNV-1a hash and the size of the file NAME in its directory.
 *
 * - the file is read with a file request (tern_fs_read_file, at most
 *   FILE_MAX bytes) and hashed on the pool (tern_submit), so the loop
 *   never waits for the disk or for the hashing;
 * - it sheds load: with half the pool's queue waiting (tern_pool_stats_get)
 *   it answers 503 at once, and so it does when the pool refuses a request
 *   (-EAGAIN), which costs nothing and leaves nothing to undo;
 * - SIGUSR1 prints its counts and the pool's; SIGTERM or SIGINT stops it:
 *   the listener closes, answers under way finish, then tern_loop_run
 *   returns.
 *
 *   ./hash_server PORT DIR   serve DIR on 127.0.0.1:PORT (0: any free port)
 *   ./hash_server            test itself: serve two files it writes, run a
 *                            copy of itself as the client (tern_process_spawn,
 *                            its output read as a stream), check the answers,
 *                            print the counts and stop; exit 0 if all held
 *   ./hash_server --get PORT NAME...   the client: one request per NAME
 *
 * Build: cc -std=c11 hash_server.c $(pkg-config --cflags --libs tern)
 */
#define _POSIX_C_SOURCE 200809L

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <tern.h>

enum {
    WORKERS = 2,
    QUEUE_CAPACITY = 64,
    SHED_AT = QUEUE_CAPACITY / 2, /* queued jobs past which requests are turned away */
    HEAD_MAX = 1024,              /* the longest request head accepted */
    FILE_MAX = 1 << 20,           /* the largest file hashed */
};

struct server {
    tern_loop *loop;
    const char *dir;
    tern_id listener, on_usr1, on_term, on_int;
    unsigned long connections, served, not_found, shed, failed;
    bool stopping;
    /* Self-test only: the client child, its output, and what it should say. */
    char out[512], expected[512];
    size_t out_len;
    int child_code;
    bool child_done;
};

struct conn {
    struct server *srv;
    tern_id stream;
    bool closed;  /* its close callback ran */
    bool pending; /* a file request or a job holds a pointer to it */
    size_t used;
    char head[HEAD_MAX];
    void *data; /* the file, while it is hashed */
    size_t size;
    uint64_t hash;
    char reply[192];
};

static uint64_t fnv1a(const unsigned char *p, size_t n)
{
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void release(struct conn *c)
{
    tern_fs_free(c->data);
    free(c);
}

static void on_closed(tern_loop *loop, tern_id stream, void *arg)
{
    (void)loop;
    (void)stream;
    struct conn *c = arg;
    c->closed = true;
    if (!c->pending)
        release(c); /* else the request's callback frees it */
}

static void on_written(tern_loop *loop, tern_id stream, int status, void *arg)
{
    (void)status;
    (void)arg;
    tern_stream_close(loop, stream); /* one answer per connection */
}

static void answer(struct conn *c, const char *status, const char *body)
{
    int n = snprintf(c->reply, sizeof c->reply,
                     "HTTP/1.0 %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s", status,
                     strlen(body), body);
    tern_buf b = {c->reply, (size_t)n};
    if (tern_stream_write(c->srv->loop, c->stream, &b, 1, on_written, c) < 0)
        tern_stream_close(c->srv->loop, c->stream);
}

static void shed(struct conn *c)
{
    c->srv->shed++;
    answer(c, "503 Service Unavailable", "busy\n");
}

static void *hash_work(tern_job *job, void *arg)
{
    (void)job;
    struct conn *c = arg;
    c->hash = fnv1a(c->data, c->size);
    return NULL;
}

static void hash_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop;
    (void)id;
    (void)result;
    struct conn *c = arg;
    c->pending = false;
    if (c->closed) {
        release(c);
        return;
    }
    tern_fs_free(c->data);
    c->data = NULL;
    if (status < 0) {
        c->srv->failed++;
        answer(c, "500 Internal Server Error", "failed\n");
        return;
    }
    char body[64];
    snprintf(body, sizeof body, "%016llx %zu\n", (unsigned long long)c->hash, c->size);
    c->srv->served++;
    answer(c, "200 OK", body);
}

static void file_read(tern_loop *loop, tern_id id, int status, tern_fs_result *res, void *arg)
{
    (void)id;
    struct conn *c = arg;
    c->pending = false;
    c->data = status == 0 ? res->data : NULL; /* ours now, freed with the connection */
    c->size = status == 0 ? (size_t)res->value : 0;
    if (c->closed) {
        release(c);
        return;
    }
    if (status == -ENOENT) {
        c->srv->not_found++;
        answer(c, "404 Not Found", "not found\n");
    } else if (status == -EFBIG) {
        c->srv->failed++;
        answer(c, "413 Content Too Large", "too large\n");
    } else if (status == -EAGAIN) {
        shed(c);
    } else if (status < 0) {
        c->srv->failed++;
        answer(c, "500 Internal Server Error", "failed\n");
    } else {
        int rc = tern_submit(loop, TERN_BOUNDED, hash_work, hash_done, c, NULL);
        if (rc == 0) {
            c->pending = true;
        } else if (rc == -EAGAIN) {
            shed(c);
        } else {
            c->srv->failed++;
            answer(c, "500 Internal Server Error", "failed\n");
        }
    }
}

/* A name in the served directory itself: no path, no hidden files. */
static bool plain_name(const char *name)
{
    if (name[0] == '\0' || name[0] == '.')
        return false;
    return strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
           strlen(name);
}

static void start_request(struct conn *c)
{
    struct server *s = c->srv;
    char name[128], path[4096];
    if (sscanf(c->head, "GET /%127s HTTP/", name) != 1 || !plain_name(name)) {
        s->failed++;
        answer(c, "400 Bad Request", "bad request\n");
        return;
    }
    tern_pool_stats ps;
    tern_pool_stats_get(&ps);
    if (ps.queued >= SHED_AT) {
        shed(c);
        return;
    }
    snprintf(path, sizeof path, "%s/%s", s->dir, name);
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.max_bytes = FILE_MAX;
    int rc = tern_fs_read_file(s->loop, path, &o, file_read, c, NULL);
    if (rc == 0) {
        c->pending = true;
    } else if (rc == -EAGAIN) {
        shed(c);
    } else {
        s->failed++;
        answer(c, "500 Internal Server Error", "failed\n");
    }
}

static void on_read(tern_loop *loop, tern_id stream, int status, const void *data, size_t len,
                    void *arg)
{
    struct conn *c = arg;
    if (status < 0 || len == 0 || len > HEAD_MAX - 1 - c->used) {
        tern_stream_close(loop, stream); /* gone, or a head too long to be ours */
        return;
    }
    memcpy(c->head + c->used, data, len);
    c->used += len;
    c->head[c->used] = '\0';
    if (strstr(c->head, "\r\n\r\n") == NULL && strstr(c->head, "\n\n") == NULL)
        return; /* the head is not complete yet */
    tern_stream_read_stop(loop, stream);
    start_request(c);
}

static void on_accept(tern_loop *loop, tern_id listener, int status, tern_id stream, void *arg)
{
    (void)listener;
    struct server *s = arg;
    if (status < 0)
        return; /* out of descriptors or memory: the listener pauses and retries */
    struct conn *c = calloc(1, sizeof *c);
    if (c == NULL) {
        tern_stream_close(loop, stream);
        return;
    }
    c->srv = s;
    c->stream = stream;
    s->connections++;
    tern_stream_on_close(loop, stream, on_closed, c);
    tern_stream_read_start(loop, stream, on_read, c);
}

static void print_stats(struct server *s)
{
    tern_pool_stats p;
    tern_pool_stats_get(&p);
    printf("stats: %lu connections, %lu served, %lu not found, %lu shed, %lu failed; "
           "pool: %llu jobs completed, %llu refused, queued peak %u\n",
           s->connections, s->served, s->not_found, s->shed, s->failed,
           (unsigned long long)p.completed, (unsigned long long)p.refused_queue_full,
           p.queued_peak);
}

static void stop_serving(struct server *s)
{
    if (s->stopping)
        return;
    s->stopping = true;
    tern_stream_close(s->loop, s->listener);
    tern_signal_stop(s->loop, s->on_usr1);
    tern_signal_stop(s->loop, s->on_term);
    tern_signal_stop(s->loop, s->on_int);
}

static void on_signal(tern_loop *loop, tern_id id, int signo, void *arg)
{
    (void)loop;
    (void)id;
    struct server *s = arg;
    if (signo == SIGUSR1)
        print_stats(s);
    if (signo != SIGUSR1 || s->child_done)
        stop_serving(s);
}

/* ---- self-test: a copy of this program as the client ---------------- */

static void on_child_output(tern_loop *loop, tern_id stream, int status, const void *data,
                            size_t len, void *arg)
{
    struct server *s = arg;
    if (status < 0 || len == 0) {
        tern_stream_close(loop, stream);
        return;
    }
    size_t room = sizeof s->out - 1 - s->out_len;
    memcpy(s->out + s->out_len, data, len < room ? len : room);
    s->out_len += len < room ? len : room;
    s->out[s->out_len] = '\0';
}

static void on_child_exit(tern_loop *loop, tern_id id, int status, int code, int sig, void *arg)
{
    (void)loop;
    (void)id;
    (void)sig;
    struct server *s = arg;
    s->child_code = status == 0 ? code : -1;
    s->child_done = true;
    kill(getpid(), SIGUSR1); /* print the counts, then stop */
}

static int write_file(const char *dir, const char *name, const char *text, char *expect,
                      size_t room)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f == NULL || fputs(text, f) == EOF || fclose(f) != 0)
        return -1;
    size_t used = strlen(expect);
    snprintf(expect + used, room - used, "%s 200 %016llx %zu\n", name,
             (unsigned long long)fnv1a((const unsigned char *)text, strlen(text)), strlen(text));
    return 0;
}

static int spawn_client(struct server *s, const char *self, unsigned port)
{
    char port_text[16];
    snprintf(port_text, sizeof port_text, "%u", port);
    char *argv[] = {(char *)self, "--get", port_text, "a.txt", "b.txt", "missing.txt", NULL};
    tern_stdio io[3] = {{.kind = TERN_STDIO_IGNORE}, {.kind = TERN_STDIO_STREAM},
                        {.kind = TERN_STDIO_INHERIT}};
    tern_process_options o;
    tern_process_options_init(&o);
    o.file = self;
    o.argv = argv;
    o.stdio = io;
    o.stdio_count = 3;
    int rc = tern_process_spawn(s->loop, &o, on_child_exit, s, NULL);
    if (rc < 0)
        return rc;
    return tern_stream_read_start(s->loop, io[1].stream, on_child_output, s);
}

/* ---- the client: plain blocking sockets, one request per name ------- */

static int get(unsigned port, const char *name)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    char buf[1024];
    size_t used = 0;
    ssize_t n = 0;
    int len = snprintf(buf, sizeof buf, "GET /%s HTTP/1.0\r\n\r\n", name);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 || write(fd, buf, (size_t)len) != len) {
        close(fd);
        return -1;
    }
    while (used < sizeof buf - 1 && (n = read(fd, buf + used, sizeof buf - 1 - used)) > 0)
        used += (size_t)n;
    close(fd);
    buf[used] = '\0';
    const char *body = strstr(buf, "\r\n\r\n");
    if (n < 0 || strncmp(buf, "HTTP/1.0 ", 9) != 0 || body == NULL)
        return -1;
    printf("%s %d %s", name, atoi(buf + 9), body + 4);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 3 && strcmp(argv[1], "--get") == 0) {
        for (int i = 3; i < argc; i++)
            if (get((unsigned)atoi(argv[2]), argv[i]) != 0)
                return 1;
        return 0;
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* a reader of our output sees each line at once */
    static struct server s;
    bool self_test = argc < 3;
    char dir[] = "/tmp/hash_server.XXXXXX";
    unsigned port = self_test ? 0 : (unsigned)atoi(argv[1]);
    s.dir = self_test ? mkdtemp(dir) : argv[2];
    if (s.dir == NULL ||
        (self_test && (write_file(dir, "a.txt", "hello, tern\n", s.expected, sizeof s.expected) ||
                       write_file(dir, "b.txt", "a second file, a little longer\n", s.expected,
                                  sizeof s.expected)))) {
        perror("hash_server: the test files");
        return 1;
    }
    if (self_test)
        strcat(s.expected, "missing.txt 404 not found\n");

    tern_pool_config cfg;
    tern_pool_config_init(&cfg);
    cfg.threads = WORKERS;
    cfg.queue_capacity = QUEUE_CAPACITY;
    int rc = tern_pool_start(&cfg);
    if (rc == 0)
        rc = tern_loop_new(&s.loop, NULL);
    if (rc == 0)
        rc = tern_tcp_listen(s.loop, "127.0.0.1", port, TERN_TCP_BACKLOG_DEFAULT, 0, on_accept,
                             &s, &s.listener);
    if (rc == 0)
        rc = tern_tcp_port(s.loop, s.listener, &port);
    if (rc == 0)
        rc = tern_signal_start(s.loop, SIGUSR1, on_signal, &s, &s.on_usr1);
    if (rc == 0)
        rc = tern_signal_start(s.loop, SIGTERM, on_signal, &s, &s.on_term);
    if (rc == 0)
        rc = tern_signal_start(s.loop, SIGINT, on_signal, &s, &s.on_int);
    if (rc == 0)
        printf("listening on 127.0.0.1:%u\n", port);
    if (rc == 0 && self_test)
        rc = spawn_client(&s, argv[0], port);
    if (rc != 0) {
        fprintf(stderr, "hash_server: %s\n", tern_strerror(rc));
        return 1;
    }

    tern_loop_run(s.loop);
    tern_loop_free(s.loop);
    tern_pool_shutdown(TERN_POOL_DRAIN, 5ull * 1000 * 1000 * 1000);
    if (!self_test)
        return 0;

    char path[4096];
    snprintf(path, sizeof path, "%s/a.txt", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/b.txt", dir);
    unlink(path);
    rmdir(dir);
    bool ok = s.child_code == 0 && strcmp(s.out, s.expected) == 0 && s.served == 2 &&
              s.not_found == 1 && s.failed == 0;
    if (!ok)
        fprintf(stderr, "hash_server: the client said\n%sand should have said\n%s", s.out,
                s.expected);
    printf("hash_server: %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
