/*
 * Reading many small files whole, libuv twin of fs_read.c: each file is
 * uv_fs_open, uv_fs_fstat (to size the buffer), uv_fs_read until the size
 * is read, uv_fs_close, each step started from the previous one's
 * callback; `inflight` files at a time, each close starting the next.
 *
 * Parameters: files=10000 size=1024 inflight=64 threads=4 floor=1
 * floor_threads=0 floor_ms=200
 * Figures: fs_read_files_per_s (files/s), fs_read_cpu_per_file;
 * fs_read_rw_calls, _syscalls, _uring_enters (system calls per file,
 * bench.h); after the loop is closed, the synchronous floor on the same
 * files (fs_read.h): fs_read_floor_files_per_s and fs_read_floor_share.
 *
 * UV_THREADPOOL_SIZE is read once, when the first request starts the
 * threadpool, so it is set before anything is queued; one warm-up request
 * starts the threads before the clock.
 *
 * io_uring: libuv 1.49 and newer run file operations on io_uring only on
 * a loop configured with UV_LOOP_USE_IO_URING_SQPOLL and with
 * UV_USE_IO_URING=1 in the environment (1.45 to 1.48 did by default, and
 * UV_USE_IO_URING=0 turned it off). The loop is configured so wherever the
 * option exists, before the first request makes the ring, and the
 * environment decides: bench/run --uv-uring runs this twin with 0 and
 * with 1.
 */
#include "fs_read.h"

#include <uv.h>

static unsigned long total, size, next_file, completed;

struct reader {
    uv_fs_t req;
    unsigned long index;
    uv_file fd;
    char *buf;
    size_t len, got;
};

static void on_open(uv_fs_t *req);
static void on_fstat(uv_fs_t *req);
static void on_read(uv_fs_t *req);
static void on_close(uv_fs_t *req);

static void start_one(uv_loop_t *loop, struct reader *r)
{
    char p[128];
    r->index = next_file++;
    r->got = 0;
    fs_path(p, sizeof p, r->index);
    int rc = uv_fs_open(loop, &r->req, p, O_RDONLY | O_CLOEXEC, 0, on_open);
    BENCH_CHECK(rc == 0, "uv_fs_open: %s", uv_strerror(rc));
}

static void on_open(uv_fs_t *req)
{
    struct reader *r = (struct reader *)req;
    BENCH_CHECK(req->result >= 0, "open: %s", uv_strerror((int)req->result));
    r->fd = (uv_file)req->result;
    uv_fs_req_cleanup(req);
    int rc = uv_fs_fstat(req->loop, req, r->fd, on_fstat);
    BENCH_CHECK(rc == 0, "uv_fs_fstat: %s", uv_strerror(rc));
}

static void read_more(struct reader *r)
{
    uv_buf_t b = uv_buf_init(r->buf + r->got, (unsigned)(r->len - r->got));
    int rc = uv_fs_read(r->req.loop, &r->req, r->fd, &b, 1, (int64_t)r->got, on_read);
    BENCH_CHECK(rc == 0, "uv_fs_read: %s", uv_strerror(rc));
}

static void on_fstat(uv_fs_t *req)
{
    struct reader *r = (struct reader *)req;
    BENCH_CHECK(req->result == 0, "fstat: %s", uv_strerror((int)req->result));
    r->len = (size_t)req->statbuf.st_size;
    uv_fs_req_cleanup(req);
    /* The same allocation tern's read_file makes: the size plus a NUL. */
    r->buf = malloc(r->len + 1);
    BENCH_CHECK(r->buf != NULL, "malloc");
    read_more(r);
}

static void on_read(uv_fs_t *req)
{
    struct reader *r = (struct reader *)req;
    BENCH_CHECK(req->result >= 0, "read: %s", uv_strerror((int)req->result));
    r->got += (size_t)req->result;
    uv_fs_req_cleanup(req);
    if (req->result > 0 && r->got < r->len) {
        read_more(r);
        return;
    }
    r->buf[r->got] = '\0';
    BENCH_CHECK(r->got == size && (size == 0 || (unsigned char)r->buf[0] == fs_byte(r->index)),
                "file %lu: wrong content", r->index);
    free(r->buf);
    int rc = uv_fs_close(req->loop, req, r->fd, on_close);
    BENCH_CHECK(rc == 0, "uv_fs_close: %s", uv_strerror(rc));
}

static void on_close(uv_fs_t *req)
{
    struct reader *r = (struct reader *)req;
    BENCH_CHECK(req->result == 0, "close: %s", uv_strerror((int)req->result));
    uv_fs_req_cleanup(req);
    completed++;
    if (next_file < total)
        start_one(req->loop, r);
}

static void warm_done(uv_fs_t *req)
{
    uv_fs_req_cleanup(req);
}

int main(int argc, char **argv)
{
    bench_calls_init();
    total = bench_arg(argc, argv, "files", 10000);
    size = bench_arg(argc, argv, "size", 1024);
    unsigned long inflight = bench_arg(argc, argv, "inflight", 64);
    unsigned long threads = bench_arg(argc, argv, "threads", 4);
    if (inflight > total)
        inflight = total;
    fs_make(total, size);

    int rc = 0;
    char n[32];
    snprintf(n, sizeof n, "%lu", threads);
    bench_setenv("UV_THREADPOOL_SIZE", n);
    uv_loop_t *loop = uv_default_loop();
#ifdef UV_LOOP_USE_IO_URING_SQPOLL
    rc = uv_loop_configure(loop, UV_LOOP_USE_IO_URING_SQPOLL);
    BENCH_CHECK(rc == 0, "uv_loop_configure: %s", uv_strerror(rc));
#endif
    uv_fs_t warm;
    rc = uv_fs_stat(loop, &warm, fs_dir, warm_done);
    BENCH_CHECK(rc == 0, "warm-up: %s", uv_strerror(rc));
    uv_run(loop, UV_RUN_DEFAULT);

    struct reader *readers = calloc(inflight, sizeof *readers);
    BENCH_CHECK(readers != NULL, "calloc");
    bench_calls c0 = bench_calls_now();
    double cpu0 = bench_cpu_s();
    uint64_t t0 = bench_now_ns();
    for (unsigned long i = 0; i < inflight; i++)
        start_one(loop, &readers[i]);
    uv_run(loop, UV_RUN_DEFAULT);
    uint64_t t1 = bench_now_ns();
    double cpu1 = bench_cpu_s();
    bench_calls c1 = bench_calls_now();
    BENCH_CHECK(completed == total, "completed %lu of %lu", completed, total);

    double rate = (double)total / ((double)(t1 - t0) / 1e9);
    bench_figure("fs_read_files_per_s", rate, "files/s");
    bench_figure("fs_read_cpu_per_file", (cpu1 - cpu0) / (double)total * 1e6, "us");
    bench_calls_figures("fs_read", c0, c1, (double)total, "file");

    uv_loop_close(loop);
    free(readers);
    fs_floor_figures(argc, argv, total, size, rate);
    fs_remove(total);
    return 0;
}
