/*
 * The bounded class's queue: admission, the ring, and the wake of a
 * parked worker. The workers that take from it are worker.c's.
 *
 * The queue is backends/ring.h's ring, with consumers competing by CAS on the
 * head (a queue_capacity of 2^31 costs what is used). Admission is a
 * separate counter checked before the job is enqueued, so a full queue
 * refuses before the work exists anywhere, and the ring — sized to the
 * next power of two — is never full (ring.h's full-slot rule: a slot's
 * count is given back only after its cell was freed).
 *
 * Lanes. A loop admits the jobs its callbacks submit in steps 1 and 2
 * of a turn one by one, but holds them back in its lane (pool.h) and
 * pushes them as one run at the turn's kick, or as soon as a worker's run
 * of them has gathered: the ring's tail and cells are written once per
 * run, and a worker takes a run instead of racing the loop job by job.
 *
 * Parking. A worker that finds nothing spins briefly (a job that arrives
 * during the spin is cheaper to catch than to be woken for: a cross-core
 * wake measured about 20 µs; docs/performance.md has the figures),
 * then parks on a condition variable after announcing itself in
 * `sleepers`. A submitter signals only when someone sleeps and no wake is
 * already on its way (`waking`); the woken worker clears `waking` and, if
 * it leaves work behind, wakes the next. A burst of submissions thus costs
 * one signal, not one per job.
 *
 * Tombstones. A job stopped while queued stays in the ring until a worker
 * skips it, but it gives its slot back at once (stats.h): owners that
 * cancel what they queued must not find the queue full of work nobody
 * wants. The ring is sized for the capacity plus as many tombstones
 * (tern__queue_room), and admission also keeps live slots plus tombstones
 * within that room, so while every worker is stuck, cancelled work can
 * fill the queue only once more before submissions are refused (a full
 * queue, truly: its cells are taken) until a worker skips the tombstones.
 */
#include <errno.h>

#include "bounded.h"
#include "clock.h"
#include "pool_p.h"
#include "spin.h"
#include "stops.h"

/*
 * Take a job off the ring. Its slot is settled by whoever claims it
 * (tern__queue_claim), after its cell is freed: ring.h's full-slot rule.
 */
uint64_t tern__pool_wake_at;

struct tern__run tern__pool_runs[TERN__WORKER_SLOTS];
/* The per-worker slots and the shape that says which are in use (bounded.h). */
struct tern__worker_figures tern__pool_workers[TERN__WORKER_SLOTS];
struct tern__pool_shape tern__pool_shape;
_Atomic bool tern__pool_waking;

struct tern__work *tern__bounded_take(struct tern__pool *p)
{
    return tern__ring_pop(&p->queue);
}

unsigned tern__bounded_take_run(struct tern__pool *p, struct tern__work **jobs)
{
    /*
     * The share (bounded.h): a run that would leave idle workers nothing
     * while it waits behind this worker's jobs is cut to this worker's
     * part of what is ready. Relaxed snapshots: the rule only sizes the
     * run, every entry is still taken by the ring's own protocol.
     */
    uint64_t ready = tern__ring_count(&p->queue);
    uint64_t idle = atomic_load_explicit(&p->sleepers, memory_order_relaxed) +
                    atomic_load_explicit(&p->spinners, memory_order_relaxed);
    uint64_t share = ready / (idle + 1);
    unsigned max = share >= TERN__TAKE_MAX ? TERN__TAKE_MAX : share == 0 ? 1 : (unsigned)share;
    return tern__ring_pop_many(&p->queue, (void **)jobs, max);
}

/* Give back n queued slots that were owed (one step; release, as tern__slots_leave). */
static void repay_slots(uint64_t n)
{
    uint64_t before = atomic_fetch_sub_explicit(&tern__pool_stats.queued, n * TERN__SLOT_QUEUED,
                                                memory_order_release);
    if (TERN_UNLIKELY(tern__slots_queued(before) < n))
        tern__check_failed(__FILE__, __LINE__, __func__, "COUNTER", "queued went below zero");
}

/*
 * Repaying owed slots is two steps on two words: the settled count moves
 * up to what was claimed, then the queued word goes down by as much. In
 * between, the slots are neither owed nor free, and an admission that
 * looked then would refuse for room the queue has. So the settled count
 * carries a mark while its repayment is on the way: whoever meets the
 * mark waits the few instructions until the one repaying clears it, and
 * then sees the queued word already down.
 */
#define REPAYING (UINT64_C(1) << 63)

/* The settled count, once no repayment of it is on the way (acquire). */
static uint64_t settled_now(struct tern__owed *owed)
{
    uint64_t settled = atomic_load_explicit(&owed->settled, memory_order_relaxed);
    if (TERN_UNLIKELY(settled & REPAYING))
        tern__stop_point(TERN__STOP_REPAYMENT_WAITED); /* a test holds this thread here */
    for (unsigned i = 1;
         (settled = atomic_load_explicit(&owed->settled, memory_order_acquire)) & REPAYING; i++) {
        /* The repayer may be off its CPU: let it run rather than spin for a time slice. */
        if (i % 64 == 0)
            tern__thread_yield();
        else
            tern__spin_pause();
    }
    return settled;
}

/*
 * Repay what owed holds: move `settled` up to what was claimed, marked,
 * give the slots back to the queued word, then clear the mark. Returns
 * how many slots that gave back (0: none owed, or another repaid them).
 * Any thread: the worker at the end of a run (worker), an admission
 * about to refuse (reclaim_owed); each claimed slot is given back once.
 */
static uint64_t settle(struct tern__owed *owed, bool worker)
{
    uint64_t settled = settled_now(owed);
    for (;;) {
        /*
         * Claimed is read after settled, each time round: another may have
         * settled up to a claim made since this thread last looked, and
         * settled must never move back. Acquiring the settled count a
         * release set makes the claimed count read next at least as new
         * as the one it was set to.
         */
        uint64_t claimed = atomic_load_explicit(&owed->claimed, memory_order_relaxed);
        if (settled == claimed)
            return 0;
        if (atomic_compare_exchange_weak_explicit(&owed->settled, &settled, settled | REPAYING,
                                                  memory_order_acq_rel, memory_order_acquire)) {
            /* A test holds the worker here: one relaxed load a run when disarmed. */
            if (worker)
                tern__stop_point(TERN__STOP_WORKER_REPAYING);
            repay_slots(claimed - settled);
            /* Release: whoever sees the mark gone sees the queued word down. */
            atomic_store_explicit(&owed->settled, claimed, memory_order_release);
            return claimed - settled;
        }
        if (settled & REPAYING)
            settled = settled_now(owed);
    }
}

void tern__bounded_repay(struct tern__owed *owed)
{
    (void)settle(owed, true);
}

void tern__bounded_put_back(struct tern__pool *p, struct tern__work *const *jobs, unsigned n)
{
    if (n == 0)
        return;
    tern__ring_push_many(&p->queue, (void *const *)jobs, n);
}

/*
 * Sum (take: and repay) the owed counts of every worker slot the
 * running pool uses (its shape, bounded.h: none once it is shut down).
 * A repayment met on its way is waited out, unless `marked` is given:
 * then it is left out of the sum and *marked set.
 */
static uint64_t each_owed(bool take, bool *marked)
{
    unsigned fixed, n = tern__runs_in_use(&fixed);
    uint64_t sum = 0;
    for (unsigned i = 0; i < n; i++) {
        unsigned slot = tern__worker_slot(i, fixed);
        struct tern__owed *owed = &tern__pool_workers[slot].owed;
        if (take) {
            sum += settle(owed, false);
            continue;
        }
        /* settled first: it never passes a claimed count read after it (settle) */
        uint64_t settled;
        if (marked == NULL) {
            settled = settled_now(owed);
        } else {
            settled = atomic_load_explicit(&owed->settled, memory_order_acquire);
            if (settled & REPAYING) {
                *marked = true;
                continue;
            }
        }
        sum += atomic_load_explicit(&owed->claimed, memory_order_relaxed) - settled;
    }
    return sum;
}

uint64_t tern__bounded_queued(uint64_t *slots)
{
    /*
     * The slot word less the slots workers owe for jobs they already
     * claimed. Read until the word holds still around the owed counts, so
     * a repayment between the reads is not counted twice or missed; a few
     * tries, then the last reading (a moment apart, as every figure is).
     */
    uint64_t word = atomic_load_explicit(&tern__pool_stats.queued, memory_order_acquire);
    uint64_t owed = 0;
    for (int tries = 0; tries < 4; tries++) {
        owed = each_owed(false, NULL);
        uint64_t again = atomic_load_explicit(&tern__pool_stats.queued, memory_order_acquire);
        if (again == word)
            break;
        word = again;
    }
    *slots = word;
    unsigned queued = tern__slots_queued(word);
    return owed >= queued ? 0 : queued - owed;
}

/*
 * An admission about to refuse takes back the slots the workers owe:
 * their jobs have left the queue (claimed, their cells freed), so the
 * slots are free; only their repayment was put off. A repayment already
 * on its way is waited for (settle), so its slots count as free too.
 */
static void reclaim_owed(void)
{
    (void)each_owed(true, NULL);
}

void tern__bounded_wake_one(struct tern__pool *p)
{
    /* Pairs with the seq_cst increment of `sleepers` in park() (worker.c). */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&p->sleepers, memory_order_relaxed) == 0)
        return;
    /* A spinning worker will take the job, and wake the next if need be. */
    if (atomic_load_explicit(&p->spinners, memory_order_relaxed) > 0)
        return;
    if (atomic_exchange_explicit(&tern__pool_waking, true, memory_order_relaxed))
        return; /* a wake is on its way; that worker passes it on */
    /*
     * Under the lock, `sleepers` counts exactly the workers inside
     * pthread_cond_wait, so a signal sent here reaches one of them and that
     * worker clears `waking`. If they all left meanwhile, clear it here:
     * left set with nobody to clear it, no submission would wake again.
     */
    tern__mutex_lock(&p->park_lock);
    if (atomic_load_explicit(&p->sleepers, memory_order_relaxed) > 0) {
#ifdef TERN_FIGURES
        tern__pool_wake_at = tern__ticks(); /* the woken worker's wake latency starts */
#endif
        tern__cond_signal(&p->park_cond);
    } else
        atomic_store_explicit(&tern__pool_waking, false, memory_order_relaxed);
    tern__mutex_unlock(&p->park_lock);
}

void tern__bounded_wake_all(struct tern__pool *p)
{
    tern__mutex_lock(&p->park_lock);
    tern__cond_broadcast(&p->park_cond);
    tern__mutex_unlock(&p->park_lock);
}

/*
 * Take up to n queued slots, at least `least`, while queued + reserved
 * stays within capacity; returns how many were taken (0: refused). A
 * compare-and-swap rather than an add and an undo: a refused submission
 * must never make the count, even for an instant, exceed what a reader
 * may observe (SPEC §13).
 */
static unsigned take_slots(struct tern__pool *p, unsigned n, unsigned least, uint64_t *after)
{
    uint64_t cap = p->cfg.queue_capacity, room = tern__queue_room(&p->cfg);
    /*
     * Acquire, then the tombstones: a slot a stop gave back (a release)
     * is seen here only with the tombstone it counted first, so the sum
     * never understates what the ring holds.
     */
    uint64_t s = atomic_load_explicit(&tern__pool_stats.queued, memory_order_acquire);
    bool reclaimed = false;
    uint64_t k;
    for (;;) {
        uint64_t used = (uint64_t)tern__slots_queued(s) + tern__slots_reserved(s);
        uint64_t in_ring =
            used + atomic_load_explicit(&tern__pool_stats.tombstones, memory_order_relaxed);
        uint64_t free = used >= cap ? 0 : cap - used;
        if (in_ring >= room)
            free = 0;
        else if (room - in_ring < free)
            free = room - in_ring;
        k = free < n ? free : n;
        if (k < least) {
            /*
             * Slots the workers owe are free: take them back once (and
             * wait out any repayment on its way), then look again.
             */
            if (!reclaimed) {
                reclaimed = true;
                reclaim_owed();
                s = atomic_load_explicit(&tern__pool_stats.queued, memory_order_acquire);
                continue;
            }
            /*
             * Counted by the client (runtime/jobs/job.c, refuse); over the
             * room, tombstones fill the ring: full until a worker skips them.
             */
            return 0;
        }
        if (atomic_compare_exchange_weak_explicit(&tern__pool_stats.queued, &s,
                                                  s + k * TERN__SLOT_QUEUED, memory_order_acquire,
                                                  memory_order_acquire))
            break;
    }
    *after = s + k * TERN__SLOT_QUEUED;
    return (unsigned)k;
}

/*
 * The peak is of `queued` as the statistics give it: the slot word counts
 * the slots workers owe for jobs already running too, so a word above the
 * peak is only a hint, and the figure is read (as tern__bounded_queued
 * reads it) before it is kept. A submission does not wait for a worker's
 * repayment for a figure: one met on its way, or a word that moved, and
 * this reading is let go (the peak may miss it, as racing peaks may).
 */
static void note_peak(uint64_t slots)
{
    unsigned peak = atomic_load_explicit(&tern__pool_stats.queued_peak, memory_order_relaxed);
    if (tern__slots_queued(slots) <= peak)
        return;
    uint64_t word = atomic_load_explicit(&tern__pool_stats.queued, memory_order_acquire);
    bool marked = false;
    uint64_t owed = each_owed(false, &marked);
    if (marked || atomic_load_explicit(&tern__pool_stats.queued, memory_order_acquire) != word)
        return;
    unsigned q = tern__slots_queued(word);
    q = owed >= q ? 0 : q - (unsigned)owed;
    if (q > peak)
        atomic_store_explicit(&tern__pool_stats.queued_peak, q, memory_order_relaxed);
}

_Atomic uint64_t tern__pool_wake_checks;

/* The wake decision owed for submissions just queued. */
static void submitted_wake(struct tern__pool *p)
{
    atomic_fetch_add_explicit(&tern__pool_wake_checks, 1, memory_order_relaxed);
    tern__bounded_wake_one(p);
}

/* Put an admitted job into the ring and wake a worker if one sleeps. */
static void enqueue(struct tern__pool *p, struct tern__work *job)
{
    tern__ring_push(&p->queue, job); /* admitted: never full (ring.h) */
    submitted_wake(p);
}

/*
 * This thread's lanes holding jobs, most recently opened first. A loop's
 * callback may run another loop's turn, so there can be more than one;
 * tern_pool_shutdown called from such a callback must push them all, and
 * only this thread can find them. One word of initial-exec TLS.
 */
static _Thread_local struct tern__lane *open_lanes __attribute__((tls_model("initial-exec")));

static void lane_close(struct tern__lane *lane)
{
    struct tern__lane **at = &open_lanes;
    while (*at != lane) {
        TERN_INSIST(*at != NULL); /* an open lane is on its thread's list */
        at = &(*at)->next;
    }
    *at = lane->next;
    lane->next = NULL;
    lane->n = 0;
    lane->credit = 0;
}

void tern__lane_flush(struct tern__lane *lane)
{
    if (lane->n == 0)
        return;
    /* Admitted, each on its own slot: the ring has room for them all (ring.h). */
    tern__ring_push_many(&lane->pool->queue, (void *const *)lane->held, lane->n);
    uint64_t slots;
    if (lane->credit > 0) {
        /* The credit not spent: its slots and units go back. */
        slots = atomic_fetch_sub_explicit(&tern__pool_stats.queued,
                                          lane->credit * TERN__SLOT_QUEUED, memory_order_release) -
                lane->credit * TERN__SLOT_QUEUED;
        tern__pool_leave_n(lane->credit);
    } else
        slots = atomic_load_explicit(&tern__pool_stats.queued, memory_order_relaxed);
    note_peak(slots);
    atomic_fetch_add_explicit(&tern__pool_stats.submitted, lane->n, memory_order_relaxed);
    lane->want = lane->n;
    lane_close(lane);
}

void tern__lanes_flush_open(void)
{
    while (open_lanes != NULL)
        tern__lane_flush(open_lanes);
}

void tern__lanes_forget_open(void)
{
    while (open_lanes != NULL)
        lane_close(open_lanes);
}

/* Open an empty lane on this thread for jobs admitted into p. */
static void lane_open(struct tern__pool *p, struct tern__lane *lane)
{
    if (lane->n == 0) {
        lane->pool = p;
        lane->next = open_lanes;
        open_lanes = lane;
    }
    /* Its held jobs' units keep the lane's pool running: it is the one admitting. */
    TERN_INSIST(lane->pool == p);
}

int tern__bounded_submit(struct tern__pool *p, struct tern__work *job)
{
    uint64_t after;
    if (take_slots(p, 1, 1, &after) == 0)
        return -EAGAIN;
    note_peak(after);
    enqueue(p, job);
    return 0;
}

unsigned tern__lane_credit_wanted(const struct tern__lane *lane)
{
    if (lane->credit > 0)
        return 0;
    unsigned room = TERN__LANE_MAX - lane->n;
    unsigned k = lane->n == 0 ? (lane->want > 0 ? lane->want : 1) : lane->n;
    return k < room ? k : room;
}

int tern__bounded_submit_lane(struct tern__pool *p, struct tern__work *job, struct tern__lane *lane,
                              unsigned fresh)
{
    if (fresh > 0) {
        uint64_t after;
        unsigned got = take_slots(p, fresh, 1, &after);
        if (got == 0)
            return -EAGAIN; /* the caller gives the fresh units back */
        if (got < fresh)
            tern__pool_leave_n(fresh - got);
        lane->credit = got;
    }
    lane_open(p, lane);
    tern__lane_spend(lane, job); /* the caller kicks later (pool.h) */
    return 0;
}

int tern__bounded_submit_batch(struct tern__pool *p, struct tern__work *const *jobs, unsigned n,
                               struct tern__lane *lane)
{
    /*
     * What the caller submitted before goes first, and the lane's unspent
     * credit goes back with it before the batch asks for room: a loop is
     * never refused for slots it holds itself. Its held jobs are admitted
     * already, so pushing them now changes nothing if the batch is refused.
     */
    if (lane != NULL)
        tern__lane_flush(lane);
    uint64_t after;
    if (take_slots(p, n, n, &after) == 0)
        return -EAGAIN;
    note_peak(after);
    /* One run of ring positions for the batch (admitted: never full). */
    tern__ring_push_many(&p->queue, (void *const *)jobs, n);
    if (lane == NULL)
        submitted_wake(p); /* else the caller kicks later (pool.h) */
    return 0;
}

void tern__bounded_kick(struct tern__pool *p)
{
    if (tern__bounded_ready(p))
        submitted_wake(p);
}

void tern__bounded_submit_reserved(struct tern__pool *p, struct tern__work *job)
{
    /* The reservation becomes the queued slot in one add: never refused. */
    uint64_t before = atomic_fetch_add_explicit(
        &tern__pool_stats.queued, TERN__SLOT_QUEUED - TERN__SLOT_RESERVED, memory_order_relaxed);
    TERN_INSIST(tern__slots_reserved(before) > 0);
    note_peak(before + TERN__SLOT_QUEUED - TERN__SLOT_RESERVED);
    /*
     * Stoppable from here (steps.c says why release): a stop that
     * tombstones it now gives back the slot just queued.
     */
    atomic_store_explicit(&job->state, TERN__WORK_QUEUED, memory_order_release);
    enqueue(p, job);
}

void tern__bounded_unreserve(void)
{
    uint64_t before = atomic_fetch_sub_explicit(&tern__pool_stats.queued, TERN__SLOT_RESERVED,
                                                memory_order_relaxed);
    TERN_INSIST(tern__slots_reserved(before) > 0);
}

void tern__bounded_drain(struct tern__pool *p, void (*fn)(struct tern__work *job))
{
    struct tern__work *job;
    while ((job = tern__bounded_take(p)) != NULL)
        fn(job); /* which settles its slot */
    /* And what workers' runs hold that their owners have not reached. */
    unsigned fixed, n = tern__runs_in_use(&fixed);
    for (unsigned i = 0; i < n; i++)
        while ((job = tern__run_take(tern__run_at(i, fixed))) != NULL)
            fn(job);
}
