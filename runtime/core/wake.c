/*
 * The wake protocol: how a thread that handed a loop work wakes it, and
 * how the loop takes the wake-up.
 *
 * One word per loop: RUNNING, PARKING, NOTIFIED. Before it
 * blocks, the loop stores PARKING, issues a full fence and re-checks its
 * queues; a producer publishes first (the enqueue is a full barrier), then
 * reads the word and, only if it says PARKING, CASes it to NOTIFIED and
 * writes the eventfd. The two fences make it impossible for the loop to
 * miss an item and for the producer to miss the park (each sees the
 * other's store). Many producers during one park make one syscall between
 * them; a busy loop (RUNNING) receives any number of posts with none.
 *
 * A loop that no thread runs counts as asleep (PARKING): a host that
 * embeds it by watching tern_loop_backend_fd() must see a post arrive.
 * Exactly one eventfd write follows each move to NOTIFIED, and the loop
 * consumes exactly that one when it moves the word back to RUNNING, so the
 * descriptor is never left readable with nothing to say.
 */
#include <sched.h>
#include <stdbool.h>

#include "loop_p.h"
#include "wake.h"

bool tern__loop_wake(tern_loop *loop)
{
    /* Pairs with the fence after the PARKING store in turn.c's park(). */
    atomic_thread_fence(memory_order_seq_cst);
    return tern__wake_checked(loop);
}

/*
 * Tries at taking a notifying producer's wake-up before the loop yields
 * between tries. The producer is one write() past its CAS; each try is a
 * non-blocking read of the wake descriptor (a system call, several times
 * the producer's remaining work), so a running producer is met within a
 * few, and one still missing after this many was preempted between its
 * CAS and its write and needs the CPU, not more tries.
 */
#define WAKE_TAKE_TRIES 16

void tern__loop_awake(tern_loop *loop)
{
    unsigned old =
        atomic_exchange_explicit(&loop->wake_state, TERN__WAKE_RUNNING, memory_order_acquire);
    if (old != TERN__WAKE_NOTIFIED)
        return;
    /*
     * The producer that notified is committed to one write; it may not
     * have made it yet (a few instructions away, unless preempted).
     */
    for (unsigned spins = 0;
         !(loop->backend.wakes_itself ? loop->backend.ops->wake_take(&loop->backend)
                                      : tern__wake_take(&loop->wake));
         spins++)
        if (spins > WAKE_TAKE_TRIES)
            sched_yield();
}
