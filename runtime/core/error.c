/*
 * Status values: negative errno, plus tern's own codes for resolver
 * failures. One list below generates both tern_strerror() and
 * tern_err_name(), so a name and its sentence can never drift apart.
 * ENOTSUP and EOPNOTSUPP are one value on Linux and the BSDs (the first
 * entry names it) and two on Windows, where tern reports both.
 */
#include <stddef.h>

#include "errno_os.h"
#include "tern.h"

#define TERN_ERRORS(X)                                                 \
    X(EPERM, "operation not permitted")                                \
    X(ENOENT, "no such operation (unknown, finished or stale id)")     \
    X(EINTR, "interrupted system call")                                \
    X(EIO, "i/o error")                                                \
    X(EBADF, "bad file descriptor")                                    \
    X(EAGAIN, "resource temporarily unavailable (refused: try again)") \
    X(ENOMEM, "not enough memory")                                     \
    X(EACCES, "permission denied")                                     \
    X(EFAULT, "bad address")                                           \
    X(EBUSY, "resource busy")                                          \
    X(EEXIST, "already exists (already registered)")                   \
    X(EINVAL, "invalid argument")                                      \
    X(ENFILE, "file table overflow")                                   \
    X(EMFILE, "too many open files")                                   \
    X(ENOSPC, "no space left on device")                               \
    X(EPIPE, "broken pipe")                                            \
    X(ERANGE, "result out of range")                                   \
    X(ENOSYS, "system call unavailable")                               \
    X(ENOTSUP, "operation not supported")                              \
    X(EOPNOTSUPP, "operation not supported")                           \
    X(ENOTSOCK, "not a socket")                                        \
    X(EMSGSIZE, "message too long")                                    \
    X(EPROTONOSUPPORT, "protocol not supported")                       \
    X(EAFNOSUPPORT, "address family not supported")                    \
    X(EADDRINUSE, "address already in use")                            \
    X(EADDRNOTAVAIL, "address not available")                          \
    X(ENETDOWN, "network is down")                                     \
    X(ENETUNREACH, "network is unreachable")                           \
    X(ECONNABORTED, "connection aborted")                              \
    X(ECONNRESET, "connection reset by peer")                          \
    X(ENOBUFS, "no buffer space available")                            \
    X(EISCONN, "socket is already connected")                          \
    X(ENOTCONN, "socket is not connected")                             \
    X(ESHUTDOWN, "loop or pool is shutting down")                      \
    X(ETIMEDOUT, "timed out")                                          \
    X(ECONNREFUSED, "connection refused")                              \
    X(EHOSTUNREACH, "host is unreachable")                             \
    X(EALREADY, "operation already in progress")                       \
    X(EINPROGRESS, "operation in progress")                            \
    X(ECANCELED, "operation cancelled")                                \
    X(EOVERFLOW, "value too large")                                    \
    X(ENAMETOOLONG, "file name too long")                              \
    X(EFBIG, "file too large")                                         \
    X(EISDIR, "is a directory")                                        \
    X(ENOTDIR, "not a directory")                                      \
    X(ENOTEMPTY, "directory not empty")                                \
    X(EXDEV, "cross-device link")                                      \
    X(EROFS, "read-only file system")                                  \
    X(ELOOP, "too many levels of symbolic links")                      \
    X(ESPIPE, "illegal seek")                                          \
    X(EDQUOT, "disk quota exceeded")

#define TERN_EAI_ERRORS(X)                                    \
    X(NONAME, "host or service not known")                    \
    X(AGAIN, "temporary failure in name resolution")          \
    X(FAIL, "non-recoverable failure in name resolution")     \
    X(FAMILY, "address family not supported by the resolver") \
    X(SERVICE, "service not available for the socket type")   \
    X(NODATA, "host has no address")                          \
    X(OTHER, "name resolution failed")

struct entry {
    int code;
    const char *name;
    const char *text;
};

#define ERRNO_ENTRY(e, text) {-(e), #e, text},
#define EAI_ENTRY(e, text) {TERN_EAI_##e, "EAI_" #e, text},

static const struct entry entries[] = {{0, "OK", "success"},
                                       TERN_ERRORS(ERRNO_ENTRY) TERN_EAI_ERRORS(EAI_ENTRY)};

static const struct entry *find(int err)
{
    if (err > 0)
        err = -err;
    for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++)
        if (entries[i].code == err)
            return &entries[i];
    return NULL;
}

const char *tern_strerror(int err)
{
    const struct entry *e = find(err);
    return e ? e->text : "unknown error";
}

const char *tern_err_name(int err)
{
    const struct entry *e = find(err);
    return e ? e->name : "UNKNOWN";
}
