/*
 * Always-on contract checks. They abort through one noreturn handler that
 * prints where and what; they never have side effects, so removing the
 * check never changes behaviour, only safety.
 *
 *   TERN_REQUIRE(e)   a precondition the caller must meet
 *   TERN_REQUIRE_SAID(e, rule) the same, reported as `rule` instead of
 *                     the expression (when the expression would not tell
 *                     a user what they did: "NULL or freed loop")
 *   TERN_ENSURE(e)    a postcondition this function promises
 *   TERN_INSIST(e)    an internal invariant (a broken one is a tern bug)
 *   TERN_UNREACHABLE  a branch that cannot be taken
 *   TERN_FATAL(fn, rule) a named contract violation ("fn: rule")
 */
#ifndef TERN_CHECK_H
#define TERN_CHECK_H

#include <stdnoreturn.h>

noreturn void tern__check_failed(const char *file, int line, const char *func, const char *kind,
                                 const char *what);

/* `text` is the condition as written: stringified by the macro the call
 * site names, before its argument's macros (NULL) are expanded. */
#define TERN__CHECK(kind, e, text) \
    ((e) ? (void)0 : tern__check_failed(__FILE__, __LINE__, __func__, kind, text))

#define TERN_REQUIRE(e) TERN__CHECK("REQUIRE", e, #e)
#define TERN_REQUIRE_SAID(e, rule) \
    ((e) ? (void)0 : tern__check_failed(__FILE__, __LINE__, __func__, "REQUIRE", rule))
#define TERN_ENSURE(e) TERN__CHECK("ENSURE", e, #e)
#define TERN_INSIST(e) TERN__CHECK("INSIST", e, #e)
#define TERN_UNREACHABLE() \
    tern__check_failed(__FILE__, __LINE__, __func__, "UNREACHABLE", "reached")
#define TERN_FATAL(fn, rule) tern__check_failed(__FILE__, __LINE__, fn, "CONTRACT", rule)

/*
 * Counters that must never go below zero (credits, live operations,
 * references, queue depths) are decremented through these, so a lost or
 * doubled update aborts at once, naming the counter, instead of wrapping
 * to 4294967295 and leaving a loop to spin or hang in teardown.
 */
#define TERN_DECREMENT(counter)                                                  \
    ((counter) > 0 ? (void)(counter)--                                           \
                   : tern__check_failed(__FILE__, __LINE__, __func__, "COUNTER", \
                                        #counter " would go below zero"))
#define TERN_ATOMIC_DECREMENT(counter, order)                          \
    (atomic_fetch_sub_explicit(&(counter), 1, order) > 0               \
         ? (void)0                                                     \
         : tern__check_failed(__FILE__, __LINE__, __func__, "COUNTER", \
                              #counter " went below zero"))

#define TERN_LIKELY(e) __builtin_expect(!!(e), 1)
#define TERN_UNLIKELY(e) __builtin_expect(!!(e), 0)
/* For a body two callers share where one is a per-item loop: inlined in both. */
#define TERN_ALWAYS_INLINE inline __attribute__((always_inline))

#define TERN_CACHELINE 64

#endif
