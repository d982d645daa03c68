/*
 * The platform file (backends/platform.c, SPEC §14): each facility takes
 * its fast path where the build found one and its portable fallback in a
 * -Dportable=true build, and both keep the same promises: wake-up and
 * socket descriptors are non-blocking and close-on-exec, pool threads are
 * named where the system can name them, the tick clock is the TSC only
 * when CPUID calls it invariant, timed condvar waits measure the clock
 * tern__cond_deadline computes in.
 */
#include "loop_helpers.h"

#include <stdio.h>
#include <sys/stat.h>

#include "platform.h"
#include "tern/net.h"

static void assert_nonblock_cloexec(int fd, const char *what)
{
    int fl = fcntl(fd, F_GETFL), fdfl = fcntl(fd, F_GETFD);
    cr_assert_geq(fl, 0, "%s", what);
    cr_assert(fl & O_NONBLOCK, "%s is blocking", what);
    cr_assert(fdfl & FD_CLOEXEC, "%s is not close-on-exec", what);
}

/* Under poll the host gets the wake descriptor itself: an eventfd where
 * the system has one, the read end of a pipe otherwise. */
Test(platform, the_wake_descriptor_is_the_build_s_kind, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_backend("poll");
    int fd = tern_loop_backend_fd(loop);
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
#ifdef TERN_HAVE_EVENTFD
    cr_assert_not(S_ISFIFO(st.st_mode), "an eventfd was built in, yet the wake-up is a pipe");
#else
    cr_assert(S_ISFIFO(st.st_mode), "the portable wake-up is a pipe");
#endif
    assert_nonblock_cloexec(fd, "the wake descriptor");
    loop_free_clean(loop);
}

struct tcp_probe {
    tern_id accepted;
    atomic_uint connected, got;
    int status;
};

static void on_accept(tern_loop *loop, tern_id listener, int status, tern_id stream, void *arg)
{
    (void)loop, (void)listener;
    struct tcp_probe *p = arg;
    cr_assert_eq(status, 0);
    p->accepted = stream;
    atomic_fetch_add(&p->got, 1);
}

static void on_connect(tern_loop *loop, tern_id stream, int status, void *arg)
{
    (void)loop, (void)stream;
    struct tcp_probe *p = arg;
    p->status = status;
    atomic_fetch_add(&p->connected, 1);
}

/* accept4 or accept + fcntl, SOCK_* flags or fcntl: the same result. */
Test(platform, sockets_tern_makes_are_nonblocking_and_close_on_exec, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    static struct tcp_probe p;
    tern_id listener, client;
    cr_assert_eq(tern_tcp_listen(loop, "127.0.0.1", 0, 16, 0, on_accept, &p, &listener), 0);
    unsigned port;
    cr_assert_eq(tern_tcp_port(loop, listener, &port), 0);
    cr_assert_eq(tern_tcp_connect(loop, "127.0.0.1", port, 10 * SEC, on_connect, &p, &client), 0);
    cr_assert(run_until_count(loop, &p.connected, 1, 10 * MS, 1000));
    cr_assert_eq(p.status, 0, "connect: %s", tern_err_name(p.status));
    cr_assert(run_until_count(loop, &p.got, 1, 10 * MS, 1000));
    assert_nonblock_cloexec(tern_stream_fd(loop, listener), "the listener");
    assert_nonblock_cloexec(tern_stream_fd(loop, client), "the connected socket");
    assert_nonblock_cloexec(tern_stream_fd(loop, p.accepted), "the accepted socket");
    cr_assert_eq(tern_stream_close(loop, client), 0);
    cr_assert_eq(tern_stream_close(loop, p.accepted), 0);
    cr_assert_eq(tern_stream_close(loop, listener), 0);
    tern_loop_run(loop);
    loop_free_clean(loop);
}

struct named {
    char name[32];
    atomic_uint done;
};

static void *read_name(tern_job *job, void *arg)
{
    (void)job;
    struct named *n = arg;
    cr_assert_eq(pthread_getname_np(pthread_self(), n->name, sizeof(n->name)), 0);
    return NULL;
}

static void name_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)result;
    cr_assert_eq(status, 0);
    atomic_fetch_add(&((struct named *)arg)->done, 1);
}

/* Pool threads say what they are in top -H, gdb and perf, where the
 * system lets a thread be named; elsewhere they keep the process's name. */
Test(platform, pool_threads_are_named, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    static struct named bounded, lng;
    cr_assert_eq(tern_submit(loop, TERN_BOUNDED, read_name, name_done, &bounded, NULL), 0);
    cr_assert_eq(tern_submit(loop, TERN_LONG, read_name, name_done, &lng, NULL), 0);
    cr_assert(run_until_count(loop, &bounded.done, 1, 10 * MS, 1000));
    cr_assert(run_until_count(loop, &lng.done, 1, 10 * MS, 1000));
#ifdef TERN_HAVE_SETNAME_NP
    cr_assert_str_eq(bounded.name, "tern-pool");
    cr_assert_str_eq(lng.name, "tern-long");
#else
    cr_assert_str_neq(bounded.name, "tern-pool", "a system without names names no thread");
    cr_assert_str_neq(lng.name, "tern-long");
#endif
    loop_free_clean(loop);
}

struct pin {
    int cpu, rc;
    cpu_set_t after;
};

static void *pin_self(void *arg)
{
    struct pin *p = arg;
    p->rc = tern__thread_pin(p->cpu);
    CPU_ZERO(&p->after);
    pthread_getaffinity_np(pthread_self(), sizeof(p->after), &p->after);
    return NULL;
}

static struct pin pin_on_thread(int cpu)
{
    struct pin p = {.cpu = cpu};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, pin_self, &p), 0);
    pthread_join(t, NULL);
    return p;
}

/* The thread seam's CPUs (os_thread.h), in every build, portable too: the
 * usable CPUs are the process's mask, lowest first; a pin leaves the
 * thread on its one CPU; a CPU that does not exist is -EINVAL. */
Test(platform, usable_cpus_are_the_mask_and_a_pin_holds, .timeout = TEST_TIMEOUT)
{
    cpu_set_t mask;
    cr_assert_eq(sched_getaffinity(0, sizeof(mask), &mask), 0);
    int cpus[TERN__CPUS_MAX];
    unsigned n = tern__cpus_usable(cpus, TERN__CPUS_MAX);
    cr_assert_eq(n, (unsigned)CPU_COUNT(&mask));
    for (unsigned i = 0; i < n; i++) {
        cr_assert(CPU_ISSET(cpus[i], &mask), "CPU %d is not in the mask", cpus[i]);
        cr_assert(i == 0 || cpus[i] > cpus[i - 1]);
    }
    int first;
    cr_assert_eq(tern__cpus_usable(&first, 1), 1);
    cr_assert_eq(first, cpus[0]);
    struct pin p = pin_on_thread(cpus[n - 1]);
    cr_assert_eq(p.rc, 0);
    cr_assert_eq(CPU_COUNT(&p.after), 1);
    cr_assert(CPU_ISSET(cpus[n - 1], &p.after));
    cr_assert_eq(pin_on_thread(-1).rc, -EINVAL);
    cr_assert_eq(pin_on_thread(TERN__CPUS_MAX).rc, -EINVAL);
}

/* The signal source is the build's: signalfd on Linux, the self-pipe in
 * a portable build (the backend's own for kqueue loops). */
Test(platform, the_signal_source_is_the_build_s_kind)
{
#ifdef TERN_HAVE_SIGNALFD
    cr_assert_eq(tern__sigsource_kind_for(false), TERN__SIG_SIGNALFD);
#else
    cr_assert_eq(tern__sigsource_kind_for(false), TERN__SIG_PIPE);
#endif
    cr_assert_eq(tern__sigsource_kind_for(true), TERN__SIG_BACKEND);
}

/* CPUID's invariant-TSC bit is what Linux shows as constant_tsc together
 * with nonstop_tsc; a portable build never uses the TSC. */
Test(platform, the_tsc_is_used_only_when_invariant)
{
#if defined(TERN_HAVE_TSC) && defined(__linux__)
    FILE *f = fopen("/proc/cpuinfo", "r");
    cr_assert_not_null(f);
    char line[4096];
    bool constant = false, nonstop = false;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "flags", 5) == 0) {
            constant = strstr(line, " constant_tsc") != NULL;
            nonstop = strstr(line, " nonstop_tsc") != NULL;
            break;
        }
    fclose(f);
    cr_assert_eq(tern__tsc_invariant(), constant && nonstop);
#else
    cr_assert_not(tern__tsc_invariant());
#endif
}

/* A deadline of "now" lies between two readings of the clock the
 * condvars were set to measure (an ordering, not a duration). */
Test(platform, cond_deadlines_use_the_condvars_clock)
{
#ifdef TERN_HAVE_CONDATTR_SETCLOCK
    clockid_t clock = CLOCK_MONOTONIC;
#else
    clockid_t clock = CLOCK_REALTIME;
#endif
    struct timespec a, b;
    clock_gettime(clock, &a);
    struct timespec d = tern__cond_deadline(0);
    clock_gettime(clock, &b);
    uint64_t an = (uint64_t)a.tv_sec * SEC + (uint64_t)a.tv_nsec;
    uint64_t bn = (uint64_t)b.tv_sec * SEC + (uint64_t)b.tv_nsec;
    uint64_t dn = (uint64_t)d.tv_sec * SEC + (uint64_t)d.tv_nsec;
    cr_assert(an <= dn && dn <= bn, "deadline %llu outside [%llu, %llu]", (unsigned long long)dn,
              (unsigned long long)an, (unsigned long long)bn);
    pthread_cond_t c;
    cr_assert_eq(tern__cond_init(&c), 0);
    pthread_cond_destroy(&c);
}

/* The descriptor helpers report the system's errno, negated, and make nothing. */
Test(platform, descriptor_helpers_report_the_system_error, .timeout = TEST_TIMEOUT)
{
    cr_assert_eq(tern__fd_nonblock_cloexec(-1), -EBADF);
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    close(fds[1]);
    int closed = fds[1];
    cr_assert_eq(tern__fd_nonblock_cloexec(closed), -EBADF);
    cr_assert_eq(tern__fd_nonblock_cloexec(fds[0]), 0);
    close(fds[0]);
    cr_assert_eq(tern__socket(-1, SOCK_STREAM), -EAFNOSUPPORT);
    cr_assert_eq(tern__accept(-1), -EBADF);
}
