/*
 * Socketpair ping-pong: one byte bounces between the two ends of an
 * AF_UNIX stream socketpair, both watched by the same loop; each end reads
 * the byte when readable and writes it back. A round trip is two
 * readiness events, two reads and two writes.
 * Twin: socketpair_uv.c (uv_poll_t on the same descriptors: libuv's way to
 * watch a descriptor the application reads and writes itself).
 *
 * Parameters: trips=1000000
 * Figures: socketpair_pingpong (round trips/s); socketpair_pingpong_rw_calls,
 * _syscalls, _uring_enters (system calls per round trip, bench.h) and
 * _enters_per_turn.
 */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <tern.h>

static unsigned long trips, target;
static tern_id watch[2];

static void on_readable(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    char byte;
    (void)id, (void)events;
    ssize_t n = read(fd, &byte, 1);
    if (n < 0 && errno == EAGAIN)
        return;
    BENCH_CHECK(n == 1, "read: %zd", n);
    /* arg is non-NULL on the end that starts (and counts) round trips. */
    if (arg != NULL && ++trips == target) {
        tern_io_stop(loop, watch[0]);
        tern_io_stop(loop, watch[1]);
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

    tern_loop *loop;
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.backend = bench_backend();
    int rc = tern_loop_new(&loop, &opts);
    BENCH_CHECK(rc == 0, "tern_loop_new: %s", tern_strerror(rc));
    bench_backend_report(tern_loop_backend_name(loop));
    rc = tern_io_start(loop, sv[0], TERN_READABLE, on_readable, &trips, &watch[0]);
    BENCH_CHECK(rc == 0, "tern_io_start: %s", tern_strerror(rc));
    rc = tern_io_start(loop, sv[1], TERN_READABLE, on_readable, NULL, &watch[1]);
    BENCH_CHECK(rc == 0, "tern_io_start: %s", tern_strerror(rc));

    tern_loop_stats st0, st1;
    tern_loop_stats_get(loop, &st0);
    bench_calls c0 = bench_calls_now();
    uint64_t t0 = bench_now_ns();
    BENCH_CHECK(write(sv[0], "x", 1) == 1, "write");
    tern_loop_run(loop);
    uint64_t t1 = bench_now_ns();
    bench_calls c1 = bench_calls_now();
    tern_loop_stats_get(loop, &st1);
    BENCH_CHECK(trips == target, "trips %lu of %lu", trips, target);

    bench_figure("socketpair_pingpong", (double)trips / ((double)(t1 - t0) / 1e9), "trips/s");
    bench_calls_figures("socketpair_pingpong", c0, c1, (double)trips, "trip");
    bench_enters_per_turn("socketpair_pingpong", c0, c1, st1.turns - st0.turns);

    tern_loop_free(loop);
    close(sv[0]);
    close(sv[1]);
    return 0;
}
