/*
 * Terminal modes (include/tern/net.h: tern_tty_set_mode): normal mode on
 * a terminal tern never made raw changes nothing; a raw mode that cannot
 * keep the terminal's first settings (no memory) is refused and leaves the
 * terminal as it was, and the next try keeps and restores them. The raw
 * and window-size round trip itself is pipe_test's.
 */
#include "loop_helpers.h"

#include <sys/ioctl.h>
#include <termios.h>

static int open_pty(int *master)
{
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    cr_assert_geq(m, 0);
    cr_assert_eq(grantpt(m), 0);
    cr_assert_eq(unlockpt(m), 0);
    int t = open(ptsname(m), O_RDWR | O_NOCTTY);
    cr_assert_geq(t, 0);
    *master = m;
    return t;
}

static bool same_mode(const struct termios *a, const struct termios *b)
{
    return a->c_iflag == b->c_iflag && a->c_oflag == b->c_oflag && a->c_cflag == b->c_cflag &&
           a->c_lflag == b->c_lflag;
}

Test(tty, normal_mode_first_changes_nothing, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    int m;
    int t = open_pty(&m);
    struct termios before, now;
    cr_assert_eq(tcgetattr(t, &before), 0);
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, t, &id), 0);
    cr_assert_eq(tern_tty_set_mode(loop, id, TERN_TTY_NORMAL), 0);
    cr_assert_eq(tcgetattr(t, &now), 0);
    cr_assert(same_mode(&before, &now), "normal mode changed a terminal never made raw");
    int keep = dup(t);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert_eq(tcgetattr(keep, &now), 0);
    cr_assert(same_mode(&before, &now), "closing changed a terminal never made raw");
    close(keep);
    close(m);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}

Test(tty, raw_without_memory_is_refused_and_changes_nothing, .timeout = TEST_TIMEOUT)
{
    tern_loop *loop = loop_new_default();
    int m;
    int t = open_pty(&m);
    struct termios before, now;
    cr_assert_eq(tcgetattr(t, &before), 0);
    tern_id id;
    cr_assert_eq(tern_stream_open(loop, t, &id), 0);
    tern__fault_arm(TERN__FAULT_ALLOC, 1);
    int rc = tern_tty_set_mode(loop, id, TERN_TTY_RAW);
    bool fired = tern__fault_fired();
    tern__fault_arm(0, 0);
    cr_assert(fired, "raw mode allocated nothing to keep the first settings in");
    cr_assert_eq(rc, -ENOMEM);
    cr_assert_eq(tcgetattr(t, &now), 0);
    cr_assert(same_mode(&before, &now), "a refused raw mode changed the terminal");
    /* Then it works, and closing puts the first settings back. */
    cr_assert_eq(tern_tty_set_mode(loop, id, TERN_TTY_RAW), 0);
    cr_assert_eq(tcgetattr(t, &now), 0);
    cr_assert(!(now.c_lflag & ICANON));
    int keep = dup(t);
    cr_assert_eq(tern_stream_close(loop, id), 0);
    cr_assert_eq(tcgetattr(keep, &now), 0);
    cr_assert(same_mode(&before, &now), "closing left the terminal changed");
    close(keep);
    close(m);
    cr_assert(run_until_nothing_live(loop));
    loop_free_clean(loop);
}
