/* Requests of several steps (steps.c): one step per pass through a worker. */
#ifndef TERN_POOL_STEPS_H
#define TERN_POOL_STEPS_H

#include <stdbool.h>

struct tern__pool;
struct tern__work;

/*
 * A worker found and claimed (tern__queue_claim) a TERN__WORK_STEPS job:
 * run one step. True, as for tern__work_run, when the request ended and
 * its loop had to be woken.
 */
bool tern__steps_run(struct tern__pool *p, struct tern__work *job, unsigned worker_index);

#endif
