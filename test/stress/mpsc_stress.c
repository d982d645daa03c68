/*
 * mpsc_stress: tern's own wait-free queue (backends/mpsc.h), the one the
 * runtime uses where liburcu does not build (Windows), raced on Linux so
 * ThreadSanitizer sees it: the checks are test/mpsc_checks.h, shared with
 * the Windows program test/win/queue_test.c. Producers held half-way
 * first, then rounds of producers racing a consumer that splices, each
 * round's seed derived from the run's.
 */
#include <time.h>

#include "stress.h"

#define MPSC_CHECK(cond, ...) STRESS_CHECK(cond, __VA_ARGS__)

static void mpsc_sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

#include "../mpsc_checks.h"

int main(void)
{
#ifdef STRESS_UNDER_TSAN
    const unsigned per = 20000;
#else
    const unsigned per = 400000;
#endif
    stress_init("mpsc_stress", UINT64_C(0x5eed3b5c));
    stress_phase("producers held between exchange and link", 60 * STRESS_SEC);
    mpsc_held_checks();
    /* Fewer producers than cores, as many, and more: the last preempts them mid-enqueue. */
    static const unsigned producers[] = {1, 2, 4, 8};
    for (unsigned i = 0; i < sizeof(producers) / sizeof(producers[0]); i++) {
        stress_phase("producers racing a splicing consumer", 120 * STRESS_SEC);
        mpsc_race(producers[i], per / producers[i], stress_seed(i + 1));
    }
    stress_phase_end();
    return stress_summary();
}
