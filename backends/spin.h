/*
 * Spinning that adapts: spin only while spinning has been paying.
 *
 * Catching an event by spinning saves a sleep and a wake on each side (a
 * cross-core wake measured 10-20 µs, docs/performance.md; it differs
 * from machine to machine), but only while the thread
 * that will produce the event is on a CPU. On a busy machine it may be
 * descheduled, and a spinner then holds a core it needs. So each waiter
 * keeps a credit: a spin that finds its event earns one (up to
 * TERN__SPIN_CREDIT_MAX), one that runs dry costs TERN__SPIN_MISS_COST.
 * Spinning goes on while credit is left, that is while at least
 * MISS_COST/(MISS_COST+1) of spins find their event; a rare dry spin (a
 * long job, a page fault) does not end it. With no credit the waiter parks
 * at once, and every TERN__SPIN_PROBE parks spins once more, so a machine
 * that quietens is noticed.
 *
 * Every spin, probes included, may last TERN__SPIN_NS: longer than a
 * wake. When both sides have been parking, the answer a probe waits for
 * comes from a thread that is itself being woken; a probe shorter than
 * that wake could never find it, and both sides would park for ever after
 * at a wake per hand-off. One probe per TERN__SPIN_PROBE parks costs a busy
 * machine about a microsecond per park.
 *
 * The loop (runtime/loop/turn.c) and the bounded workers (pool/bounded.c) each
 * keep one; neither shares it with another thread.
 */
#ifndef TERN_SPIN_H
#define TERN_SPIN_H

#include <stdbool.h>
#include <stdint.h>

#define TERN__SPIN_NS 40000u /* about two cross-core wakes: a park costs no more */
#define TERN__SPIN_CREDIT_MAX 16u
#define TERN__SPIN_MISS_COST 4u
#define TERN__SPIN_PROBE 32u
/*
 * A spinner reads the clock for its deadline once every this many rounds:
 * a clock read costs several relax rounds, so reading it every round would
 * make the spin mostly clock reads, while 16 rounds overshoot a deadline
 * of tens of microseconds by a small fraction of it.
 */
#define TERN__SPIN_CLOCK_EVERY 16u

/*
 * One round of a spin: the CPU's pause hint, which frees the core's
 * shared resources for a sibling hyperthread and eases the exit from the
 * loop, and a compiler barrier, so a loop around it reads memory afresh.
 * x86 (mingw included) has `pause`, aarch64 `yield`; elsewhere the barrier
 * alone, and MSVC its YieldProcessor.
 */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define tern__spin_pause() __asm__ __volatile__("pause" ::: "memory")
#elif defined(__GNUC__) && defined(__aarch64__)
#define tern__spin_pause() __asm__ __volatile__("yield" ::: "memory")
#elif defined(__GNUC__)
#define tern__spin_pause() __asm__ __volatile__("" ::: "memory")
#else
#define tern__spin_pause() YieldProcessor()
#endif

struct tern__spin {
    uint32_t credit; /* 0: park at once, but for a probe */
    uint32_t skips;  /* parks without a spin since the credit ran out */
};

static inline void tern__spin_init(struct tern__spin *s)
{
    s->credit = TERN__SPIN_CREDIT_MAX;
    s->skips = 0;
}

/* How long the next spin may last in nanoseconds (0: do not spin now). */
static inline uint32_t tern__spin_budget(struct tern__spin *s)
{
    if (s->credit == 0) {
        if (++s->skips < TERN__SPIN_PROBE)
            return 0;
        s->skips = 0; /* a probe */
    }
    return TERN__SPIN_NS;
}

/* Account a spin that found its event (or not). */
static inline void tern__spin_result(struct tern__spin *s, bool found)
{
    if (found) {
        /* A probe that pays buys a miss's worth, so one more miss ends it. */
        s->credit = s->credit == 0                      ? TERN__SPIN_MISS_COST
                    : s->credit < TERN__SPIN_CREDIT_MAX ? s->credit + 1
                                                        : TERN__SPIN_CREDIT_MAX;
    } else {
        s->credit = s->credit > TERN__SPIN_MISS_COST ? s->credit - TERN__SPIN_MISS_COST : 0;
    }
}

#endif
