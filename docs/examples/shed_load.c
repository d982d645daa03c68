/*
 * shed_load — turning work away honestly when the pool is full.
 *
 * A server loop receives bursts of requests faster than two workers can
 * serve them. Each request becomes a bounded job. When the pool refuses a
 * submission with -EAGAIN (its queue is full), nothing was queued and
 * nothing is owed: the server answers "busy" at once instead. From then
 * on it consults tern_pool_stats_get() before each submission and keeps
 * shedding until the queue has drained to half, so it does not hammer a
 * full queue with submissions that will only be refused.
 *
 * At the end it prints its own counters and the pool's, frees the loop,
 * shuts the pool down and exits 0.
 *
 * Build: cc shed_load.c $(pkg-config --cflags --libs tern)
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tern.h"

enum {
    WORKERS = 2,
    QUEUE_CAPACITY = 32,
    REQUESTS = 2000,       /* requests that arrive in total */
    BURST = 64,            /* arriving together, every tick */
    TICK_NS = 1000 * 1000, /* 1 ms between bursts */
};

struct server {
    unsigned arrived, accepted, served, cancelled, shed, refusals;
    bool shedding;
    int error;
};

/* The request's work: some tens of microseconds of hashing. */
static void *serve_request(tern_job *job, void *arg)
{
    (void)arg;
    uint64_t h = 1469598103934665603ull ^ tern_job_id(job);
    for (int i = 0; i < 20000 && !tern_job_cancelled(job); i++)
        h = (h ^ (uint64_t)i) * 1099511628211ull;
    /* The hash is not the point; returning NULL keeps the example free of
     * allocations that done would have to release. */
    return h == 0 ? (void *)1 : NULL;
}

static void request_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    struct server *srv = arg;
    (void)loop;
    (void)id;
    (void)result;
    if (status == 0)
        srv->served++;
    else
        srv->cancelled++;
}

/* Whether the pool has room again: the queue has drained to half. */
static bool pool_has_room(void)
{
    tern_pool_stats s;
    tern_pool_stats_get(&s);
    return s.queued <= QUEUE_CAPACITY / 2;
}

static void on_burst(tern_loop *loop, tern_id timer, void *arg)
{
    struct server *srv = arg;
    for (int i = 0; i < BURST && srv->arrived < REQUESTS; i++) {
        srv->arrived++;
        if (srv->shedding && !pool_has_room()) {
            srv->shed++; /* answered "busy" without trying */
            continue;
        }
        srv->shedding = false;
        int rc = tern_submit(loop, TERN_BOUNDED, serve_request, request_done, srv, NULL);
        if (rc == 0) {
            srv->accepted++;
        } else if (rc == -EAGAIN) {
            /* Refused before the job existed: nothing to undo, nothing owed. */
            srv->refusals++;
            srv->shed++;
            srv->shedding = true;
        } else {
            fprintf(stderr, "shed_load: tern_submit: %s\n", tern_strerror(rc));
            srv->error = rc;
            tern_timer_stop(loop, timer);
            return;
        }
    }
    if (srv->arrived == REQUESTS)
        tern_timer_stop(loop, timer); /* the loop ends once the jobs are delivered */
}

int main(void)
{
    struct server srv = {0};
    tern_pool_config cfg;
    tern_pool_config_init(&cfg);
    cfg.threads = WORKERS;
    cfg.queue_capacity = QUEUE_CAPACITY;
    int rc = tern_pool_start(&cfg);
    if (rc != 0) {
        fprintf(stderr, "shed_load: tern_pool_start: %s\n", tern_strerror(rc));
        return 1;
    }

    tern_loop *loop = NULL;
    rc = tern_loop_new(&loop, NULL);
    if (rc != 0) {
        fprintf(stderr, "shed_load: tern_loop_new: %s\n", tern_strerror(rc));
        tern_pool_shutdown(TERN_POOL_DRAIN, 0);
        return 1;
    }
    rc = tern_timer_start(loop, 0, TICK_NS, on_burst, &srv, NULL);
    if (rc == 0)
        rc = tern_loop_run(loop); /* returns 0 when every request is settled */
    if (rc != 0)
        fprintf(stderr, "shed_load: the loop ended with %d\n", rc);

    tern_pool_stats s;
    tern_pool_stats_get(&s);
    printf("requests: %u arrived, %u accepted, %u served, %u cancelled, %u shed "
           "(%u refused by the pool)\n",
           srv.arrived, srv.accepted, srv.served, srv.cancelled, srv.shed, srv.refusals);
    printf("pool: submitted %" PRIu64 ", completed %" PRIu64 ", refused (queue full) %" PRIu64
           ", queued peak %u\n",
           s.submitted, s.completed, s.refused_queue_full, s.queued_peak);
    printf("pool: queue wait p50 %" PRIu64 " us, p99 %" PRIu64 " us; run p50 %" PRIu64
           " us, p99 %" PRIu64 " us\n",
           s.wait_p50_ns / 1000, s.wait_p99_ns / 1000, s.run_p50_ns / 1000, s.run_p99_ns / 1000);

    tern_loop_free(loop);
    int shut = tern_pool_shutdown(TERN_POOL_DRAIN, 5ull * 1000 * 1000 * 1000);

    /* Every request was either served or shed, and the pool's account of
     * refusals matches ours. */
    bool consistent = rc == 0 && srv.error == 0 && shut == 0 &&
                      srv.arrived == REQUESTS && srv.served + srv.shed == REQUESTS &&
                      srv.served + srv.cancelled == srv.accepted &&
                      s.refused_queue_full == srv.refusals;
    if (!consistent) {
        fprintf(stderr, "shed_load: the counters do not add up\n");
        return 1;
    }
    return 0;
}
