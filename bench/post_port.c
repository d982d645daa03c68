/*
 * Cross-thread post through a completion port, one packet a post: the
 * alternative to tern's own queue on Windows that docs/design.md ("The
 * queue seam") weighs. Windows only; not a twin of libuv, and not in
 * bench/run's list: it is measured beside post.exe, the same scenario
 * through tern_post (its queue, and one port packet only to wake a parked
 * loop), to decide which carries posts.
 *
 * What it models is the best case for the port: no admission, no ids, no
 * loop turn around the take; the consumer takes up to 64 packets per
 * GetQueuedCompletionStatusEx and runs each packet's function, so what
 * it costs is the post and the take alone.
 *
 * Parameters: posts=1000000 producers=1 mode=burst|pingpong (as post.c)
 *   figures post_port_burst_p<N> (posts/s), or post_port_pingpong_p<N>
 *   (posts/s) with _p50 and _p99 (µs from post to acknowledgement).
 */
#include "bench.h"

#include <pthread.h>
#include <windows.h>

typedef struct producer {
    pthread_t thread;
    unsigned long count;
    uint64_t *samples;
    _Atomic uint64_t acked;
} producer;

typedef void (*post_fn)(producer *p);

static HANDLE port;
static unsigned long total, ran;
static int pingpong;
static _Atomic int go;

static void on_post(producer *p)
{
    (void)p;
}

static void on_ping(producer *p)
{
    /* Pairs with the acquire in the producer's bench_wait_at_least(). */
    atomic_fetch_add_explicit(&p->acked, 1, memory_order_release);
}

static void post_one(post_fn fn, producer *p)
{
    /* The function rides in the key, its argument in the OVERLAPPED slot. */
    BOOL ok = PostQueuedCompletionStatus(port, 0, (ULONG_PTR)fn, (OVERLAPPED *)p);
    BENCH_CHECK(ok, "PostQueuedCompletionStatus: %lu", GetLastError());
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
    port = CreateIoCompletionPort(INVALID_HANDLE_VALUE, NULL, 0, 1);
    BENCH_CHECK(port != NULL, "CreateIoCompletionPort: %lu", GetLastError());

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
    OVERLAPPED_ENTRY got[64];
    while (ran < total) {
        ULONG n = 0;
        BOOL ok = GetQueuedCompletionStatusEx(port, got, 64, &n, INFINITE, FALSE);
        BENCH_CHECK(ok, "GetQueuedCompletionStatusEx: %lu", GetLastError());
        for (ULONG i = 0; i < n; i++)
            ((post_fn)got[i].lpCompletionKey)((producer *)got[i].lpOverlapped);
        ran += n;
    }
    uint64_t t_end = bench_now_ns();
    for (unsigned long i = 0; i < nprod; i++)
        pthread_join(prods[i].thread, NULL);
    BENCH_CHECK(ran == total, "ran %lu of %lu", ran, total);

    char name[80];
    const char *tag = pingpong ? "pingpong" : "burst";
    snprintf(name, sizeof name, "post_port_%s_p%lu", tag, nprod);
    bench_figure(name, (double)total / ((double)(t_end - t0) / 1e9), "posts/s");
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
        snprintf(name, sizeof name, "post_port_%s_p%lu_p50", tag, nprod);
        bench_figure(name, (double)bench_quantile(all, n, 0.50) / 1e3, "us");
        snprintf(name, sizeof name, "post_port_%s_p%lu_p99", tag, nprod);
        bench_figure(name, (double)bench_quantile(all, n, 0.99) / 1e3, "us");
        free(all);
    }
    free(prods);
    CloseHandle(port);
    return 0;
}
