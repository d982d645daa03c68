/*
 * UDP ping-pong: one datagram in flight between a client socket and an
 * echo socket on one loop (latency-bound).
 * Twin: udp_pingpong_uv.c (see udp_bench.h for the shared body).
 *
 * Parameters: trips=100000 size=32
 * Figures: udp_pingpong (echoes/s, from the first send to the last echo);
 * udp_pingpong_rw_calls, _syscalls, _uring_enters (system calls per echo, bench.h) and
 * _enters_per_turn.
 */
#include "udp_bench.h"

int main(int argc, char **argv)
{
    bench_calls_init();
    unsigned long count = bench_arg(argc, argv, "trips", 100000);
    unsigned long inflight = 1;
    size_t size = bench_arg(argc, argv, "size", 32);
    bench_figure("udp_pingpong", udp_bench_run(count, inflight, size), "echoes/s");
    udp_bench_calls("udp_pingpong");
    return 0;
}
