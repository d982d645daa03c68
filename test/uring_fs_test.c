/*
 * tern_fs_read_file through the io_uring backend (TERN__DO_FILE): with
 * stat, open and pread denied to the process, a file is still read, so
 * the calls go through the ring and not through a pool thread. Contents
 * right for an empty, a small, a large (many reads) and a sizeless
 * (/proc) file; the pool's outcomes for a missing file, a directory, a
 * FIFO, a file over max_bytes; cb in step 2, exactly once, never inside
 * the call. A cancel while the calls run stops the request (-ECANCELED,
 * RUNNING) and closes what it opened; one after the outcome is FINISHED
 * and cb gets the file. A deadline is -ETIMEDOUT, an owner's close
 * -ECANCELED, and max_undelivered, max_operations and an owner's cap
 * refuse as for a job. Loop free with reads in the kernel runs each cb
 * once and leaks no descriptor. A queue that takes no entry makes the
 * loop make the call itself, and the request goes on; such a call fails
 * as the kernel's would. The edges: a cancel or deadline that meets the
 * close lets the read end, a cancel the queue drops still stops the
 * request, a path swapped for a FIFO after its stat is refused at the
 * descriptor, a refused fcntl fails the request (on the pool too), an id
 * table that cannot grow refuses it with nothing changed, and teardown
 * refuses it. The file calls need no probe: a refused one changes nothing.
 * A sized file's last read takes its close along (one trip fewer): a
 * cancel that meets the pair stops the request with nothing left open, a
 * read that ends short ends the file, an -EAGAIN there opens it again,
 * each call of the pair can fail, and loop free waits for both halves. A
 * terminal swapped in after the stat never becomes the controlling one.
 */
#include "uring_helpers.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "fault.h"
#include "fs_helpers.h"
#include "testing.h"
#include "tern/fs.h"

#ifdef TERN_HAVE_IO_URING

static void setup(void)
{
    strcpy(dir, "/tmp/tern-uring-fs-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

/* Without system(3): the tests that deny open and stat cannot run a shell. */
static void teardown(void)
{
    static const char *const names[] = {"empty", "small", "large", "big", "fifo", "f", "sock"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        (void)unlink(at(names[i]));
    (void)rmdir(at("sub"));
    cr_assert_eq(rmdir(dir), 0);
}

TestSuite(uring_fs, .init = setup, .fini = teardown, .timeout = TEST_TIMEOUT);

/* A file of n bytes of a pattern, at dir/name. */
static void put_bytes(const char *name, size_t n)
{
    FILE *f = fopen(at(name), "w");
    cr_assert_not_null(f);
    for (size_t i = 0; i < n; i++)
        fputc((int)(unsigned char)(i * 7 + i / 251), f);
    fclose(f);
}

static void check_bytes(const struct rec *r, size_t n)
{
    cr_assert_eq(r->status, 0, "status %d", r->status);
    cr_assert_eq(r->value, (int64_t)n);
    cr_assert_not_null(r->data);
    const unsigned char *d = r->data;
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(d[i], (unsigned char)(i * 7 + i / 251), "byte %zu", i);
    cr_assert_eq(d[n], '\0', "no NUL after the data");
}

/* From now on the process cannot stat, open or pread by itself. */
static void deny_file_calls(void)
{
    static const long nrs[] = {__NR_openat, __NR_newfstatat, __NR_statx, __NR_fstat, __NR_pread64};
    deny_syscalls(nrs, sizeof nrs / sizeof nrs[0], -1, EPERM);
}

static unsigned count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d);
    unsigned n = 0;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

static void read_one(tern_loop *loop, const char *path, const tern_fs_options *o, struct rec *r)
{
    cr_assert_eq(tern_fs_read_file(loop, path, o, rec_cb, r, NULL), 0);
    cr_assert_eq(atomic_load(&r->n), 0, "cb ran inside the call");
    cr_assert(run_until_count(loop, &r->n, 1, -1, 100000));
    cr_assert_eq(atomic_load(&r->n), 1);
}

Test(uring_fs, contents_through_the_ring)
{
    tern_loop *loop = uring_loop();
    put_bytes("empty", 0);
    put_bytes("small", 100);
    put_bytes("large", 300000);
    struct stat want;
    cr_assert_eq(stat(at("small"), &want), 0);
    deny_file_calls();
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.step_bytes = 4096; /* the large file takes many reads */
    struct rec r[4] = {0};
    read_one(loop, at("empty"), &o, &r[0]);
    check_bytes(&r[0], 0);
    read_one(loop, at("small"), &o, &r[1]);
    check_bytes(&r[1], 100);
    cr_assert_eq(r[1].st.st_ino, want.st_ino);
    cr_assert_eq(r[1].st.st_dev, want.st_dev);
    cr_assert_eq(r[1].st.st_size, 100);
    cr_assert(S_ISREG(r[1].st.st_mode));
    cr_assert_eq(r[1].st.st_mtim.tv_sec, want.st_mtim.tv_sec);
    cr_assert_eq(r[1].st.st_mtim.tv_nsec, want.st_mtim.tv_nsec);
    read_one(loop, at("large"), &o, &r[2]);
    check_bytes(&r[2], 300000);
    /* Sizeless: read to its end, the buffer growing. */
    read_one(loop, "/proc/self/environ", &o, &r[3]);
    cr_assert_eq(r[3].status, 0);
    cr_assert_gt(r[3].value, 0);
    for (int i = 0; i < 4; i++)
        tern_fs_free(r[i].data);
    tern_loop_free(loop);
}

/* The file calls need no probe (every ring the backend accepts has them):
 * with io_uring_register denied, as a filter may, a file is still read
 * through the ring, stat, open and pread being denied to the process. */
Test(uring_fs, without_the_probe_files_still_go_through_the_ring)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    deny_syscall(__NR_io_uring_register, EPERM);
    tern_loop *loop = uring_loop();
    put_bytes("small", 100);
    deny_file_calls();
    struct rec r = {0};
    read_one(loop, at("small"), NULL, &r);
    check_bytes(&r, 100);
    tern_fs_free(r.data);
    tern_loop_free(loop);
}

Test(uring_fs, the_pools_errors)
{
    tern_loop *loop = uring_loop();
    put_bytes("big", 5000);
    cr_assert_eq(mkfifo(at("fifo"), 0600), 0);
    cr_assert_eq(mkdir(at("sub"), 0700), 0);
    deny_file_calls();
    struct rec r[5] = {0};
    read_one(loop, at("missing"), NULL, &r[0]);
    cr_assert_eq(r[0].status, -ENOENT);
    read_one(loop, at("sub"), NULL, &r[1]);
    cr_assert_eq(r[1].status, -EISDIR);
    read_one(loop, at("fifo"), NULL, &r[2]);
    cr_assert_eq(r[2].status, -ENOTSUP);
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.max_bytes = 4999;
    read_one(loop, at("big"), &o, &r[3]);
    cr_assert_eq(r[3].status, -EFBIG);
    /* Sizeless and over max_bytes. */
    o.max_bytes = 3;
    read_one(loop, "/proc/self/environ", &o, &r[4]);
    cr_assert_eq(r[4].status, -EFBIG);
    for (int i = 0; i < 5; i++)
        cr_assert_null(r[i].data, "data with an error (%d)", i);
    tern_loop_free(loop);
}

/* A socket's path: its stat passes (as on the pool, which opens it to
 * learn more), and the open's refusal is cb's status, the pool's own. */
Test(uring_fs, a_socket_path_fails_as_on_the_pool)
{
    tern_loop *loop = uring_loop();
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(s, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", at("sock"));
    cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    struct rec r = {0}, pool = {0};
    read_one(loop, at("sock"), NULL, &r);
    tern_loop *on_pool = loop_new_backend("epoll");
    read_one(on_pool, at("sock"), NULL, &pool);
    cr_assert_lt(r.status, 0);
    cr_assert_eq(r.status, pool.status, "ring %d, pool %d", r.status, pool.status);
    cr_assert_null(r.data);
    close(s);
    tern_loop_free(on_pool);
    tern_loop_free(loop);
}

/*
 * More completions come in one wait than its array holds (1,024): the
 * rest stay in the kernel's queue for the next wait, and each request's
 * cb still runs once. 1,100 reads of a directory end at their first call.
 */
#define WIDE 1100

Test(uring_fs, more_completions_than_a_wait_takes)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    tern_loop_options lo;
    tern_loop_options_init(&lo);
    lo.backend = "io_uring";
    lo.max_undelivered = 2 * WIDE;
    tern_loop *loop = loop_new_opts(&lo);
    cr_assert_eq(mkdir(at("sub"), 0700), 0);
    static struct rec r[WIDE];
    memset(r, 0, sizeof r);
    for (int i = 0; i < WIDE; i++)
        cr_assert_eq(tern_fs_read_file(loop, at("sub"), NULL, rec_cb, &r[i], NULL), 0);
    cr_assert(run_until_count(loop, &r[WIDE - 1].n, 1, -1, 100000));
    for (int i = 0; i < 4; i++)
        (void)tern_loop_run_once(loop, 0);
    for (int i = 0; i < WIDE; i++) {
        cr_assert_eq(atomic_load(&r[i].n), 1, "request %d: %u callbacks", i, atomic_load(&r[i].n));
        cr_assert_eq(r[i].status, -EISDIR);
    }
    cr_assert_eq(loop_live(loop), 0);
    tern_loop_free(loop);
}

/*
 * A read with its close needs two entries, and a link chain must reach
 * the kernel in one submit: with one entry left in the submission queue
 * (255 stats of other requests queued, none submitted yet), the backend
 * submits them first, then queues the pair (it is not made here, where
 * pread is denied). The last request's stat, open and fstat are made in
 * the call (the queue refusing them).
 */
#define SQ_FULL 255

Test(uring_fs, a_pair_that_needs_two_entries_empties_the_queue_first)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    tern_loop_options lo;
    tern_loop_options_init(&lo);
    lo.backend = "io_uring";
    lo.max_undelivered = 2 * SQ_FULL;
    tern_loop *loop = loop_new_opts(&lo);
    cr_assert_eq(mkdir(at("sub"), 0700), 0);
    put_bytes("small", 100);
    unsigned fds = count_fds();
    static struct rec r[SQ_FULL + 1];
    memset(r, 0, sizeof r);
    for (int i = 0; i < SQ_FULL; i++)
        cr_assert_eq(tern_fs_read_file(loop, at("sub"), NULL, rec_cb, &r[i], NULL), 0);
    /* A read made here would fail: it goes through the ring. */
    deny_syscalls((const long[]){__NR_pread64}, 1, -1, EPERM);
    tern__uring_refuse_entries(3);
    cr_assert_eq(tern_fs_read_file(loop, at("small"), NULL, rec_cb, &r[SQ_FULL], NULL), 0);
    tern__uring_refuse_entries(0);
    cr_assert(run_until_count(loop, &r[SQ_FULL].n, 1, -1, 100000));
    check_bytes(&r[SQ_FULL], 100);
    tern_fs_free(r[SQ_FULL].data);
    for (int t = 0; t < 100000 && loop_live(loop) > 0; t++)
        (void)tern_loop_run_once(loop, -1);
    for (int i = 0; i < SQ_FULL; i++) {
        cr_assert_eq(atomic_load(&r[i].n), 1, "request %d: %u callbacks", i, atomic_load(&r[i].n));
        cr_assert_eq(r[i].status, -EISDIR);
    }
    cr_assert_eq(count_fds(), fds, "a descriptor was left open");
    tern_loop_free(loop);
}

/* tern_cancel from the loop's thread (a callback) says its outcome. */
struct cancel_at {
    tern_id id;
    int first, second;
};

static void cancel_now(tern_loop *loop, void *arg)
{
    struct cancel_at *c = arg;
    c->first = tern_cancel(loop, c->id);
    c->second = tern_cancel(loop, c->id);
}

Test(uring_fs, cancel_while_running_closes_what_it_opened)
{
    tern_loop *loop = uring_loop();
    put_bytes("f", 300000);
    unsigned fds = count_fds();
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.step_bytes = 4096;
    put_bytes("small", 100);
    /* One request cancelled at each of its first turns: whatever call it
     * is in; a small file's in its first three (the last, the read with
     * its close, may be in flight). */
    for (unsigned turns = 0; turns < 16; turns++) {
        struct rec r = {0};
        struct cancel_at c = {0};
        const char *path = at(turns < 12 ? "f" : "small");
        cr_assert_eq(tern_fs_read_file(loop, path, &o, rec_cb, &r, &c.id), 0);
        for (unsigned t = 0; t < turns % 12; t++)
            (void)tern_loop_run_once(loop, 0);
        cr_assert_eq(atomic_load(&r.n), 0);
        cr_assert_eq(tern_defer(loop, cancel_now, &c), 0);
        cr_assert(run_until_count(loop, &r.n, 1, -1, 100000));
        cr_assert_eq(c.first, TERN_CANCEL_RUNNING, "turn %u: %d", turns, c.first);
        cr_assert_eq(c.second, TERN_CANCEL_RUNNING, "a second cancel");
        cr_assert_eq(r.status, -ECANCELED, "turn %u: %d", turns, r.status);
        cr_assert_null(r.data);
        (void)tern_loop_run_once(loop, 0);
        cr_assert_eq(atomic_load(&r.n), 1);
        cr_assert_eq(tern_defer(loop, cancel_now, &c), 0);
        (void)tern_loop_run_once(loop, 0);
        cr_assert_eq(c.first, -ENOENT);
    }
    cr_assert_eq(count_fds(), fds, "a descriptor was left open");
    tern_loop_free(loop);
}

/* The outcome is in but cb has not run: the cancel changes nothing. */
static struct cancel_at other;

static void cancel_other(tern_loop *loop, tern_id id, int status, tern_fs_result *res, void *arg)
{
    rec_cb(loop, id, status, res, arg);
    cancel_now(loop, &other);
}

Test(uring_fs, cancel_after_the_outcome_is_finished)
{
    tern_loop *loop = uring_loop();
    put_bytes("f", 10);
    /* No entry to be had: both are read by the loop at once, in the call;
     * the first one's cb cancels the second, whose cb is queued. */
    tern__uring_refuse_entries(1000);
    struct rec r[2] = {0};
    cr_assert_eq(tern_fs_read_file(loop, at("f"), NULL, cancel_other, &r[0], NULL), 0);
    cr_assert_eq(tern_fs_read_file(loop, at("f"), NULL, rec_cb, &r[1], &other.id), 0);
    tern__uring_refuse_entries(0);
    cr_assert_eq(atomic_load(&r[0].n) + atomic_load(&r[1].n), 0, "cb ran inside the call");
    cr_assert(run_until_count(loop, &r[1].n, 1, -1, 100000));
    cr_assert_eq(other.first, TERN_CANCEL_FINISHED);
    cr_assert_eq(other.second, TERN_CANCEL_FINISHED);
    check_bytes(&r[0], 10);
    check_bytes(&r[1], 10);
    tern_fs_free(r[0].data);
    tern_fs_free(r[1].data);
    tern_loop_free(loop);
}

Test(uring_fs, a_full_queue_makes_the_calls_here)
{
    tern_loop *loop = uring_loop();
    put_bytes("f", 20000);
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.step_bytes = 4096;
    /* Part of the chain through the ring, part made by the loop. */
    for (unsigned refuse = 1; refuse < 8; refuse++) {
        struct rec r = {0};
        cr_assert_eq(tern_fs_read_file(loop, at("f"), &o, rec_cb, &r, NULL), 0);
        (void)tern_loop_run_once(loop, 0);
        tern__uring_refuse_entries(refuse);
        cr_assert(run_until_count(loop, &r.n, 1, -1, 100000));
        tern__uring_refuse_entries(0);
        check_bytes(&r, 20000);
        tern_fs_free(r.data);
    }
    tern_loop_free(loop);
}

Test(uring_fs, deadline_and_owner)
{
    tern_loop *loop = uring_loop();
    put_bytes("f", 300000);
    unsigned fds = count_fds();
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.step_bytes = 4096;
    o.timeout_ns = 1;
    struct rec r[2] = {0};
    cr_assert_eq(tern_fs_read_file(loop, at("f"), &o, rec_cb, &r[0], NULL), 0);
    cr_assert(run_until_count(loop, &r[0].n, 1, -1, 100000));
    cr_assert_eq(r[0].status, -ETIMEDOUT);
    cr_assert_null(r[0].data);
    tern_id owner;
    cr_assert_eq(tern_owner_open(loop, 1, &owner), 0);
    tern_fs_options_init(&o);
    o.owner = owner;
    cr_assert_eq(tern_fs_read_file(loop, at("f"), &o, rec_cb, &r[1], NULL), 0);
    /* Its cap is one: the second is refused. */
    cr_assert_eq(tern_fs_read_file(loop, at("f"), &o, rec_cb, &r[1], NULL), -EAGAIN);
    cr_assert_eq(tern_loop_last_refusal(loop), TERN_REFUSED_OWNER_CAP);
    cr_assert_eq(tern_owner_close(loop, owner), 0);
    cr_assert(run_until_count(loop, &r[1].n, 1, -1, 100000));
    cr_assert_eq(r[1].status, -ECANCELED);
    cr_assert_eq(count_fds(), fds);
    tern_loop_free(loop);
}

Test(uring_fs, admission_refuses_as_for_a_job)
{
    if (!kernel_allows_io_uring())
        cr_skip_test("this kernel refuses io_uring_setup to this process");
    tern_loop_options lo;
    tern_loop_options_init(&lo);
    lo.backend = "io_uring";
    lo.max_undelivered = 2;
    tern_loop *loop = loop_new_opts(&lo);
    put_bytes("f", 10);
    struct rec r[3] = {0};
    cr_assert_eq(tern_fs_read_file(loop, at("f"), NULL, rec_cb, &r[0], NULL), 0);
    cr_assert_eq(tern_fs_read_file(loop, at("f"), NULL, rec_cb, &r[1], NULL), 0);
    cr_assert_eq(tern_fs_read_file(loop, at("f"), NULL, rec_cb, &r[2], NULL), -EAGAIN);
    cr_assert_eq(tern_loop_last_refusal(loop), TERN_REFUSED_UNDELIVERED);
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.timeout_ns = UINT64_MAX;
    cr_assert_eq(tern_fs_read_file(loop, at("f"), &o, rec_cb, &r[2], NULL), -EINVAL);
    cr_assert(run_until_count(loop, &r[1].n, 1, -1, 100000));
    cr_assert_eq(atomic_load(&r[2].n), 0);
    tern_fs_free(r[0].data);
    tern_fs_free(r[1].data);
    tern_loop_free(loop);

    tern_loop_options_init(&lo);
    lo.backend = "io_uring";
    lo.max_operations = 1;
    loop = loop_new_opts(&lo);
    memset(r, 0, sizeof r);
    cr_assert_eq(tern_fs_read_file(loop, at("f"), NULL, rec_cb, &r[0], NULL), 0);
    cr_assert_eq(tern_fs_read_file(loop, at("f"), NULL, rec_cb, &r[1], NULL), -EAGAIN);
    cr_assert_eq(tern_loop_last_refusal(loop), TERN_REFUSED_OPERATIONS);
    cr_assert(run_until_count(loop, &r[0].n, 1, -1, 100000));
    tern_fs_free(r[0].data);
    tern_loop_free(loop);
}

/* The fs fault site fails each call in turn (as it fails the pool's
 * steps): cb gets the errno, with nothing left open or allocated. */
Test(uring_fs, each_call_can_fail)
{
    tern_loop *loop = uring_loop();
    put_bytes("f", 20000);
    unsigned fds = count_fds();
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.step_bytes = 8192;
    tern__fault_fs_errno(-EIO);
    uint64_t n = 1;
    for (;; n++) {
        struct rec r = {0};
        tern__fault_arm(TERN__FAULT_FS, n);
        read_one(loop, at("f"), &o, &r);
        bool fired = tern__fault_fired();
        tern__fault_arm(TERN__FAULT_FS, 0);
        if (!fired) {
            check_bytes(&r, 20000);
            tern_fs_free(r.data);
            break;
        }
        cr_assert_eq(r.status, -EIO, "call %lu: %d", (unsigned long)n, r.status);
        cr_assert_null(r.data);
        cr_assert_eq(count_fds(), fds, "call %lu left a descriptor", (unsigned long)n);
    }
    /* stat, open, fstat, three reads, close. */
    cr_assert_eq(n, 8, "%lu calls", (unsigned long)n - 1);
    /* A file of one read, which takes the close along: each still fails. */
    put_bytes("small", 100);
    for (n = 1;; n++) {
        struct rec r = {0};
        tern__fault_arm(TERN__FAULT_FS, n);
        read_one(loop, at("small"), &o, &r);
        bool fired = tern__fault_fired();
        tern__fault_arm(TERN__FAULT_FS, 0);
        if (!fired) {
            check_bytes(&r, 100);
            tern_fs_free(r.data);
            break;
        }
        cr_assert_eq(r.status, -EIO, "call %lu: %d", (unsigned long)n, r.status);
        cr_assert_null(r.data);
        cr_assert_eq(count_fds(), fds, "call %lu left a descriptor", (unsigned long)n);
    }
    cr_assert_eq(n, 6, "%lu calls", (unsigned long)n - 1);
    /* A sizeless file, whose close is a call of its own. */
    for (n = 1;; n++) {
        struct rec r = {0};
        tern__fault_arm(TERN__FAULT_FS, n);
        read_one(loop, "/proc/self/environ", &o, &r);
        bool fired = tern__fault_fired();
        tern__fault_arm(TERN__FAULT_FS, 0);
        if (!fired) {
            cr_assert_eq(r.status, 0, "status %d", r.status);
            tern_fs_free(r.data);
            break;
        }
        cr_assert_eq(r.status, -EIO, "call %lu: %d", (unsigned long)n, r.status);
        cr_assert_null(r.data);
        cr_assert_eq(count_fds(), fds, "call %lu left a descriptor", (unsigned long)n);
    }
    cr_assert_geq(n, 7, "%lu calls", (unsigned long)n - 1); /* stat, open, fstat, reads, close */
    /* close(2)'s EINTR has released the descriptor: success (fs.h). */
    struct rec r = {0};
    tern__fault_fs_errno(-EINTR);
    tern__fault_arm(TERN__FAULT_FS, 7);
    read_one(loop, at("f"), &o, &r);
    cr_assert(tern__fault_fired());
    tern__fault_arm(TERN__FAULT_FS, 0);
    check_bytes(&r, 20000);
    tern_fs_free(r.data);
    cr_assert_eq(count_fds(), fds);
    tern_loop_free(loop);
}

/* A read that says -EAGAIN (a file system whose reads through io_uring
 * honour O_NONBLOCK) clears the flag and reads again, once. The last
 * read's close has run by then: the file is opened again, made blocking
 * after its stat, and read from the start. */
Test(uring_fs, a_read_that_would_block_is_made_again_blocking)
{
    tern_loop *loop = uring_loop();
    put_bytes("f", 20000);
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.step_bytes = 8192;
    tern__fault_fs_errno(-EAGAIN);
    struct rec r = {0};
    tern__fault_arm(TERN__FAULT_FS, 4); /* the first read */
    read_one(loop, at("f"), &o, &r);
    cr_assert(tern__fault_fired());
    check_bytes(&r, 20000);
    tern_fs_free(r.data);
    /* The second read: the flag is cleared then, and once only. */
    memset(&r, 0, sizeof r);
    tern__fault_arm(TERN__FAULT_FS, 5);
    read_one(loop, at("f"), &o, &r);
    cr_assert(tern__fault_fired());
    tern__fault_arm(TERN__FAULT_FS, 0);
    check_bytes(&r, 20000);
    tern_fs_free(r.data);
    /* The last read (stat, open, fstat, three reads): open again. */
    unsigned fds = count_fds();
    memset(&r, 0, sizeof r);
    tern__fault_arm(TERN__FAULT_FS, 6);
    read_one(loop, at("f"), &o, &r);
    cr_assert(tern__fault_fired());
    tern__fault_arm(TERN__FAULT_FS, 0);
    check_bytes(&r, 20000);
    tern_fs_free(r.data);
    cr_assert_eq(count_fds(), fds, "a descriptor was left open");
    tern_loop_free(loop);
}

/* A read that still says -EAGAIN once blocking fails the request with it,
 * and leaves nothing open. A small file's one read is its last: after the
 * first -EAGAIN come its close, the open again, the stat, then the read
 * made blocking (the third call from there). A large file's first read is
 * made again at once (the first call from there). */
Test(uring_fs, a_read_that_would_block_twice_fails)
{
    tern_loop *loop = uring_loop();
    put_bytes("f", 100);
    put_bytes("large", 20000);
    unsigned fds = count_fds();
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.step_bytes = 8192;
    tern__fault_fs_errno(-EAGAIN);
    for (int i = 0; i < 4; i++) { /* once, then twice; small, then large */
        bool twice = i % 2, large = i >= 2;
        struct rec r = {0};
        tern__fault_arm(TERN__FAULT_FS, 4); /* the first read */
        cr_assert_eq(tern_fs_read_file(loop, at(large ? "large" : "f"), &o, rec_cb, &r, NULL), 0);
        /* Armed again once the first has fired: the read made blocking fails too. */
        while (!tern__fault_fired())
            (void)tern_loop_run_once(loop, 0);
        tern__fault_arm(TERN__FAULT_FS, twice ? (large ? 1 : 3) : 0);
        cr_assert(run_until_count(loop, &r.n, 1, -1, 100000));
        tern__fault_arm(TERN__FAULT_FS, 0);
        if (twice) {
            cr_assert_eq(r.status, -EAGAIN, "status %d", r.status);
            cr_assert_null(r.data);
        } else {
            check_bytes(&r, large ? 20000 : 100);
            tern_fs_free(r.data);
        }
    }
    (void)tern_loop_run_once(loop, 0);
    cr_assert_eq(count_fds(), fds, "a descriptor was left open");
    tern_loop_free(loop);
}

/* Each allocation fails in turn: the call says -ENOMEM with nothing
 * admitted, or cb does with nothing left; a sizeless file grows its
 * buffer (max_bytes below its size: -EFBIG once all went well). */
Test(uring_fs, each_allocation_can_fail)
{
    tern_loop *loop = uring_loop();
    put_bytes("f", 100);
    unsigned fds = count_fds();
    /* The file, a sizeless one over max_bytes, and the file with a
     * deadline (its claim on the deadline heap can fail too). */
    const char *paths[] = {at("f"), "/proc/self/environ", at("f")};
    for (int p = 0; p < 3; p++) {
        tern_fs_options o;
        tern_fs_options_init(&o);
        o.max_bytes = p == 1 ? 100 : o.max_bytes;
        o.timeout_ns = p == 2 ? 60 * (uint64_t)1000000000 : 0;
        for (uint64_t n = 1;; n++) {
            struct rec r = {0};
            tern__fault_arm(TERN__FAULT_ALLOC, n);
            int rc = tern_fs_read_file(loop, paths[p], &o, rec_cb, &r, NULL);
            if (rc == 0)
                cr_assert(run_until_count(loop, &r.n, 1, -1, 100000));
            bool fired = tern__fault_fired();
            tern__fault_arm(TERN__FAULT_ALLOC, 0);
            if (!fired) {
                cr_assert_eq(rc, 0);
                cr_assert_eq(r.status, p == 1 ? -EFBIG : 0);
                tern_fs_free(r.data);
                break;
            }
            cr_assert(rc == -ENOMEM || (rc == 0 && r.status == -ENOMEM), "alloc %lu: %d %d",
                      (unsigned long)n, rc, r.status);
            cr_assert_eq(atomic_load(&r.n), rc == 0 ? 1u : 0u);
            cr_assert_null(r.data);
        }
    }
    (void)tern_loop_run_once(loop, 0);
    cr_assert_eq(count_fds(), fds);
    tern_loop_free(loop);
}

/*
 * A cancel (or a deadline) that meets the last call, the close, lets it
 * end: the file was read, and cb gets it. A sizeless file's close is a
 * call of its own: with the queue refusing five entries, the stat, the
 * open, the fstat and both reads (the data, then end of file) are made in
 * the call itself, and the close alone goes to the kernel.
 */
Test(uring_fs, a_stop_that_meets_the_close_lets_it_end)
{
    tern_loop *loop = uring_loop();
    unsigned fds = count_fds();
    for (int deadline = 0; deadline < 2; deadline++) {
        tern_fs_options o;
        tern_fs_options_init(&o);
        o.timeout_ns = deadline ? 1 : 0;
        struct rec r = {0};
        tern_id id = 0;
        tern__uring_refuse_entries(5);
        cr_assert_eq(tern_fs_read_file(loop, "/proc/self/environ", &o, rec_cb, &r, &id), 0);
        tern__uring_refuse_entries(0);
        cr_assert_eq(atomic_load(&r.n), 0);
        if (!deadline) {
            cr_assert_eq(tern__test_cancel_now(loop, id), TERN_CANCEL_RUNNING);
            cr_assert_eq(tern__test_cancel_now(loop, id), TERN_CANCEL_RUNNING, "a second cancel");
        } else {
            sleep_ns(1000000); /* due before the turn that takes the close */
        }
        cr_assert(run_until_count(loop, &r.n, 1, -1, 100000));
        (void)tern_loop_run_once(loop, 0);
        cr_assert_eq(atomic_load(&r.n), 1);
        cr_assert_eq(r.status, 0, "status %d", r.status);
        cr_assert_gt(r.value, 0);
        tern_fs_free(r.data);
        cr_assert_eq(tern__test_cancel_now(loop, id), -ENOENT);
    }
    cr_assert_eq(count_fds(), fds, "a descriptor was left open");
    tern_loop_free(loop);
}

/*
 * A cancel that meets the last read, which took the close along, stops
 * the request as at any read (-ECANCELED): the close ran all the same,
 * whether the cancel reached the read or not, and nothing is left open.
 * Stat, open and fstat are made in the call; the pair goes to the kernel.
 */
Test(uring_fs, a_stop_that_meets_the_last_read_closes_all_the_same)
{
    tern_loop *loop = uring_loop();
    put_bytes("f", 100);
    unsigned fds = count_fds();
    struct rec r = {0};
    tern_id id = 0;
    tern__uring_refuse_entries(3);
    cr_assert_eq(tern_fs_read_file(loop, at("f"), NULL, rec_cb, &r, &id), 0);
    tern__uring_refuse_entries(0);
    cr_assert_eq(tern__test_cancel_now(loop, id), TERN_CANCEL_RUNNING);
    cr_assert(run_until_count(loop, &r.n, 1, -1, 100000));
    cr_assert_eq(r.status, -ECANCELED, "status %d", r.status);
    cr_assert_null(r.data);
    cr_assert_eq(count_fds(), fds, "a descriptor was left open");
    tern_loop_free(loop);
}

/*
 * The last read asks for the rest of the file as its stat sized it, and
 * takes the close along: four trips to the kernel for a small file (the
 * path's stat, the open, the descriptor's stat, the read with its close),
 * so cb runs in the fifth turn, not the sixth. A read that ends short (the
 * file shrank after its stat) ends the file: cb gets what was there.
 */
Test(uring_fs, the_last_read_takes_the_close_along)
{
    tern_loop *loop = uring_loop();
    put_bytes("f", 100);
    unsigned fds = count_fds();
    /* The fewest: a read the kernel had to finish on a worker of its own
     * may come in a wait before its close does. */
    unsigned fewest = 100;
    for (int i = 0; i < 20; i++) {
        struct rec r = {0};
        cr_assert_eq(tern_fs_read_file(loop, at("f"), NULL, rec_cb, &r, NULL), 0);
        unsigned turns = 0;
        while (atomic_load(&r.n) == 0 && turns < 100) {
            (void)tern_loop_run_once(loop, -1);
            turns++;
        }
        fewest = turns < fewest ? turns : fewest;
        check_bytes(&r, 100);
        tern_fs_free(r.data);
        cr_assert_eq(count_fds(), fds, "a descriptor was left open");
    }
    cr_assert_eq(fewest, 5, "cb after %u turns at the fewest", fewest);
    struct rec r = {0};
    tern__uring_refuse_entries(3); /* stat, open and fstat here: it is sized 100 */
    cr_assert_eq(tern_fs_read_file(loop, at("f"), NULL, rec_cb, &r, NULL), 0);
    tern__uring_refuse_entries(0);
    cr_assert_eq(truncate(at("f"), 40), 0);
    cr_assert(run_until_count(loop, &r.n, 1, -1, 100000));
    check_bytes(&r, 40);
    tern_fs_free(r.data);
    cr_assert_eq(count_fds(), fds, "a descriptor was left open");
    tern_loop_free(loop);
}

/*
 * A cancel the queue cannot take is dropped: the call in flight ends as it
 * would have, and the request stops at that boundary all the same
 * (-ECANCELED), closing what it opened. Once at the path's stat, once at
 * a read (stat, open and fstat made in the call, the read in the kernel).
 */
Test(uring_fs, a_cancel_the_queue_cannot_take_still_stops_the_request)
{
    tern_loop *loop = uring_loop();
    put_bytes("f", 100);
    unsigned fds = count_fds();
    for (unsigned made_here = 0; made_here <= 3; made_here += 3) {
        struct rec r = {0};
        tern_id id = 0;
        tern__uring_refuse_entries(made_here);
        cr_assert_eq(tern_fs_read_file(loop, at("f"), NULL, rec_cb, &r, &id), 0);
        tern__uring_refuse_entries(1); /* the cancel's entry */
        cr_assert_eq(tern__test_cancel_now(loop, id), TERN_CANCEL_RUNNING);
        tern__uring_refuse_entries(0);
        cr_assert(run_until_count(loop, &r.n, 1, -1, 100000));
        (void)tern_loop_run_once(loop, 0);
        cr_assert_eq(atomic_load(&r.n), 1);
        cr_assert_eq(r.status, -ECANCELED, "after %u calls here: %d", made_here, r.status);
        cr_assert_null(r.data);
        cr_assert_eq(count_fds(), fds, "after %u calls here: a descriptor left open", made_here);
    }
    tern_loop_free(loop);
}

/*
 * The path's stat saw a regular file, and another kind of file took its
 * place before the open: the descriptor's stat refuses it as the pool's
 * does (-ENOTSUP for a FIFO, which O_NONBLOCK opened at once), and the
 * descriptor is closed. The queue refuses one entry, so the stat is made
 * in the call and the open waits for the next turn.
 */
Test(uring_fs, a_path_replaced_after_its_stat_is_refused_at_the_descriptor)
{
    tern_loop *loop = uring_loop();
    put_bytes("f", 100);
    unsigned fds = count_fds();
    struct rec r = {0};
    tern__uring_refuse_entries(1);
    cr_assert_eq(tern_fs_read_file(loop, at("f"), NULL, rec_cb, &r, NULL), 0);
    tern__uring_refuse_entries(0);
    cr_assert_eq(unlink(at("f")), 0);
    cr_assert_eq(mkfifo(at("f"), 0600), 0);
    cr_assert(run_until_count(loop, &r.n, 1, -1, 100000));
    cr_assert_eq(r.status, -ENOTSUP, "status %d", r.status);
    cr_assert_null(r.data);
    cr_assert_eq(count_fds(), fds, "the FIFO was left open");
    tern_loop_free(loop);
}

/*
 * A terminal put in the path's place after its stat is refused at the
 * descriptor (-ENOTSUP) and, opened O_NOCTTY, never becomes the
 * controlling terminal of the process, a session leader without one. In
 * a child, the leader of a new session: its exit status says which check
 * failed (0: none, 77: no pseudo-terminal to try).
 */
static int terminal_child(void)
{
    if (setsid() < 0)
        return 1;
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0 || ptsname(master) == NULL)
        return 77;
    tern_loop *loop = uring_loop();
    struct rec r = {0};
    tern__uring_refuse_entries(1); /* the stat made in the call */
    if (tern_fs_read_file(loop, at("f"), NULL, rec_cb, &r, NULL) != 0)
        return 2;
    tern__uring_refuse_entries(0);
    if (unlink(at("f")) != 0 || symlink(ptsname(master), at("f")) != 0)
        return 3;
    if (!run_until_count(loop, &r.n, 1, -1, 100000) || r.status != -ENOTSUP)
        return 4;
    tern_loop_free(loop);
    if (open("/dev/tty", O_RDONLY | O_NOCTTY) >= 0)
        return 5; /* the terminal became the controlling one */
    return 0;
}

Test(uring_fs, a_terminal_put_in_the_paths_place_is_not_made_controlling)
{
    put_bytes("f", 100);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0)
        _exit(terminal_child());
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st), "the child did not exit");
    if (WEXITSTATUS(st) == 77)
        cr_skip_test("no pseudo-terminal");
    cr_assert_eq(WEXITSTATUS(st), 0, "check %d failed", WEXITSTATUS(st));
}

/* Clearing O_NONBLOCK after a read's -EAGAIN fails: cb gets fcntl's errno,
 * and the descriptor is closed. So on the pool, whose steps always clear
 * it (its threads start after the filter, so they have it too). */
Test(uring_fs, a_flag_that_cannot_be_cleared_fails_the_request)
{
    tern_loop *loop = uring_loop();
    tern_loop *on_pool = loop_new_backend("epoll");
    put_bytes("f", 100);
    unsigned fds = count_fds();
    int next_fd = dup(0); /* the descriptor each request's open will get */
    cr_assert_geq(next_fd, 0);
    close(next_fd);
    deny_syscalls((const long[]){__NR_fcntl}, 1, next_fd, EACCES);
    tern__fault_fs_errno(-EAGAIN);
    /* The first read: a small file's last (opened again), a large one's not. */
    put_bytes("large", 20000);
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.step_bytes = 8192;
    for (int large = 0; large < 2; large++) {
        tern__fault_arm(TERN__FAULT_FS, 4);
        struct rec r = {0};
        read_one(loop, at(large ? "large" : "f"), &o, &r);
        cr_assert(tern__fault_fired());
        tern__fault_arm(TERN__FAULT_FS, 0);
        cr_assert_eq(r.status, -EACCES, "status %d", r.status);
        cr_assert_null(r.data);
        cr_assert_eq(count_fds(), fds, "a descriptor was left open");
    }
    fds = count_fds();
    struct rec pool = {0};
    read_one(on_pool, at("f"), NULL, &pool);
    cr_assert_eq(pool.status, -EACCES, "status %d", pool.status);
    cr_assert_null(pool.data);
    cr_assert_eq(count_fds(), fds, "a descriptor was left open");
    tern_loop_free(on_pool);
    tern_loop_free(loop);
}

/*
 * Each call made on the loop's thread (the queue taking no entry) fails
 * as the kernel's own call through the ring would: a missing path (the
 * stat), a socket (the open), and the close, whose EINTR has released
 * the descriptor (success, fs.h) and whose other errors fail the request.
 * A seccomp filter makes close(2) of the descriptor the request will get
 * fail, which leaves that descriptor open for good: each case gets one.
 */
Test(uring_fs, calls_made_here_fail_as_the_kernels_would)
{
    tern_loop *loop = uring_loop();
    put_bytes("f", 100);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(s, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", at("sock"));
    cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    tern__uring_refuse_entries(1000);
    struct rec r[4] = {0};
    read_one(loop, at("missing"), NULL, &r[0]);
    cr_assert_eq(r[0].status, -ENOENT, "status %d", r[0].status);
    read_one(loop, at("sock"), NULL, &r[1]);
    cr_assert_eq(r[1].status, -ENXIO, "status %d", r[1].status);
    for (int i = 2; i < 4; i++) {
        int next_fd = dup(0); /* the descriptor the request's open will get */
        cr_assert_geq(next_fd, 0);
        close(next_fd);
        deny_syscalls((const long[]){__NR_close}, 1, next_fd, i == 2 ? EINTR : EIO);
        read_one(loop, at("f"), NULL, &r[i]);
        cr_assert_eq(fcntl(next_fd, F_GETFD), FD_CLOEXEC, "not the request's descriptor");
    }
    tern__uring_refuse_entries(0);
    check_bytes(&r[2], 100);
    tern_fs_free(r[2].data);
    cr_assert_eq(r[3].status, -EIO, "status %d", r[3].status);
    for (int i = 0; i < 4; i++)
        if (i != 2)
            cr_assert_null(r[i].data, "data with an error (%d)", i);
    close(s);
    tern_loop_free(loop);
}

/*
 * The loop's id table has to grow for the request and cannot: the call
 * says -ENOMEM and nothing changed (no id, no live operation, no cb).
 * Each request is tried first with its third allocation failing (the
 * request, its record, then the table's growth), then made; they stay in
 * flight until the end, so the table fills. Every other one has a
 * deadline, whose claim on the deadline heap is given back too.
 */
#define FILLING 100

Test(uring_fs, an_id_table_that_cannot_grow_refuses_the_request)
{
    tern_loop *loop = uring_loop();
    cr_assert_eq(mkdir(at("sub"), 0700), 0);
    static struct rec r[FILLING + 1];
    memset(r, 0, sizeof r);
    /* The first one builds the credit ring, an allocation of its own. */
    cr_assert_eq(tern_fs_read_file(loop, at("sub"), NULL, rec_cb, &r[0], NULL), 0);
    unsigned refused = 0;
    for (int i = 1; i <= FILLING; i++) {
        unsigned live = loop_live(loop);
        tern_id id = 0;
        tern_fs_options o;
        tern_fs_options_init(&o);
        o.timeout_ns = i % 2 ? 60 * (uint64_t)1000000000 : 0;
        tern__fault_arm(TERN__FAULT_ALLOC, 3);
        int rc = tern_fs_read_file(loop, at("sub"), &o, rec_cb, &r[i], &id);
        bool fired = tern__fault_fired();
        tern__fault_arm(TERN__FAULT_ALLOC, 0);
        if (fired) {
            cr_assert_eq(rc, -ENOMEM, "request %d: %d", i, rc);
            cr_assert_eq(id, 0, "an id written for a refused request");
            cr_assert_eq(loop_live(loop), live, "a refused request is live");
            refused++;
            cr_assert_eq(tern_fs_read_file(loop, at("sub"), &o, rec_cb, &r[i], NULL), 0);
        } else {
            cr_assert_eq(rc, 0, "request %d: %d", i, rc);
        }
    }
    cr_assert_gt(refused, 0, "the table never had to grow");
    cr_assert(run_until_count(loop, &r[FILLING].n, 1, -1, 100000));
    for (int t = 0; t < 4; t++)
        (void)tern_loop_run_once(loop, 0);
    for (int i = 0; i <= FILLING; i++) {
        cr_assert_eq(atomic_load(&r[i].n), 1, "request %d: %u callbacks", i, atomic_load(&r[i].n));
        cr_assert_eq(r[i].status, -EISDIR);
    }
    cr_assert_eq(loop_live(loop), 0);
    tern_loop_free(loop);
}

/* While the loop is being freed, a read_file is refused (-ESHUTDOWN)
 * before anything is made, and its cb never runs. */
static int teardown_rc = 1;
static struct rec teardown_rec;

static void read_in_teardown(tern_loop *loop, void *arg)
{
    (void)arg;
    teardown_rc = tern_fs_read_file(loop, at("f"), NULL, rec_cb, &teardown_rec, NULL);
}

Test(uring_fs, read_file_during_teardown_is_refused)
{
    tern_loop *loop = uring_loop();
    put_bytes("f", 100);
    unsigned fds = count_fds();
    cr_assert_eq(tern_post(loop, read_in_teardown, NULL), 0);
    tern_loop_free(loop);
    cr_assert_eq(teardown_rc, -ESHUTDOWN, "%d", teardown_rc);
    cr_assert_eq(atomic_load(&teardown_rec.n), 0);
    cr_assert_leq(count_fds(), fds);
}

#define MANY 64

/* Many reads of a large file, or a small one's read with its close. */
Test(uring_fs, loop_free_with_reads_in_the_kernel)
{
    put_bytes("f", 300000);
    put_bytes("small", 100);
    unsigned fds = count_fds();
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.step_bytes = 4096;
    for (unsigned turns = 0; turns < 12; turns++) {
        bool small = turns >= 6;
        tern_loop *loop = uring_loop();
        static struct rec r[MANY];
        memset(r, 0, sizeof r);
        for (int i = 0; i < MANY; i++)
            cr_assert_eq(
                tern_fs_read_file(loop, at(small ? "small" : "f"), &o, rec_cb, &r[i], NULL), 0);
        for (unsigned t = 0; t < turns % 6; t++)
            (void)tern_loop_run_once(loop, 0);
        tern_loop_free(loop);
        for (int i = 0; i < MANY; i++) {
            cr_assert_eq(atomic_load(&r[i].n), 1, "request %d: %u callbacks", i,
                         atomic_load(&r[i].n));
            cr_assert(r[i].status == 0 || r[i].status == -ECANCELED, "status %d", r[i].status);
            if (r[i].status == 0)
                check_bytes(&r[i], small ? 100 : 300000);
            tern_fs_free(r[i].data);
        }
    }
    cr_assert_eq(count_fds(), fds, "a descriptor was left open");
}

#else

Test(uring_fs, not_built)
{
    cr_skip_test("io_uring is not built");
}

#endif
