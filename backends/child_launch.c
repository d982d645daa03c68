/*
 * Launching a child without copying the parent (child_launch.h). The child
 * shares the parent's memory until it calls execve (clone(CLONE_VM |
 * CLONE_VFORK) on Linux, vfork() elsewhere), so a parent with a gigabyte
 * resident pays nothing for its page tables, and the parent is suspended
 * until the child has either started the program or given up. A child
 * that gives up writes its errno into the shared `err` before _exit, so a
 * program that cannot run is an error of the spawn call, not an exit
 * status.
 *
 * In the child only system calls run: the parent prepared every string
 * and number beforehand. The caller has blocked signals around the launch;
 * the child resets every disposition to the default and opens its mask
 * before execve.
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
#include <unistd.h>

#ifdef TERN_HAVE_CLONE_VFORK
#include <sched.h>
#endif
#if defined(TERN_HAVE_CLOSE_RANGE) || defined(TERN_HAVE_CLONE_VFORK)
#include <sys/syscall.h>
#endif

#include "child_launch.h"
#include "tern.h"

#define CHILD_STACK 32768 /* a few frames of system calls */

/*
 * The child's calls. With clone(CLONE_VM) the child runs in the parent's
 * memory on the parent thread's TLS, so a library wrapper that keeps
 * process-wide state would act on the parent's: glibc's setuid makes every
 * thread of the parent follow it, and a sanitizer's interceptors (sigaction,
 * dup2, _exit) update bookkeeping the parent keeps using. On Linux the child
 * therefore makes raw system calls only, on strings the parent joined;
 * elsewhere vfork's child uses libc.
 *
 * ThreadSanitizer cannot follow a child that shares the parent's memory:
 * with clone(CLONE_VM) children starting while other threads start, its
 * runtime faults on its own per-thread trace memory (seen as a SEGV in
 * pthread_create). Under it the launcher copies the parent instead.
 */
#if defined(__SANITIZE_THREAD__)
#define TERN_LAUNCH_COPIES 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TERN_LAUNCH_COPIES 1
#endif
#endif

#ifdef TERN_HAVE_CLONE_VFORK
#ifdef TERN_LAUNCH_COPIES
#define CHILD_CODE __attribute__((no_sanitize("thread"), noinline))
#else
/* The child runs on a buffer in the parent's frame: AddressSanitizer's
 * scope poisoning of that frame would flag the child's own locals. */
#define CHILD_CODE __attribute__((no_sanitize_address, noinline))
#endif
#define SIGSET_BYTES ((NSIG - 1) / 8) /* the kernel's sigset_t */
#define child_call(...) syscall(__VA_ARGS__)
#define child_fcntl(fd, cmd, arg) child_call(SYS_fcntl, (fd), (cmd), (arg))
#define child_dup_to(src, dst) child_call(SYS_dup3, (src), (dst), 0) /* src != dst */
#define child_close(fd) child_call(SYS_close, (fd))
#define child_setsid() child_call(SYS_setsid)
#define child_chdir(dir) child_call(SYS_chdir, (dir))
#define child_setgid(gid) child_call(SYS_setgid, (gid))
#define child_setuid(uid) child_call(SYS_setuid, (uid))
#define child_setgroups_none() child_call(SYS_setgroups, 0, NULL)
#define child_execve(f, a, e) child_call(SYS_execve, (f), (a), (e))
#define child_exit(code) child_call(SYS_exit_group, (code))
#define child_write(fd, p, n) child_call(SYS_write, (fd), (p), (n))

CHILD_CODE static void child_default_signals(void)
{
    /* Zero is SIG_DFL with no flags and an empty mask in every layout. */
    unsigned long dfl[8] = {0};
    for (int sig = 1; sig < NSIG; sig++) /* EINVAL for KILL, STOP: they keep theirs */
        (void)child_call(SYS_rt_sigaction, sig, dfl, NULL, SIGSET_BYTES);
}

CHILD_CODE static void child_open_mask(void)
{
    unsigned long none[2] = {0};
    (void)child_call(SYS_rt_sigprocmask, SIG_SETMASK, none, NULL, SIGSET_BYTES);
}
#else
#define CHILD_CODE
#define child_fcntl(fd, cmd, arg) fcntl((fd), (cmd), (arg))
#define child_dup_to(src, dst) dup2((src), (dst))
#define child_close(fd) close(fd)
#define child_setsid() setsid()
#define child_chdir(dir) chdir(dir)
#define child_setgid(gid) setgid(gid)
#define child_setuid(uid) setuid(uid)
#define child_setgroups_none() setgroups(0, NULL)
#define child_execve(f, a, e) execve((f), (a), (e))
#define child_exit(code) _exit(code)
#define child_write(fd, p, n) write((fd), (p), (n))

static void child_default_signals(void)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        (void)sigaction(sig, &dfl, NULL); /* EINVAL for SIGKILL, SIGSTOP and the gaps */
}

static void child_open_mask(void)
{
    sigset_t none;
    sigemptyset(&none);
    (void)sigprocmask(SIG_SETMASK, &none, NULL);
}
#endif

/* Close every descriptor from `lowest` up except `keep` (-1: none). */
CHILD_CODE static void close_from(int lowest, int keep, int max_fd)
{
#ifdef TERN_HAVE_CLOSE_RANGE
    if (keep < lowest) {
        if (syscall(SYS_close_range, (unsigned)lowest, ~0u, 0u) == 0)
            return;
    } else if ((keep == lowest ||
                syscall(SYS_close_range, (unsigned)lowest, (unsigned)keep - 1, 0u) == 0) &&
               syscall(SYS_close_range, (unsigned)keep + 1, ~0u, 0u) == 0) {
        return;
    }
#endif
    for (int fd = lowest; fd < max_fd; fd++)
        if (fd != keep)
            (void)child_close(fd);
}

/*
 * execve each prepared candidate in turn, as execvp searches PATH.
 * Returns the errno to report.
 */
CHILD_CODE static int exec_program(struct tern__spawn *s)
{
    int err = ENOENT;
    for (char *const *c = s->candidates; *c != NULL; c++) {
        (void)child_execve(*c, s->argv, s->envp);
        if (errno == EACCES)
            err = EACCES; /* as execvp: reported if nothing else runs */
        else if (errno != ENOENT && errno != ENOTDIR)
            return errno;
    }
    return err;
}

CHILD_CODE static int child_steps(struct tern__spawn *s)
{
    child_default_signals();

    if ((s->flags & TERN_PROCESS_DETACHED) && child_setsid() < 0)
        return errno;

    int n = (int)s->nfds;
    /* A source that is itself one of the targets moves out of the way first. */
    for (int i = 0; i < n; i++) {
        int src = s->fds[i];
        if (src >= 0 && src < n && src != i) {
            int moved = (int)child_fcntl(src, F_DUPFD, n);
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
            int fl = (int)child_fcntl(i, F_GETFD, 0);
            if (fl >= 0 && child_fcntl(i, F_SETFD, fl & ~FD_CLOEXEC) < 0)
                return errno;
        } else if (child_dup_to(src, i) < 0) {
            return errno;
        }
    }
    close_from(n, s->report_fd, s->max_fd);

    if (s->cwd != NULL && child_chdir(s->cwd) < 0)
        return errno;
    if (s->flags & TERN_PROCESS_SETGID) {
        if (child_setgid((gid_t)s->gid) < 0)
            return errno;
    }
    if (s->flags & TERN_PROCESS_SETUID) {
        if (child_setgroups_none() < 0 && errno != EPERM)
            return errno;
        if (child_setuid((uid_t)s->uid) < 0)
            return errno;
    }
    child_open_mask();
    return exec_program(s);
}

CHILD_CODE static int child_main(void *arg)
{
    struct tern__spawn *s = arg;
    int err = child_steps(s);
    if (err == 0)
        err = EINVAL;
    s->err = err;
    if (s->report_fd >= 0)
        (void)child_write(s->report_fd, &err, sizeof err);
    child_exit(127);
    return 127;
}

#if defined(TERN_HAVE_CLONE_VFORK) && !defined(TERN_LAUNCH_COPIES)
static pid_t launch(struct tern__spawn *s)
{
    /*
     * The child runs on this buffer while this thread is suspended, so it
     * may live on this thread's stack.
     */
    alignas(16) char stack[CHILD_STACK];
    s->report_fd = -1;
    return clone(child_main, stack + sizeof(stack), CLONE_VM | CLONE_VFORK | SIGCHLD, s);
}
#elif defined(TERN_LAUNCH_COPIES)
/*
 * The child may be a copy (ThreadSanitizer runs vfork as a fork), so its
 * errno comes back through a pipe that closes on execve: end of file
 * means the program runs. The write end sits above every stdio target so
 * the child's dup2s leave it alone, and close_from keeps it.
 */
static pid_t launch(struct tern__spawn *s)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    if (p[1] < (int)s->nfds) {
        int high = fcntl(p[1], F_DUPFD_CLOEXEC, (int)s->nfds);
        (void)close(p[1]);
        if (high < 0) {
            (void)close(p[0]);
            return -1;
        }
        p[1] = high;
    }
    s->report_fd = p[1];
    pid_t pid = vfork();
    if (pid == 0)
        (void)child_main(s);
    int launch_errno = errno;
    (void)close(p[1]);
    if (pid > 0) {
        int err;
        ssize_t got;
        while ((got = read(p[0], &err, sizeof err)) < 0 && errno == EINTR)
            ;
        if (got == (ssize_t)sizeof err)
            s->err = err;
    }
    (void)close(p[0]);
    errno = launch_errno;
    return pid;
}
#else
static pid_t launch(struct tern__spawn *s)
{
    s->report_fd = -1;
    pid_t pid = vfork();
    if (pid == 0)
        (void)child_main(s);
    return pid;
}
#endif

pid_t tern__launch(struct tern__spawn *s)
{
    pid_t pid = launch(s);
    return pid < 0 ? -errno : pid;
}
