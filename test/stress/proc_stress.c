/*
 * Child processes under contention (SPEC §17): several loops, each on its
 * own thread, spawn hundreds of short children at once (a few in flight
 * per loop), while their own callbacks cancel and kill some of them and a
 * foreign thread cancels others by id; the test's busy contenders
 * (TERN_CONTEND) are children of this process too, and tern must leave
 * them alone.
 *
 * External waits race them (tern/wait.h): each loop keeps a few waits on
 * descriptors that become ready once — an eventfd or a pipe that a
 * signalling thread writes — and, where the system has pidfd_open, waits
 * on its children's pidfds. Some are cancelled from the loop at once or a
 * few ticks later (racing the signal), some by the foreign thread, some
 * by closing their owner, some end at a deadline (racing the signal, or
 * never signalled); a few are left pending when the loops are freed.
 *
 * Decisions come from the seed (TERN_SEED, default 0x960c): the exit code
 * asked of each child, whether it is cancelled at once, killed, or left to
 * exit; each wait's kind and plan; which ids the foreign thread cancels
 * and which descriptors the signaller writes when.
 *
 * Checked:
 *   - every accepted spawn gets exactly one exit callback;
 *   - its status: 0 with the code asked, unless it was killed (then
 *     SIGKILL, or the code if it had exited first) or a cancel reached it
 *     (-ECANCELED, or the real status when the exit came first);
 *   - every accepted wait gets exactly one done, with an outcome that
 *     agrees with its plan and with the cancel's answer: 0 only when its
 *     descriptor really became ready (and never after a cancel that said
 *     STOPPED), -ECANCELED only when a cancel or owner close was asked
 *     (never after FINISHED), -ETIMEDOUT only with a deadline; a cancel
 *     answering -ENOENT comes only after done;
 *   - at the end, once the background reaper has had its time: no zombie
 *     and no child of tern left (counted in /proc), the contenders still
 *     alive, and no descriptor left open.
 */
#include "stress.h"

#include <dirent.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#ifdef __linux__
#include <sys/eventfd.h>
#endif

#define DEFAULT_SEED UINT64_C(0x960c)
#define LOOPS 3
#define IN_FLIGHT 6
#define PUBLISHED 16
#define TICK_NS (200 * STRESS_MS / 1000) /* 200 us */

#ifdef STRESS_UNDER_TSAN
#define CHILDREN 60
#define WAITS 80
#else
#define CHILDREN 200 /* per loop */
#define WAITS 300    /* descriptor waits per loop, besides the pidfd waits */
#endif
#define WAITS_IN_FLIGHT 8
#define TEARDOWN_WAITS 2 /* per loop, pending when it is freed */
#define OWNER_CAP 3
#define OWNER_TICKS 25 /* an owner is closed (and a new one opened) this often */

enum { PLAIN, CANCEL_NOW, KILL_NOW };

/* What happens to a wait besides its descriptor becoming ready. */
enum {
    W_SIGNAL,         /* only the signal */
    W_CANCEL_NOW,     /* cancelled from the loop right after acceptance */
    W_CANCEL_LATER,   /* cancelled from the loop a few ticks later, racing the signal */
    W_CANCEL_FOREIGN, /* cancelled by the foreign thread, racing the signal */
    W_OWNER,          /* under an owner that is closed, racing the signal */
    W_DEADLINE,       /* a short timeout, racing the signal */
    W_DEADLINE_ONLY,  /* a short timeout, never signalled */
    W_PLANS,
    W_TEARDOWN = W_PLANS, /* pending when the loop is freed */
    W_AT_EXIT,        /* a pidfd wait cancelled from its child's exit callback */
};
enum { K_EVENTFD, K_PIPE, K_PIDFD };
/* Whether the signaller may write the descriptor: the loop shuts it before closing. */
enum { SIG_OPEN, SIG_BUSY, SIG_SHUT };
#define NO_ANSWER 1000

struct wait_rec {
    tern_id id;
    tern_id owner;
    int kind, plan;
    int rfd, wfd; /* waited, and written by the signaller (-1 for a pidfd) */
    unsigned cancel_tick;
    atomic_int sig;
    atomic_bool cancel_asked; /* by the loop, the foreign thread or an owner close */
    atomic_uint dones;
    int loop_answer; /* what a cancel made on the loop said, or NO_ANSWER */
    int status;
};

struct child_rec {
    tern_id id;
    int pid;
    int code;      /* asked of the child */
    int plan;
    atomic_bool cancel_asked; /* by the loop or the foreign thread */
    atomic_uint exits;
    int status, got_code, got_sig;
    struct wait_rec pw; /* the wait on its pidfd (kind K_PIDFD), if any */
    bool has_pw;
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
    unsigned ticks;
    /* descriptor waits: waits[0 .. wstarted) were accepted, in order */
    struct wait_rec *waits;
    atomic_uint wstarted;
    unsigned w_in_flight, w_low, w_refused;
    struct wait_rec teardown[TEARDOWN_WAITS];
    tern_id owner;
    unsigned owner_closes;
    atomic_uint w_accepted, w_ended; /* every kind, pidfd and teardown waits too */
    unsigned no_pidfd;
};

static struct loop_state loops[LOOPS];
static atomic_bool canceller_stop, signaller_stop;
static atomic_uint foreign_cancels, bad_exits, bad_waits, signals;
static atomic_uint outcomes[4]; /* 0, -ECANCELED, -ETIMEDOUT, answered -ENOENT */
static atomic_uint answered_stopped, answered_finished; /* cancels made on the loop */

static void bad_wait(const struct wait_rec *w, const char *why)
{
    atomic_fetch_add(&bad_waits, 1);
    printf("wait %llu (kind %d, plan %d): %s; status %d, loop answer %d, cancel asked %d\n",
           (unsigned long long)w->id, w->kind, w->plan, why, w->status, w->loop_answer,
           (int)atomic_load(&w->cancel_asked));
}

/* The wait's descriptors are closed once the signaller cannot write them. */
static void wait_close_fds(struct wait_rec *w)
{
    int expect = SIG_OPEN;
    if (!atomic_compare_exchange_strong(&w->sig, &expect, SIG_SHUT))
        while (atomic_load(&w->sig) != SIG_SHUT)
            sched_yield();
    close(w->rfd);
    if (w->wfd >= 0 && w->wfd != w->rfd)
        close(w->wfd);
    w->rfd = w->wfd = -1;
}

/* Whether the descriptor was really made ready: consumes the signal. */
static bool wait_was_signalled(struct wait_rec *w)
{
    if (w->kind == K_PIDFD)
        return true; /* readable means the child ended: checked by done's order */
    uint64_t v = 0;
    ssize_t n = read(w->rfd, &v, w->kind == K_EVENTFD ? sizeof v : 1);
    return n > 0;
}

static void on_wait_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    struct wait_rec *w = arg;
    struct loop_state *ls = NULL;
    for (int i = 0; i < LOOPS; i++)
        if (loops[i].loop == loop)
            ls = &loops[i];
    unsigned n = atomic_fetch_add(&w->dones, 1);
    w->status = status;
    if (n != 0) {
        bad_wait(w, "a second done");
        return;
    }
    if (id != w->id)
        bad_wait(w, "done with another id");
    bool asked = atomic_load(&w->cancel_asked);
    bool deadline = w->plan == W_DEADLINE || w->plan == W_DEADLINE_ONLY;
    if (status == 0) {
        atomic_fetch_add(&outcomes[0], 1);
        if (((uintptr_t)result & TERN_READABLE) == 0)
            bad_wait(w, "delivered without TERN_READABLE");
        if (w->plan == W_DEADLINE_ONLY || w->plan == W_TEARDOWN || w->plan == W_CANCEL_NOW)
            bad_wait(w, "delivered although never signalled or cancelled first");
        if (w->loop_answer == TERN_CANCEL_STOPPED)
            bad_wait(w, "delivered after a cancel that said STOPPED");
        if (!wait_was_signalled(w))
            bad_wait(w, "delivered but its descriptor was never made ready");
    } else if (status == -ECANCELED) {
        atomic_fetch_add(&outcomes[1], 1);
        if (!asked)
            bad_wait(w, "cancelled although nobody asked");
        if (w->loop_answer == TERN_CANCEL_FINISHED)
            bad_wait(w, "cancelled after a cancel that said FINISHED");
    } else if (status == -ETIMEDOUT) {
        atomic_fetch_add(&outcomes[2], 1);
        if (!deadline)
            bad_wait(w, "timed out without a deadline");
    } else {
        bad_wait(w, "an unexpected status");
    }
    if (w->kind == K_PIDFD) {
        close(w->rfd);
        w->rfd = -1;
    } else {
        wait_close_fds(w);
    }
    if (ls != NULL) {
        if (w->plan != W_TEARDOWN && w->kind != K_PIDFD)
            ls->w_in_flight--;
        atomic_fetch_add(&ls->w_ended, 1);
    }
}

/* A cancel made on the loop: its answer must agree with done, before or after. */
static void cancel_from_loop(struct loop_state *ls, struct wait_rec *w)
{
    atomic_store(&w->cancel_asked, true);
    bool delivered = atomic_load(&w->dones) != 0;
    int rc = tern_cancel(ls->loop, w->id);
    if (rc == -ENOENT) {
        atomic_fetch_add(&outcomes[3], 1);
        if (!delivered)
            bad_wait(w, "a cancel said -ENOENT before done");
        return;
    }
    if (delivered)
        bad_wait(w, "a cancel after done found the wait");
    if (rc != TERN_CANCEL_STOPPED && rc != TERN_CANCEL_FINISHED)
        bad_wait(w, "a cancel gave an unexpected answer");
    w->loop_answer = rc;
    atomic_fetch_add(rc == TERN_CANCEL_FINISHED ? &answered_finished : &answered_stopped, 1);
}

static int pidfd_for(int pid)
{
#ifdef SYS_pidfd_open
    long fd = syscall(SYS_pidfd_open, pid, 0u);
    return fd < 0 ? -1 : (int)fd; /* pidfds are close-on-exec */
#else
    (void)pid;
    return -1;
#endif
}

/* A descriptor that becomes ready once: an eventfd or a pipe. */
static bool wait_fds(struct wait_rec *w)
{
#ifdef __linux__
    if (w->kind == K_EVENTFD) {
        w->rfd = w->wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        return w->rfd >= 0;
    }
#endif
    w->kind = K_PIPE;
    int p[2];
    if (pipe(p) != 0)
        return false;
    for (int i = 0; i < 2; i++) {
        (void)fcntl(p[i], F_SETFD, FD_CLOEXEC);
        (void)fcntl(p[i], F_SETFL, O_NONBLOCK);
    }
    w->rfd = p[0];
    w->wfd = p[1];
    return true;
}

/* Accept one descriptor wait (false: refused, tried again at the next tick). */
static bool start_wait(struct loop_state *ls, struct wait_rec *w, int plan)
{
    memset(w, 0, sizeof *w);
    w->plan = plan;
    w->kind = stress_below(&ls->rng, 2) == 0 ? K_EVENTFD : K_PIPE;
    w->loop_answer = NO_ANSWER;
    if (!wait_fds(w))
        stress_fail_now("eventfd/pipe");
    tern_job_options o;
    tern_job_options_init(&o);
    if (plan == W_OWNER)
        o.owner = w->owner = ls->owner;
    if (plan == W_DEADLINE || plan == W_DEADLINE_ONLY)
        o.timeout_ns = (100 + stress_below(&ls->rng, 3000)) * (STRESS_MS / 1000);
    int rc = tern_wait_fd(ls->loop, w->rfd, on_wait_done, w, &o, &w->id);
    if (rc < 0) {
        if (rc != -EAGAIN) {
            atomic_fetch_add(&bad_waits, 1);
            printf("tern_wait_fd refused with %s\n", tern_err_name(rc));
        }
        ls->w_refused++;
        close(w->rfd);
        if (w->wfd != w->rfd)
            close(w->wfd);
        return false;
    }
    atomic_fetch_add(&ls->w_accepted, 1);
    if (plan == W_CANCEL_NOW) {
        cancel_from_loop(ls, w);
        if (w->loop_answer != TERN_CANCEL_STOPPED)
            bad_wait(w, "a cancel right after acceptance did not stop it");
    } else if (plan == W_CANCEL_LATER) {
        w->cancel_tick = ls->ticks + 1 + (unsigned)stress_below(&ls->rng, 6);
    }
    return true;
}

/* A wait on the child's pidfd, with a plan of its own. */
static void start_pidfd_wait(struct loop_state *ls, struct child_rec *c)
{
    uint64_t r = stress_below(&ls->rng, 4);
    if (r == 0)
        return;
    struct wait_rec *w = &c->pw;
    memset(w, 0, sizeof *w);
    w->kind = K_PIDFD;
    w->plan = r == 1 ? W_SIGNAL : r == 2 ? W_AT_EXIT : W_CANCEL_FOREIGN;
    w->loop_answer = NO_ANSWER;
    w->wfd = -1;
    w->rfd = pidfd_for(c->pid);
    if (w->rfd < 0) {
        ls->no_pidfd++;
        return;
    }
    int rc = tern_wait_fd(ls->loop, w->rfd, on_wait_done, w, NULL, &w->id);
    if (rc < 0) {
        if (rc != -EAGAIN) {
            atomic_fetch_add(&bad_waits, 1);
            printf("tern_wait_fd refused with %s\n", tern_err_name(rc));
        }
        ls->w_refused++;
        close(w->rfd);
        return;
    }
    c->has_pw = true;
    atomic_fetch_add(&ls->w_accepted, 1);
}

static void tick_waits(struct loop_state *ls)
{
    ls->ticks++;
    unsigned started = atomic_load(&ls->wstarted);
    for (unsigned i = ls->w_low; i < started; i++) {
        struct wait_rec *w = &ls->waits[i];
        if (w->plan == W_CANCEL_LATER && w->cancel_tick == ls->ticks)
            cancel_from_loop(ls, w);
    }
    while (ls->w_low < started && atomic_load(&ls->waits[ls->w_low].dones) != 0)
        ls->w_low++;
    if (ls->ticks % OWNER_TICKS == 0) {
        for (unsigned i = ls->w_low; i < started; i++)
            if (ls->waits[i].owner == ls->owner)
                atomic_store(&ls->waits[i].cancel_asked, true);
        int orc = tern_owner_close(ls->loop, ls->owner);
        if (orc != 0) {
            atomic_fetch_add(&bad_waits, 1);
            printf("tern_owner_close: %s\n", tern_err_name(orc));
        }
        ls->owner_closes++;
        if (tern_owner_open(ls->loop, OWNER_CAP, &ls->owner) != 0)
            stress_fail_now("tern_owner_open");
    }
    while (ls->w_in_flight < WAITS_IN_FLIGHT && started < WAITS) {
        int plan = (int)stress_below(&ls->rng, W_PLANS);
        if (!start_wait(ls, &ls->waits[started], plan))
            break;
        ls->w_in_flight++;
        atomic_store(&ls->wstarted, ++started); /* published to the signaller and canceller */
    }
}

/* Writes each signal-able descriptor once, at a random later sweep. */
static void *signaller(void *arg)
{
    (void)arg;
    uint64_t rng = stress_seed(200);
    unsigned low[LOOPS] = {0};
    while (!atomic_load(&signaller_stop)) {
        for (int l = 0; l < LOOPS; l++) {
            struct loop_state *ls = &loops[l];
            unsigned started = atomic_load(&ls->wstarted);
            bool all_before = true;
            for (unsigned i = low[l]; i < started; i++) {
                struct wait_rec *w = &ls->waits[i];
                int expect = SIG_OPEN;
                bool wanted = w->plan != W_DEADLINE_ONLY && w->plan != W_CANCEL_NOW;
                if (atomic_load(&w->sig) != SIG_OPEN || !wanted) {
                    if (all_before)
                        low[l] = i + 1;
                    continue;
                }
                all_before = false;
                if (stress_below(&rng, 3) != 0)
                    continue;
                if (!atomic_compare_exchange_strong(&w->sig, &expect, SIG_BUSY))
                    continue;
                uint64_t one = 1;
                ssize_t n = write(w->wfd, &one, w->kind == K_EVENTFD ? sizeof one : 1);
                if (n > 0) {
                    atomic_fetch_add(&signals, 1);
                } else {
                    atomic_fetch_add(&bad_waits, 1);
                    printf("signal write: %s\n", strerror(errno));
                }
                atomic_store(&w->sig, SIG_SHUT);
            }
        }
        struct timespec ts = {0, (long)(100000 + stress_below(&rng, 400000))};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

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
    if (c->has_pw && c->pw.plan == W_AT_EXIT)
        cancel_from_loop(ls, &c->pw); /* races the pidfd's own report */
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
    start_pidfd_wait(ls, c);
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
    tick_waits(ls);
    if (ls->spawned == CHILDREN && atomic_load(&ls->wstarted) == WAITS && ls->w_in_flight == 0)
        tern_timer_stop(ls->loop, id);
}

static void *loop_main(void *arg)
{
    struct loop_state *ls = arg;
    while (!atomic_load(&ls->finished))
        tern_loop_run_once(ls->loop, (int64_t)(2 * STRESS_MS));
    /* Waits left pending for tern_loop_free to end, once each. */
    if (tern_owner_close(ls->loop, ls->owner) != 0)
        atomic_fetch_add(&bad_waits, 1);
    for (int i = 0; i < TEARDOWN_WAITS; i++) {
        struct wait_rec *w = &ls->teardown[i];
        if (start_wait(ls, w, W_TEARDOWN))
            atomic_store(&w->cancel_asked, true); /* the loop's freeing is the cancel */
        else
            atomic_fetch_add(&bad_waits, 1);
    }
    return NULL;
}

/* From a thread not running the loop: queued, resolved in its next step 1
 * (or ignored once the wait has been delivered). */
static void foreign_cancel_wait(struct loop_state *ls, struct wait_rec *w)
{
    atomic_store(&w->cancel_asked, true);
    int rc = tern_cancel(ls->loop, w->id);
    if (rc != TERN_CANCEL_REQUESTED && rc != -ESHUTDOWN) {
        atomic_fetch_add(&bad_waits, 1);
        printf("foreign cancel of a wait: %d\n", rc);
    }
    atomic_fetch_add(&foreign_cancels, 1);
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
            if (c->has_pw && c->pw.plan == W_CANCEL_FOREIGN)
                foreign_cancel_wait(ls, &c->pw);
        }
        unsigned started = atomic_load(&ls->wstarted);
        if (started != 0) {
            struct wait_rec *w = &ls->waits[stress_below(&rng, started)];
            if (w->plan == W_CANCEL_FOREIGN && atomic_load(&w->dones) == 0)
                foreign_cancel_wait(ls, w);
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
        printf("  loop %d: spawned %u, in flight %u, ended %u, refused %u; waits started %u, "
               "in flight %u, accepted %u, ended %u, refused %u\n",
               i, loops[i].spawned, loops[i].in_flight, atomic_load(&loops[i].ended),
               loops[i].refused, atomic_load(&loops[i].wstarted), loops[i].w_in_flight,
               atomic_load(&loops[i].w_accepted), atomic_load(&loops[i].w_ended),
               loops[i].w_refused);
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
        ls->waits = calloc(WAITS, sizeof *ls->waits);
        if (tern_loop_new(&ls->loop, NULL) != 0)
            stress_fail_now("tern_loop_new");
        if (tern_owner_open(ls->loop, OWNER_CAP, &ls->owner) != 0)
            stress_fail_now("tern_owner_open");
        stress_watch_loop(ls->loop, "proc");
        if (tern_timer_start(ls->loop, TICK_NS, TICK_NS, tick, ls, &ls->tick) != 0)
            stress_fail_now("tern_timer_start");
    }
    pthread_t cth, sth;
    if (pthread_create(&cth, NULL, canceller, NULL) != 0 ||
        pthread_create(&sth, NULL, signaller, NULL) != 0)
        stress_fail_now("pthread_create");
    for (int i = 0; i < LOOPS; i++)
        if (pthread_create(&loops[i].thread, NULL, loop_main, &loops[i]) != 0)
            stress_fail_now("pthread_create");

    stress_phase("every child's exit and every wait is delivered", 120 * STRESS_SEC);
    for (int i = 0; i < LOOPS; i++)
        while (atomic_load(&loops[i].ended) < CHILDREN ||
               atomic_load(&loops[i].wstarted) < WAITS ||
               atomic_load(&loops[i].w_ended) < atomic_load(&loops[i].w_accepted))
            usleep(1000);
    stress_phase_end();
    atomic_store(&canceller_stop, true);
    atomic_store(&signaller_stop, true);
    pthread_join(cth, NULL);
    pthread_join(sth, NULL);
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
    unsigned w_once = 0, w_all = 0, w_accepted = 0, w_ended = 0, w_torn = 0;
    for (int i = 0; i < LOOPS; i++) {
        struct loop_state *ls = &loops[i];
        w_accepted += atomic_load(&ls->w_accepted);
        w_ended += atomic_load(&ls->w_ended);
        for (int k = 0; k < WAITS; k++, w_all++)
            w_once += atomic_load(&ls->waits[k].dones) == 1;
        for (int k = 0; k < CHILDREN; k++)
            if (ls->kids[k].has_pw) {
                w_all++;
                w_once += atomic_load(&ls->kids[k].pw.dones) == 1;
            }
        for (int k = 0; k < TEARDOWN_WAITS; k++, w_all++) {
            w_once += atomic_load(&ls->teardown[k].dones) == 1;
            w_torn += ls->teardown[k].status == -ECANCELED;
        }
    }
    STRESS_CHECK(w_once == w_all && w_accepted == w_all && w_ended == w_all,
                 "%u of %u accepted waits had exactly one done (%u counted, %u ended)", w_once,
                 w_all, w_accepted, w_ended);
    STRESS_CHECK(w_torn == LOOPS * TEARDOWN_WAITS,
                 "%u of %d waits pending at tern_loop_free got -ECANCELED", w_torn,
                 LOOPS * TEARDOWN_WAITS);
    STRESS_CHECK(atomic_load(&bad_waits) == 0, "%u waits with a wrong outcome or answer",
                 atomic_load(&bad_waits));
    unsigned no_pidfd = 0;
    for (int i = 0; i < LOOPS; i++)
        no_pidfd += loops[i].no_pidfd;
    printf("waits: %u delivered 0, %u -ECANCELED, %u -ETIMEDOUT; cancels on the loop answered "
           "STOPPED %u, FINISHED %u, -ENOENT after done %u; %u signals; %u pidfd waits skipped "
           "(no pidfd_open)\n",
           atomic_load(&outcomes[0]), atomic_load(&outcomes[1]), atomic_load(&outcomes[2]),
           atomic_load(&answered_stopped), atomic_load(&answered_finished),
           atomic_load(&outcomes[3]), atomic_load(&signals), no_pidfd);

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
    for (int i = 0; i < LOOPS; i++) {
        free(loops[i].kids);
        free(loops[i].waits);
    }
    return stress_summary();
}
