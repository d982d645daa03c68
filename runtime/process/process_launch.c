/*
 * Launching a child, the parent's side. The platform's launcher
 * (backends/child_launch.h) makes the child and runs the program; here
 * the parent prepares what the child will try (the PATH search, joined
 * into one list beforehand, so the child only makes system calls), blocks
 * every signal in its thread around the launch, because a handler running
 * in a child that shares the parent's memory would act on the parent's
 * state, and turns a child that gave up into an error of the spawn call,
 * reaped, rather than an exit status.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "process_p.h"

static int fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > 1u << 20)
        return 1 << 20;
    return (int)rl.rlim_cur;
}

/*
 * The paths execve tries, in order, joined in the parent: the file itself
 * when it names a path, else each PATH entry (an empty one is ".") with
 * the file after it. One allocation, freed by the caller; NULL for ENOMEM.
 */
static char **candidates(const char *file, const char *path)
{
    size_t flen = strlen(file);
    size_t count = 1, bytes = flen + 1;
    if (strchr(file, '/') == NULL) {
        count = 1;
        for (const char *p = path; *p != '\0'; p++)
            count += *p == ':';
        bytes = strlen(path) + count * (flen + 3);
    }
    char **list = tern__malloc((count + 1) * sizeof(char *) + bytes);
    if (list == NULL)
        return NULL;
    char *out = (char *)(list + count + 1);
    if (strchr(file, '/') != NULL) {
        memcpy(out, file, flen + 1);
        list[0] = out;
        list[1] = NULL;
        return list;
    }
    size_t k = 0;
    for (const char *p = path;;) {
        const char *end = strchr(p, ':');
        size_t dlen = end != NULL ? (size_t)(end - p) : strlen(p);
        list[k++] = out;
        if (dlen == 0)
            *out++ = '.';
        memcpy(out, p, dlen);
        out += dlen;
        *out++ = '/';
        memcpy(out, file, flen + 1);
        out += flen + 1;
        if (end == NULL)
            break;
        p = end + 1;
    }
    list[k] = NULL;
    return list;
}

int tern__spawn(struct tern__spawn *s, pid_t *pidp)
{
    s->max_fd = fd_limit(); /* for a kernel without close_range */
    s->err = 0;
    s->candidates = candidates(s->file, s->path);
    if (s->candidates == NULL)
        return -ENOMEM;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = tern__launch(s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    free(s->candidates);
    s->candidates = NULL;
    if (pid < 0)
        return pid == -ENOMEM ? -ENOMEM : -EAGAIN;
    if (s->err != 0) {
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        return -s->err;
    }
    *pidp = pid;
    return 0;
}
