/*
 * Reservations under a full queue (SPEC §13).
 *
 * Two loops on two threads share a pool of 2 workers and a queue of 8
 * slots. Each loop keeps whole-file reads and atomic writes in flight,
 * with 64-byte steps so every request takes many passes through the
 * queue, and between them fills the queue with short jobs until a
 * submission is refused. Now and then it cancels a request in flight.
 * An observer thread reads the pool statistics all the while.
 *
 * Checked:
 *   - queued + reserved <= queue_capacity at every observation;
 *   - reservations were in use (reserved > 0 seen);
 *   - every accepted request completes exactly once, with 0 or (only if
 *     it was cancelled) -ECANCELED: no step was ever refused mid-way;
 *   - the pool refused exactly the submissions the loops saw refused
 *     (refused_queue_full moved by that much and no more);
 *   - every read returned its file byte for byte, every write left its
 *     file byte for byte, and a cancelled write left either the whole new
 *     file or none;
 *   - no descriptor and no temporary file is left, and the pool ends with
 *     queued == reserved == 0.
 * Bounded: a fixed number of requests, every wait under a liveness
 * deadline that prints what it found. Seed printed; replay with argv[1].
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../proc_helpers.h"
#include "tern.h"

#define LOOPS 2
#define REQUESTS 300      /* whole-file requests per loop */
#define IN_FLIGHT 6       /* whole-file requests in flight per loop */
#define FILES 12
#define CAPACITY 8
#define STEP 64
#define LIVENESS_NS (60ull * 1000000000ull)

static char dir[64];
static unsigned char *content[FILES];
static size_t sizes[FILES];
static atomic_bool stop_observer;
static atomic_ullong observations, reserved_seen, over_capacity;
static atomic_uint worst_sum;
static unsigned passed, failed;

static void check(int ok, const char *what)
{
    printf("%s: %s\n", ok ? "ok" : "FAIL", what);
    ok ? passed++ : failed++;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint32_t next_rand(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static unsigned char *pattern(size_t n, uint32_t seed)
{
    unsigned char *p = malloc(n ? n : 1);
    uint32_t x = seed | 1;
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)next_rand(&x);
    return p;
}


/* ------------------------------------------------------------------ */

struct req {
    struct worker *w;
    tern_id id;
    int file;       /* reads: which file; writes: which version */
    bool write;
    bool cancelled; /* tern_cancel was called on it */
    char path[96];
    unsigned char *data; /* writes: the bytes (owned) */
    size_t len;
};

struct worker {
    unsigned index;
    uint32_t rng;
    tern_loop *loop;
    unsigned submitted, completed, in_flight, fillers_in_flight;
    unsigned bad_status, bad_bytes, refusals;
    struct req *live[IN_FLIGHT];
    bool timed_out;
};

static void *filler_work(tern_job *job, void *arg)
{
    (void)job;
    volatile unsigned x = 0;
    for (unsigned i = 0; i < 2000; i++)
        x += i;
    return arg;
}

static void filler_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)status, (void)result;
    ((struct worker *)arg)->fillers_in_flight--;
}

static void forget(struct worker *w, struct req *r)
{
    for (unsigned i = 0; i < IN_FLIGHT; i++)
        if (w->live[i] == r)
            w->live[i] = NULL;
}

static bool same_bytes_on_disk(const char *path, const unsigned char *want, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    unsigned char *buf = malloc(len + 1);
    size_t have = 0;
    ssize_t k;
    while ((k = read(fd, buf + have, len + 1 - have)) > 0)
        have += (size_t)k;
    close(fd);
    bool same = have == len && memcmp(buf, want, len) == 0;
    free(buf);
    return same;
}

static void req_done(tern_loop *loop, tern_id id, int status, tern_fs_result *res, void *arg)
{
    (void)loop, (void)id;
    struct req *r = arg;
    struct worker *w = r->w;
    w->completed++;
    w->in_flight--;
    forget(w, r);
    if (status != 0 && !(status == -ECANCELED && r->cancelled)) {
        printf("FAIL detail: loop %u %s %s: %s\n", w->index, r->write ? "write" : "read", r->path,
               tern_err_name(status));
        w->bad_status++;
    }
    if (status == 0 && !r->write &&
        (res->value != (int64_t)sizes[r->file] ||
         memcmp(res->data, content[r->file], sizes[r->file]) != 0))
        w->bad_bytes++;
    if (status == 0 && r->write && !same_bytes_on_disk(r->path, r->data, r->len))
        w->bad_bytes++;
    if (status == -ECANCELED && r->write && access(r->path, F_OK) == 0 &&
        !same_bytes_on_disk(r->path, r->data, r->len))
        w->bad_bytes++; /* a stopped write leaves nothing, never a part */
    tern_fs_free(res->data);
    free(r->data);
    free(r);
}

static int submit_one(struct worker *w)
{
    struct req *r = calloc(1, sizeof(*r));
    r->w = w;
    r->write = next_rand(&w->rng) & 1;
    tern_fs_options o;
    tern_fs_options_init(&o);
    o.step_bytes = STEP;
    int rc;
    if (r->write) {
        r->file = (int)w->submitted;
        snprintf(r->path, sizeof r->path, "%s/w%u_%u", dir, w->index, w->submitted);
        r->len = next_rand(&w->rng) % 3000;
        r->data = pattern(r->len, next_rand(&w->rng));
        rc = tern_fs_write_file(w->loop, r->path, r->data, r->len, &o, req_done, r, &r->id);
    } else {
        r->file = (int)(next_rand(&w->rng) % FILES);
        snprintf(r->path, sizeof r->path, "%s/r%d", dir, r->file);
        rc = tern_fs_read_file(w->loop, r->path, &o, req_done, r, &r->id);
    }
    if (rc < 0) {
        free(r->data);
        free(r);
        return rc;
    }
    w->submitted++;
    w->in_flight++;
    for (unsigned i = 0; i < IN_FLIGHT; i++)
        if (w->live[i] == NULL) {
            w->live[i] = r;
            break;
        }
    return 0;
}

static void *run_worker(void *arg)
{
    struct worker *w = arg;
    uint64_t deadline = now_ns() + LIVENESS_NS;
    while (w->completed < REQUESTS || w->fillers_in_flight > 0) {
        if (now_ns() > deadline) {
            printf("FAIL detail: loop %u stuck: submitted %u completed %u in flight %u "
                   "fillers %u\n",
                   w->index, w->submitted, w->completed, w->in_flight, w->fillers_in_flight);
            w->timed_out = true;
            break;
        }
        while (w->submitted < REQUESTS && w->in_flight < IN_FLIGHT) {
            int rc = submit_one(w);
            if (rc == -EAGAIN) {
                w->refusals++;
                break;
            }
            if (rc < 0) {
                printf("FAIL detail: submit: %s\n", tern_err_name(rc));
                w->bad_status++;
                break;
            }
        }
        /* Fill the queue until it refuses. */
        for (unsigned i = 0; i < CAPACITY && w->submitted < REQUESTS; i++) {
            int rc = tern_submit(w->loop, TERN_BOUNDED, filler_work, filler_done, w, NULL);
            if (rc == -EAGAIN) {
                w->refusals++;
                break;
            }
            if (rc == 0)
                w->fillers_in_flight++;
        }
        if (next_rand(&w->rng) % 8 == 0) {
            struct req *victim = w->live[next_rand(&w->rng) % IN_FLIGHT];
            if (victim != NULL && !victim->cancelled) {
                victim->cancelled = true;
                if (tern_cancel(w->loop, victim->id) < 0)
                    w->bad_status++;
            }
        }
        tern_loop_run_once(w->loop, 1000000);
    }
    return NULL;
}

static void *observe(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop_observer)) {
        tern_pool_stats s;
        tern_pool_stats_get(&s);
        unsigned sum = s.queued + s.reserved;
        atomic_fetch_add(&observations, 1);
        if (s.reserved > 0)
            atomic_fetch_add(&reserved_seen, 1);
        if (sum > CAPACITY)
            atomic_fetch_add(&over_capacity, 1);
        if (sum > atomic_load(&worst_sum))
            atomic_store(&worst_sum, sum);
    }
    return NULL;
}

static unsigned stray_files(void)
{
    DIR *d = opendir(dir);
    unsigned n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strstr(e->d_name, ".tern-") != NULL)
            n++;
    closedir(d);
    return n;
}

static void remove_dir(void)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' && (e->d_name[1] == '\0' || e->d_name[1] == '.'))
            continue;
        unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    uint32_t seed = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 0) : (uint32_t)time(NULL);
    printf("seed %u (replay: %s %u)\n", seed, argv[0], seed);
    snprintf(dir, sizeof dir, "/tmp/tern_fs_stress.XXXXXX");
    if (mkdtemp(dir) == NULL)
        return 1;
    uint32_t s = seed | 1;
    for (int i = 0; i < FILES; i++) {
        sizes[i] = next_rand(&s) % 5000;
        content[i] = pattern(sizes[i], next_rand(&s));
        char p[96];
        snprintf(p, sizeof p, "%s/r%d", dir, i);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || write(fd, content[i], sizes[i]) != (ssize_t)sizes[i])
            return 1;
        close(fd);
    }
    tern_pool_config cfg;
    tern_pool_config_init(&cfg);
    cfg.threads = 2;
    cfg.queue_capacity = CAPACITY;
    if (tern_pool_start(&cfg) != 0)
        return 1;
    int fds = proc_open_fds();
    check(fds >= 0, "/proc/self/fd is readable");
    struct worker w[LOOPS];
    pthread_t t[LOOPS], obs;
    tern_pool_stats before;
    tern_pool_stats_get(&before);
    pthread_create(&obs, NULL, observe, NULL);
    for (unsigned i = 0; i < LOOPS; i++) {
        w[i] = (struct worker){.index = i, .rng = (seed + i * 7919u) | 1};
        if (tern_loop_new(&w[i].loop, NULL) != 0)
            return 1;
        pthread_create(&t[i], NULL, run_worker, &w[i]);
    }
    unsigned refusals = 0, bad_status = 0, bad_bytes = 0, completed = 0, stuck = 0;
    for (unsigned i = 0; i < LOOPS; i++) {
        pthread_join(t[i], NULL);
        refusals += w[i].refusals;
        bad_status += w[i].bad_status;
        bad_bytes += w[i].bad_bytes;
        completed += w[i].completed;
        stuck += w[i].timed_out;
    }
    atomic_store(&stop_observer, true);
    pthread_join(obs, NULL);
    tern_pool_stats after;
    tern_pool_stats_get(&after);
    for (unsigned i = 0; i < LOOPS; i++)
        tern_loop_free(w[i].loop);

    printf("observations %llu, reserved > 0 in %llu, worst queued + reserved %u of %u\n",
           (unsigned long long)atomic_load(&observations),
           (unsigned long long)atomic_load(&reserved_seen), atomic_load(&worst_sum), CAPACITY);
    printf("requests completed %u, submissions refused %u\n", completed, refusals);
    check(stuck == 0, "no loop stuck past the liveness bound");
    check(atomic_load(&over_capacity) == 0, "queued + reserved <= queue_capacity, always");
    check(atomic_load(&reserved_seen) > 0, "reservations were in use");
    check(completed == LOOPS * REQUESTS, "every accepted request completed once");
    check(bad_status == 0, "no request failed (no step refused mid-way)");
    check(after.refused_queue_full - before.refused_queue_full == refusals,
          "the pool refused only what the loops saw refused");
    check(bad_bytes == 0, "every read and write byte for byte");
    check(stray_files() == 0, "no temporary file left");
    check(proc_open_fds() == fds, "no descriptor left");
    check(tern_pool_shutdown(TERN_POOL_DRAIN, 10ull * 1000000000ull) == 0, "pool shut down");
    tern_pool_stats_get(&after);
    check(after.queued == 0 && after.reserved == 0, "queued == reserved == 0 at the end");
    remove_dir();
    for (int i = 0; i < FILES; i++)
        free(content[i]);
    printf("%u passed, %u failed\n", passed, failed);
    return failed != 0;
}
