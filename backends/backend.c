#include <stddef.h>
#include <string.h>

#include "backend.h"
#include "check.h"

/*
 * Best first: NULL as a backend name picks the head of this list. On
 * Linux epoll leads even when kqueue is built: kqueue there is libkqueue,
 * an emulation over epoll, built to check the kqueue backend. io_uring
 * comes last: in readiness mode it does what epoll does with more work per
 * event, so it is used only when asked for by name.
 */
static const struct tern__backend_ops *const backends[] = {
#ifdef TERN_HAVE_EPOLL
    &tern__backend_epoll,
#endif
#ifdef TERN_HAVE_KQUEUE
    &tern__backend_kqueue,
#endif
#ifdef TERN_HAVE_IOCP
    &tern__backend_iocp,
#else
    &tern__backend_poll,
#endif
#ifdef TERN_HAVE_IO_URING
    &tern__backend_uring,
#endif
};

const char *const tern__backend_names[] = {
#ifdef TERN_HAVE_EPOLL
    "epoll",
#endif
#ifdef TERN_HAVE_KQUEUE
    "kqueue",
#endif
#ifdef TERN_HAVE_IOCP
    "iocp",
#else
    "poll",
#endif
#ifdef TERN_HAVE_IO_URING
    "io_uring",
#endif
    NULL,
};

const struct tern__backend_ops *tern__backend_find(const char *name)
{
    if (name == NULL)
        return backends[0];
    for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++)
        if (strcmp(backends[i]->name, name) == 0)
            return backends[i];
    return NULL;
}

#ifndef TERN_HAVE_IO_URING
/* No backend here sets TERN__DO_FILE, so nothing asks for these. */
int tern__file_call(struct tern__file_op *op)
{
    (void)op;
    TERN_UNREACHABLE();
}

void tern__file_stat(const struct tern__file_op *op, struct stat *st)
{
    (void)op, (void)st;
    TERN_UNREACHABLE();
}
#endif

#ifndef TERN_HAVE_KQUEUE
bool tern__kqueue_user_wake(bool on)
{
    (void)on;
    return false;
}
#endif
