/*
 * The process-wide registries of chunk numbers (op_types.h): the numbers that
 * timer ids (timer_table.c) and job ids (job_slab.c) carry, so that a
 * (number, offset, generation) triple is issued once in the process.
 * A number belongs to one loop's chunk at a time; the loop gives it back
 * with a floor, the highest generation any slot of the chunk reached, and
 * the next owner starts every slot there. A number returned with a floor
 * past half the generations is burned (never handed out again) instead.
 *
 * Taken only when a loop adds a chunk or is freed. The lists of returned
 * numbers hold at most the process's peak count of chunks; they are freed
 * at exit.
 */
#include <errno.h>
#include <stdlib.h>

#include "loop_p.h"
#include "os_thread.h"

#define GEN_BURN (TERN__GEN_LIMIT / 2)

struct tern__numbers tern__timer_numbers = {.lock = TERN__MUTEX_INIT,
                                            .limit = UINT32_C(1) << TERN__TIMER_NO_BITS};
struct tern__numbers tern__job_numbers = {.lock = TERN__MUTEX_INIT,
                                          .limit = UINT32_C(1) << TERN__JOB_NO_BITS};

/* fork(): never let the child inherit a lock held by a vanished thread. */
static void before_fork(void)
{
    tern__mutex_lock(&tern__timer_numbers.lock);
    tern__mutex_lock(&tern__job_numbers.lock);
}

static void after_fork(void)
{
    tern__mutex_unlock(&tern__job_numbers.lock);
    tern__mutex_unlock(&tern__timer_numbers.lock);
}

__attribute__((constructor)) static void numbers_fork_handlers(void)
{
    tern__atfork(before_fork, after_fork, after_fork);
}

static void release(struct tern__numbers *r)
{
    tern__mutex_lock(&r->lock);
    free(r->back);
    r->back = NULL;
    r->back_len = r->back_cap = 0;
    tern__mutex_unlock(&r->lock);
}

/* Give the lists back at exit, so the process ends valgrind-clean. */
__attribute__((destructor)) static void numbers_free(void)
{
    release(&tern__timer_numbers);
    release(&tern__job_numbers);
}

int tern__numbers_take(struct tern__numbers *r, uint32_t *no, uint32_t *floor)
{
    int rc = 0;
    tern__mutex_lock(&r->lock);
    if (r->back_len > 0) {
        struct tern__numbers_returned back = r->back[--r->back_len];
        *no = back.no;
        *floor = back.floor;
    } else if (r->fresh < r->limit) {
        *no = r->fresh++;
        *floor = 0;
    } else {
        rc = -ENOMEM;
    }
    tern__mutex_unlock(&r->lock);
    return rc;
}

void tern__numbers_give_back(struct tern__numbers *r, uint32_t no, uint32_t floor)
{
    if (floor > GEN_BURN)
        return; /* burned: never handed out again */
    tern__mutex_lock(&r->lock);
    if (r->back_len == r->back_cap) {
        size_t ncap = r->back_cap ? 2 * r->back_cap : 64;
        /* A failure here only burns the number. */
        struct tern__numbers_returned *v = tern__realloc(r->back, ncap * sizeof(*v));
        if (v != NULL) {
            r->back = v;
            r->back_cap = ncap;
        }
    }
    if (r->back_len < r->back_cap)
        r->back[r->back_len++] = (struct tern__numbers_returned){no, floor};
    tern__mutex_unlock(&r->lock);
}
