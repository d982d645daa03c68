/*
 * A spin budget that adapts: spin only as long as spinning has been paying.
 *
 * Catching an event by spinning saves a sleep and a wake (a cross-core
 * wake measured about 20 µs on the 2-core VM of docs/performance.md;
 * other machines differ), but only while the thread that will produce the
 * event is on a CPU. On a busy machine it may be descheduled, and a spinner
 * then holds a core it needs for a whole time slice. So each waiter keeps
 * a budget in nanoseconds: a spin that finds its event restores the full
 * budget; one that runs dry halves it, down to nothing. With no budget the
 * waiter parks at once, and tries a short spin again only every
 * TERN__SPIN_PROBE parks, so a machine that quietens is noticed.
 *
 * The loop (runtime/turn.c) and the bounded workers (pool/bounded.c) each
 * keep one; neither shares it with another thread.
 */
#ifndef TERN_SPIN_H
#define TERN_SPIN_H

#include <stdbool.h>
#include <stdint.h>

#define TERN__SPIN_MAX_NS 40000u /* about two cross-core wakes: a park costs no more */
#define TERN__SPIN_MIN_NS 2500u
#define TERN__SPIN_PROBE 64u

struct tern__spin {
    uint32_t ns;    /* the current budget; 0: park at once */
    uint32_t skips; /* parks without a spin since the budget ran out */
};

static inline void tern__spin_init(struct tern__spin *s)
{
    s->ns = TERN__SPIN_MAX_NS;
    s->skips = 0;
}

/* How long the next spin may last (0: do not spin now). */
static inline uint32_t tern__spin_budget(struct tern__spin *s)
{
    if (s->ns == 0) {
        if (++s->skips < TERN__SPIN_PROBE)
            return 0;
        s->skips = 0;
        s->ns = TERN__SPIN_MIN_NS;
    }
    return s->ns;
}

/* Account a spin that found its event (or not). */
static inline void tern__spin_result(struct tern__spin *s, bool found)
{
    if (found)
        s->ns = TERN__SPIN_MAX_NS;
    else
        s->ns = s->ns / 2 >= TERN__SPIN_MIN_NS ? s->ns / 2 : 0;
}

#endif
