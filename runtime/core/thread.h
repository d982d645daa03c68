/*
 * Who may use a loop (thread.c): the calling thread's token and the
 * aborts for calls the rules forbid. Below the loop's
 * struct, which the checks that read it (loop_p.h) sit above.
 */
#ifndef TERN_THREAD_H
#define TERN_THREAD_H

#include <stdint.h>
#include <stdnoreturn.h>

/* Loop-only check (loop_p.h): aborts naming fn when a foreign thread runs the loop. */
void tern__loop_only_failed(const char *fn);
/*
 * A thread's identity is the address of a thread-local byte: unique while
 * the thread lives, free to compute (initial-exec TLS, no call).
 */
extern _Thread_local char tern__thread_anchor __attribute__((tls_model("initial-exec")));
static inline uintptr_t tern__thread_token(void)
{
    return (uintptr_t)&tern__thread_anchor;
}

/* A forked child's call on its parent's loop (loop_p.h; the count of
 * forks is the platform file's, tern__forks). */
noreturn void tern__loop_forked_failed(const char *fn);
/* Scheduling on a loop a group has sealed for its final drain (admit.h). */
noreturn void tern__loop_sealed_failed(void);

#endif
