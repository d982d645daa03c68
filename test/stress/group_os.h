/*
 * group_os.h: the two things group_stress.c needs that Windows lacks, so
 * the program itself asks no question about the platform and builds
 * unchanged for Windows (test/win/meson.build). Included once, by
 * group_stress.c.
 *
 *   GROUP_OS_RCU  whether the program may make its loops TERN_LOOP_RCU and
 *       call synchronize_rcu in exclusive mode: liburcu's qsbr flavour is
 *       linked on Linux; on Windows it does not build and tern refuses the
 *       flag with -ENOTSUP.
 *   group_os_synchronize_rcu()  liburcu's synchronize_rcu; never called
 *       where GROUP_OS_RCU is false.
 *   GROUP_OS_BUSY  whether busy processes can be started: they are forked,
 *       and Windows has no fork (as in stress.h, whose TERN_CONTEND is
 *       ignored there).
 *   group_os_busy_start(limit_s)  one busy process per online core; each
 *       ends itself after limit_s seconds (alarm) should the program die
 *       without stopping it.
 *   group_os_busy_stop()  kills and reaps them; a second call does nothing.
 *   group_os_pace(ns)  sleeps about ns (under a second) to pace a thread.
 *       winpthreads' nanosleep truncates to whole milliseconds, so on
 *       Windows a shorter request would not sleep at all and a paced thread
 *       would spin (an outside caster then floods the loops with broadcasts
 *       and starves the ticks whose posts and pauses a round is about):
 *       there a nonzero request sleeps at least a millisecond.
 * On Windows it also brings ESHUTDOWN (backends/errno_os.h).
 */
#ifndef TERN_GROUP_OS_H
#define TERN_GROUP_OS_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifndef _WIN32

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <urcu-qsbr.h>

#define GROUP_OS_RCU true
#define GROUP_OS_BUSY true
#define GROUP_OS_MAX_BUSY 64

static inline void group_os_synchronize_rcu(void)
{
    urcu_qsbr_synchronize_rcu();
}

static inline void group_os_pace(long ns)
{
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

static pid_t group_os_busy[GROUP_OS_MAX_BUSY];
static unsigned group_os_nbusy;

static inline void group_os_busy_start(unsigned limit_s)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    for (long i = 0; i < cpus && group_os_nbusy < GROUP_OS_MAX_BUSY; i++) {
        fflush(NULL); /* the child must not flush the parent's buffered lines again */
        pid_t pid = fork();
        if (pid == 0) {
            alarm(limit_s); /* bounded even if the program dies without killing it */
            for (;;)
                ;
        }
        if (pid > 0)
            group_os_busy[group_os_nbusy++] = pid;
    }
}

static inline void group_os_busy_stop(void)
{
    for (unsigned i = 0; i < group_os_nbusy; i++) {
        kill(group_os_busy[i], SIGKILL);
        waitpid(group_os_busy[i], NULL, 0);
    }
    group_os_nbusy = 0;
}

#else /* _WIN32 */

#include "errno_os.h" /* ESHUTDOWN, which mingw-w64's errno.h lacks */

#define GROUP_OS_RCU false
#define GROUP_OS_BUSY false

static inline void group_os_synchronize_rcu(void)
{
    abort(); /* unreachable: no loop is TERN_LOOP_RCU where GROUP_OS_RCU is false */
}

static inline void group_os_pace(long ns)
{
    long ms = 1000000;
    struct timespec ts = {0, (ns + ms - 1) / ms * ms};
    nanosleep(&ts, NULL);
}

static inline void group_os_busy_start(unsigned limit_s)
{
    (void)limit_s;
}

static inline void group_os_busy_stop(void)
{
}

#endif /* _WIN32 */

#endif /* TERN_GROUP_OS_H */
