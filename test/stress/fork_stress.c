/*
 * fork_stress: fork() while other threads use tern.
 *
 * In the parent, all the time:
 *   - loop A (its own thread) churns descriptors and signals: each turn it
 *     makes a pipe, registers it (tern_io_start), stops and closes an older
 *     one, and starts or stops a SIGUSR1 watcher, so the fd registry lock
 *     and the signal lock are taken over and over;
 *   - loop B (its own thread) takes posts from POSTERS poster threads (the
 *     inbound queue and its spare-block lock) and keeps a few pool jobs of
 *     both classes in flight (the pool's locks);
 * while the main thread forks TERN_FORKS times (default 60). Each child
 * uses tern at once: a new loop, a post to it, a bounded and a long job, a
 * timer, a watched pipe; it runs the loop dry, checks each arrived exactly once, frees the
 * loop, shuts the pool down and exits 0. A lock held by another thread at
 * the fork and never re-made in the child leaves the child deadlocked: its
 * own alarm (CHILD_BOUND) kills it, and the parent reports a child killed
 * by SIGALRM. The parent checks every child's exit status; the first
 * MAX_HUNG hung children end the forking early (each costs CHILD_BOUND).
 *
 * Seed: TERN_SEED (default 0xf0f0f0): the spacing of the forks and the
 * churn's choices.
 *
 * Under ThreadSanitizer it skips (exit 77): TSan cannot start threads in
 * the child of a multi-threaded fork, and every child here starts the pool.
 * Under AddressSanitizer it skips too: GCC 12's libasan does not hold its
 * allocator's region locks across fork(), so a child forked while a parent
 * thread was inside malloc deadlocks in ASan's allocator (seen with gdb:
 * SizeClassAllocator64::GetFromAllocator under calloc), which says nothing
 * about tern. The normal and UBSan builds run it.
 */
#include <sys/socket.h>

#include "../child_exit.h"
#include "stress.h"

#define DEFAULT_SEED UINT64_C(0xf0f0f0)
#define DEFAULT_FORKS 60
#define POSTERS 2
#define CHILD_BOUND 30 /* seconds: the child's own alarm; a child needs well under one */
#define MAX_HUNG 2
#define PIPES 8

/* ------------------------------------------------------------------ */
/* The child                                                           */
/* ------------------------------------------------------------------ */

enum {
    CHILD_OK = 0,
    CHILD_LOOP_NEW = 10,
    CHILD_POST,
    CHILD_SUBMIT,
    CHILD_TIMER,
    CHILD_PIPE,
    CHILD_IO,
    CHILD_RUN,
    CHILD_COUNTS,
    CHILD_SHUTDOWN,
};

static const char *child_what(int code)
{
    switch (code) {
    case CHILD_LOOP_NEW: return "tern_loop_new failed";
    case CHILD_POST: return "tern_post failed";
    case CHILD_SUBMIT: return "tern_submit failed";
    case CHILD_TIMER: return "tern_timer_start failed";
    case CHILD_PIPE: return "pipe() failed";
    case CHILD_IO: return "tern_io_start failed";
    case CHILD_RUN: return "tern_loop_run did not return 0";
    case CHILD_COUNTS: return "a post, job, timer or readiness did not arrive exactly once";
    case CHILD_SHUTDOWN: return "tern_pool_shutdown failed";
    default: return "unknown exit code";
    }
}

static struct {
    unsigned posts, jobs, timers, reads;
    int pipe_fd[2];
    tern_id io;
} kid;

static void kid_post(tern_loop *loop, void *arg)
{
    (void)loop, (void)arg;
    kid.posts++;
}

static void *kid_work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

static void kid_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)loop, (void)id, (void)result, (void)arg;
    if (status == 0)
        kid.jobs++;
}

static void kid_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id, (void)arg;
    kid.timers++;
}

static void kid_readable(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    (void)events, (void)arg;
    char c;
    if (read(fd, &c, 1) == 1)
        kid.reads++;
    tern_io_stop(loop, id);
}

/* Runs in the child right after fork(); never returns. */
static void child(void)
{
    /* The child's only bound: a deadlock ends here, with SIGALRM. */
    alarm(CHILD_BOUND);
    tern_loop *loop;
    if (tern_loop_new(&loop, NULL) != 0)
        child_exit(CHILD_LOOP_NEW);
    if (tern_post(loop, kid_post, NULL) != 0)
        child_exit(CHILD_POST);
    if (tern_submit(loop, TERN_BOUNDED, kid_work, kid_done, NULL, NULL) != 0 ||
        tern_submit(loop, TERN_LONG, kid_work, kid_done, NULL, NULL) != 0)
        child_exit(CHILD_SUBMIT);
    if (tern_timer_start(loop, STRESS_MS, 0, kid_timer, NULL, NULL) != 0)
        child_exit(CHILD_TIMER);
    if (pipe(kid.pipe_fd) != 0 || write(kid.pipe_fd[1], "x", 1) != 1)
        child_exit(CHILD_PIPE);
    if (tern_io_start(loop, kid.pipe_fd[0], TERN_READABLE, kid_readable, NULL, &kid.io) != 0)
        child_exit(CHILD_IO);
    if (tern_loop_run(loop) != 0)
        child_exit(CHILD_RUN);
    if (kid.posts != 1 || kid.jobs != 2 || kid.timers != 1 || kid.reads != 1)
        child_exit(CHILD_COUNTS);
    tern_loop_free(loop);
    if (tern_pool_shutdown(TERN_POOL_DRAIN, 5 * STRESS_SEC) != 0)
        child_exit(CHILD_SHUTDOWN);
    child_exit(CHILD_OK);
}

/* ------------------------------------------------------------------ */
/* The parent's busy threads                                           */
/* ------------------------------------------------------------------ */

static atomic_bool stopping;
static tern_loop *loop_a, *loop_b;
static atomic_uint_fast64_t churns, signal_starts, posts_sent, posts_ran, jobs_done, errors;

struct churn {
    int fds[PIPES][2];
    tern_id ids[PIPES];
    unsigned next;
    tern_id sig;
    uint64_t rng;
};

static struct churn churn_state;

static void note_error(const char *what, int rc)
{
    if (atomic_fetch_add(&errors, 1) < 10)
        printf("parent: %s: %s\n", what, tern_err_name(rc));
}

static void on_pipe(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    (void)loop, (void)id, (void)fd, (void)events, (void)arg;
}

static void on_signal(tern_loop *loop, tern_id id, int signo, void *arg)
{
    (void)loop, (void)id, (void)signo, (void)arg;
}

static void churn_close(tern_loop *loop, struct churn *c, unsigned slot)
{
    if (c->ids[slot] == 0)
        return;
    int rc = tern_io_stop(loop, c->ids[slot]);
    if (rc != 0)
        note_error("tern_io_stop", rc);
    close(c->fds[slot][0]);
    close(c->fds[slot][1]);
    c->ids[slot] = 0;
}

/* One step of loop A's churn; re-defers itself, so it runs every turn. */
static void churn_step(tern_loop *loop, void *arg)
{
    struct churn *c = arg;
    if (atomic_load(&stopping)) {
        for (unsigned i = 0; i < PIPES; i++)
            churn_close(loop, c, i);
        if (c->sig != 0 && tern_signal_stop(loop, c->sig) != 0)
            note_error("tern_signal_stop", -1);
        c->sig = 0;
        return; /* nothing left live: tern_loop_run returns */
    }
    unsigned slot = c->next++ % PIPES;
    churn_close(loop, c, slot);
    if (pipe2(c->fds[slot], O_CLOEXEC | O_NONBLOCK) == 0) {
        int rc = tern_io_start(loop, c->fds[slot][0], TERN_READABLE, on_pipe, NULL, &c->ids[slot]);
        if (rc != 0) {
            note_error("tern_io_start", rc);
            close(c->fds[slot][0]);
            close(c->fds[slot][1]);
            c->ids[slot] = 0;
        }
    }
    if (stress_below(&c->rng, 4) == 0) {
        if (c->sig == 0) {
            int rc = tern_signal_start(loop, SIGUSR1, on_signal, NULL, &c->sig);
            if (rc != 0)
                note_error("tern_signal_start", rc);
            else
                atomic_fetch_add(&signal_starts, 1);
        } else {
            int rc = tern_signal_stop(loop, c->sig);
            if (rc != 0)
                note_error("tern_signal_stop", rc);
            c->sig = 0;
        }
    }
    atomic_fetch_add(&churns, 1);
    int rc = tern_defer(loop, churn_step, c);
    if (rc != 0)
        note_error("tern_defer", rc);
}

static void b_post(tern_loop *loop, void *arg)
{
    (void)loop, (void)arg;
    atomic_fetch_add(&posts_ran, 1);
}

static void *b_work(tern_job *job, void *arg)
{
    (void)job;
    return arg;
}

static unsigned b_in_flight;

static void b_submit(tern_loop *loop);

static void b_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    (void)id, (void)status, (void)result, (void)arg;
    b_in_flight--;
    atomic_fetch_add(&jobs_done, 1);
    b_submit(loop);
}

static void b_submit(tern_loop *loop)
{
    static uint64_t n;
    while (b_in_flight < 8 && !atomic_load(&stopping)) {
        int rc = tern_submit(loop, n++ % 8 == 0 ? TERN_LONG : TERN_BOUNDED, b_work, b_done, NULL,
                             NULL);
        if (rc != 0) {
            if (rc != -EAGAIN)
                note_error("tern_submit", rc);
            return;
        }
        b_in_flight++;
    }
}

/* Loop B's keep-alive: re-arms job submission after a refusal and ends
 * the loop once the parent stops. */
static void b_tick(tern_loop *loop, tern_id id, void *arg)
{
    (void)arg;
    if (atomic_load(&stopping)) {
        tern_timer_stop(loop, id);
        return;
    }
    b_submit(loop);
}

static void *loop_thread(void *arg)
{
    tern_loop *loop = arg;
    int rc = tern_loop_run(loop);
    if (rc != 0)
        note_error("tern_loop_run", rc);
    return NULL;
}

static void *poster(void *arg)
{
    (void)arg;
    while (!atomic_load(&stopping)) {
        int rc = tern_post(loop_b, b_post, NULL);
        if (rc == 0)
            atomic_fetch_add(&posts_sent, 1);
        else if (rc != -EAGAIN)
            note_error("tern_post", rc);
        else
            sched_yield();
    }
    return NULL;
}

static unsigned forks, forks_done, children_ok, children_hung, children_failed;

static void report(void)
{
    printf("  forks %u: ok %u, hung %u, failed %u; parent: churn steps %" PRIu64
           ", signal watchers started %" PRIu64 ", posts %" PRIu64 " sent %" PRIu64
           " ran, jobs %" PRIu64 ", errors %" PRIu64 "\n",
           forks_done, children_ok, children_hung, children_failed,
           (uint64_t)atomic_load(&churns), (uint64_t)atomic_load(&signal_starts),
           (uint64_t)atomic_load(&posts_sent), (uint64_t)atomic_load(&posts_ran),
           (uint64_t)atomic_load(&jobs_done), (uint64_t)atomic_load(&errors));
}

int main(void)
{
    stress_init("fork_stress", DEFAULT_SEED);
#if defined(STRESS_UNDER_TSAN)
    printf("fork_stress: skipped under ThreadSanitizer (no threads in a multi-threaded "
           "fork's child)\n");
    return 77;
#elif defined(STRESS_UNDER_ASAN)
    printf("fork_stress: skipped under AddressSanitizer (its allocator's locks are not held "
           "across fork, so a child can deadlock inside malloc)\n");
    return 77;
#endif
    stress_on_report(report);
    const char *fs = getenv("TERN_FORKS");
    forks = fs != NULL && atoi(fs) > 0 ? (unsigned)atoi(fs) : DEFAULT_FORKS;
    uint64_t rng = stress_seed(1);
    churn_state.rng = stress_seed(2);

    int rc = tern_loop_new(&loop_a, NULL);
    if (rc == 0)
        rc = tern_loop_new(&loop_b, NULL);
    if (rc != 0) {
        printf("tern_loop_new: %s\n0 passed, 1 failed\n", tern_err_name(rc));
        return 1;
    }
    stress_watch_loop(loop_a, "A (fds, signals)");
    stress_watch_loop(loop_b, "B (posts, jobs)");
    tern_defer(loop_a, churn_step, &churn_state);
    tern_timer_start(loop_b, STRESS_MS, STRESS_MS, b_tick, NULL, NULL);

    stress_phase("fork while the parent's threads use tern; every child exits 0",
                 300 * STRESS_SEC);
    pthread_t ta, tb, tp[POSTERS];
    /* Loop A's signal watcher blocks SIGUSR1 in A's thread; the other
     * threads (this one included) block it too, so the signal never
     * reaches a thread that does not watch it. */
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, NULL);
    pthread_create(&ta, NULL, loop_thread, loop_a);
    pthread_create(&tb, NULL, loop_thread, loop_b);
    for (int i = 0; i < POSTERS; i++)
        pthread_create(&tp[i], NULL, poster, NULL);

    for (; forks_done < forks && children_hung < MAX_HUNG; forks_done++) {
        /* A random spin spreads the forks over the threads' critical sections. */
        for (volatile unsigned spin = (unsigned)stress_below(&rng, 200000); spin > 0; spin--)
            ;
        pid_t pid = fork();
        if (pid == 0) {
            pthread_sigmask(SIG_UNBLOCK, &usr1, NULL);
            child();
        }
        if (pid < 0) {
            STRESS_CHECK(false, "fork: %s", strerror(errno));
            break;
        }
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            children_ok++;
        } else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
            children_hung++;
            printf("FAIL: fork %u: the child hung for %d s (a lock left held across fork?)\n",
                   forks_done, CHILD_BOUND);
        } else {
            children_failed++;
            if (WIFEXITED(status))
                printf("FAIL: fork %u: the child exited %d: %s\n", forks_done,
                       WEXITSTATUS(status), child_what(WEXITSTATUS(status)));
            else
                printf("FAIL: fork %u: the child died of signal %d\n", forks_done,
                       WTERMSIG(status));
        }
    }

    stress_phase("the parent's loops and threads stop", 60 * STRESS_SEC);
    atomic_store(&stopping, true);
    for (int i = 0; i < POSTERS; i++)
        pthread_join(tp[i], NULL);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    /*
     * Loop B returns once nothing keeps it alive, and with its timer
     * stopped that can be between two posts while a poster, past its
     * check of `stopping`, has one more to send: accepted by a loop that
     * no longer runs. Run it once more so every accepted post has run.
     */
    rc = tern_loop_run(loop_b);
    if (rc != 0)
        note_error("tern_loop_run", rc);
    report();
    STRESS_CHECK(children_hung == 0, "no child hung (%u of %u)", children_hung, forks_done);
    STRESS_CHECK(children_failed == 0, "every child that finished exited 0 (%u failed)",
                 children_failed);
    STRESS_CHECK(children_ok == forks, "%u of %u forks ran their child to a clean exit",
                 children_ok, forks);
    STRESS_CHECK(atomic_load(&errors) == 0, "the parent's threads met no error");
    STRESS_CHECK(atomic_load(&posts_sent) == atomic_load(&posts_ran),
                 "every post the parent accepted ran");
    stress_phase("the parent frees its loops and shuts the pool down", 60 * STRESS_SEC);
    stress_loop_free(loop_a);
    stress_loop_free(loop_b);
    rc = tern_pool_shutdown(TERN_POOL_DRAIN, 30 * STRESS_SEC);
    STRESS_CHECK(rc == 0, "the pool shuts down (%s)", tern_err_name(rc));
    stress_phase_end();
    return stress_summary();
}
