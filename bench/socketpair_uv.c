/*
 * Socketpair ping-pong, libuv twin of socketpair.c: the same byte bounce
 * between the two ends of an AF_UNIX socketpair, each end watched by a
 * uv_poll_t on the same loop.
 *
 * Parameters: trips=1000000
 * Figures: socketpair_pingpong (round trips/s); socketpair_pingpong_rw_calls,
 * _syscalls, _uring_enters (system calls per round trip, bench.h).
 */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <uv.h>

static unsigned long trips, target;
static uv_poll_t watch[2];

static void on_readable(uv_poll_t *w, int status, int events)
{
    char byte;
    (void)events;
    BENCH_CHECK(status == 0, "poll status %s", uv_strerror(status));
    int fd;
    uv_fileno((uv_handle_t *)w, &fd);
    ssize_t n = read(fd, &byte, 1);
    if (n < 0 && errno == EAGAIN)
        return;
    BENCH_CHECK(n == 1, "read: %zd", n);
    /* data is non-NULL on the end that starts (and counts) round trips. */
    if (w->data != NULL && ++trips == target) {
        uv_poll_stop(&watch[0]);
        uv_poll_stop(&watch[1]);
        return;
    }
    BENCH_CHECK(write(fd, &byte, 1) == 1, "write");
}

int main(int argc, char **argv)
{
    bench_calls_init();
    target = bench_arg(argc, argv, "trips", 1000000);
    int sv[2];
    BENCH_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
    for (int i = 0; i < 2; i++)
        fcntl(sv[i], F_SETFL, fcntl(sv[i], F_GETFL) | O_NONBLOCK);

    uv_loop_t *loop = uv_default_loop();
    for (int i = 0; i < 2; i++) {
        int rc = uv_poll_init(loop, &watch[i], sv[i]);
        BENCH_CHECK(rc == 0, "uv_poll_init: %s", uv_strerror(rc));
        watch[i].data = i == 0 ? (void *)&trips : NULL;
        rc = uv_poll_start(&watch[i], UV_READABLE, on_readable);
        BENCH_CHECK(rc == 0, "uv_poll_start: %s", uv_strerror(rc));
    }

    bench_calls c0 = bench_calls_now();
    uint64_t t0 = bench_now_ns();
    BENCH_CHECK(write(sv[0], "x", 1) == 1, "write");
    uv_run(loop, UV_RUN_DEFAULT);
    uint64_t t1 = bench_now_ns();
    bench_calls c1 = bench_calls_now();
    BENCH_CHECK(trips == target, "trips %lu of %lu", trips, target);

    bench_figure("socketpair_pingpong", (double)trips / ((double)(t1 - t0) / 1e9), "trips/s");
    bench_calls_figures("socketpair_pingpong", c0, c1, (double)trips, "trip");

    for (int i = 0; i < 2; i++)
        uv_close((uv_handle_t *)&watch[i], NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_loop_close(loop);
    close(sv[0]);
    close(sv[1]);
    return 0;
}
