/*
 * tern — an event-loop runtime for C with a built-in blocking pool.
 *
 * This is the one public header. Every function returns 0 or a negative
 * errno value (never -1 with errno); every callback receives an int status.
 * All times are nanoseconds of CLOCK_MONOTONIC; all counts are unsigned.
 *
 * Threads. A loop is owned by the thread that runs it. Calls marked
 * "loop-only" are legal from the thread inside tern_loop_run() or
 * tern_loop_run_once() for that loop, or from any thread while no thread
 * runs the loop; otherwise they abort with a message naming the function.
 * Calls marked "any thread" hand their work to the loop through its
 * inbound queue and never touch the loop's containers.
 *
 * The narrative (the turn, the pool classes, the ring, cancellation,
 * teardown) lives in docs/design.md and docs/pool.md.
 */
#ifndef TERN_H
#define TERN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TERN_BUILDING) && defined(__GNUC__) && !defined(_WIN32)
#define TERN_EXTERN __attribute__((visibility("default")))
#else
#define TERN_EXTERN
#endif
/* A public function compiled into the caller: it passes what only the
 * caller knows (the size of a struct as this header defines it). */
#define TERN_INLINE static inline

struct addrinfo;
struct sockaddr;

typedef uint64_t tern_id; /* never 0, never reused in a process */

/*
 * The system's own handles, as the API takes them. On POSIX both are the
 * plain int descriptor they always were (so the Linux API and ABI are
 * unchanged); on Windows a socket is a SOCKET (tern_os_sock_t, an unsigned
 * pointer-sized integer, as winsock2.h defines it) and a file, pipe or
 * console is a HANDLE (tern_os_fd_t, a pointer), each without pulling
 * <windows.h> into this header. A readiness watch (tern_io_start,
 * tern_wait_fd) takes a socket; a stream and the file requests take a
 * handle (a SOCKET is a kernel handle on Windows, so a stream of one is
 * opened with it cast). What builds for Windows so far, and what it refuses:
 * docs/design.md, "Building for Windows: what exists".
 */
#ifdef _WIN32
typedef uintptr_t tern_os_sock_t; /* SOCKET */
typedef void *tern_os_fd_t;       /* HANDLE */
#else
typedef int tern_os_sock_t; /* a descriptor */
typedef int tern_os_fd_t;   /* a descriptor */
#endif
typedef struct tern_loop tern_loop; /* opaque */
typedef struct tern_job tern_job;   /* opaque, seen by a work function */

/* ------------------------------------------------------------------ */
/* Errors                                                              */
/* ------------------------------------------------------------------ */

/*
 * Name lookup failures have no errno of their own; they are reported as
 * these negative codes, which tern_strerror() and tern_err_name() know.
 */
#define TERN_EAI_BASE (-3000)
#define TERN_EAI_NONAME (TERN_EAI_BASE - 1)  /* host or service not known */
#define TERN_EAI_AGAIN (TERN_EAI_BASE - 2)   /* temporary resolver failure */
#define TERN_EAI_FAIL (TERN_EAI_BASE - 3)    /* permanent resolver failure */
#define TERN_EAI_FAMILY (TERN_EAI_BASE - 4)  /* address family not supported */
#define TERN_EAI_SERVICE (TERN_EAI_BASE - 5) /* service not available for socket type */
#define TERN_EAI_NODATA (TERN_EAI_BASE - 6)  /* host has no address */
#define TERN_EAI_OTHER (TERN_EAI_BASE - 7)   /* any other getaddrinfo failure */

/*
 * tern_strerror: a human sentence for a status value.
 * Requires: nothing (any int is accepted).
 * Returns: a static string; "unknown error" for a value tern does not know,
 *          "success" for 0. Positive values are treated as their negation.
 * Threads: any thread.
 */
TERN_EXTERN const char *tern_strerror(int err);

/*
 * tern_err_name: the symbolic name of a status value ("EAGAIN", "EAI_NONAME").
 * Requires: nothing.
 * Returns: a static string; "UNKNOWN" for a value tern does not know, "OK"
 *          for 0. Positive values are treated as their negation.
 * Threads: any thread.
 */
TERN_EXTERN const char *tern_err_name(int err);

/* ------------------------------------------------------------------ */
/* The pool configuration (process-wide)                               */
/* ------------------------------------------------------------------ */

typedef struct tern_pool_config {
    unsigned threads;              /* bounded workers, 1..1024; default 4 */
    unsigned queue_capacity;       /* bounded queue slots, 1..2^31; default 1024 */
    unsigned long_threads_max;     /* long-class ceiling, 0..65536; default 512 */
    uint64_t long_idle_timeout_ns; /* idle long workers retire after this, >0; default 10 s */
} tern_pool_config;

enum { TERN_POOL_DRAIN = 0, TERN_POOL_CANCEL = 1 };

/*
 * The bounded class's watchdog: a bounded job running longer than
 * stall_ns is counted as stalled (tern_pool_stats.stalls), and while one
 * is and jobs wait in the queue, the pool starts an overflow worker (at
 * most one per stalled worker, and overflow_max alive at once) that takes
 * jobs from the same queue and retires after overflow_idle_ns without
 * one. Process-wide, apart from tern_pool_config (which cannot grow:
 * docs/api.md, "How the ABI grows").
 */
typedef struct tern_pool_watch {
    uint64_t stall_ns;         /* 0 (never stalled) or 1 ms..2^62; default 1 s */
    unsigned overflow_max;     /* 0..64 (0: count stalls only); default 4 */
    uint64_t overflow_idle_ns; /* an idle overflow worker retires after this, >0; default 5 s */
} tern_pool_watch;

/*
 * tern_pool_watch_init: fill *w with the defaults: the built-in ones,
 * changed by the environment's TERN_POOL_STALL_MS, TERN_POOL_OVERFLOW_MAX
 * and TERN_POOL_OVERFLOW_IDLE_MS, which are read and checked as the
 * tern_pool_config variables are (a bad one makes every pool start fail).
 * Requires: w != NULL.
 * Threads: any thread.
 */
TERN_EXTERN void tern_pool_watch_init(tern_pool_watch *w);

/*
 * tern_pool_watch_set: change the watchdog's settings, for the running
 * pool (from the watchdog's next look, within a quarter of the old stall
 * bound and at most 250 ms) and every later one. Overflow workers alive
 * beyond a lowered overflow_max retire when idle.
 * Requires: w != NULL.
 * Returns: 0, or -EINVAL for a field out of range (nothing changes).
 * Threads: any thread.
 */
TERN_EXTERN int tern_pool_watch_set(const tern_pool_watch *w);

/*
 * tern_pool_config_init: fill *cfg with the defaults: the built-in ones,
 * changed by the environment's TERN_POOL_THREADS, TERN_POOL_QUEUE_CAPACITY,
 * TERN_POOL_LONG_THREADS_MAX and TERN_POOL_LONG_IDLE_TIMEOUT_MS (read once
 * per process). A NULL configuration means the same. A variable that is
 * not a decimal number in its field's range makes every pool start fail
 * with -EINVAL (tern_pool_start, or the first submission), with one line
 * on stderr naming it; it is never replaced by a default.
 * Requires: cfg != NULL.
 * Threads: any thread.
 */
TERN_EXTERN void tern_pool_config_init(tern_pool_config *cfg);

/*
 * tern_pool_start: start the process-wide pool explicitly.
 * The first starter fixes the configuration for the pool's lifetime.
 * Requires: cfg may be NULL (defaults).
 * Returns: 0 when the pool now runs with this configuration (or was already
 *          running with an identical one); -EINVAL for a field out of range
 *          or a configuration different from the running pool's; -EAGAIN or
 *          -ENOMEM when a worker thread could not be created (no thread is
 *          left behind: the pool is not started).
 * Threads: any thread.
 */
TERN_EXTERN int tern_pool_start(const tern_pool_config *cfg);

/*
 * tern_pool_shutdown: end the process-wide pool for an orderly exit.
 * TERN_POOL_DRAIN lets queued and running jobs finish; TERN_POOL_CANCEL
 * tombstones queued jobs (their completions say -ECANCELED) and marks
 * running ones cancelled. Completions still reach their loops' rings; the
 * loops deliver them on their next turns. Then every worker is joined and
 * everything the pool owns is freed. A later submission starts a fresh pool.
 * Requires: mode is TERN_POOL_DRAIN or TERN_POOL_CANCEL; not called from a
 *           pool worker.
 * Returns: 0; -EINVAL for a bad mode; -ETIMEDOUT when running jobs outlast
 *          timeout_ns (they keep their threads and nothing is freed under
 *          them; call again later). 0 when no pool runs.
 * Threads: any thread but a pool worker.
 */
TERN_EXTERN int tern_pool_shutdown(int mode, uint64_t timeout_ns);

/* ------------------------------------------------------------------ */
/* Loops                                                               */
/* ------------------------------------------------------------------ */

enum {
    TERN_LOOP_RCU = 1u << 0,       /* the loop thread is a urcu-qsbr reader (not on Windows) */
    TERN_LOOP_KEEPALIVE = 1u << 1, /* the loop stays live with nothing to do, until stopped */
};

typedef struct tern_loop_options {
    unsigned dispatch_batch;      /* callbacks per step 2, 1..2^20; default 64 */
    unsigned max_operations;      /* live operations, 1..2^31; default 65536 */
    unsigned max_undelivered;     /* pool credits, 1..2^31; default 4096 */
    const tern_pool_config *pool; /* NULL: adopt the running pool or start it with defaults */
    const char *backend;          /* NULL = best; "epoll", "kqueue", "poll", "io_uring", "iocp" */
    unsigned flags;               /* TERN_LOOP_RCU, TERN_LOOP_KEEPALIVE */
} tern_loop_options;

/*
 * tern_loop_options_init: fill *opts with the defaults.
 * Requires: opts != NULL.
 * Threads: any thread.
 */
TERN_EXTERN void tern_loop_options_init(tern_loop_options *opts);

/*
 * tern_loop_new: create a loop.
 * Requires: loopp != NULL; opts may be NULL (defaults).
 * Returns: 0 and *loopp set; -EINVAL for an option out of range, an unknown
 *          or unbuilt backend name, unknown flags, or a pool configuration
 *          that differs from the running pool's; -ENOTSUP for
 *          TERN_LOOP_RCU where there is no urcu-qsbr (Windows); -ENOMEM, -EMFILE or
 *          another errno when a descriptor or allocation fails. On error
 *          *loopp is untouched and nothing is left allocated.
 * Ownership: the caller owns the loop and frees it with tern_loop_free().
 *            A loop belongs to the process that made it: in a forked child
 *            every call on the parent's loop aborts, before it touches the
 *            descriptors the two processes share (the child makes its own).
 * Threads: any thread; the loop is unclaimed until it runs.
 */
TERN_EXTERN int tern_loop_new(tern_loop **loopp, const tern_loop_options *opts);

/*
 * tern_loop_free: tear a loop down.
 * Requests stop, cancels everything live, runs bounded drain passes so
 * cancelled operations deliver their final callbacks (job and resolve
 * completions with -ECANCELED — or 0 and the result for a job that had
 * already finished —, pending posts and defers run, streams close), waits
 * for this loop's running pool jobs to return, then frees everything and
 * closes the wake and backend descriptors. Afterwards no callback of this
 * loop runs. Thread-safety: with TERN_LOOP_RCU the freeing thread is a
 * reader during the drain, as a running thread is.
 * Requires: loop != NULL; no thread runs the loop (in particular, not
 *           called from one of its own callbacks) — aborts otherwise.
 * Ownership: loop is invalid on return.
 * Threads: loop-only (and the loop must not be running).
 */
TERN_EXTERN void tern_loop_free(tern_loop *loop);

/*
 * tern_loop_run: run turns until stopped or until nothing live remains
 * (no referenced timer or watcher, no job, no pending post).
 * Requires: loop != NULL; not already running on any thread (aborts).
 * Returns: 0 when nothing live remains; 1 when stopped with work live.
 * Threads: claims the loop for the calling thread for its duration.
 */
TERN_EXTERN int tern_loop_run(tern_loop *loop);

/*
 * tern_loop_run_once: run exactly one turn, waiting at most max_wait_ns in
 * step 4 (<0: as long as needed; 0: never block). With nothing live it
 * returns 0 at once, whatever max_wait_ns.
 * Requires: loop != NULL; not already running on any thread (aborts).
 * Returns: 1 if anything is live afterwards, else 0.
 * Threads: claims the loop for the calling thread for its duration.
 */
TERN_EXTERN int tern_loop_run_once(tern_loop *loop, int64_t max_wait_ns);

/*
 * tern_loop_stop: make tern_loop_run() return after its current turn.
 * A stop requested while the loop is not running makes the next
 * tern_loop_run() return after one turn.
 * Requires: loop != NULL.
 * Returns: 0.
 * Threads: any thread (wakes the loop if it sleeps).
 */
TERN_EXTERN int tern_loop_stop(tern_loop *loop);

/*
 * tern_loop_keepalive: whether the loop counts as live with nothing else to
 * do. A kept-alive loop that serves only posts from other threads sleeps
 * in its backend until a post arrives or it is stopped: tern_loop_run()
 * returns only when stopped (1), and tern_loop_run_once() waits as any
 * live loop does. Dropping the keep-alive lets run() return once nothing
 * else is live. The initial state is TERN_LOOP_KEEPALIVE in the options.
 * Requires: loop != NULL.
 * Returns: 0.
 * Threads: loop-only (from another thread, post a function that calls it).
 */
TERN_EXTERN int tern_loop_keepalive(tern_loop *loop, bool on);

/*
 * tern_loop_current: the loop the calling thread is running, or NULL
 * (always NULL on pool workers and outside run/run_once).
 * Threads: any thread.
 */
TERN_EXTERN tern_loop *tern_loop_current(void);

/*
 * tern_loop_now: the loop's cached clock (refreshed in steps 3 and 5).
 * Requires: loop != NULL.
 * Threads: any thread (a relaxed read).
 */
TERN_EXTERN uint64_t tern_loop_now(const tern_loop *loop);

/*
 * tern_loop_backend_fd: a descriptor that becomes readable when the loop
 * has something to do, for embedding in a host loop (GTK, Qt, ...). The
 * host polls it and pumps with tern_loop_run_once(loop, 0). The poll and
 * io_uring backends return the wake descriptor, readable only for wake-ups;
 * combine it with tern_loop_next_timeout() and your own fd interest.
 * Requires: loop != NULL.
 * Returns: the descriptor (owned by the loop; do not close it); -1 on
 *          Windows, where the IOCP backend has nothing a host can watch.
 * Threads: any thread.
 */
TERN_EXTERN int tern_loop_backend_fd(const tern_loop *loop);

/*
 * tern_loop_backend_name: the backend the loop runs on: "epoll", "kqueue",
 * "poll" or "io_uring". A loop that asked for "io_uring" where the kernel
 * refuses it (no io_uring, a seccomp filter, io_uring_disabled, too little
 * locked memory) runs on epoll and says "epoll".
 * Requires: loop != NULL.
 * Returns: a string that lives as long as the process.
 * Threads: any thread.
 */
TERN_EXTERN const char *tern_loop_backend_name(const tern_loop *loop);

/*
 * tern_loop_next_timeout: how long the loop would wait now, in ns.
 * Returns: 0 if callbacks are ready or posts are pending; the time to the
 *          soonest deadline; -1 if nothing is pending at all.
 * Requires: loop != NULL.
 * Threads: loop-only.
 */
TERN_EXTERN int64_t tern_loop_next_timeout(const tern_loop *loop);

/* ------------------------------------------------------------------ */
/* Posts, defers, cancellation, references                             */
/* ------------------------------------------------------------------ */

typedef void (*tern_fn)(tern_loop *loop, void *arg);

/*
 * tern_post: run fn(loop, arg) on the loop, in step 1 of a coming turn.
 * Posts from one thread run in the order they were posted. A pending post
 * keeps the loop alive and counts against max_operations, as does, until
 * the loop's next turn, the credit a thread's burst took ahead (at most 63
 * posts a thread; one thread alone is refused exactly at the bound).
 * Requires: loop != NULL and not being freed.
 * Returns: 0; -EINVAL if fn is NULL; -EAGAIN when max_operations is
 *          reached; -ESHUTDOWN while the loop is being freed; -ENOMEM.
 *          On error fn never runs.
 * Ownership: arg stays the caller's; tern only passes it on.
 * Threads: any thread (the only cross-thread way to give a loop work).
 */
TERN_EXTERN int tern_post(tern_loop *loop, tern_fn fn, void *arg);

/*
 * tern_defer: append fn(loop, arg) to the ready queue; it runs in step 2.
 * What is deferred during step 2 runs in the next turn's step 2.
 * Requires: loop != NULL.
 * Returns: 0; -EINVAL if fn is NULL; -EAGAIN when max_operations is
 *          reached; -ENOMEM; -ESHUTDOWN while the loop is being freed.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_defer(tern_loop *loop, tern_fn fn, void *arg);

/*
 * tern_cancel: cancel an operation by id.
 * Timers and watchers stop without a callback. A queued pool job never
 * runs and its done gets -ECANCELED (NULL result) in step 2 of the next
 * turn; a running one sees tern_job_cancelled() turn true and its done gets
 * -ECANCELED with its result; a finished one is unaffected (while its done
 * is still pending the call changes nothing). A resolve completes with
 * -ECANCELED; a stream closes.
 * Requires: loop != NULL.
 * Returns: from the thread running the loop (inside its callbacks): a
 *          TERN_CANCEL_* outcome (tern/admission.h): STOPPED for a timer,
 *          watcher or stream, and for a job that never ran (again on a
 *          second cancel); RUNNING for a job told to stop while it ran
 *          (again once it has returned); FINISHED for a job whose work
 *          returned before any cancel (done gets 0). -ENOENT for an
 *          unknown, delivered or stale id (0 is -EINVAL).
 *          From any other thread — including while nobody runs the loop:
 *          TERN_CANCEL_REQUESTED once the request is queued (it is resolved
 *          by live id in the loop's next step 1, or by tern_loop_free; an
 *          id that is no longer live is then ignored; done's status is the
 *          outcome), -EINVAL for id 0, -ESHUTDOWN once tern_loop_free has
 *          begun, -EAGAIN while 65536 such requests already wait for the
 *          loop's next step 1. Never -ENOMEM: a cancel allocates nothing
 *          (its record is reserved with the loop), so it works when memory
 *          has run out.
 * Threads: any thread. Only the thread running the loop touches the
 *          loop's containers; every other caller's request is queued, so
 *          a cancel never races setup calls made on an unclaimed loop.
 */
TERN_EXTERN int tern_cancel(tern_loop *loop, tern_id id);

/*
 * tern_ref / tern_unref: whether a timer, fd watcher, stream, listener or
 * signal watcher keeps tern_loop_run() from returning. Operations start
 * referenced. Both are idempotent.
 * Requires: loop != NULL.
 * Returns: 0; -ENOENT for an unknown or stale id; -EINVAL for id 0 or for
 *          an operation that is always referenced (jobs, resolves).
 * Threads: loop-only.
 */
TERN_EXTERN int tern_ref(tern_loop *loop, tern_id id);
TERN_EXTERN int tern_unref(tern_loop *loop, tern_id id);

/* ------------------------------------------------------------------ */
/* Timers                                                              */
/* ------------------------------------------------------------------ */

typedef void (*tern_timer_cb)(tern_loop *loop, tern_id id, void *arg);

/*
 * tern_timer_start: call cb(loop, id, arg) once delay_ns has passed, then
 * every repeat_ns if repeat_ns > 0. The delay counts from the loop's cached
 * clock (tern_loop_now), as libuv's does: a timer started late in a long
 * turn can fire up to that turn's length before delay_ns after the call.
 * (Rearmed in step 5 when it fires, from
 * that moment, so a slow callback does not cause a burst: firings that come
 * due before the callback ran merge into one call). Deadlines that fall in
 * the same step 5 fire soonest first, FIFO on a tie by arming order.
 * A one-shot timer is finished (its id stale) once its callback starts.
 * Requires: loop != NULL.
 * Returns: 0 and *idp (if idp != NULL); -EINVAL if cb is NULL or delay or
 *          repeat exceed 2^62 ns; -EAGAIN when max_operations is reached;
 *          -ENOMEM; -ESHUTDOWN while the loop is being freed.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_timer_start(tern_loop *loop, uint64_t delay_ns, uint64_t repeat_ns,
                                 tern_timer_cb cb, void *arg, tern_id *idp);

/*
 * tern_timer_stop: stop a timer; its callback will not run again (even if
 * it had expired and was waiting in the ready queue).
 * Requires: loop != NULL.
 * Returns: 0; -ENOENT for an unknown, finished or stale id, or an id that
 *          is not a timer; -EINVAL for id 0.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_timer_stop(tern_loop *loop, tern_id id);

/* ------------------------------------------------------------------ */
/* File-descriptor watchers                                            */
/* ------------------------------------------------------------------ */

enum { TERN_READABLE = 1, TERN_WRITABLE = 2, TERN_HANGUP = 4, TERN_ERROR = 8 };

typedef void (*tern_io_cb)(tern_loop *loop, tern_id id, tern_os_sock_t fd, unsigned events,
                           void *arg);

/*
 * tern_io_start: watch fd for events (TERN_READABLE | TERN_WRITABLE),
 * level-triggered: while the condition holds, the callback runs once per
 * turn. TERN_HANGUP and TERN_ERROR are always reported when they occur.
 * Requires: loop != NULL.
 * Returns: 0 and *idp; -EBADF for a negative or closed fd; -EINVAL for a
 *          NULL cb, or events with bits other than READABLE|WRITABLE, or
 *          no bits at all; -EEXIST when fd is already watched by this or
 *          any other loop (G4); -EPERM for an fd the backend cannot watch
 *          (a regular file under epoll); -ENOTSOCK on Windows for
 *          anything but a socket (only sockets can be watched there); -EAGAIN at max_operations;
 *          -ENOMEM; -ESHUTDOWN while the loop is being freed.
 * Ownership: the fd stays the caller's; stop the watcher before closing it.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_io_start(tern_loop *loop, tern_os_sock_t fd, unsigned events, tern_io_cb cb,
                              void *arg, tern_id *idp);

/*
 * tern_io_modify: change the events a watcher waits for.
 * Requires: loop != NULL.
 * Returns: 0; -EINVAL for bad or empty events or id 0; -ENOENT for an
 *          unknown or stale id, or one that is not an fd watcher.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_io_modify(tern_loop *loop, tern_id id, unsigned events);

/*
 * tern_io_stop: stop watching; a readiness already queued is dropped.
 * Requires: loop != NULL.
 * Returns: 0; -EINVAL for id 0; -ENOENT for an unknown or stale id, or
 *          not an fd watcher.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_io_stop(tern_loop *loop, tern_id id);

/* ------------------------------------------------------------------ */
/* The pool: submission, cancellation, name lookups                    */
/* ------------------------------------------------------------------ */

typedef enum tern_occupancy { TERN_BOUNDED = 0, TERN_LONG = 1 } tern_occupancy;
typedef void *(*tern_work_fn)(tern_job *job, void *arg);
typedef void (*tern_done_fn)(tern_loop *loop, tern_id id, int status, void *result, void *arg);

/*
 * tern_submit: run work(job, arg) on a pool thread of the given class and
 * then done(loop, id, status, result, arg) on this loop in step 2.
 * status is 0; -ECANCELED (result is then the work's return value if it
 * ran, NULL if it never ran); or, for a job given a timeout with
 * tern_submit_with, -ETIMEDOUT (result as for -ECANCELED). No order
 * among dones is promised: not submission order (several workers run
 * jobs, a cancel completes one early). Exactly one done per accepted job, before
 * tern_loop_free() returns. Starts the pool with the loop's configuration
 * (or the defaults) if it is not running.
 * Requires: loop != NULL.
 * Returns: 0 and *idp; -EINVAL for NULL work or done or a bad occupancy;
 *          -EAGAIN when refused: bounded queue full, long ceiling reached,
 *          max_undelivered or max_operations reached (the pool statistics
 *          count which); -ESHUTDOWN while the loop is being freed; -ENOMEM;
 *          an errno from starting the pool. A refused job leaves no trace.
 * Ownership: arg stays the caller's; the result is handed to done.
 * Threads: loop-only (from another thread, tern_post to the loop first).
 */
TERN_EXTERN int tern_submit(tern_loop *loop, tern_occupancy occupancy, tern_work_fn work,
                            tern_done_fn done, void *arg, tern_id *idp);

/*
 * tern_job_cancelled: whether the running job has been asked to stop.
 * Requires: job is the handle passed to the running work function.
 * Threads: the worker running the job (any thread may read it).
 */
TERN_EXTERN bool tern_job_cancelled(const tern_job *job);

/*
 * tern_job_id: the id of the job, as its done will see it.
 * Requires: job is the handle passed to the running work function.
 */
TERN_EXTERN tern_id tern_job_id(const tern_job *job);

typedef void (*tern_resolve_cb)(tern_loop *loop, tern_id id, int status, struct addrinfo *res,
                                void *arg);

/*
 * tern_resolve: getaddrinfo(host, service, hints) on the bounded class,
 * then cb(loop, id, status, res, arg) in step 2. At most (threads+1)/2
 * lookups run at once in the process; the rest wait in the bounded queue
 * behind CPU work without holding a worker.
 * Requires: loop != NULL; host or service non-NULL.
 * Returns: 0 and *idp; -EINVAL for NULL cb or both names NULL;
 *          -ESHUTDOWN while the loop is being freed; -EAGAIN as
 *          tern_submit; -ENOMEM. The callback's status is 0, -ECANCELED,
 *          a TERN_EAI_* code, or a negative errno (-ENOMEM, or the system
 *          error behind EAI_SYSTEM).
 * Ownership: host, service and hints are copied. On status 0 the callback
 *          owns res and frees it with tern_freeaddrinfo(); otherwise res is
 *          NULL.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_resolve(tern_loop *loop, const char *host, const char *service,
                             const struct addrinfo *hints, tern_resolve_cb cb, void *arg,
                             tern_id *idp);

/* tern_freeaddrinfo: free a result handed to a tern_resolve_cb (NULL is fine). */
TERN_EXTERN void tern_freeaddrinfo(struct addrinfo *res);

/* ------------------------------------------------------------------ */
/* Statistics                                                          */
/* ------------------------------------------------------------------ */

/*
 * Outcomes, ever: submitted == completed (done got 0) + cancelled (done
 * got -ECANCELED) + timed_out (done got -ETIMEDOUT) + jobs whose done is
 * still owed or not yet counted: a loop adds the outcomes of the dones it
 * ran as the step that ran them ends, so another thread sees them one
 * step late at most; a read on the loop's own thread, a done's included,
 * sees them all. refused_<cause> counts every refusal of each
 * TERN_REFUSAL_MAP cause, process-wide. Fields after run_p99_ns were
 * added later, at the end.
 */
typedef struct tern_pool_stats {
    unsigned threads, busy, queued, queued_peak, reserved, long_threads, long_busy;
    uint64_t submitted, completed, cancelled;
    uint64_t refused_queue_full, refused_long_ceiling, refused_undelivered, refused_operations;
    uint64_t wait_p50_ns, wait_p99_ns, run_p50_ns, run_p99_ns;
    uint64_t refused_owner_cap, refused_shutdown, refused_threads;
    uint64_t timed_out;
    /* The watchdog (tern_pool_watch): bounded jobs seen running past the
     * stall bound (each once), overflow workers started and retired, and
     * alive now; tombstones the bounded queue still holds (they hold no
     * slot: docs/pool.md). */
    uint64_t stalls, overflow_started, overflow_retired;
    unsigned overflow_now, tombstones;
    /*
     * Bytes the pool holds now: its record, the bounded queue's cells, its
     * worker tables, the long class's worker records, and the record of
     * every job in flight (accepted, not yet handed back). Thread stacks
     * are not counted (docs/pool.md, "Memory figures"). 0 with no pool
     * and nothing in flight.
     */
    uint64_t memory_bytes;
} tern_pool_stats;

/*
 * tern_pool_stats_read: a snapshot of the process-wide pool's counters.
 * Never blocks, never fails; the fields are read one by one without a lock
 * and may be a moment apart. All zero before the pool first starts.
 * Percentiles cover recent jobs (a decaying window) in nanoseconds, to
 * within the histogram's bucket width (about 1/8 of the value), from a
 * sample: a quarter of the queue waits, and of short bounded jobs' run
 * times a random quarter, each counted four times (docs/pool.md).
 * Fills the first size bytes of out: a caller compiled against an older,
 * shorter struct gets its prefix; fields the library does not know (a
 * newer header than the library) read as zero (docs/api.md, "How the ABI
 * grows"). Callers use tern_pool_stats_get, which passes sizeof *out.
 * Requires: out != NULL; size > 0.
 * Threads: any thread.
 */
TERN_EXTERN void tern_pool_stats_read(tern_pool_stats *out, size_t size);

/* tern_pool_stats_get: tern_pool_stats_read with this header's struct size.
 * Requires: out != NULL. Threads: any thread. */
TERN_INLINE void tern_pool_stats_get(tern_pool_stats *out)
{
    tern_pool_stats_read(out, sizeof *out);
}

typedef struct tern_loop_stats {
    uint64_t turns, posts, wake_syscalls, events, idle_ns;
    unsigned live_operations, undelivered, undelivered_peak;
    /* New fields go at the end (docs/api.md, "How the ABI grows"). */
    uint64_t busy_ns;   /* time in turns not blocked: utilisation = busy / (busy + idle) */
    uint64_t lag_count; /* deadlines fired (timers and internal deadlines) */
    uint64_t lag_p50_ns, lag_p99_ns, lag_max_ns; /* how late they fired */
} tern_loop_stats;

/*
 * tern_loop_stats_read: the loop's counters. turns completed, posts run,
 * wake syscalls made by producers, callbacks dispatched in step 2 (events),
 * time blocked in the backend (idle_ns), live operations now, pool
 * completions undelivered now and at peak; time busy in turns (busy_ns)
 * and how late deadlines fired (lag_*: log2-bucket percentiles, within a
 * factor of two, since the loop was made). Fills the first size bytes of
 * out, as tern_pool_stats_read. Callers use tern_loop_stats_get.
 * Requires: loop != NULL; out != NULL; size > 0.
 * Threads: any thread (relaxed reads; a moment apart).
 */
TERN_EXTERN void tern_loop_stats_read(const tern_loop *loop, tern_loop_stats *out, size_t size);

/*
 * tern_loop_memory_bytes: the bytes the loop holds now: its record, its
 * id map, deadline heap and timer table, its defer records, its
 * descriptor table, the records of posts waiting for it, its job records
 * (jobs accepted whose done has not run, and freed records kept for
 * reuse) and its result ring. Buffers an operation's caller owns, and
 * records an operation kind mallocs for itself (sockets, file
 * operations), are not counted; a job in flight counts both here and in
 * tern_pool_stats.memory_bytes (docs/pool.md, "Memory figures").
 * Summed on demand, so it costs nothing until asked.
 * Requires: loop != NULL.
 * Threads: loop-only (it reads the loop's own containers).
 */
TERN_EXTERN uint64_t tern_loop_memory_bytes(const tern_loop *loop);

/* tern_loop_stats_get: tern_loop_stats_read with this header's struct size.
 * Requires: loop != NULL; out != NULL. Threads: any thread. */
TERN_INLINE void tern_loop_stats_get(const tern_loop *loop, tern_loop_stats *out)
{
    tern_loop_stats_read(loop, out, sizeof *out);
}

/* ------------------------------------------------------------------ */
/* Loop hooks: prepare, check, idle                                    */
/* ------------------------------------------------------------------ */

/*
 * Hooks let another library's own event handling (c-ares, libcurl's multi
 * interface) run on the loop at fixed points of every turn. All three run
 * in step 2, around the ready queue:
 *   check   — first in step 2: after the previous turn's wait (step 4) and
 *             deadlines (step 5) and this turn's step 1, before the
 *             callbacks they made ready. (In the first turn no wait has
 *             happened yet.)
 *   idle    — after the ready queue; while any idle hook is started, step
 *             3 computes a wait of 0, so the loop never blocks.
 *   prepare — last in step 2, after idle: the last thing before step 3
 *             computes the wait, so a timer started here counts.
 * Within a kind, hooks run in the order they were started; one started
 * during a run of its kind first runs in the next turn; one stopped during
 * it does not run again.
 */
enum { TERN_HOOK_PREPARE = 0, TERN_HOOK_CHECK = 1, TERN_HOOK_IDLE = 2 };

typedef void (*tern_hook_cb)(tern_loop *loop, tern_id id, void *arg);

/*
 * tern_hook_start: run cb(loop, id, arg) once per turn at the point kind
 * names, until stopped. A hook keeps tern_loop_run() alive (as a timer
 * does) unless tern_unref()'d.
 * Requires: loop != NULL.
 * Returns: 0 and *idp; -EINVAL for a NULL cb or an unknown kind; -EAGAIN
 *          at max_operations; -ENOMEM; -ESHUTDOWN while the loop is being
 *          freed.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_hook_start(tern_loop *loop, int kind, tern_hook_cb cb, void *arg,
                                tern_id *idp);

/*
 * tern_hook_stop: stop a hook; it never runs again, even later in the run
 * that is calling hooks now. tern_cancel does the same.
 * Requires: loop != NULL.
 * Returns: 0; -ENOENT for an unknown or stale id or one that is not a hook.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_hook_stop(tern_loop *loop, tern_id id);

/* ------------------------------------------------------------------ */
/* What is still alive                                                 */
/* ------------------------------------------------------------------ */

/*
 * One live operation, as tern_loop_walk shows it. The library fills it and
 * passes it by pointer; it may grow at its end (docs/api.md, "How the ABI
 * grows"), so read it through the pointer rather than copying it whole.
 */
typedef struct tern_op_info {
    tern_id id;       /* the id its starting call returned */
    const char *kind; /* "timer", "job", "io", "stream", ...: a static string */
    uint64_t age_ns;  /* loop time since it started (tern_loop_now's clock), within
                           2^20 ns (about 1 ms) */
    bool referenced;  /* keeps tern_loop_run() going (not tern_unref'd) */
} tern_op_info;

typedef void (*tern_walk_cb)(tern_loop *loop, const tern_op_info *op, void *arg);

/*
 * tern_loop_walk: call cb(loop, op, arg) once for each live operation of
 * the loop that has an id (timers, watchers, jobs, owners, streams, hooks,
 * processes, waits...), in no particular order, as libuv's uv_walk. A
 * function handed to tern_defer or tern_post is not an operation and is not
 * shown. The op pointer is valid only during the call.
 * Requires: loop != NULL; cb != NULL; cb neither starts nor ends an
 *           operation of this loop (no start, stop, cancel, submit, close):
 *           collect ids and act after the walk (aborts, naming the rule).
 * Returns: the number of operations shown (>= 0).
 * Ownership: arg stays the caller's.
 * Threads: loop-only.
 */
TERN_EXTERN int tern_loop_walk(tern_loop *loop, tern_walk_cb cb, void *arg);

/*
 * tern_loop_print_live: write one line per live operation (as
 * tern_loop_walk shows them) to out: its kind, id, age in milliseconds
 * and whether it is referenced, as libuv's uv_print_active_handles.
 * Requires: loop != NULL; out != NULL.
 * Returns: the number of operations written (>= 0); -EIO if out reports
 *          a write error.
 * Ownership: out stays the caller's (not flushed, not closed).
 * Threads: loop-only.
 */
TERN_EXTERN int tern_loop_print_live(tern_loop *loop, FILE *out);

#include "tern/net.h"
#include "tern/udp.h"
#include "tern/admission.h"
#include "tern/batch.h"
#include "tern/group.h"
#include "tern/fs.h"
#include "tern/process.h"
#include "tern/watch.h"
#include "tern/wait.h"
#include "tern/figures.h"

#ifdef __cplusplus
}
#endif

#endif /* TERN_H */
