/*
 * Child processes as operations. A process op lives from a successful
 * tern_process_spawn until its exit callback has run, and ends exactly
 * once, one of two ways:
 *
 *   - the child ends: its exit source (process_exit.c) reaps it in step 4
 *     and the op runs the callback with the status in step 2;
 *   - the op is cancelled (tern_cancel, or tern_loop_free's teardown)
 *     while the child runs: the callback gets -ECANCELED in step 2, and the
 *     child, not signalled, goes to the reaper (process_reap.c), which
 *     reaps it whenever it ends. A caller who wants the child gone kills
 *     it first (tern_process_kill) and waits for its exit callback.
 *
 * A cancel after the exit was seen changes nothing: the callback still
 * gets the real status (TERN_CANCEL_FINISHED).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "admit.h"
#include "container.h"
#include "net/net_p.h"
#include "process_p.h"

enum { RUNNING, EXITED, CANCELLED };

struct process {
    struct tern__op op;
    struct tern__child child;
    tern_exit_cb cb;
    void *arg;
    pid_t pid;
    int wstatus;
    int state;
};

static void process_exited(tern_loop *loop, struct tern__child *c, int wstatus)
{
    struct process *p = tern__container_of(c, struct process, child);
    p->wstatus = wstatus;
    p->state = EXITED;
    tern__child_release(loop, c);
    tern__op_ready(loop, &p->op);
}

static void process_dispatch(tern_loop *loop, struct tern__op *op)
{
    struct process *p = (struct process *)op;
    tern_id id = op->id;
    tern_exit_cb cb = p->cb;
    void *arg = p->arg;
    int status = 0, code = -1, sig = 0;
    if (p->state == CANCELLED) {
        status = -ECANCELED;
    } else if (WIFEXITED(p->wstatus)) {
        code = WEXITSTATUS(p->wstatus);
    } else if (WIFSIGNALED(p->wstatus)) {
        sig = WTERMSIG(p->wstatus);
    }
    tern__op_finish(loop, op); /* the id is stale inside the callback */
    cb(loop, id, status, code, sig, arg);
}

static int process_cancel(tern_loop *loop, struct tern__op *op)
{
    struct process *p = (struct process *)op;
    if (p->state == EXITED)
        return TERN_CANCEL_FINISHED;
    if (p->state == CANCELLED)
        return -ENOENT;
    tern__child_abandon(loop, &p->child);
    tern__child_release(loop, &p->child);
    p->state = CANCELLED;
    tern__op_ready(loop, op);
    return TERN_CANCEL_STOPPED;
}

static void process_free(tern_loop *loop, struct tern__op *op)
{
    (void)loop;
    free(op);
}

static const struct tern__op_class process_class = {
    .name = "process",
    .dispatch = process_dispatch,
    .cancel = process_cancel,
    .free = process_free,
    .refable = true,
};

void tern_process_options_init(tern_process_options *opts)
{
    TERN_REQUIRE(opts != NULL);
    *opts = (tern_process_options){0};
}

/* What the parent opened for the launch, closed again on every path. */
struct launch_fds {
    int child_end[TERN__STDIO_MAX];  /* -1, or a descriptor only the child keeps */
    int parent_end[TERN__STDIO_MAX]; /* -1, or a stream's end before tern_stream_open */
    tern_id stream[TERN__STDIO_MAX];
};

static void close_child_ends(struct launch_fds *l, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        if (l->child_end[i] >= 0)
            close(l->child_end[i]);
        l->child_end[i] = -1;
    }
}

static void undo_fds(tern_loop *loop, struct launch_fds *l, unsigned n)
{
    close_child_ends(l, n);
    for (unsigned i = 0; i < n; i++) {
        /* A stream that never reached the caller ends now, owing no close
         * callback: a refused spawn leaves no operation on the loop. */
        if (l->stream[i] != 0)
            tern__stream_discard(tern__stream_get(loop, l->stream[i]));
        if (l->parent_end[i] >= 0)
            close(l->parent_end[i]);
    }
}

static int open_stdio(tern_loop *loop, const tern_process_options *o, struct tern__spawn *s,
                      struct launch_fds *l)
{
    for (unsigned i = 0; i < o->stdio_count; i++) {
        l->child_end[i] = l->parent_end[i] = -1;
        l->stream[i] = 0;
    }
    for (unsigned i = 0; i < o->stdio_count; i++) {
        const tern_stdio *io = &o->stdio[i];
        int rc;
        switch (io->kind) {
        case TERN_STDIO_INHERIT:
            s->fds[i] = (int)i;
            break;
        case TERN_STDIO_FD:
            s->fds[i] = io->fd;
            break;
        case TERN_STDIO_IGNORE:
            if ((rc = tern__fd_fault()) < 0)
                return rc;
            if ((l->child_end[i] = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0)
                return -errno;
            s->fds[i] = l->child_end[i];
            break;
        case TERN_STDIO_STREAM: {
            int sv[2];
            if ((rc = tern__fd_fault()) < 0)
                return rc;
            if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                return -errno;
            l->parent_end[i] = sv[0];
            l->child_end[i] = sv[1];
            s->fds[i] = sv[1];
            if ((rc = tern_stream_open(loop, sv[0], &l->stream[i])) < 0)
                return rc;
            break;
        }
        }
    }
    return 0;
}

static int check_options(const tern_process_options *o)
{
    if (o->file == NULL || o->stdio_count > TERN__STDIO_MAX ||
        (o->stdio_count > 0 && o->stdio == NULL))
        return -EINVAL;
    if (o->flags & ~(unsigned)(TERN_PROCESS_DETACHED | TERN_PROCESS_SETUID | TERN_PROCESS_SETGID))
        return -EINVAL;
    for (unsigned i = 0; i < o->stdio_count; i++) {
        const tern_stdio *io = &o->stdio[i];
        if ((unsigned)io->kind > TERN_STDIO_STREAM || (io->kind == TERN_STDIO_FD && io->fd < 0))
            return -EINVAL;
    }
    return 0;
}

extern char **environ;

int tern_process_spawn(tern_loop *loop, const tern_process_options *opts, tern_exit_cb cb,
                       void *arg, tern_id *idp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (opts == NULL || cb == NULL)
        return -EINVAL;
    int rc = check_options(opts);
    if (rc < 0)
        return rc;
    if ((rc = tern__op_admit(loop)) < 0)
        return rc;
    struct process *p = tern__malloc(sizeof(*p));
    if (p == NULL) {
        tern__op_unadmit(loop);
        return -ENOMEM;
    }
    *p = (struct process){.cb = cb, .arg = arg, .state = RUNNING};
    /* The insert after the launch cannot fail then: no child to undo. */
    if ((rc = tern__idmap_reserve(&loop->ids, 1)) < 0) {
        free(p);
        tern__op_unadmit(loop);
        return rc;
    }

    struct tern__spawn s = {
        .file = opts->file,
        .argv = opts->argv,
        .envp = opts->envp != NULL ? opts->envp : environ,
        .cwd = opts->cwd,
        .nfds = opts->stdio_count,
        .flags = opts->flags,
        .uid = opts->uid,
        .gid = opts->gid,
    };
    char *const default_argv[] = {(char *)opts->file, NULL};
    if (s.argv == NULL)
        s.argv = default_argv;
    const char *path = getenv("PATH");
    s.path = path != NULL ? path : "/usr/local/bin:/usr/bin:/bin";
    if (opts->stdio_count == 0) {
        s.nfds = 3;
        for (int i = 0; i < 3; i++)
            s.fds[i] = i;
    }

    struct launch_fds l;
    pid_t pid = 0;
    bool prepared = false;
    if ((rc = open_stdio(loop, opts, &s, &l)) < 0)
        goto fail;
    if ((rc = tern__child_prepare(loop, &p->child)) < 0)
        goto fail;
    prepared = true;
    if ((rc = tern__spawn(&s, &pid)) < 0)
        goto fail;
    close_child_ends(&l, opts->stdio_count);
    if ((rc = tern__child_watch(loop, &p->child, pid, process_exited)) < 0) {
        /* Not watched, so not left behind either. */
        (void)kill(pid, SIGKILL);
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        goto fail;
    }
    p->pid = pid;
    rc = tern__op_add(loop, &p->op, &process_class);
    TERN_INSIST(rc == 0); /* reserved above */
    for (unsigned i = 0; i < opts->stdio_count; i++)
        if (opts->stdio[i].kind == TERN_STDIO_STREAM)
            opts->stdio[i].stream = l.stream[i];
    if (idp != NULL)
        *idp = p->op.id;
    return 0;

fail:
    undo_fds(loop, &l, opts->stdio_count);
    if (prepared)
        tern__child_release(loop, &p->child);
    free(p);
    tern__op_unadmit(loop);
    return rc;
}

static struct process *find_process(tern_loop *loop, tern_id id)
{
    struct tern__op *op = tern__op_find(loop, id);
    return op != NULL && op->cls == &process_class ? (struct process *)op : NULL;
}

int tern_process_kill(tern_loop *loop, tern_id id, int signo)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    if (id == 0 || signo < 0 || signo >= NSIG)
        return -EINVAL;
    struct process *p = find_process(loop, id);
    if (p == NULL || p->state != RUNNING)
        return -ENOENT;
    if (kill(p->pid, signo) < 0)
        return -errno;
    return 0;
}

int tern_process_pid(tern_loop *loop, tern_id id, int *pidp)
{
    TERN__REQUIRE_LOOP(loop);
    TERN__LOOP_ONLY(loop);
    TERN_REQUIRE(pidp != NULL);
    if (id == 0)
        return -EINVAL;
    struct process *p = find_process(loop, id);
    if (p == NULL)
        return -ENOENT;
    *pidp = (int)p->pid;
    return 0;
}
