/*
 * tern_stream_read_start_alloc's allocator (tern/net.h, tern_alloc_cb):
 * returning NULL, or setting *len to 0, makes that read report -ENOBUFS
 * and reading goes on, with nothing lost (the bytes arrive with the next
 * read); an allocator that stops reading makes no read happen, and the
 * bytes wait for the next tern_stream_read_start; one that closes the
 * stream gets no read callback, and its close callback runs once.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tern.h"
#include "tern/net.h"

#define TEST_TIMEOUT 60

enum mode { GIVE_NULL, GIVE_ZERO, STOP, CLOSE };

static enum mode mode;
static int allocs, nobufs, closes, reads;
static char buf[64];
static char seen[64];
static size_t seen_len;

static void *alloc(tern_loop *loop, tern_id id, size_t *len, void *arg)
{
    (void)arg;
    allocs++;
    if (allocs == 1) {
        switch (mode) {
        case GIVE_NULL:
            return NULL;
        case GIVE_ZERO:
            *len = 0;
            return buf;
        case STOP:
            cr_assert_eq(tern_stream_read_stop(loop, id), 0);
            return buf;
        case CLOSE:
            cr_assert_eq(tern_stream_close(loop, id), 0);
            return buf;
        }
    }
    *len = sizeof buf;
    return buf;
}

static void on_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                    void *arg)
{
    (void)arg;
    reads++;
    if (status == -ENOBUFS) {
        nobufs++;
        return;
    }
    cr_assert_eq(status, 0, "read status %d", status);
    cr_assert_lt(seen_len + len, sizeof seen);
    memcpy(seen + seen_len, data, len);
    seen_len += len;
    if (seen_len == 5)
        cr_assert_eq(tern_stream_close(loop, id), 0);
}

static void on_close(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id, (void)arg;
    closes++;
}

static void run_mode(enum mode m)
{
    mode = m;
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    tern_id id = 0;
    cr_assert_eq(tern_stream_open(loop, sv[0], &id), 0);
    cr_assert_eq(tern_stream_on_close(loop, id, on_close, NULL), 0);
    cr_assert_eq(write(sv[1], "hello", 5), 5);
    cr_assert_eq(tern_stream_read_start_alloc(loop, id, alloc, on_read, NULL), 0);
    if (m == STOP) {
        /* Stopped by the allocator: turns pass, the stream stays live and idle. */
        cr_assert_eq(tern_loop_run_once(loop, 0), 1);
        cr_assert_eq(tern_loop_run_once(loop, 0), 1);
        cr_assert_eq(reads, 0, "a read happened after the allocator stopped reading");
        cr_assert_eq(tern_stream_read_start_alloc(loop, id, alloc, on_read, NULL), 0);
    }
    cr_assert_eq(tern_loop_run(loop), 0);
    tern_loop_free(loop);
    close(sv[1]);
}

Test(stream_alloc, null_is_enobufs_and_nothing_is_lost, .timeout = TEST_TIMEOUT)
{
    run_mode(GIVE_NULL);
    cr_assert_eq(nobufs, 1);
    cr_assert_eq(seen_len, 5);
    cr_assert_eq(memcmp(seen, "hello", 5), 0);
    cr_assert_eq(closes, 1);
}

Test(stream_alloc, zero_length_is_enobufs_and_nothing_is_lost, .timeout = TEST_TIMEOUT)
{
    run_mode(GIVE_ZERO);
    cr_assert_eq(nobufs, 1);
    cr_assert_eq(seen_len, 5);
    cr_assert_eq(memcmp(seen, "hello", 5), 0);
    cr_assert_eq(closes, 1);
}

Test(stream_alloc, an_allocator_that_stops_reading_gets_no_read, .timeout = TEST_TIMEOUT)
{
    run_mode(STOP);
    cr_assert_eq(nobufs, 0);
    cr_assert_eq(seen_len, 5, "the bytes did not wait for the next read start");
    cr_assert_eq(memcmp(seen, "hello", 5), 0);
    cr_assert_eq(closes, 1);
}

Test(stream_alloc, an_allocator_that_closes_gets_no_read, .timeout = TEST_TIMEOUT)
{
    run_mode(CLOSE);
    cr_assert_eq(reads, 0, "%d read callbacks after the allocator closed the stream", reads);
    cr_assert_eq(allocs, 1);
    cr_assert_eq(closes, 1);
}
