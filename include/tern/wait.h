/*
 * External waits: a registration that completes when something outside
 * tern happens, without holding a bounded worker. A wait is accepted and
 * delivered like a job: it holds one of the loop's max_undelivered credits
 * from acceptance until its done starts, is refused with a cause
 * (tern_loop_last_refusal), takes an owner and a timeout
 * (tern_job_options), answers tern_cancel with a TERN_CANCEL_* outcome,
 * and gets exactly one done — also when the loop is freed first.
 * Included by tern.h. How a wait differs from a long job, and when to use
 * which: docs/pool.md ("Waits versus long jobs").
 */
#ifndef TERN_WAIT_H
#define TERN_WAIT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * tern_wait_fd: wait, once, for fd to become readable (an eventfd another
 * library signals, a pidfd — a child of tern_process_spawn is one through
 * tern_process_pid and pidfd_open —, a pipe). The loop's backend watches
 * fd; no thread is held. done(loop, id, status, result, arg) comes once,
 * in step 2:
 *   status 0: fd became readable (or reported hang-up or an error);
 *     result is the TERN_READABLE/TERN_HANGUP/TERN_ERROR bits, cast to a
 *     pointer. Nothing is read from fd: an eventfd keeps its count.
 *   -ECANCELED: tern_cancel (TERN_CANCEL_STOPPED), an owner closed, or the
 *     loop freed; -ETIMEDOUT: the timeout came first. result is NULL.
 * tern_cancel after the event and before done answers TERN_CANCEL_FINISHED
 * and done still gets 0; after the timeout and before done it answers
 * TERN_CANCEL_STOPPED and done still gets -ETIMEDOUT (the first reason
 * stands, as for a job its timeout stopped). fd is no longer watched when done starts, so done
 * may close it or wait on it again.
 * Requires: loop != NULL.
 * Returns: 0 and *idp (if idp != NULL); -EINVAL for fd < 0, a NULL done,
 *          an unknown or closed owner or a timeout over 2^62 ns; -EEXIST
 *          when fd is already watched by this or another loop; -EPERM for
 *          an fd the backend cannot watch (a regular file on epoll);
 *          -ENOTSOCK on Windows for anything but a socket;
 *          -ENOMEM; -ESHUTDOWN while the loop is being freed; -EAGAIN with
 *          TERN_REFUSED_OWNER_CAP, TERN_REFUSED_UNDELIVERED or
 *          TERN_REFUSED_OPERATIONS. On error done never runs and nothing
 *          of the wait is left.
 * Ownership: fd stays the caller's; it must stay open until done starts.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_wait_fd(tern_loop *loop, tern_os_sock_t fd, tern_done_fn done, void *arg,
                             const tern_job_options *opts, tern_id *idp);

/*
 * tern_wait_call: run a blocking wait that has no descriptor, wait(job,
 * arg), on a thread of the pool's long class — never a bounded worker, so
 * bounded jobs keep running however many waits block. Its ceiling is the
 * long class's: at most long_threads_max waits and long jobs block at once
 * in the process (tern_pool_config); beyond it the call is refused with
 * TERN_REFUSED_LONG_CEILING. done comes once, in step 2, with 0 and what
 * wait returned; -ECANCELED or -ETIMEDOUT (with wait's result if it ran,
 * NULL if it never started). A cancel or timeout while wait blocks turns
 * tern_job_cancelled(job) true; it cannot interrupt the call itself, so a
 * wait that should end early looks at it between short waits.
 * Requires: loop != NULL.
 * Returns: as tern_submit_with with TERN_LONG: 0 and *idp; -EINVAL for a
 *          NULL wait or done, an unknown owner or a timeout over 2^62 ns;
 *          -ENOMEM; -ESHUTDOWN; -EAGAIN with TERN_REFUSED_LONG_CEILING,
 *          TERN_REFUSED_UNDELIVERED, TERN_REFUSED_OPERATIONS,
 *          TERN_REFUSED_OWNER_CAP, TERN_REFUSED_SHUTDOWN or
 *          TERN_REFUSED_THREADS. On error done never runs.
 * Ownership: arg stays the caller's.
 * Threads: loop-only; wait runs on a long-class thread.
 */
TERN_EXTERN int tern_wait_call(tern_loop *loop, tern_work_fn wait, tern_done_fn done, void *arg,
                               const tern_job_options *opts, tern_id *idp);

#ifdef __cplusplus
}
#endif

#endif
