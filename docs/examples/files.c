/*
 * files: typed file requests on the pool.
 *
 * In a fresh directory under /tmp it writes a file atomically
 * (tern_fs_write_file), reads it back whole (tern_fs_read_file), lists
 * the directory (tern_fs_list), stats the file, and then cancels a
 * whole-file read it has just started. Each callback starts the next
 * request, so the program is a small chain on one loop. It checks every
 * result, prints what happened, removes its directory, and exits 0 only
 * if everything held, including: nothing reserved or queued at the end,
 * and the same number of open descriptors as at the start.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tern.h>

static char dir[64], path[128];
static const char text[] = "written atomically, read back whole\n";
static int failures;

#define EXPECT(cond, ...)                                                                    \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            printf("FAIL: " __VA_ARGS__);                                                    \
            printf("\n");                                                                    \
            failures++;                                                                      \
        }                                                                                    \
    } while (0)

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (d == NULL)
        return -1;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

static void cancelled(tern_loop *loop, tern_id id, int status, tern_fs_result *res, void *arg)
{
    (void)loop, (void)id, (void)arg;
    /* Cancelled before it could finish: nothing returned, nothing left open. */
    EXPECT(status == -ECANCELED || status == 0, "cancelled read: %s", tern_strerror(status));
    printf("a read cancelled at once ended with %s\n", tern_err_name(status));
    tern_fs_free(res->data); /* NULL unless it had already finished */
}

static void statted(tern_loop *loop, tern_id id, int status, tern_fs_result *res, void *arg)
{
    (void)id, (void)arg;
    EXPECT(status == 0, "stat: %s", tern_strerror(status));
    EXPECT(res->st.st_size == (off_t)strlen(text), "stat size %lld", (long long)res->st.st_size);
    printf("stat: %lld bytes, mode %o\n", (long long)res->st.st_size,
           (unsigned)(res->st.st_mode & 0777));
    /* Start a read and cancel it straight away. */
    tern_id rid;
    int rc = tern_fs_read_file(loop, path, NULL, cancelled, NULL, &rid);
    EXPECT(rc == 0, "read_file: %s", tern_strerror(rc));
    if (rc == 0)
        tern_cancel(loop, rid);
}

static void listed(tern_loop *loop, tern_id id, int status, tern_fs_result *res, void *arg)
{
    (void)id, (void)arg;
    EXPECT(status == 0, "list: %s", tern_strerror(status));
    if (status == 0) {
        printf("the directory holds %zu entr%s:", res->listing->count,
               res->listing->count == 1 ? "y" : "ies");
        for (size_t i = 0; i < res->listing->count; i++)
            printf(" %s", res->listing->entries[i].name);
        printf("\n");
        /* Only the file: no temporary left behind by the atomic write. */
        EXPECT(res->listing->count == 1, "%zu entries", res->listing->count);
        tern_fs_free(res->listing);
    }
    int rc = tern_fs_stat(loop, path, NULL, statted, NULL, NULL);
    EXPECT(rc == 0, "stat: %s", tern_strerror(rc));
}

static void read_back(tern_loop *loop, tern_id id, int status, tern_fs_result *res, void *arg)
{
    (void)id, (void)arg;
    EXPECT(status == 0, "read_file: %s", tern_strerror(status));
    if (status == 0) {
        EXPECT(res->value == (int64_t)strlen(text) && memcmp(res->data, text, strlen(text)) == 0,
               "read back other bytes");
        printf("read back %lld bytes: %s", (long long)res->value, (char *)res->data);
        tern_fs_free(res->data); /* the callback owns the contents */
    }
    int rc = tern_fs_list(loop, dir, NULL, listed, NULL, NULL);
    EXPECT(rc == 0, "list: %s", tern_strerror(rc));
}

static void written(tern_loop *loop, tern_id id, int status, tern_fs_result *res, void *arg)
{
    (void)id, (void)arg;
    EXPECT(status == 0, "write_file: %s", tern_strerror(status));
    printf("wrote %lld bytes to %s\n", (long long)res->value, path);
    /* Read it back in steps of 8 bytes, just to take several passes. */
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.step_bytes = 8;
    int rc = tern_fs_read_file(loop, path, &o, read_back, NULL, NULL);
    EXPECT(rc == 0, "read_file: %s", tern_strerror(rc));
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/tern_files_example.XXXXXX");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(path, sizeof path, "%s/greeting.txt", dir);
    tern_loop *loop;
    int rc = tern_loop_new(&loop, NULL);
    if (rc < 0) {
        fprintf(stderr, "tern_loop_new: %s\n", tern_strerror(rc));
        return 1;
    }
    int fds = open_fds();

    /* The bytes must stay valid until the callback: text is static. */
    rc = tern_fs_write_file(loop, path, text, strlen(text), NULL, written, NULL, NULL);
    EXPECT(rc == 0, "write_file: %s", tern_strerror(rc));
    /* Bad values are refused at once, and nothing starts. */
    EXPECT(tern_fs_read_file(loop, NULL, NULL, read_back, NULL, NULL) == -EINVAL, "NULL path");
    EXPECT(tern_fs_close(loop, -1, NULL, written, NULL, NULL) == -EBADF, "negative fd");
    tern_loop_run(loop);

    EXPECT(open_fds() == fds, "descriptors: %d at the start, %d now", fds, open_fds());
    tern_loop_free(loop);
    /* A cancelled request's record may still sit in the queue until a
     * worker walks past it; the drain waits for that. */
    tern_pool_shutdown(TERN_POOL_DRAIN, 1000000000u);
    tern_pool_stats ps;
    tern_pool_stats_get(&ps);
    printf("pool: %llu submitted, %llu completed, %llu cancelled; queued %u, reserved %u\n",
           (unsigned long long)ps.submitted, (unsigned long long)ps.completed,
           (unsigned long long)ps.cancelled, ps.queued, ps.reserved);
    EXPECT(ps.queued == 0 && ps.reserved == 0, "slots still held");
    unlink(path);
    EXPECT(rmdir(dir) == 0, "the directory is not empty: a temporary was left");
    printf(failures ? "files: %d failure(s)\n" : "files: ok\n", failures);
    return failures != 0;
}
