/*
 * What the io_uring tests share (uring_test, uring_accept_test,
 * uring_send_test): whether this process may make a ring at all, a loop
 * on io_uring or the test skipped, and a seccomp filter that makes some
 * system calls fail, which proves a path goes through the ring (the
 * kernel's own calls from io_uring are not filtered). Criterion runs each
 * test in a child of its own, so a filter dies with its test.
 */
#ifndef TERN_URING_HELPERS_H
#define TERN_URING_HELPERS_H

#include "loop_helpers.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

/* Whether this kernel lets this process make a ring at all. */
static inline bool kernel_allows_io_uring(void)
{
    struct {
        uint32_t sq_entries, cq_entries, flags, sq_thread_cpu, sq_thread_idle, features, wq_fd,
            resv[3];
        uint32_t sq_off[10], cq_off[10];
    } params;
    memset(&params, 0, sizeof params);
    long fd = syscall(__NR_io_uring_setup, 1, &params);
    if (fd < 0)
        return false;
    close((int)fd);
    return true;
}

/* A loop on io_uring, or the test is skipped. */
static inline tern_loop *uring_loop(void)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.backend = "io_uring";
    tern_loop *loop = loop_new_opts(&o);
    cr_assert_str_eq(tern_loop_backend_name(loop), "io_uring");
    return loop;
}

/*
 * Make each of the n system calls nrs fail with err in this process from
 * now on: every call when fd < 0, else only those whose first argument is
 * fd (so a test can deny a call on tern's socket and keep the runner's
 * own channel working).
 */
static inline void deny_syscalls(const long *nrs, unsigned n, int fd, unsigned err)
{
#if defined(__x86_64__)
    const uint32_t arch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
    const uint32_t arch = AUDIT_ARCH_AARCH64;
#else
    const uint32_t arch = 0;
    cr_skip_test("no seccomp architecture constant for this machine in the test");
#endif
    cr_assert_eq(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
    for (unsigned i = 0; i < n; i++) {
        struct sock_filter code[] = {
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, arch, 1, 0),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nrs[i], 0, 3),
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
            fd < 0 ? (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JA, 0, 0, 0)
                   : (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)fd, 0, 1),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (err & SECCOMP_RET_DATA)),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog prog = {.len = sizeof code / sizeof code[0], .filter = code};
        cr_assert_eq(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog), 0, "seccomp: %s",
                     strerror(errno));
    }
}

/* Make system call nr fail with err, whatever its arguments. */
static inline void deny_syscall(long nr, unsigned err)
{
    deny_syscalls(&nr, 1, -1, err);
}

#endif
