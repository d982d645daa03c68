/* The long class (long.c): a thread per job, kept parked for the next. */
#ifndef TERN_POOL_LONG_H
#define TERN_POOL_LONG_H

#include "tern.h"

struct tern__pool;
struct tern__work;

int tern__long_init(struct tern__pool *p);
int tern__long_submit(struct tern__pool *p, struct tern__work *job, tern_refusal *cause);
/* Tell every long worker to exit and join them (no job may be running). */
void tern__long_stop(struct tern__pool *p);
void tern__long_destroy(struct tern__pool *p);

#endif
