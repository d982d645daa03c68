/*
 * Cross-thread post, libuv twin of post.c. libuv has no post primitive;
 * the fair equivalent, and what libuv applications write, is an array of
 * (function, argument) pairs under a mutex, swapped out whole by the
 * loop's uv_async_t callback, with uv_async_send after each append
 * (libuv coalesces the sends into one callback while one is pending).
 *
 * Parameters: posts=1000000 producers=1 mode=burst|pingpong
 * Figures: as post.c; the _wakes figure counts async callbacks per post.
 */
#include "bench.h"

#include <pthread.h>
#include <uv.h>

typedef void (*post_fn)(uv_loop_t *loop, void *arg);

typedef struct item {
    post_fn fn;
    void *arg;
} item;

/* The inbox: producers append under the mutex; the loop swaps the array
 * for its empty spare in one critical section and runs the items outside
 * it, so the lock is held for an append or a swap, never for a call. */
static struct {
    pthread_mutex_t mu;
    item *items;
    size_t len, cap;
} inbox = {.mu = PTHREAD_MUTEX_INITIALIZER};

static item *spare;
static size_t spare_cap;

typedef struct producer {
    pthread_t thread;
    unsigned long count;
    uint64_t *samples;
    _Atomic uint64_t acked;
} producer;

static uv_loop_t *loop;
static uv_async_t async;
static unsigned long total, ran, async_calls;
static uint64_t t_end;
static int pingpong;
static _Atomic int go;

static void finish_if_last(uv_loop_t *l)
{
    if (++ran == total) {
        t_end = bench_now_ns();
        uv_stop(l);
    }
}

static void on_post(uv_loop_t *l, void *arg)
{
    (void)arg;
    finish_if_last(l);
}

static void on_ping(uv_loop_t *l, void *arg)
{
    producer *p = arg;
    /* Pairs with the acquire in the producer's bench_wait_at_least(). */
    atomic_fetch_add_explicit(&p->acked, 1, memory_order_release);
    finish_if_last(l);
}

static void post_one(post_fn fn, void *arg)
{
    pthread_mutex_lock(&inbox.mu);
    if (inbox.len == inbox.cap) {
        size_t cap = inbox.cap ? 2 * inbox.cap : 1024;
        item *grown = realloc(inbox.items, cap * sizeof *grown);
        BENCH_CHECK(grown != NULL, "realloc");
        inbox.items = grown;
        inbox.cap = cap;
    }
    inbox.items[inbox.len++] = (item){fn, arg};
    pthread_mutex_unlock(&inbox.mu);
    int rc = uv_async_send(&async);
    BENCH_CHECK(rc == 0, "uv_async_send: %s", uv_strerror(rc));
}

static void on_async(uv_async_t *h)
{
    async_calls++;
    pthread_mutex_lock(&inbox.mu);
    item *batch = inbox.items;
    size_t n = inbox.len, cap = inbox.cap;
    inbox.items = spare;
    inbox.cap = spare_cap;
    inbox.len = 0;
    pthread_mutex_unlock(&inbox.mu);
    for (size_t i = 0; i < n; i++)
        batch[i].fn(h->loop, batch[i].arg);
    spare = batch;
    spare_cap = cap;
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

int main(int argc, char **argv)
{
    total = bench_arg(argc, argv, "posts", 1000000);
    unsigned long nprod = bench_arg(argc, argv, "producers", 1);
    const char *mode = bench_arg_str(argc, argv, "mode", "burst");
    pingpong = strcmp(mode, "pingpong") == 0;
    BENCH_CHECK(nprod >= 1 && nprod <= 64 && total >= nprod, "producers");

    loop = uv_default_loop();
    int rc = uv_async_init(loop, &async, on_async);
    BENCH_CHECK(rc == 0, "uv_async_init: %s", uv_strerror(rc));

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
    uv_run(loop, UV_RUN_DEFAULT);
    for (unsigned long i = 0; i < nprod; i++)
        pthread_join(prods[i].thread, NULL);
    BENCH_CHECK(ran == total, "ran %lu of %lu", ran, total);

    char name[80];
    const char *tag = pingpong ? "pingpong" : "burst";
    snprintf(name, sizeof name, "post_%s_p%lu", tag, nprod);
    bench_figure(name, (double)total / ((double)(t_end - t0) / 1e9), "posts/s");
    snprintf(name, sizeof name, "post_%s_p%lu_wakes", tag, nprod);
    bench_figure(name, (double)async_calls / (double)total, "wakes/post");
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

    uv_close((uv_handle_t *)&async, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_loop_close(loop);
    free(inbox.items);
    free(spare);
    free(prods);
    return 0;
}
