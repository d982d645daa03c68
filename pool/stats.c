/*
 * The statistics counters' one home, below every file that writes them:
 * the gauges, the slot word, the outcomes. Each writer steps its own
 * counters with the calls in stats.h or a relaxed add of its own.
 */
#include "stats.h"

struct tern__pool_counters tern__pool_stats;
_Thread_local uint64_t tern__outcomes_due[TERN__OUTCOME_KINDS]
    __attribute__((tls_model("initial-exec")));

void tern__outcomes_add(void)
{
    _Atomic uint64_t *to[TERN__OUTCOME_KINDS] = {
        [TERN__OUTCOME_COMPLETED] = &tern__pool_stats.completed,
        [TERN__OUTCOME_CANCELLED] = &tern__pool_stats.cancelled,
        [TERN__OUTCOME_TIMED_OUT] = &tern__pool_stats.timed_out,
    };
    for (unsigned k = 0; k < TERN__OUTCOME_KINDS; k++) {
        if (tern__outcomes_due[k] != 0)
            atomic_fetch_add_explicit(to[k], tern__outcomes_due[k], memory_order_relaxed);
        tern__outcomes_due[k] = 0;
    }
}
