/*
 * What spans the loops of the demo's group: every loop's figures added up
 * for /stats and the final report, each loop's share of the requests, and
 * SIGHUP's live reconfiguration of the shedding bound in exclusive mode.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>

#include "demo.h"
#include "loops.h"

/* The counters are a run of identical atomics: add them up as an array. */
#define NCOUNTERS (sizeof(struct counters) / sizeof(_Atomic uint64_t))
_Static_assert(sizeof(struct counters) == NCOUNTERS * sizeof(_Atomic uint64_t),
               "struct counters holds nothing but its uint64 counters");

void app_totals(const struct server *srv, struct counters *total, struct gauges *g)
{
    const struct app *app = srv->app;
    _Atomic uint64_t *t = (_Atomic uint64_t *)total;
    for (size_t k = 0; k < NCOUNTERS; k++)
        atomic_init(&t[k], 0);
    *g = (struct gauges){0};
    for (unsigned i = 0; i < app->nloops; i++) {
        const struct server *s = &app->servers[i];
        const _Atomic uint64_t *c = (const _Atomic uint64_t *)&s->n;
        for (size_t k = 0; k < NCOUNTERS; k++)
            atomic_store_explicit(&t[k],
                                  atomic_load_explicit(&t[k], memory_order_relaxed) +
                                      atomic_load_explicit(&c[k], memory_order_relaxed),
                                  memory_order_relaxed);
        g->conns += atomic_load_explicit(&s->conns, memory_order_relaxed);
        g->jobs += atomic_load_explicit(&s->jobs, memory_order_relaxed);
        g->owners += atomic_load_explicit(&s->owners, memory_order_relaxed);
        g->owner_jobs += atomic_load_explicit(&s->owner_jobs, memory_order_relaxed);
    }
}

int app_refusals_json(const struct counters *total, char *buf, size_t cap)
{
    size_t len = (size_t)snprintf(buf, cap, "{");
    /* Cause 0 is "none": every other one is named by tern_refusal_name. */
    for (unsigned k = 1; k < sizeof(total->refused) / sizeof(total->refused[0]) && len < cap; k++)
        len += (size_t)snprintf(buf + len, cap - len, "%s\"%s\":%" PRIu64, k > 1 ? "," : "",
                                tern_refusal_name((tern_refusal)k),
                                atomic_load_explicit(&total->refused[k], memory_order_relaxed));
    if (len < cap)
        len += (size_t)snprintf(buf + len, cap - len, "}");
    return (int)len;
}

int app_loops_json(const struct server *srv, char *buf, size_t cap)
{
    const struct app *app = srv->app;
    size_t len = 0;
    len += (size_t)snprintf(buf + len, cap - len, "[");
    for (unsigned i = 0; i < app->nloops && len < cap; i++) {
        const struct server *s = &app->servers[i];
        len += (size_t)snprintf(
            buf + len, cap - len,
            "%s{\"loop\":%u,\"accepted\":%" PRIu64 ",\"requests\":%" PRIu64
            ",\"connections\":%u}",
            i ? "," : "", i, atomic_load_explicit(&s->n.accepted, memory_order_relaxed),
            atomic_load_explicit(&s->n.requests, memory_order_relaxed),
            atomic_load_explicit(&s->conns, memory_order_relaxed));
    }
    if (len < cap)
        len += (size_t)snprintf(buf + len, cap - len, "]");
    return (int)len;
}

/*
 * SIGHUP: swap the shedding bound on every loop. The bound is a plain
 * field each loop reads on every /hash; writing it while a loop runs would
 * be a data race. In exclusive mode no other loop runs a callback and no
 * bounded job runs, so the writes are safe and every loop sees the new
 * bound from its next turn on (the pause and resume order them).
 */
void app_reconfigure(struct server *srv)
{
    struct app *app = srv->app;
    uint64_t t0 = tern_loop_now(srv->loop);
    int rc = tern_group_pause(app->group);
    if (rc < 0) {
        fprintf(stderr, "tern-demo: SIGHUP: not reconfigured: %s\n", tern_strerror(rc));
        return;
    }
    uint64_t from = app->shed_wait_ns[app->shed_choice];
    app->shed_choice ^= 1;
    uint64_t to = app->shed_wait_ns[app->shed_choice];
    for (unsigned i = 0; i < app->nloops; i++)
        app->servers[i].shed_wait_ns = to;
    app->reconfigurations++;
    tern_group_resume(app->group);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t t1 = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    fprintf(stderr,
            "tern-demo: SIGHUP: shed bound %" PRIu64 " ms -> %" PRIu64
            " ms on %u loops, set in exclusive mode (paused and resumed in %.2f ms)\n",
            from / 1000000, to / 1000000, app->nloops, t1 > t0 ? (double)(t1 - t0) / 1e6 : 0.0);
}

int app_final_json(const struct app *app, char *buf, size_t cap)
{
    struct counters total;
    struct gauges g;
    app_totals(&app->servers[0], &total, &g);
    char loops[1024], refusals[256];
    app_loops_json(&app->servers[0], loops, sizeof(loops));
    app_refusals_json(&total, refusals, sizeof(refusals));
    tern_pool_stats p;
    tern_pool_stats_get(&p);
    return snprintf(
        buf, cap,
        "{\"server\":{\"loops\":%u,\"accepted\":%" PRIu64 ",\"requests\":%" PRIu64
        ",\"responses\":%" PRIu64 ",\"ok\":%" PRIu64 ",\"shed\":%" PRIu64 ",\"hash_done\":%" PRIu64
        ",\"hash_cancelled\":%" PRIu64 ",\"slow_completed\":%" PRIu64 ",\"slow_cancelled\":%" PRIu64
        ",\"slowloris_closed\":%" PRIu64 ",\"idle_closed\":%" PRIu64
        ",\"slow_reader_closed\":%" PRIu64 ",\"too_large\":%" PRIu64 ",\"upgrade_refused\":%" PRIu64
        ",\"reconfigurations\":%u,\"shed_wait_ms\":%" PRIu64 "},\n"
        " \"refusals\":%s,\n"
        " \"loops\":%s,\n"
        " \"pool\":{\"threads\":%u,\"submitted\":%" PRIu64 ",\"completed\":%" PRIu64
        ",\"cancelled\":%" PRIu64 ",\"queued_peak\":%u,\"wait_p50_ns\":%" PRIu64
        ",\"wait_p99_ns\":%" PRIu64 "}}\n",
        app->nloops, total.accepted, total.requests, total.responses, total.ok,
        total.shed_refused + total.shed_wait + total.shed_long, total.hash_done,
        total.hash_cancelled, total.slow_completed, total.slow_cancelled, total.slowloris_closed,
        total.idle_closed, total.slow_reader_closed, total.too_large, total.upgrade_refused,
        app->reconfigurations, app->servers[0].shed_wait_ns / 1000000, refusals, loops, p.threads,
        p.submitted, p.completed, p.cancelled, p.queued_peak, p.wait_p50_ns, p.wait_p99_ns);
}
