/*
 * Admission from every path (SPEC §12, beside admission_test.c):
 *   - each cause of refusal from each path that can meet it — tern_submit,
 *     tern_submit_with, tern_resolve, tern_resolve_with, a single-call
 *     file request and a whole-file one — named by tern_loop_last_refusal,
 *     with nothing left behind: no operation, no pool submission, no
 *     callback, no file, no owner count moved (the owner's refused aside,
 *     for its own cap);
 *   - file requests with an owner and a timeout (tern_fs_options): the
 *     owner's cap; its close cancelling queued requests, stopping a
 *     running whole-file request at its next step boundary and leaving a
 *     finished one's outcome; deadlines before start, while a call or a
 *     step runs, and after finish;
 *   - lookups: a deadline before start, a queued lookup of a closed owner;
 *   - bad input on every path taking options: the documented error, and
 *     no count of the owner's moved.
 *
 * "While running" without timing: a request that opens a FIFO for reading
 * blocks in open(2) until a writer comes, and a test can tell it is there
 * (a non-blocking writer's open stops failing with ENXIO). A deadline's
 * effect is observed through a timer armed after it for the same delay:
 * the loop's one heap runs equal deadlines in the order they were armed,
 * so once the timer has fired, the deadline has been acted on.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pool_helpers.h"
#include "testing.h"

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/tern_adm_test.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static const char *at(const char *name)
{
    static char buf[4][128];
    static int i;
    i = (i + 1) % 4;
    snprintf(buf[i], sizeof buf[i], "%s/%.60s", dir, name);
    return buf[i];
}

static int count_entries(void)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

static void remove_dir(void)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) != 0)
            rmdir(p);
    }
    closedir(d);
    rmdir(dir);
}

static int count_fds(void)
{
    int n = proc_open_fds();
    cr_assert_geq(n, 0, "cannot read /proc/self/fd");
    return n;
}

static void put_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

static int numeric_getaddrinfo(const char *host, const char *service,
                               const struct addrinfo *hints, struct addrinfo **res)
{
    (void)host, (void)service, (void)hints;
    struct addrinfo h = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
                         .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
    return getaddrinfo("127.0.0.1", "80", &h, res);
}

static tern_loop *setup(unsigned threads, unsigned queue, unsigned long_max,
                        const tern_loop_options *opts)
{
    tern__set_getaddrinfo(numeric_getaddrinfo);
    make_dir();
    tern_pool_config cfg = ph_config(threads, queue, long_max);
    cr_assert_eq(tern_pool_start(&cfg), 0);
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, opts), 0);
    return loop;
}

static void teardown(tern_loop *loop)
{
    bool ok;
    /* Whatever is still live here is owed: let it finish, within the bound. */
    PH_PUMP_UNTIL(ok, loop, ph_loop_stats(loop).undelivered == 0);
    cr_assert(ok, "FAIL: undelivered %u at teardown", ph_loop_stats(loop).undelivered);
    tern_loop_free(loop);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
    tern_pool_stats s = ph_stats();
    cr_assert_eq(s.queued, 0u);
    cr_assert_eq(s.reserved, 0u);
    cr_assert_eq(s.submitted, s.completed + s.cancelled + s.timed_out,
                 "a completion is still owed");
    remove_dir();
    tern__set_getaddrinfo(NULL);
}

/* One callback counter for every kind of completion. */
typedef struct probe {
    atomic_int calls;
    int status;
    tern_fs_result res;
} probe;

static void probe_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)result;
    probe *p = arg;
    p->status = status;
    atomic_fetch_add(&p->calls, 1);
}

static void probe_lookup(tern_loop *loop, tern_id id, int status, struct addrinfo *res, void *arg)
{
    (void)loop, (void)id;
    probe *p = arg;
    p->status = status;
    tern_freeaddrinfo(res);
    atomic_fetch_add(&p->calls, 1);
}

static void probe_fs(tern_loop *loop, tern_id id, int status, tern_fs_result *res, void *arg)
{
    (void)loop, (void)id;
    probe *p = arg;
    p->status = status;
    p->res = *res; /* the test frees data */
    atomic_fetch_add(&p->calls, 1);
}

static void *probe_work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

static void wait_probe(tern_loop *loop, probe *p)
{
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&p->calls) >= 1);
    cr_assert(ok, "FAIL: no completion within the liveness bound");
    cr_assert_eq(atomic_load(&p->calls), 1);
}

/* ------------------------------------------------------------------ */
/* Each cause from each path                                           */
/* ------------------------------------------------------------------ */

enum path { P_SUBMIT, P_SUBMIT_WITH, P_RESOLVE, P_RESOLVE_WITH, P_FS, P_FS_STEPS, P_COUNT };

static const char *const path_names[P_COUNT] = {"tern_submit", "tern_submit_with",
                                                "tern_resolve", "tern_resolve_with",
                                                "tern_fs_mkdir", "tern_fs_write_file"};

static bool takes_owner(enum path p)
{
    return p == P_SUBMIT_WITH || p == P_RESOLVE_WITH || p == P_FS || p == P_FS_STEPS;
}

/* Submit along path p, with owner on the paths that take one. */
static int submit_along(tern_loop *loop, enum path p, tern_occupancy occ, tern_id owner,
                        probe *pr, tern_id *idp)
{
    tern_job_options jo;
    tern_job_options_init(&jo);
    jo.owner = owner;
    tern_fs_options fo;
    tern_fs_options_init(&fo);
    fo.owner = owner;
    switch (p) {
    case P_SUBMIT:
        return tern_submit(loop, occ, probe_work, probe_done, pr, idp);
    case P_SUBMIT_WITH:
        return tern_submit_with(loop, occ, probe_work, probe_done, pr, &jo, idp);
    case P_RESOLVE:
        return tern_resolve(loop, "x.invalid", "80", NULL, probe_lookup, pr, idp);
    case P_RESOLVE_WITH:
        return tern_resolve_with(loop, "x.invalid", "80", NULL, probe_lookup, pr, &jo, idp);
    case P_FS:
        return tern_fs_mkdir(loop, at("made-dir"), 0700, &fo, probe_fs, pr, idp);
    default:
        return tern_fs_write_file(loop, at("made-file"), "x", 1, &fo, probe_fs, pr, idp);
    }
}

/*
 * Every path in `paths` (a bit mask) is refused with -EAGAIN and `cause`,
 * and leaves nothing: the loop's live operations and credits, the pool's
 * submissions, the directory and the owner's accepted and in-flight counts
 * are as before; the owner's refused moves for its own cap only; no
 * callback ever comes (checked after a turn).
 */
static void expect_refused(tern_loop *loop, unsigned paths, tern_occupancy occ, tern_id owner,
                           tern_refusal cause)
{
    probe pr[P_COUNT];
    memset(pr, 0, sizeof pr);
    int entries = count_entries();
    for (int p = 0; p < P_COUNT; p++) {
        if (!(paths & (1u << p)))
            continue;
        tern_loop_stats ls = ph_loop_stats(loop);
        uint64_t submitted = ph_stats().submitted;
        tern_owner_stats before = {0}, after = {0};
        if (owner != 0)
            cr_assert_eq(tern_owner_stats_get(loop, owner, &before), 0);
        tern_id id = 0;
        int rc = submit_along(loop, (enum path)p, occ, owner, &pr[p], &id);
        cr_assert_eq(rc, -EAGAIN, "%s under %s: %s", path_names[p], tern_refusal_name(cause),
                     tern_err_name(rc));
        cr_assert_eq(tern_loop_last_refusal(loop), cause, "%s: cause %s, expected %s",
                     path_names[p], tern_refusal_name(tern_loop_last_refusal(loop)),
                     tern_refusal_name(cause));
        cr_assert_eq(id, 0, "%s: a refused call wrote an id", path_names[p]);
        tern_loop_stats ls2 = ph_loop_stats(loop);
        cr_assert_eq(ls2.live_operations, ls.live_operations, "%s: an operation was left",
                     path_names[p]);
        cr_assert_eq(ls2.undelivered, ls.undelivered, "%s: a credit was left", path_names[p]);
        cr_assert_eq(ph_stats().submitted, submitted, "%s: the pool counted a submission",
                     path_names[p]);
        if (owner != 0) {
            cr_assert_eq(tern_owner_stats_get(loop, owner, &after), 0);
            cr_assert_eq(after.accepted, before.accepted, "%s", path_names[p]);
            cr_assert_eq(after.in_flight, before.in_flight, "%s", path_names[p]);
            bool own = cause == TERN_REFUSED_OWNER_CAP && takes_owner((enum path)p);
            cr_assert_eq(after.refused, before.refused + own,
                         "%s: the owner's refused count (%llu, was %llu)", path_names[p],
                         (unsigned long long)after.refused, (unsigned long long)before.refused);
        }
    }
    tern_loop_run_once(loop, 0);
    for (int p = 0; p < P_COUNT; p++)
        cr_assert_eq(atomic_load(&pr[p].calls), 0, "%s: a refused call called back",
                     path_names[p]);
    cr_assert_eq(count_entries(), entries, "a refused file request touched the directory");
}

#define ALL_PATHS ((1u << P_COUNT) - 1)
#define OWNER_PATHS                                                                            \
    ((1u << P_SUBMIT_WITH) | (1u << P_RESOLVE_WITH) | (1u << P_FS) | (1u << P_FS_STEPS))

/* After the limit is lifted, every path is accepted again and says NONE. */
static void expect_accepted_everywhere(tern_loop *loop, tern_id owner)
{
    probe pr[P_COUNT];
    memset(pr, 0, sizeof pr);
    for (int p = 0; p < P_COUNT; p++) {
        int rc = submit_along(loop, (enum path)p, TERN_BOUNDED, owner, &pr[p], NULL);
        cr_assert_eq(rc, 0, "%s: %s", path_names[p], tern_err_name(rc));
        cr_assert_eq(tern_loop_last_refusal(loop), TERN_REFUSED_NONE, "%s", path_names[p]);
        /* One at a time: the owner's cap in these tests may be small. */
        wait_probe(loop, &pr[p]);
        cr_assert_eq(pr[p].status, 0, "%s: %s", path_names[p], tern_err_name(pr[p].status));
    }
    cr_assert_eq(rmdir(at("made-dir")), 0, "the accepted mkdir made nothing");
    cr_assert_eq(unlink(at("made-file")), 0, "the accepted write_file made nothing");
}

Test(admission_paths, queue_full_from_every_path)
{
    tern_loop *loop = setup(1, 2, 4, NULL);
    tern_id owner;
    cr_assert_eq(tern_owner_open(loop, 8, &owner), 0);
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job held, fill[2];
    ph_job_init(&held, &gate);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &held), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    for (int i = 0; i < 2; i++) {
        ph_job_init(&fill[i], NULL);
        cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &fill[i]), 0);
    }
    expect_refused(loop, ALL_PATHS, TERN_BOUNDED, owner, TERN_REFUSED_QUEUE_FULL);
    ph_gate_open(&gate);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&held.done_calls) == 1 && ph_done_total(fill, 2) == 2);
    cr_assert(ok);
    expect_accepted_everywhere(loop, owner);
    cr_assert_eq(tern_owner_close(loop, owner), 0);
    teardown(loop);
    ph_gate_destroy(&gate);
}

Test(admission_paths, long_ceiling_from_the_paths_that_submit_long_jobs)
{
    tern_loop *loop = setup(1, 16, 1, NULL);
    tern_id owner;
    cr_assert_eq(tern_owner_open(loop, 8, &owner), 0);
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job held;
    ph_job_init(&held, &gate);
    cr_assert_eq(ph_submit(loop, TERN_LONG, &held), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    /* Lookups and file requests are bounded: the long ceiling is not theirs. */
    expect_refused(loop, (1u << P_SUBMIT) | (1u << P_SUBMIT_WITH), TERN_LONG, owner,
                   TERN_REFUSED_LONG_CEILING);
    ph_gate_open(&gate);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&held.done_calls) == 1);
    cr_assert(ok);
    expect_accepted_everywhere(loop, owner);
    cr_assert_eq(tern_owner_close(loop, owner), 0);
    teardown(loop);
    ph_gate_destroy(&gate);
}

Test(admission_paths, undelivered_from_every_path)
{
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.max_undelivered = 2;
    tern_loop *loop = setup(1, 16, 4, &o);
    tern_id owner;
    cr_assert_eq(tern_owner_open(loop, 8, &owner), 0);
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job held, queued;
    ph_job_init(&held, &gate);
    ph_job_init(&queued, NULL);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &held), 0);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &queued), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    expect_refused(loop, ALL_PATHS, TERN_BOUNDED, owner, TERN_REFUSED_UNDELIVERED);
    ph_gate_open(&gate);
    bool ok;
    PH_PUMP_UNTIL(ok, loop,
                  atomic_load(&held.done_calls) == 1 && atomic_load(&queued.done_calls) == 1);
    cr_assert(ok);
    expect_accepted_everywhere(loop, owner);
    cr_assert_eq(tern_owner_close(loop, owner), 0);
    teardown(loop);
    ph_gate_destroy(&gate);
}

static void never_fires(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id, (void)arg;
    cr_assert_fail("a timer set for an hour fired");
}

Test(admission_paths, operations_from_every_path)
{
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.max_operations = 3;
    tern_loop *loop = setup(1, 16, 4, &o);
    tern_id owner, t1, t2;
    cr_assert_eq(tern_owner_open(loop, 8, &owner), 0); /* one live operation */
    cr_assert_eq(tern_timer_start(loop, 3600 * PH_SEC, 0, never_fires, NULL, &t1), 0);
    cr_assert_eq(tern_timer_start(loop, 3600 * PH_SEC, 0, never_fires, NULL, &t2), 0);
    expect_refused(loop, ALL_PATHS, TERN_BOUNDED, owner, TERN_REFUSED_OPERATIONS);
    cr_assert_eq(tern_timer_stop(loop, t1), 0);
    cr_assert_eq(tern_timer_stop(loop, t2), 0);
    expect_accepted_everywhere(loop, owner);
    cr_assert_eq(tern_owner_close(loop, owner), 0);
    teardown(loop);
}

/*
 * An owner of cap 1 held at its cap: one of its jobs is running, stopped
 * at a gate, so every further submission with `jo` is refused for the cap.
 */
struct full_owner {
    tern_id id;
    tern_job_options jo; /* owner = id */
    ph_gate gate;
    ph_job held;
};

static void fill_owner(tern_loop *loop, struct full_owner *f)
{
    cr_assert_eq(tern_owner_open(loop, 1, &f->id), 0);
    ph_gate_init(&f->gate);
    ph_job_init(&f->held, &f->gate);
    tern_job_options_init(&f->jo);
    f->jo.owner = f->id;
    cr_assert_eq(
        tern_submit_with(loop, TERN_BOUNDED, ph_work, ph_done, &f->held, &f->jo, &f->held.id), 0);
    cr_assert(ph_gate_wait_entered(&f->gate, 1));
}

/* Let the held job finish and wait for its done. */
static void release_owner(tern_loop *loop, struct full_owner *f)
{
    ph_gate_open(&f->gate);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&f->held.done_calls) == 1);
    cr_assert(ok);
    ph_gate_destroy(&f->gate);
}

Test(admission_paths, owner_cap_from_every_path_that_takes_an_owner)
{
    tern_loop *loop = setup(1, 16, 4, NULL);
    struct full_owner f;
    fill_owner(loop, &f);
    tern_id owner = f.id;
    expect_refused(loop, OWNER_PATHS, TERN_BOUNDED, owner, TERN_REFUSED_OWNER_CAP);
    tern_owner_stats os;
    cr_assert_eq(tern_owner_stats_get(loop, owner, &os), 0);
    cr_assert_eq(os.refused, 4);
    cr_assert_eq(os.accepted, 1);
    cr_assert_eq(os.in_flight, 1);
    /* The paths without an owner are not held by its cap. */
    probe free_job = {0};
    cr_assert_eq(submit_along(loop, P_SUBMIT, TERN_BOUNDED, 0, &free_job, NULL), 0);
    release_owner(loop, &f);
    wait_probe(loop, &free_job);
    expect_accepted_everywhere(loop, owner);
    cr_assert_eq(tern_owner_stats_get(loop, owner, &os), 0);
    cr_assert_eq(os.accepted, 1 + 4, "each owner path accepted once more");
    cr_assert_eq(os.in_flight, 0);
    cr_assert_eq(tern_owner_close(loop, owner), 0);
    teardown(loop);
}

struct shutdown_arg {
    atomic_int rc;
};

static void *shut_down(void *arg)
{
    struct shutdown_arg *s = arg;
    atomic_store(&s->rc, tern_pool_shutdown(TERN_POOL_DRAIN, 30 * PH_SEC));
    return NULL;
}

Test(admission_paths, a_shutdown_under_way_from_every_path)
{
    tern_loop *loop = setup(2, 16, 4, NULL);
    tern_id owner;
    cr_assert_eq(tern_owner_open(loop, 8, &owner), 0);
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job held;
    ph_job_init(&held, &gate);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &held), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    struct shutdown_arg s = {0};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, shut_down, &s), 0);
    /*
     * The shutdown waits for the held job, so once one submission has been
     * refused for it, every later one is until the gate opens. Until then a
     * probe job may still be accepted (and is run to its end).
     */
    bool refused = false;
    uint64_t deadline = ph_now() + PH_LIVENESS_NS;
    while (!refused && ph_now() < deadline) {
        probe pr = {0};
        int rc = submit_along(loop, P_SUBMIT, TERN_BOUNDED, 0, &pr, NULL);
        if (rc == -EAGAIN) {
            cr_assert_eq(tern_loop_last_refusal(loop), TERN_REFUSED_SHUTDOWN);
            refused = true;
        } else {
            cr_assert_eq(rc, 0, "%s", tern_err_name(rc));
            wait_probe(loop, &pr);
            ph_sleep_ns(PH_MS / 10);
        }
    }
    cr_assert(refused, "FAIL: no submission was refused while the shutdown waited");
    expect_refused(loop, ALL_PATHS, TERN_BOUNDED, owner, TERN_REFUSED_SHUTDOWN);
    ph_gate_open(&gate);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&held.done_calls) == 1);
    cr_assert(ok);
    pthread_join(t, NULL);
    cr_assert_eq(atomic_load(&s.rc), 0);
    /* A fresh pool starts on demand (the defaults: the shutdown ended ours). */
    expect_accepted_everywhere(loop, owner);
    cr_assert_eq(tern_owner_close(loop, owner), 0);
    teardown(loop);
    ph_gate_destroy(&gate);
}

/* ------------------------------------------------------------------ */
/* File requests with an owner                                         */
/* ------------------------------------------------------------------ */

static tern_fs_options fs_owned(tern_id owner, uint64_t timeout_ns)
{
    tern_fs_options fo;
    tern_fs_options_init(&fo);
    fo.owner = owner;
    fo.timeout_ns = timeout_ns;
    return fo;
}

Test(admission_paths, closing_an_owner_with_queued_running_and_finished_file_requests)
{
    tern_loop *loop = setup(2, 16, 4, NULL);
    put_file(at("f"), "content");
    int fds = count_fds();
    tern_id owner;
    cr_assert_eq(tern_owner_open(loop, 8, &owner), 0);
    tern_fs_options fo = fs_owned(owner, 0);
    probe finished = {0}, running = {0}, q_mkdir = {0}, q_read = {0}, q_write = {0};
    /* Finished: its callback is on the way (not yet run) when the owner closes. */
    cr_assert_eq(tern_fs_stat(loop, at("f"), &fo, probe_fs, &finished, NULL), 0);
    /*
     * Until the stat has made its call: queued read first, busy after. A
     * worker counts itself busy before its job leaves the queued figure
     * and stays busy until the job has run, so an empty queue and then no
     * worker busy means the call is made. Read the other way round, busy
     * can be 0 because no worker has woken yet, and the hold armed below
     * then catches the stat's call instead of the read's.
     */
    bool ok;
    PH_WAIT_UNTIL(ok, ph_stats().queued == 0 && ph_stats().busy == 0);
    cr_assert(ok);
    /* Running: the first step of a read_file, held by the fault seam before
     * its open(2) (its slot turned into a reservation when a worker took it). */
    tern__fault_fs_hold();
    cr_assert_eq(tern_fs_read_file(loop, at("f"), &fo, probe_fs, &running, NULL), 0);
    PH_WAIT_UNTIL(ok, tern__fault_fs_held() && ph_stats().reserved == 1);
    cr_assert(ok, "FAIL: the first step never ran (reserved %u)", ph_stats().reserved);
    /* The other worker held by a job of nobody's, so the rest stay queued. */
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job blocker;
    ph_job_init(&blocker, &gate);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &blocker), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    cr_assert_eq(tern_fs_mkdir(loop, at("never"), 0700, &fo, probe_fs, &q_mkdir, NULL), 0);
    cr_assert_eq(tern_fs_read_file(loop, at("f"), &fo, probe_fs, &q_read, NULL), 0);
    cr_assert_eq(tern_fs_write_file(loop, at("w"), "x", 1, &fo, probe_fs, &q_write, NULL), 0);
    tern_owner_stats os;
    cr_assert_eq(tern_owner_stats_get(loop, owner, &os), 0);
    cr_assert_eq(os.accepted, 5);
    cr_assert_eq(os.in_flight, 5);

    cr_assert_eq(tern_owner_close(loop, owner), 0);
    cr_assert_eq(tern_owner_stats_get(loop, owner, &os), -ENOENT, "the id is stale at once");
    /* The queued ones are answered without a worker. */
    wait_probe(loop, &q_mkdir);
    wait_probe(loop, &q_read);
    wait_probe(loop, &q_write);
    cr_assert_eq(q_mkdir.status, -ECANCELED);
    cr_assert_eq(q_read.status, -ECANCELED);
    cr_assert_null(q_read.res.data);
    cr_assert_eq(q_write.status, -ECANCELED);
    wait_probe(loop, &finished);
    cr_assert_eq(finished.status, 0, "a finished request keeps its outcome");
    cr_assert_eq(atomic_load(&running.calls), 0, "a running request answered before it returned");
    /* The running one was flagged: once its open returns it stops at the
     * step boundary and closes what it opened. */
    tern__fault_fs_release();
    wait_probe(loop, &running);
    cr_assert_eq(running.status, -ECANCELED, "%s", tern_err_name(running.status));
    cr_assert_null(running.res.data);
    ph_gate_open(&gate);
    PH_PUMP_UNTIL(ok, loop, atomic_load(&blocker.done_calls) == 1);
    cr_assert(ok);
    cr_assert_eq(blocker.status, 0, "another owner's job was touched");
    cr_assert_eq(access(at("never"), F_OK), -1, "a queued mkdir of a closed owner ran");
    cr_assert_eq(access(at("w"), F_OK), -1, "a queued write_file of a closed owner ran");
    cr_assert_eq(count_entries(), 1, "only f remains");
    cr_assert_eq(count_fds(), fds);
    teardown(loop);
    ph_gate_destroy(&gate);
}

/* ------------------------------------------------------------------ */
/* File request deadlines                                              */
/* ------------------------------------------------------------------ */

Test(admission_paths, a_file_request_deadline_before_start_means_it_never_starts)
{
    tern_loop *loop = setup(1, 16, 4, NULL);
    put_file(at("f"), "content");
    int fds = count_fds();
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job blocker;
    ph_job_init(&blocker, &gate);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &blocker), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    tern_fs_options fo = fs_owned(0, PH_MS);
    probe mk = {0}, rd = {0}, wr = {0};
    cr_assert_eq(tern_fs_mkdir(loop, at("late"), 0700, &fo, probe_fs, &mk, NULL), 0);
    cr_assert_eq(tern_fs_read_file(loop, at("f"), &fo, probe_fs, &rd, NULL), 0);
    cr_assert_eq(tern_fs_write_file(loop, at("w"), "x", 1, &fo, probe_fs, &wr, NULL), 0);
    wait_probe(loop, &mk);
    wait_probe(loop, &rd);
    wait_probe(loop, &wr);
    cr_assert_eq(mk.status, -ETIMEDOUT, "%s", tern_err_name(mk.status));
    cr_assert_eq(rd.status, -ETIMEDOUT, "%s", tern_err_name(rd.status));
    cr_assert_null(rd.res.data);
    cr_assert_eq(wr.status, -ETIMEDOUT, "%s", tern_err_name(wr.status));
    ph_gate_open(&gate);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&blocker.done_calls) == 1);
    cr_assert(ok);
    PH_WAIT_UNTIL(ok, ph_stats().queued == 0 && ph_stats().reserved == 0);
    cr_assert(ok, "FAIL: queued %u reserved %u", ph_stats().queued, ph_stats().reserved);
    cr_assert_eq(access(at("late"), F_OK), -1, "a mkdir past its deadline ran");
    cr_assert_eq(count_entries(), 1, "a write_file past its deadline left a file");
    cr_assert_eq(count_fds(), fds);
    teardown(loop);
    ph_gate_destroy(&gate);
}

static void flag_fired(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id;
    atomic_store((atomic_bool *)arg, true);
}

/*
 * Start a request that blocks in its first system call, with a deadline
 * of `timeout`, and let its deadline be acted on (a timer of the same
 * delay, armed just after, has fired): a tern_fs_open of the FIFO, which
 * waits in open(2) for a writer, or (whole) a tern_fs_read_file of f,
 * whose open the fault seam holds (read_file never waits on a FIFO). Then
 * either the request is inside its call (a writer's non-blocking open
 * succeeds, which lets it return; or the seam holds it) or it was stopped
 * before its call began (it is answered -ETIMEDOUT). On a loaded machine
 * a worker may take longer than the timeout to reach it, so try again
 * with ten times the timeout until it was inside (bounded).
 * Returns the writer's descriptor, or -1 for a held whole-file request
 * (tern__fault_fs_release lets it go on).
 */
static int deadline_inside_open(tern_loop *loop, bool whole, probe *pr)
{
    uint64_t timeout = 5 * PH_MS;
    for (int attempt = 0;; attempt++, timeout *= 10) {
        cr_assert_lt(attempt, 4, "FAIL: the request never started within %llu ns",
                     (unsigned long long)timeout);
        memset(pr, 0, sizeof *pr);
        tern_fs_options fo = fs_owned(0, timeout);
        if (whole)
            tern__fault_fs_hold();
        int rc = whole ? tern_fs_read_file(loop, at("f"), &fo, probe_fs, pr, NULL)
                       : tern_fs_open(loop, at("fifo"), O_RDONLY, 0, &fo, probe_fs, pr, NULL);
        cr_assert_eq(rc, 0);
        atomic_bool fired = false;
        cr_assert_eq(tern_timer_start(loop, timeout, 0, flag_fired, &fired, NULL), 0);
        bool ok;
        PH_PUMP_UNTIL(ok, loop, atomic_load(&fired));
        cr_assert(ok);
        int fd = -1;
        PH_PUMP_UNTIL(ok, loop,
                      atomic_load(&pr->calls) == 1 ||
                          (whole
                               ? tern__fault_fs_held()
                               : (fd = open(at("fifo"), O_WRONLY | O_NONBLOCK | O_CLOEXEC)) >= 0));
        cr_assert(ok, "FAIL: neither answered nor inside open(2) (%s)", strerror(errno));
        if (whole && tern__fault_fs_held())
            return -1;
        if (fd >= 0)
            return fd;
        cr_assert_eq(pr->status, -ETIMEDOUT, "an unstarted request's status: %s",
                     tern_err_name(pr->status));
    }
}

Test(admission_paths, a_deadline_while_a_call_runs_lets_it_report_what_it_did)
{
    tern_loop *loop = setup(1, 16, 4, NULL);
    cr_assert_eq(mkfifo(at("fifo"), 0600), 0);
    int fds = count_fds();
    probe pr;
    int wfd = deadline_inside_open(loop, false, &pr);
    cr_assert_eq(atomic_load(&pr.calls), 0, "answered before its call returned");
    cr_assert_eq(write(wfd, "z", 1), 1);
    wait_probe(loop, &pr);
    cr_assert_eq(pr.status, 0, "the open ran to its end: %s", tern_err_name(pr.status));
    cr_assert_geq(pr.res.value, 0);
    close((int)pr.res.value);
    close(wfd);
    cr_assert_eq(count_fds(), fds);
    teardown(loop);
}

Test(admission_paths, a_deadline_while_a_step_runs_stops_at_the_boundary_with_etimedout)
{
    tern_loop *loop = setup(1, 16, 4, NULL);
    put_file(at("f"), "content");
    int fds = count_fds();
    probe pr;
    cr_assert_eq(deadline_inside_open(loop, true, &pr), -1);
    cr_assert_eq(atomic_load(&pr.calls), 0, "answered before its step returned");
    /* The open returns; the request stops at the boundary and closes it. */
    tern__fault_fs_release();
    wait_probe(loop, &pr);
    cr_assert_eq(pr.status, -ETIMEDOUT, "%s", tern_err_name(pr.status));
    cr_assert_null(pr.res.data);
    cr_assert_eq(count_fds(), fds, "the descriptor of the first step leaked");
    teardown(loop);
}

Test(admission_paths, a_file_request_deadline_after_finish_changes_nothing)
{
    tern_loop *loop = setup(1, 16, 4, NULL);
    put_file(at("f"), "content");
    tern_id owner;
    cr_assert_eq(tern_owner_open(loop, 1, &owner), 0);
    tern_fs_options fo = fs_owned(owner, 3600 * PH_SEC);
    probe rd = {0};
    cr_assert_eq(tern_fs_read_file(loop, at("f"), &fo, probe_fs, &rd, NULL), 0);
    wait_probe(loop, &rd);
    cr_assert_eq(rd.status, 0, "%s", tern_err_name(rd.status));
    cr_assert_eq(rd.res.value, 7);
    tern_fs_free(rd.res.data);
    tern_owner_stats os;
    cr_assert_eq(tern_owner_stats_get(loop, owner, &os), 0);
    cr_assert_eq(os.in_flight, 0);
    cr_assert_eq(os.accepted, 1);
    /* The deadline left the heap with the request: only the owner is live. */
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(ph_loop_stats(loop).live_operations, 1);
    cr_assert_eq(tern_owner_close(loop, owner), 0);
    teardown(loop);
}

/* ------------------------------------------------------------------ */
/* Lookups                                                             */
/* ------------------------------------------------------------------ */

Test(admission_paths, a_lookup_deadline_before_start_and_a_closed_owners_queued_lookup)
{
    tern_loop *loop = setup(1, 16, 4, NULL);
    ph_gate gate;
    ph_gate_init(&gate);
    ph_job blocker;
    ph_job_init(&blocker, &gate);
    cr_assert_eq(ph_submit(loop, TERN_BOUNDED, &blocker), 0);
    cr_assert(ph_gate_wait_entered(&gate, 1));
    tern_id owner;
    cr_assert_eq(tern_owner_open(loop, 4, &owner), 0);
    tern_job_options late, owned;
    tern_job_options_init(&late);
    late.timeout_ns = PH_MS;
    tern_job_options_init(&owned);
    owned.owner = owner;
    probe timed = {0}, closed = {0};
    cr_assert_eq(tern_resolve_with(loop, "x.invalid", "80", NULL, probe_lookup, &timed, &late,
                                   NULL), 0);
    cr_assert_eq(tern_resolve_with(loop, "x.invalid", "80", NULL, probe_lookup, &closed, &owned,
                                   NULL), 0);
    wait_probe(loop, &timed);
    cr_assert_eq(timed.status, -ETIMEDOUT, "%s", tern_err_name(timed.status));
    cr_assert_eq(tern_owner_close(loop, owner), 0);
    wait_probe(loop, &closed);
    cr_assert_eq(closed.status, -ECANCELED, "%s", tern_err_name(closed.status));
    ph_gate_open(&gate);
    bool ok;
    PH_PUMP_UNTIL(ok, loop, atomic_load(&blocker.done_calls) == 1);
    cr_assert(ok);
    teardown(loop);
    ph_gate_destroy(&gate);
}

/* ------------------------------------------------------------------ */
/* Bad input on every path that takes options                          */
/* ------------------------------------------------------------------ */

Test(admission_paths, bad_options_get_einval_and_change_nothing)
{
    tern_loop *loop = setup(1, 16, 4, NULL);
    tern_id owner, closed;
    cr_assert_eq(tern_owner_open(loop, 2, &owner), 0);
    cr_assert_eq(tern_owner_open(loop, 2, &closed), 0);
    cr_assert_eq(tern_owner_close(loop, closed), 0);
    /* A timer is an operation, not an owner. */
    tern_id timer;
    cr_assert_eq(tern_timer_start(loop, 3600 * PH_SEC, 0, never_fires, NULL, &timer), 0);
    const struct {
        tern_id owner;
        uint64_t timeout;
        const char *what;
    } bad[] = {
        {12345, 0, "an owner never opened"},
        {closed, 0, "a closed owner"},
        {timer, 0, "a timer's id as the owner"},
        {0, (UINT64_C(1) << 62) + 1, "a timeout over 2^62"},
        {owner, UINT64_MAX, "an absurd timeout with a good owner"},
    };
    probe pr = {0};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tern_job_options jo;
        tern_job_options_init(&jo);
        jo.owner = bad[i].owner;
        jo.timeout_ns = bad[i].timeout;
        tern_fs_options fo = fs_owned(bad[i].owner, bad[i].timeout);
        tern_loop_stats ls = ph_loop_stats(loop);
        tern_owner_stats before, after;
        cr_assert_eq(tern_owner_stats_get(loop, owner, &before), 0);
        tern_id id = 0;
        int rc[5] = {
            tern_submit_with(loop, TERN_BOUNDED, probe_work, probe_done, &pr, &jo, &id),
            tern_resolve_with(loop, "x.invalid", "80", NULL, probe_lookup, &pr, &jo, &id),
            tern_fs_mkdir(loop, at("bad"), 0700, &fo, probe_fs, &pr, &id),
            tern_fs_read_file(loop, at("bad"), &fo, probe_fs, &pr, &id),
            tern_fs_write_file(loop, at("bad"), "x", 1, &fo, probe_fs, &pr, &id),
        };
        for (int k = 0; k < 5; k++)
            cr_assert_eq(rc[k], -EINVAL, "%s, path %d: %s", bad[i].what, k,
                         tern_err_name(rc[k]));
        cr_assert_eq(id, 0);
        cr_assert_eq(ph_loop_stats(loop).live_operations, ls.live_operations, "%s", bad[i].what);
        cr_assert_eq(ph_loop_stats(loop).undelivered, 0);
        cr_assert_eq(tern_owner_stats_get(loop, owner, &after), 0);
        cr_assert_eq(after.accepted, before.accepted, "%s", bad[i].what);
        cr_assert_eq(after.refused, before.refused, "%s", bad[i].what);
        cr_assert_eq(after.in_flight, 0);
    }
    cr_assert_eq(ph_stats().submitted, 0, "bad input reached the pool");
    tern_loop_run_once(loop, 0);
    cr_assert_eq(atomic_load(&pr.calls), 0, "bad input called back");
    cr_assert_eq(count_entries(), 0);
    /* Zero and oversized caps; the owner calls on ids that are not owners. */
    tern_id none = 0;
    cr_assert_eq(tern_owner_open(loop, 0, &none), -EINVAL);
    cr_assert_eq(tern_owner_open(loop, (1u << 31) + 1, &none), -EINVAL);
    cr_assert_eq(none, 0);
    tern_owner_stats os;
    cr_assert_eq(tern_owner_close(loop, timer), -ENOENT, "closed a timer as an owner");
    cr_assert_eq(tern_owner_stats_get(loop, timer, &os), -ENOENT);
    cr_assert_eq(tern_owner_close(loop, closed), -ENOENT, "closed twice");
    cr_assert_eq(tern_timer_stop(loop, timer), 0, "the timer survived being named as an owner");
    /* The largest timeout allowed is accepted (and never comes). */
    tern_fs_options fo = fs_owned(owner, UINT64_C(1) << 62);
    cr_assert_eq(tern_fs_mkdir(loop, at("ok"), 0700, &fo, probe_fs, &pr, NULL), 0);
    wait_probe(loop, &pr);
    cr_assert_eq(pr.status, 0);
    rmdir(at("ok"));
    cr_assert_eq(tern_owner_close(loop, owner), 0);
    teardown(loop);
}

/*
 * tern_loop_last_refusal names the last submission's own outcome: a call
 * that fails its argument checks after a refusal must not leave the old
 * cause behind ("NONE when it did not" refuse).
 */
Test(admission_paths, an_argument_error_after_a_refusal_leaves_no_stale_cause)
{
    tern_loop *loop = setup(1, 16, 4, NULL);
    struct full_owner f;
    fill_owner(loop, &f);
    tern_id owner = f.id;
    const tern_job_options jo = f.jo;
    probe pr = {0};
    tern_fs_options fo = fs_owned(0, 0);
    for (int k = 0; k < 4; k++) {
        cr_assert_eq(tern_submit_with(loop, TERN_BOUNDED, probe_work, probe_done, &pr, &jo, NULL),
                     -EAGAIN);
        cr_assert_eq(tern_loop_last_refusal(loop), TERN_REFUSED_OWNER_CAP);
        int rc = k == 0   ? tern_submit(loop, TERN_BOUNDED, NULL, probe_done, &pr, NULL)
                 : k == 1 ? tern_submit_with(loop, TERN_BOUNDED, probe_work, NULL, &pr, &jo, NULL)
                 : k == 2 ? tern_resolve_with(loop, "x.invalid", "80", NULL, NULL, &pr, &jo, NULL)
                          : tern_fs_mkdir(loop, at("stale"), 0700, &fo, NULL, &pr, NULL);
        cr_assert_eq(rc, -EINVAL, "call %d: %s", k, tern_err_name(rc));
        cr_assert_eq(tern_loop_last_refusal(loop), TERN_REFUSED_NONE,
                     "call %d failed its checks, yet the cause says %s", k,
                     tern_refusal_name(tern_loop_last_refusal(loop)));
    }
    release_owner(loop, &f);
    cr_assert_eq(atomic_load(&pr.calls), 0, "a refused or bad call called back");
    cr_assert_eq(tern_owner_close(loop, owner), 0);
    teardown(loop);
}
