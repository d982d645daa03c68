/*
 * Launching a child without copying the parent. The child shares the
 * parent's memory until it calls execve (clone(CLONE_VM | CLONE_VFORK) on
 * Linux, vfork() elsewhere), so a parent with a gigabyte resident pays
 * nothing for its page tables, and the parent is suspended until the
 * child has either started the program or given up. A child that gives up
 * writes its errno into the shared `err` before _exit, so a program that
 * cannot run is an error of the spawn call, not an exit status.
 *
 * In the child only system calls run: the parent prepared every string
 * and number beforehand. Signals are blocked in the parent thread around
 * the launch, because a handler running in a child that shares the
 * parent's memory would act on the parent's state; the child resets every
 * disposition to the default and opens its mask before execve.
 *
 * Descriptors: the child keeps only 0..nfds-1, as asked; everything else
 * is closed (close_range where the system has it, else one close per
 * descriptor below the limit), whatever its close-on-exec flag says, so
 * another library's descriptors opened without O_CLOEXEC do not leak into
 * the program either.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdalign.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef TERN_HAVE_CLONE_VFORK
#include <sched.h>
#endif
#ifdef TERN_HAVE_CLOSE_RANGE
#include <sys/syscall.h>
#endif

#include "process_p.h"

#define CHILD_STACK 32768 /* the PATH buffer and a few frames */

static void close_from(int lowest, int max_fd)
{
#ifdef TERN_HAVE_CLOSE_RANGE
    if (syscall(SYS_close_range, (unsigned)lowest, ~0u, 0u) == 0)
        return;
#endif
    for (int fd = lowest; fd < max_fd; fd++)
        (void)close(fd);
}

/* execve, searching the parent's PATH for a name without '/'. Returns the errno. */
static int exec_program(struct tern__spawn *s)
{
    if (strchr(s->file, '/') != NULL) {
        execve(s->file, s->argv, s->envp);
        return errno;
    }
    char buf[4096];
    size_t flen = strlen(s->file);
    int err = ENOENT;
    const char *p = s->path;
    for (;;) {
        const char *end = strchr(p, ':');
        size_t dlen = end != NULL ? (size_t)(end - p) : strlen(p);
        if (dlen + 1 + flen + 1 <= sizeof(buf)) {
            size_t n = 0;
            if (dlen == 0) {
                buf[n++] = '.';
            } else {
                memcpy(buf, p, dlen);
                n = dlen;
            }
            buf[n++] = '/';
            memcpy(buf + n, s->file, flen + 1);
            execve(buf, s->argv, s->envp);
            if (errno == EACCES)
                err = EACCES; /* as execvp: reported if nothing else runs */
            else if (errno != ENOENT && errno != ENOTDIR)
                return errno;
        }
        if (end == NULL)
            return err;
        p = end + 1;
    }
}

static int child_steps(struct tern__spawn *s)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        (void)sigaction(sig, &dfl, NULL); /* EINVAL for SIGKILL, SIGSTOP and the gaps */

    if ((s->flags & TERN_PROCESS_DETACHED) && setsid() < 0)
        return errno;

    int n = (int)s->nfds;
    /* A source that is itself one of the targets moves out of the way first. */
    for (int i = 0; i < n; i++) {
        int src = s->fds[i];
        if (src >= 0 && src < n && src != i) {
            int moved = fcntl(src, F_DUPFD, n);
            if (moved < 0)
                return errno;
            for (int j = i; j < n; j++)
                if (s->fds[j] == src)
                    s->fds[j] = moved;
        }
    }
    for (int i = 0; i < n; i++) {
        int src = s->fds[i];
        if (src == i) {
            /* inherited: keep it across execve (it may be closed: then so be it) */
            int fl = fcntl(i, F_GETFD);
            if (fl >= 0 && fcntl(i, F_SETFD, fl & ~FD_CLOEXEC) < 0)
                return errno;
        } else if (dup2(src, i) < 0) {
            return errno;
        }
    }
    close_from(n, s->max_fd);

    if (s->cwd != NULL && chdir(s->cwd) < 0)
        return errno;
    if (s->flags & TERN_PROCESS_SETGID) {
        if (setgid((gid_t)s->gid) < 0)
            return errno;
    }
    if (s->flags & TERN_PROCESS_SETUID) {
        if (setgroups(0, NULL) < 0 && errno != EPERM)
            return errno;
        if (setuid((uid_t)s->uid) < 0)
            return errno;
    }
    sigset_t none;
    sigemptyset(&none);
    (void)sigprocmask(SIG_SETMASK, &none, NULL);
    return exec_program(s);
}

static int child_main(void *arg)
{
    struct tern__spawn *s = arg;
    int err = child_steps(s);
    s->err = err != 0 ? err : EINVAL;
    _exit(127);
}

static int fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > 1u << 20)
        return 1 << 20;
    return (int)rl.rlim_cur;
}

#ifdef TERN_HAVE_CLONE_VFORK
static pid_t launch(struct tern__spawn *s)
{
    /*
     * The child runs on this buffer while this thread is suspended, so it
     * may live on this thread's stack.
     */
    alignas(16) char stack[CHILD_STACK];
    return clone(child_main, stack + sizeof(stack), CLONE_VM | CLONE_VFORK | SIGCHLD, s);
}
#else
static pid_t launch(struct tern__spawn *s)
{
    pid_t pid = vfork();
    if (pid == 0)
        (void)child_main(s);
    return pid;
}
#endif

int tern__spawn(struct tern__spawn *s, pid_t *pidp)
{
    s->max_fd = fd_limit(); /* for a kernel without close_range */
    s->err = 0;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = launch(s);
    int launch_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid < 0)
        return launch_errno == ENOMEM ? -ENOMEM : -EAGAIN;
    if (s->err != 0) {
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        return -s->err;
    }
    *pidp = pid;
    return 0;
}
