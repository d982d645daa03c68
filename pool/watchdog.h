/* The watchdog (watchdog.c): started after the bounded class, stopped before it. */
#ifndef TERN_POOL_WATCHDOG_H
#define TERN_POOL_WATCHDOG_H

struct tern__pool;

int tern__watch_start(struct tern__pool *p);
void tern__watch_stop(struct tern__pool *p);

#endif
