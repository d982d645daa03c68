/*
 * cat through tern streams: standard input to standard output, both as
 * streams (a pipe, a FIFO or a TTY; docs/net.md, "Pipes, FIFOs and TTYs").
 *
 *   printf 'hello\n' | pipe_cat      copies a pipe
 *   pipe_cat                         on a terminal: raw mode, prints the
 *                                    window size, echoes keys; q quits
 *
 * Each read is written at once; the reader stops while the writer is past
 * its high-water mark and starts again at the drain callback, so a slow
 * output never makes the process grow. With neither a pipe nor a TTY on
 * standard input (as under the test runner) it feeds a pipe of its own.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tern.h>

static tern_id in, out;
static int is_tty;
static size_t copied;

static void check(int rc, const char *what)
{
    if (rc < 0) {
        fprintf(stderr, "pipe_cat: %s: %s\n", what, tern_strerror(rc));
        exit(1);
    }
}

static void on_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                    void *arg);

static bool input_done;

/* Once the input ended and the last write went out, close the output. */
static void maybe_finish(tern_loop *loop)
{
    size_t queued;
    if (input_done && tern_stream_write_queue_size(loop, out, &queued) == 0 && queued == 0)
        tern_stream_close(loop, out);
}

static void written(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)id;
    free(arg);
    check(status, "write");
    maybe_finish(loop);
}

static void drained(tern_loop *loop, tern_id id, void *arg)
{
    (void)id, (void)arg;
    check(tern_stream_read_start(loop, in, on_read, NULL), "read_start");
}

static void on_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                    void *arg)
{
    (void)arg;
    check(status, "read");
    if (len == 0 || (is_tty && memchr(data, 'q', len) != NULL)) {
        tern_stream_close(loop, id); /* puts a raw terminal back as it was */
        input_done = true;
        maybe_finish(loop);
        return;
    }
    /* The data is only lent for this callback: the write gets a copy. */
    char *copy = malloc(len);
    check(copy == NULL ? -ENOMEM : 0, "malloc");
    memcpy(copy, data, len);
    tern_buf b = {copy, len};
    int rc = tern_stream_write(loop, out, &b, 1, written, copy);
    check(rc, "write");
    copied += len;
    if (rc == 1) /* past the high-water mark: wait for the drain */
        check(tern_stream_read_stop(loop, id), "read_stop");
}

static void feed_done(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)arg;
    check(status, "feed");
    tern_stream_close(loop, id); /* end of stream for the reader */
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* a pipe's reader going away is -EPIPE, not death */
    tern_loop *loop;
    check(tern_loop_new(&loop, NULL), "tern_loop_new");
    struct stat st;
    int in_fd = 0;
    bool fed = fstat(0, &st) < 0 || !(S_ISFIFO(st.st_mode) || isatty(0));
    tern_id feeder = 0;
    if (fed) {
        int p[2];
        check(pipe(p) < 0 ? -errno : 0, "pipe");
        in_fd = p[0];
        check(tern_stream_open(loop, p[1], &feeder), "tern_stream_open");
        static const char text[] = "a line through a pipe, read and written by tern\n";
        tern_buf b = {text, sizeof text - 1};
        check(tern_stream_write(loop, feeder, &b, 1, feed_done, NULL), "write");
    }
    check(tern_stream_open(loop, in_fd, &in), "stream_open(stdin)");
    int rc = tern_stream_open(loop, 1, &out);
    if (rc == -EPERM) {
        fprintf(stderr, "pipe_cat: standard output is a file: that is a file request's job "
                        "(tern_fs_*), not a stream's; pipe it, e.g. pipe_cat | cat > file\n");
        return 2;
    }
    check(rc, "stream_open(stdout)");
    is_tty = isatty(in_fd);
    if (is_tty) {
        unsigned cols, rows;
        check(tern_tty_winsize(loop, in, &cols, &rows), "tty_winsize");
        printf("terminal %ux%u; raw mode, q quits\r\n", cols, rows);
        fflush(stdout);
        check(tern_tty_set_mode(loop, in, TERN_TTY_RAW), "tty_set_mode");
    }
    check(tern_stream_set_high_water(loop, out, 64 * 1024, drained, NULL), "set_high_water");
    check(tern_stream_read_start(loop, in, on_read, NULL), "read_start");
    check(tern_loop_run(loop), "tern_loop_run");
    tern_loop_free(loop);
    fprintf(stderr, "pipe_cat: %zu bytes copied\n", copied);
    return copied > 0 ? 0 : 1;
}
