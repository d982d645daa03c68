/*
 * The books audit (TERN_CHECK_BOOKS, loop_p.h): every counter the loop
 * keeps is compared with what it counts, after every turn.
 */
#include "job_p.h"
#include "loop_p.h"
#include "testing.h"

#define BOOKS(cond, what) \
    ((cond) ? (void)0 : tern__check_failed(__FILE__, __LINE__, __func__, "BOOKS", what))

void tern__loop_check_books(tern_loop *loop)
{
    BOOKS(loop->undelivered <= loop->max_undelivered, "undelivered > max_undelivered");
    BOOKS(loop->ops_local == loop->ids.count + loop->anon + loop->tabled + loop->timers.live,
          "live operations (ops_local) != id map count + anonymous ops + jobs + live timers");
    BOOKS(atomic_load_explicit(&loop->ops_count, memory_order_relaxed) == loop->ops_local,
          "published ops_count != ops_local");
    BOOKS(loop->refs <= loop->ops_local, "refs > live operations");
    BOOKS(loop->heap.len <= loop->heap.claims, "heap entries > heap claims");
    BOOKS(loop->timers.due_live <= loop->timers.live, "due timers > live timers");
    unsigned queued = 0;
    for (struct tern__op *op = loop->ready_head; op != NULL; op = op->ready_next)
        queued += !(op->flags & TERN__OP_DEAD);
    BOOKS(queued == loop->ready_count, "ready_count != live ops on the ready queue");
    BOOKS(atomic_load_explicit(&loop->posted, memory_order_relaxed) >=
              atomic_load_explicit(&loop->posts_done, memory_order_relaxed),
          "posts_done > posted");
    tern__jobs_check_books(loop);
}
