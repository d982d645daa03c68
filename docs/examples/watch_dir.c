/*
 * watch_dir: print what changes in a directory.
 *
 *   ./watch_dir DIR    watch DIR until it is removed (or Ctrl-C)
 *   ./watch_dir        make a temporary directory, watch it, and change
 *                      it from a timer: create a file, write it, rename
 *                      it, remove it, remove the directory; exits 0 once
 *                      the watch has ended with TERN_WATCH_GONE.
 *
 * Names are printed when the system reports them (inotify on Linux); the
 * stat-polling fallback of other systems reports that something changed,
 * polling every 50 ms here.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tern.h"

static char dir[256];
static int step;
static bool gone;

static void on_change(tern_loop *loop, tern_id id, int status, unsigned events,
                      const char *name, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
    if (status < 0) {
        printf("watch ended: %s%s\n", tern_err_name(status),
               events & TERN_WATCH_GONE ? " (the directory was removed)" : "");
        gone = (events & TERN_WATCH_GONE) != 0;
        return;
    }
    printf("%s%s%s\n", events & TERN_WATCH_CHANGE ? "changed " : "",
           events & TERN_WATCH_RENAME ? "added/removed/renamed " : "", name ? name : "(no name)");
}

/* The self-test: one change to the directory per tick. */
static void tick(tern_loop *loop, tern_id id, void *arg)
{
    (void)arg;
    char a[300], b[300];
    snprintf(a, sizeof a, "%s/hello.txt", dir);
    snprintf(b, sizeof b, "%s/renamed.txt", dir);
    int fd;
    switch (step++) {
    case 0:
        fd = open(a, O_CREAT | O_WRONLY, 0644);
        if (fd >= 0)
            close(fd);
        break;
    case 1:
        fd = open(a, O_WRONLY | O_APPEND);
        if (fd >= 0) {
            ssize_t n = write(fd, "hi\n", 3);
            (void)n;
            close(fd);
        }
        break;
    case 2:
        rename(a, b);
        break;
    case 3:
        unlink(b);
        break;
    default:
        rmdir(dir);
        tern_timer_stop(loop, id);
        break;
    }
}

int main(int argc, char **argv)
{
    bool self_test = argc < 2;
    if (self_test) {
        snprintf(dir, sizeof dir, "/tmp/tern-watch-dir-XXXXXX");
        if (mkdtemp(dir) == NULL) {
            perror("mkdtemp");
            return 1;
        }
    } else {
        snprintf(dir, sizeof dir, "%s", argv[1]);
    }
    tern_loop *loop;
    if (tern_loop_new(&loop, NULL) < 0)
        return 1;
    int rc = tern_watch_start(loop, dir, 50 * 1000000ull, on_change, NULL, NULL);
    if (rc < 0) {
        fprintf(stderr, "tern_watch_start(%s): %s\n", dir, tern_strerror(rc));
        return 1;
    }
    printf("watching %s\n", dir);
    if (self_test)
        tern_timer_start(loop, 100 * 1000000ull, 100 * 1000000ull, tick, NULL, NULL);
    tern_loop_run(loop); /* returns once the watch has ended */
    tern_loop_free(loop);
    if (self_test)
        printf("%s\n", gone ? "watch_dir: ok" : "watch_dir: FAILED");
    return gone ? 0 : 1;
}
