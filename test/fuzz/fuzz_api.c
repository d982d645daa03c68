/*
 * The API fuzzer (SPEC §8: "no API may crash, leak or deliver twice under
 * any sequence of calls").
 *
 * Each input is decoded into at most MAX_STEPS public calls across two
 * loop slots: loops made with good and bad options, timers, posts, defers,
 * fd watchers on socketpairs, bounded and long jobs, lookups, TCP listen
 * and connect over loopback, streams, cancels and stops from a foreign
 * thread, pool start and shutdown, injected allocation/thread/descriptor
 * failures (backends/fault.h), and loops freed with all of that in flight.
 * Loops run on every backend built, io_uring among them where the kernel
 * allows it (its streams then read through the kernel's receive).
 * Listeners on a name (tern_tcp_listen_name: their ready callback is
 * checked once, as a connect's) and reverse lookups (tern_resolve_addr).
 * Admission (include/tern/admission.h): owners opened (good and bad caps),
 * closed, cancelled by id and read; jobs, lookups and file requests
 * submitted with an owner (live, closed, another loop's, made up) and a
 * timeout (none, short enough to expire, the largest, too large).
 * Ids passed around include live ones, finished ones, the other loop's,
 * 0 and random values; arguments include NULL callbacks, bad fds, bad
 * events and out-of-range sizes.
 *
 * Checked on every call and after every input:
 *   - every return is 0 (or 1 for a write over high water) or a negative
 *     errno; a bad argument the harness chose on purpose gets the errno the
 *     header promises (-EINVAL, -EBADF, -ENOENT, -EEXIST);
 *   - exactly one completion per accepted job, lookup, connect, write and
 *     shutdown, and exactly one close callback per stream, all on the loop
 *     that accepted them; exactly one run per accepted post and defer;
 *     none at all for a refused call;
 *   - no timer or watcher callback after a successful stop or cancel, no
 *     read callback after a close;
 *   - a job's done: status 0 only if its work ran, and then the work's
 *     result; NULL and a failure if it never ran; -ETIMEDOUT only for a job
 *     with a timeout, -ECANCELED only for one a cancel may have reached (by
 *     id, its owner's close, its loop's free, a cancelling pool shutdown),
 *     so a job whose deadline passed before it started gets -ETIMEDOUT and
 *     one queued when its owner closed gets -ECANCELED; likewise lookups
 *     and file requests for -ETIMEDOUT and -ECANCELED;
 *   - admission: a refusal is -EAGAIN with the cause of the limit hit
 *     (the owner's cap exactly when the model's count of the owner's jobs
 *     in flight is at the cap; max_undelivered and max_operations exactly
 *     when the loop's stats say so; never "shutdown" from this thread),
 *     and TERN_REFUSED_NONE after an accepted call; bad options get
 *     -EINVAL; tern_owner_stats_get equals the model's counts;
 *   - once tern_loop_free returns, everything that loop owed has been
 *     delivered and nothing of it runs again (ASan and LeakSanitizer see
 *     the rest: a use after free, a leak).
 * A broken invariant prints what broke and aborts, so libFuzzer keeps the
 * input as a crash.
 *
 * Bounded work per input: MAX_STEPS calls, timers of at most 1 ms, jobs
 * that return at once or within 2 ms (polling tern_job_cancelled), turns
 * of at most 1 ms. Network: loopback only; name lookups go through a
 * stub (tern__set_getaddrinfo) that answers "localhost" and numeric hosts
 * and refuses every other name without asking a resolver.
 *
 * The same file builds two ways: with libFuzzer (test/fuzz/meson.build,
 * clang, -Dfuzz=true), and with FUZZ_REPLAY_MAIN defined as a replay of
 * the committed corpus that runs in the ordinary suite under every
 * sanitizer (test/stress/fuzz_replay.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <termios.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tern.h"
#include "testing.h"

#define MAX_STEPS 96
/*
 * Made-up ids start here, far beyond what tern's id counter reaches, so
 * they never name a live operation (not even an internal one, such as a
 * connect's timeout timer, whose id the harness does not know).
 */
#define STRANGER_BASE (UINT64_C(1) << 62)
#define MAX_RECS 256
#define PAIRS 2
#define US UINT64_C(1000)
#define MS UINT64_C(1000000)

/*
 * A broken invariant names the state an input inherits from the ones
 * before it, so a failure that the saved input alone does not repeat can
 * still be explained (see fuzz_state_print).
 */
static void fuzz_state_print(void);
#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "fuzz_api: invariant broken at %s:%d: ", __FILE__, __LINE__);              \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        fuzz_state_print();                                                                        \
        abort();                                                                                   \
    } while (0)
#define ENSURE(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond))                                                                               \
            FAIL(__VA_ARGS__);                                                                     \
    } while (0)

/* ------------------------------------------------------------------ */
/* Input decoding                                                      */
/* ------------------------------------------------------------------ */

struct input {
    const uint8_t *p;
    size_t left;
};

static unsigned u8(struct input *in)
{
    if (in->left == 0)
        return 0;
    in->left--;
    return *in->p++;
}

static unsigned u16(struct input *in)
{
    return u8(in) | u8(in) << 8;
}

/* ------------------------------------------------------------------ */
/* Records: what the harness expects of every accepted operation       */
/* ------------------------------------------------------------------ */

enum kind {
    K_TIMER = 1, K_JOB, K_LOOKUP, K_POST, K_DEFER, K_WATCH, K_STREAM, K_WRITE, K_SHUT, K_FS,
    K_OWNER, K_UDP, K_SEND, K_HOOK, K_SIGNAL, K_PROC, K_FSWATCH, K_WAIT
};

struct rec {
    enum kind kind;
    int slot;          /* which loop slot */
    tern_loop *loop;   /* the loop that accepted it */
    tern_id id;
    bool accepted;
    bool stopped;      /* a stop or cancel succeeded: no more callbacks */
    bool closing;      /* stream: closed by us: no more reads */
    bool dead;         /* its loop was freed: nothing may arrive */
    bool repeat;       /* timer */
    bool listener;     /* stream */
    bool connecting;   /* stream made by tern_tcp_connect */
    unsigned calls;    /* completions / runs / fires */
    unsigned connects; /* stream: connect callbacks */
    unsigned closes;   /* stream: close callbacks */
    unsigned work;     /* job: what the work does */
    struct rec *stream; /* write/shutdown: its stream */
    unsigned fs_op;     /* file request: which (step_fs) */
    char buf[32];       /* file request: a read's buffer, until its callback */
    /* Admission. A job, lookup or file request: */
    struct rec *owner;  /* the owner it counts against, or NULL */
    uint64_t timeout;   /* its timeout, 0 if none */
    bool cancel_asked;  /* a cancel may have reached it: -ECANCELED is allowed */
    atomic_uint ran;    /* job: its work started (written by a worker) */
    /* An owner (the model of its counts): */
    bool closed;        /* closed, cancelled or its loop freed: the id is stale */
    bool close_coming;  /* a close or cancel of it was made: it may be stale already */
    unsigned cap, in_flight;
    unsigned maybe;     /* lookups answered early (-ETIMEDOUT) that may still count */
    uint64_t m_accepted, m_refused;
    /* The families of the extended table (see "Extended steps"): */
    int family;         /* UDP socket: AF_INET or AF_INET6 */
    unsigned port;      /* UDP socket: its bound port */
    bool connected;     /* UDP socket: tern_udp_connect succeeded */
    int signo;          /* signal watcher: its signal */
    int pid;            /* process: the child's pid */
    int want_exit;      /* process: the exit code its program ends with */
    bool signalled;     /* process: tern_process_kill sent it a signal */
    bool said_stopped;  /* process, wait: a cancel answered TERN_CANCEL_STOPPED */
    bool said_finished; /* process, wait: a cancel answered TERN_CANCEL_FINISHED */
    bool tty;           /* stream: over a terminal (step_tty) */
};

static struct rec recs[MAX_RECS];
static unsigned nrecs;

struct slot {
    tern_loop *loop;
    unsigned port; /* its listener's port, 0 if none */
    unsigned max_operations, max_undelivered; /* as the loop was made */
};

static struct slot slots[2];
static int pairs[PAIRS][2];   /* watched by fd watchers: [0] watched, [1] written */
static int stream_fds[8];     /* adopted by streams that failed to open: ours to close */
static unsigned nstream_fds;

static struct rec *rec_new(enum kind k, int slot)
{
    if (nrecs == MAX_RECS)
        return NULL;
    struct rec *r = &recs[nrecs++];
    *r = (struct rec){.kind = k, .slot = slot, .loop = slots[slot].loop};
    return r;
}

static struct rec *rec_find(tern_id id)
{
    for (unsigned i = 0; i < nrecs; i++)
        if (recs[i].accepted && !recs[i].dead && recs[i].id == id && recs[i].kind != K_WRITE &&
            recs[i].kind != K_SHUT && recs[i].kind != K_POST && recs[i].kind != K_DEFER &&
            recs[i].kind != K_SEND)
            return &recs[i];
    return NULL;
}

/* A callback arrived for r on loop: it must be r's loop, and r alive. */
static void arrived(const struct rec *r, tern_loop *loop, const char *what)
{
    ENSURE(r->accepted, "%s: a callback for a refused call", what);
    ENSURE(!r->dead, "%s: a callback after its loop was freed", what);
    ENSURE(loop == r->loop, "%s: a callback on the wrong loop", what);
    ENSURE(tern_loop_current() == loop, "%s: a callback off its loop's thread", what);
}

/* A return value: 0, or a negative errno tern can produce; never positive. */
static void sane_rc(int rc, const char *what)
{
    ENSURE(rc <= 0 && (rc >= -4095 || (rc < TERN_EAI_BASE && rc >= TERN_EAI_OTHER)),
           "%s returned %d", what, rc);
}

static bool fault_armed;

/*
 * What carries from one input to the next, beside what reset() rebuilds:
 * the process-wide pool (started by an earlier input, or by this one's
 * first submission) and the order of this input in the run. The fault
 * seam itself is disarmed after every input; the arm this input made is
 * printed with the count of calls it had seen.
 */
static struct {
    uint64_t inputs;       /* inputs run in this process, this one included */
    bool pool_at_start;    /* the pool was running when this input began */
    unsigned fault_mask;   /* the last arm this input made (0: none) */
    uint64_t fault_nth;
} carried;

static void fuzz_state_print(void)
{
    fprintf(stderr,
            "fuzz_api: state: input %" PRIu64 " of this process; pool %s at its start; "
            "fault %s (mask %u, nth %" PRIu64 ", %s)\n",
            carried.inputs, carried.pool_at_start ? "running" : "not running",
            fault_armed ? "armed" : "not armed", carried.fault_mask, carried.fault_nth,
            tern__fault_fired() ? "fired" : "not fired yet");
}

/* An errno an injected failure may surface as. */
static bool injected(int rc)
{
    return rc == -ENOMEM || rc == -EMFILE || rc == -EAGAIN;
}

/* ------------------------------------------------------------------ */
/* The admission model: owners, cancels that may reach a request       */
/* ------------------------------------------------------------------ */

/* What the admission steps reached, for fuzz_replay's closing line. */
static struct {
    unsigned owners, owned_accepted, owner_cap_refusals, timed_accepted, timed_out, closes;
} adm_seen;

static bool is_request(const struct rec *r)
{
    return r->kind == K_JOB || r->kind == K_LOOKUP || r->kind == K_FS || r->kind == K_WAIT;
}

/* The live owner `id` names on slot s's loop, or NULL. */
static struct rec *owner_live(int s, tern_id id)
{
    for (unsigned i = 0; i < nrecs; i++) {
        struct rec *r = &recs[i];
        if (r->kind == K_OWNER && r->accepted && !r->closed && !r->dead && r->slot == s &&
            r->id == id && id != 0)
            return r;
    }
    return NULL;
}

/* A request whose completion has not come yet, so a cancel may reach it. */
static bool owed(const struct rec *r)
{
    return (is_request(r) || r->kind == K_PROC) && r->accepted && r->calls == 0 && !r->dead;
}

/*
 * A cancel of `id` on slot s is about to be made (marked first: a queued
 * cancel takes effect while the harness pumps, before it hears back).
 * Every request with that id may be stopped; if id is a live owner, so
 * may every request it has in flight.
 */
static void cancel_coming(int s, tern_id id)
{
    struct rec *o = owner_live(s, id);
    if (o != NULL)
        o->close_coming = true;
    for (unsigned i = 0; i < nrecs; i++) {
        struct rec *r = &recs[i];
        if (owed(r) && r->slot == s && (r->id == id || (o != NULL && r->owner == o)))
            r->cancel_asked = true;
    }
}

/* Every request still owed on slot s (or on every slot, s < 0) may be stopped. */
static void cancel_everything_coming(int s)
{
    for (unsigned i = 0; i < nrecs; i++)
        if (owed(&recs[i]) && (s < 0 || recs[i].slot == s))
            recs[i].cancel_asked = true;
}

/* Slot s's loop is about to be freed: its owners close first. */
static void owners_closing(int s)
{
    for (unsigned i = 0; i < nrecs; i++)
        if (recs[i].kind == K_OWNER && recs[i].slot == s)
            recs[i].close_coming = true;
}

/* A cancel of `id` on slot s succeeded: a live owner it named is closed. */
static void cancel_done(int s, tern_id id)
{
    struct rec *o = owner_live(s, id);
    if (o != NULL)
        o->closed = true;
}

/* The owner's stats must equal the model (an early-answered lookup may still count). */
static void owner_check(struct rec *o, const char *when)
{
    if (o == NULL || o->closed || o->dead)
        return;
    tern_owner_stats st;
    int rc = tern_owner_stats_get(o->loop, o->id, &st);
    if (rc == -ENOENT && o->close_coming)
        return; /* closed by a cancel the harness has not heard back from, or a free */
    ENSURE(rc == 0, "%s: tern_owner_stats_get of a live owner: %s", when, tern_err_name(rc));
    ENSURE(st.cap == o->cap && st.accepted == o->m_accepted && st.refused == o->m_refused &&
               st.in_flight >= o->in_flight && st.in_flight <= o->in_flight + o->maybe,
           "%s: owner stats cap %u in_flight %u accepted %" PRIu64 " refused %" PRIu64
           "; the model says cap %u in_flight %u (+%u) accepted %" PRIu64 " refused %" PRIu64,
           when, st.cap, st.in_flight, st.accepted, st.refused, o->cap, o->in_flight, o->maybe,
           o->m_accepted, o->m_refused);
}

/* A request of o's has completed: its count is released before the callback. */
static void owner_release(struct rec *r, bool maybe_still_counted)
{
    struct rec *o = r->owner;
    if (o == NULL)
        return;
    ENSURE(o->in_flight > 0, "owner: more completions than jobs in flight");
    o->in_flight--;
    if (maybe_still_counted)
        o->maybe++;
    owner_check(o, "in a completion");
}

/*
 * What a request ended with, for every kind: -ETIMEDOUT only with a
 * timeout; -ECANCELED only if a cancel may have reached it.
 */
static void check_stop_status(const struct rec *r, int status, const char *what)
{
    adm_seen.timed_out += status == -ETIMEDOUT;
    if (status == -ETIMEDOUT)
        ENSURE(r->timeout != 0, "%s: -ETIMEDOUT without a timeout", what);
    if (status == -ECANCELED)
        ENSURE(r->cancel_asked, "%s: -ECANCELED though no cancel could have reached it", what);
}

/* The owner's cap may or may not refuse: an early-answered lookup may still count. */
#define OWNER_CAP_MAYBE ((tern_refusal)99)

/*
 * Before a submission on slot s with owner o (NULL: none): the refusal the
 * harness can predict from its model and the loop's stats, or NONE.
 * Order as in admission: the owner's cap, max_undelivered, max_operations.
 */
static tern_refusal predict_refusal(int s, const struct rec *o, const tern_loop_stats *before)
{
    if (o != NULL && o->in_flight + o->maybe >= o->cap)
        return o->in_flight >= o->cap ? TERN_REFUSED_OWNER_CAP : OWNER_CAP_MAYBE;
    if (before->undelivered >= slots[s].max_undelivered)
        return TERN_REFUSED_UNDELIVERED;
    if (before->live_operations >= slots[s].max_operations)
        return TERN_REFUSED_OPERATIONS;
    return TERN_REFUSED_NONE;
}

/*
 * After a submission that passed the checks of its values: its return and
 * tern_loop_last_refusal agree with the limits, and the model follows.
 * `want` is predict_refusal's answer; is_long: a long-class job.
 */
static void admission_after(int s, int rc, tern_refusal want, struct rec *o, bool is_long,
                            const tern_loop_stats *before, const char *what)
{
    tern_loop *loop = slots[s].loop;
    tern_refusal cause = tern_loop_last_refusal(loop);
    if (rc == 0) {
        ENSURE(cause == TERN_REFUSED_NONE, "%s accepted, but the cause says %s", what,
               tern_refusal_name(cause));
        ENSURE(want == TERN_REFUSED_NONE || want == OWNER_CAP_MAYBE,
               "%s accepted past a limit (%s)", what, tern_refusal_name(want));
        if (o != NULL) {
            o->in_flight++;
            o->m_accepted++;
            adm_seen.owned_accepted++;
        }
    } else if (rc == -EAGAIN) {
        switch (cause) {
        case TERN_REFUSED_OWNER_CAP:
            ENSURE(o != NULL && o->in_flight + o->maybe >= o->cap,
                   "%s: refused for an owner's cap it had not reached", what);
            o->m_refused++;
            adm_seen.owner_cap_refusals++;
            break;
        case TERN_REFUSED_UNDELIVERED:
            ENSURE(before->undelivered >= slots[s].max_undelivered,
                   "%s: refused for max_undelivered at %u of %u", what, before->undelivered,
                   slots[s].max_undelivered);
            break;
        case TERN_REFUSED_OPERATIONS:
            ENSURE(before->live_operations >= slots[s].max_operations,
                   "%s: refused for max_operations at %u of %u", what, before->live_operations,
                   slots[s].max_operations);
            break;
        case TERN_REFUSED_LONG_CEILING:
            ENSURE(is_long, "%s: a bounded request refused for the long ceiling", what);
            break;
        case TERN_REFUSED_QUEUE_FULL:
            ENSURE(!is_long, "%s: a long job refused for the bounded queue", what);
            break;
        case TERN_REFUSED_SHUTDOWN:
            /* Shutdowns here are this thread's own and synchronous. */
            ENSURE(false, "%s: refused for a shutdown none is making", what);
            break;
        case TERN_REFUSED_THREADS:
            /* Only an injected EAGAIN from pthread_create denies a thread here. */
            ENSURE(fault_armed, "%s: refused for want of a thread with no fault armed", what);
            break;
        default:
            FAIL("%s: -EAGAIN with cause %s (%d)%s", what, tern_refusal_name(cause), (int)cause,
                 fault_armed ? " (a fault was armed)" : "");
        }
        tern_loop_stats after;
        tern_loop_stats_get(loop, &after);
        ENSURE(after.live_operations == before->live_operations &&
                   after.undelivered == before->undelivered,
               "%s: a refusal left something (live %u -> %u, undelivered %u -> %u)", what,
               before->live_operations, after.live_operations, before->undelivered,
               after.undelivered);
    }
    if (want != TERN_REFUSED_NONE && want != OWNER_CAP_MAYBE && !fault_armed)
        ENSURE(rc == -EAGAIN && cause == want, "%s: %s with cause %s; the limits say %s", what,
               tern_err_name(rc), tern_refusal_name(cause), tern_refusal_name(want));
    owner_check(o, what);
}

/* ------------------------------------------------------------------ */
/* Callbacks                                                           */
/* ------------------------------------------------------------------ */

static void timer_cb(tern_loop *loop, tern_id id, void *arg)
{
    struct rec *r = arg;
    arrived(r, loop, "timer");
    ENSURE(id == r->id, "timer: wrong id");
    ENSURE(!r->stopped, "timer: fired after a successful stop or cancel");
    ENSURE(r->repeat || r->calls == 0, "timer: a one-shot fired twice");
    r->calls++;
    if (!r->repeat)
        r->stopped = true; /* finished: its id is stale now */
    else if (r->calls >= 3 && tern_timer_stop(loop, id) == 0)
        r->stopped = true;
}

static void *job_work(tern_job *job, void *arg)
{
    struct rec *r = arg;
    ENSURE(tern_loop_current() == NULL, "work: tern_loop_current() is not NULL on a worker");
    atomic_store_explicit(&r->ran, 1, memory_order_relaxed);
    if (r->work == 1) {
        for (unsigned i = 0; i < 40 && !tern_job_cancelled(job); i++) {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
    return r;
}

static void job_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    struct rec *r = arg;
    arrived(r, loop, "job");
    ENSURE(id == r->id, "job: wrong id");
    ENSURE(r->calls == 0, "job: a second completion");
    ENSURE(status == 0 || status == -ECANCELED || status == -ETIMEDOUT, "job: status %s",
           tern_err_name(status));
    check_stop_status(r, status, "job");
    /* The hand-back orders the work's store before this read. */
    bool ran = atomic_load_explicit(&r->ran, memory_order_relaxed) != 0;
    ENSURE(ran ? result == r : (result == NULL && status != 0),
           "job: ran %d, status %s, result %p (want the work's result iff it ran)", ran,
           tern_err_name(status), result);
    if (!ran && !r->cancel_asked)
        ENSURE(status == -ETIMEDOUT, "job: never ran, no cancel: %s", tern_err_name(status));
    r->calls++;
    owner_release(r, false);
}

static void lookup_cb(tern_loop *loop, tern_id id, int status, struct addrinfo *res, void *arg)
{
    struct rec *r = arg;
    arrived(r, loop, "lookup");
    ENSURE(id == r->id, "lookup: wrong id");
    ENSURE(r->calls == 0, "lookup: a second callback");
    ENSURE((status == 0) == (res != NULL), "lookup: status %s with res %p", tern_err_name(status),
           (void *)res);
    sane_rc(status, "lookup status");
    check_stop_status(r, status, "lookup");
    tern_freeaddrinfo(res);
    r->calls++;
    /* Answered at its deadline while getaddrinfo ran, it counts until that returns. */
    owner_release(r, status == -ETIMEDOUT);
}

/* A reverse lookup's answer: the same bookkeeping as a forward one's. */
static void name_cb(tern_loop *loop, tern_id id, int status, const char *host, const char *serv,
                    void *arg)
{
    struct rec *r = arg;
    arrived(r, loop, "reverse lookup");
    ENSURE(id == r->id, "reverse lookup: wrong id");
    ENSURE(r->calls == 0, "reverse lookup: a second callback");
    ENSURE((status == 0) == (host != NULL && serv != NULL), "reverse lookup: status %s, host %p",
           tern_err_name(status), (const void *)host);
    sane_rc(status, "reverse lookup status");
    check_stop_status(r, status, "reverse lookup");
    r->calls++;
    owner_release(r, status == -ETIMEDOUT);
}

static void post_cb(tern_loop *loop, void *arg)
{
    struct rec *r = arg;
    arrived(r, loop, "post/defer");
    ENSURE(r->calls == 0, "post/defer: ran twice");
    r->calls++;
}

static void watch_cb(tern_loop *loop, tern_id id, int fd, unsigned events, void *arg)
{
    struct rec *r = arg;
    arrived(r, loop, "watcher");
    ENSURE(id == r->id, "watcher: wrong id");
    ENSURE(!r->stopped, "watcher: a callback after a successful stop");
    ENSURE(events != 0 && (events & ~15u) == 0, "watcher: events %u", events);
    char buf[256];
    while (read(fd, buf, sizeof(buf)) > 0) {
    }
    r->calls++;
}

static void stream_closed(tern_loop *loop, tern_id id, void *arg)
{
    struct rec *r = arg;
    arrived(r, loop, "close");
    ENSURE(id == r->id, "close: wrong id");
    ENSURE(r->closes == 0, "close: a second close callback");
    ENSURE(!r->connecting || r->connects == 1, "close: before the connect callback");
    r->closes++;
    r->stopped = true;
}

static void stream_read(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                        void *arg)
{
    struct rec *r = arg;
    arrived(r, loop, "read");
    ENSURE(id == r->id, "read: wrong id");
    ENSURE(!r->closing && r->closes == 0, "read: a callback after the stream was closed");
    ENSURE((len > 0) == (data != NULL), "read: data %p with len %zu", data, len);
    ENSURE(status <= 0 && (status == 0 || len == 0), "read: status %d len %zu", status, len);
}

static void stream_connected(tern_loop *loop, tern_id id, int status, void *arg)
{
    struct rec *r = arg;
    arrived(r, loop, "connect");
    ENSURE(id == r->id, "connect: wrong id");
    ENSURE(r->connects == 0, "connect: a second callback");
    ENSURE(r->closes == 0, "connect: after the close callback");
    sane_rc(status, "connect status");
    r->connects++;
    if (status < 0)
        r->closing = true; /* a failed connect closes the stream */
}

static void op_done(tern_loop *loop, tern_id id, int status, void *arg)
{
    struct rec *r = arg;
    arrived(r, loop, r->kind == K_WRITE ? "write" : "shutdown");
    ENSURE(id == r->stream->id, "write/shutdown: wrong stream id");
    ENSURE(r->calls == 0, "write/shutdown: a second completion");
    ENSURE(r->stream->closes == 0, "write/shutdown: after the close callback");
    sane_rc(status, "write/shutdown status");
    r->calls++;
}

static void drained(tern_loop *loop, tern_id id, void *arg)
{
    struct rec *r = arg;
    arrived(r, loop, "drain");
    ENSURE(id == r->id && r->closes == 0, "drain: wrong stream or after close");
}

/* A new stream id was accepted: every stream must end with one close
 * callback. r may be NULL (no room): the stream is closed at once. */
static void stream_init(struct rec *r, tern_loop *loop, tern_id id, bool listener)
{
    if (r == NULL) {
        ENSURE(tern_stream_close(loop, id) == 0, "closing a fresh stream");
        return;
    }
    r->id = id;
    r->accepted = true;
    r->listener = listener;
    int rc = tern_stream_on_close(loop, id, stream_closed, r);
    ENSURE(rc == 0, "tern_stream_on_close on a fresh stream: %s", tern_err_name(rc));
}

static void accepted_cb(tern_loop *loop, tern_id listener, int status, tern_id stream, void *arg)
{
    struct rec *l = arg;
    arrived(l, loop, "accept");
    ENSURE(listener == l->id, "accept: wrong listener");
    ENSURE(l->closes == 0 && !l->closing, "accept: after the listener was closed");
    if (status < 0) {
        ENSURE(stream == 0, "accept: a stream with a failure");
        ENSURE(injected(status) || status == -ENFILE || status == -ENOBUFS,
               "accept: status %s", tern_err_name(status));
        return;
    }
    struct rec *r = rec_new(K_STREAM, l->slot);
    stream_init(r, loop, stream, false);
    if (r != NULL) {
        int rc = tern_stream_read_start(loop, stream, stream_read, r);
        ENSURE(rc == 0 || injected(rc), "read_start on an accepted stream: %s", tern_err_name(rc));
    }
}

/* ------------------------------------------------------------------ */
/* The foreign thread: posts, cancels and stops while the loops turn    */
/* ------------------------------------------------------------------ */

enum { F_POST, F_CANCEL, F_STOP };

struct foreign_act {
    int what, slot;
    tern_id id;
    struct rec *post;
    int rc;
};

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct foreign_act acts[8];
    unsigned n;
    bool pending, quit;
    atomic_bool done;
    pthread_t thread;
} foreign = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static void *foreign_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&foreign.lock);
    for (;;) {
        while (!foreign.pending && !foreign.quit)
            pthread_cond_wait(&foreign.cond, &foreign.lock);
        if (foreign.quit)
            break;
        foreign.pending = false;
        pthread_mutex_unlock(&foreign.lock);
        for (unsigned i = 0; i < foreign.n; i++) {
            struct foreign_act *a = &foreign.acts[i];
            tern_loop *loop = slots[a->slot].loop;
            if (a->what == F_POST)
                a->rc = tern_post(loop, post_cb, a->post);
            else if (a->what == F_CANCEL)
                a->rc = tern_cancel(loop, a->id);
            else
                a->rc = tern_loop_stop(loop);
        }
        atomic_store(&foreign.done, true);
        pthread_mutex_lock(&foreign.lock);
    }
    pthread_mutex_unlock(&foreign.lock);
    return NULL;
}

#ifdef FUZZ_REPLAY_MAIN
/* End the foreign thread (the replay does, so valgrind sees it joined). */
static void foreign_quit(void)
{
    pthread_mutex_lock(&foreign.lock);
    foreign.quit = true;
    pthread_cond_signal(&foreign.cond);
    pthread_mutex_unlock(&foreign.lock);
    pthread_join(foreign.thread, NULL);
}
#endif

/* ------------------------------------------------------------------ */
/* A name resolver that never leaves the machine                       */
/* ------------------------------------------------------------------ */

static int local_getaddrinfo(const char *host, const char *service, const struct addrinfo *hints,
                             struct addrinfo **res)
{
    struct addrinfo h = {0};
    if (hints != NULL)
        h = *hints;
    if (host != NULL && strcmp(host, "localhost") == 0)
        host = "127.0.0.1";
    /* Numeric only: no name ever reaches a resolver or the network. */
    h.ai_flags |= AI_NUMERICHOST;
    return getaddrinfo(host, service, &h, res);
}

/* ------------------------------------------------------------------ */
/* Picking values                                                      */
/* ------------------------------------------------------------------ */

static tern_id pick_id(struct input *in, enum kind want, int slot)
{
    unsigned c = u8(in);
    switch (c % 8) {
    case 0:
        return 0;
    case 1:
        return STRANGER_BASE | ((tern_id)u16(in) << 32) | u16(in);
    case 2:
        return UINT64_MAX;
    default:
        break;
    }
    /* A known id: of the wanted kind on this slot, or any (another loop's, a finished one). */
    unsigned start = u8(in);
    for (unsigned k = 0; k < nrecs; k++) {
        struct rec *r = &recs[(start + k) % (nrecs ? nrecs : 1)];
        if (!r->accepted || r->id == 0)
            continue;
        if (c % 8 == 7 || (r->kind == want && r->slot == slot))
            return r->id;
    }
    return STRANGER_BASE + u16(in);
}

static int slot_of(struct input *in)
{
    return (int)(u8(in) & 1);
}

/* ------------------------------------------------------------------ */
/* Steps                                                               */
/* ------------------------------------------------------------------ */

static void expect_free_settled(int slot);

/* Whether this build and kernel give a loop that asks for io_uring that
 * backend (else it is left out of the alphabet's backends). */
static bool io_uring_here(void)
{
    static int known = -1;
    if (known < 0) {
        tern_loop_options o;
        tern_loop_options_init(&o);
        o.backend = "io_uring";
        tern_loop *l = NULL;
        known = tern_loop_new(&l, &o) == 0 && strcmp(tern_loop_backend_name(l), "io_uring") == 0;
        if (l != NULL)
            tern_loop_free(l);
    }
    return known == 1;
}

static void step_loop_new(struct input *in)
{
    int s = slot_of(in);
    if (slots[s].loop != NULL)
        return;
    static const unsigned batch[] = {0, 1, 64, (1u << 20) + 1};
    static const unsigned maxops[] = {0, 1, 4, 65536};
    static const unsigned undeliv[] = {0, 1, 2, 4096};
    static const char *const backends[] = {NULL, "epoll", "poll", "bogus"};
    static tern_pool_config cfg;
    unsigned b = u8(in);
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.dispatch_batch = batch[b & 3];
    o.max_operations = maxops[(b >> 2) & 3];
    o.max_undelivered = undeliv[(b >> 4) & 3];
    o.backend = backends[(b >> 6) & 3];
    unsigned f = u8(in);
    o.flags = (f & 1) ? TERN_LOOP_RCU : 0;
    if (f & 2)
        o.flags |= 0x80; /* unknown */
    /* The default's slot asks for io_uring where it is here, so its
     * receives meet every stream operation the alphabet has. */
    if ((f & 0x20) && o.backend == NULL && io_uring_here())
        o.backend = "io_uring";
    if (f & 4) {
        tern_pool_config_init(&cfg);
        cfg.threads = 1 + (f >> 3) % 4;
        o.pool = &cfg;
    }
    bool bad = o.dispatch_batch == 0 || o.dispatch_batch > (1u << 20) || o.max_operations == 0 ||
               o.max_undelivered == 0 || (o.flags & 0x80) ||
               (o.backend != NULL && strcmp(o.backend, "bogus") == 0);
    tern_loop *loop = NULL;
    int rc = tern_loop_new(&loop, &o);
    sane_rc(rc, "tern_loop_new");
    if (bad)
        ENSURE(rc == -EINVAL, "tern_loop_new with a bad option: %s", tern_err_name(rc));
    if (rc != 0) {
        ENSURE(loop == NULL, "a failed tern_loop_new wrote *loopp");
        ENSURE(rc == -EINVAL || (fault_armed && injected(rc)), "tern_loop_new: %s",
               tern_err_name(rc));
        return;
    }
    slots[s].loop = loop;
    slots[s].port = 0;
    slots[s].max_operations = o.max_operations;
    slots[s].max_undelivered = o.max_undelivered;
}

static void step_loop_free(struct input *in)
{
    int s = slot_of(in);
    if (slots[s].loop == NULL)
        return;
    expect_free_settled(s);
}

static void step_timer(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in);
    uint64_t delay = (c & 0x40) ? (UINT64_C(1) << 62) + 1 : (uint64_t)u8(in) * 4 * US;
    uint64_t repeat = (c & 1) ? (uint64_t)(1 + u8(in)) * 4 * US : 0;
    bool null_cb = (c & 0x80) != 0;
    struct rec *r = rec_new(K_TIMER, s);
    if (r == NULL)
        return;
    r->repeat = repeat != 0;
    int rc = tern_timer_start(loop, delay, repeat, null_cb ? NULL : timer_cb, r, &r->id);
    sane_rc(rc, "tern_timer_start");
    if (null_cb || delay > (UINT64_C(1) << 62))
        ENSURE(rc == -EINVAL, "tern_timer_start with a bad argument: %s", tern_err_name(rc));
    r->accepted = rc == 0;
}

/* Mark what a successful stop or cancel of id ends. */
static void stopped_by_id(tern_id id, int slot, bool cancel)
{
    struct rec *r = rec_find(id);
    if (r == NULL || r->slot != slot)
        return;
    if (r->kind == K_TIMER || r->kind == K_WATCH || r->kind == K_HOOK || r->kind == K_SIGNAL ||
        r->kind == K_FSWATCH)
        r->stopped = true;
    if ((r->kind == K_STREAM || r->kind == K_UDP) && cancel)
        r->closing = true;
}

static void step_timer_stop(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    tern_id id = pick_id(in, K_TIMER, s);
    int rc = tern_timer_stop(loop, id);
    sane_rc(rc, "tern_timer_stop");
    if (id == 0)
        ENSURE(rc == -EINVAL, "tern_timer_stop(0): %s", tern_err_name(rc));
    struct rec *r = rec_find(id);
    if (r == NULL || r->slot != s || r->kind != K_TIMER)
        ENSURE(rc == -ENOENT || id == 0, "tern_timer_stop of a non-timer or foreign id: %s",
               tern_err_name(rc));
    if (rc == 0) {
        ENSURE(r != NULL && r->kind == K_TIMER && r->slot == s,
               "stopped an id that is no timer here");
        ENSURE(!r->stopped, "tern_timer_stop succeeded on a finished timer");
        r->stopped = true;
    }
}

/*
 * tern_cancel from this thread: either as the loop's own thread (it holds
 * the loop between turns, so the cancel resolves at once and says -ENOENT
 * for an id it never gave), or as any other thread on the unclaimed loop
 * (queued and resolved by the next turn's step 1, which runs here at once
 * so the model stays exact: nothing dispatches before step 1).
 */
static void step_cancel(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    bool queued = (u8(in) & 1) != 0;
    tern_id id = pick_id(in, (enum kind)(1 + u8(in) % 7), s);
    struct rec *r = rec_find(id);
    cancel_coming(s, id);
    int rc = queued ? tern_cancel(loop, id) : tern__test_cancel_now(loop, id);
    ENSURE(rc <= TERN_CANCEL_REQUESTED, "tern_cancel returned %d", rc);
    if (rc < 0)
        sane_rc(rc, "tern_cancel");
    if (id == 0)
        ENSURE(rc == -EINVAL, "tern_cancel(0): %s", tern_err_name(rc));
    if (queued) {
        /* A cancel allocates nothing: an armed fault cannot refuse it. */
        ENSURE(rc == TERN_CANCEL_REQUESTED || id == 0, "queued tern_cancel: %s",
               tern_err_name(rc));
        if (rc != TERN_CANCEL_REQUESTED)
            return;
        int alive = tern_loop_run_once(loop, 0);
        ENSURE(alive == 0 || alive == 1, "tern_loop_run_once returned %d", alive);
        stopped_by_id(id, s, true);
        cancel_done(s, id);
        return;
    }
    if (r == NULL || r->slot != s)
        ENSURE(rc == -ENOENT || id == 0, "tern_cancel of an id this loop never gave: %d", rc);
    ENSURE(rc != TERN_CANCEL_REQUESTED, "a cancel from the loop's own thread was queued");
    if (rc >= 0) {
        stopped_by_id(id, s, true);
        cancel_done(s, id);
    }
}

static void step_submit(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in);
    int occ = (c & 3) == 3 ? 7 : (int)(c & 1);
    bool null_work = (c & 0x40) != 0, null_done = (c & 0x80) != 0;
    struct rec *r = rec_new(K_JOB, s);
    if (r == NULL)
        return;
    r->work = (c >> 2) & 1;
    int rc = tern_submit(loop, (tern_occupancy)occ, null_work ? NULL : job_work,
                         null_done ? NULL : job_done, r, &r->id);
    sane_rc(rc, "tern_submit");
    if (occ == 7 || null_work || null_done)
        ENSURE(rc == -EINVAL, "tern_submit with a bad argument: %s", tern_err_name(rc));
    else
        ENSURE(rc == 0 || rc == -EAGAIN || rc == -EINVAL || (fault_armed && injected(rc)),
               "tern_submit: %s", tern_err_name(rc));
    r->accepted = rc == 0;
}

static void step_resolve(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    static const char *const hosts[] = {"localhost", "127.0.0.1", "::1", NULL,
                                        "no-such-host.invalid", ""};
    static const char *const services[] = {"80", NULL, "http", "99999999"};
    static const int families[] = {AF_UNSPEC, AF_INET, AF_INET6, 12345};
    unsigned c = u8(in);
    const char *host = hosts[c % 6];
    const char *service = services[(c >> 3) & 3];
    struct addrinfo hints = {.ai_family = families[(c >> 5) & 3], .ai_socktype = SOCK_STREAM};
    unsigned d = u8(in);
    bool null_cb = d == 0xff;
    struct rec *r = rec_new(K_LOOKUP, s);
    if (r == NULL)
        return;
    if (d == 0xfe || d == 0xfd) {
        /* The reverse: a numeric or a named answer for a loopback address. */
        struct sockaddr_in in4 = {.sin_family = AF_INET, .sin_port = htons(80),
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int rc = tern_resolve_addr(loop, (struct sockaddr *)&in4,
                                   d == 0xfe ? NI_NUMERICHOST | NI_NUMERICSERV : NI_NUMERICSERV,
                                   name_cb, r, NULL, &r->id);
        sane_rc(rc, "tern_resolve_addr");
        r->accepted = rc == 0;
        return;
    }
    int rc = tern_resolve(loop, host, service, (c & 0x80) ? NULL : &hints,
                          null_cb ? NULL : lookup_cb, r, &r->id);
    sane_rc(rc, "tern_resolve");
    if (null_cb || (host == NULL && service == NULL))
        ENSURE(rc == -EINVAL, "tern_resolve with a bad argument: %s", tern_err_name(rc));
    r->accepted = rc == 0;
}

static void step_post(struct input *in, bool defer)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    bool null_fn = u8(in) == 0xff;
    struct rec *r = rec_new(defer ? K_DEFER : K_POST, s);
    if (r == NULL)
        return;
    int rc = defer ? tern_defer(loop, null_fn ? NULL : post_cb, r)
                   : tern_post(loop, null_fn ? NULL : post_cb, r);
    sane_rc(rc, defer ? "tern_defer" : "tern_post");
    if (null_fn)
        ENSURE(rc == -EINVAL, "post/defer of NULL: %s", tern_err_name(rc));
    r->accepted = rc == 0;
}

static int pair_fd(unsigned c)
{
    if (pairs[0][0] < 0) {
        for (int i = 0; i < PAIRS; i++)
            ENSURE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pairs[i]) ==
                       0,
                   "socketpair");
    }
    return pairs[c % PAIRS][0];
}

static void step_watch(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in);
    int fd;
    switch (c % 6) {
    case 4:
        fd = -1;
        break;
    case 5:
        fd = 1000000; /* never open */
        break;
    default:
        fd = c % 6 == 3 ? tern_loop_backend_fd(loop) : pair_fd(c);
    }
    unsigned events = (c >> 3) & 7; /* 4 is not a valid interest bit */
    bool null_cb = (c & 0x80) != 0;
    struct rec *r = rec_new(K_WATCH, s);
    if (r == NULL)
        return;
    int rc = tern_io_start(loop, fd, events, null_cb ? NULL : watch_cb, r, &r->id);
    sane_rc(rc, "tern_io_start");
    if (fd < 0 || fd == 1000000)
        ENSURE(rc == -EBADF, "tern_io_start(fd %d): %s", fd, tern_err_name(rc));
    else if (null_cb || events == 0 || (events & 4))
        ENSURE(rc == -EINVAL, "tern_io_start with bad events or cb: %s", tern_err_name(rc));
    else if (fd == tern_loop_backend_fd(loop))
        ENSURE(rc == -EEXIST, "tern_io_start on the loop's own fd: %s", tern_err_name(rc));
    else
        ENSURE(rc == 0 || rc == -EEXIST || (fault_armed && injected(rc)) || rc == -EAGAIN,
               "tern_io_start: %s", tern_err_name(rc));
    r->accepted = rc == 0;
}

static void step_watch_change(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in);
    tern_id id = pick_id(in, K_WATCH, s);
    struct rec *r = rec_find(id);
    bool mine = r != NULL && r->slot == s && r->kind == K_WATCH && !r->stopped;
    int rc;
    if (c & 1) {
        rc = tern_io_stop(loop, id);
        sane_rc(rc, "tern_io_stop");
        if (rc == 0) {
            ENSURE(mine, "tern_io_stop succeeded on an id that is no live watcher here");
            r->stopped = true;
        }
    } else {
        unsigned events = (c >> 1) & 7;
        rc = tern_io_modify(loop, id, events);
        sane_rc(rc, "tern_io_modify");
        if (rc == 0)
            ENSURE(mine && events != 0 && !(events & 4), "tern_io_modify accepted %u on %s",
                   events, mine ? "a live watcher" : "no live watcher");
    }
    if (!mine && id != 0)
        ENSURE(rc == -ENOENT || rc == -EINVAL, "a watcher call on a stranger id: %s",
               tern_err_name(rc));
}

static void step_kick(struct input *in)
{
    int fd = pairs[u8(in) % PAIRS][1];
    if (fd >= 0) {
        ssize_t w = write(fd, "k", 1);
        (void)w;
    }
}

static void step_run(struct input *in)
{
    unsigned c = u8(in);
    unsigned turns = 1 + c % 8;
    int64_t wait = (c & 0x80) ? (int64_t)((c >> 3) & 7) * 125 * (int64_t)US : 0;
    for (unsigned t = 0; t < turns; t++)
        for (int s = 0; s < 2; s++)
            if (slots[s].loop != NULL) {
                int alive = tern_loop_run_once(slots[s].loop, wait);
                ENSURE(alive == 0 || alive == 1, "tern_loop_run_once returned %d", alive);
            }
}

static void stop_loop_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)id;
    (void)arg;
    ENSURE(tern_loop_stop(loop) == 0, "tern_loop_stop");
}

/* tern_loop_run, bounded by a timer that stops it after at most 1 ms. */
static void step_run_full(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    if (tern_timer_start(loop, (u8(in) % 4) * 250 * US, 0, stop_loop_timer, NULL, NULL) != 0)
        return;
    int rc = tern_loop_run(loop);
    ENSURE(rc == 0 || rc == 1, "tern_loop_run returned %d", rc);
    /* The stop timer may be the one thing still live; let it fire. */
    for (int i = 0; i < 8 && tern_loop_run_once(loop, 0) != 0; i++) {
    }
}

static void step_foreign(struct input *in)
{
    unsigned n = 1 + u8(in) % 8;
    unsigned k = 0;
    for (unsigned i = 0; i < n; i++) {
        unsigned c = u8(in);
        int s = (int)(c & 1);
        if (slots[s].loop == NULL)
            continue;
        struct foreign_act *a = &foreign.acts[k];
        *a = (struct foreign_act){.slot = s};
        switch ((c >> 1) % 4) {
        case 0:
        case 1:
            a->what = F_POST;
            if ((a->post = rec_new(K_POST, s)) == NULL)
                continue;
            /* It may run before this thread hears back; a refusal is settled below. */
            a->post->accepted = true;
            break;
        case 2:
            a->what = F_CANCEL;
            a->id = pick_id(in, (enum kind)(1 + (c >> 3) % 7), s);
            cancel_coming(s, a->id);
            break;
        default:
            a->what = F_STOP;
        }
        k++;
    }
    if (k == 0)
        return;
    atomic_store(&foreign.done, false);
    pthread_mutex_lock(&foreign.lock);
    foreign.n = k;
    foreign.pending = true;
    pthread_cond_signal(&foreign.cond);
    pthread_mutex_unlock(&foreign.lock);
    /* Pump both loops while the foreign thread acts (no other loop-only call meanwhile). */
    while (!atomic_load(&foreign.done))
        for (int s = 0; s < 2; s++)
            if (slots[s].loop != NULL)
                tern_loop_run_once(slots[s].loop, 0);
    /* One more turn each: cancels queued late are resolved in its step 1. */
    for (int s = 0; s < 2; s++)
        if (slots[s].loop != NULL)
            tern_loop_run_once(slots[s].loop, 0);
    for (unsigned i = 0; i < k; i++) {
        struct foreign_act *a = &foreign.acts[i];
        if (a->what == F_CANCEL && a->rc == TERN_CANCEL_REQUESTED)
            a->rc = 0; /* queued: the foreign cancel's success */
        sane_rc(a->rc, "a foreign call");
        if (a->what == F_POST) {
            a->post->accepted = a->rc == 0;
            ENSURE(a->rc == 0 || a->post->calls == 0, "a refused foreign post ran");
        }
        else if (a->what == F_STOP)
            ENSURE(a->rc == 0, "tern_loop_stop: %s", tern_err_name(a->rc));
        else if (a->id == 0)
            ENSURE(a->rc == -EINVAL, "foreign tern_cancel(0): %s", tern_err_name(a->rc));
        else
            /* Queued, or the loop is being freed: never refused for memory. */
            ENSURE(a->rc == 0 || a->rc == -ESHUTDOWN, "foreign tern_cancel: %s",
                   tern_err_name(a->rc));
        /* A queued foreign cancel returns 0 and its effect is the op's own
         * final callback; a timer it stopped then simply never fires. */
        if (a->what == F_CANCEL && a->rc == 0) {
            struct rec *r = rec_find(a->id);
            if (r != NULL && r->slot == a->slot && r->kind == K_STREAM)
                r->closing = true;
            if (r != NULL && r->slot == a->slot && r->kind >= K_UDP)
                stopped_by_id(a->id, a->slot, true);
            cancel_done(a->slot, a->id);
        }
    }
}

static void step_ref(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in);
    tern_id id = pick_id(in, (enum kind)(1 + c % 7), s);
    int rc = (c & 0x80) ? tern_ref(loop, id) : tern_unref(loop, id);
    sane_rc(rc, "tern_ref/unref");
    if (id == 0)
        ENSURE(rc == -EINVAL, "tern_ref(0): %s", tern_err_name(rc));
}

static void step_listen(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in);
    static const char *const hosts[] = {"127.0.0.1", "localhost", "::1", "not-an-address"};
    const char *host = hosts[c & 3];
    unsigned port = (c & 4) ? 70000 : 0;
    int backlog = (c & 8) ? -5 : TERN_TCP_BACKLOG_DEFAULT;
    struct rec *r = rec_new(K_STREAM, s);
    if (r == NULL)
        return;
    tern_id id;
    if (c & 32) {
        /* On a name: the outcome comes once, as a connect's does; any host
         * is a name to look up here (the stub refuses all but localhost). */
        uint64_t timeout = (c & 64) ? MS : 0;
        int rc = tern_tcp_listen_name(loop, host, port, backlog, (c & 16) ? 0x40 : 0, timeout,
                                      stream_connected, accepted_cb, r, &id);
        sane_rc(rc, "tern_tcp_listen_name");
        if (port > 65535 || backlog == -5 || (c & 16))
            ENSURE(rc == -EINVAL, "tern_tcp_listen_name with a bad argument: %s",
                   tern_err_name(rc));
        if (rc != 0)
            return;
        stream_init(r, loop, id, true);
        r->connecting = true;
        return;
    }
    int rc = tern_tcp_listen(loop, host, port, backlog, (c & 16) ? 0x40 : 0, accepted_cb, r, &id);
    sane_rc(rc, "tern_tcp_listen");
    if ((c & 3) == 3 || port > 65535 || backlog == -5 || (c & 16))
        ENSURE(rc == -EINVAL, "tern_tcp_listen with a bad argument: %s", tern_err_name(rc));
    if (rc != 0)
        return;
    stream_init(r, loop, id, true);
    unsigned p = 0;
    ENSURE(tern_tcp_port(loop, id, &p) == 0 && p != 0, "tern_tcp_port of a listener");
    slots[s].port = p;
}

static void step_connect(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in);
    static const char *const hosts[] = {"127.0.0.1", "localhost", "::1", "nowhere"};
    const char *host = hosts[c & 3];
    unsigned port = slots[(c >> 2) & 1].port;
    if ((c & 8) || port == 0)
        port = 1; /* nobody listens: refused */
    uint64_t timeout = (c & 16) ? 0 : (c & 32) ? MS : 1000 * MS;
    if (c & 64)
        port = 0; /* bad */
    struct rec *r = rec_new(K_STREAM, s);
    if (r == NULL)
        return;
    int rc = tern_tcp_connect(loop, host, port, timeout, stream_connected, r, &r->id);
    sane_rc(rc, "tern_tcp_connect");
    if (port == 0)
        ENSURE(rc == -EINVAL, "tern_tcp_connect to port 0: %s", tern_err_name(rc));
    r->accepted = rc == 0;
    r->connecting = true;
    if (rc == 0) {
        rc = tern_stream_on_close(loop, r->id, stream_closed, r);
        ENSURE(rc == 0, "tern_stream_on_close on a fresh connect: %s", tern_err_name(rc));
    }
}

static struct rec *pick_stream(struct input *in, int s)
{
    unsigned start = u8(in);
    if (nrecs == 0)
        return NULL;
    for (unsigned k = 0; k < nrecs; k++) {
        struct rec *r = &recs[(start + k) % nrecs];
        if (r->kind == K_STREAM && r->accepted && r->slot == s)
            return r;
    }
    return NULL;
}

static void step_stream_open(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL || nstream_fds + 2 > sizeof(stream_fds) / sizeof(stream_fds[0]))
        return;
    (void)u8(in);
    int sp[2];
    ENSURE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0, "socketpair");
    for (int i = 0; i < 2; i++) {
        tern_id id;
        int rc = tern_stream_open(loop, sp[i], &id);
        sane_rc(rc, "tern_stream_open");
        if (rc != 0) {
            stream_fds[nstream_fds++] = sp[i]; /* still ours */
            continue;
        }
        struct rec *r = rec_new(K_STREAM, s);
        stream_init(r, loop, id, false);
        if (r != NULL && (u8(in) & 1)) {
            rc = tern_stream_read_start(loop, id, stream_read, r);
            ENSURE(rc == 0 || injected(rc), "read_start: %s", tern_err_name(rc));
        }
    }
    int rc = tern_stream_open(loop, -1, NULL);
    ENSURE(rc == -EBADF, "tern_stream_open(-1): %s", tern_err_name(rc));
}

static const char payload[4096] = "tern";

static void step_stream_call(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in);
    struct rec *st = (c & 0x80) ? NULL : pick_stream(in, s);
    tern_id id = st != NULL ? st->id : pick_id(in, K_STREAM, s);
    if (st == NULL)
        st = rec_find(id);
    bool live = st != NULL && st->kind == K_STREAM && st->slot == s && !st->closing &&
                st->closes == 0;
    int rc = 0;
    switch (c % 8) {
    case 0:
    case 1: { /* write */
        tern_buf bufs[3];
        unsigned nb = u8(in) % 4; /* 0 is bad */
        for (unsigned i = 0; i < nb; i++)
            bufs[i] = (tern_buf){payload, (size_t)u16(in) % sizeof(payload)};
        struct rec *w = rec_new(K_WRITE, s);
        if (w == NULL)
            return;
        w->stream = st;
        rc = tern_stream_write(loop, id, bufs, nb, op_done, w);
        ENSURE(rc <= 1, "tern_stream_write returned %d", rc);
        if (rc < 0)
            sane_rc(rc, "tern_stream_write");
        if (nb == 0)
            ENSURE(rc == -EINVAL, "a write of 0 buffers: %s", tern_err_name(rc));
        w->accepted = rc == 0 || rc == 1;
        ENSURE(live || !w->accepted, "a write accepted on an id that is no open stream here");
        break;
    }
    case 2:
        rc = tern_stream_read_start(loop, id, stream_read, st);
        sane_rc(rc, "tern_stream_read_start");
        break;
    case 3:
        rc = tern_stream_read_stop(loop, id);
        sane_rc(rc, "tern_stream_read_stop");
        break;
    case 4: {
        struct rec *sh = rec_new(K_SHUT, s);
        if (sh == NULL)
            return;
        sh->stream = st;
        rc = tern_stream_shutdown(loop, id, op_done, sh);
        sane_rc(rc, "tern_stream_shutdown");
        sh->accepted = rc == 0;
        ENSURE(live || !sh->accepted, "a shutdown accepted on an id that is no open stream here");
        break;
    }
    case 5:
        rc = tern_stream_close(loop, id);
        sane_rc(rc, "tern_stream_close");
        if (rc == 0) {
            ENSURE(live, "tern_stream_close succeeded on an id that is no open stream here");
            st->closing = true;
        }
        break;
    case 6:
        rc = tern_stream_set_high_water(loop, id, u8(in) % 64, drained, st);
        sane_rc(rc, "tern_stream_set_high_water");
        break;
    default: {
        size_t q;
        rc = tern_stream_write_queue_size(loop, id, &q);
        sane_rc(rc, "tern_stream_write_queue_size");
        int fd = tern_stream_fd(loop, id);
        ENSURE(fd >= 0 || fd == -ENOENT || fd == -ENOTCONN, "tern_stream_fd: %d", fd);
        break;
    }
    }
    if (!live && rc != 0 && id != 0 && (c % 8) != 6)
        ENSURE(rc == -ENOENT || rc == -EINVAL || rc == -ENOTCONN || rc == -EPIPE,
               "a stream call on a dead or stranger id: %s", tern_err_name(rc));
    if (!live && (c % 8) != 0 && (c % 8) != 1 && (c % 8) != 4 && rc == 0 && (c % 8) != 7)
        FAIL("a stream call succeeded on an id that is no open stream here (op %u)", c % 8);
}

/* ------------------------------------------------------------------ */
/* File requests on a scratch directory                                */
/* ------------------------------------------------------------------ */

static char scratch[64];

static const char *scratch_path(unsigned which)
{
    static char paths[6][96];
    static const char *const names[] = {"a", "b", "d", "d/x", "missing/x", ""};
    which %= 6;
    snprintf(paths[which], sizeof paths[which], "%s/%s", scratch, names[which]);
    return paths[which];
}

/* The regular file an external wait watches: no file request or rename
 * of the inputs names it, so it is always a file. */
static const char *wait_path(void)
{
    static char path[96];
    snprintf(path, sizeof path, "%s/w", scratch);
    return path;
}

static void fs_cb(tern_loop *loop, tern_id id, int status, tern_fs_result *res, void *arg)
{
    struct rec *r = arg;
    arrived(r, loop, "file request");
    ENSURE(id == r->id, "file request: wrong id");
    ENSURE(r->calls == 0, "file request: a second callback");
    ENSURE(res != NULL, "file request: NULL result");
    sane_rc(status, "file request status");
    check_stop_status(r, status, "file request");
    if (status != 0)
        ENSURE(res->data == NULL && res->listing == NULL,
               "file request: memory returned with status %s", tern_err_name(status));
    if (status == 0 && r->fs_op == 1)
        ENSURE(res->data != NULL && ((char *)res->data)[res->value] == '\0',
               "read_file: no data or no NUL after it");
    if (status == 0 && r->fs_op == 5)
        ENSURE(res->listing != NULL && res->listing->count == (size_t)res->value,
               "list: count disagrees");
    if (status == 0 && r->fs_op == 2) {
        ENSURE(res->value >= 0, "open: no descriptor");
        close((int)res->value); /* ours now */
    }
    tern_fs_free(res->data);
    tern_fs_free(res->listing);
    r->calls++;
    owner_release(r, false);
}

static void step_fs(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in), p = u8(in);
    struct rec *r = rec_new(K_FS, s);
    if (r == NULL)
        return;
    static const char payload_bytes[256] = "tern file payload";
    tern_fs_options o;
    tern_fs_options_init(&o);
    if (c & 0x40)
        o.step_bytes = 16; /* many steps */
    if (p & 0x80)
        o.max_bytes = 8; /* some reads refused with -EFBIG */
    r->fs_op = c % 8;
    int rc = 0;
    int want = 1; /* 1: any outcome a good call may have */
    switch (r->fs_op) {
    case 0:
        rc = tern_fs_write_file(loop, scratch_path(p), payload_bytes, p % 200, &o, fs_cb, r,
                                &r->id);
        if (p % 6 == 5)
            want = -EISDIR; /* the path ends in '/' */
        break;
    case 1:
        rc = tern_fs_read_file(loop, (p & 7) == 7 ? scratch : scratch_path(p), &o, fs_cb, r,
                               &r->id);
        break;
    case 2:
        rc = tern_fs_open(loop, scratch_path(p), (p & 8) ? O_RDWR | O_CREAT : O_RDONLY, 0600, &o,
                          fs_cb, r, &r->id);
        break;
    case 3:
        rc = (p & 8) ? tern_fs_lstat(loop, scratch_path(p), &o, fs_cb, r, &r->id)
                     : tern_fs_stat(loop, scratch_path(p), &o, fs_cb, r, &r->id);
        break;
    case 4:
        rc = (p & 8) ? tern_fs_rmdir(loop, scratch_path(2), &o, fs_cb, r, &r->id)
                     : tern_fs_mkdir(loop, scratch_path(2), 0700, &o, fs_cb, r, &r->id);
        break;
    case 5:
        rc = tern_fs_list(loop, (p & 1) ? scratch_path(2) : scratch, &o, fs_cb, r, &r->id);
        break;
    case 6:
        rc = (p & 8) ? tern_fs_unlink(loop, scratch_path(p), &o, fs_cb, r, &r->id)
                     : tern_fs_rename(loop, scratch_path(p), scratch_path(p >> 4), &o, fs_cb, r,
                                      &r->id);
        break;
    default:
        /* Bad values: the documented errno, nothing started. */
        switch (p % 4) {
        case 0:
            rc = tern_fs_read_file(loop, NULL, &o, fs_cb, r, &r->id);
            want = -EINVAL;
            break;
        case 1:
            rc = tern_fs_read(loop, -1, r->buf, sizeof r->buf, 0, &o, fs_cb, r, &r->id);
            want = -EBADF;
            break;
        case 2:
            rc = tern_fs_write(loop, 0, NULL, 1, 0, &o, fs_cb, r, &r->id);
            want = -EINVAL;
            break;
        default:
            rc = tern_fs_stat(loop, scratch_path(p), &o, NULL, r, &r->id);
            want = -EINVAL;
            break;
        }
    }
    sane_rc(rc, "file request");
    if (want != 1)
        ENSURE(rc == want, "file request with a bad value: %s, want %s", tern_err_name(rc),
               tern_err_name(want));
    else
        /* -EINVAL: the loop asks for a pool other than the running one. */
        ENSURE(rc == 0 || rc == -EAGAIN || rc == -EINVAL || (fault_armed && injected(rc)),
               "file request: %s", tern_err_name(rc));
    r->accepted = rc == 0;
    if (r->accepted && (c & 0x80)) {
        cancel_coming(s, r->id);
        ENSURE(tern_cancel(loop, r->id) >= 0, "cancel of a file request just accepted");
    }
}

/*
 * Remove what dir holds (one level of subdirectories is all the inputs
 * can make: "d/x", or "d" renamed to "a" or "b"), checking that no
 * request left a temporary behind.
 */
static void scratch_empty(const char *dir, bool top)
{
    DIR *d = opendir(dir);
    ENSURE(d != NULL, "the scratch directory went away");
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        ENSURE(strstr(e->d_name, ".tern-") == NULL, "a temporary was left: %s", e->d_name);
        char path[384];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) != 0 && top) { /* a directory */
            scratch_empty(path, false);
            rmdir(path);
        }
    }
    closedir(d);
}

/*
 * Nothing a finished input did may remain: no temporary, no file and no
 * directory, so the next input starts from an empty scratch directory
 * whatever renames this one made (a failure replays from its input alone).
 */
static void scratch_clean(void)
{
    scratch_empty(scratch, true);
}

/* ------------------------------------------------------------------ */
/* Admission: owners, and requests with an owner and a timeout          */
/* ------------------------------------------------------------------ */

/* An owner record of slot s (live or closed), or NULL. */
static struct rec *pick_owner(struct input *in, int s)
{
    unsigned start = u8(in);
    if (nrecs == 0)
        return NULL;
    for (unsigned k = 0; k < nrecs; k++) {
        struct rec *r = &recs[(start + k) % nrecs];
        if (r->kind == K_OWNER && r->accepted && r->slot == s)
            return r;
    }
    return NULL;
}

static void step_owner_open(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in);
    unsigned cap = c % 8 == 0 ? 0 : c % 8 == 1 ? (1u << 31) + 1 : 1 + (c >> 3) % 4;
    struct rec *o = rec_new(K_OWNER, s);
    if (o == NULL)
        return;
    tern_loop_stats before;
    tern_loop_stats_get(loop, &before);
    int rc = tern_owner_open(loop, cap, &o->id);
    sane_rc(rc, "tern_owner_open");
    if (cap == 0 || cap > (1u << 31))
        ENSURE(rc == -EINVAL, "tern_owner_open(cap %u): %s", cap, tern_err_name(rc));
    else if (before.live_operations >= slots[s].max_operations && !fault_armed)
        ENSURE(rc == -EAGAIN, "tern_owner_open at max_operations: %s", tern_err_name(rc));
    else
        ENSURE(rc == 0 || (fault_armed && injected(rc)), "tern_owner_open: %s",
               tern_err_name(rc));
    o->accepted = rc == 0;
    o->cap = cap;
    adm_seen.owners += rc == 0;
    if (rc == 0)
        owner_check(o, "a new owner");
}

/* Close an owner: tern_owner_close, or tern_cancel on its id (now or queued). */
static void step_owner_close(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in);
    struct rec *o = (c & 8) ? NULL : pick_owner(in, s);
    tern_id id = o != NULL ? o->id : pick_id(in, K_OWNER, s);
    struct rec *live = owner_live(s, id);
    cancel_coming(s, id);
    int rc;
    switch (c % 4) {
    case 0:
    case 1:
        rc = tern_owner_close(loop, id);
        sane_rc(rc, "tern_owner_close");
        if (id == 0)
            ENSURE(rc == -EINVAL, "tern_owner_close(0): %s", tern_err_name(rc));
        else if (live != NULL)
            ENSURE(rc == 0, "tern_owner_close of a live owner: %s", tern_err_name(rc));
        else
            ENSURE(rc == -ENOENT, "tern_owner_close of no live owner: %s", tern_err_name(rc));
        break;
    case 2:
        if (live == NULL)
            return; /* a cancel of any other id is step_cancel's */
        rc = tern__test_cancel_now(loop, id);
        ENSURE(rc == TERN_CANCEL_STOPPED, "tern_cancel of a live owner: %d", rc);
        break;
    default:
        if (live == NULL)
            return;
        rc = tern_cancel(loop, id);
        ENSURE(rc == TERN_CANCEL_REQUESTED, "a queued tern_cancel of an owner: %s",
               tern_err_name(rc));
        if (rc != TERN_CANCEL_REQUESTED)
            return;
        tern_loop_run_once(loop, 0); /* its step 1 closes the owner */
        rc = 0;
        break;
    }
    if (rc < 0)
        return;
    cancel_done(s, id);
    adm_seen.closes++;
    tern_owner_stats st;
    ENSURE(tern_owner_stats_get(loop, id, &st) == -ENOENT, "a closed owner's id is not stale");
    ENSURE(tern_owner_close(loop, id) == -ENOENT, "an owner closed twice");
}

static void step_owner_stats(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in);
    struct rec *o = (c & 1) ? NULL : pick_owner(in, s);
    tern_id id = o != NULL ? o->id : pick_id(in, K_OWNER, s);
    struct rec *live = owner_live(s, id);
    tern_owner_stats st;
    int rc = tern_owner_stats_get(loop, id, &st);
    if (id == 0)
        ENSURE(rc == -EINVAL, "tern_owner_stats_get(0): %s", tern_err_name(rc));
    else if (live == NULL)
        ENSURE(rc == -ENOENT, "tern_owner_stats_get of no live owner: %s", tern_err_name(rc));
    else
        owner_check(live, "tern_owner_stats_get");
}

/*
 * The options of a request: an owner (none, one of this slot's owners,
 * live or closed, an id from anywhere) and a timeout (none, one short
 * enough to pass during the input, the largest, one too large).
 * *bad: the options alone make the call -EINVAL.
 */
static struct rec *pick_options(struct input *in, int s, tern_id *owner, uint64_t *timeout,
                                bool *bad)
{
    unsigned c = u8(in);
    struct rec *o = NULL;
    *owner = 0;
    switch (c & 3) {
    case 0:
        break;
    case 1:
    case 2:
        if ((o = pick_owner(in, s)) != NULL)
            *owner = o->id;
        break;
    default:
        *owner = pick_id(in, K_OWNER, s);
    }
    o = owner_live(s, *owner); /* whatever the id, the loop sees this */
    switch ((c >> 2) & 7) {
    case 0:
    case 1:
    case 2:
        *timeout = 0;
        break;
    case 3:
        *timeout = 1;
        break;
    case 4:
        *timeout = UINT64_C(1) << 62;
        break;
    case 5:
        *timeout = (UINT64_C(1) << 62) + 1 + u8(in);
        break;
    default:
        *timeout = (1 + (uint64_t)u8(in)) * 20 * US; /* 20 us .. 5 ms */
    }
    *bad = *timeout > (UINT64_C(1) << 62) || (*owner != 0 && o == NULL);
    return o;
}

static void step_submit_with(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in);
    tern_occupancy occ = (c & 1) ? TERN_LONG : TERN_BOUNDED;
    tern_job_options jo;
    tern_job_options_init(&jo);
    bool bad;
    struct rec *o = pick_options(in, s, &jo.owner, &jo.timeout_ns, &bad);
    bool null_opts = (c & 0x80) != 0;
    if (null_opts)
        o = NULL, bad = false, jo.timeout_ns = 0;
    struct rec *r = rec_new(K_JOB, s);
    if (r == NULL)
        return;
    r->work = (c >> 1) & 1;
    r->owner = o;
    r->timeout = jo.timeout_ns;
    tern_loop_stats before;
    tern_loop_stats_get(loop, &before);
    tern_refusal want = predict_refusal(s, o, &before);
    int rc = tern_submit_with(loop, occ, job_work, job_done, r, null_opts ? NULL : &jo, &r->id);
    sane_rc(rc, "tern_submit_with");
    if (bad) {
        /* A request allocates before admission checks the options. */
        ENSURE(rc == -EINVAL || (fault_armed && injected(rc)),
               "tern_submit_with with a bad owner or timeout: %s", tern_err_name(rc));
        return;
    }
    ENSURE(rc == 0 || rc == -EAGAIN || rc == -EINVAL || (fault_armed && injected(rc)),
           "tern_submit_with: %s", tern_err_name(rc));
    r->accepted = rc == 0;
    adm_seen.timed_accepted += rc == 0 && r->timeout != 0;
    if (rc == 0 || rc == -EAGAIN)
        admission_after(s, rc, want, o, occ == TERN_LONG, &before, "tern_submit_with");
}

static void step_resolve_with(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    static const char *const hosts[] = {"localhost", "127.0.0.1", "::1", "no-such-host.invalid"};
    unsigned c = u8(in);
    tern_job_options jo;
    tern_job_options_init(&jo);
    bool bad;
    struct rec *o = pick_options(in, s, &jo.owner, &jo.timeout_ns, &bad);
    struct rec *r = rec_new(K_LOOKUP, s);
    if (r == NULL)
        return;
    r->owner = o;
    r->timeout = jo.timeout_ns;
    tern_loop_stats before;
    tern_loop_stats_get(loop, &before);
    tern_refusal want = predict_refusal(s, o, &before);
    int rc = tern_resolve_with(loop, hosts[c % 4], "80", NULL, lookup_cb, r, &jo, &r->id);
    sane_rc(rc, "tern_resolve_with");
    if (bad) {
        /* A request allocates before admission checks the options. */
        ENSURE(rc == -EINVAL || (fault_armed && injected(rc)),
               "tern_resolve_with with a bad owner or timeout: %s", tern_err_name(rc));
        return;
    }
    ENSURE(rc == 0 || rc == -EAGAIN || rc == -EINVAL || (fault_armed && injected(rc)),
           "tern_resolve_with: %s", tern_err_name(rc));
    r->accepted = rc == 0;
    adm_seen.timed_accepted += rc == 0 && r->timeout != 0;
    if (rc == 0 || rc == -EAGAIN)
        admission_after(s, rc, want, o, false, &before, "tern_resolve_with");
}

/* A file request with an owner and a timeout (tern_fs_options). */
static void step_fs_with(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in);
    tern_fs_options fo;
    tern_fs_options_init(&fo);
    bool bad;
    struct rec *o = pick_options(in, s, &fo.owner, &fo.timeout_ns, &bad);
    if (c & 0x40)
        fo.step_bytes = 16; /* many steps, so a deadline can meet a boundary */
    struct rec *r = rec_new(K_FS, s);
    if (r == NULL)
        return;
    static const char payload_bytes[256] = "tern file payload, owned";
    r->owner = o;
    r->timeout = fo.timeout_ns;
    tern_loop_stats before;
    tern_loop_stats_get(loop, &before);
    tern_refusal want = predict_refusal(s, o, &before);
    int rc;
    switch (c % 4) {
    case 0:
        r->fs_op = 0;
        rc = tern_fs_write_file(loop, scratch_path(0), payload_bytes, 100, &fo, fs_cb, r, &r->id);
        break;
    case 1:
        r->fs_op = 1;
        rc = tern_fs_read_file(loop, scratch_path(0), &fo, fs_cb, r, &r->id);
        break;
    case 2:
        r->fs_op = 3;
        rc = tern_fs_stat(loop, scratch, &fo, fs_cb, r, &r->id);
        break;
    default:
        r->fs_op = 5;
        rc = tern_fs_list(loop, scratch, &fo, fs_cb, r, &r->id);
        break;
    }
    sane_rc(rc, "file request with options");
    if (bad) {
        /* A request allocates before admission checks the options. */
        ENSURE(rc == -EINVAL || (fault_armed && injected(rc)),
               "a file request with a bad owner or timeout: %s", tern_err_name(rc));
        return;
    }
    ENSURE(rc == 0 || rc == -EAGAIN || rc == -EINVAL || (fault_armed && injected(rc)),
           "file request with options: %s", tern_err_name(rc));
    r->accepted = rc == 0;
    adm_seen.timed_accepted += rc == 0 && r->timeout != 0;
    if (rc == 0 || rc == -EAGAIN)
        admission_after(s, rc, want, o, false, &before, "file request with options");
}

static void step_fault(struct input *in)
{
    unsigned c = u8(in);
    unsigned mask = 1 + c % 7;
    unsigned nth = 1 + (c >> 3);
    tern__fault_arm(mask, nth);
    fault_armed = true;
    carried.fault_mask = mask;
    carried.fault_nth = nth;
}

static void step_pool(struct input *in)
{
    unsigned c = u8(in);
    if (c & 1) {
        tern_pool_config cfg;
        tern_pool_config_init(&cfg);
        cfg.threads = (c >> 1) % 5; /* 0 is bad */
        cfg.queue_capacity = 1 + (c >> 4);
        cfg.long_threads_max = (c >> 5);
        int rc = tern_pool_start(&cfg);
        sane_rc(rc, "tern_pool_start");
        if (cfg.threads == 0)
            ENSURE(rc == -EINVAL, "tern_pool_start with 0 threads: %s", tern_err_name(rc));
        return;
    }
    int mode = (c & 2) ? TERN_POOL_CANCEL : (c & 4) ? 9 : TERN_POOL_DRAIN;
    if (mode == TERN_POOL_CANCEL)
        cancel_everything_coming(-1);
    int rc = tern_pool_shutdown(mode, 10000 * MS);
    if (mode == 9)
        ENSURE(rc == -EINVAL, "tern_pool_shutdown(9): %s", tern_err_name(rc));
    else
        ENSURE(rc == 0, "tern_pool_shutdown: %s (jobs here end within 2 ms)", tern_err_name(rc));
}

/* ------------------------------------------------------------------ */
/* Extended steps: UDP, Unix-domain sockets, pipes, loop hooks,        */
/* signal watchers, child processes, file watches and external waits   */
/* ------------------------------------------------------------------ */

/*
 * Descriptors an input opened itself and must close once every loop is
 * freed (pipe ends a stream refused, a regular file a wait may watch).
 */
static int extra_fds[16];
static unsigned nextra_fds;
static int event_fd = -1; /* an eventfd "another library" signals, for tern_wait_fd */

static void extra_fd_keep(int fd)
{
    if (nextra_fds < sizeof extra_fds / sizeof extra_fds[0])
        extra_fds[nextra_fds++] = fd;
    else
        close(fd);
}

/* At most this many children per input, each ending within 10 ms. */
#define MAX_CHILDREN 4
static int children[MAX_CHILDREN];
static unsigned nchildren;

/*
 * A start call of the extended table: its return is 0 or a negative errno;
 * on any error the loop's books are unchanged (nothing live was added,
 * nothing is owed), and -EAGAIN is the max_operations limit (or an
 * injected failure, or `more`: another cause the header documents).
 */
static void start_refusal_check(int s, int rc, const tern_loop_stats *before, bool more,
                                const char *what)
{
    sane_rc(rc, what);
    if (rc == 0)
        return;
    tern_loop_stats after;
    tern_loop_stats_get(slots[s].loop, &after);
    ENSURE(after.live_operations == before->live_operations &&
               after.undelivered == before->undelivered,
           "%s: a refusal (%s) left something (live %u -> %u, undelivered %u -> %u)", what,
           tern_err_name(rc), before->live_operations, after.live_operations,
           before->undelivered, after.undelivered);
    if (rc == -EAGAIN && !fault_armed && !more)
        ENSURE(before->live_operations >= slots[s].max_operations,
               "%s: -EAGAIN below max_operations (%u of %u)", what, before->live_operations,
               slots[s].max_operations);
}

/* A record of kind k on slot s, accepted (live or ended), or NULL. */
static struct rec *pick_kind(struct input *in, enum kind k, int s)
{
    unsigned start = u8(in);
    if (nrecs == 0)
        return NULL;
    for (unsigned i = 0; i < nrecs; i++) {
        struct rec *r = &recs[(start + i) % nrecs];
        if (r->kind == k && r->accepted && r->slot == s)
            return r;
    }
    return NULL;
}

/* An id for a call on kind k: a known record's (live or ended), or any id. */
static tern_id pick_kind_id(struct input *in, enum kind k, int s, struct rec **rp)
{
    unsigned c = u8(in);
    struct rec *r = (c & 1) ? NULL : pick_kind(in, k, s);
    tern_id id = r != NULL ? r->id : pick_id(in, k, s);
    if (r == NULL) {
        r = rec_find(id);
        if (r != NULL && (r->kind != k || r->slot != s))
            r = NULL;
    }
    *rp = r;
    return id;
}

/* An id that names nothing of this kind here gets -ENOENT, or -EINVAL for 0. */
static void stale_rc(tern_id id, int rc, const char *what)
{
    if (id == 0)
        ENSURE(rc == -EINVAL || rc == -ENOENT, "%s(0): %s", what, tern_err_name(rc));
    else
        ENSURE(rc == -ENOENT || rc == -EINVAL, "%s on a stale or stranger id: %s", what,
               tern_err_name(rc));
}

/* --- UDP ---------------------------------------------------------- */

static void udp_closed(tern_loop *loop, tern_id id, void *arg)
{
    struct rec *r = arg;
    arrived(r, loop, "UDP close");
    ENSURE(id == r->id, "UDP close: wrong id");
    ENSURE(r->closes == 0, "UDP close: a second close callback");
    /* Every send queued on it has completed (-ECANCELED) before this. */
    for (unsigned i = 0; i < nrecs; i++)
        if (recs[i].kind == K_SEND && recs[i].accepted && recs[i].stream == r)
            ENSURE(recs[i].calls == 1, "UDP close: before a queued send's completion");
    r->closes++;
    r->closing = true;
}

static void udp_sent(tern_loop *loop, tern_id id, int status, void *arg)
{
    struct rec *w = arg;
    arrived(w, loop, "UDP send");
    ENSURE(id == w->stream->id, "UDP send: wrong socket id");
    ENSURE(w->calls == 0, "UDP send: a second completion");
    ENSURE(w->stream->closes == 0, "UDP send: after the close callback");
    sane_rc(status, "UDP send status");
    /* In order: every earlier send of this socket has completed. */
    for (struct rec *e = recs; e < w; e++)
        if (e->kind == K_SEND && e->accepted && e->stream == w->stream)
            ENSURE(e->calls == 1, "UDP send: completed before an earlier send");
    w->calls++;
}

static void udp_recv(tern_loop *loop, tern_id id, int status, const void *data, size_t len,
                     const struct sockaddr *from, unsigned flags, void *arg)
{
    struct rec *r = arg;
    arrived(r, loop, "UDP receive");
    ENSURE(id == r->id, "UDP receive: wrong id");
    ENSURE(!r->closing && r->closes == 0, "UDP receive: after the socket was closed");
    if (status == 0)
        ENSURE(from != NULL && (len == 0 || data != NULL) && (flags & ~1u) == 0,
               "UDP receive: from %p data %p len %zu flags %u", (const void *)from, data, len,
               flags);
    else
        ENSURE(status < 0 && data == NULL && from == NULL, "UDP receive: status %d with data",
               status);
}

static void udp_drained(tern_loop *loop, tern_id id, void *arg)
{
    struct rec *r = arg;
    arrived(r, loop, "UDP drain");
    ENSURE(id == r->id && r->closes == 0, "UDP drain: wrong socket or after close");
}

static void step_udp_bind(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in);
    static const char *const hosts[] = {"127.0.0.1", "::1", NULL, "localhost"};
    static const unsigned flags[] = {0, TERN_UDP_REUSEADDR, TERN_UDP_REUSEPORT, 0x100};
    const char *host = hosts[c & 3];
    unsigned port = (c & 4) ? 70000 : 0;
    unsigned fl = flags[(c >> 3) & 3];
    struct rec *r = rec_new(K_UDP, s);
    if (r == NULL)
        return;
    tern_loop_stats before;
    tern_loop_stats_get(loop, &before);
    int rc = tern_udp_bind(loop, host, port, fl, &r->id);
    start_refusal_check(s, rc, &before, false, "tern_udp_bind");
    if (port > 65535 || fl == 0x100)
        ENSURE(rc == -EINVAL, "tern_udp_bind with a bad port or flags: %s", tern_err_name(rc));
    else if ((c & 3) == 3)
        /* The host is parsed before admission: even at max_operations a
         * host that is no numeric address is -EINVAL, never a retryable
         * -EAGAIN. */
        ENSURE(rc == -EINVAL, "tern_udp_bind of a host that is no address: %s",
               tern_err_name(rc));
    if (rc != 0)
        return;
    r->accepted = true;
    r->family = (c & 3) == 1 ? AF_INET6 : AF_INET;
    rc = tern_udp_on_close(loop, r->id, udp_closed, r);
    ENSURE(rc == 0, "tern_udp_on_close on a fresh socket: %s", tern_err_name(rc));
    ENSURE(tern_udp_port(loop, r->id, &r->port) == 0 && r->port != 0, "tern_udp_port");
    if (c & 0x80) {
        rc = tern_udp_recv_start(loop, r->id, 0, udp_recv, r);
        ENSURE(rc == 0 || (fault_armed && injected(rc)), "tern_udp_recv_start: %s",
               tern_err_name(rc));
    }
}

/* A destination: a loopback address of family f with the port of a socket. */
static const struct sockaddr *udp_addr(int f, unsigned port, struct sockaddr_storage *ss)
{
    ENSURE(tern_sockaddr_parse(f == AF_INET6 ? "::1" : "127.0.0.1", port, ss) == 0,
           "tern_sockaddr_parse");
    return (const struct sockaddr *)ss;
}

static void step_udp_call(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in), d = u8(in);
    struct rec *r;
    tern_id id = pick_kind_id(in, K_UDP, s, &r);
    bool live = r != NULL && !r->closing && r->closes == 0;
    int fam = r != NULL ? r->family : AF_INET;
    struct rec *peer = pick_kind(in, K_UDP, (int)(d & 1));
    unsigned peer_port = peer != NULL ? peer->port : 9;
    int peer_fam = peer != NULL ? peer->family : AF_INET;
    struct sockaddr_storage ss;
    int rc;
    bool ok = true; /* the arguments are good: only the id decides */
    switch (c % 10) {
    case 0:
    case 1: { /* send */
        tern_buf bufs[65];
        unsigned nb = (d >> 1) % 4 == 3 ? 65 : (d >> 1) % 4; /* 0 and 65 are bad */
        for (unsigned i = 0; i < nb; i++)
            bufs[i] = (tern_buf){payload, (d & 0x80) ? 4000 : (size_t)(d >> 3) * (i + 1)};
        const struct sockaddr *to = NULL;
        switch ((c >> 4) & 3) {
        case 0: to = udp_addr(fam, r != NULL ? r->port : 9, &ss); break;
        case 1: to = udp_addr(peer_fam, peer_port, &ss); break;
        case 2: to = NULL; break;
        default: to = udp_addr(fam == AF_INET ? AF_INET6 : AF_INET, 9, &ss); break;
        }
        bool good_to = to == NULL ? (live && r->connected) : to->sa_family == fam;
        ok = nb >= 1 && nb <= 64 && good_to && (to == NULL || !live || !r->connected);
        struct rec *w = rec_new(K_SEND, s);
        if (w == NULL)
            return;
        w->stream = r;
        bool null_cb = (c & 0x80) != 0;
        rc = tern_udp_send(loop, id, bufs, nb, to, null_cb ? NULL : udp_sent, w);
        ENSURE(rc <= 1, "tern_udp_send returned %d", rc);
        if (rc < 0)
            sane_rc(rc, "tern_udp_send");
        if (live && (nb == 0 || nb > 64))
            ENSURE(rc == -EINVAL, "tern_udp_send of %u buffers: %s", nb, tern_err_name(rc));
        if (live && to != NULL && r->connected && nb >= 1 && nb <= 64 && to->sa_family == fam)
            ENSURE(rc == -EISCONN, "tern_udp_send with an address on a connected socket: %s",
                   tern_err_name(rc));
        if (live && to == NULL && !r->connected && nb >= 1 && nb <= 64)
            ENSURE(rc == -EDESTADDRREQ, "tern_udp_send without an address: %s",
                   tern_err_name(rc));
        if (live && ok)
            ENSURE(rc >= 0 || (fault_armed && injected(rc)), "tern_udp_send: %s",
                   tern_err_name(rc));
        w->accepted = rc >= 0 && !null_cb;
        ENSURE(live || rc < 0, "a send accepted on an id that is no open UDP socket here");
        return;
    }
    case 2: {
        static const size_t lens[] = {0, 1, 64, 70000};
        size_t len = lens[d & 3];
        bool null_cb = (d & 4) != 0;
        ok = len <= 65536 && !null_cb;
        rc = tern_udp_recv_start(loop, id, len, null_cb ? NULL : udp_recv, r);
        sane_rc(rc, "tern_udp_recv_start");
        if (live && !ok)
            ENSURE(rc == -EINVAL, "tern_udp_recv_start with a bad argument: %s",
                   tern_err_name(rc));
        break;
    }
    case 3:
        rc = tern_udp_recv_stop(loop, id);
        break;
    case 4:
        rc = tern_udp_close(loop, id);
        if (rc == 0) {
            ENSURE(live, "tern_udp_close succeeded on an id that is no open socket here");
            r->closing = true;
            ENSURE(tern_udp_close(loop, id) == -ENOENT, "a second tern_udp_close");
        }
        break;
    case 5: {
        const struct sockaddr *p = NULL;
        if (d & 2)
            p = udp_addr((d & 4) ? (fam == AF_INET ? AF_INET6 : AF_INET) : fam, peer_port, &ss);
        rc = tern_udp_connect(loop, id, p);
        sane_rc(rc, "tern_udp_connect");
        if (live && p == NULL)
            ENSURE(rc == (r->connected ? 0 : -ENOTCONN), "tern_udp_connect(NULL): %s",
                   tern_err_name(rc));
        else if (live && r->connected)
            ENSURE(rc == -EALREADY || rc == -EINVAL, "connecting a connected UDP socket: %s",
                   tern_err_name(rc));
        else if (live && p->sa_family != fam)
            ENSURE(rc == -EINVAL, "tern_udp_connect to another family: %s", tern_err_name(rc));
        if (live && rc == 0)
            r->connected = p != NULL;
        ok = false;
        break;
    }
    case 6: {
        static const int values[] = {0, 1, 64, 300, -1};
        int opt = (int)(d % 5); /* 4 is unknown */
        int v = values[(d >> 3) % 5];
        rc = tern_udp_set(loop, id, (enum tern_udp_option)opt, v);
        sane_rc(rc, "tern_udp_set");
        if (live && (opt == 4 || v < 0 || v > 255))
            ENSURE(rc == -EINVAL, "tern_udp_set(%d, %d): %s", opt, v, tern_err_name(rc));
        ok = false;
        break;
    }
    case 7: {
        static const char *const groups[] = {"224.0.0.251", "127.0.0.1", "ff02::fb", "nonsense"};
        const char *g = groups[d & 3];
        rc = tern_udp_membership(loop, id, g, NULL, (d & 4) != 0);
        sane_rc(rc, "tern_udp_membership");
        if (live && ((d & 3) == 1 || (d & 3) == 3 ||
                     ((d & 3) == 0 && fam == AF_INET6) || ((d & 3) == 2 && fam == AF_INET)))
            ENSURE(rc == -EINVAL, "tern_udp_membership(%s) on a family-%d socket: %s", g, fam,
                   tern_err_name(rc));
        ok = false;
        break;
    }
    case 8: {
        size_t bytes = (d & 3) == 0 ? 0 : (d & 3) == 1 ? 1 : 4096;
        rc = tern_udp_set_high_water(loop, id, bytes, udp_drained, r);
        sane_rc(rc, "tern_udp_set_high_water");
        if (live && bytes == 0)
            ENSURE(rc == -EINVAL, "tern_udp_set_high_water(0): %s", tern_err_name(rc));
        ok = bytes != 0;
        break;
    }
    default: {
        size_t q, n;
        rc = tern_udp_send_queue_size(loop, id, &q, (d & 1) ? NULL : &n);
        int fd = tern_udp_fd(loop, id);
        ENSURE(live ? fd >= 0 : fd == -ENOENT || fd == -EINVAL, "tern_udp_fd: %d", fd);
        break;
    }
    }
    sane_rc(rc, "a UDP call");
    if (!live) {
        ENSURE(rc != 0, "a UDP call (op %u) succeeded on an id that is no open socket here",
               c % 10);
        stale_rc(id, rc, "a UDP call");
    } else if (ok) {
        ENSURE(rc == 0 || (fault_armed && injected(rc)), "a UDP call (op %u) on a live socket: %s",
               c % 10, tern_err_name(rc));
    }
}

/* --- Unix-domain sockets and pipes -------------------------------- */

static const char *unix_path(unsigned which)
{
    static char paths[6][256];
    which %= 6;
    switch (which) {
    case 0:
    case 1:
        snprintf(paths[which], sizeof paths[which], "%s/u%u", scratch, which);
        break;
    case 2:
        snprintf(paths[which], sizeof paths[which], "@tern-fuzz-%ld", (long)getpid());
        break;
    case 3: /* longer than sun_path */
        snprintf(paths[which], sizeof paths[which], "%s/%0120d", scratch, 0);
        break;
    case 4:
        snprintf(paths[which], sizeof paths[which], "%s/missing/u", scratch);
        break;
    default:
        paths[which][0] = '\0';
    }
    return paths[which];
}

static void step_unix(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in);
    unsigned which = (c >> 1) % 6;
    const char *path = (c & 0x40) ? NULL : unix_path(which);
    struct rec *r = rec_new(K_STREAM, s);
    if (r == NULL)
        return;
    tern_loop_stats before;
    tern_loop_stats_get(loop, &before);
    tern_id id;
    int rc;
    if (c & 1) {
        int backlog = (c & 0x80) ? -5 : TERN_TCP_BACKLOG_DEFAULT;
        rc = tern_unix_listen(loop, path, backlog, accepted_cb, r, &id);
        start_refusal_check(s, rc, &before, false, "tern_unix_listen");
        if (path == NULL || which == 5 || backlog == -5)
            ENSURE(rc == -EINVAL, "tern_unix_listen with a bad argument: %s", tern_err_name(rc));
        else if (which == 3)
            ENSURE(rc == -ENAMETOOLONG, "tern_unix_listen on a long path: %s", tern_err_name(rc));
        else if (which == 4)
            /* The socket is made before its path is looked at, so under an
             * armed descriptor fault its own failure may come first. */
            ENSURE(rc == -ENOENT || (fault_armed && injected(rc)),
                   "tern_unix_listen in a missing directory: %s", tern_err_name(rc));
        if (rc != 0) {
            if (path != NULL && (which == 3 || which == 4)) {
                struct stat st;
                ENSURE(lstat(path, &st) != 0, "a refused listen left %s", path);
            }
            return;
        }
        stream_init(r, loop, id, true);
        return;
    }
    rc = tern_unix_connect(loop, path, stream_connected, r, &id);
    start_refusal_check(s, rc, &before, false, "tern_unix_connect");
    if (path == NULL || which == 5)
        ENSURE(rc == -EINVAL, "tern_unix_connect with a bad argument: %s", tern_err_name(rc));
    else if (which == 3)
        ENSURE(rc == -ENAMETOOLONG, "tern_unix_connect to a long path: %s", tern_err_name(rc));
    if (rc != 0)
        return;
    r->id = id;
    r->accepted = true;
    r->connecting = true;
    rc = tern_stream_on_close(loop, id, stream_closed, r);
    ENSURE(rc == 0, "tern_stream_on_close on a fresh Unix connect: %s", tern_err_name(rc));
}

/* Both ends of a pipe as streams (or a regular file, refused). */
static void step_pipe(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in);
    tern_loop_stats before;
    tern_loop_stats_get(loop, &before);
    if (c & 0x80) {
        int fd = open(scratch_path(0), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        ENSURE(fd >= 0, "open a regular file");
        tern_id id;
        int rc = tern_stream_open(loop, fd, &id);
        start_refusal_check(s, rc, &before, false, "tern_stream_open(a regular file)");
        ENSURE(rc == -EPERM, "tern_stream_open of a regular file: %s", tern_err_name(rc));
        close(fd);
        return;
    }
    int p[2];
    ENSURE(pipe2(p, O_CLOEXEC) == 0, "pipe2");
    for (int i = 0; i < 2; i++) {
        tern_id id;
        tern_loop_stats_get(loop, &before);
        int rc = tern_stream_open(loop, p[i], &id);
        start_refusal_check(s, rc, &before, false, "tern_stream_open(a pipe)");
        ENSURE(rc == 0 || rc == -EAGAIN || (fault_armed && injected(rc)),
               "tern_stream_open of a pipe end: %s", tern_err_name(rc));
        if (rc != 0) {
            extra_fd_keep(p[i]); /* still ours */
            continue;
        }
        struct rec *r = rec_new(K_STREAM, s);
        stream_init(r, loop, id, false);
        if (r != NULL && i == 0 && (c & 1)) {
            rc = tern_stream_read_start(loop, id, stream_read, r);
            ENSURE(rc == 0 || injected(rc), "read_start on a pipe: %s", tern_err_name(rc));
        }
    }
}

/*
 * A terminal: a pseudo-terminal opened here, its terminal end adopted as a
 * stream (which step_stream_more, writes and closes then reach like any
 * other), made raw or left alone, its window size read back as the master
 * set it, and sometimes closed at once: closing puts back the mode the
 * terminal had (read through the master, which shares it). The master
 * stays open until the input ends.
 */
static bool tty_same(const struct termios *a, const struct termios *b)
{
    return a->c_iflag == b->c_iflag && a->c_oflag == b->c_oflag && a->c_cflag == b->c_cflag &&
           a->c_lflag == b->c_lflag;
}

static void step_tty(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in);
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    if (m < 0)
        return; /* no pseudo-terminals here */
    ENSURE(fcntl(m, F_SETFD, FD_CLOEXEC) == 0 && grantpt(m) == 0 && unlockpt(m) == 0,
           "preparing a pseudo-terminal");
    int t = open(ptsname(m), O_RDWR | O_NOCTTY | O_CLOEXEC);
    ENSURE(t >= 0, "opening a pseudo-terminal's terminal end");
    extra_fd_keep(m);
    struct winsize ws = {.ws_row = (unsigned short)(1 + (c >> 4)),
                         .ws_col = (unsigned short)(80 + c)};
    ENSURE(ioctl(m, TIOCSWINSZ, &ws) == 0, "setting a window size");
    struct termios first, now;
    ENSURE(tcgetattr(t, &first) == 0, "tcgetattr");
    tern_loop_stats before;
    tern_loop_stats_get(loop, &before);
    tern_id id;
    int rc = tern_stream_open(loop, t, &id);
    start_refusal_check(s, rc, &before, false, "tern_stream_open(a terminal)");
    ENSURE(rc == 0 || rc == -EAGAIN || (fault_armed && injected(rc)),
           "tern_stream_open of a terminal: %s", tern_err_name(rc));
    if (rc != 0) {
        close(t); /* still ours */
        return;
    }
    struct rec *r = rec_new(K_STREAM, s);
    stream_init(r, loop, id, false);
    if (r == NULL)
        return; /* closed at once */
    r->tty = true;
    if (c & 1) {
        rc = tern_tty_set_mode(loop, id, TERN_TTY_RAW);
        ENSURE(rc == 0 || (fault_armed && injected(rc)), "raw mode: %s", tern_err_name(rc));
        ENSURE(tcgetattr(m, &now) == 0, "tcgetattr");
        if (rc == 0)
            ENSURE(!(now.c_lflag & (ICANON | ECHO)), "raw mode left the terminal cooked");
        else
            ENSURE(tty_same(&first, &now), "a refused raw mode changed the terminal");
    }
    unsigned cols = 0, rows = 0;
    rc = tern_tty_winsize(loop, id, &cols, &rows);
    ENSURE(rc == 0 && cols == ws.ws_col && rows == ws.ws_row, "the window size: %s, %ux%u",
           tern_err_name(rc), cols, rows);
    if (c & 2) {
        r->closing = true;
        ENSURE(tern_stream_close(loop, id) == 0, "closing a terminal's stream");
        ENSURE(tcgetattr(m, &now) == 0 && tty_same(&first, &now),
               "closing a terminal's stream did not put its mode back");
    }
}

static char alloc_mem[4096];

static void *stream_alloc(tern_loop *loop, tern_id stream, size_t *len, void *arg)
{
    struct rec *r = arg;
    arrived(r, loop, "alloc");
    ENSURE(stream == r->id && !r->closing && r->closes == 0, "alloc: wrong or closed stream");
    ENSURE(*len > 0, "alloc: asked for 0 bytes");
    if (r->work & 1)
        return NULL; /* the read reports -ENOBUFS */
    *len = r->work & 2 ? 1 : sizeof alloc_mem;
    return alloc_mem;
}

/* The calls of net.h that streams of the new kinds answer. */
static void step_stream_more(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in), d = u8(in);
    struct rec *st;
    tern_id id = pick_kind_id(in, K_STREAM, s, &st);
    bool live = st != NULL && !st->closing && st->closes == 0;
    tern_buf buf = {payload, 1 + (size_t)d * 8};
    int rc;
    switch (c % 7) {
    case 0: {
        tern_unix_cred cr;
        rc = tern_unix_peer_cred(loop, id, &cr);
        sane_rc(rc, "tern_unix_peer_cred");
        ENSURE(rc != 0 || live, "tern_unix_peer_cred of no open stream");
        break;
    }
    case 1:
        rc = tern_unix_take_fd(loop, id);
        ENSURE(rc >= 0 || rc == -EAGAIN || rc == -ENOENT || rc == -EINVAL,
               "tern_unix_take_fd: %s", tern_err_name(rc));
        if (rc >= 0) {
            ENSURE(live, "a descriptor taken from no open stream");
            close(rc);
        }
        rc = rc >= 0 ? 0 : rc;
        break;
    case 2: {
        int fds[TERN_UNIX_FDS_MAX + 1];
        unsigned nfds = (d & 3) == 3 ? TERN_UNIX_FDS_MAX + 1 : (d & 3);
        for (unsigned i = 0; i < nfds; i++)
            fds[i] = (d & 4) ? 1000000 : pair_fd(i);
        struct rec *w = rec_new(K_WRITE, s);
        if (w == NULL)
            return;
        w->stream = st;
        rc = tern_unix_write_fds(loop, id, &buf, 1, fds, nfds, op_done, w);
        ENSURE(rc <= 1, "tern_unix_write_fds returned %d", rc);
        if (rc < 0)
            sane_rc(rc, "tern_unix_write_fds");
        if (live && (nfds == 0 || nfds > TERN_UNIX_FDS_MAX))
            ENSURE(rc == -EINVAL, "tern_unix_write_fds of %u fds: %s", nfds, tern_err_name(rc));
        else if (live && (d & 4) && rc != -EINVAL)
            /* A stream whose writing has ended (shut down, or a write
             * failed) refuses any write first, as tern_stream_write does;
             * the request is allocated before its descriptors are looked
             * at, so under an armed fault that allocation may fail first. */
            ENSURE(rc == -EBADF || rc == -EPIPE || (fault_armed && injected(rc)),
                   "tern_unix_write_fds of a closed fd: %s", tern_err_name(rc));
        w->accepted = rc == 0 || rc == 1;
        ENSURE(live || !w->accepted, "a descriptor write accepted on no open stream");
        rc = rc == 1 ? 0 : rc;
        break;
    }
    case 3:
        rc = tern_stream_try_write(loop, id, &buf, (d & 8) ? 0 : 1);
        ENSURE(rc >= -4095, "tern_stream_try_write returned %d", rc);
        ENSURE(rc < 0 || live, "tern_stream_try_write wrote on no open stream");
        rc = rc > 0 ? 0 : rc;
        break;
    case 4: {
        int mode = (d & 1) ? TERN_TTY_RAW : (d & 2) ? 7 : TERN_TTY_NORMAL;
        rc = tern_tty_set_mode(loop, id, mode);
        sane_rc(rc, "tern_tty_set_mode");
        /* Only step_tty's streams are terminals: on the others nothing changes. */
        if (live && st->tty)
            ENSURE(rc == 0 || (mode == 7 && rc == -EINVAL) || (fault_armed && injected(rc)),
                   "tern_tty_set_mode on a terminal: %s", tern_err_name(rc));
        else if (live)
            ENSURE(rc == -ENOTTY || rc == -EINVAL || rc == -ENOTCONN,
                   "tern_tty_set_mode on a socket or pipe: %s", tern_err_name(rc));
        break;
    }
    case 5: {
        unsigned cols, rows;
        rc = tern_tty_winsize(loop, id, &cols, &rows);
        sane_rc(rc, "tern_tty_winsize");
        if (live && st->tty)
            ENSURE(rc == 0, "tern_tty_winsize on a terminal: %s", tern_err_name(rc));
        else if (live)
            ENSURE(rc == -ENOTTY || rc == -EINVAL || rc == -ENOTCONN,
                   "tern_tty_winsize on a socket or pipe: %s", tern_err_name(rc));
        break;
    }
    default:
        if (st != NULL)
            st->work = d & 3;
        rc = tern_stream_read_start_alloc(loop, id, (d & 4) ? NULL : stream_alloc, stream_read,
                                          st);
        sane_rc(rc, "tern_stream_read_start_alloc");
        if (live && (d & 4))
            ENSURE(rc == -EINVAL || rc == -ENOTCONN || rc == -EPIPE,
                   "tern_stream_read_start_alloc(NULL): %s", tern_err_name(rc));
        break;
    }
    if (!live && rc == 0)
        FAIL("a stream call (op %u) succeeded on an id that is no open stream here", c % 7);
}

/* --- Loop hooks and signal watchers ------------------------------- */

static void hook_cb(tern_loop *loop, tern_id id, void *arg)
{
    struct rec *r = arg;
    arrived(r, loop, "hook");
    ENSURE(id == r->id, "hook: wrong id");
    ENSURE(!r->stopped, "hook: ran after a successful stop or cancel");
    r->calls++;
    if (r->work != 0 && r->calls >= r->work) {
        ENSURE(tern_hook_stop(loop, id) == 0, "a hook stopping itself");
        r->stopped = true;
        ENSURE(tern_hook_stop(loop, id) == -ENOENT, "a hook stopped twice");
    }
}

static void step_hook(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in);
    int kind = (c & 3) == 3 ? 7 : (int)(c & 3);
    bool null_cb = (c & 0x80) != 0;
    struct rec *r = rec_new(K_HOOK, s);
    if (r == NULL)
        return;
    r->work = (c >> 2) & 3; /* stops itself in its n-th run (0: never) */
    tern_loop_stats before;
    tern_loop_stats_get(loop, &before);
    int rc = tern_hook_start(loop, kind, null_cb ? NULL : hook_cb, r, &r->id);
    start_refusal_check(s, rc, &before, false, "tern_hook_start");
    if (kind == 7 || null_cb)
        ENSURE(rc == -EINVAL, "tern_hook_start with a bad argument: %s", tern_err_name(rc));
    else
        ENSURE(rc == 0 || rc == -EAGAIN || (fault_armed && injected(rc)), "tern_hook_start: %s",
               tern_err_name(rc));
    r->accepted = rc == 0;
}

static void signal_cb(tern_loop *loop, tern_id id, int signo, void *arg)
{
    struct rec *r = arg;
    arrived(r, loop, "signal");
    ENSURE(id == r->id, "signal: wrong id");
    ENSURE(!r->stopped, "signal: a callback after a successful stop or cancel");
    ENSURE(signo == r->signo, "signal: %d for a watcher of %d", signo, r->signo);
    r->calls++;
}

static void step_signal(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in);
    static const int signos[] = {SIGUSR1, SIGUSR2, SIGKILL, 999};
    int signo = signos[c & 3];
    bool null_cb = (c & 0x80) != 0;
    struct rec *r = rec_new(K_SIGNAL, s);
    if (r == NULL)
        return;
    r->signo = signo;
    tern_loop_stats before;
    tern_loop_stats_get(loop, &before);
    int rc = tern_signal_start(loop, signo, null_cb ? NULL : signal_cb, r, &r->id);
    start_refusal_check(s, rc, &before, false, "tern_signal_start");
    if ((c & 3) >= 2 || null_cb)
        ENSURE(rc == -EINVAL, "tern_signal_start(%d) with a bad argument: %s", signo,
               tern_err_name(rc));
    else
        ENSURE(rc == 0 || rc == -EAGAIN || (fault_armed && injected(rc)),
               "tern_signal_start: %s", tern_err_name(rc));
    r->accepted = rc == 0;
}

/* Stop a hook, a signal watcher or a file watch: its own stop, or a cancel. */
static void step_stop_new(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in);
    static const enum kind kinds[] = {K_HOOK, K_SIGNAL, K_FSWATCH};
    enum kind k = kinds[c % 3];
    struct rec *r;
    tern_id id = pick_kind_id(in, k, s, &r);
    /* Ids are per loop: a record of a loop since freed in this slot is not
     * what the id names now. Look for the slot's current loop's, if any. */
    if (r != NULL && (r->dead || r->loop != loop)) {
        r = NULL;
        for (unsigned i = 0; i < nrecs; i++)
            if (recs[i].accepted && recs[i].id == id && recs[i].kind == k && recs[i].slot == s &&
                recs[i].loop == loop && !recs[i].dead)
                r = &recs[i];
    }
    bool live = r != NULL && !r->stopped;
    struct rec *other = rec_find(id);
    if ((c & 0x80) && other != NULL && (other->kind != k || other->slot != s))
        return; /* a cancel of another kind is step_cancel's */
    int rc;
    if (c & 0x80) {
        rc = tern__test_cancel_now(loop, id);
        ENSURE(rc <= TERN_CANCEL_FINISHED, "tern_cancel returned %d", rc);
        if (rc > 0)
            FAIL("tern_cancel of a hook, signal or watch: outcome %d", rc);
    } else {
        rc = k == K_HOOK ? tern_hook_stop(loop, id)
             : k == K_SIGNAL ? tern_signal_stop(loop, id) : tern_watch_stop(loop, id);
    }
    sane_rc(rc, "a stop");
    if (live)
        ENSURE(rc == 0, "the stop of a live %s: %s",
               k == K_HOOK ? "hook" : k == K_SIGNAL ? "signal watcher" : "watch",
               tern_err_name(rc));
    else
        stale_rc(id, rc, "a stop");
    if (rc == 0) {
        ENSURE(live || (c & 0x80), "a stop succeeded on no live watcher of the kind");
        stopped_by_id(id, s, true);
        if (r != NULL)
            r->stopped = true;
    }
}

/* Raise a signal at this thread (the loops' thread), or signal the eventfd. */
static void step_raise(struct input *in)
{
    unsigned c = u8(in);
    if (c & 1) {
        ENSURE(pthread_kill(pthread_self(), (c & 2) ? SIGUSR2 : SIGUSR1) == 0, "pthread_kill");
        return;
    }
    if (event_fd >= 0) {
        uint64_t one = 1;
        ssize_t w = write(event_fd, &one, sizeof one);
        (void)w;
    }
}

/* --- Child processes ---------------------------------------------- */

static void exit_cb(tern_loop *loop, tern_id id, int status, int exit_code, int term_signal,
                    void *arg)
{
    struct rec *r = arg;
    arrived(r, loop, "process exit");
    ENSURE(id == r->id, "process exit: wrong id");
    ENSURE(r->calls == 0, "process exit: a second callback");
    ENSURE(!r->said_stopped || status == -ECANCELED,
           "process exit: %s after a cancel said it stopped", tern_err_name(status));
    ENSURE(!r->said_finished || status == 0,
           "process exit: %s after a cancel said it had finished", tern_err_name(status));
    if (status == 0) {
        if (term_signal != 0)
            ENSURE(exit_code == -1 && r->signalled, "process exit: signal %d, code %d%s",
                   term_signal, exit_code, r->signalled ? "" : " (none was sent)");
        else
            ENSURE(exit_code == r->want_exit || (r->signalled && exit_code >= 0),
                   "process exit: code %d, the program ends with %d", exit_code, r->want_exit);
    } else {
        ENSURE(status == -ECANCELED && r->cancel_asked,
               "process exit: status %s (a cancel asked: %d)", tern_err_name(status),
               r->cancel_asked);
        ENSURE(exit_code == -1 && term_signal == 0, "process exit: cancelled with code %d "
               "signal %d", exit_code, term_signal);
    }
    r->calls++;
    ENSURE(tern_process_kill(loop, id, 0) == -ENOENT, "a process's id is not stale in its exit");
}

static void step_spawn(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL || nchildren == MAX_CHILDREN)
        return;
    unsigned c = u8(in), d = u8(in);
    static char *const argv_sleep[] = {"sleep", "0.01", NULL};
    tern_process_options o;
    tern_process_options_init(&o);
    int want = 0;
    bool bad = false, missing = false;
    switch (c & 7) {
    case 0: case 1: o.file = "/bin/true"; break;
    case 2: o.file = "/bin/false"; want = 1; break;
    case 3: case 4: o.file = "sleep"; o.argv = argv_sleep; break;
    case 5: o.file = "/nonexistent/tern-fuzz"; missing = true; break;
    case 6: o.file = NULL; bad = true; break;
    default: o.file = "/bin/true"; o.cwd = "/nonexistent"; missing = true; break;
    }
    tern_stdio stdio[3] = {{.kind = TERN_STDIO_IGNORE}, {.kind = TERN_STDIO_IGNORE},
                           {.kind = TERN_STDIO_IGNORE}};
    switch (d & 7) {
    case 0: break; /* 0, 1 and 2 inherited */
    case 1: case 2: o.stdio = stdio; o.stdio_count = 3; break;
    case 3: case 4: /* stdout a stream on the loop */
        stdio[1].kind = TERN_STDIO_STREAM;
        o.stdio = stdio;
        o.stdio_count = 3;
        break;
    case 5: stdio[0] = (tern_stdio){.kind = TERN_STDIO_FD, .fd = -1}; o.stdio = stdio;
            o.stdio_count = 1; bad = true; break;
    case 6: stdio[2].kind = (tern_stdio_kind)9; o.stdio = stdio; o.stdio_count = 3;
            bad = true; break;
    default: o.stdio = stdio; o.stdio_count = 65; bad = true; break;
    }
    if (d & 8)
        o.flags = TERN_PROCESS_DETACHED;
    if ((d & 0x30) == 0x30) {
        o.flags |= 0x80; /* unknown */
        bad = true;
    }
    bool null_cb = (c & 0x80) != 0;
    bad = bad || null_cb;
    struct rec *r = rec_new(K_PROC, s);
    if (r == NULL)
        return;
    r->want_exit = want;
    tern_loop_stats before;
    tern_loop_stats_get(loop, &before);
    int rc = tern_process_spawn(loop, &o, null_cb ? NULL : exit_cb, r, &r->id);
    start_refusal_check(s, rc, &before, true, "tern_process_spawn");
    if (bad)
        ENSURE(rc == -EINVAL, "tern_process_spawn with a bad argument: %s", tern_err_name(rc));
    else if (missing)
        ENSURE(rc == -ENOENT || (fault_armed && injected(rc)) || rc == -EAGAIN,
               "tern_process_spawn of a missing program or directory: %s", tern_err_name(rc));
    else
        ENSURE(rc == 0 || rc == -EAGAIN || (fault_armed && injected(rc)),
               "tern_process_spawn: %s", tern_err_name(rc));
    if (rc != 0)
        return;
    r->accepted = true;
    ENSURE(tern_process_pid(loop, r->id, &r->pid) == 0 && r->pid > 0, "tern_process_pid");
    children[nchildren++] = r->pid;
    if (stdio[1].kind == TERN_STDIO_STREAM) {
        struct rec *st = rec_new(K_STREAM, s);
        stream_init(st, loop, stdio[1].stream, false);
        if (st != NULL && (d & 0x40)) {
            rc = tern_stream_read_start(loop, stdio[1].stream, stream_read, st);
            ENSURE(rc == 0 || injected(rc), "read_start on a child's stdout: %s",
                   tern_err_name(rc));
        }
    }
}

static void step_process_call(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in);
    struct rec *r;
    tern_id id = pick_kind_id(in, K_PROC, s, &r);
    bool ended = r == NULL || r->calls != 0;
    int rc;
    if (c & 1) {
        static const int signos[] = {0, SIGTERM, SIGKILL, -1};
        int signo = signos[(c >> 1) & 3];
        if (r != NULL && r->calls == 0 && signo > 0)
            r->signalled = true; /* set first: the exit may come in any later turn */
        rc = tern_process_kill(loop, id, signo);
        sane_rc(rc, "tern_process_kill");
        if (signo < 0 && !ended)
            ENSURE(rc == -EINVAL, "tern_process_kill(-1): %s", tern_err_name(rc));
        else if (!ended)
            /* -ENOENT: its exit is seen and its callback pending. */
            ENSURE(rc == 0 || rc == -ENOENT, "tern_process_kill of a running child: %s",
                   tern_err_name(rc));
    } else if (c & 2) {
        int pid = 0;
        rc = tern_process_pid(loop, id, &pid);
        if (rc == 0)
            ENSURE(!ended && pid == r->pid, "tern_process_pid: %d (want %d)", pid,
                   r != NULL ? r->pid : -1);
    } else {
        bool was_asked = r != NULL && r->cancel_asked;
        cancel_coming(s, id);
        rc = tern__test_cancel_now(loop, id);
        ENSURE(rc <= TERN_CANCEL_FINISHED && rc != TERN_CANCEL_RUNNING,
               "tern_cancel of a process: %d", rc);
        /* Once a cancel reached it (this one's cancel_coming aside), its id
         * may be stale before its -ECANCELED callback runs. */
        if (!ended && !was_asked)
            ENSURE(rc >= 0, "tern_cancel of a running process: %s", tern_err_name(rc));
        if (!ended && rc >= 0) {
            r->said_stopped = rc == TERN_CANCEL_STOPPED;
            r->said_finished = rc == TERN_CANCEL_FINISHED;
        }
        if (rc >= 0) {
            stopped_by_id(id, s, true);
            cancel_done(s, id);
        }
        rc = rc > 0 ? 0 : rc;
    }
    if (ended && (c & 1))
        stale_rc(id, rc, "tern_process_kill");
}

/* --- File watches ------------------------------------------------- */

static void fswatch_cb(tern_loop *loop, tern_id id, int status, unsigned events,
                       const char *name, void *arg)
{
    struct rec *r = arg;
    arrived(r, loop, "watch");
    ENSURE(id == r->id, "watch: wrong id");
    ENSURE(!r->stopped, "watch: a callback after it was stopped or ended");
    if (status == 0) {
        ENSURE(events != 0 && (events & ~(unsigned)(TERN_WATCH_CHANGE | TERN_WATCH_RENAME)) == 0,
               "watch: events %u", events);
    } else {
        sane_rc(status, "watch status");
        if (status == -ENOENT)
            ENSURE(events == TERN_WATCH_GONE, "watch: -ENOENT with events %u", events);
        r->stopped = true; /* its last callback: the id is stale now */
        ENSURE(tern_watch_stop(loop, id) == -ENOENT, "watch: its id is live after its end");
    }
    (void)name;
    r->calls++;
}

static void step_fswatch(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in);
    const char *path;
    bool missing = false;
    switch (c & 7) {
    case 0: case 1: path = scratch; break;
    case 2: case 3: path = scratch_path(0); break;
    case 4: path = scratch_path(2); break;
    case 5: path = scratch_path(4); missing = true; break;
    default: path = NULL; break;
    }
    uint64_t interval = (c & 8) ? MS : (c & 0x10) ? (UINT64_C(1) << 62) + 1 : 0;
    bool null_cb = (c & 0x80) != 0;
    struct stat st;
    if (path != NULL && !missing && stat(path, &st) != 0)
        missing = true; /* not made yet in this input */
    struct rec *r = rec_new(K_FSWATCH, s);
    if (r == NULL)
        return;
    tern_loop_stats before;
    tern_loop_stats_get(loop, &before);
    int rc = tern_watch_start(loop, path, interval, null_cb ? NULL : fswatch_cb, r, &r->id);
    start_refusal_check(s, rc, &before, false, "tern_watch_start");
    if (path == NULL || null_cb || interval > (UINT64_C(1) << 62))
        ENSURE(rc == -EINVAL, "tern_watch_start with a bad argument: %s", tern_err_name(rc));
    else if (missing)
        /* Admission comes before the path is looked at (a full loop's
         * -EAGAIN, checked above), and under an armed fault the watch's
         * own descriptor may fail first. */
        ENSURE(rc == -ENOENT || rc == 0 || rc == -EAGAIN || (fault_armed && injected(rc)),
               "tern_watch_start of a missing path: %s", tern_err_name(rc));
    else
        ENSURE(rc == 0 || rc == -EAGAIN || rc == -ENOENT || rc == -ENOSPC ||
                   (fault_armed && injected(rc)),
               "tern_watch_start: %s", tern_err_name(rc));
    r->accepted = rc == 0;
}

/* Change the scratch directory at once (a file watch's news). */
static void step_touch(struct input *in)
{
    unsigned c = u8(in);
    switch (c % 5) {
    case 0: {
        int fd = open(scratch_path(c >> 3), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (fd >= 0) {
            ssize_t w = write(fd, "x", 1);
            (void)w;
            close(fd);
        }
        break;
    }
    case 1: unlink(scratch_path(c >> 3)); break;
    case 2: rename(scratch_path(0), scratch_path(1)); break;
    case 3: mkdir(scratch_path(2), 0700); break;
    default: rmdir(scratch_path(2)); break;
    }
}

/* --- External waits ----------------------------------------------- */

static void wait_fd_done(tern_loop *loop, tern_id id, int status, void *result, void *arg)
{
    struct rec *r = arg;
    arrived(r, loop, "wait");
    ENSURE(id == r->id, "wait: wrong id");
    ENSURE(r->calls == 0, "wait: a second done");
    /* STOPPED after the timeout came: done keeps -ETIMEDOUT (tern/wait.h). */
    ENSURE(!r->said_stopped || status == -ECANCELED || (status == -ETIMEDOUT && r->timeout != 0),
           "wait: %s after a cancel said it stopped", tern_err_name(status));
    ENSURE(!r->said_finished || status == 0,
           "wait: %s after a cancel said it had finished", tern_err_name(status));
    ENSURE(status == 0 || status == -ECANCELED || status == -ETIMEDOUT, "wait: status %s",
           tern_err_name(status));
    check_stop_status(r, status, "wait");
    uintptr_t bits = (uintptr_t)result;
    if (status == 0)
        ENSURE(bits != 0 && (bits & ~(uintptr_t)(TERN_READABLE | TERN_HANGUP | TERN_ERROR)) == 0,
               "wait: ready with bits %#lx", (unsigned long)bits);
    else
        ENSURE(result == NULL, "wait: %s with a result", tern_err_name(status));
    r->calls++;
    owner_release(r, false);
}

static void step_wait(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in);
    tern_job_options jo;
    tern_job_options_init(&jo);
    bool bad;
    struct rec *o = pick_options(in, s, &jo.owner, &jo.timeout_ns, &bad);
    bool null_opts = (c & 0x80) != 0;
    if (null_opts)
        o = NULL, bad = false, jo.timeout_ns = 0;
    bool is_call = (c & 0x40) != 0;
    struct rec *r = rec_new(is_call ? K_JOB : K_WAIT, s);
    if (r == NULL)
        return;
    r->owner = o;
    r->timeout = jo.timeout_ns;
    tern_loop_stats before;
    tern_loop_stats_get(loop, &before);
    tern_refusal want = predict_refusal(s, o, &before);
    int rc;
    int fd = -2;
    const char *what = is_call ? "tern_wait_call" : "tern_wait_fd";
    if (is_call) {
        r->work = (c >> 1) & 1;
        rc = tern_wait_call(loop, (c & 0x20) ? NULL : job_work, job_done, r,
                            null_opts ? NULL : &jo, &r->id);
        if (c & 0x20)
            bad = true;
    } else {
        switch ((c >> 1) & 7) {
        case 0: case 1: fd = pair_fd(c >> 4); break;
        case 2: case 3:
            if (event_fd < 0)
                event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
            fd = event_fd;
            break;
        case 4: fd = -1; bad = true; break;
        case 5: fd = tern_loop_backend_fd(loop); break;
        default: /* a regular file: epoll refuses it; poll may watch it */
            fd = open(wait_path(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
            ENSURE(fd >= 0, "open a regular file");
            break;
        }
        rc = tern_wait_fd(loop, fd, (c & 0x20) ? NULL : wait_fd_done, r, null_opts ? NULL : &jo,
                          &r->id);
        if (c & 0x20)
            bad = true;
        if (((c >> 1) & 7) >= 6) {
            if (rc == 0)
                extra_fd_keep(fd); /* open until done */
            else
                close(fd);
        }
    }
    sane_rc(rc, what);
    if (rc != 0 && rc != -EAGAIN)
        start_refusal_check(s, rc, &before, false, what);
    if (bad) {
        ENSURE(rc == -EINVAL || (fault_armed && injected(rc)), "%s with a bad argument: %s",
               what, tern_err_name(rc));
        return;
    }
    ENSURE(rc == 0 || rc == -EAGAIN || rc == -EINVAL || rc == -EEXIST || rc == -EPERM ||
               (fault_armed && injected(rc)),
           "%s: %s", what, tern_err_name(rc));
    r->accepted = rc == 0;
    adm_seen.timed_accepted += rc == 0 && r->timeout != 0;
    if (rc == 0 || rc == -EAGAIN)
        admission_after(s, rc, want, o, is_call, &before, what);
}

/*
 * Cancel a wait: at once (as the loop's thread) or queued; the outcome
 * says what its done will be (STOPPED: -ECANCELED; FINISHED: 0).
 */
static void step_wait_cancel(struct input *in)
{
    int s = slot_of(in);
    tern_loop *loop = slots[s].loop;
    if (loop == NULL)
        return;
    unsigned c = u8(in);
    struct rec *r;
    tern_id id = pick_kind_id(in, K_WAIT, s, &r);
    struct rec *other = rec_find(id);
    if (other != NULL && (other->kind != K_WAIT || other->slot != s))
        return; /* a cancel of another kind is step_cancel's */
    bool owed_now = r != NULL && r->calls == 0;
    cancel_coming(s, id);
    int rc;
    if (c & 1) {
        rc = tern_cancel(loop, id);
        ENSURE(rc == TERN_CANCEL_REQUESTED || id == 0, "a queued cancel of a wait: %d", rc);
        if (rc == TERN_CANCEL_REQUESTED)
            tern_loop_run_once(loop, 0); /* its step 1 resolves it */
        return;
    }
    rc = tern__test_cancel_now(loop, id);
    if (owed_now) {
        ENSURE(rc == TERN_CANCEL_STOPPED || rc == TERN_CANCEL_FINISHED,
               "tern_cancel of a wait not yet done: %d", rc);
        r->said_stopped = rc == TERN_CANCEL_STOPPED;
        r->said_finished = rc == TERN_CANCEL_FINISHED;
    } else {
        stale_rc(id, rc, "tern_cancel of a finished or stranger wait");
    }
}

/* --- The extended table ------------------------------------------- */

/*
 * Entries of the second level: an escape op byte (see LLVMFuzzerTestOneInput)
 * is followed by one byte that picks an entry modulo the table's size, so
 * the table can grow without touching the first level's meaning.
 */
#define EXTENDED_STEPS(X)                                                      \
    X(step_udp_bind)                                                           \
    X(step_udp_call)                                                           \
    X(step_udp_call)                                                           \
    X(step_unix)                                                               \
    X(step_pipe)                                                               \
    X(step_stream_more)                                                        \
    X(step_hook)                                                               \
    X(step_signal)                                                             \
    X(step_stop_new)                                                           \
    X(step_raise)                                                              \
    X(step_spawn)                                                              \
    X(step_process_call)                                                       \
    X(step_fswatch)                                                            \
    X(step_touch)                                                              \
    X(step_wait)                                                               \
    X(step_wait)                                                               \
    X(step_wait_cancel)                                                        \
    X(step_tty)

static void (*const extended_steps[])(struct input *) = {
#define EXTENDED_STEP_ENTRY(fn) fn,
    EXTENDED_STEPS(EXTENDED_STEP_ENTRY)
#undef EXTENDED_STEP_ENTRY
};

#define EXTENDED_COUNT (sizeof extended_steps / sizeof extended_steps[0])

/* How often each extended step ran, for fuzz_replay's closing line. */
static unsigned extended_seen[EXTENDED_COUNT];

static void step_extended(struct input *in)
{
    unsigned k = u8(in) % EXTENDED_COUNT;
    extended_seen[k]++;
    extended_steps[k](in);
}

/*
 * Open descriptors of this process, counted; `before` (if not NULL) has
 * the descriptors open at the input's start, and those not in it are
 * named on stderr (a leak's message).
 */
#define FD_SET_MAX 4096
static bool fds_before[FD_SET_MAX];

static int fd_count(bool remember, bool name_new)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    int n = 0, self = dirfd(d);
    if (remember)
        memset(fds_before, 0, sizeof fds_before);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        int fd = atoi(e->d_name);
        if (fd == self)
            continue;
        n++;
        if (remember && fd < FD_SET_MAX)
            fds_before[fd] = true;
        if (name_new && (fd >= FD_SET_MAX || !fds_before[fd])) {
            char link[64], target[256];
            snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
            ssize_t len = readlink(link, target, sizeof target - 1);
            target[len > 0 ? len : 0] = '\0';
            fprintf(stderr, "fuzz_api: descriptor %d (%s) was not open before the input\n", fd,
                    target);
        }
    }
    closedir(d);
    return n;
}

/*
 * Every child this input spawned has been reaped (by its loop, or by
 * tern's reaper once its op was cancelled): none is left as a zombie or
 * still running past its 10 ms.
 */
static void children_gone(void)
{
    for (unsigned i = 0; i < nchildren; i++) {
        for (int tries = 0;; tries++) {
            siginfo_t si = {0};
            int rc = waitid(P_PID, (id_t)children[i], &si, WEXITED | WNOHANG | WNOWAIT);
            if (rc != 0 && errno == ECHILD)
                break;
            ENSURE(tries < 2000, "child %d is still %s 2 s after its input ended", children[i],
                   si.si_pid != 0 ? "a zombie" : "running");
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    nchildren = 0;
}

/* ------------------------------------------------------------------ */
/* The books                                                           */
/* ------------------------------------------------------------------ */

/* Free a slot's loop with whatever is in flight; then it owes nothing. */
static void expect_free_settled(int s)
{
    tern_loop *loop = slots[s].loop;
    cancel_everything_coming(s); /* the free cancels what is in flight */
    owners_closing(s);
    tern_loop_free(loop);
    slots[s].loop = NULL;
    slots[s].port = 0;
    for (unsigned i = 0; i < nrecs; i++) {
        struct rec *r = &recs[i];
        if (r->slot != s || r->loop != loop || r->dead)
            continue;
        r->dead = true;
        if (!r->accepted) {
            ENSURE(r->calls == 0 && r->connects == 0 && r->closes == 0,
                   "a refused call (kind %d) called back", r->kind);
            continue;
        }
        switch (r->kind) {
        case K_JOB:
        case K_LOOKUP:
        case K_POST:
        case K_DEFER:
        case K_WRITE:
        case K_SHUT:
        case K_FS:
            ENSURE(r->calls == 1, "kind %d id %" PRIu64 ": %u completions by the end of "
                   "tern_loop_free (want exactly 1)", r->kind, r->id, r->calls);
            break;
        case K_STREAM:
            ENSURE(r->closes == 1, "stream %" PRIu64 ": %u close callbacks by the end of "
                   "tern_loop_free", r->id, r->closes);
            if (r->connecting)
                ENSURE(r->connects == 1, "connect %" PRIu64 ": %u callbacks", r->id, r->connects);
            break;
        case K_TIMER:
            ENSURE(r->repeat || r->calls <= 1, "a one-shot timer fired %u times", r->calls);
            break;
        case K_UDP:
            ENSURE(r->closes == 1, "UDP socket %" PRIu64 ": %u close callbacks by the end of "
                   "tern_loop_free", r->id, r->closes);
            break;
        case K_SEND:
        case K_PROC:
        case K_WAIT:
            ENSURE(r->calls == 1, "kind %d id %" PRIu64 ": %u completions by the end of "
                   "tern_loop_free (want exactly 1)", r->kind, r->id, r->calls);
            break;
        case K_HOOK:
        case K_SIGNAL:
        case K_FSWATCH:
            break;
        case K_WATCH:
            break;
        case K_OWNER:
            /* Closed by the free; every job of it has had its done above. */
            ENSURE(r->in_flight == 0,
                   "owner %" PRIu64 ": %u jobs in flight after tern_loop_free", r->id,
                   r->in_flight);
            r->closed = true;
            break;
        }
    }
}

/* Every input starts with one loop of the defaults in slot 0. */
static int fds_at_start;

static void reset(void)
{
    fds_at_start = fd_count(true, false);
    nrecs = 0;
    nstream_fds = 0;
    nextra_fds = 0;
    nchildren = 0;
    event_fd = -1;
    fault_armed = false;
    carried.inputs++;
    carried.pool_at_start = tern__pool_running();
    carried.fault_mask = 0;
    carried.fault_nth = 0;
    /* Posts carve records from per-thread blocks: begin each input with a
     * fresh one, so an armed fault meets the same allocations on replay. */
    tern__test_inbound_fresh_block();
    for (int i = 0; i < PAIRS; i++)
        pairs[i][0] = pairs[i][1] = -1;
    int rc = tern_loop_new(&slots[0].loop, NULL);
    ENSURE(rc == 0, "tern_loop_new(NULL): %s", tern_err_name(rc));
    slots[0].port = 0;
    tern_loop_options d;
    tern_loop_options_init(&d);
    slots[0].max_operations = d.max_operations;
    slots[0].max_undelivered = d.max_undelivered;
}

static void finish(void)
{
    tern__fault_arm(0, 0);
    fault_armed = false;
    for (int s = 0; s < 2; s++)
        if (slots[s].loop != NULL)
            expect_free_settled(s);
    for (int i = 0; i < PAIRS; i++)
        if (pairs[i][0] >= 0) {
            close(pairs[i][0]);
            close(pairs[i][1]);
        }
    for (unsigned i = 0; i < nstream_fds; i++)
        close(stream_fds[i]);
    for (unsigned i = 0; i < nextra_fds; i++)
        close(extra_fds[i]);
    if (event_fd >= 0)
        close(event_fd);
    scratch_clean();
    unlink(unix_path(0));
    unlink(unix_path(1));
    children_gone();
    /* No descriptor is left (tern's reaper may close its last one a moment
     * after it reaped the last child). */
    for (int tries = 0; fd_count(false, false) != fds_at_start; tries++) {
        if (tries == 2000) {
            int now = fd_count(false, true); /* names the new ones */
            FAIL("%d descriptors open after the input, %d before it", now, fds_at_start);
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    /*
     * With every loop freed, the pool owes no completion: each job it ever
     * accepted has been counted completed or cancelled. (All three counters
     * move on this thread: submission and delivery both happen here.)
     */
    tern_pool_stats ps;
    tern_pool_stats_get(&ps);
    ENSURE(ps.submitted == ps.completed + ps.cancelled + ps.timed_out,
           "pool: submitted %" PRIu64 " != completed %" PRIu64 " + cancelled %" PRIu64
           " + timed out %" PRIu64 " with every loop freed",
           ps.submitted, ps.completed, ps.cancelled, ps.timed_out);
}

static void ignore_signal(int signo)
{
    (void)signo;
}

static void warm_exit(tern_loop *loop, tern_id id, int status, int code, int sig, void *arg)
{
    (void)loop, (void)id, (void)status, (void)code, (void)sig, (void)arg;
}

/* Open descriptors that are pidfds. */
static int pidfd_count(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char link[300], target[64];
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(link, target, sizeof target - 1);
        target[len > 0 ? len : 0] = '\0';
        n += strcmp(target, "anon_inode:[pidfd]") == 0;
    }
    closedir(d);
    return n;
}

/*
 * tern's reaper keeps its wake object (an eventfd, or a pipe's two ends in
 * a portable build) for the life of the process once it first adopts a
 * child (runtime/process/process_reap.c): adopt one here, so the descriptors
 * counted around each input are the input's alone.
 */
static void reaper_warm(void)
{
    int before = pidfd_count();
    tern_loop *loop;
    if (tern_loop_new(&loop, NULL) != 0)
        abort();
    static char *const argv[] = {"sleep", "0.01", NULL};
    tern_process_options o;
    tern_process_options_init(&o);
    o.file = "sleep";
    o.argv = argv;
    tern_id id;
    int pid;
    if (tern_process_spawn(loop, &o, warm_exit, NULL, &id) != 0 ||
        tern_process_pid(loop, id, &pid) != 0)
        abort();
    tern_loop_free(loop); /* cancels the process: the reaper takes the child */
    children[0] = pid;
    nchildren = 1;
    children_gone();
    /* Then its pidfd, where it has one, is closed too (just after the
     * reap): what is left open is the reaper's to keep. */
    for (int tries = 0; pidfd_count() != before; tries++) {
        if (tries == 2000)
            abort();
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    tern__set_getaddrinfo(local_getaddrinfo);
    /* A write to a pipe whose reader is gone fails with -EPIPE, and a
     * signal raised while no watcher blocks it does nothing. */
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {.sa_handler = ignore_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    reaper_warm();
    snprintf(scratch, sizeof scratch, "/tmp/tern_fuzz_fs.XXXXXX");
    if (mkdtemp(scratch) == NULL)
        abort();
    /* The foreign thread blocks every signal, as tern's own threads do, so
     * a signal raised at the process reaches the loops' thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    if (pthread_create(&foreign.thread, NULL, foreign_main, NULL) != 0)
        abort();
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct input in = {data, size};
    reset();
    for (unsigned step = 0; step < MAX_STEPS && in.left > 0; step++) {
        unsigned op = u8(&in);
        /* Bytes 250..255, which % 25 would fold onto 0..5, select the file
         * requests, and 244..249 admission, so the committed corpus keeps
         * most of its meaning. */
        if (op >= 250) {
            step_fs(&in);
            continue;
        }
        /* 244..249: admission (these bytes folded onto 19..24 before). */
        /* 124, 149, 174, 199 and 224 (pool steps before): the second level,
         * a byte that picks an extended step modulo their count. */
        if (op >= 124 && op % 25 == 24) {
            step_extended(&in);
            continue;
        }
        if (op >= 244) {
            switch (op) {
            case 244: step_owner_open(&in); break;
            case 245: step_owner_close(&in); break;
            case 246: step_owner_stats(&in); break;
            case 247: step_submit_with(&in); break;
            case 248: step_resolve_with(&in); break;
            default: step_fs_with(&in); break;
            }
            continue;
        }
        switch (op % 25) {
        case 0: step_loop_new(&in); break;
        case 1: step_loop_free(&in); break;
        case 2: case 3: step_timer(&in); break;
        case 4: step_timer_stop(&in); break;
        case 5: step_cancel(&in); break;
        case 6: case 7: step_submit(&in); break;
        case 8: step_resolve(&in); break;
        case 9: step_post(&in, false); break;
        case 10: step_post(&in, true); break;
        case 11: step_watch(&in); break;
        case 12: step_watch_change(&in); break;
        case 13: step_kick(&in); break;
        case 14: case 15: step_run(&in); break;
        case 16: step_foreign(&in); break;
        case 17: step_ref(&in); break;
        case 18: step_listen(&in); break;
        case 19: step_connect(&in); break;
        case 20: step_stream_call(&in); break;
        case 21: step_stream_open(&in); break;
        case 22: step_fault(&in); break;
        case 23: step_run_full(&in); break;
        default: step_pool(&in); break;
        }
    }
    finish();
    return 0;
}
