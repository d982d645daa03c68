/*
 * UDP pound: 64 datagrams in flight (by default) between a client socket
 * and an echo socket on one loop, so several wait at each readiness and
 * batched system calls can show.
 * Twin: udp_pound_uv.c (see udp_bench.h for the shared body).
 *
 * Parameters: requests=1000000 inflight=64 size=32
 * Figures: udp_pound (echoes/s, from the first send to the last echo);
 * udp_pound_rw_calls, _syscalls, _uring_enters (system calls per echo, bench.h) and
 * _enters_per_turn.
 */
#include "udp_bench.h"

int main(int argc, char **argv)
{
    bench_calls_init();
    unsigned long count = bench_arg(argc, argv, "requests", 1000000);
    unsigned long inflight = bench_arg(argc, argv, "inflight", 64);
    size_t size = bench_arg(argc, argv, "size", 32);
    bench_figure("udp_pound", udp_bench_run(count, inflight, size), "echoes/s");
    udp_bench_calls("udp_pound");
    return 0;
}
