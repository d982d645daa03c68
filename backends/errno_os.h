/*
 * <errno.h>, and the statuses tern reports that the system's errno.h
 * lacks. mingw-w64's has no ESHUTDOWN or EDQUOT; they get numbers here in
 * a range no C library on Windows uses (error_win.c reports them, and
 * test/win/error_test.c checks they collide with nothing it has). On
 * POSIX this is <errno.h> alone. A file that names either status includes
 * this header (platform.h and error_win.h do), so no file above backends/
 * asks which system it is on.
 */
#ifndef TERN_ERRNO_OS_H
#define TERN_ERRNO_OS_H

#include <errno.h>

#ifndef ESHUTDOWN
#define ESHUTDOWN 2001
#endif
#ifndef EDQUOT
#define EDQUOT 2002
#endif

#endif
