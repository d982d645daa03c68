/*
 * Reading what another thread of this process is doing, for tests that
 * must act only once a thread sits in a given system call (a loop blocked
 * in its backend, a pool worker parked). Linux: /proc/self/task/<tid>/syscall.
 */
#ifndef TERN_TEST_PROC_HELPERS_H
#define TERN_TEST_PROC_HELPERS_H

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

/*
 * The first line of thread tid's syscall file ("nr arg0 arg1 ..." or
 * "running") into line; `what` receives it (or why nothing was read), for
 * failure messages. False when nothing was read.
 */
static inline bool task_syscall_line(pid_t tid, char *line, size_t len, char *what,
                                     size_t what_len)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)tid);
    line[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(what, what_len, "%s: %s", path, strerror(errno));
        return false;
    }
    bool got = fgets(line, (int)len, f) != NULL;
    fclose(f);
    line[strcspn(line, "\n")] = '\0';
    snprintf(what, what_len, "%s", got ? line : "(empty)");
    return got;
}

/*
 * Descriptors open in this process now, the reading's own aside; -1 when
 * /proc/self/fd cannot be read. Tests compare it before and after, to
 * prove tern closes what it opened.
 */
static inline int proc_open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory stream's own descriptor */
}

#endif
