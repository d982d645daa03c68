/*
 * The producer's side of the wake protocol (wake.c), inline because
 * every post pays it.
 */
#ifndef TERN_WAKE_H
#define TERN_WAKE_H

#include <stdbool.h>

#include "loop_p.h"
#include "probe.h"

/*
 * The wake check proper, for callers that have just executed a full
 * barrier of their own (tern__wfq_enqueue is one, as wfq.h and liburcu
 * documents), so tern__loop_wake's fence would be paid twice. Inline:
 * it is on every post's path.
 */
static inline bool tern__wake_checked(tern_loop *loop)
{
    unsigned state = atomic_load_explicit(&loop->wake_state, memory_order_relaxed);
    if (state != TERN__WAKE_PARKING)
        return false;
    if (!atomic_compare_exchange_strong(&loop->wake_state, &state, TERN__WAKE_NOTIFIED))
        return false; /* another producer got there first, or the loop woke */
    atomic_fetch_add_explicit(&loop->wake_syscalls, 1, memory_order_relaxed);
    /* Where the waker runs: the loop gives this CPU back (turn.c). */
    atomic_store_explicit(&loop->waker_cpu, tern__current_cpu(), memory_order_relaxed);
    TERN_PROBE(wake, loop);
    if (loop->backend.wakes_itself)
        loop->backend.ops->wake(&loop->backend);
    else
        tern__wake_signal(&loop->wake);
    return true;
}

#endif
