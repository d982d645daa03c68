/*
 * Name lookups on the bounded class (SPEC §3, header tern_resolve): at most
 * (threads+1)/2 run at once, so a stalled resolver cannot starve CPU work;
 * each lookup completes exactly once, in step 2; a lookup can be cancelled;
 * a real lookup of "localhost" works and is freed with tern_freeaddrinfo.
 *
 * The stalled resolver is a fake getaddrinfo installed through
 * tern__set_getaddrinfo: it counts how many lookups are inside it at once
 * and blocks until the test releases it, then answers 127.0.0.1 through
 * the real getaddrinfo (a numeric host, so no network is involved).
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "pool_helpers.h"

static void shutdown_clean(void)
{
    tern__set_getaddrinfo(NULL);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}

/* ------------------------------------------------------------------ */
/* The fake resolver                                                   */
/* ------------------------------------------------------------------ */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool released;
    bool fail; /* answer EAI_NONAME instead */
    unsigned inside, max_inside, calls;
    char entered[64][16]; /* host names that reached the fake, in order */
} fake = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static int fake_getaddrinfo(const char *host, const char *service, const struct addrinfo *hints,
                            struct addrinfo **res)
{
    (void)service;
    (void)hints;
    uint64_t deadline = ph_now() + PH_LIVENESS_NS;
    pthread_mutex_lock(&fake.mu);
    if (fake.calls < 64)
        snprintf(fake.entered[fake.calls], sizeof fake.entered[0], "%s", host ? host : "");
    fake.calls++;
    fake.inside++;
    if (fake.inside > fake.max_inside)
        fake.max_inside = fake.inside;
    pthread_cond_broadcast(&fake.cv);
    while (!fake.released && ph_now() < deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&fake.cv, &fake.mu, &ts);
    }
    fake.inside--;
    bool fail = fake.fail;
    pthread_mutex_unlock(&fake.mu);
    if (fail)
        return EAI_NONAME;
    struct addrinfo h = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
                         .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
    return getaddrinfo("127.0.0.1", "80", &h, res);
}

static unsigned fake_read(unsigned *field)
{
    pthread_mutex_lock(&fake.mu);
    unsigned v = *field;
    pthread_mutex_unlock(&fake.mu);
    return v;
}

static void fake_release(void)
{
    pthread_mutex_lock(&fake.mu);
    fake.released = true;
    pthread_cond_broadcast(&fake.cv);
    pthread_mutex_unlock(&fake.mu);
}

static bool fake_has_entered(const char *host)
{
    bool found = false;
    pthread_mutex_lock(&fake.mu);
    for (unsigned i = 0; i < fake.calls && i < 64; i++)
        if (strcmp(fake.entered[i], host) == 0)
            found = true;
    pthread_mutex_unlock(&fake.mu);
    return found;
}

/* ------------------------------------------------------------------ */
/* Lookup records                                                      */
/* ------------------------------------------------------------------ */

struct lookup {
    char host[32];
    tern_id id;
    atomic_int calls;
    int status;
    int step;
    tern_id cb_id;
    bool had_result;
    bool is_loopback;
};

static void lookup_cb(tern_loop *loop, tern_id id, int status, struct addrinfo *res, void *arg)
{
    struct lookup *l = arg;
    l->status = status;
    l->step = tern__loop_step(loop);
    l->cb_id = id;
    l->had_result = res != NULL;
    for (struct addrinfo *a = res; a != NULL; a = a->ai_next) {
        if (a->ai_family == AF_INET) {
            const struct sockaddr_in *sin = (const struct sockaddr_in *)a->ai_addr;
            if (ntohl(sin->sin_addr.s_addr) >> 24 == 127)
                l->is_loopback = true;
        } else if (a->ai_family == AF_INET6) {
            const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)a->ai_addr;
            if (IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr))
                l->is_loopback = true;
        }
    }
    tern_freeaddrinfo(res);
    atomic_fetch_add(&l->calls, 1);
}

static int lookups_done(struct lookup *ls, int n)
{
    int total = 0;
    for (int i = 0; i < n; i++)
        total += atomic_load(&ls[i].calls);
    return total;
}

static int start_lookup(tern_loop *loop, struct lookup *l, int i)
{
    memset(l, 0, sizeof *l);
    atomic_init(&l->calls, 0);
    l->status = 1;
    snprintf(l->host, sizeof l->host, "h%d.test", i);
    return tern_resolve(loop, l->host, "80", NULL, lookup_cb, l, &l->id);
}

/*
 * Returns once every lookup submitted so far has been taken off the pool's
 * queue and either entered the resolver or been set aside over the cap.
 * It submits `free_workers` gated CPU jobs behind the lookups and waits
 * until all of them are inside their gate: the queue is FIFO, so each
 * lookup ahead of them was dequeued first, and each of the workers now
 * holding a gate has finished with whatever it dequeued before. With
 * fewer workers free than expected (a broken cap let a lookup in), the
 * wait ends at the liveness bound and the test fails saying so. The gates
 * open and the probes are delivered before it returns.
 */
static void every_lookup_dequeued(tern_loop *loop, unsigned free_workers)
{
    enum { MAX_PROBES = 8 };
    cr_assert_leq(free_workers, MAX_PROBES);
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job probe[MAX_PROBES];
    for (unsigned i = 0; i < free_workers; i++) {
        ph_job_init(&probe[i], &gate);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &probe[i]), 0);
    }
    bool entered = ph_gate_wait_entered(&gate, free_workers);
    unsigned got = ph_gate_entered(&gate);
    ph_gate_open(&gate);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, ph_done_total(probe, free_workers) == (int)free_workers);
    cr_assert(entered, "only %u of %u free workers reached the probe behind the lookups "
                       "(%u lookups inside the resolver)",
              got, free_workers, fake_read(&fake.inside));
    cr_assert(ok, "the probes were never delivered (%d of %u)", ph_done_total(probe, free_workers),
              free_workers);
    ph_gate_destroy(&gate);
}

/* ------------------------------------------------------------------ */
/* Tests                                                               */
/* ------------------------------------------------------------------ */

Test(resolve, stalled_lookups_are_capped_and_do_not_starve_cpu_work)
{
    enum { THREADS = 4, CAP = (THREADS + 1) / 2, LOOKUPS = 10, CPU = 24 };
    tern_pool_config cfg = ph_config(THREADS, 256, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern__set_getaddrinfo(fake_getaddrinfo);
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);

    struct lookup ls[LOOKUPS];
    for (int i = 0; i < LOOKUPS; i++)
        cr_assert_eq(start_lookup(loop, &ls[i], i), 0);
    bool ok;
    PH_WAIT_UNTIL(ok, fake_read(&fake.inside) >= CAP);
    cr_assert(ok, "only %u lookups started", fake_read(&fake.inside));
    /* Every lookup has been offered to a worker, and every worker not
     * stalled in the resolver has gone on to other work, so a broken cap
     * had its every chance to let a third one in. */
    every_lookup_dequeued(loop, THREADS - CAP);
    cr_assert_eq(fake_read(&fake.max_inside), (unsigned)CAP,
                 "%u lookups ran at once with %d threads (cap %d)", fake_read(&fake.max_inside),
                 THREADS, CAP);

    /* CPU work submitted afterwards keeps completing while they are stalled. */
    ph_job cpu[CPU];
    for (int i = 0; i < CPU; i++) {
        ph_job_init(&cpu[i], NULL);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &cpu[i]), 0);
    }
    PH_PUMP_UNTIL(ok, loop, ph_done_total(cpu, CPU) == CPU);
    cr_assert(ok, "CPU work starved behind stalled lookups (%d of %d done)",
              ph_done_total(cpu, CPU), CPU);
    for (int i = 0; i < CPU; i++)
        cr_assert_eq(cpu[i].status, 0);
    cr_assert_eq(lookups_done(ls, LOOKUPS), 0, "a lookup completed while stalled");
    cr_assert_eq(fake_read(&fake.max_inside), (unsigned)CAP);

    /* More CPU work after the lookups: still fine, a second time round. */
    fake_release();
    PH_PUMP_UNTIL(ok, loop, lookups_done(ls, LOOKUPS) == LOOKUPS);
    cr_assert(ok, "only %d of %d lookups completed", lookups_done(ls, LOOKUPS), LOOKUPS);
    cr_assert_eq(tern_loop_run(loop), 0);
    for (int i = 0; i < LOOKUPS; i++) {
        cr_assert_eq(atomic_load(&ls[i].calls), 1, "lookup %d completed %d times", i,
                     atomic_load(&ls[i].calls));
        cr_assert_eq(ls[i].status, 0, "lookup %d: %s", i, tern_err_name(ls[i].status));
        cr_assert(ls[i].had_result && ls[i].is_loopback);
        cr_assert_eq(ls[i].step, 2);
        cr_assert_eq(ls[i].cb_id, ls[i].id);
    }
    cr_assert_eq(fake_read(&fake.calls), (unsigned)LOOKUPS, "a lookup ran twice");
    cr_assert_leq(fake_read(&fake.max_inside), (unsigned)CAP);
    tern_loop_free(loop);
    shutdown_clean();
}

Test(resolve, one_thread_pool_allows_one_lookup)
{
    /* (1+1)/2 = 1: the one worker may resolve, and CPU work waits for it only. */
    tern_pool_config cfg = ph_config(1, 64, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern__set_getaddrinfo(fake_getaddrinfo);
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    struct lookup ls[3];
    for (int i = 0; i < 3; i++)
        cr_assert_eq(start_lookup(loop, &ls[i], i), 0);
    bool ok;
    PH_WAIT_UNTIL(ok, fake_read(&fake.inside) == 1);
    cr_assert(ok);
    /* The one worker is stalled in the first lookup, so nothing else can
     * run: no probe, no wait; the cap of 1 is what let it in at all. */
    cr_assert_eq(fake_read(&fake.max_inside), 1u);
    fake_release();
    PH_PUMP_UNTIL(ok, loop, lookups_done(ls, 3) == 3);
    cr_assert(ok);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(ls[i].status, 0);
    cr_assert_eq(fake_read(&fake.max_inside), 1u);
    tern_loop_free(loop);
    shutdown_clean();
}

Test(resolve, lookups_can_be_cancelled_queued_and_running)
{
    enum { THREADS = 2, CAP = (THREADS + 1) / 2, N = 3 };
    tern_pool_config cfg = ph_config(THREADS, 64, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern__set_getaddrinfo(fake_getaddrinfo);
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    struct lookup ls[N];
    for (int i = 0; i < N; i++)
        cr_assert_eq(start_lookup(loop, &ls[i], i), 0);
    bool ok;
    PH_WAIT_UNTIL(ok, fake_read(&fake.inside) == CAP);
    cr_assert(ok);
    every_lookup_dequeued(loop, THREADS - CAP);

    /* Find one stalled inside the resolver and one set aside over the cap. */
    int running = -1, queued = -1;
    for (int i = 0; i < N; i++) {
        if (fake_has_entered(ls[i].host))
            running = running < 0 ? i : running;
        else
            queued = queued < 0 ? i : queued;
    }
    cr_assert(running >= 0 && queued >= 0);

    cr_assert_eq(tern__test_cancel_now(loop, ls[queued].id), 0);
    tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&ls[queued].calls), 1,
                 "a queued lookup's cancel waited for the resolver");
    cr_assert_eq(ls[queued].status, -ECANCELED);
    cr_assert(!ls[queued].had_result);
    cr_assert_eq(ls[queued].step, 2);

    cr_assert_eq(tern__test_cancel_now(loop, ls[running].id), TERN_CANCEL_RUNNING);
    /* A running lookup cannot be interrupted; it completes -ECANCELED once
     * getaddrinfo returns, and its result is freed by tern, not handed out. */
    fake_release();
    PH_PUMP_UNTIL(ok, loop, lookups_done(ls, N) == N);
    cr_assert(ok);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&ls[running].calls), 1);
    cr_assert_eq(ls[running].status, -ECANCELED);
    cr_assert(!ls[running].had_result, "a cancelled lookup handed out a result");
    for (int i = 0; i < N; i++) {
        cr_assert_eq(atomic_load(&ls[i].calls), 1);
        if (i != running && i != queued)
            cr_assert_eq(ls[i].status, 0);
    }
    cr_assert(!fake_has_entered(ls[queued].host), "a cancelled queued lookup reached getaddrinfo");
    cr_assert_eq(tern__test_cancel_now(loop, ls[queued].id), -ENOENT);
    tern_loop_free(loop);
    shutdown_clean();
}

Test(resolve, failures_map_to_tern_eai_codes)
{
    tern__set_getaddrinfo(fake_getaddrinfo);
    fake.released = true;
    fake.fail = true;
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    struct lookup l;
    cr_assert_eq(start_lookup(loop, &l, 0), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&l.calls), 1);
    cr_assert_eq(l.status, TERN_EAI_NONAME, "got %d (%s)", l.status, tern_err_name(l.status));
    cr_assert(!l.had_result);
    cr_assert_str_eq(tern_err_name(TERN_EAI_NONAME), "EAI_NONAME");
    tern_loop_free(loop);
    shutdown_clean();
}

Test(resolve, bad_arguments_are_refused)
{
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    struct lookup l;
    memset(&l, 0, sizeof l);
    cr_assert_eq(tern_resolve(loop, "localhost", NULL, NULL, NULL, &l, NULL), -EINVAL);
    cr_assert_eq(tern_resolve(loop, NULL, NULL, NULL, lookup_cb, &l, NULL), -EINVAL);
    cr_assert_eq(ph_loop_stats(loop).live_operations, 0u);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&l.calls), 0);
    tern_freeaddrinfo(NULL);
    tern_loop_free(loop);
    shutdown_clean();
}

Test(resolve, real_lookup_of_localhost)
{
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    struct lookup l;
    memset(&l, 0, sizeof l);
    l.status = 1;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    cr_assert_eq(tern_resolve(loop, "localhost", "80", &hints, lookup_cb, &l, &l.id), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&l.calls), 1);
    cr_assert_eq(l.status, 0, "localhost did not resolve: %s", tern_strerror(l.status));
    cr_assert(l.had_result);
    cr_assert(l.is_loopback, "localhost resolved to something other than loopback");
    cr_assert_eq(l.step, 2);
    cr_assert_eq(l.cb_id, l.id);

    /* Only a service name is fine too. */
    struct lookup s;
    memset(&s, 0, sizeof s);
    struct addrinfo numeric = {.ai_family = AF_INET, .ai_flags = AI_NUMERICSERV};
    cr_assert_eq(tern_resolve(loop, NULL, "8080", &numeric, lookup_cb, &s, &s.id), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(atomic_load(&s.calls), 1);
    cr_assert_eq(s.status, 0);
    tern_loop_free(loop);
    shutdown_clean();
}

/*
 * Releases the stalled resolver once tern_loop_free is under way: free
 * cancels the two lookups that never reached the resolver and delivers
 * them (-ECANCELED) before it waits for the one inside, so their callbacks
 * prove it got that far. A bounded wait: on giving up it releases anyway
 * (so free can return) and the test fails on `gave_up`.
 */
struct release_ctx {
    struct lookup *ls;
    int n;
    atomic_bool gave_up;
};

static void *release_during_free(void *arg)
{
    struct release_ctx *r = arg;
    bool ok;
    PH_WAIT_UNTIL(ok, lookups_done(r->ls, r->n) == r->n - 1);
    atomic_store(&r->gave_up, !ok);
    fake_release();
    return NULL;
}

Test(resolve, freeing_the_loop_completes_pending_lookups)
{
    tern_pool_config cfg = ph_config(2, 64, 4);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern__set_getaddrinfo(fake_getaddrinfo);
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    struct lookup ls[3];
    for (int i = 0; i < 3; i++)
        cr_assert_eq(start_lookup(loop, &ls[i], i), 0);
    bool ok;
    PH_WAIT_UNTIL(ok, fake_read(&fake.inside) == 1);
    cr_assert(ok);
    /* The lookup inside getaddrinfo cannot notice the cancel: release it
     * from another thread only once free is under way, so free has it to
     * wait for. */
    struct release_ctx r = {.ls = ls, .n = 3};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, release_during_free, &r), 0);
    tern_loop_free(loop);
    pthread_join(t, NULL);
    cr_assert(!atomic_load(&r.gave_up),
              "tern_loop_free never delivered the two lookups the resolver had not started "
              "(%d callbacks before the release)",
              lookups_done(ls, 3));
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(atomic_load(&ls[i].calls), 1, "lookup %d: %d callbacks", i,
                     atomic_load(&ls[i].calls));
        cr_assert_eq(ls[i].status, -ECANCELED);
        cr_assert(!ls[i].had_result);
    }
    shutdown_clean();
}
