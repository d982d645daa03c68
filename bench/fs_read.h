/*
 * The file set both twins of the fs_read benchmark read: `files` files of
 * `size` bytes in a fresh directory under /tmp, each filled with a byte
 * derived from its index so a reader can tell it got the right one.
 * Written (and so in the page cache) before the clock starts, removed
 * afterwards.
 *
 * And the floor both twins measure after their loop's run, on the same
 * files in the same process: fs_floor reads the set again with no loop,
 * from one plain thread per online CPU, each taking the next file and
 * doing open, fstat, read, close on it synchronously, with the same
 * allocation per file (the size plus a NUL) the loop twins make, round
 * the set again and again for floor_ms (200 ms by default), so a small
 * set (bench/run --quick) still gives a floor steadier than its own
 * thread starts and stray preemptions. That is
 * what the machine's cores can do with the calls alone; a runtime's
 * files/s over it is the share of the cores its loop, pool and hand-offs
 * leave to the work.
 */
#ifndef TERN_BENCH_FS_READ_H
#define TERN_BENCH_FS_READ_H

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sys/stat.h>

#include "bench.h"

static char fs_dir[64];

static inline unsigned char fs_byte(unsigned long i)
{
    return (unsigned char)('a' + i % 26);
}

static inline void fs_path(char *out, size_t cap, unsigned long i)
{
    snprintf(out, cap, "%s/f%05lu", fs_dir, i);
}

static inline void fs_make(unsigned long files, unsigned long size)
{
    snprintf(fs_dir, sizeof fs_dir, "/tmp/tern_bench_fs.XXXXXX");
    BENCH_CHECK(mkdtemp(fs_dir) != NULL, "mkdtemp: %s", strerror(errno));
    char *buf = malloc(size ? size : 1);
    BENCH_CHECK(buf != NULL, "malloc");
    for (unsigned long i = 0; i < files; i++) {
        char p[128];
        fs_path(p, sizeof p, i);
        memset(buf, fs_byte(i), size);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        BENCH_CHECK(fd >= 0, "open %s: %s", p, strerror(errno));
        BENCH_CHECK(write(fd, buf, size) == (ssize_t)size, "write %s", p);
        close(fd);
    }
    free(buf);
}

static struct {
    unsigned long files, size;
    uint64_t deadline_ns;
    _Atomic unsigned long next, done;
    _Atomic uint64_t ready, go;
} fs_fl;

static void *fs_floor_thread(void *arg)
{
    (void)arg;
    atomic_fetch_add(&fs_fl.ready, 1);
    bench_wait_at_least(&fs_fl.go, 1);
    unsigned long done = 0;
    for (;; done++) {
        if (bench_now_ns() >= fs_fl.deadline_ns) {
            atomic_fetch_add(&fs_fl.done, done);
            return NULL;
        }
        unsigned long i =
            atomic_fetch_add_explicit(&fs_fl.next, 1, memory_order_relaxed) % fs_fl.files;
        char p[128];
        fs_path(p, sizeof p, i);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        BENCH_CHECK(fd >= 0, "floor open %s: %s", p, strerror(errno));
        struct stat st;
        BENCH_CHECK(fstat(fd, &st) == 0, "floor fstat: %s", strerror(errno));
        size_t len = (size_t)st.st_size, got = 0;
        char *buf = malloc(len + 1);
        BENCH_CHECK(buf != NULL, "malloc");
        while (got < len) {
            ssize_t n = read(fd, buf + got, len - got);
            BENCH_CHECK(n > 0, "floor read: %s", n < 0 ? strerror(errno) : "end of file");
            got += (size_t)n;
        }
        buf[got] = '\0';
        BENCH_CHECK(got == fs_fl.size && (got == 0 || (unsigned char)buf[0] == fs_byte(i)),
                    "floor file %lu: wrong content", i);
        free(buf);
        close(fd);
    }
}

/* The synchronous floor over the first `files` files of the set, from
 * `threads` threads (0: one per online CPU), for ms milliseconds; returns
 * files/s. The clock starts once every thread is ready and stops when the
 * last is joined. */
static inline double fs_floor(unsigned long files, unsigned long size, unsigned long threads,
                              unsigned long ms)
{
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (unsigned long)n : 1;
    }
    fs_fl.files = files;
    fs_fl.size = size;
    atomic_store(&fs_fl.next, 0);
    atomic_store(&fs_fl.done, 0);
    atomic_store(&fs_fl.ready, 0);
    atomic_store(&fs_fl.go, 0);
    pthread_t *t = calloc(threads, sizeof *t);
    BENCH_CHECK(t != NULL, "calloc");
    for (unsigned long i = 0; i < threads; i++)
        BENCH_CHECK(pthread_create(&t[i], NULL, fs_floor_thread, NULL) == 0, "pthread_create");
    bench_wait_at_least(&fs_fl.ready, threads);
    uint64_t t0 = bench_now_ns();
    fs_fl.deadline_ns = t0 + (uint64_t)ms * 1000000u;
    atomic_store_explicit(&fs_fl.go, 1, memory_order_release);
    for (unsigned long i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    uint64_t t1 = bench_now_ns();
    free(t);
    return (double)atomic_load(&fs_fl.done) / ((double)(t1 - t0) / 1e9);
}

/* The floor's figures beside a twin's own files/s: the floor
 * (fs_read_floor_files_per_s) and the twin's share of it
 * (fs_read_floor_share). floor=0 leaves them out; floor_threads=N sets the
 * floor's threads (default 0, one per online CPU), floor_ms its length. */
static inline void fs_floor_figures(int argc, char **argv, unsigned long files,
                                    unsigned long size, double files_per_s)
{
    if (bench_arg(argc, argv, "floor", 1) == 0)
        return;
    double floor = fs_floor(files, size, bench_arg(argc, argv, "floor_threads", 0),
                            bench_arg(argc, argv, "floor_ms", 200));
    bench_figure("fs_read_floor_files_per_s", floor, "files/s");
    bench_figure("fs_read_floor_share", files_per_s / floor, "share");
}

static inline void fs_remove(unsigned long files)
{
    for (unsigned long i = 0; i < files; i++) {
        char p[128];
        fs_path(p, sizeof p, i);
        unlink(p);
    }
    rmdir(fs_dir);
}

#endif
