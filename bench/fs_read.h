/*
 * The file set both twins of the fs_read benchmark read: `files` files of
 * `size` bytes in a fresh directory under /tmp, each filled with a byte
 * derived from its index so a reader can tell it got the right one.
 * Written (and so in the page cache) before the clock starts, removed
 * afterwards.
 */
#ifndef TERN_BENCH_FS_READ_H
#define TERN_BENCH_FS_READ_H

#include <fcntl.h>
#include <limits.h>

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
