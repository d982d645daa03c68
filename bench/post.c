/*
 * Cross-thread post: `posts` posts in total from `producers` threads to one
 * loop, each running a tiny function on the loop.
 * Twin: post_uv.c (a mutex-protected array swapped out in the async
 * callback, plus uv_async_send: the fair libuv way to hand work over).
 *
 * Parameters: posts=1000000 producers=1 mode=burst|pingpong
 *   burst     producers post as fast as they can; figure: post_burst_p<N>
 *             (posts/s from release of the producers to the last post run)
 *             and post_burst_p<N>_wakes (wake syscalls per post; libuv:
 *             async callbacks per post, each one eventfd read+write pair).
 *   pingpong  each producer posts one function and waits until the loop has
 *             run it before posting the next; figures post_pingpong_p<N>_p50
 *             and _p99 (µs from post to acknowledgement), post_pingpong_p<N>
 *             (posts/s) and post_pingpong_p<N>_wakes.
 *
 *   split     no twin, and not in bench/run's list: one thread posts `posts`
 *             functions to a loop that is not running, then runs the loop
 *             once to take them, `rounds` times (default 20; the first,
 *             which touches fresh memory, is not counted); figures
 *             post_split_producer_ns and post_split_loop_ns, each side's
 *             cost per post on one warm core, with nothing crossing cores.
 *
 * The producers wait for acknowledgements by spinning briefly and then
 * yielding (bench_wait_at_least), identically in both twins, so only the
 * runtime's hand-over and wake-up differ.
 */
#include "bench.h"

#include <errno.h>
#include <pthread.h>
#include <tern.h>

typedef struct producer {
    pthread_t thread;
    unsigned long count;
    uint64_t *samples;
    _Atomic uint64_t acked;
} producer;

static tern_loop *loop;
static unsigned long total, ran;
static uint64_t t_end;
static int pingpong;
static _Atomic int go;
static _Atomic unsigned long again;

static void finish_if_last(tern_loop *l)
{
    if (++ran == total) {
        t_end = bench_now_ns();
        tern_loop_stop(l);
    }
}

static void on_post(tern_loop *l, void *arg)
{
    (void)arg;
    finish_if_last(l);
}

static void on_ping(tern_loop *l, void *arg)
{
    producer *p = arg;
    /* Pairs with the acquire in the producer's bench_wait_at_least(). */
    atomic_fetch_add_explicit(&p->acked, 1, memory_order_release);
    finish_if_last(l);
}

static void post_one(tern_fn fn, void *arg)
{
    int rc;
    while ((rc = tern_post(loop, fn, arg)) == -EAGAIN) {
        atomic_fetch_add_explicit(&again, 1, memory_order_relaxed);
        sched_yield();
    }
    BENCH_CHECK(rc == 0, "tern_post: %s", tern_strerror(rc));
}

static void *produce(void *arg)
{
    producer *p = arg;
    while (!atomic_load_explicit(&go, memory_order_acquire))
        bench_relax();
    for (unsigned long i = 0; i < p->count; i++) {
        if (!pingpong) {
            post_one(on_post, p);
        } else {
            uint64_t t = bench_now_ns();
            post_one(on_ping, p);
            bench_wait_at_least(&p->acked, i + 1);
            p->samples[i] = bench_now_ns() - t;
        }
    }
    return NULL;
}

static void keepalive_cb(tern_loop *l, tern_id id, void *arg)
{
    (void)l, (void)id, (void)arg;
}

static void on_split(tern_loop *l, void *arg)
{
    (void)l, (void)arg;
    ran++;
}

static void split(unsigned long rounds)
{
    uint64_t produce_ns = 0, take_ns = 0;
    for (unsigned long r = 0; r <= rounds; r++) {
        uint64_t t0 = bench_now_ns();
        for (unsigned long i = 0; i < total; i++)
            post_one(on_split, NULL);
        uint64_t t1 = bench_now_ns();
        ran = 0;
        tern_loop_run_once(loop, 0);
        uint64_t t2 = bench_now_ns();
        BENCH_CHECK(ran == total, "ran %lu of %lu", ran, total);
        if (r > 0) {
            produce_ns += t1 - t0;
            take_ns += t2 - t1;
        }
    }
    double posts = (double)total * (double)rounds;
    bench_figure("post_split_producer_ns", (double)produce_ns / posts, "ns");
    bench_figure("post_split_loop_ns", (double)take_ns / posts, "ns");
}

int main(int argc, char **argv)
{
    total = bench_arg(argc, argv, "posts", 1000000);
    unsigned long nprod = bench_arg(argc, argv, "producers", 1);
    const char *mode = bench_arg_str(argc, argv, "mode", "burst");
    pingpong = strcmp(mode, "pingpong") == 0;
    BENCH_CHECK(nprod >= 1 && nprod <= 64 && total >= nprod, "producers");

    /* A burst leaves up to `total` posts pending at once, and pending posts
     * count against max_operations (default 65536): allow them all, as the
     * libuv twin's array grows without bound. */
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.max_operations = (unsigned)(total + 1024);
    int rc = tern_loop_new(&loop, &opts);
    BENCH_CHECK(rc == 0, "tern_loop_new: %s", tern_strerror(rc));

    /* A far timer keeps tern_loop_run() from returning before the first
     * post arrives, as the uv_async_t handle does for libuv. */
    if (strcmp(mode, "split") == 0) {
        unsigned long rounds = bench_arg(argc, argv, "rounds", 20);
        BENCH_CHECK(rounds >= 1, "rounds");
        split(rounds);
        tern_loop_free(loop);
        return 0;
    }

    tern_id keepalive;
    rc = tern_timer_start(loop, 3600ull * 1000000000u, 0, keepalive_cb, NULL, &keepalive);
    BENCH_CHECK(rc == 0, "tern_timer_start: %s", tern_strerror(rc));

    producer *prods = calloc(nprod, sizeof *prods);
    BENCH_CHECK(prods != NULL, "calloc");
    for (unsigned long i = 0; i < nprod; i++) {
        prods[i].count = total / nprod + (i < total % nprod);
        if (pingpong) {
            prods[i].samples = calloc(prods[i].count, sizeof(uint64_t));
            BENCH_CHECK(prods[i].samples != NULL, "calloc");
        }
        BENCH_CHECK(pthread_create(&prods[i].thread, NULL, produce, &prods[i]) == 0,
                    "pthread_create");
    }

    uint64_t t0 = bench_now_ns();
    atomic_store_explicit(&go, 1, memory_order_release);
    tern_loop_run(loop);
    for (unsigned long i = 0; i < nprod; i++)
        pthread_join(prods[i].thread, NULL);
    BENCH_CHECK(ran == total, "ran %lu of %lu", ran, total);

    tern_loop_stats st;
    tern_loop_stats_get(loop, &st);

    char name[80];
    const char *tag = pingpong ? "pingpong" : "burst";
    snprintf(name, sizeof name, "post_%s_p%lu", tag, nprod);
    bench_figure(name, (double)total / ((double)(t_end - t0) / 1e9), "posts/s");
    snprintf(name, sizeof name, "post_%s_p%lu_wakes", tag, nprod);
    bench_figure(name, (double)st.wake_syscalls / (double)total, "wakes/post");
    if (pingpong) {
        size_t n = 0;
        uint64_t *all = calloc(total, sizeof *all);
        BENCH_CHECK(all != NULL, "calloc");
        for (unsigned long i = 0; i < nprod; i++) {
            memcpy(all + n, prods[i].samples, prods[i].count * sizeof *all);
            n += prods[i].count;
            free(prods[i].samples);
        }
        bench_sort(all, n);
        snprintf(name, sizeof name, "post_%s_p%lu_p50", tag, nprod);
        bench_figure(name, (double)bench_quantile(all, n, 0.50) / 1e3, "us");
        snprintf(name, sizeof name, "post_%s_p%lu_p99", tag, nprod);
        bench_figure(name, (double)bench_quantile(all, n, 0.99) / 1e3, "us");
        free(all);
    }
    if (atomic_load(&again) != 0)
        fprintf(stderr, "tern_post refused %lu times (max_operations)\n", atomic_load(&again));

    tern_timer_stop(loop, keepalive);
    tern_loop_free(loop);
    free(prods);
    return 0;
}
