/*
 * What the loop reads of net/ where net/ is not built (Windows, until
 * streams and lookups are built there): tern_loop_new fills the stream
 * classes and the lookup expiry from here, and the turn calls the
 * backend-read signal delivery (kqueue's).
 * None of it can be reached: no stream or lookup can be made without net/
 * (its public calls are not in the library), and the IOCP backend reports
 * no signals (console control events reach the signal watchers through
 * signal_win.c's posts instead). Reaching one anyway is a bug in tern, so
 * each aborts naming it rather than doing nothing.
 */
#include "job_p.h"
#include "loop_p.h"

static noreturn void unreachable_dispatch(tern_loop *loop, struct tern__op *op)
{
    (void)loop;
    (void)op;
    TERN_FATAL(__func__, "a stream op on a build without net/");
}

static int unreachable_cancel(tern_loop *loop, struct tern__op *op)
{
    unreachable_dispatch(loop, op);
    return -ENOENT; /* not reached */
}

static void unreachable_free(tern_loop *loop, struct tern__op *op)
{
    unreachable_dispatch(loop, op);
}

const struct tern__op_class tern__stream_class = {
    .name = "stream (not built)",
    .dispatch = unreachable_dispatch,
    .cancel = unreachable_cancel,
    .free = unreachable_free,
};

const struct tern__op_class tern__stream_deadline_class = {
    .name = "stream deadline (not built)",
    .dispatch = unreachable_dispatch,
    .cancel = unreachable_cancel,
    .free = unreachable_free,
};

void tern__lookup_expired(tern_loop *loop, tern_job *job)
{
    (void)loop;
    (void)job;
    TERN_FATAL(__func__, "a lookup's deadline on a build without net/");
}

void tern__signal_fired(tern_loop *loop, int signo, unsigned count)
{
    (void)loop;
    (void)signo;
    (void)count;
    TERN_FATAL(__func__, "a signal delivery on a build without net/");
}
