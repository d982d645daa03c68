/*
 * Refusals (include/tern/admission.h): a resource refusal's cause, kept
 * for tern_loop_last_refusal and counted process-wide, and the causes'
 * names, from the one list TERN_REFUSAL_MAP.
 */
#include <errno.h>

#include "job_p.h"
#include "probe.h"

/*
 * A resource refusal: -EAGAIN, its cause kept for tern_loop_last_refusal
 * and counted in the pool's statistics, every cause of TERN_REFUSAL_MAP
 * (an owner's cap is also counted on the owner). The queue, the long
 * ceiling, a shutdown and a refused thread are decided inside
 * tern__pool_accept, at the one instant a slot or a thread is taken;
 * every cause is counted here.
 */
int tern__refuse_n(tern_loop *loop, tern_refusal cause, unsigned n)
{
    TERN_INSIST(cause > TERN_REFUSED_NONE && (unsigned)cause < TERN__REFUSAL_SLOTS);
    atomic_fetch_add_explicit(&tern__pool_stats.refused[cause], n, memory_order_relaxed);
    loop->last_refusal = cause;
    TERN_PROBE(job_refused, loop, (int)cause, tern_refusal_name(cause), n);
    return -EAGAIN;
}

int tern__refuse(tern_loop *loop, tern_refusal cause)
{
    return tern__refuse_n(loop, cause, 1);
}

int tern__refuse_operations(tern_loop *loop)
{
    return tern__refuse(loop, TERN_REFUSED_OPERATIONS);
}

tern_refusal tern_loop_last_refusal(const tern_loop *loop)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    return (tern_refusal)loop->last_refusal;
}

const char *tern_refusal_name(tern_refusal refusal)
{
    switch (refusal) {
    case TERN_REFUSED_NONE:
        return "none";
#define NAME(name, short_name, value) \
    case name:                        \
        return #short_name;
        TERN_REFUSAL_MAP(NAME)
#undef NAME
    }
    return "?";
}
