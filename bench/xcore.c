/*
 * The machine's cross-core round trip: how long one cache line takes to go
 * from one CPU to another and back, right now. Neither tern nor libuv: a
 * probe bench/run takes before every quiet run, so a table can say which
 * rounds ran while the host kept its two CPUs far apart.
 *
 * Why: on a small virtual machine the hypervisor decides where the guest's
 * CPUs run, and a line's crossing between them depends on it: on one VM
 * of this kind about 60 ns most of the time and five times that for
 * stretches of a few hundred milliseconds, on another about 450 ns most of
 * the time (docs/performance.md, "The host's placement" and the latest
 * results). Every hand-off between a loop and a pool worker is such a
 * crossing, so a pool figure taken in a slow stretch says more about the
 * host than about the code.
 *
 * Two threads, pinned to the first two CPUs the process may use, pass a
 * counter back and forth on one line: the main thread stores odd values,
 * the other answers with the next even one. BLOCKS blocks of TRIPS round
 * trips are timed; the figure is the median block's time per round trip.
 * Fewer than two CPUs: nothing to measure, no figure (exit 0).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "bench.h"

#include <pthread.h>
#include <stdalign.h>

#define BLOCKS 5
#define TRIPS 20000
/* Spins between yields: if the pinning failed and both threads share a CPU,
 * the waiter must let the other run. */
#define YIELD_EVERY 4096

static alignas(64) _Atomic uint64_t ball;

/*
 * Not bench_wait_at_least: its pause between reads would be part of every
 * round trip timed here, and the figure is the line's crossing alone.
 */
static void wait_for(uint64_t value)
{
    for (unsigned i = 1; atomic_load_explicit(&ball, memory_order_acquire) != value; i++)
        if (i % YIELD_EVERY == 0)
            sched_yield();
}

static int pin(pthread_t t, int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(t, sizeof set, &set);
}

static void *answer(void *arg)
{
    (void)arg;
    for (uint64_t v = 1; v < 2u * BLOCKS * TRIPS; v += 2) {
        wait_for(v);
        atomic_store_explicit(&ball, v + 1, memory_order_release);
    }
    return NULL;
}

int main(void)
{
    cpu_set_t allowed;
    BENCH_CHECK(sched_getaffinity(0, sizeof allowed, &allowed) == 0, "sched_getaffinity");
    int cpus[2], n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
        if (CPU_ISSET(c, &allowed))
            cpus[n++] = c;
    if (n < 2) {
        fprintf(stderr, "xcore: fewer than two CPUs allowed, nothing to measure\n");
        return 0;
    }
    pthread_t other;
    BENCH_CHECK(pthread_create(&other, NULL, answer, NULL) == 0, "pthread_create");
    if (pin(pthread_self(), cpus[0]) != 0 || pin(other, cpus[1]) != 0)
        fprintf(stderr, "xcore: pinning failed; the threads run where they are put\n");

    uint64_t block_ns[BLOCKS];
    uint64_t v = 1;
    for (int b = 0; b < BLOCKS; b++) {
        uint64_t t0 = bench_now_ns();
        for (int i = 0; i < TRIPS; i++, v += 2) {
            atomic_store_explicit(&ball, v, memory_order_release);
            wait_for(v + 1);
        }
        block_ns[b] = bench_now_ns() - t0;
    }
    pthread_join(other, NULL);
    bench_sort(block_ns, BLOCKS);
    bench_figure("xcore_roundtrip", (double)block_ns[BLOCKS / 2] / TRIPS, "ns");
    return 0;
}
