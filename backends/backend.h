/*
 * The backend interface. A backend turns kernel readiness into a neutral
 * array of {fd, events}; it never calls user code and never touches the
 * loop's containers — the core dispatches.
 *
 * Events use the public bits (TERN_READABLE, TERN_WRITABLE, TERN_HANGUP,
 * TERN_ERROR). modify() sees both the old and the new interest so each
 * backend can pick add, change or delete without keeping its own copy:
 * old == 0 means add, new == 0 means delete.
 */
#ifndef TERN_BACKEND_H
#define TERN_BACKEND_H

#include <stdint.h>

struct tern__fired {
    int fd;
    unsigned events;
};

struct tern__backend;

struct tern__backend_ops {
    const char *name;
    int (*init)(struct tern__backend *b);  /* 0 or -errno */
    void (*close)(struct tern__backend *b);
    int (*modify)(struct tern__backend *b, int fd, unsigned old_events, unsigned new_events);
    /*
     * Wait up to timeout_ns (-1: forever, 0: poll) and fill out[0..max).
     * Returns the number of entries, 0 on timeout or EINTR, or -errno.
     * Timeouts are rounded up, never down, so a deadline is never missed.
     */
    int (*wait)(struct tern__backend *b, int64_t timeout_ns, struct tern__fired *out, int max);
};

struct tern__backend {
    const struct tern__backend_ops *ops;
    int fd;      /* the descriptor a host loop can watch */
    void *state; /* backend-private */
};

extern const struct tern__backend_ops tern__backend_poll;
#ifdef TERN_HAVE_EPOLL
extern const struct tern__backend_ops tern__backend_epoll;
#endif

/* Look a backend up by name; NULL picks the best built one. */
const struct tern__backend_ops *tern__backend_find(const char *name);

#endif
