/*
 * TTYs: a stream over a terminal gets raw/normal mode and its window size.
 *
 * The mode the TTY had before tern first changed it is kept in the record
 * (`tty_saved`) and put back by TERN_TTY_NORMAL and, whatever the caller
 * does, when the stream closes (tern__tty_restore, called by close before
 * the descriptor goes): a program that exits through tern_loop_free does
 * not leave the user's terminal raw.
 */
#include <errno.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "net_p.h"

void tern__tty_restore(struct tern__stream *s)
{
    if (s->tty_saved == NULL)
        return;
    if (s->fd >= 0)
        (void)tcsetattr(s->fd, TCSADRAIN, s->tty_saved);
    tern__free(s->tty_saved);
    s->tty_saved = NULL;
}

/* The terminal's calls, each through the stream seam: 0 or a negative errno. */
static int tty_get(int fd, struct termios *t)
{
    int rc = tern__stream_fault();
    if (rc == 0 && tcgetattr(fd, t) < 0)
        rc = -errno; /* ENOTTY for a pipe or a socket */
    return rc;
}

static int tty_set(int fd, const struct termios *t)
{
    int rc = tern__stream_fault();
    if (rc == 0 && tcsetattr(fd, TCSADRAIN, t) < 0)
        rc = -errno;
    return rc;
}

/* Raw: what cfmakeraw does, spelt out (it is not POSIX). */
static void make_raw(struct termios *t)
{
    t->c_iflag &= ~(tcflag_t)(IGNBRK | BRKINT | PARMRK | ISTRIP | INLCR | IGNCR | ICRNL | IXON);
    t->c_oflag &= ~(tcflag_t)OPOST;
    t->c_lflag &= ~(tcflag_t)(ECHO | ECHONL | ICANON | ISIG | IEXTEN);
    t->c_cflag &= ~(tcflag_t)(CSIZE | PARENB);
    t->c_cflag |= CS8;
    t->c_cc[VMIN] = 1;
    t->c_cc[VTIME] = 0;
}

int tern_tty_set_mode(tern_loop *loop, tern_id id, int mode)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    struct tern__stream *s = tern__stream_get(loop, id);
    if (s == NULL)
        return -ENOENT;
    if (mode != TERN_TTY_NORMAL && mode != TERN_TTY_RAW)
        return -EINVAL;
    if (s->fd < 0)
        return -ENOTTY;
    struct termios now;
    int rc = tty_get(s->fd, &now);
    if (rc < 0)
        return rc;
    if (mode == TERN_TTY_NORMAL)
        return s->tty_saved != NULL ? tty_set(s->fd, s->tty_saved) : 0;
    if (s->tty_saved == NULL) {
        struct termios *saved = tern__malloc(sizeof(*saved));
        if (saved == NULL)
            return -ENOMEM;
        *saved = now;
        s->tty_saved = saved;
    }
    make_raw(&now);
    return tty_set(s->fd, &now);
}

int tern_tty_winsize(tern_loop *loop, tern_id id, unsigned *cols, unsigned *rows)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    TERN_REQUIRE(cols != NULL && rows != NULL);
    struct tern__stream *s = tern__stream_get(loop, id);
    if (s == NULL)
        return -ENOENT;
    struct winsize ws;
    if (s->fd < 0 || !isatty(s->fd))
        return -ENOTTY;
    int rc = tern__stream_fault();
    if (rc == 0 && ioctl(s->fd, TIOCGWINSZ, &ws) < 0)
        rc = -errno;
    if (rc < 0)
        return rc;
    *cols = ws.ws_col;
    *rows = ws.ws_row;
    return 0;
}
