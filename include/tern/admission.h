/*
 * Admission for servers: owners with a cap on their jobs in flight, job
 * and lookup deadlines on the loop's one deadline heap, the cause of a
 * refusal per call, and what a cancel did. Included by tern.h.
 *
 * The narrative, with an example, is in docs/pool.md ("Admission for
 * servers").
 */
#ifndef TERN_ADMISSION_H
#define TERN_ADMISSION_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Why a submission was refused                                        */
/* ------------------------------------------------------------------ */

/*
 * Every resource refusal returns -EAGAIN; this says which resource. The
 * cause is the loop's own (a loop-only value, so no other loop moves it),
 * unlike the process-wide refused_* counters of tern_pool_stats, which
 * count every cause.
 *
 * TERN_REFUSAL_MAP is the one list of causes: X(name, short, value) gives
 * the enum below, tern_refusal_name()'s names (short, as a string) and
 * tern_pool_stats' counters (refused_<short>).
 */
#define TERN_REFUSAL_MAP(X)                                                                       \
    X(TERN_REFUSED_QUEUE_FULL, queue_full, 1) /* the bounded queue (with reservations) is full */ \
    X(TERN_REFUSED_LONG_CEILING, long_ceiling, 2) /* long_threads_max long jobs are running */    \
    X(TERN_REFUSED_UNDELIVERED, undelivered, 3)   /* this loop holds max_undelivered credits */   \
    X(TERN_REFUSED_OPERATIONS, operations, 4)     /* this loop has max_operations live ops */     \
    X(TERN_REFUSED_OWNER_CAP, owner_cap, 5)       /* the owner has its cap of jobs in flight */   \
    X(TERN_REFUSED_SHUTDOWN, shutdown, 6)         /* tern_pool_shutdown is under way; retry */    \
    X(TERN_REFUSED_THREADS, threads, 7)           /* the system refused the pool a thread */

typedef enum tern_refusal {
    TERN_REFUSED_NONE = 0, /* the last submission was accepted (or was no refusal) */
#define TERN_REFUSAL_ENUM_(name, short_name, value) name = value,
    TERN_REFUSAL_MAP(TERN_REFUSAL_ENUM_)
#undef TERN_REFUSAL_ENUM_
} tern_refusal;

/*
 * tern_loop_last_refusal: the cause of the last submission on this loop
 * (tern_submit, tern_submit_with, tern_resolve, tern_resolve_with, and
 * the file requests of tern/fs.h): a
 * TERN_REFUSED_* value when it returned -EAGAIN, TERN_REFUSED_NONE when it
 * did not. Read it right after the call.
 * Requires: loop != NULL.
 * Threads: loop-only.
 */
TERN_EXTERN tern_refusal tern_loop_last_refusal(const tern_loop *loop);

/* tern_refusal_name: "queue_full", "owner_cap", "threads", ... ("none" for 0; "?" if unknown). */
TERN_EXTERN const char *tern_refusal_name(tern_refusal refusal);

/* ------------------------------------------------------------------ */
/* What a cancel did                                                   */
/* ------------------------------------------------------------------ */

/*
 * tern_cancel returns one of these (never negative) when it succeeds. For
 * a job or a lookup it says what happened to the work; a timer, watcher or
 * stream is simply stopped (TERN_CANCEL_STOPPED). A second cancel of a job
 * whose done is still owed gives the first one's answer again (STOPPED
 * stays STOPPED, RUNNING stays RUNNING after the work returns). In every
 * case the job's done still comes exactly once, and its status agrees.
 */
enum {
    TERN_CANCEL_STOPPED = 0,   /* not started and never will: done gets -ECANCELED, NULL result */
    TERN_CANCEL_RUNNING = 1,   /* told while running: tern_job_cancelled() is now true; done
                                  gets -ECANCELED and the work's result */
    TERN_CANCEL_FINISHED = 2,  /* the work had returned before any cancel: no effect; done
                                  gets 0 and its result */
    TERN_CANCEL_REQUESTED = 3, /* queued from a thread not running the loop: resolved in the
                                  loop's next step 1; the outcome is done's status */
};

/* ------------------------------------------------------------------ */
/* Owners and deadlines                                                */
/* ------------------------------------------------------------------ */

/*
 * Options for tern_submit_with and tern_resolve_with. Zero means "none".
 *   owner       an owner (tern_owner_open) whose cap this job counts against
 *   timeout_ns  not started by then: done gets -ETIMEDOUT and the work never
 *               runs; running by then: tern_job_cancelled() turns true and
 *               done gets -ETIMEDOUT with the work's result. 1..2^62.
 */
typedef struct tern_job_options {
    tern_id owner;
    uint64_t timeout_ns;
} tern_job_options;

/* tern_job_options_init: no owner, no timeout. Requires: opts != NULL. */
TERN_EXTERN void tern_job_options_init(tern_job_options *opts);

/*
 * tern_submit_with: tern_submit with an owner and/or a timeout (opts may be
 * NULL: exactly tern_submit).
 * Requires: loop != NULL.
 * Returns: as tern_submit, plus -EINVAL for an unknown or closed owner
 *          or a timeout over 2^62 ns, -ENOMEM if the deadline cannot be
 *          armed, and -EAGAIN with TERN_REFUSED_OWNER_CAP when the owner
 *          has cap jobs in flight. A refused job leaves no trace (the
 *          owner's refused count aside).
 * Threads: loop-only.
 */
TERN_EXTERN int tern_submit_with(tern_loop *loop, tern_occupancy occupancy, tern_work_fn work,
                                 tern_done_fn done, void *arg, const tern_job_options *opts,
                                 tern_id *idp);

/*
 * tern_resolve_with: tern_resolve with an owner and/or a timeout (a stalled
 * resolver then cannot hold the caller: the callback gets -ETIMEDOUT).
 * Requires, Returns: as tern_resolve and tern_submit_with.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_resolve_with(tern_loop *loop, const char *host, const char *service,
                                  const struct addrinfo *hints, tern_resolve_cb cb, void *arg,
                                  const tern_job_options *opts, tern_id *idp);

/*
 * The answer of a reverse lookup. status 0: host and service are
 * NUL-terminated and valid only until the callback returns. Otherwise both
 * are NULL and status is -ECANCELED, -ETIMEDOUT, a TERN_EAI_* code
 * (TERN_EAI_NONAME for an address without a name under NI_NAMEREQD) or a
 * negative errno.
 */
typedef void (*tern_nameinfo_cb)(tern_loop *loop, tern_id id, int status, const char *host,
                                 const char *service, void *arg);

/*
 * tern_resolve_addr: the reverse of tern_resolve: getnameinfo(addr, flags)
 * on the bounded class, under the same cap, then cb in step 2. It is a
 * lookup like tern_resolve_with's in every other way: tern_cancel(loop,
 * id) cancels it (-ECANCELED), opts may give an owner and a timeout (a
 * resolver stalled past it answers -ETIMEDOUT at the deadline), and it
 * counts in the pool's statistics.
 * Requires: loop != NULL; addr an AF_INET or AF_INET6 address (its family
 *           gives its length); flags any NI_* flags (NI_NUMERICHOST for
 *           the number, NI_NAMEREQD to fail without a name).
 * Returns: 0 and *idp; -EINVAL for a NULL cb or addr; -EAFNOSUPPORT for
 *          any other family; otherwise as tern_resolve_with. On error cb
 *          never runs.
 * Ownership: addr is copied.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_resolve_addr(tern_loop *loop, const struct sockaddr *addr, int flags,
                                  tern_nameinfo_cb cb, void *arg, const tern_job_options *opts,
                                  tern_id *idp);

/*
 * tern_owner_open: a new owner (a client connection, a tenant, a request)
 * on this loop, allowing at most cap of its jobs in flight (from
 * acceptance until their done has started). Owners are the loop's: their
 * counts cost no atomics. An owner does not keep tern_loop_run() going and
 * counts as one live operation.
 * Requires: loop != NULL, ownerp != NULL.
 * Returns: 0 and *ownerp; -EINVAL for cap 0 or over 2^31; -EAGAIN at
 *          max_operations; -ENOMEM; -ESHUTDOWN while the loop is freed.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_owner_open(tern_loop *loop, unsigned cap, tern_id *ownerp);

/*
 * tern_owner_close: close an owner and cancel every job and lookup it still
 * has in flight (queued: never runs; running: flagged), each still getting
 * its one done: -ECANCELED, or 0 and its result when the work had already
 * returned. The id is stale at once; tern_cancel on it also closes it.
 * Requires: loop != NULL.
 * Returns: 0; -EINVAL for id 0; -ENOENT for an unknown or closed owner.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_owner_close(tern_loop *loop, tern_id owner);

typedef struct tern_owner_stats {
    unsigned cap;       /* as opened */
    unsigned in_flight; /* accepted jobs whose done has not started */
    uint64_t accepted;  /* jobs and lookups accepted, ever */
    uint64_t refused;   /* refused for the owner's cap, ever */
} tern_owner_stats;

/*
 * tern_owner_stats_read: the owner's counts now, in the first size bytes
 * of out (as tern_pool_stats_read). Callers use tern_owner_stats_get.
 * Requires: loop != NULL, out != NULL, size > 0.
 * Returns: 0; -EINVAL for id 0; -ENOENT for an unknown or closed owner.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_owner_stats_read(tern_loop *loop, tern_id owner, tern_owner_stats *out,
                                      size_t size);

/* tern_owner_stats_get: tern_owner_stats_read with this header's struct
 * size. Requires, Returns, Threads: as tern_owner_stats_read. */
TERN_INLINE int tern_owner_stats_get(tern_loop *loop, tern_id owner, tern_owner_stats *out)
{
    return tern_owner_stats_read(loop, owner, out, sizeof *out);
}

#ifdef __cplusplus
}
#endif

#endif
