/*
 * Bad input for every public loop function (SPEC §8): each bad value is
 * the documented negative errno and changes nothing — live_operations is
 * unchanged, out-parameters are untouched, and the loop stays usable.
 */
#include "loop_helpers.h"

#include <sys/stat.h>

static void count_cb(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

static void count_fn(tern_loop *loop, void *arg)
{
    (void)loop;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

static void io_count_cb(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    (void)loop;
    (void)id;
    (void)fd;
    (void)events;
    atomic_fetch_add((atomic_uint *)arg, 1);
}

/* Prove the loop still works after a series of refusals: a fresh timer
 * fires exactly once and leaves nothing live. */
static void assert_loop_usable(tern_loop *loop)
{
    atomic_uint fired = 0;
    tern_id id = 0;
    unsigned live = loop_live(loop);
    cr_assert_eq(tern_timer_start(loop, 0, 0, count_cb, &fired, &id), 0);
    cr_assert_neq(id, 0);
    cr_assert_eq(loop_live(loop), live + 1);
    cr_assert(run_until_count(loop, &fired, 1, 0, 100));
    cr_assert_eq(atomic_load(&fired), 1);
    cr_assert_eq(loop_live(loop), live);
}

/* ---------------------------------------------------------------- */
/* tern_loop_new / options                                           */
/* ---------------------------------------------------------------- */

Test(api, options_init_gives_the_documented_defaults)
{
    tern_loop_options o;
    memset(&o, 0xff, sizeof o);
    tern_loop_options_init(&o);
    cr_assert_eq(o.dispatch_batch, 64);
    cr_assert_eq(o.max_operations, 65536);
    cr_assert_eq(o.max_undelivered, 4096);
    cr_assert_null(o.pool);
    cr_assert_null(o.backend);
    cr_assert_eq(o.flags, 0);
}

static void expect_new_refused(const tern_loop_options *o, const char *what)
{
    tern_loop *sentinel = (tern_loop *)(uintptr_t)0x1234;
    tern_loop *loop = sentinel;
    int rc = tern_loop_new(&loop, o);
    cr_expect_eq(rc, -EINVAL, "%s: got %d (%s)", what, rc, tern_err_name(rc));
    cr_expect_eq(loop, sentinel, "%s: *loopp changed on error", what);
    if (rc == 0 && loop != sentinel)
        tern_loop_free(loop);
}

static void expect_new_accepted(const tern_loop_options *o, const char *what)
{
    tern_loop *loop = NULL;
    int rc = tern_loop_new(&loop, o);
    cr_expect_eq(rc, 0, "%s: got %d (%s)", what, rc, tern_err_name(rc));
    if (rc == 0) {
        assert_loop_usable(loop);
        loop_free_clean(loop);
    }
}

Test(api, loop_new_options_out_of_range, .timeout = TEST_TIMEOUT)
{
    tern_loop_options o;

    tern_loop_options_init(&o);
    o.dispatch_batch = 0;
    expect_new_refused(&o, "dispatch_batch 0");
    o.dispatch_batch = (1u << 20) + 1;
    expect_new_refused(&o, "dispatch_batch 2^20+1");
    o.dispatch_batch = UINT32_MAX;
    expect_new_refused(&o, "dispatch_batch UINT_MAX");

    tern_loop_options_init(&o);
    o.max_operations = 0;
    expect_new_refused(&o, "max_operations 0");
    o.max_operations = (1u << 31) + 1;
    expect_new_refused(&o, "max_operations 2^31+1");

    tern_loop_options_init(&o);
    o.max_undelivered = 0;
    expect_new_refused(&o, "max_undelivered 0");
    o.max_undelivered = (1u << 31) + 1;
    expect_new_refused(&o, "max_undelivered 2^31+1");

    tern_loop_options_init(&o);
    o.backend = "no-such-backend";
    expect_new_refused(&o, "unknown backend");
    o.backend = "";
    expect_new_refused(&o, "empty backend name");
#ifndef TERN_HAVE_KQUEUE
    o.backend = "kqueue";
    expect_new_refused(&o, "kqueue where it is not built");
#endif

    tern_loop_options_init(&o);
    o.flags = 1u << 7;
    expect_new_refused(&o, "unknown flag bit");
    o.flags = TERN_LOOP_RCU | (1u << 31);
    expect_new_refused(&o, "a known flag with an unknown one");

    tern_pool_config cfg;
    tern_pool_config_init(&cfg);
    cfg.threads = 0;
    tern_loop_options_init(&o);
    o.pool = &cfg;
    expect_new_refused(&o, "pool threads 0");
}

Test(api, loop_new_accepts_the_range_bounds, .timeout = TEST_TIMEOUT)
{
    tern_loop_options o;

    tern_loop_options_init(&o);
    o.dispatch_batch = 1;
    expect_new_accepted(&o, "dispatch_batch 1");
    o.dispatch_batch = 1u << 20;
    expect_new_accepted(&o, "dispatch_batch 2^20");

    /* The upper bounds must not make the loop preallocate for them: the
     * ring is sized by min(max_undelivered, max_operations). */
    tern_loop_options_init(&o);
    o.max_operations = 1u << 31;
    expect_new_accepted(&o, "max_operations 2^31");
    o.max_operations = 1;
    expect_new_accepted(&o, "max_operations 1");

    tern_loop_options_init(&o);
    o.max_undelivered = 1;
    expect_new_accepted(&o, "max_undelivered 1");

    for (size_t i = 0; tern__backend_names[i] != NULL; i++) {
        tern_loop_options_init(&o);
        o.backend = tern__backend_names[i];
        expect_new_accepted(&o, tern__backend_names[i]);
    }

    tern_loop_options_init(&o);
    o.flags = TERN_LOOP_RCU;
    expect_new_accepted(&o, "TERN_LOOP_RCU");

    expect_new_accepted(NULL, "NULL options");
}

Test(api, fresh_loop_statistics_are_zero)
{
    tern_loop *loop = loop_new_default();
    tern_loop_stats s = loop_stats(loop);
    cr_assert_eq(s.turns, 0);
    cr_assert_eq(s.posts, 0);
    cr_assert_eq(s.wake_syscalls, 0);
    cr_assert_eq(s.events, 0);
    cr_assert_eq(s.live_operations, 0);
    cr_assert_eq(s.undelivered, 0);
    cr_assert_eq(s.undelivered_peak, 0);
    cr_assert_eq(tern_loop_next_timeout(loop), -1);
    cr_assert_geq(tern_loop_backend_fd(loop), 0);
    loop_free_clean(loop);
}

/* ---------------------------------------------------------------- */
/* posts, defers, cancel, ref/unref                                  */
/* ---------------------------------------------------------------- */

Test(api, post_and_defer_refuse_a_null_function, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    cr_assert_eq(tern_post(loop, NULL, NULL), -EINVAL);
    cr_assert_eq(tern_defer(loop, NULL, NULL), -EINVAL);
    cr_assert_eq(loop_live(loop), 0);
    cr_assert_eq(tern_loop_next_timeout(loop), -1, "a refused post or defer left work behind");
    cr_assert_eq(tern_loop_run_once(loop, 0), 0);
    cr_assert_eq(loop_stats(loop).posts, 0);
    assert_loop_usable(loop);
    loop_free_clean(loop);
}

Test(api, cancel_ref_unref_bad_ids, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    atomic_uint fired = 0;
    tern_id live_id = 0;
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, count_cb, &fired, &live_id), 0);

    cr_assert_eq(tern__test_cancel_now(loop, 0), -EINVAL);
    cr_assert_eq(tern_ref(loop, 0), -EINVAL);
    cr_assert_eq(tern_unref(loop, 0), -EINVAL);

    /* Ids near the live one, and far from it, name nothing. */
    const tern_id unknown[] = { live_id + 1, live_id + 1000, live_id ^ (UINT64_C(1) << 40),
                                UINT64_MAX, UINT64_MAX - 1, 1 };
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        if (unknown[i] == live_id)
            continue;
        cr_expect_eq(tern__test_cancel_now(loop, unknown[i]), -ENOENT, "cancel %#llx",
                     (unsigned long long)unknown[i]);
        cr_expect_eq(tern_ref(loop, unknown[i]), -ENOENT);
        cr_expect_eq(tern_unref(loop, unknown[i]), -ENOENT);
    }
    cr_assert_eq(loop_live(loop), 1, "a bad id touched the live timer");

    /* The live timer is still there and still referenced-by-default. */
    cr_assert_eq(tern_unref(loop, live_id), 0);
    cr_assert_eq(tern_unref(loop, live_id), 0, "unref is idempotent");
    cr_assert_eq(tern_ref(loop, live_id), 0);
    cr_assert_eq(tern_ref(loop, live_id), 0, "ref is idempotent");
    cr_assert_eq(tern__test_cancel_now(loop, live_id), 0);

    /* Now stale: every call says -ENOENT. */
    cr_assert_eq(tern__test_cancel_now(loop, live_id), -ENOENT);
    cr_assert_eq(tern_ref(loop, live_id), -ENOENT);
    cr_assert_eq(tern_unref(loop, live_id), -ENOENT);
    cr_assert_eq(tern_timer_stop(loop, live_id), -ENOENT);
    cr_assert_eq(atomic_load(&fired), 0);
    cr_assert_eq(loop_live(loop), 0);
    assert_loop_usable(loop);
    loop_free_clean(loop);
}

/* ---------------------------------------------------------------- */
/* timers                                                            */
/* ---------------------------------------------------------------- */

Test(api, timer_start_bad_values, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    atomic_uint fired = 0;
    const tern_id untouched = 0x5eed;
    tern_id id = untouched;
    const uint64_t too_far = (UINT64_C(1) << 62) + 1;

    cr_assert_eq(tern_timer_start(loop, 0, 0, NULL, &fired, &id), -EINVAL);
    cr_assert_eq(tern_timer_start(loop, too_far, 0, count_cb, &fired, &id), -EINVAL);
    cr_assert_eq(tern_timer_start(loop, 0, too_far, count_cb, &fired, &id), -EINVAL);
    cr_assert_eq(tern_timer_start(loop, UINT64_MAX, 0, count_cb, &fired, &id), -EINVAL);
    cr_assert_eq(tern_timer_start(loop, 1, UINT64_MAX, count_cb, &fired, &id), -EINVAL);
    cr_assert_eq(id, untouched, "*idp changed on a refused start");
    cr_assert_eq(loop_live(loop), 0);
    cr_assert_eq(tern_loop_next_timeout(loop), -1);

    /* 2^62 itself is the largest legal delay and repeat; idp may be NULL. */
    cr_assert_eq(tern_timer_start(loop, UINT64_C(1) << 62, UINT64_C(1) << 62, count_cb, &fired,
                                  &id), 0);
    cr_assert_neq(id, untouched);
    cr_assert_neq(id, 0);
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, count_cb, &fired, NULL), 0);
    cr_assert_eq(loop_live(loop), 2);
    cr_assert_eq(tern_timer_stop(loop, id), 0);
    cr_assert_eq(loop_live(loop), 1);
    /* The timer started without an id can only go with the loop. */
    tern_loop_free(loop);
    cr_assert_eq(atomic_load(&fired), 0, "tern_loop_free ran a timer callback");
}

Test(api, timer_stop_bad_ids, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    atomic_uint fired = 0, io_fired = 0;
    int p[2];
    make_pipe(p);
    tern_id wid = 0, tid = 0;
    cr_assert_eq(tern_io_start(loop, p[0], TERN_READABLE, io_count_cb, &io_fired, &wid), 0);
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, count_cb, &fired, &tid), 0);

    cr_assert_eq(tern_timer_stop(loop, 0), -EINVAL);
    cr_assert_eq(tern_timer_stop(loop, tid + 12345), -ENOENT);
    cr_assert_eq(tern_timer_stop(loop, wid), -ENOENT, "a watcher id is not a timer");
    cr_assert_eq(loop_live(loop), 2);

    /* The watcher survived being named as a timer. */
    write_byte(p[1]);
    cr_assert(run_until_count(loop, &io_fired, 1, 0, 10));

    cr_assert_eq(tern_timer_stop(loop, tid), 0);
    cr_assert_eq(tern_timer_stop(loop, tid), -ENOENT, "stopped twice");
    cr_assert_eq(tern_io_stop(loop, wid), 0);

    /* A timer whose callback ran is stale too. */
    tern_id fired_id = 0;
    cr_assert_eq(tern_timer_start(loop, 0, 0, count_cb, &fired, &fired_id), 0);
    cr_assert(run_until_count(loop, &fired, 1, 0, 10));
    cr_assert_eq(tern_timer_stop(loop, fired_id), -ENOENT);
    cr_assert_eq(tern__test_cancel_now(loop, fired_id), -ENOENT);

    close(p[0]);
    close(p[1]);
    assert_loop_usable(loop);
    loop_free_clean(loop);
}

/* ---------------------------------------------------------------- */
/* fd watchers                                                       */
/* ---------------------------------------------------------------- */

Test(api, io_start_bad_values, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    atomic_uint n = 0;
    int p[2];
    make_pipe(p);
    const tern_id untouched = 0x5eed;
    tern_id id = untouched;

    cr_assert_eq(tern_io_start(loop, -1, TERN_READABLE, io_count_cb, &n, &id), -EBADF);
    cr_assert_eq(tern_io_start(loop, -100, TERN_READABLE, io_count_cb, &n, &id), -EBADF);

    int closed[2];
    make_pipe(closed);
    close(closed[0]);
    close(closed[1]);
    cr_assert_eq(tern_io_start(loop, closed[0], TERN_READABLE, io_count_cb, &n, &id), -EBADF);

    cr_assert_eq(tern_io_start(loop, p[0], TERN_READABLE, NULL, &n, &id), -EINVAL);
    cr_assert_eq(tern_io_start(loop, p[0], 0, io_count_cb, &n, &id), -EINVAL);
    cr_assert_eq(tern_io_start(loop, p[0], TERN_HANGUP, io_count_cb, &n, &id), -EINVAL);
    cr_assert_eq(tern_io_start(loop, p[0], TERN_ERROR, io_count_cb, &n, &id), -EINVAL);
    cr_assert_eq(tern_io_start(loop, p[0], TERN_READABLE | 16, io_count_cb, &n, &id), -EINVAL);
    cr_assert_eq(tern_io_start(loop, p[0], ~0u, io_count_cb, &n, &id), -EINVAL);
    cr_assert_eq(id, untouched);
    cr_assert_eq(loop_live(loop), 0);

    /* None of the refusals left p[0] registered anywhere. */
    cr_assert_eq(tern_io_start(loop, p[0], TERN_READABLE, io_count_cb, &n, &id), 0);
    cr_assert_eq(tern_io_start(loop, p[0], TERN_READABLE, io_count_cb, &n, NULL), -EEXIST);
    cr_assert_eq(tern_io_start(loop, p[0], TERN_WRITABLE, io_count_cb, &n, NULL), -EEXIST);
    cr_assert_eq(loop_live(loop), 1);
    cr_assert_eq(tern_io_stop(loop, id), 0);
    cr_assert_eq(loop_live(loop), 0);

    close(p[0]);
    close(p[1]);
    assert_loop_usable(loop);
    loop_free_clean(loop);
}

#ifdef __linux__
Test(api, io_start_regular_file_under_epoll, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_backend("epoll");
    char path[] = "/tmp/tern-api-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    unlink(path);
    atomic_uint n = 0;
    cr_assert_eq(tern_io_start(loop, fd, TERN_READABLE, io_count_cb, &n, NULL), -EPERM);
    cr_assert_eq(loop_live(loop), 0);
    /* A refused fd is not left claimed by the loop (G4 registry). */
    cr_assert_eq(tern_io_start(loop, fd, TERN_READABLE, io_count_cb, &n, NULL), -EPERM);
    close(fd);
    assert_loop_usable(loop);
    loop_free_clean(loop);
}
#endif

Test(api, io_modify_and_stop_bad_values, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    atomic_uint n = 0, fired = 0;
    int p[2];
    make_pipe(p);
    tern_id wid = 0, tid = 0;
    cr_assert_eq(tern_io_start(loop, p[0], TERN_READABLE, io_count_cb, &n, &wid), 0);
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, count_cb, &fired, &tid), 0);

    cr_assert_eq(tern_io_modify(loop, wid, 0), -EINVAL);
    cr_assert_eq(tern_io_modify(loop, wid, TERN_HANGUP), -EINVAL);
    cr_assert_eq(tern_io_modify(loop, wid, TERN_READABLE | 0x100), -EINVAL);
    cr_assert_eq(tern_io_modify(loop, tid, TERN_READABLE), -ENOENT, "a timer is not a watcher");
    cr_assert_eq(tern_io_modify(loop, wid + 777, TERN_READABLE), -ENOENT);
    /* Id 0 names nothing; the header does not say which errno, so any
     * negative one is accepted (decision recorded in the report). */
    cr_assert_lt(tern_io_modify(loop, 0, TERN_READABLE), 0);
    cr_assert_lt(tern_io_stop(loop, 0), 0);
    cr_assert_eq(tern_io_stop(loop, tid), -ENOENT, "a timer is not a watcher");
    cr_assert_eq(tern_io_stop(loop, wid + 777), -ENOENT);
    cr_assert_eq(loop_live(loop), 2);

    /* The watcher kept its READABLE interest through the refusals. */
    write_byte(p[1]);
    cr_assert(run_until_count(loop, &n, 1, 0, 10));

    cr_assert_eq(tern_io_stop(loop, wid), 0);
    cr_assert_eq(tern_io_stop(loop, wid), -ENOENT, "stopped twice");
    cr_assert_eq(tern_io_modify(loop, wid, TERN_READABLE), -ENOENT, "stale id");
    cr_assert_eq(tern_timer_stop(loop, tid), 0);
    close(p[0]);
    close(p[1]);
    assert_loop_usable(loop);
    loop_free_clean(loop);
}

/* ---------------------------------------------------------------- */
/* max_operations                                                    */
/* ---------------------------------------------------------------- */

static void noop_fn(tern_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
}

Test(api, max_operations_refuses_with_eagain_then_recovers, .timeout = TEST_TIMEOUT)
{
    enum { CAP = 5 };
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.max_operations = CAP;
    tern_loop *loop = loop_new_opts(&o);
    atomic_uint fired = 0, io_n = 0, posted = 0;
    int p[2];
    make_pipe(p);

    /* Fill the cap with one of each kind that counts. */
    tern_id t1 = 0, t2 = 0, w = 0;
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, count_cb, &fired, &t1), 0);
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, count_cb, &fired, &t2), 0);
    cr_assert_eq(tern_io_start(loop, p[0], TERN_READABLE, io_count_cb, &io_n, &w), 0);
    cr_assert_eq(tern_post(loop, count_fn, &posted), 0);
    cr_assert_eq(tern_defer(loop, count_fn, &posted), 0);
    cr_assert_eq(loop_live(loop), CAP);

    tern_id id = 0x5eed;
    cr_assert_eq(tern_timer_start(loop, 0, 0, count_cb, &fired, &id), -EAGAIN);
    cr_assert_eq(tern_io_start(loop, p[1], TERN_WRITABLE, io_count_cb, &io_n, &id), -EAGAIN);
    cr_assert_eq(tern_post(loop, count_fn, &posted), -EAGAIN);
    cr_assert_eq(tern_defer(loop, count_fn, &posted), -EAGAIN);
    cr_assert_eq(id, 0x5eed);
    cr_assert_eq(loop_live(loop), CAP);

    /* A refused watcher did not claim p[1]: once room exists it works. */
    cr_assert_eq(tern_timer_stop(loop, t1), 0);
    cr_assert_eq(tern_io_start(loop, p[1], TERN_WRITABLE, io_count_cb, &io_n, &id), 0);
    cr_assert_eq(tern_io_stop(loop, id), 0);

    /* Once an operation ends, each kind is accepted again. */
    cr_assert_eq(tern_timer_start(loop, 0, 0, count_cb, &fired, NULL), 0);
    cr_assert_eq(tern_post(loop, count_fn, &posted), -EAGAIN);
    cr_assert(run_until_count(loop, &fired, 1, 0, 10));
    cr_assert_eq(atomic_load(&posted), 2, "the post and the defer run");
    cr_assert_eq(loop_live(loop), 2);
    cr_assert_eq(tern_post(loop, noop_fn, NULL), 0);
    cr_assert_eq(tern_defer(loop, noop_fn, NULL), 0);
    cr_assert_eq(tern_timer_start(loop, 0, 0, count_cb, &fired, NULL), 0);
    cr_assert_eq(loop_live(loop), CAP);
    cr_assert_eq(tern_timer_start(loop, 0, 0, count_cb, &fired, NULL), -EAGAIN);
    cr_assert(run_until_count(loop, &fired, 2, 0, 10));
    cr_assert_eq(loop_live(loop), 2);

    cr_assert_eq(tern_timer_stop(loop, t2), 0);
    cr_assert_eq(tern_io_stop(loop, w), 0);
    close(p[0]);
    close(p[1]);
    assert_loop_usable(loop);
    loop_free_clean(loop);
}

/* A refusal at the cap counts as refused_operations?  Not for loop-only
 * operations: that counter is the pool's. The loop must simply refuse
 * and keep counting correctly across many refusals. */
Test(api, many_refusals_leave_the_count_exact, .timeout = TEST_TIMEOUT)
{
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.max_operations = 1;
    tern_loop *loop = loop_new_opts(&o);
    atomic_uint fired = 0;
    cr_assert_eq(tern_timer_start(loop, HOUR, 0, count_cb, &fired, NULL), 0);
    for (int i = 0; i < 1000; i++) {
        cr_assert_eq(tern_timer_start(loop, 0, 0, count_cb, &fired, NULL), -EAGAIN);
        cr_assert_eq(tern_post(loop, noop_fn, NULL), -EAGAIN);
    }
    cr_assert_eq(loop_live(loop), 1);
    tern_loop_free(loop);
    cr_assert_eq(atomic_load(&fired), 0);
}

/* ---------------------------------------------------------------- */
/* statistics and the clock                                          */
/* ---------------------------------------------------------------- */

Test(api, loop_now_moves_forward)
{
    tern_loop *loop = loop_new_default();
    uint64_t a = tern_loop_now(loop);
    cr_assert_gt(a, 0, "the clock is read at creation");
    atomic_uint fired = 0;
    cr_assert_eq(tern_timer_start(loop, MS, 0, count_cb, &fired, NULL), 0);
    cr_assert(run_until_count(loop, &fired, 1, -1, 100));
    uint64_t b = tern_loop_now(loop);
    cr_assert_geq(b, a + MS, "the timer fired before its deadline on the loop's own clock");
    cr_assert_leq(b, mono_ns(), "the loop's clock runs ahead of CLOCK_MONOTONIC");
    loop_free_clean(loop);
}
