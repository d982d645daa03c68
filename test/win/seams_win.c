/*
 * The test seams (runtime/core/testing.h) the Windows programs reach, for
 * the Windows build. runtime/loop/seams.c defines them all for the POSIX
 * builds, but it also reaches the process kinds, which Windows does not
 * build yet; each definition here reads the same field that one does.
 */
#include "loop_p.h"
#include "testing.h"

int tern__loop_step(const tern_loop *loop)
{
    return loop->step;
}
