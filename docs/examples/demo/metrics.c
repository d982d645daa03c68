/*
 * /metrics: the demo's figures in the Prometheus text exposition format
 * (version 0.0.4), for a monitoring system to scrape: every loop's
 * statistics (utilisation, lag percentiles, live operations), the pool's
 * (threads, queue, outcomes, refusals by cause, queue-wait and run-time
 * percentiles), the connection owners' and the server's own counters.
 *
 * Every family has its HELP and TYPE lines before its samples, each family
 * once; counters end in _total, times are in seconds, percentiles are
 * summaries with a quantile label. Any thread may read tern_*_stats, so
 * the loop answering reads every loop's figures without asking them.
 *
 * Each summary has a _sum and a _count, so that a mean can be taken and
 * instances added up, and its maximum is a gauge of its own (*_max_seconds).
 * tern's statistics give percentiles (a sample of recent jobs for the
 * pool, every deadline for a loop) and a loop's deadline count and
 * maximum lateness, but no sum of any of them. So the sums and counts
 * are the demo's own exact record of what it can time itself: the queue
 * wait and run time of its bounded jobs (/hash and /block), timed on the
 * worker, and the lateness of its connection timers (the idle, request
 * and write bounds). The HELP lines say which population each part
 * covers; the loop's own deadline count is tern_loop_deadlines_total.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "demo.h"
#include "loops.h"

struct out {
    char *buf;
    size_t cap, len;
};

static void put(struct out *o, const char *fmt, ...)
{
    if (o->len >= o->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    o->len += n > 0 ? (size_t)n : 0;
}

static void family(struct out *o, const char *name, const char *type, const char *help)
{
    put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static double seconds(uint64_t ns)
{
    return (double)ns / 1e9;
}

/* One sample per loop of a value read from its statistics. */
#define PER_LOOP(o, st, n, name, type, help, fmt, expr)                         \
    do {                                                                        \
        family(o, name, type, help);                                            \
        for (unsigned i_ = 0; i_ < (n); i_++) {                                 \
            const tern_loop_stats *s_ = &(st)[i_];                              \
            (void)s_;                                                           \
            put(o, "%s{loop=\"%u\"} " fmt "\n", name, i_, (expr));              \
        }                                                                       \
    } while (0)

static int loops_part(struct out *o, const struct app *app)
{
    unsigned n = app->nloops;
    tern_loop_stats *st = calloc(n, sizeof(*st));
    if (st == NULL)
        return -1;
    for (unsigned i = 0; i < n; i++)
        tern_loop_stats_get(app->servers[i].loop, &st[i]);
    PER_LOOP(o, st, n, "tern_loop_turns_total", "counter", "Turns the loop completed.",
             "%" PRIu64, s_->turns);
    PER_LOOP(o, st, n, "tern_loop_posts_total", "counter", "Posted functions the loop ran.",
             "%" PRIu64, s_->posts);
    PER_LOOP(o, st, n, "tern_loop_wake_syscalls_total", "counter",
             "Wake-up system calls producers made for the loop.", "%" PRIu64, s_->wake_syscalls);
    PER_LOOP(o, st, n, "tern_loop_events_total", "counter", "Callbacks the loop dispatched.",
             "%" PRIu64, s_->events);
    PER_LOOP(o, st, n, "tern_loop_busy_seconds_total", "counter",
             "Time the loop spent in turns, not blocked.", "%.9f", seconds(s_->busy_ns));
    PER_LOOP(o, st, n, "tern_loop_idle_seconds_total", "counter",
             "Time the loop spent blocked in its backend.", "%.9f", seconds(s_->idle_ns));
    PER_LOOP(o, st, n, "tern_loop_utilisation_ratio", "gauge",
             "Busy time over busy and idle time since the loop was made.", "%.6f",
             s_->busy_ns + s_->idle_ns == 0
                 ? 0.0
                 : (double)s_->busy_ns / (double)(s_->busy_ns + s_->idle_ns));
    PER_LOOP(o, st, n, "tern_loop_live_operations", "gauge",
             "Operations live on the loop (timers, watchers, jobs, streams, pending posts).",
             "%u", s_->live_operations);
    PER_LOOP(o, st, n, "tern_loop_undelivered", "gauge",
             "Pool results the loop has accepted and not yet delivered.", "%u",
             s_->undelivered);
    PER_LOOP(o, st, n, "tern_loop_undelivered_peak", "gauge",
             "The most pool results ever undelivered at once.", "%u", s_->undelivered_peak);

    family(o, "tern_loop_lag_seconds", "summary",
           "How late deadlines fired: quantiles over every deadline (timers and internal "
           "ones) since the loop was made; _sum and _count over the demo's connection timers "
           "that fired.");
    for (unsigned i = 0; i < n; i++) {
        const struct counters *k = &app->servers[i].n;
        put(o, "tern_loop_lag_seconds{loop=\"%u\",quantile=\"0.5\"} %.9f\n", i,
            seconds(st[i].lag_p50_ns));
        put(o, "tern_loop_lag_seconds{loop=\"%u\",quantile=\"0.99\"} %.9f\n", i,
            seconds(st[i].lag_p99_ns));
        put(o, "tern_loop_lag_seconds_sum{loop=\"%u\"} %.9f\n", i,
            seconds(atomic_load_explicit(&k->timer_lag_ns, memory_order_relaxed)));
        put(o, "tern_loop_lag_seconds_count{loop=\"%u\"} %" PRIu64 "\n", i,
            atomic_load_explicit(&k->timer_fired, memory_order_relaxed));
    }
    PER_LOOP(o, st, n, "tern_loop_lag_max_seconds", "gauge",
             "The latest any deadline of the loop fired, since it was made.", "%.9f",
             seconds(s_->lag_max_ns));
    PER_LOOP(o, st, n, "tern_loop_deadlines_total", "counter",
             "Deadlines the loop fired (timers and internal ones).", "%" PRIu64, s_->lag_count);
    free(st);
    return 0;
}

static void pool_part(struct out *o, const struct server *srv)
{
    const struct app *app = srv->app;
    struct counters t;
    struct gauges g;
    app_totals(srv, &t, &g);
    tern_pool_stats p;
    tern_pool_stats_get(&p);
    struct {
        const char *name, *help;
        unsigned v;
    } gauges[] = {
        {"tern_pool_threads", "Bounded worker threads.", p.threads},
        {"tern_pool_busy", "Bounded workers running a job.", p.busy},
        {"tern_pool_queued", "Bounded jobs waiting for a worker.", p.queued},
        {"tern_pool_queued_peak", "The most bounded jobs ever queued at once.", p.queued_peak},
        {"tern_pool_reserved", "Queue slots reserved by multi-step requests.", p.reserved},
        {"tern_pool_long_threads", "Threads of the long class.", p.long_threads},
        {"tern_pool_long_busy", "Long-class threads running a job.", p.long_busy},
        {"tern_pool_overflow_threads", "Overflow workers alive (the watchdog starts them).",
         p.overflow_now},
    };
    for (size_t i = 0; i < sizeof(gauges) / sizeof(gauges[0]); i++) {
        family(o, gauges[i].name, "gauge", gauges[i].help);
        put(o, "%s %u\n", gauges[i].name, gauges[i].v);
    }
    family(o, "tern_pool_jobs_total", "counter",
           "Jobs by outcome: submitted, and completed, cancelled or timed out once done ran.");
    put(o, "tern_pool_jobs_total{outcome=\"submitted\"} %" PRIu64 "\n", p.submitted);
    put(o, "tern_pool_jobs_total{outcome=\"completed\"} %" PRIu64 "\n", p.completed);
    put(o, "tern_pool_jobs_total{outcome=\"cancelled\"} %" PRIu64 "\n", p.cancelled);
    put(o, "tern_pool_jobs_total{outcome=\"timed_out\"} %" PRIu64 "\n", p.timed_out);

    family(o, "tern_pool_stalls_total", "counter",
           "Bounded jobs seen running past the watchdog's stall bound.");
    put(o, "tern_pool_stalls_total %" PRIu64 "\n", p.stalls);
    family(o, "tern_pool_overflow_threads_started_total", "counter",
           "Overflow workers the watchdog started.");
    put(o, "tern_pool_overflow_threads_started_total %" PRIu64 "\n", p.overflow_started);
    family(o, "tern_pool_overflow_threads_retired_total", "counter",
           "Overflow workers that retired after idling.");
    put(o, "tern_pool_overflow_threads_retired_total %" PRIu64 "\n", p.overflow_retired);

    /* Every cause of TERN_REFUSAL_MAP, by the name tern_refusal_name gives it. */
    family(o, "tern_pool_refusals_total", "counter",
           "Submissions refused with -EAGAIN, process-wide, by cause.");
#define REFUSAL_SAMPLE(name, short_name, value)                                                \
    put(o, "tern_pool_refusals_total{cause=\"%s\"} %" PRIu64 "\n", tern_refusal_name(name),    \
        p.refused_##short_name);
    TERN_REFUSAL_MAP(REFUSAL_SAMPLE)
#undef REFUSAL_SAMPLE

    family(o, "tern_pool_queue_wait_seconds", "summary",
           "How long bounded jobs waited in the queue: quantiles over the pool's recent jobs; "
           "_sum and _count over every /hash and /block job the demo ran.");
    put(o, "tern_pool_queue_wait_seconds{quantile=\"0.5\"} %.9f\n", seconds(p.wait_p50_ns));
    put(o, "tern_pool_queue_wait_seconds{quantile=\"0.99\"} %.9f\n", seconds(p.wait_p99_ns));
    put(o, "tern_pool_queue_wait_seconds_sum %.9f\n", seconds(t.job_wait_ns));
    put(o, "tern_pool_queue_wait_seconds_count %" PRIu64 "\n", t.job_wait_count);
    family(o, "tern_pool_queue_wait_max_seconds", "gauge",
           "The longest any /hash or /block job of the demo waited in the queue.");
    put(o, "tern_pool_queue_wait_max_seconds %.9f\n",
        seconds(atomic_load_explicit(&app->job_wait_max_ns, memory_order_relaxed)));
    family(o, "tern_pool_run_seconds", "summary",
           "How long jobs ran on a worker: quantiles over the pool's recent jobs; _sum and "
           "_count over every /hash and /block job the demo ran.");
    put(o, "tern_pool_run_seconds{quantile=\"0.5\"} %.9f\n", seconds(p.run_p50_ns));
    put(o, "tern_pool_run_seconds{quantile=\"0.99\"} %.9f\n", seconds(p.run_p99_ns));
    put(o, "tern_pool_run_seconds_sum %.9f\n", seconds(t.job_run_ns));
    put(o, "tern_pool_run_seconds_count %" PRIu64 "\n", t.job_run_count);
    family(o, "tern_pool_run_max_seconds", "gauge",
           "The longest any /hash or /block job of the demo ran.");
    put(o, "tern_pool_run_max_seconds %.9f\n",
        seconds(atomic_load_explicit(&app->job_run_max_ns, memory_order_relaxed)));
}

static void server_part(struct out *o, const struct server *srv)
{
    const struct app *app = srv->app;
    struct counters t;
    struct gauges g;
    app_totals(srv, &t, &g);

    family(o, "tern_demo_owners", "gauge", "Open connection owners (one per connection).");
    put(o, "tern_demo_owners %u\n", g.owners);
    family(o, "tern_demo_owner_jobs", "gauge", "/hash jobs in flight, each counted by its owner.");
    put(o, "tern_demo_owner_jobs %u\n", g.owner_jobs);
    family(o, "tern_demo_owner_cap", "gauge", "Jobs in flight each connection's owner allows.");
    put(o, "tern_demo_owner_cap %u\n", srv->owner_cap);

    family(o, "tern_demo_connections", "gauge", "Open connections, by loop.");
    for (unsigned i = 0; i < app->nloops; i++)
        put(o, "tern_demo_connections{loop=\"%u\"} %u\n", i,
            atomic_load_explicit(&app->servers[i].conns, memory_order_relaxed));
    family(o, "tern_demo_requests_total", "counter", "Requests parsed, by loop.");
    for (unsigned i = 0; i < app->nloops; i++)
        put(o, "tern_demo_requests_total{loop=\"%u\"} %" PRIu64 "\n", i,
            atomic_load_explicit(&app->servers[i].n.requests, memory_order_relaxed));

    family(o, "tern_demo_responses_total", "counter", "Responses written, every loop.");
    put(o, "tern_demo_responses_total %" PRIu64 "\n", t.responses);
    family(o, "tern_demo_shed_total", "counter",
           "Requests answered 503 instead of queued, by reason.");
    put(o, "tern_demo_shed_total{reason=\"refused\"} %" PRIu64 "\n", t.shed_refused);
    put(o, "tern_demo_shed_total{reason=\"wait\"} %" PRIu64 "\n", t.shed_wait);
    put(o, "tern_demo_shed_total{reason=\"long\"} %" PRIu64 "\n", t.shed_long);
    uint64_t reserved, budget;
    files_budget(srv, &reserved, &budget);
    family(o, "tern_demo_file_reserved_bytes", "gauge",
           "Buffer bytes reserved by /files answers in flight (a window each).");
    put(o, "tern_demo_file_reserved_bytes %" PRIu64 "\n", reserved);
    family(o, "tern_demo_file_budget_bytes", "gauge",
           "The most buffer bytes /files answers may reserve, every loop's together.");
    put(o, "tern_demo_file_budget_bytes %" PRIu64 "\n", budget);
    family(o, "tern_demo_files_refused_total", "counter",
           "/files requests answered 503 with Retry-After, by reason.");
    put(o, "tern_demo_files_refused_total{reason=\"budget\"} %" PRIu64 "\n", t.files_over_budget);
    put(o, "tern_demo_files_refused_total{reason=\"descriptors\"} %" PRIu64 "\n", t.files_no_fd);
    family(o, "tern_demo_framing_refused_total", "counter",
           "Requests refused 400 for ambiguous framing, their connection closed.");
    put(o, "tern_demo_framing_refused_total %" PRIu64 "\n", t.framing_refused);
    family(o, "tern_demo_refusals_total", "counter",
           "The demo's own submissions refused, by cause (its share of the pool's).");
    for (unsigned k = 1; k < sizeof(t.refused) / sizeof(t.refused[0]); k++)
        put(o, "tern_demo_refusals_total{cause=\"%s\"} %" PRIu64 "\n",
            tern_refusal_name((tern_refusal)k),
            atomic_load_explicit(&t.refused[k], memory_order_relaxed));
}

int metrics_text(struct conn *c, char *buf, size_t cap)
{
    struct out o = {.buf = buf, .cap = cap, .len = 0};
    if (loops_part(&o, c->srv->app) < 0)
        return -1;
    pool_part(&o, c->srv);
    server_part(&o, c->srv);
    /* A cut exposition would parse as a wrong one: say it did not fit. */
    return o.len < cap ? (int)o.len : -1;
}
