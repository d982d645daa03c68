/*
 * The urcu-qsbr seam: what the runtime and the pool ask of liburcu's
 * quiescent-state flavour (TERN_LOOP_RCU, and a pool worker an application
 * made a reader), by tern's own names.
 *
 * On POSIX each name is liburcu's own call, as a macro, so the files that
 * use them compile to what they did before the seam (a file that wants
 * liburcu's inline fast paths defines _LGPL_SOURCE before it includes
 * anything, as before).
 *
 * Windows has no liburcu: there is no reader. tern__qsbr_supported is
 * false, so tern_loop_new refuses TERN_LOOP_RCU with -ENOTSUP; a thread is
 * never registered nor inside a read-side section, and the calls that
 * take a reader offline around a block, put it back online, or report a
 * quiescent state do nothing (no thread could be online to begin with).
 * docs/design.md, "liburcu beyond the queue".
 */
#ifndef TERN_QSBR_H
#define TERN_QSBR_H

#include <stdbool.h>

#ifndef _WIN32

#include <urcu-qsbr.h>

#define tern__qsbr_supported() true
/* The calling thread is registered as a reader (by tern or the application). */
#define tern__qsbr_registered() ((bool)URCU_TLS(urcu_qsbr_reader).registered)
/* ...and is inside a read-side critical section (online). */
#define tern__qsbr_read_ongoing() ((bool)urcu_qsbr_read_ongoing())
#define tern__qsbr_register() urcu_qsbr_register_thread()
#define tern__qsbr_unregister() urcu_qsbr_unregister_thread()
#define tern__qsbr_online() urcu_qsbr_thread_online()
#define tern__qsbr_offline() urcu_qsbr_thread_offline()
#define tern__qsbr_quiescent() urcu_qsbr_quiescent_state()

#else /* _WIN32: no reader exists */

#define tern__qsbr_supported() false
#define tern__qsbr_registered() false
#define tern__qsbr_read_ongoing() false
#define tern__qsbr_register() ((void)0)
#define tern__qsbr_unregister() ((void)0)
#define tern__qsbr_online() ((void)0)
#define tern__qsbr_offline() ((void)0)
#define tern__qsbr_quiescent() ((void)0)

#endif

#endif
