/*
 * Loop groups: N loops on N threads sharing the pool, exclusive mode, and
 * the two-phase shutdown. The narrative is in docs/design.md ("Loop
 * groups"); this comment is the map of the code and its locking.
 *
 * Threads. Each member thread claims its loop for the group's whole life
 * and drives turns itself (run_member), so it can look at the group
 * between turns: one relaxed load of `signal` per turn while nothing is
 * asked of it. Its loop carries TERN__LOOP_HELD, so it stays live and
 * sleeps in its backend until work, a pause or the shutdown arrives.
 *
 * Waking a member. Whoever asks something of the members (pause,
 * shutdown, the end of phase one) sets `signal` or `finished`, issues a
 * release fence and calls tern_loop_stop on each loop: a stop makes a
 * member's turn skip or leave its sleep (the loop's wake protocol, see
 * inbound.c), and the member's acquire exchange of stop_requested after
 * the turn pairs with that fence, so it then sees what was asked. A group
 * member treats a stop as nothing more than this wake-up.
 *
 * Exclusive mode. The pauser takes `pauser` under `lock`, raises
 * SIG_PAUSE, kicks the members and waits until `parked` counts every
 * other one; a member parks at its next turn boundary (park_locked),
 * RCU-offline, until the pauser's generation ends. A member that itself
 * calls pause while another holds exclusive mode parks for that one first
 * (inside its callback): that is what makes two pauses queue up instead of
 * each waiting for the other to park. Then the pool's bounded workers are
 * held (pool/gate.c).
 *
 * Shutdown, phase one. SIG_SHUTDOWN makes each member post its teardown
 * (teardown_post) to its own loop: the callbacks run in step 1 as any post
 * does, and the post drops TERN__LOOP_HELD. A member whose loop then has
 * nothing live marks itself idle and sleeps on its loop's wake-up
 * (tern__wake_sleep: the wake descriptor, or the backend's own where it
 * wakes itself, the completion port on Windows) without running a turn,
 * so an idle member runs no callback: whatever wakes it (a post) makes it
 * unmark itself, under the lock, before it runs anything. Phase one ends
 * when every member is idle at once with an empty inbound queue
 * (try_finish, under the lock): no member runs code, no job is in flight
 * (jobs keep their loops live), so nothing but a thread outside the group
 * can make new work.
 *
 * Phase two, destroy. try_finish seals every loop (sealed, then closing)
 * before it lets any member go, so work scheduled from any loop's final
 * drain aborts (tern__loop_sealed_failed) instead of landing on a loop
 * that is already gone or running it unnoticed. Each member then frees its
 * loop on its own thread: tern_loop_free drains once. A member that sees
 * `finished` takes the lock once before it leaves, since the member that
 * set it kicks every loop under the lock and may not have reached this one
 * yet (a member awake early sees the mark before its own kick).
 *
 * Setup. tern_group_start counts the members still in setup
 * (setup_left); each member thread, having claimed its loop, runs the
 * setup callbacks and then waits until the count is 0 (setup_barrier), so
 * no loop turns before every setup has returned. The wait takes part in a
 * pause, so a setup callback may pause the group.
 *
 * Broadcast. One record per broadcast, with one inbox node per member,
 * allocated at once (so a broadcast is queued on every member or on none)
 * and appended to every member's inbox under the lock, then the members
 * are kicked. A member runs its inbox between turns (run_inbox) and never
 * goes idle with it non-empty (idle_wait checks under the lock); the
 * member that brings the record's count to 0 runs done and frees it.
 * Broadcasts are accepted only while the state is RUNNING, under the same
 * lock shutdown changes it under: one accepted before is in every inbox
 * before phase one begins, and phase one cannot end until every inbox is
 * empty; one after is refused.
 *
 * Lock order: the group's lock, then (inside tern_loop_stop and
 * tern__inbound_pending) nothing that locks. pool/gate.c's park_lock is
 * taken only after the group's lock is released.
 */
#define _LGPL_SOURCE /* the reader's `registered` flag, as in rcu.c */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loop_p.h"
#include "os_thread.h"
#include "platform.h"
#include "qsbr.h"
#include "testing.h"

#define GROUP_MAGIC 0x67726f75u /* "grou" */
#define GROUP_MAX 1024
#define NAME_MAX_LEN 10 /* "<name>-<i>" fits a 16-byte thread name */
/* A teardown post refused for lack of memory is tried again this soon. */
#define TEARDOWN_RETRY_NS 1000000

enum { SIG_PAUSE = 1u << 0, SIG_SHUTDOWN = 1u << 1 };
enum group_state { STATE_NEW, STATE_RUNNING, STATE_SHUTDOWN, STATE_FINISHED };

struct teardown {
    tern_fn fn;
    void *arg;
};

struct setup {
    tern_group_fn fn;
    void *arg;
};

struct broadcast;
struct inbox_node {
    struct inbox_node *next;
    struct broadcast *b;
};

struct broadcast {
    tern_group_fn fn;
    tern_fn done;
    void *arg;
    _Atomic unsigned left;    /* members that have not run fn yet */
    struct inbox_node node[]; /* one per member */
};

struct member {
    tern_group *group;
    tern_loop *loop;
    unsigned index;
    int cpu; /* pin to this CPU; -1: do not pin */
    tern__thread_t thread;
    /* loop-only (the member's thread, or any thread before start) */
    struct teardown *teardown;
    unsigned teardown_len, teardown_cap;
    bool teardown_done;     /* its teardown post has begun */
    bool teardown_posted;   /* member thread only */
    bool stall_reported;    /* member thread only: the stall report ran */
    uint64_t shutdown_seen; /* member thread only: clock when it saw the shutdown */
    bool destroyed;         /* its thread freed the loop (read after join) */
    /* under the group's lock */
    struct inbox_node *inbox_head, *inbox_tail; /* broadcasts to run, in order */
    _Atomic bool inbox_full;                    /* inbox_head != NULL: read between turns */
    bool idle;
    unsigned parked_gen; /* the pause generation it last parked for */
};

struct tern_group {
    unsigned magic;
    unsigned n;
    char name[NAME_MAX_LEN + 1];
    bool started, waited; /* the starting thread's (start, wait, free) */
    struct setup *setup;  /* the starting thread's until start */
    /* the stall report (tern_group_on_stall): set before start, read by members */
    uint64_t stall_after;
    tern_group_stall_fn stall_fn;
    void *stall_arg;
    unsigned setup_len, setup_cap;

    tern__mutex_t lock;
    tern__cond_t cond; /* broadcast on every change below */
    /* under lock */
    enum group_state state;
    bool go, start_failed;
    uintptr_t pauser; /* thread token of the exclusive owner; 0: none */
    unsigned pause_gen;
    unsigned parked;     /* members parked for pause_gen */
    unsigned idle;       /* members idle in phase one */
    unsigned setup_left; /* members whose setup callbacks have not all returned */

    _Atomic unsigned signal; /* SIG_*: written under lock, read between turns */
    _Atomic bool finished;   /* phase one is over: destroy */

    struct member m[];
};

static _Thread_local struct member *current_member;

#define REQUIRE_GROUP(g) \
    TERN_REQUIRE_SAID((g) != NULL && (g)->magic == GROUP_MAGIC, "NULL or freed group")

/* ------------------------------------------------------------------ */
/* Creation                                                            */
/* ------------------------------------------------------------------ */

void tern_group_options_init(tern_group_options *opts)
{
    TERN_REQUIRE(opts != NULL);
    *opts = (tern_group_options){.loops = 0, .loop = NULL, .name = NULL, .pin = false};
}

int tern_group_new(tern_group **groupp, const tern_group_options *opts)
{
    TERN_REQUIRE(groupp != NULL);
    tern_group_options o;
    tern_group_options_init(&o);
    if (opts != NULL)
        o = *opts;
    int cpus[TERN__CPUS_MAX];
    unsigned ncpu = tern__cpus_usable(cpus, TERN__CPUS_MAX);
    unsigned n = o.loops != 0 ? o.loops : ncpu;
    if (n > GROUP_MAX || (o.name != NULL && strlen(o.name) > NAME_MAX_LEN))
        return -EINVAL;
    tern_loop_options lo;
    tern_loop_options_init(&lo);
    if (o.loop != NULL)
        lo = *o.loop;
    /* The group keeps its loops alive itself, until shutdown. */
    lo.flags &= ~(unsigned)TERN_LOOP_KEEPALIVE;

    tern_group *g = tern__calloc(1, sizeof(*g) + n * sizeof(g->m[0]));
    if (g == NULL)
        return -ENOMEM;
    g->n = n;
    int rc = 0;
    unsigned made;
    for (made = 0; made < n; made++) {
        struct member *m = &g->m[made];
        if ((rc = tern_loop_new(&m->loop, &lo)) < 0)
            break;
        m->loop->flags |= TERN__LOOP_HELD;
        m->group = g;
        m->index = made;
        m->cpu = o.pin ? cpus[made % ncpu] : -1;
    }
    if (rc < 0) {
        while (made-- > 0)
            tern_loop_free(g->m[made].loop);
        free(g);
        return rc;
    }
    snprintf(g->name, sizeof(g->name), "%s", o.name != NULL ? o.name : "tern");
    tern__mutex_init(&g->lock);
    tern__cond_init(&g->cond);
    g->state = STATE_NEW;
    g->stall_after = TERN_GROUP_STALL_DEFAULT_NS;
    g->magic = GROUP_MAGIC;
    *groupp = g;
    return 0;
}

unsigned tern_group_size(const tern_group *group)
{
    REQUIRE_GROUP(group);
    return group->n;
}

tern_loop *tern_group_loop(const tern_group *group, unsigned index)
{
    REQUIRE_GROUP(group);
    return index < group->n ? group->m[index].loop : NULL;
}

int tern_group_index(const tern_group *group)
{
    REQUIRE_GROUP(group);
    struct member *m = current_member;
    return m != NULL && m->group == group ? (int)m->index : -ENOENT;
}

int tern_group_on_shutdown(tern_group *group, unsigned index, tern_fn fn, void *arg)
{
    REQUIRE_GROUP(group);
    if (fn == NULL || index >= group->n)
        return -EINVAL;
    struct member *m = &group->m[index];
    TERN__LOOP_ONLY(m->loop);
    if (m->teardown_done)
        return -ESHUTDOWN;
    if (m->teardown_len == m->teardown_cap) {
        unsigned cap = m->teardown_cap ? 2 * m->teardown_cap : 4;
        struct teardown *t = tern__realloc(m->teardown, cap * sizeof(*t));
        if (t == NULL)
            return -ENOMEM;
        m->teardown = t;
        m->teardown_cap = cap;
    }
    m->teardown[m->teardown_len++] = (struct teardown){fn, arg};
    return 0;
}

int tern_group_on_setup(tern_group *group, tern_group_fn fn, void *arg)
{
    REQUIRE_GROUP(group);
    tern_group *g = group;
    if (fn == NULL || g->started)
        return -EINVAL;
    if (g->setup_len == g->setup_cap) {
        unsigned cap = g->setup_cap ? 2 * g->setup_cap : 4;
        struct setup *t = tern__realloc(g->setup, cap * sizeof(*t));
        if (t == NULL)
            return -ENOMEM;
        g->setup = t;
        g->setup_cap = cap;
    }
    g->setup[g->setup_len++] = (struct setup){fn, arg};
    return 0;
}

int tern_group_on_stall(tern_group *group, uint64_t after_ns, tern_group_stall_fn fn, void *arg)
{
    REQUIRE_GROUP(group);
    if (group->started)
        return -EINVAL;
    group->stall_after = after_ns;
    group->stall_fn = fn;
    group->stall_arg = arg;
    return 0;
}

/* Called in try_finish after `finished` is set, before the kick (runtime/core/testing.h). */
_Atomic(tern__group_finish_fn) tern__group_finishing;

/* ------------------------------------------------------------------ */
/* Waking members, RCU                                                 */
/* ------------------------------------------------------------------ */

/*
 * After a change to `signal` or `finished`: make every member (but skip)
 * leave its sleep or skip its next one. The release fence pairs with the
 * acquire exchange of stop_requested in run_member() and idle_wait().
 */
static void kick(tern_group *g, const struct member *skip)
{
    atomic_thread_fence(memory_order_release);
    for (unsigned i = 0; i < g->n; i++)
        if (&g->m[i] != skip)
            tern_loop_stop(g->m[i].loop);
}

/* Go RCU-offline for a wait if this thread is an online qsbr reader. */
static bool rcu_pause(void)
{
    if (!tern__qsbr_registered() || !tern__qsbr_read_ongoing())
        return false;
    tern__qsbr_offline();
    return true;
}

static void rcu_unpause(bool was_online)
{
    if (was_online)
        tern__qsbr_online();
}

/* ------------------------------------------------------------------ */
/* Exclusive mode                                                      */
/* ------------------------------------------------------------------ */

/*
 * With the lock held: take part in the pause another thread holds, if the
 * member has not yet, and wait until it ends (or a next one needs it).
 */
static void park_locked(struct member *m)
{
    tern_group *g = m->group;
    uintptr_t me = tern__thread_token();
    while (g->pauser != 0 && g->pauser != me && m->parked_gen != g->pause_gen) {
        unsigned gen = g->pause_gen;
        m->parked_gen = gen;
        g->parked++;
        tern__cond_broadcast(&g->cond);
        bool online = rcu_pause();
        while (g->pauser != 0 && g->pause_gen == gen)
            tern__cond_wait(&g->cond, &g->lock);
        rcu_unpause(online);
    }
}

int tern_group_pause(tern_group *group)
{
    REQUIRE_GROUP(group);
    tern_group *g = group;
    uintptr_t me = tern__thread_token();
    struct member *self =
        current_member != NULL && current_member->group == g ? current_member : NULL;
    if (tern__pool_on_bounded_worker())
        TERN_FATAL("tern_group_pause", "called from a bounded pool job: exclusive mode waits "
                                       "for every bounded job to end, this one included");
    tern__mutex_lock(&g->lock);
    if (g->state == STATE_NEW) {
        tern__mutex_unlock(&g->lock);
        return -EINVAL;
    }
    for (;;) {
        if (g->state != STATE_RUNNING) {
            tern__mutex_unlock(&g->lock);
            return -ESHUTDOWN;
        }
        if (g->pauser == me) {
            tern__mutex_unlock(&g->lock);
            return -EDEADLK;
        }
        if (g->pauser == 0)
            break;
        /* Another pause holds or is being taken: a member parks for it,
         * or that pauser would wait for us while we wait for it. */
        if (self != NULL)
            park_locked(self);
        else
            tern__cond_wait(&g->cond, &g->lock);
    }
    g->pauser = me;
    g->pause_gen++;
    g->parked = 0;
    atomic_fetch_or_explicit(&g->signal, SIG_PAUSE, memory_order_relaxed);
    tern__cond_broadcast(&g->cond); /* members waiting at the setup barrier park */
    kick(g, self);
    unsigned need = g->n - (self != NULL ? 1 : 0);
    while (g->parked < need)
        tern__cond_wait(&g->cond, &g->lock);
    tern__mutex_unlock(&g->lock);
    tern__pool_hold();
    return 0;
}

int tern_group_resume(tern_group *group)
{
    REQUIRE_GROUP(group);
    tern_group *g = group;
    tern__mutex_lock(&g->lock);
    bool mine = g->pauser == tern__thread_token();
    tern__mutex_unlock(&g->lock);
    if (!mine)
        TERN_FATAL("tern_group_resume", "called by a thread that does not hold the group's "
                                        "exclusive mode (only the thread that paused resumes)");
    tern__pool_unhold();
    tern__mutex_lock(&g->lock);
    g->pauser = 0;
    atomic_fetch_and_explicit(&g->signal, ~(unsigned)SIG_PAUSE, memory_order_relaxed);
    tern__cond_broadcast(&g->cond);
    tern__mutex_unlock(&g->lock);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Broadcast                                                           */
/* ------------------------------------------------------------------ */

int tern_group_broadcast(tern_group *group, tern_group_fn fn, tern_fn done, void *arg)
{
    REQUIRE_GROUP(group);
    tern_group *g = group;
    if (fn == NULL)
        return -EINVAL;
    struct broadcast *b = tern__malloc(sizeof(*b) + g->n * sizeof(b->node[0]));
    if (b == NULL)
        return -ENOMEM;
    b->fn = fn;
    b->done = done;
    b->arg = arg;
    atomic_init(&b->left, g->n);
    tern__mutex_lock(&g->lock);
    int rc = g->state == STATE_RUNNING ? 0 : g->state == STATE_NEW ? -EINVAL : -ESHUTDOWN;
    if (rc == 0) {
        for (unsigned i = 0; i < g->n; i++) {
            struct member *m = &g->m[i];
            b->node[i] = (struct inbox_node){.next = NULL, .b = b};
            if (m->inbox_tail != NULL)
                m->inbox_tail->next = &b->node[i];
            else
                m->inbox_head = &b->node[i];
            m->inbox_tail = &b->node[i];
            atomic_store_explicit(&m->inbox_full, true, memory_order_relaxed);
        }
        kick(g, NULL);
    }
    tern__mutex_unlock(&g->lock);
    if (rc < 0)
        free(b);
    return rc;
}

/*
 * Between turns, on the member's thread: run the broadcasts queued for it,
 * in order. The inbox is taken whole under the lock and run outside it, so
 * fn may broadcast, pause or shut down.
 */
static void run_inbox(struct member *m)
{
    tern_group *g = m->group;
    tern__mutex_lock(&g->lock);
    struct inbox_node *n = m->inbox_head;
    m->inbox_head = m->inbox_tail = NULL;
    atomic_store_explicit(&m->inbox_full, false, memory_order_relaxed);
    tern__mutex_unlock(&g->lock);
    while (n != NULL) {
        struct inbox_node *next = n->next;
        struct broadcast *b = n->b;
        b->fn(m->loop, m->index, b->arg);
        /* acq_rel: the last one sees every other member's fn done. */
        if (atomic_fetch_sub_explicit(&b->left, 1, memory_order_acq_rel) == 1) {
            if (b->done != NULL)
                b->done(m->loop, b->arg);
            free(b);
        }
        n = next;
    }
}

/* ------------------------------------------------------------------ */
/* Shutdown                                                            */
/* ------------------------------------------------------------------ */

int tern_group_shutdown(tern_group *group)
{
    REQUIRE_GROUP(group);
    tern_group *g = group;
    tern__mutex_lock(&g->lock);
    if (g->state == STATE_NEW || g->state == STATE_RUNNING) {
        g->state = STATE_SHUTDOWN;
        atomic_fetch_or_explicit(&g->signal, SIG_SHUTDOWN, memory_order_relaxed);
        tern__cond_broadcast(&g->cond); /* pausers waiting their turn: refused now */
        kick(g, NULL);
    }
    tern__mutex_unlock(&g->lock);
    return 0;
}

/* The teardown post: ordinary work in step 1 of the member's loop. */
static void teardown_post(tern_loop *loop, void *arg)
{
    struct member *m = arg;
    m->teardown_done = true; /* later registrations are refused */
    for (unsigned i = 0; i < m->teardown_len; i++)
        m->teardown[i].fn(loop, m->teardown[i].arg);
    loop->flags &= ~(unsigned)TERN__LOOP_HELD;
}

/*
 * With the lock held: if every member is idle and no inbound queue holds
 * anything, phase one is over. Seal every loop before any member may
 * leave, then let them go.
 */
static void try_finish(tern_group *g)
{
    if (g->idle < g->n)
        return;
    for (unsigned i = 0; i < g->n; i++)
        if (tern__inbound_pending(g->m[i].loop))
            return; /* that member was woken by it and will unmark itself */
    g->state = STATE_FINISHED;
    for (unsigned i = 0; i < g->n; i++) {
        atomic_store_explicit(&g->m[i].loop->sealed, true, memory_order_relaxed);
        /* seq_cst, as tern_loop_free's: pairs with tern_post's admission;
         * a poster that sees `closing` sees `sealed` too. */
        atomic_store_explicit(&g->m[i].loop->closing, true, memory_order_seq_cst);
    }
    atomic_store_explicit(&g->finished, true, memory_order_relaxed);
    tern__group_finish_fn hook = atomic_load_explicit(&tern__group_finishing, memory_order_relaxed);
    if (TERN_UNLIKELY(hook != NULL))
        hook(g);
    kick(g, NULL);
}

/*
 * Phase one, nothing live on this loop: be idle until a post (or a
 * cancel) arrives, or phase one ends. Returns true when it has ended.
 *
 * The sleep is the loop's own park protocol (inbound.c) on its wake-up
 * alone (tern__wake_sleep), without a turn: an idle member must not run a
 * callback, and unreferenced timers and watchers wait for the destroy
 * phase, which cancels them.
 */
static bool idle_wait(struct member *m)
{
    tern_group *g = m->group;
    tern_loop *loop = m->loop;
    tern__mutex_lock(&g->lock);
    if (tern__inbound_pending(loop) || m->inbox_head != NULL) {
        tern__mutex_unlock(&g->lock);
        return false;
    }
    m->idle = true;
    g->idle++;
    try_finish(g);
    tern__mutex_unlock(&g->lock);
    for (;;) {
        atomic_store_explicit(&loop->wake_state, TERN__WAKE_PARKING, memory_order_seq_cst);
        atomic_thread_fence(memory_order_seq_cst);
        if (!atomic_load_explicit(&loop->stop_requested, memory_order_relaxed) &&
            !tern__inbound_pending(loop)) {
            bool online = rcu_pause();
            tern__wake_sleep(&loop->wake, &loop->backend);
            rcu_unpause(online);
        }
        tern__loop_awake(loop);
        /* Pairs with the release fence in kick(). */
        atomic_exchange_explicit(&loop->stop_requested, false, memory_order_acquire);
        if (atomic_load_explicit(&g->finished, memory_order_relaxed)) {
            /* A wake from before the finish can show `finished` while
             * try_finish is still kicking the loops, this one perhaps
             * among them, under the lock. The caller frees the loop
             * next: wait until that kick is over. */
            tern__mutex_lock(&g->lock);
            tern__mutex_unlock(&g->lock);
            return true;
        }
        if (tern__inbound_pending(loop)) {
            tern__mutex_lock(&g->lock);
            bool finished = g->state == STATE_FINISHED;
            if (!finished) {
                m->idle = false;
                g->idle--;
            }
            tern__mutex_unlock(&g->lock);
            return finished;
        }
    }
}

/*
 * Phase one, on a member that still has live operations: once the stall
 * bound has passed since it saw the shutdown, say what keeps its loop
 * alive, once. Returns how long the next turn may wait (-1: as needed) so
 * that a loop held only by a far timer still wakes up to report.
 */
static int64_t stall_check(struct member *m)
{
    tern_group *g = m->group;
    if (m->stall_reported || g->stall_after == 0)
        return -1;
    uint64_t now = tern__clock_now();
    uint64_t waited = now - m->shutdown_seen;
    if (waited < g->stall_after) {
        uint64_t left = g->stall_after - waited;
        return left > INT64_MAX ? -1 : (int64_t)left;
    }
    m->stall_reported = true;
    if (g->stall_fn != NULL) {
        g->stall_fn(m->loop, m->index, waited, g->stall_arg);
        return -1;
    }
    fprintf(stderr,
            "tern: group %s, loop %u: shutdown has waited %" PRIu64
            " ms; what keeps the loop alive:\n",
            g->name, m->index, waited / 1000000);
    (void)tern_loop_print_live(m->loop, stderr);
    fflush(stderr);
    return -1;
}

/* ------------------------------------------------------------------ */
/* Member threads                                                      */
/* ------------------------------------------------------------------ */

static void run_member(struct member *m)
{
    tern_group *g = m->group;
    tern_loop *loop = m->loop;
    for (;;) {
        unsigned sig = atomic_load_explicit(&g->signal, memory_order_relaxed);
        if (TERN_UNLIKELY(sig != 0)) {
            if (sig & SIG_PAUSE) {
                tern__mutex_lock(&g->lock);
                park_locked(m);
                tern__mutex_unlock(&g->lock);
            }
            if ((sig & SIG_SHUTDOWN) && !m->teardown_posted) {
                if (m->shutdown_seen == 0)
                    m->shutdown_seen = tern__clock_now();
                m->teardown_posted = tern_post(loop, teardown_post, m) == 0;
            }
        }
        if (atomic_load_explicit(&m->inbox_full, memory_order_relaxed))
            run_inbox(m);
        if (!tern__loop_alive(loop)) {
            if (idle_wait(m))
                return;
            continue;
        }
        int64_t wait = -1;
        if (sig & SIG_SHUTDOWN)
            wait = m->teardown_posted ? stall_check(m) : TEARDOWN_RETRY_NS;
        tern__loop_turn(loop, wait);
        /* A stop is only a wake-up here. Pairs with the fence in kick(). */
        atomic_exchange_explicit(&loop->stop_requested, false, memory_order_acquire);
    }
}

/*
 * Before the first turn: run the setup callbacks, then wait until every
 * member has (taking part in any pause meanwhile, RCU-offline).
 */
static void run_setup(struct member *m)
{
    tern_group *g = m->group;
    for (unsigned i = 0; i < g->setup_len; i++)
        g->setup[i].fn(m->loop, m->index, g->setup[i].arg);
    tern__mutex_lock(&g->lock);
    if (--g->setup_left == 0)
        tern__cond_broadcast(&g->cond);
    while (g->setup_left > 0) {
        park_locked(m);
        if (g->setup_left == 0)
            break;
        bool online = rcu_pause();
        tern__cond_wait(&g->cond, &g->lock);
        rcu_unpause(online);
    }
    tern__mutex_unlock(&g->lock);
}

static void *member_main(void *arg)
{
    struct member *m = arg;
    tern_group *g = m->group;
    char name[16];
    snprintf(name, sizeof(name), "%s-%u", g->name, m->index);
    tern__thread_name(name);
    /* Best effort: an unpinned member still runs correctly. */
    if (m->cpu >= 0)
        (void)tern__thread_pin(m->cpu);
    tern__mutex_lock(&g->lock);
    while (!g->go && !g->start_failed)
        tern__cond_wait(&g->cond, &g->lock);
    bool go = g->go;
    tern__mutex_unlock(&g->lock);
    if (!go)
        return NULL;

    current_member = m;
    tern_loop *loop = m->loop;
    tern_loop *prev = tern__loop_claim(loop, "tern_group_start");
    tern__rcu_enter(loop);
    run_setup(m);
    run_member(m);
    tern__rcu_leave(loop);
    tern__loop_release(loop, prev);
    /* Phase two: the loop is sealed; the free drains it once. */
    tern_loop_free(loop);
    m->destroyed = true;
    current_member = NULL;
    return NULL;
}

int tern_group_start(tern_group *group)
{
    REQUIRE_GROUP(group);
    tern_group *g = group;
    if (current_member != NULL && current_member->group == g)
        TERN_FATAL("tern_group_start", "called from a loop thread of the same group");
    if (g->started)
        return -EINVAL;
    int rc = 0;
    unsigned made;
    for (made = 0; made < g->n; made++)
        if ((rc = tern__thread_create(&g->m[made].thread, member_main, &g->m[made])) < 0)
            break;
    tern__mutex_lock(&g->lock);
    if (rc < 0)
        g->start_failed = true;
    else {
        g->go = true;
        g->setup_left = g->n;
        if (g->state == STATE_NEW)
            g->state = STATE_RUNNING;
    }
    tern__cond_broadcast(&g->cond);
    tern__mutex_unlock(&g->lock);
    if (rc < 0) {
        /* The threads made so far leave without touching their loops. */
        for (unsigned i = 0; i < made; i++)
            tern__thread_join(g->m[i].thread, NULL);
        tern__mutex_lock(&g->lock);
        g->start_failed = false;
        tern__mutex_unlock(&g->lock);
        return rc;
    }
    g->started = true;
    return 0;
}

int tern_group_wait(tern_group *group)
{
    REQUIRE_GROUP(group);
    tern_group *g = group;
    if (current_member != NULL && current_member->group == g)
        TERN_FATAL("tern_group_wait", "called from a loop thread of the same group (it would "
                                      "wait for itself)");
    if (!g->started || g->waited)
        return -EINVAL;
    for (unsigned i = 0; i < g->n; i++)
        tern__thread_join(g->m[i].thread, NULL);
    g->waited = true;
    return 0;
}

void tern_group_free(tern_group *group)
{
    REQUIRE_GROUP(group);
    tern_group *g = group;
    if (g->started && !g->waited)
        TERN_FATAL("tern_group_free", "the group's threads still run (shut it down and "
                                      "tern_group_wait for it first)");
    for (unsigned i = 0; i < g->n; i++) {
        struct member *m = &g->m[i];
        if (!m->destroyed)
            tern_loop_free(m->loop); /* never started: an ordinary free */
        free(m->teardown);
        TERN_INSIST(m->inbox_head == NULL); /* broadcasts are accepted only while running */
    }
    free(g->setup);
    tern__cond_destroy(&g->cond);
    tern__mutex_destroy(&g->lock);
    /* Volatile: the block is freed next, so a plain store is dead to the
     * compiler, and a later call on the freed group must fail its check. */
    *(volatile unsigned *)&g->magic = 0;
    free(g);
}
