/* The lookup cap (lookup.c): run one lookup under the cap, then any waiting. */
#ifndef TERN_POOL_LOOKUP_H
#define TERN_POOL_LOOKUP_H

struct tern__pool;
struct tern__work;

void tern__lookup_run(struct tern__pool *p, struct tern__work *job, unsigned worker_index);
int tern__lookup_init(struct tern__pool *p);
void tern__lookup_destroy(struct tern__pool *p);
void tern__lookup_drain(struct tern__pool *p, void (*fn)(struct tern__work *job));

#endif
