/*
 * Who may use a loop: each thread's identity (an anchor whose address is
 * the thread's token, loop_p.h) and the aborts for calls the rules forbid — a loop-only call
 * from a thread that does not run the loop, any call from a forked child
 * on its parent's loop, and scheduling on a loop a group has sealed for
 * its final drain (admit.h).
 * The lowest file of the loop: everything that checks a rule calls here.
 */

#include "check.h"
#include "os_thread.h"
#include "thread.h"

_Thread_local char tern__thread_anchor __attribute__((tls_model("initial-exec")));

void tern__loop_only_failed(const char *fn)
{
    TERN_FATAL(fn, "loop-only call from a thread that is not running this loop "
                   "(use tern_post to hand work to the loop)");
}

/*
 * The child shares the parent's backend and wake descriptors: a watch it
 * added would fire in the parent's wait, a descriptor it removed would go
 * silent there. So the call stops before it touches either.
 */
noreturn void tern__loop_forked_failed(const char *fn)
{
    TERN_FATAL(fn, "loop used in a forked child: a loop belongs to the process that made it "
                   "(the child makes its own loop and leaves the parent's alone)");
}

/*
 * The sealed-loop check is the loop's (admit.h): a group seals its loops
 * for the destroy phase, but the rule is about scheduling on a loop.
 */
noreturn void tern__loop_sealed_failed(void)
{
    TERN_FATAL("tern_group_shutdown",
               "work scheduled during a loop group's final drain (the destroy phase): "
               "teardown work belongs in the shutdown phase (tern_group_on_shutdown), "
               "while the loops still run");
}
