/*
 * The demo's group-wide state (main.c builds it; loops.c reads it).
 */
#ifndef DEMO_LOOPS_H
#define DEMO_LOOPS_H

#include <stdatomic.h>
#include <time.h>

#include "demo.h"

struct app {
    tern_group *group;
    unsigned nloops;
    struct server *servers;      /* one per loop, index = loop index */
    tern_id sigint, sigterm, sighup; /* watched on loop 0, started on its thread */
    int signal_rc;               /* why they could not be watched, or 0 */
    bool draining;               /* loop 0's: a shutdown signal was seen */
    _Atomic unsigned loops_draining; /* loops whose drain has not ended */
    uint64_t shed_wait_ns[2];    /* the two bounds SIGHUP swaps between */
    unsigned shed_choice;        /* which one is in force (exclusive mode writes it) */
    unsigned reconfigurations;   /* written in exclusive mode, read at exit */
    uint64_t drain_ns;           /* --drain-timeout-ms: then the rest is abandoned */
    uint64_t file_budget;        /* --file-budget-bytes: /files buffers, every loop's */
    _Atomic uint64_t file_reserved; /* the windows of /files answers in flight, reserved */
    /* The most any demo job waited and ran, and any connection timer was late. */
    _Atomic uint64_t job_wait_max_ns, job_run_max_ns;
};

/* SIGHUP, on loop 0: swap the shedding bound on every loop, in exclusive mode. */
void app_reconfigure(struct server *srv);
/* The final report, after the group has ended. */
int app_final_json(const struct app *app, char *buf, size_t cap);

#endif
