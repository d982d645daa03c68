/*
 * error_test: the Windows error table (backends/error_win.c) as a plain
 * Windows program. The table is written with numbers; this test names
 * every code by the Windows headers' own names, so a wrong number fails
 * here. Then: codes not listed, and 0, are the documented default; no
 * code becomes a success; the two errnos mingw-w64 lacks do not collide
 * with one it has. Closes with "N passed, N failed"; exit 0 when all pass.
 *
 * Build: x86_64-w64-mingw32-gcc-posix -std=c11 -Ibackends
 *        test/win/error_test.c backends/error_win.c -lws2_32
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <winsock2.h>
#include <windows.h>

#include "error_win.h"

static unsigned passed, failed;

static void check_at(int ok, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (!ok) {
        printf("FAIL: ");
        vprintf(fmt, ap);
        printf(" (line %d)\n", line);
    }
    va_end(ap);
    ok ? passed++ : failed++;
}

#define CHECK(cond, ...) check_at((cond) != 0, __LINE__, __VA_ARGS__)

static const struct {
    unsigned long code;
    const char *name;
    int status;
} expected[] = {
#define E(code, err)        \
    {                       \
        code, #code, -(err) \
    }
    E(ERROR_INVALID_FUNCTION, EINVAL),
    E(ERROR_FILE_NOT_FOUND, ENOENT),
    E(ERROR_PATH_NOT_FOUND, ENOENT),
    E(ERROR_TOO_MANY_OPEN_FILES, EMFILE),
    E(ERROR_ACCESS_DENIED, EACCES),
    E(ERROR_INVALID_HANDLE, EBADF),
    E(ERROR_NOT_ENOUGH_MEMORY, ENOMEM),
    E(ERROR_OUTOFMEMORY, ENOMEM),
    E(ERROR_INVALID_DRIVE, ENOENT),
    E(ERROR_NOT_SAME_DEVICE, EXDEV),
    E(ERROR_WRITE_PROTECT, EROFS),
    E(ERROR_SHARING_VIOLATION, EBUSY),
    E(ERROR_LOCK_VIOLATION, EBUSY),
    E(ERROR_HANDLE_DISK_FULL, ENOSPC),
    E(ERROR_NOT_SUPPORTED, ENOTSUP),
    E(ERROR_NETNAME_DELETED, ECONNRESET),
    E(ERROR_FILE_EXISTS, EEXIST),
    E(ERROR_INVALID_PARAMETER, EINVAL),
    E(ERROR_BROKEN_PIPE, EPIPE),
    E(ERROR_DISK_FULL, ENOSPC),
    E(ERROR_CALL_NOT_IMPLEMENTED, ENOSYS),
    E(ERROR_SEM_TIMEOUT, ETIMEDOUT),
    E(ERROR_INSUFFICIENT_BUFFER, ENOBUFS),
    E(ERROR_INVALID_NAME, EINVAL),
    E(ERROR_NEGATIVE_SEEK, EINVAL),
    E(ERROR_SEEK_ON_DEVICE, ESPIPE),
    E(ERROR_DIR_NOT_EMPTY, ENOTEMPTY),
    E(ERROR_BAD_PATHNAME, ENOENT),
    E(ERROR_BUSY, EBUSY),
    E(ERROR_ALREADY_EXISTS, EEXIST),
    E(ERROR_FILENAME_EXCED_RANGE, ENAMETOOLONG),
    E(ERROR_FILE_TOO_LARGE, EFBIG),
    E(ERROR_PIPE_BUSY, EBUSY),
    E(ERROR_NO_DATA, EPIPE),
    E(ERROR_PIPE_NOT_CONNECTED, EPIPE),
    E(ERROR_MORE_DATA, EMSGSIZE),
    E(WAIT_TIMEOUT, ETIMEDOUT),
    E(ERROR_DIRECTORY, ENOTDIR),
    E(ERROR_ARITHMETIC_OVERFLOW, EOVERFLOW),
    E(ERROR_OPERATION_ABORTED, ECANCELED),
    E(WSA_OPERATION_ABORTED, ECANCELED),
    E(ERROR_IO_PENDING, EINPROGRESS),
    E(WSA_IO_PENDING, EINPROGRESS),
    E(ERROR_NOACCESS, EFAULT),
    E(ERROR_INVALID_FLAGS, EINVAL),
    E(ERROR_CONNECTION_REFUSED, ECONNREFUSED),
    E(ERROR_ADDRESS_ALREADY_ASSOCIATED, EADDRINUSE),
    E(ERROR_NETWORK_UNREACHABLE, ENETUNREACH),
    E(ERROR_HOST_UNREACHABLE, EHOSTUNREACH),
    E(ERROR_PORT_UNREACHABLE, ECONNREFUSED),
    E(ERROR_CONNECTION_ABORTED, ECONNABORTED),
    E(ERROR_PRIVILEGE_NOT_HELD, EPERM),
    E(ERROR_TIMEOUT, ETIMEDOUT),
    E(ERROR_NOT_ENOUGH_QUOTA, ENOMEM),
    E(ERROR_CANT_RESOLVE_FILENAME, ELOOP),
    E(ERROR_NOT_CONNECTED, ENOTCONN),
    E(WSAEINTR, EINTR),
    E(WSAEBADF, EBADF),
    E(WSAEACCES, EACCES),
    E(WSAEFAULT, EFAULT),
    E(WSAEINVAL, EINVAL),
    E(WSAEMFILE, EMFILE),
    E(WSAEWOULDBLOCK, EAGAIN),
    E(WSAEINPROGRESS, EINPROGRESS),
    E(WSAEALREADY, EALREADY),
    E(WSAENOTSOCK, ENOTSOCK),
    E(WSAEDESTADDRREQ, EINVAL),
    E(WSAEMSGSIZE, EMSGSIZE),
    E(WSAEPROTOTYPE, EPROTONOSUPPORT),
    E(WSAENOPROTOOPT, ENOTSUP),
    E(WSAEPROTONOSUPPORT, EPROTONOSUPPORT),
    E(WSAESOCKTNOSUPPORT, ENOTSUP),
    E(WSAEOPNOTSUPP, ENOTSUP),
    E(WSAEPFNOSUPPORT, EAFNOSUPPORT),
    E(WSAEAFNOSUPPORT, EAFNOSUPPORT),
    E(WSAEADDRINUSE, EADDRINUSE),
    E(WSAEADDRNOTAVAIL, EADDRNOTAVAIL),
    E(WSAENETDOWN, ENETDOWN),
    E(WSAENETUNREACH, ENETUNREACH),
    E(WSAENETRESET, ECONNRESET),
    E(WSAECONNABORTED, ECONNABORTED),
    E(WSAECONNRESET, ECONNRESET),
    E(WSAENOBUFS, ENOBUFS),
    E(WSAEISCONN, EISCONN),
    E(WSAENOTCONN, ENOTCONN),
    E(WSAESHUTDOWN, EPIPE),
    E(WSAETIMEDOUT, ETIMEDOUT),
    E(WSAECONNREFUSED, ECONNREFUSED),
    E(WSAELOOP, ELOOP),
    E(WSAENAMETOOLONG, ENAMETOOLONG),
    E(WSAEHOSTDOWN, EHOSTUNREACH),
    E(WSAEHOSTUNREACH, EHOSTUNREACH),
    E(WSAENOTEMPTY, ENOTEMPTY),
    E(WSAEPROCLIM, EAGAIN),
    E(WSAEDQUOT, EDQUOT),
    E(WSAEDISCON, EPIPE),
#undef E
};

#define N_EXPECTED (sizeof(expected) / sizeof(expected[0]))

/* Every entry of the table's own list must be one the test names. */
static int named(unsigned long code, int status)
{
    for (size_t i = 0; i < N_EXPECTED; i++)
        if (expected[i].code == code)
            return expected[i].status == status;
    return 0;
}

int main(void)
{
    for (size_t i = 0; i < N_EXPECTED; i++) {
        int got = tern__error_win(expected[i].code);
        CHECK(got == expected[i].status, "%s (%lu) is %d, not %d", expected[i].name,
              expected[i].code, got, expected[i].status);
    }
    unsigned listed = 0;
#define LISTED(c, e)                                                                               \
    listed++;                                                                                      \
    CHECK(named(c, -(e)), "the list's entry %lu -> %d is one this test names", (unsigned long)(c), \
          -(e));
    TERN__WIN_SYSTEM_ERRORS(LISTED)
    TERN__WIN_SOCKET_ERRORS(LISTED)
#undef LISTED
    /* The WSA_* aliases of system codes are in the test, not the list. */
    CHECK(listed + 2 == N_EXPECTED, "the list has %u entries, the test %u less its 2 aliases",
          listed, (unsigned)N_EXPECTED);

    /* Not listed: the resolver's codes (resolve.c has them), ones with no
     * errno, the Winsock base, 0 and the largest code. */
    static const unsigned long unknown[] = {0,
                                            ERROR_ARENA_TRASHED,
                                            ERROR_HANDLE_EOF,
                                            WSABASEERR,
                                            WSAHOST_NOT_FOUND,
                                            WSANOTINITIALISED,
                                            0x7fffffffUL,
                                            0xffffffffUL};
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++)
        CHECK(tern__error_win(unknown[i]) == TERN__WIN_DEFAULT && TERN__WIN_DEFAULT == -EIO,
              "code %lu is the default, -EIO", unknown[i]);
    unsigned nonneg = 0;
    for (unsigned long c = 0; c < 20000; c++)
        nonneg += tern__error_win(c) >= 0;
    CHECK(nonneg == 0, "no code below 20000 becomes a success (%u did)", nonneg);

    static const int mingw_errnos[] = {
        EPERM,       ENOENT,       EINTR,           EIO,           EBADF,       EAGAIN,
        ENOMEM,      EACCES,       EFAULT,          EBUSY,         EEXIST,      EINVAL,
        EMFILE,      ENOSPC,       EPIPE,           ENOSYS,        ENOTSUP,     ENOTSOCK,
        EMSGSIZE,    ECONNRESET,   ETIMEDOUT,       ECANCELED,     EOVERFLOW,   ENAMETOOLONG,
        ELOOP,       EHOSTUNREACH, EADDRINUSE,      EADDRNOTAVAIL, ENOTCONN,    EISCONN,
        ENOBUFS,     ECONNREFUSED, ECONNABORTED,    ENETDOWN,      ENETUNREACH, EALREADY,
        EINPROGRESS, EAFNOSUPPORT, EPROTONOSUPPORT, EXDEV,         EROFS,       ESPIPE,
        ENOTEMPTY,   ENOTDIR,      EFBIG,           ERANGE,        EISDIR,      ENFILE};
    unsigned clash = ESHUTDOWN == EDQUOT;
    for (size_t i = 0; i < sizeof(mingw_errnos) / sizeof(mingw_errnos[0]); i++)
        clash += mingw_errnos[i] == ESHUTDOWN || mingw_errnos[i] == EDQUOT;
    CHECK(clash == 0, "ESHUTDOWN (%d) and EDQUOT (%d) are numbers of their own", ESHUTDOWN, EDQUOT);

    printf("error_test: %u codes listed\n%u passed, %u failed\n", listed, passed, failed);
    return failed == 0 ? 0 : 1;
}
