/* The bounded workers (worker.c): take, run, spin, park, hold. */
#ifndef TERN_POOL_WORKER_H
#define TERN_POOL_WORKER_H

#include <stdatomic.h>
#include <stdint.h>

struct tern__pool;

/* Start the bounded workers (and the queue they take from); stop them. */
int tern__bounded_start(struct tern__pool *p);
void tern__bounded_stop(struct tern__pool *p);

/*
 * Start one overflow worker unless `max` are alive already or the pool
 * exits; 0, -EAGAIN (at max) or pthread_create's error. The watchdog's
 * thread only.
 */
int tern__bounded_overflow_start(struct tern__pool *p, unsigned max);

/*
 * The watchdog's settings (tern_pool_watch), process-wide, read when
 * used: by the watchdog, and by an overflow worker for its idle bound
 * (so they are defined here, with their lowest reader); set by
 * tern_pool_watch_set (env.c) at any time.
 */
struct tern__watch_settings {
    _Atomic uint64_t stall_ns, overflow_idle_ns;
    _Atomic unsigned overflow_max;
};
extern __attribute__((visibility("hidden"))) struct tern__watch_settings tern__pool_watch_now;

/*
 * The pause gate (gate.c): while any hold is taken, bounded workers stop
 * before their next job. A worker reads the count once per job (relaxed)
 * and, when it is non-zero, holds until every hold is given back (or the
 * pool exits).
 */
extern __attribute__((visibility("hidden"))) _Atomic unsigned tern__pool_holds;

/*
 * Hand-back slots. Every bounded worker (fixed or overflow) has one word
 * of its own, reached through this thread-local pointer (NULL on every
 * other thread: a long thread, a shutdown's), where its hand-back names
 * what it must keep alive until it returns: a release store of the
 * object before the hand-back's push, and of NULL after its last touch.
 * Plain stores on the worker's own line, where a shared count would move
 * a line between workers twice per job. tern__pool_handing says whether
 * some worker's slot names target now (acquire loads): a client that has
 * taken every header handed back to target (each push acquired) and then
 * finds target named nowhere knows no worker will touch it again.
 */
extern _Thread_local _Atomic(const void *) *tern__pool_hand_slot
    __attribute__((tls_model("initial-exec")));
bool tern__pool_handing(const void *target);

#endif
