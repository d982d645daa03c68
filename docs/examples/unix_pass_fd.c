/*
 * A supervisor hands a worker a descriptor over a Unix-domain socket
 * (docs/net.md, "Unix-domain sockets").
 *
 * The supervisor listens on a socket file; the worker connects and checks
 * who is at the other end (peer credentials). The supervisor makes a pipe,
 * passes its read end to the worker with a one-line message
 * (tern_unix_write_fds) and closes its own copy at once; the worker takes
 * the descriptor after reading the message (tern_unix_take_fd), opens it
 * as a stream, and reads what the supervisor then writes into the pipe.
 * Both roles run on one loop here; in a real server the worker is another
 * process.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tern.h>

static tern_loop *loop;
static char path[64];
static tern_id listener, sup_conn, worker, pipe_in, pipe_out;

static void check(int rc, const char *what)
{
    if (rc < 0) {
        fprintf(stderr, "unix_pass_fd: %s: %s\n", what, tern_strerror(rc));
        unlink(path);
        exit(1);
    }
}

static void written(tern_loop *l, tern_id id, int status, void *arg)
{
    (void)l, (void)id, (void)arg;
    check(status, "write");
}

/* Worker: bytes from the passed pipe. */
static void pipe_read(tern_loop *l, tern_id id, int status, const void *data, size_t len,
                      void *arg)
{
    (void)arg;
    check(status, "read from the passed pipe");
    if (len == 0) { /* the supervisor closed its end: all done */
        tern_stream_close(l, id);
        tern_stream_close(l, worker);
        tern_stream_close(l, sup_conn);
        tern_stream_close(l, listener);
        return;
    }
    printf("worker read through the passed pipe: %.*s", (int)len, (const char *)data);
}

/* Worker: the supervisor's message, with a descriptor riding on it. */
static void worker_read(tern_loop *l, tern_id id, int status, const void *data, size_t len,
                        void *arg)
{
    (void)arg;
    check(status, "worker read");
    if (len == 0)
        return;
    printf("worker got: %.*s", (int)len, (const char *)data);
    int fd = tern_unix_take_fd(l, id);
    check(fd, "tern_unix_take_fd");
    check(tern_stream_open(l, fd, &pipe_in), "tern_stream_open");
    check(tern_stream_read_start(l, pipe_in, pipe_read, NULL), "read_start");
}

static void worker_connected(tern_loop *l, tern_id id, int status, void *arg)
{
    (void)arg;
    check(status, "connect");
    check(tern_stream_read_start(l, id, worker_read, NULL), "read_start");
}

/* Supervisor: a worker arrived; hand it the read end of a fresh pipe. */
static void accepted(tern_loop *l, tern_id lid, int status, tern_id conn, void *arg)
{
    (void)lid, (void)arg;
    check(status, "accept");
    sup_conn = conn;
    tern_unix_cred cred;
    check(tern_unix_peer_cred(l, conn, &cred), "tern_unix_peer_cred");
    printf("supervisor: worker is pid %ld, uid %lu\n", cred.pid, cred.uid);
    int p[2];
    check(pipe(p) < 0 ? -errno : 0, "pipe");
    static const char msg[] = "here is your pipe\n";
    tern_buf b = {msg, sizeof msg - 1};
    check(tern_unix_write_fds(l, conn, &b, 1, &p[0], 1, written, NULL), "write_fds");
    close(p[0]); /* tern holds its own copy until it is sent */
    check(tern_stream_open(l, p[1], &pipe_out), "tern_stream_open");
    static const char work[] = "job 1: resize image.png\n";
    tern_buf w = {work, sizeof work - 1};
    check(tern_stream_write(l, pipe_out, &w, 1, written, NULL), "write");
    /* Closing the stream closes the write end once; the worker sees the end. */
    check(tern_stream_close(l, pipe_out), "close");
}

int main(void)
{
    check(tern_loop_new(&loop, NULL), "tern_loop_new");
    snprintf(path, sizeof path, "/tmp/tern-pass-fd-%d.sock", (int)getpid());
    unlink(path);
    check(tern_unix_listen(loop, path, TERN_TCP_BACKLOG_DEFAULT, accepted, NULL, &listener),
          "tern_unix_listen");
    check(tern_unix_connect(loop, path, worker_connected, NULL, &worker), "tern_unix_connect");
    check(tern_loop_run(loop), "tern_loop_run");
    tern_loop_free(loop);
    unlink(path);
    return 0;
}
