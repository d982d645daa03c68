/*
 * The platform file's edges (backends/platform.c): a signal source of the
 * backend kind only blocks the signal (no descriptor, nothing to read)
 * and its close consumes what is pending and unblocks; a source closed on
 * a thread other than the one that opened it leaves both threads' masks
 * alone; a signalfd or eventfd the system refuses (no descriptor left)
 * returns its errno and leaves the mask and the object as they were; a
 * wake-up object closed twice closes nothing the second time; the
 * descriptor helper reports each fcntl the system refuses.
 *
 * The refusals run in forked children (an rlimit or a seccomp filter
 * there, never in the test's own process); each child ends with
 * child_exit and a status naming the first check that failed.
 */
#include "loop_helpers.h"

#include <signal.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/wait.h>

#ifdef __linux__
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#endif

#include "child_exit.h"
#include "platform.h"

#if defined(__linux__) && defined(__x86_64__)
#define NATIVE_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__linux__) && defined(__aarch64__)
#define NATIVE_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

static bool blocked_here(int signo)
{
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    return sigismember(&cur, signo);
}

static bool pending_here(int signo)
{
    sigset_t p;
    return sigpending(&p) == 0 && sigismember(&p, signo);
}

static void set_blocked(int signo, bool on)
{
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, signo);
    cr_assert_eq(pthread_sigmask(on ? SIG_BLOCK : SIG_UNBLOCK, &one, NULL), 0);
}

/* Run fn in a forked child; assert it exited 0 (else: which check failed). */
static void in_child(int (*fn)(void))
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int rc = fn();
        struct rlimit rl; /* child_exit writes coverage counters: descriptors */
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
            rl.rlim_cur = rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
        }
        child_exit(rc);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "the child died of signal %d", WTERMSIG(status));
    cr_assert_eq(WEXITSTATUS(status), 0, "the child's check %d failed", WEXITSTATUS(status));
}

/* No descriptor can be created from now on in this (child) process. */
static int no_descriptors_left(void)
{
    int lowest = dup(0);
    if (lowest < 0)
        return -1;
    close(lowest);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -1;
    rl.rlim_cur = (rlim_t)lowest;
    return setrlimit(RLIMIT_NOFILE, &rl);
}

/* The backend kind blocks the signal and holds nothing to read; closing
 * it takes a pending instance away and unblocks. */
Test(platform_edges, a_backend_source_only_blocks_and_its_close_consumes, .timeout = TEST_TIMEOUT)
{
    set_blocked(SIGWINCH, false);
    struct tern__sigsource s;
    cr_assert_eq(tern__sigsource_open(&s, SIGWINCH, true), 0);
    cr_assert_eq(s.kind, TERN__SIG_BACKEND);
    cr_assert_eq(s.fd, -1);
    cr_assert(s.mask_changed);
    cr_assert(blocked_here(SIGWINCH));
    cr_assert_eq(raise(SIGWINCH), 0);
    cr_assert(pending_here(SIGWINCH));
    cr_assert_eq(tern__sigsource_read(&s), 0, "the backend kind has nothing to read");
    tern__sigsource_close(&s);
    cr_assert_not(pending_here(SIGWINCH), "close left an instance pending");
    cr_assert_not(blocked_here(SIGWINCH));

    /* Blocked before: blocked after. */
    set_blocked(SIGWINCH, true);
    cr_assert_eq(tern__sigsource_open(&s, SIGWINCH, true), 0);
    cr_assert_not(s.mask_changed);
    tern__sigsource_close(&s);
    cr_assert(blocked_here(SIGWINCH));
}

struct closer {
    struct tern__sigsource *s;
    bool blocked_before, blocked_after;
};

static void *close_elsewhere(void *arg)
{
    struct closer *c = arg;
    c->blocked_before = blocked_here(c->s->signo);
    tern__sigsource_close(c->s);
    c->blocked_after = blocked_here(c->s->signo);
    return NULL;
}

/*
 * Only the thread that blocked the signal may unblock it for itself: a
 * source closed on another thread (a loop freed elsewhere) changes
 * neither that thread's mask nor the opener's.
 */
static void close_on_another_thread(bool by_backend)
{
    set_blocked(SIGWINCH, false);
    struct tern__sigsource s;
    cr_assert_eq(tern__sigsource_open(&s, SIGWINCH, by_backend), 0);
    if (s.kind == TERN__SIG_PIPE) {
        cr_log_info("self-pipe source: the mask is unblocked, not blocked");
        tern__sigsource_close(&s);
        return;
    }
    cr_assert(s.mask_changed);
    struct closer c = {.s = &s};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, close_elsewhere, &c), 0);
    cr_assert_eq(pthread_join(t, NULL), 0);
    cr_assert(c.blocked_before, "a thread created after open inherits the block");
    cr_assert(c.blocked_after, "close unblocked a thread that did not block it");
    cr_assert(blocked_here(SIGWINCH), "close on another thread changed the opener's mask");
    set_blocked(SIGWINCH, false);
}

Test(platform_edges, a_signalfd_source_closed_elsewhere_leaves_the_masks, .timeout = TEST_TIMEOUT)
{
    close_on_another_thread(false);
}

Test(platform_edges, a_backend_source_closed_elsewhere_leaves_the_masks, .timeout = TEST_TIMEOUT)
{
    close_on_another_thread(true);
}

/* signalfd refused (no descriptor left): its errno, and the mask as it
 * was, whether the signal was blocked before or not. */
static int signalfd_refused(void)
{
    struct tern__sigsource s;
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, SIGWINCH);
    pthread_sigmask(SIG_UNBLOCK, &one, NULL);
    if (no_descriptors_left() != 0)
        return 1;
    if (tern__sigsource_kind_for(false) == TERN__SIG_PIPE) {
        /* the pipe fails the same way, before touching the disposition */
        if (tern__sigsource_open(&s, SIGWINCH, false) != -EMFILE)
            return 2;
        return blocked_here(SIGWINCH) ? 3 : 0;
    }
    if (tern__sigsource_open(&s, SIGWINCH, false) != -EMFILE)
        return 4;
    if (blocked_here(SIGWINCH))
        return 5; /* the block it added stayed */
    pthread_sigmask(SIG_BLOCK, &one, NULL);
    if (tern__sigsource_open(&s, SIGWINCH, false) != -EMFILE)
        return 6;
    if (!blocked_here(SIGWINCH))
        return 7; /* it unblocked a block it did not add */
    return 0;
}

Test(platform_edges, a_refused_signalfd_returns_its_errno_and_the_mask, .timeout = TEST_TIMEOUT)
{
    in_child(signalfd_refused);
}

/* The wake-up object refused: its errno, and closing it closes nothing. */
static int wake_refused(void)
{
    struct tern__wake w;
    int keep = dup(0); /* a descriptor whose number close must not touch */
    if (keep < 0)
        return 1;
    if (no_descriptors_left() != 0)
        return 2;
    if (tern__wake_open(&w) != -EMFILE)
        return 3;
    if (w.fd != -1 || w.wfd != -1)
        return 4;
    tern__wake_close(&w);
    if (fcntl(keep, F_GETFD) < 0)
        return 5;
    return 0;
}

Test(platform_edges, a_refused_wake_object_returns_its_errno, .timeout = TEST_TIMEOUT)
{
    in_child(wake_refused);
}

/* Closing twice: the second close leaves alone whatever descriptor took
 * the first one's number meanwhile. */
Test(platform_edges, a_wake_object_closed_twice_closes_once, .timeout = TEST_TIMEOUT)
{
    struct tern__wake w;
    cr_assert_eq(tern__wake_open(&w), 0);
    int was = w.fd;
    tern__wake_close(&w);
    cr_assert_eq(w.fd, -1);
    cr_assert_eq(w.wfd, -1);
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    cr_assert(fds[0] == was || fds[1] == was, "the number was not reused; the check needs it");
    tern__wake_close(&w);
    cr_assert_geq(fcntl(fds[0], F_GETFD), 0, "the second close closed another descriptor");
    cr_assert_geq(fcntl(fds[1], F_GETFD), 0, "the second close closed another descriptor");
    close(fds[0]);
    close(fds[1]);
}

#if defined(NATIVE_AUDIT_ARCH)
/* fcntl with this command fails with EPERM in this (child) process. */
static int refuse_fcntl(int cmd)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_AUDIT_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_fcntl, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)cmd, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        return -1;
    return 0;
}

/* With cmd refused, the helper returns -EPERM; the flags it set before
 * the refused step stay, the ones after it were never set. */
static int helper_refused(int cmd, bool nonblock_after, bool cloexec_after)
{
    int fds[2];
    if (pipe(fds) != 0)
        return 1;
    if (refuse_fcntl(cmd) != 0)
        return 2;
    if (tern__fd_nonblock_cloexec(fds[0]) != -EPERM)
        return 3;
    if (cmd != F_GETFL) {
        int fl = fcntl(fds[0], F_GETFL);
        if (fl < 0 || ((fl & O_NONBLOCK) != 0) != nonblock_after)
            return 4;
    }
    if (cmd != F_GETFD) {
        int fdfl = fcntl(fds[0], F_GETFD);
        if (fdfl < 0 || ((fdfl & FD_CLOEXEC) != 0) != cloexec_after)
            return 5;
    }
    return 0;
}

static int setfl_refused(void)
{
    return helper_refused(F_SETFL, false, false);
}

static int getfd_refused(void)
{
    return helper_refused(F_GETFD, true, false);
}

static int setfd_refused(void)
{
    return helper_refused(F_SETFD, true, false);
}
#endif

Test(platform_edges, the_descriptor_helper_reports_each_refused_fcntl, .timeout = TEST_TIMEOUT)
{
#if defined(NATIVE_AUDIT_ARCH)
    in_child(setfl_refused);
    in_child(getfd_refused);
    in_child(setfd_refused);
#else
    cr_skip_test("no seccomp filter for this system");
#endif
}
