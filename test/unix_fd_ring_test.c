/*
 * Descriptors passed over a Unix-domain stream wait in a ring until taken
 * (tern_unix_take_fd, include/tern/net.h): "in the order they arrived"
 * holds when the ring has wrapped (some taken from its front, more
 * arrived behind) and then grows, which moves the waiting ones to a
 * larger ring. Each descriptor is a memfd named by its place in the
 * sending order, so the order taken is read back from its name. And an
 * abstract name longer than sun_path is refused at the call, for listen
 * and for connect.
 */
#include "loop_helpers.h"
#include "tested_backend.h"

#include <limits.h>
#include <sys/mman.h>

struct conn {
    tern_id listener, server, client;
    atomic_uint accepted, connected, written;
    atomic_size_t got;
};

static void on_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                    void *arg)
{
    (void)loop, (void)id, (void)data;
    struct conn *c = arg;
    if (status == 0)
        atomic_fetch_add(&c->got, len);
}

static void on_accept(tern_loop *loop, tern_id listener, int status, tern_id stream, void *arg)
{
    (void)loop, (void)listener;
    struct conn *c = arg;
    cr_assert_eq(status, 0);
    c->server = stream;
    atomic_fetch_add(&c->accepted, 1);
}

static void on_connect(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id;
    cr_assert_eq(status, 0, "connect: %s", tern_err_name(status));
    atomic_fetch_add(&((struct conn *)arg)->connected, 1);
}

static void on_written(tern_loop *loop, tern_id id, int status, void *arg)
{
    (void)loop, (void)id;
    cr_assert_eq(status, 0, "write: %s", tern_err_name(status));
    atomic_fetch_add(&((struct conn *)arg)->written, 1);
}

/* The place in the sending order of a memfd made by send_range. */
static int place_of(int fd)
{
    char link[64], target[128];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    cr_assert_gt(n, 0);
    target[n] = '\0';
    int k = -1;
    cr_assert_eq(sscanf(target, "/memfd:tern-ring-%d", &k), 1, "not one of ours: %s", target);
    return k;
}

/* Pass memfds first..last-1, one write with one byte each. */
static void send_range(tern_loop *loop, struct conn *c, int first, int last)
{
    unsigned before = atomic_load(&c->written);
    size_t got = atomic_load(&c->got);
    for (int k = first; k < last; k++) {
        char name[32];
        snprintf(name, sizeof name, "tern-ring-%d", k);
        int fd = memfd_create(name, MFD_CLOEXEC);
        cr_assert_geq(fd, 0);
        tern_buf b = {"x", 1};
        cr_assert_geq(tern_unix_write_fds(loop, c->client, &b, 1, &fd, 1, on_written, c), 0);
        close(fd);
    }
    unsigned n = (unsigned)(last - first);
    cr_assert(run_until_count(loop, &c->written, before + n, 10 * (int64_t)MS, 2000));
    uint64_t end = mono_ns() + LIVENESS_NS;
    while (atomic_load(&c->got) < got + n && mono_ns() < end)
        tern_loop_run_once(loop, 5 * (int64_t)MS);
    cr_assert_eq(atomic_load(&c->got), got + n, "the bytes that carry the descriptors");
}

static void take_expect(tern_loop *loop, struct conn *c, int first, int last)
{
    for (int k = first; k < last; k++) {
        int fd = tern_unix_take_fd(loop, c->server);
        cr_assert_geq(fd, 0, "descriptor %d: %s", k, tern_err_name(fd));
        int got = place_of(fd);
        close(fd);
        cr_assert_eq(got, k, "taken out of order: %d where %d was next", got, k);
    }
}

Test(unix_fd_ring, descriptors_keep_their_order_when_a_wrapped_ring_grows,
     .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    char name[64];
    snprintf(name, sizeof name, "@tern-unix-ring-%d", (int)getpid());
    static struct conn c;
    cr_assert_eq(tern_unix_listen(loop, name, TERN_TCP_BACKLOG_DEFAULT, on_accept, &c,
                                  &c.listener), 0);
    cr_assert_eq(tern_unix_connect(loop, name, on_connect, &c, &c.client), 0);
    cr_assert(run_until_count(loop, &c.connected, 1, 10 * (int64_t)MS, 1000));
    cr_assert(run_until_count(loop, &c.accepted, 1, 10 * (int64_t)MS, 1000));
    cr_assert_eq(tern_stream_read_start(loop, c.server, on_read, &c), 0);
    int fds = count_open_fds();

    send_range(loop, &c, 0, 6);
    take_expect(loop, &c, 0, 4);  /* the front moves: two wait, not at the start */
    send_range(loop, &c, 6, 20); /* wraps the ring, then outgrows it */
    take_expect(loop, &c, 4, 20);
    cr_assert_eq(tern_unix_take_fd(loop, c.server), -EAGAIN, "more than was sent");
    cr_assert_eq(count_open_fds(), fds, "a passed descriptor was left open");

    cr_assert_eq(tern_stream_close(loop, c.client), 0);
    cr_assert_eq(tern_stream_close(loop, c.server), 0);
    cr_assert_eq(tern_stream_close(loop, c.listener), 0);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}

Test(unix_fd_ring, an_abstract_name_too_long_is_refused_at_the_call, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_tested();
    char name[200];
    memset(name, 'n', sizeof name - 1);
    name[0] = '@';
    name[sizeof name - 1] = '\0';
    static struct conn c;
    tern_id id = 0;
    cr_assert_eq(tern_unix_listen(loop, name, TERN_TCP_BACKLOG_DEFAULT, on_accept, &c, &id),
                 -ENAMETOOLONG);
    cr_assert_eq(tern_unix_connect(loop, name, on_connect, &c, &id), -ENAMETOOLONG);
    cr_assert_eq(loop_live(loop), 0, "a refused call left an operation");
    loop_free_clean(loop);
}
