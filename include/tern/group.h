/*
 * tern/group.h — loop groups: N loops on N threads sharing the one pool,
 * started, stopped and freed as one; exclusive mode (pause/resume); and a
 * two-phase shutdown. Included by tern.h; do not include it alone.
 *
 * The narrative (the threads, what pause waits for, the two phases) lives
 * in docs/design.md, "Loop groups".
 */
#ifndef TERN_GROUP_H
#define TERN_GROUP_H

typedef struct tern_group tern_group; /* opaque */

typedef struct tern_group_options {
    unsigned loops;                /* 1..1024; 0 (default): one per CPU the process may use */
    const tern_loop_options *loop; /* every loop's options; NULL: the defaults */
    const char *name;              /* thread names are "<name>-<i>"; NULL: "tern" */
    bool pin;                      /* pin loop i's thread to the i-th usable CPU (modulo) */
} tern_group_options;

/*
 * tern_group_options_init: fill *opts with the defaults.
 * Requires: opts != NULL.
 * Threads: any thread.
 */
TERN_EXTERN void tern_group_options_init(tern_group_options *opts);

/*
 * tern_group_new: create a group's loops (not yet running). Each loop is
 * made with opts->loop (TERN_LOOP_RCU applies to every loop) and is kept
 * alive by the group until shutdown, so it sleeps until work arrives.
 * Until tern_group_start, the loops are unclaimed: set them up with
 * loop-only calls from the creating thread (listeners, timers).
 * Requires: groupp != NULL; opts may be NULL (defaults).
 * Returns: 0 and *groupp; -EINVAL for loops > 1024, a name longer than 10
 *          bytes, or loop options tern_loop_new refuses; -ENOMEM or
 *          another errno of tern_loop_new. On error nothing is left.
 * Ownership: the caller owns the group and frees it with tern_group_free.
 * Threads: any thread.
 */
TERN_EXTERN int tern_group_new(tern_group **groupp, const tern_group_options *opts);

/*
 * tern_group_start: start one thread per loop (named, pinned if asked);
 * each claims its loop and runs it until the group has shut down.
 * Requires: group != NULL.
 * Returns: 0; -EINVAL if the group was started before; -EAGAIN or
 *          -ENOMEM when a thread cannot be created (then no thread is
 *          left running and no loop ran: the group may be freed).
 * Threads: any thread but a loop thread of this group.
 */
TERN_EXTERN int tern_group_start(tern_group *group);

/*
 * tern_group_wait: wait until every loop of the group has shut down and
 * been destroyed, and join the group's threads.
 * Requires: group != NULL; not called from a loop thread of this group
 *           (aborts: it would wait for itself).
 * Returns: 0; -EINVAL if the group was never started or was waited for.
 * Threads: any thread but the group's own.
 */
TERN_EXTERN int tern_group_wait(tern_group *group);

/*
 * tern_group_free: free a group that has ended (waited for) or never
 * started. A never-started group frees its loops as tern_loop_free does
 * (cancelling what setup started); an ended group's loops are gone already.
 * Requires: group != NULL; not running (started and not waited for: aborts).
 * Ownership: group and its loops are invalid on return.
 * Threads: any thread but the group's own.
 */
TERN_EXTERN void tern_group_free(tern_group *group);

/*
 * tern_group_size: the number of loops.
 * Requires: group != NULL.
 * Threads: any thread.
 */
TERN_EXTERN unsigned tern_group_size(const tern_group *group);

/*
 * tern_group_loop: loop index of the group, or NULL for an index out of
 * range. Valid until the loop is destroyed at the end of shutdown (see
 * tern_group_shutdown); post to it from anywhere with tern_post.
 * Requires: group != NULL.
 * Threads: any thread.
 */
TERN_EXTERN tern_loop *tern_group_loop(const tern_group *group, unsigned index);

/*
 * tern_group_index: the index of the loop the calling thread runs.
 * Requires: group != NULL.
 * Returns: 0..size-1 on a loop thread of this group; -ENOENT elsewhere
 *          (other threads, pool workers, another group's threads).
 * Threads: any thread.
 */
TERN_EXTERN int tern_group_index(const tern_group *group);

/*
 * tern_group_on_shutdown: register fn(loop, arg) as a teardown callback of
 * loop index. When shutdown begins, the loop runs its teardown callbacks
 * in registration order as an ordinary posted function: they may post,
 * submit, start timers, close streams and cancel, and the loop runs until
 * all that work is done.
 * Requires: group != NULL; the calling thread may make loop-only calls on
 *           loop index (its own thread, or any thread before start).
 * Returns: 0; -EINVAL for a NULL fn or an index out of range; -ESHUTDOWN
 *          once that loop's teardown has run; -ENOMEM.
 * Ownership: arg stays the caller's.
 * Threads: loop-only on loop index.
 */
TERN_EXTERN int tern_group_on_shutdown(tern_group *group, unsigned index, tern_fn fn, void *arg);

/*
 * tern_group_shutdown: begin the two-phase shutdown. Phase one: every loop
 * runs its teardown callbacks as ordinary work and stops keeping itself
 * alive; loops go on running until all of them, at one moment, have
 * nothing live and no post pending (work one loop's teardown hands to
 * another is run). Phase two, destroy: each loop is freed on its own
 * thread, draining once; whatever that final drain's callbacks schedule
 * (a post, defer, timer, watcher, job, stream) is a contract violation
 * and aborts with a message naming the rule.
 * Requires: group != NULL.
 * Returns: 0, also when shutdown had begun already (it begins once).
 * Threads: any thread, the group's own loops included. Before start, the
 *          shutdown happens as soon as the group starts.
 */
TERN_EXTERN int tern_group_shutdown(tern_group *group);

/*
 * tern_group_pause: enter exclusive mode. Returns once every other loop of
 * the group has stopped at a turn boundary (none runs a callback until
 * tern_group_resume) and no bounded pool job runs: every bounded job a
 * worker had taken before has returned, and none starts until
 * tern_group_resume (workers hold before their next job; jobs submitted
 * meanwhile, the pauser's too, wait in the queue), also in a pool that
 * starts during the pause. Paused loop threads and held workers are
 * RCU-offline, so synchronize_rcu() inside exclusive mode returns. Long
 * jobs are not paused: they must not write what exclusive mode protects.
 * While another
 * thread holds exclusive mode, a loop thread that calls pause is paused
 * for it first (it takes part, inside its callback), then gets its own
 * turn: two pauses are serialised, never deadlocked.
 * Requires: group != NULL; not called from a bounded pool job (aborts: it
 *           would wait for itself); not inside an RCU read-side critical
 *           section.
 * Returns: 0 in exclusive mode; -ESHUTDOWN once shutdown has begun (the
 *          pause is refused); -EINVAL before the group has started;
 *          -EDEADLK when the calling thread holds exclusive mode already.
 * Threads: any thread; a loop thread of the group or any other.
 */
TERN_EXTERN int tern_group_pause(tern_group *group);

/*
 * tern_group_resume: leave exclusive mode; parked loops and held workers
 * go on.
 * Requires: group != NULL; the calling thread holds exclusive mode
 *           (aborts otherwise).
 * Returns: 0.
 * Threads: the thread that paused.
 */
TERN_EXTERN int tern_group_resume(tern_group *group);

/*
 * What tern_group_on_setup and tern_group_broadcast run on each loop:
 * fn(loop, index, arg) on the loop thread of loop index.
 */
typedef void (*tern_group_fn)(tern_loop *loop, unsigned index, void *arg);

/*
 * tern_group_on_setup: register fn(loop, index, arg) to run on every loop
 * of the group, on its own thread, when the group starts: each loop runs
 * its setup callbacks in registration order before its first turn, and no
 * loop runs a turn until every loop's setup callbacks have returned (work
 * posted to a loop meanwhile waits for its first turn). A setup callback
 * may make loop-only calls on its loop (listen, start timers, submit) and
 * may post to the other loops; it runs even when shutdown was asked before
 * start (teardown then follows it).
 * Requires: group != NULL; before tern_group_start. A setup callback must
 *           not wait for another loop (it has not served yet); it may call
 *           tern_group_pause, which the other loops join from their wait.
 * Returns: 0; -EINVAL for a NULL fn or a group already started; -ENOMEM.
 * Ownership: arg stays the caller's.
 * Threads: the thread that creates and starts the group.
 */
TERN_EXTERN int tern_group_on_setup(tern_group *group, tern_group_fn fn, void *arg);

/*
 * tern_group_broadcast: run fn(loop, index, arg) once on every loop of the
 * group, on its own thread between two turns (after the callbacks of the
 * turn it was in), and then done(loop, arg) once, on the loop that ran fn
 * last, right after fn there: done learns that every loop has run it. To
 * be told on another loop, done posts there. Loop i runs broadcasts in the
 * order they were accepted, each after its setup callbacks.
 * Racing tern_group_shutdown, a broadcast is either refused (-ESHUTDOWN:
 * fn runs nowhere and done is not called) or accepted, and then runs on
 * every loop during shutdown's first phase, which does not end before it
 * has: never lost, never twice.
 * Requires: group != NULL.
 * Returns: 0 when accepted; -EINVAL for a NULL fn or a group not yet
 *          started; -ESHUTDOWN once shutdown has begun; -ENOMEM (nothing
 *          was queued).
 * Ownership: arg stays the caller's until done has run.
 * Threads: any thread, the group's own loops included.
 */
TERN_EXTERN int tern_group_broadcast(tern_group *group, tern_group_fn fn, tern_fn done, void *arg);

/*
 * What a group reports when its shutdown is held up: loop index has run
 * its teardown callbacks waited_ns ago and still has live operations. It
 * runs on that loop's thread between turns, so it may call loop-only
 * functions on loop (tern_loop_walk, tern_loop_print_live, tern_cancel).
 */
typedef void (*tern_group_stall_fn)(tern_loop *loop, unsigned index, uint64_t waited_ns, void *arg);

#define TERN_GROUP_STALL_DEFAULT_NS 5000000000ull /* 5 s */

/*
 * tern_group_on_stall: say what keeps a shutdown from finishing. When a
 * loop of the group still has live operations after_ns after it began its
 * shutdown (a teardown that forgot a referenced timer, a job that never
 * returns), the group calls fn(loop, index, waited_ns, arg) once for that
 * loop; with fn NULL it writes a line naming the group and the loop to
 * stderr, then tern_loop_print_live's list. after_ns 0 never reports.
 * Without this call a group reports to stderr after
 * TERN_GROUP_STALL_DEFAULT_NS. The report does not end the shutdown.
 * Requires: group != NULL.
 * Returns: 0; -EINVAL once the group has started.
 * Ownership: arg stays the caller's.
 * Threads: the thread that starts the group, before tern_group_start.
 */
TERN_EXTERN int tern_group_on_stall(tern_group *group, uint64_t after_ns, tern_group_stall_fn fn,
                                    void *arg);

#endif /* TERN_GROUP_H */
