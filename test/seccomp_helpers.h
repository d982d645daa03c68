/*
 * Making the kernel refuse one system call in a test's own process
 * (criterion runs each test in a process of its own), so a path tern
 * takes only when the kernel says no is reached without a product seam.
 */
#ifndef TERN_TEST_SECCOMP_HELPERS_H
#define TERN_TEST_SECCOMP_HELPERS_H

#include <criterion/criterion.h>
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define NATIVE_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NATIVE_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

#define ANY_ARG (-1)

enum refusal_reach {
    THIS_THREAD,  /* the calling thread, and the threads it starts later */
    EVERY_THREAD, /* the threads already running too (the pool's workers) */
};

/*
 * From now on system call nr fails with err: every call, or with argi
 * not ANY_ARG only those whose argument number argi (from 0) has the low
 * word `value` (a descriptor, fcntl's command). Skips the test where no
 * filter can be written for this architecture.
 */
static inline void refuse_when(long nr, int argi, uint32_t value, int err,
                               enum refusal_reach reach)
{
#if defined(NATIVE_AUDIT_ARCH)
    bool any = argi == ANY_ARG;
    uint32_t arg_low = any ? 0 : (uint32_t)offsetof(struct seccomp_data, args[argi]);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    arg_low += 4;
#endif
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_AUDIT_ARCH, 0, 5),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, 3),
        /* Without an argument to match, the number is compared once more. */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, any ? offsetof(struct seccomp_data, nr) : arg_low),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, any ? (uint32_t)nr : value, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (uint32_t)err),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};
    cr_assert_eq(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0, "no_new_privs: %s", strerror(errno));
    long rc = reach == EVERY_THREAD
                  ? syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog)
                  : prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
    cr_assert_eq(rc, 0, "seccomp: %s", strerror(errno));
#else
    (void)nr, (void)argi, (void)value, (void)err, (void)reach;
    cr_skip_test("no seccomp filter for this architecture");
#endif
}

/* Every call of nr fails with err, in the calling thread (see above). */
static inline void refuse(long nr, int err)
{
    refuse_when(nr, ANY_ARG, 0, err, THIS_THREAD);
}

#endif
