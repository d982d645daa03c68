/*
 * Child processes under contention (SPEC §17): several loops, each on its
 * own thread, spawn hundreds of short children at once (a few in flight
 * per loop), while their own callbacks cancel and kill some of them and a
 * foreign thread cancels others by id; the test's busy contenders
 * (TERN_CONTEND) are children of this process too, and tern must leave
 * them alone.
 *
 * Decisions come from the seed (TERN_SEED, default 0x960c): the exit code
 * asked of each child, whether it is cancelled at once, killed, or left to
 * exit; which ids the foreign thread cancels.
 *
 * Checked:
 *   - every accepted spawn gets exactly one exit callback;
 *   - its status: 0 with the code asked, unless it was killed (then
 *     SIGKILL, or the code if it had exited first) or a cancel reached it
 *     (-ECANCELED, or the real status when the exit came first);
 *   - at the end, once the background reaper has had its time: no zombie
 *     and no child of tern left (counted in /proc), the contenders still
 *     alive, and no descriptor left open.
 */
#include "stress.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>

#define DEFAULT_SEED UINT64_C(0x960c)
#define LOOPS 3
#define IN_FLIGHT 6
#define PUBLISHED 16
#define TICK_NS (200 * STRESS_MS / 1000) /* 200 us */

#ifdef STRESS_UNDER_TSAN
#define CHILDREN 60
#else
#define CHILDREN 200 /* per loop */
#endif

enum { PLAIN, CANCEL_NOW, KILL_NOW };

struct child_rec {
    tern_id id;
    int pid;
    int code;      /* asked of the child */
    int plan;
    atomic_bool cancel_asked; /* by the loop or the foreign thread */
    atomic_uint exits;
    int status, got_code, got_sig;
};

struct loop_state {
    tern_loop *loop;
    pthread_t thread;
    uint64_t rng;
    struct child_rec *kids;
    unsigned spawned, in_flight, refused;
    atomic_uint ended;
    _Atomic uint64_t published[PUBLISHED]; /* index + 1 of recent children */
    atomic_bool finished;
    tern_id tick;
};

static struct loop_state loops[LOOPS];
static atomic_bool canceller_stop;
static atomic_uint foreign_cancels, bad_exits;

static void on_exit_cb(tern_loop *loop, tern_id id, int status, int code, int sig, void *arg)
{
    (void)loop;
    struct child_rec *c = arg;
    struct loop_state *ls = NULL;
    for (int i = 0; i < LOOPS; i++)
        if (c >= loops[i].kids && c < loops[i].kids + CHILDREN)
            ls = &loops[i];
    unsigned n = atomic_fetch_add(&c->exits, 1);
    STRESS_CHECK(n == 0, "a second exit callback for child %llu", (unsigned long long)id);
    c->status = status;
    c->got_code = code;
    c->got_sig = sig;
    bool ok;
    if (status == -ECANCELED)
        ok = atomic_load(&c->cancel_asked);
    else if (status != 0)
        ok = false;
    else if (sig != 0)
        ok = sig == SIGKILL && c->plan == KILL_NOW;
    else
        ok = code == c->code;
    if (!ok) {
        atomic_fetch_add(&bad_exits, 1);
        printf("child %llu: status %d code %d sig %d (asked %d, plan %d)\n",
               (unsigned long long)id, status, code, sig, c->code, c->plan);
    }
    if (ls == NULL)
        return; /* the warm-up child */
    ls->in_flight--;
    atomic_fetch_add(&ls->ended, 1);
}

static void spawn_one(struct loop_state *ls)
{
    struct child_rec *c = &ls->kids[ls->spawned];
    c->code = (int)stress_below(&ls->rng, 8);
    uint64_t r = stress_below(&ls->rng, 10);
    c->plan = r < 2 ? CANCEL_NOW : r < 4 ? KILL_NOW : PLAIN;
    char script[64];
    /* A killed one lives long enough to be killed (or not: both are fine). */
    snprintf(script, sizeof script, c->plan == PLAIN ? "exit %d" : "sleep 0.02; exit %d",
             c->code);
    char *argv[] = {"sh", "-c", script, NULL};
    tern_process_options o;
    tern_process_options_init(&o);
    o.file = "/bin/sh";
    o.argv = argv;
    tern_stdio io[3] = {{.kind = TERN_STDIO_IGNORE}, {.kind = TERN_STDIO_IGNORE},
                        {.kind = TERN_STDIO_INHERIT}};
    o.stdio = io;
    o.stdio_count = 3;
    int rc = tern_process_spawn(ls->loop, &o, on_exit_cb, c, &c->id);
    if (rc < 0) {
        STRESS_CHECK(rc == -EAGAIN, "spawn: %s", tern_err_name(rc));
        ls->refused++;
        return; /* tried again at the next tick */
    }
    tern_process_pid(ls->loop, c->id, &c->pid);
    ls->in_flight++;
    unsigned ix = ls->spawned++;
    atomic_store(&ls->published[ix % PUBLISHED], (uint64_t)ix + 1);
    if (c->plan == CANCEL_NOW) {
        atomic_store(&c->cancel_asked, true);
        int crc = tern_cancel(ls->loop, c->id);
        STRESS_CHECK(crc == TERN_CANCEL_STOPPED || crc == -ENOENT ||
                         crc == TERN_CANCEL_FINISHED,
                     "cancel: %d", crc);
        (void)kill(c->pid, SIGKILL); /* the reaper still owes it a wait */
    } else if (c->plan == KILL_NOW) {
        int krc = tern_process_kill(ls->loop, c->id, SIGKILL);
        STRESS_CHECK(krc == 0 || krc == -ENOENT, "kill: %d", krc);
    }
}

static void tick(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    struct loop_state *ls = arg;
    while (ls->in_flight < IN_FLIGHT && ls->spawned < CHILDREN)
        spawn_one(ls);
    if (ls->spawned == CHILDREN)
        tern_timer_stop(ls->loop, id);
}

static void *loop_main(void *arg)
{
    struct loop_state *ls = arg;
    while (!atomic_load(&ls->finished))
        tern_loop_run_once(ls->loop, (int64_t)(2 * STRESS_MS));
    return NULL;
}

static void *canceller(void *arg)
{
    (void)arg;
    uint64_t rng = stress_seed(100);
    while (!atomic_load(&canceller_stop)) {
        struct loop_state *ls = &loops[stress_below(&rng, LOOPS)];
        uint64_t v = atomic_load(&ls->published[stress_below(&rng, PUBLISHED)]);
        if (v != 0 && stress_below(&rng, 8) == 0) {
            struct child_rec *c = &ls->kids[v - 1];
            atomic_store(&c->cancel_asked, true); /* first: it may act before returning */
            int rc = tern_cancel(ls->loop, c->id);
            STRESS_CHECK(rc == TERN_CANCEL_REQUESTED || rc == -ESHUTDOWN,
                         "foreign cancel: %d", rc);
            atomic_fetch_add(&foreign_cancels, 1);
        }
        struct timespec ts = {0, (long)(100000 + stress_below(&rng, 400000))};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* Children of this process: all of them, and those that are zombies. */
static void count_children(int *all, int *zombies)
{
    *all = *zombies = 0;
    DIR *d = opendir("/proc");
    if (d == NULL)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        size_t len = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[len] = '\0';
        char *rp = strrchr(buf, ')');
        char state;
        int ppid;
        if (rp != NULL && sscanf(rp + 2, "%c %d", &state, &ppid) == 2 && ppid == getpid()) {
            (*all)++;
            if (state == 'Z')
                (*zombies)++;
        }
    }
    closedir(d);
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1;
}

static void report(void)
{
    for (int i = 0; i < LOOPS; i++)
        printf("  loop %d: spawned %u, in flight %u, ended %u, refused %u\n", i,
               loops[i].spawned, loops[i].in_flight, atomic_load(&loops[i].ended),
               loops[i].refused);
    int all, z;
    count_children(&all, &z);
    printf("  children %d (zombies %d), contenders %d, foreign cancels %u\n", all, z,
           stress_ncontenders, atomic_load(&foreign_cancels));
}

/* One cancelled child first, so the reaper's wake object (kept for the
 * process) exists before descriptors are counted. */
static void warm_up(void)
{
    tern_loop *loop;
    if (tern_loop_new(&loop, NULL) != 0)
        stress_fail_now("tern_loop_new");
    struct child_rec c = {.plan = CANCEL_NOW};
    atomic_store(&c.cancel_asked, true);
    tern_process_options o;
    tern_process_options_init(&o);
    o.file = "/bin/true";
    if (tern_process_spawn(loop, &o, on_exit_cb, &c, &c.id) != 0)
        stress_fail_now("warm-up spawn");
    tern_loop_free(loop); /* cancelled: the reaper takes it */
}

int main(void)
{
    stress_init("proc_stress", DEFAULT_SEED);
    stress_on_report(report);
    warm_up();
    stress_phase("the warm-up child is reaped", 20 * STRESS_SEC);
    for (;;) {
        int all, z;
        count_children(&all, &z);
        if (all == stress_ncontenders)
            break;
        usleep(1000);
    }
    stress_phase_end();
    int fds = open_fds();

    for (int i = 0; i < LOOPS; i++) {
        struct loop_state *ls = &loops[i];
        ls->rng = stress_seed((uint64_t)i + 1);
        ls->kids = calloc(CHILDREN, sizeof *ls->kids);
        if (tern_loop_new(&ls->loop, NULL) != 0)
            stress_fail_now("tern_loop_new");
        stress_watch_loop(ls->loop, "proc");
        if (tern_timer_start(ls->loop, TICK_NS, TICK_NS, tick, ls, &ls->tick) != 0)
            stress_fail_now("tern_timer_start");
    }
    pthread_t cth;
    if (pthread_create(&cth, NULL, canceller, NULL) != 0)
        stress_fail_now("pthread_create");
    for (int i = 0; i < LOOPS; i++)
        if (pthread_create(&loops[i].thread, NULL, loop_main, &loops[i]) != 0)
            stress_fail_now("pthread_create");

    stress_phase("every child's exit is delivered", 120 * STRESS_SEC);
    for (int i = 0; i < LOOPS; i++)
        while (atomic_load(&loops[i].ended) < CHILDREN)
            usleep(1000);
    stress_phase_end();
    atomic_store(&canceller_stop, true);
    pthread_join(cth, NULL);
    for (int i = 0; i < LOOPS; i++) {
        atomic_store(&loops[i].finished, true);
        pthread_join(loops[i].thread, NULL);
    }
    unsigned once = 0;
    for (int i = 0; i < LOOPS; i++)
        for (int k = 0; k < CHILDREN; k++)
            once += atomic_load(&loops[i].kids[k].exits) == 1;
    STRESS_CHECK(once == LOOPS * CHILDREN, "%u of %d children had exactly one exit callback", once,
                 LOOPS * CHILDREN);
    STRESS_CHECK(atomic_load(&bad_exits) == 0, "%u exit callbacks with a wrong status",
                 atomic_load(&bad_exits));
    for (int i = 0; i < LOOPS; i++) {
        stress_unwatch_loop(loops[i].loop);
        tern_loop_free(loops[i].loop);
    }

    /* Cancelled children are the reaper's: give it its time. */
    stress_phase("no zombie and no child of tern left", 30 * STRESS_SEC);
    int all, z;
    for (;;) {
        count_children(&all, &z);
        if (all == stress_ncontenders && z == 0)
            break;
        usleep(2000);
    }
    stress_phase_end();
    STRESS_CHECK(z == 0, "zombies left: %d", z);
    STRESS_CHECK(all == stress_ncontenders, "children left besides the contenders: %d",
                 all - stress_ncontenders);
    for (int i = 0; i < stress_ncontenders; i++)
        STRESS_CHECK(kill(stress_contenders[i], 0) == 0, "a contender was reaped by tern");
    STRESS_CHECK(open_fds() == fds, "descriptors: %d at the start, %d at the end", fds,
                 open_fds());
    printf("%d loops, %d children each, %u foreign cancels\n", LOOPS, CHILDREN,
           atomic_load(&foreign_cancels));
    for (int i = 0; i < LOOPS; i++)
        free(loops[i].kids);
    return stress_summary();
}
