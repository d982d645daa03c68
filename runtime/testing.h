/*
 * Internal seams for tern's own tests (link the static library).
 * Not part of the public API; not exported from the shared library.
 */
#ifndef TERN_TESTING_H
#define TERN_TESTING_H

#include "tern.h"
#include "fault.h"

/* The timeout (ns, -1 forever) step 4 of the last turn passed to the
 * backend, as computed in step 3. */
int64_t tern__loop_last_wait(const tern_loop *loop);

/* Which step of the turn (1..5) the loop is in now; 0 outside a turn. */
int tern__loop_step(const tern_loop *loop);

/* The name of the backend a loop runs ("epoll", "poll"). */
const char *tern__loop_backend_name(const tern_loop *loop);

/* Backends built into this library, NULL-terminated ("epoll", "poll"). */
extern const char *const tern__backend_names[];

struct addrinfo;
typedef int (*tern__getaddrinfo_fn)(const char *host, const char *service,
                                    const struct addrinfo *hints, struct addrinfo **res);
/* Replace getaddrinfo for tern_resolve (NULL restores the real one), so a
 * test can stall lookups. Set it before submitting lookups. */
void tern__set_getaddrinfo(tern__getaddrinfo_fn fn);

/* Whether the process-wide pool is running now. */
bool tern__pool_running(void);

#endif
