/*
 * Windows errors as tern's statuses: error_win.h has the list and says
 * why its default is what it is. Built for Windows only.
 *
 * Quirk: Winsock's WSA_* names for overlapped results (WSA_IO_PENDING,
 * WSA_OPERATION_ABORTED, WSA_INVALID_HANDLE, ...) are the system codes
 * under other names, so they are listed once, as system codes; a second
 * entry would be a duplicate case, which the compiler refuses.
 */
#include "error_win.h"

int tern__error_win(unsigned long code)
{
#define ERRNO_CASE(c, e) \
    case c:              \
        return -(e);
    switch (code) {
        TERN__WIN_SYSTEM_ERRORS(ERRNO_CASE)
        TERN__WIN_SOCKET_ERRORS(ERRNO_CASE)
    default:
        return TERN__WIN_DEFAULT;
    }
#undef ERRNO_CASE
}
