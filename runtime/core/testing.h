/*
 * Internal seams for tern's own tests. Defined in runtime/loop/seams.c and
 * pool/seams.c, which build into the tests' own static library (tern-seams
 * in meson.build), never into the installed libtern.a or libtern.so.
 */
#ifndef TERN_TESTING_H
#define TERN_TESTING_H

#include "tern.h"
#include "fault.h"
/* The pool's seams (tern__pool_running, tern__test_pool_sleepers,
 * tern__test_pool_wake_checks, the pause gate's windows) are declared
 * there, once: pool/seams.c, below runtime/, defines them against it. */
#include "pool.h"

/* The timeout (ns, -1 forever) step 4 of the last turn passed to the
 * backend, as computed in step 3. */
int64_t tern__loop_last_wait(const tern_loop *loop);

/* Which step of the turn (1..5) the loop is in now; 0 outside a turn. */
int tern__loop_step(const tern_loop *loop);

/* The name of the backend a loop runs ("epoll", "poll"). */
const char *tern__loop_backend_name(const tern_loop *loop);

/* The source a loop's file watches use: "inotify", "vnode" (kqueue's
 * EVFILT_VNODE) or "stat" (polling). Defined in runtime/kinds/watch.c. */
const char *tern__watch_source(const tern_loop *loop);

/* Loops created from now on poll their file watches with stat where the
 * build has inotify (platform.h, tern__watch_stat_forced). */
void tern__set_watch_stat(bool on);

/* Backends built into this library, NULL-terminated ("epoll", "poll"). */
extern const char *const tern__backend_names[];

struct addrinfo;
typedef int (*tern__getaddrinfo_fn)(const char *host, const char *service,
                                    const struct addrinfo *hints, struct addrinfo **res);
/* Replace getaddrinfo for tern_resolve (NULL restores the real one), so a
 * test can stall lookups. Set it before submitting lookups. */
void tern__set_getaddrinfo(tern__getaddrinfo_fn fn);
/* The lookup tern_resolve calls: NULL means getaddrinfo (runtime/net/resolve.c). */
extern _Atomic(tern__getaddrinfo_fn) tern__resolve_getaddrinfo;
struct sockaddr;
typedef int (*tern__getnameinfo_fn)(const struct sockaddr *addr, unsigned addrlen, char *host,
                                    unsigned hostlen, char *serv, unsigned servlen, int flags);
/* Replace getnameinfo for tern_resolve_addr (NULL restores the real one),
 * so a test can fail or stall reverse lookups. */
void tern__set_getnameinfo(tern__getnameinfo_fn fn);
/* The lookup tern_resolve_addr calls: NULL means getnameinfo. */
extern _Atomic(tern__getnameinfo_fn) tern__resolve_getnameinfo;

/*
 * Make the calling thread the loop's owner between turns, as a host that
 * pumps tern_loop_run_once holds it inside a callback: tern_cancel then
 * resolves at once instead of being queued. Release before running or
 * freeing the loop. Aborts if another thread holds the loop.
 */
void tern__test_claim(tern_loop *loop);
void tern__test_release(tern_loop *loop);

/*
 * tern_cancel as the loop's own thread calls it (resolved at once, with
 * its -ENOENT for an unknown id), from a test thread that holds the loop
 * between turns or from inside the loop's callbacks.
 */
int tern__test_cancel_now(tern_loop *loop, tern_id id);

/*
 * Deadline-heap and timer-id seams. tern__test_heap_seq sets the heap's
 * next arming sequence (forward only: past every entry's), so a test can
 * reach the renumbering at 2^32 - 1. tern__test_timer_gen moves a live
 * timer's generation forward (below 2^30) and returns its new id.
 */
void tern__test_heap_seq(tern_loop *loop, uint32_t next);
tern_id tern__test_timer_gen(tern_loop *loop, tern_id id, uint32_t gen);

/*
 * A hook a group calls when phase one of its shutdown ends, on the member
 * that ends it, with the group's lock held: after every member can see the
 * end, before that member wakes the others (runtime/group/group.c, try_finish).
 * A test widens that window with it. Set it before the group starts.
 */
typedef void (*tern__group_finish_fn)(tern_group *group);
extern _Atomic(tern__group_finish_fn) tern__group_finishing;

/*
 * Whether the background reaper's thread exists (runtime/process/process_reap.c):
 * set when a child is handed to it, cleared, under its lock, as the
 * thread ends with nothing left to wait for.
 */
bool tern__test_reaper_running(void);

/*
 * A hook a pool thread calls inside a job's hand-back, after the push and
 * the wake, while it still pins the loop (runtime/jobs/job.c): a test holds a
 * worker there to see tern_loop_free wait for it. Set it before the pool
 * runs the job; NULL (the default) costs one relaxed load a job.
 */
typedef void (*tern__handback_pushed_hook)(tern_loop *loop);
extern _Atomic(tern__handback_pushed_hook) tern__handback_pushed;

/*
 * Give back the calling thread's block of post records, so its next
 * tern_post allocates a fresh one: an input replayed under an armed
 * allocation fault then meets the same allocations as the first time.
 */
void tern__test_inbound_fresh_block(void);

/*
 * The process's post-record blocks: how many are on the spare list and how
 * many are in slabs mapped now (the rest are out: carved from, or holding
 * posts the loops have not run); the list's bound now, where it starts
 * and how far it may rise; blocks to a slab.
 */
struct tern__test_blocks {
    unsigned spare, mapped, bound, spare_max, spare_ceiling, slab;
};
void tern__test_inbound_blocks(struct tern__test_blocks *b);

#endif
