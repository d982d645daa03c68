/*
 * Windows errors as tern's statuses (error_win.c): what a Windows system
 * call or Winsock call reports through GetLastError or WSAGetLastError,
 * turned into the negative errno the contract returns (SPEC: no errno side
 * channel, one status space on every platform). Windows only.
 *
 * The list is one X-macro (the table and its test read the same list):
 * X(windows code, the errno it is reported as). Winsock's resolver codes
 * (WSAHOST_NOT_FOUND ...) are not here: getaddrinfo returns them as its
 * EAI_* values, which the resolver turns into TERN_EAI_* statuses by name
 * (runtime/net/resolve.c) as on POSIX. A code not listed, and 0 (a call
 * that failed without saying why), is TERN__WIN_DEFAULT: a failure stays
 * a failure, and -EIO is the one status that claims nothing more.
 *
 * mingw-w64's errno.h lacks two names tern reports; errno_os.h gives them
 * numbers in a range no C library on Windows uses, so every file that
 * names them takes them from there (this header includes it).
 */
#ifndef TERN_ERROR_WIN_H
#define TERN_ERROR_WIN_H

#include "errno_os.h"

#define TERN__WIN_DEFAULT (-EIO)

/* Numbers, not winerror.h's names, so the list builds without windows.h
 * and a reader can check each against Microsoft's tables. */
#define TERN__WIN_SYSTEM_ERRORS(X)                                         \
    X(1 /* ERROR_INVALID_FUNCTION */, EINVAL)                              \
    X(2 /* ERROR_FILE_NOT_FOUND */, ENOENT)                                \
    X(3 /* ERROR_PATH_NOT_FOUND */, ENOENT)                                \
    X(4 /* ERROR_TOO_MANY_OPEN_FILES */, EMFILE)                           \
    X(5 /* ERROR_ACCESS_DENIED */, EACCES)                                 \
    X(6 /* ERROR_INVALID_HANDLE */, EBADF)                                 \
    X(8 /* ERROR_NOT_ENOUGH_MEMORY */, ENOMEM)                             \
    X(14 /* ERROR_OUTOFMEMORY */, ENOMEM)                                  \
    X(15 /* ERROR_INVALID_DRIVE */, ENOENT)                                \
    X(17 /* ERROR_NOT_SAME_DEVICE */, EXDEV)                               \
    X(19 /* ERROR_WRITE_PROTECT */, EROFS)                                 \
    X(32 /* ERROR_SHARING_VIOLATION */, EBUSY)                             \
    X(33 /* ERROR_LOCK_VIOLATION */, EBUSY)                                \
    X(39 /* ERROR_HANDLE_DISK_FULL */, ENOSPC)                             \
    X(50 /* ERROR_NOT_SUPPORTED */, ENOTSUP)                               \
    X(64 /* ERROR_NETNAME_DELETED */, ECONNRESET)                          \
    X(80 /* ERROR_FILE_EXISTS */, EEXIST)                                  \
    X(87 /* ERROR_INVALID_PARAMETER */, EINVAL)                            \
    X(109 /* ERROR_BROKEN_PIPE */, EPIPE)                                  \
    X(112 /* ERROR_DISK_FULL */, ENOSPC)                                   \
    X(120 /* ERROR_CALL_NOT_IMPLEMENTED */, ENOSYS)                        \
    X(121 /* ERROR_SEM_TIMEOUT */, ETIMEDOUT)                              \
    X(122 /* ERROR_INSUFFICIENT_BUFFER */, ENOBUFS)                        \
    X(123 /* ERROR_INVALID_NAME */, EINVAL)                                \
    X(131 /* ERROR_NEGATIVE_SEEK */, EINVAL)                               \
    X(132 /* ERROR_SEEK_ON_DEVICE */, ESPIPE)                              \
    X(145 /* ERROR_DIR_NOT_EMPTY */, ENOTEMPTY)                            \
    X(161 /* ERROR_BAD_PATHNAME */, ENOENT)                                \
    X(170 /* ERROR_BUSY */, EBUSY)                                         \
    X(183 /* ERROR_ALREADY_EXISTS */, EEXIST)                              \
    X(206 /* ERROR_FILENAME_EXCED_RANGE */, ENAMETOOLONG)                  \
    X(223 /* ERROR_FILE_TOO_LARGE */, EFBIG)                               \
    X(231 /* ERROR_PIPE_BUSY */, EBUSY)                                    \
    X(232 /* ERROR_NO_DATA (the pipe is being closed) */, EPIPE)           \
    X(233 /* ERROR_PIPE_NOT_CONNECTED */, EPIPE)                           \
    X(234 /* ERROR_MORE_DATA */, EMSGSIZE)                                 \
    X(258 /* WAIT_TIMEOUT */, ETIMEDOUT)                                   \
    X(267 /* ERROR_DIRECTORY */, ENOTDIR)                                  \
    X(534 /* ERROR_ARITHMETIC_OVERFLOW */, EOVERFLOW)                      \
    X(995 /* ERROR_OPERATION_ABORTED, WSA_OPERATION_ABORTED */, ECANCELED) \
    X(997 /* ERROR_IO_PENDING, WSA_IO_PENDING */, EINPROGRESS)             \
    X(998 /* ERROR_NOACCESS */, EFAULT)                                    \
    X(1004 /* ERROR_INVALID_FLAGS */, EINVAL)                              \
    X(1225 /* ERROR_CONNECTION_REFUSED */, ECONNREFUSED)                   \
    X(1227 /* ERROR_ADDRESS_ALREADY_ASSOCIATED */, EADDRINUSE)             \
    X(1231 /* ERROR_NETWORK_UNREACHABLE */, ENETUNREACH)                   \
    X(1232 /* ERROR_HOST_UNREACHABLE */, EHOSTUNREACH)                     \
    X(1234 /* ERROR_PORT_UNREACHABLE */, ECONNREFUSED)                     \
    X(1236 /* ERROR_CONNECTION_ABORTED */, ECONNABORTED)                   \
    X(1314 /* ERROR_PRIVILEGE_NOT_HELD */, EPERM)                          \
    X(1460 /* ERROR_TIMEOUT */, ETIMEDOUT)                                 \
    X(1816 /* ERROR_NOT_ENOUGH_QUOTA */, ENOMEM)                           \
    X(1921 /* ERROR_CANT_RESOLVE_FILENAME */, ELOOP)                       \
    X(2250 /* ERROR_NOT_CONNECTED */, ENOTCONN)

/* Winsock's own codes (WSAE*). */
#define TERN__WIN_SOCKET_ERRORS(X)                                           \
    X(10004 /* WSAEINTR */, EINTR)                                           \
    X(10009 /* WSAEBADF */, EBADF)                                           \
    X(10013 /* WSAEACCES */, EACCES)                                         \
    X(10014 /* WSAEFAULT */, EFAULT)                                         \
    X(10022 /* WSAEINVAL */, EINVAL)                                         \
    X(10024 /* WSAEMFILE */, EMFILE)                                         \
    X(10035 /* WSAEWOULDBLOCK */, EAGAIN)                                    \
    X(10036 /* WSAEINPROGRESS */, EINPROGRESS)                               \
    X(10037 /* WSAEALREADY */, EALREADY)                                     \
    X(10038 /* WSAENOTSOCK */, ENOTSOCK)                                     \
    X(10039 /* WSAEDESTADDRREQ */, EINVAL)                                   \
    X(10040 /* WSAEMSGSIZE */, EMSGSIZE)                                     \
    X(10041 /* WSAEPROTOTYPE */, EPROTONOSUPPORT)                            \
    X(10042 /* WSAENOPROTOOPT */, ENOTSUP)                                   \
    X(10043 /* WSAEPROTONOSUPPORT */, EPROTONOSUPPORT)                       \
    X(10044 /* WSAESOCKTNOSUPPORT */, ENOTSUP)                               \
    X(10045 /* WSAEOPNOTSUPP */, ENOTSUP)                                    \
    X(10046 /* WSAEPFNOSUPPORT */, EAFNOSUPPORT)                             \
    X(10047 /* WSAEAFNOSUPPORT */, EAFNOSUPPORT)                             \
    X(10048 /* WSAEADDRINUSE */, EADDRINUSE)                                 \
    X(10049 /* WSAEADDRNOTAVAIL */, EADDRNOTAVAIL)                           \
    X(10050 /* WSAENETDOWN */, ENETDOWN)                                     \
    X(10051 /* WSAENETUNREACH */, ENETUNREACH)                               \
    X(10052 /* WSAENETRESET */, ECONNRESET)                                  \
    X(10053 /* WSAECONNABORTED */, ECONNABORTED)                             \
    X(10054 /* WSAECONNRESET */, ECONNRESET)                                 \
    X(10055 /* WSAENOBUFS */, ENOBUFS)                                       \
    X(10056 /* WSAEISCONN */, EISCONN)                                       \
    X(10057 /* WSAENOTCONN */, ENOTCONN)                                     \
    X(10058 /* WSAESHUTDOWN: a send after shutdown, POSIX's EPIPE */, EPIPE) \
    X(10060 /* WSAETIMEDOUT */, ETIMEDOUT)                                   \
    X(10061 /* WSAECONNREFUSED */, ECONNREFUSED)                             \
    X(10062 /* WSAELOOP */, ELOOP)                                           \
    X(10063 /* WSAENAMETOOLONG */, ENAMETOOLONG)                             \
    X(10064 /* WSAEHOSTDOWN */, EHOSTUNREACH)                                \
    X(10065 /* WSAEHOSTUNREACH */, EHOSTUNREACH)                             \
    X(10066 /* WSAENOTEMPTY */, ENOTEMPTY)                                   \
    X(10067 /* WSAEPROCLIM */, EAGAIN)                                       \
    X(10069 /* WSAEDQUOT */, EDQUOT)                                         \
    X(10101 /* WSAEDISCON */, EPIPE)

/*
 * The status for `code`, a GetLastError or WSAGetLastError value: always
 * negative (TERN__WIN_DEFAULT for a code not listed, and for 0).
 * Threads: any.
 */
int tern__error_win(unsigned long code);

#endif
