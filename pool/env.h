/*
 * The configuration (env.c): defaults built in, with the environment's
 * TERN_POOL_* variables applied. A bad variable makes every start fail:
 * tern__pool_env_check returns -EINVAL and says why on stderr, once.
 */
#ifndef TERN_POOL_ENV_H
#define TERN_POOL_ENV_H

#include "tern.h"

/* 0 or -EINVAL: whether cfg is a valid pool configuration. Any thread. */
int tern__pool_config_check(const tern_pool_config *cfg);
void tern__pool_config_defaults(tern_pool_config *cfg);
void tern__pool_env_apply(tern_pool_config *cfg);
int tern__pool_env_check(void);
/* Load the environment's watchdog settings once; before any read of them (worker.h). */
void tern__pool_watch_load(void);

#endif
