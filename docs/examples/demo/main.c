/*
 * tern-demo: a small HTTP/1.1 server that sheds load instead of queueing.
 *
 *   tern-demo [--host 127.0.0.1] [--port 8080] [--loops N] [--threads 2]
 *             [--queue 64] [--long-max 64] [--shed-wait-ms 50]
 *             [--hup-shed-wait-ms N] [--max-rounds 1000000] [--files DIR]
 *             [--owner-cap 4] [--request-timeout-ms 10000]
 *             [--idle-timeout-ms 30000] [--write-timeout-ms 10000]
 *             [--max-body-bytes 65536] [--drain-timeout-ms 30000]
 *             [--stall-ms 1000] [--overflow-max 4] [--overflow-idle-ms 5000]
 *             [--file-window-bytes 65536] [--file-budget-bytes 67108864]
 *
 * It serves on a loop group: --loops loops (default: one per CPU), each on
 * its own thread with its own listener on the shared port (SO_REUSEPORT),
 * all sharing one pool. SIGHUP swaps the shedding bound between
 * --shed-wait-ms and --hup-shed-wait-ms (default: half of it) on every
 * loop at once, in exclusive mode. On SIGINT or SIGTERM it stops
 * accepting, closes idle keep-alive connections once the bytes queued for
 * them are out, lets every request in flight finish (a /slow stream or a
 * /files download runs to its end), prints its final
 * statistics and exits 0. A drain that outlives --drain-timeout-ms, or a
 * second signal, ends the process at once with status 3 (EXIT_ABANDONED),
 * after saying what it abandoned (connections, jobs) and printing the
 * final statistics. It does not wait for the pool: a worker inside a
 * blocking system call cannot be interrupted (tern/fs.h), so waiting for
 * it could be waiting forever.
 *
 * At start it raises its soft descriptor limit to the hard one (as
 * servers do) and says the limit in its start line and /stats. It refuses
 * to start, with status 1, when another socket already listens on the
 * port: its loops share the port among themselves (SO_REUSEPORT), never
 * silently with another process.
 *
 * Each connection may have --owner-cap /hash jobs in flight (its owner's
 * cap); a request beyond that is answered 503 at once. A connection whose
 * request is still incomplete --request-timeout-ms after it began (with
 * nothing owed to it) is closed, and so is a keep-alive connection idle
 * for --idle-timeout-ms, and one owed bytes of which none drained to the
 * socket for --write-timeout-ms (a client that does not read; one that
 * reads slowly but steadily is never cut). The drain after SIGTERM is
 * bounded the same way for each connection, and by --drain-timeout-ms in
 * all.
 *
 * /files answers are streamed (files.c): each holds at most
 * --file-window-bytes in buffers, and all of them together reserve at
 * most --file-budget-bytes; a download the budget cannot cover, or one
 * asked for when no descriptor is left, is answered 503 with Retry-After.
 * A request body over --max-body-bytes is refused 413 as soon as its
 * length (or a chunk's) is known; a request to upgrade the protocol is
 * refused 501; both close the connection.
 *
 * The pool's watchdog is on: a bounded job running past --stall-ms is
 * counted as stalled, and while one is and jobs wait, overflow workers
 * (at most --overflow-max at once, 0 to only count) take the queue on;
 * each retires after --overflow-idle-ms without work. The defaults are the
 * pool's (TERN_POOL_STALL_MS, TERN_POOL_OVERFLOW_MAX,
 * TERN_POOL_OVERFLOW_IDLE_MS, or 1000 ms, 4 and 5000 ms). /block?ms=N
 * (routes.c) is the route that shows it: a bounded job that blocks.
 */
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "demo.h"
#include "loops.h"

/* The exit status of a drain cut short: what was in flight was abandoned. */
#define EXIT_ABANDONED 3

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--host ADDR] [--port N] [--loops N] [--threads N] [--queue N]\n"
            "          [--long-max N] [--shed-wait-ms N] [--hup-shed-wait-ms N] [--max-rounds N]\n"
            "          [--files DIR] [--owner-cap N] [--request-timeout-ms N]\n"
            "          [--idle-timeout-ms N] [--write-timeout-ms N] [--max-body-bytes N]\n"
            "          [--drain-timeout-ms N] [--stall-ms N] [--overflow-max N]\n"
            "          [--overflow-idle-ms N] [--file-window-bytes N] [--file-budget-bytes N]\n",
            argv0);
    exit(2);
}

static unsigned long number(const char *s, const char *argv0)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno != 0 || *s == '\0' || *end != '\0')
        usage(argv0);
    return v;
}

static void print_final(const struct app *app)
{
    char buf[4096];
    app_final_json(app, buf, sizeof(buf));
    printf("final statistics:\n%s", buf);
    fflush(stdout);
}

/*
 * End the process now, saying why and what is left: the draining has
 * taken too long or was told to stop. Nothing is cancelled and waited for,
 * because what outlives a drain may be a pool worker inside a system call
 * that nothing can interrupt (a read that waits on a peer, an open that
 * waits on a FIFO); the process exit is what reclaims it. Any loop may
 * call this; the first caller wins and the others never return either.
 */
static _Noreturn void abandon(struct app *app, const char *why)
{
    static atomic_flag once = ATOMIC_FLAG_INIT;
    if (atomic_flag_test_and_set(&once))
        for (;;)
            pause(); /* the first caller is exiting */
    struct gauges g;
    struct counters total;
    app_totals(&app->servers[0], &total, &g);
    fprintf(stderr,
            "tern-demo: %s: abandoning %u connection(s), %u job(s) on %u loop(s), exit %d\n", why,
            g.conns, g.jobs, app->nloops, EXIT_ABANDONED);
    print_final(app);
    _exit(EXIT_ABANDONED);
}

static void drain_limit(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    struct server *srv = arg;
    char why[96];
    snprintf(why, sizeof why, "the drain limit (%llu ms) passed",
             (unsigned long long)(srv->app->drain_ns / 1000000));
    abandon(srv->app, why);
}

/*
 * Draining on a loop ends when its last connection has closed and its last
 * job has completed. The drain runs while the group still holds every loop
 * open, as in ordinary running: only once the last loop has drained does
 * it ask the group to shut down, which then finds nothing live. The
 * drain-limit timer is stopped here so it cannot fire in the meantime.
 */
void server_maybe_done(struct server *srv)
{
    if (!srv->draining || srv->drained || srv->conns > 0 || srv->jobs > 0)
        return;
    srv->drained = true;
    if (srv->drain_timer != 0) {
        tern_timer_stop(srv->loop, srv->drain_timer);
        srv->drain_timer = 0;
    }
    struct app *app = srv->app;
    /* acq_rel: the last loop to finish sees every other loop's drain done
     * (each decrement releases it) before it asks the group to shut down. */
    if (atomic_fetch_sub_explicit(&app->loops_draining, 1, memory_order_acq_rel) == 1)
        tern_group_shutdown(app->group);
}

/*
 * On each loop, posted there by the first SIGINT or SIGTERM: stop
 * accepting, close the idle connections once their bytes are out, let
 * the rest finish, and bound the whole with --drain-timeout-ms.
 */
static void server_drain(tern_loop *loop, void *arg)
{
    struct server *srv = arg;
    if (srv->draining)
        return;
    srv->draining = true;
    if (srv->listener != 0)
        tern_stream_close(loop, srv->listener);
    srv->listener = 0;
    http_close_idle(srv);
    if (tern_timer_start(loop, srv->app->drain_ns, 0, drain_limit, srv, &srv->drain_timer) == 0)
        tern_unref(loop, srv->drain_timer);
    server_maybe_done(srv);
}

/* A teardown callback: the group shuts down, drained or (setup failed) not. */
static void server_teardown(tern_loop *loop, void *arg)
{
    server_drain(loop, arg);
}

/*
 * The second SIGINT or SIGTERM, once draining began. Loop 0 may finish its
 * part of the shutdown while other loops still drain, and then reads no
 * more signals; so the first signal's watchers are stopped, the signals
 * are blocked in every thread, and this thread takes the second one with
 * sigwait. (Where no signalfd exists, a watcher unblocks its signal in the
 * loop thread for a handler that writes to a pipe: a second signal caught
 * there while the loop no longer turns would be lost.)
 */
static void *second_signal(void *arg)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    int signo;
    if (sigwait(&set, &signo) == 0) {
        char why[64];
        snprintf(why, sizeof why, "%s again", strsignal(signo));
        abandon(arg, why);
    }
    return NULL;
}

/* SIGINT, SIGTERM and SIGHUP, all watched on loop 0. */
static void on_signal(tern_loop *loop, tern_id id, int signo, void *arg)
{
    (void)id;
    struct server *srv0 = arg;
    struct app *app = srv0->app;
    if (signo == SIGHUP) {
        if (!app->draining)
            app_reconfigure(srv0);
        return;
    }
    if (app->draining)
        return; /* a second one raced the stops below: the waiter takes the next */
    /* From here on the waiter takes them: stop, then block in this thread. */
    (void)tern_signal_stop(loop, app->sigint);
    (void)tern_signal_stop(loop, app->sigterm);
    sigset_t ending;
    sigemptyset(&ending);
    sigaddset(&ending, SIGINT);
    sigaddset(&ending, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &ending, NULL);
    struct gauges g;
    struct counters total;
    app_totals(srv0, &total, &g);
    fprintf(stderr, "tern-demo: %s, draining %u connection(s), %u job(s) on %u loop(s)\n",
            strsignal(signo), g.conns, g.jobs, app->nloops);
    app->draining = true;
    /* Created from this thread, it inherits its mask: both signals blocked. */
    pthread_t waiter;
    if (pthread_create(&waiter, NULL, second_signal, app) == 0)
        pthread_detach(waiter);
    /* SIGHUP's watcher stays but no longer keeps loop 0 alive. */
    tern_unref(loop, app->sighup);
    /* Every loop drains first; the last to finish shuts the group down. */
    for (unsigned i = 0; i < app->nloops; i++)
        if (tern_post(app->servers[i].loop, server_drain, &app->servers[i]) < 0) {
            tern_group_shutdown(app->group); /* its teardown drains it instead */
            return;
        }
}

/*
 * Loop 0's setup, on its own thread: watch the signals there, so a
 * watcher's stop (on_signal) acts on the thread its start acted on.
 */
static void watch_signals(tern_loop *loop, unsigned index, void *arg)
{
    struct app *app = arg;
    if (index != 0)
        return;
    int rc = tern_signal_start(loop, SIGINT, on_signal, &app->servers[0], &app->sigint);
    if (rc == 0)
        rc = tern_signal_start(loop, SIGTERM, on_signal, &app->servers[0], &app->sigterm);
    if (rc == 0)
        rc = tern_signal_start(loop, SIGHUP, on_signal, &app->servers[0], &app->sighup);
    if (rc < 0) {
        fprintf(stderr, "tern-demo: cannot watch signals: %s\n", tern_strerror(rc));
        app->signal_rc = rc;
        tern_group_shutdown(app->group);
    }
}

/*
 * Raise the soft descriptor limit to the hard one: a server holds one
 * descriptor per connection, and the common soft default (1,024) would
 * refuse connections (EMFILE) long before memory runs short. Returns the
 * limit in force.
 */
static unsigned long raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return 0;
    if (rl.rlim_cur < rl.rlim_max) {
        struct rlimit want = {rl.rlim_max, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &want) == 0)
            rl.rlim_cur = rl.rlim_max;
    }
    return rl.rlim_cur == RLIM_INFINITY ? ULONG_MAX : (unsigned long)rl.rlim_cur;
}

/*
 * Whether host:port is free to listen on: bind a plain socket there,
 * without SO_REUSEPORT, and close it. A socket that listens on the port
 * already (another demo, with or without SO_REUSEPORT, or anything else)
 * makes that bind fail with EADDRINUSE; SO_REUSEADDR lets a port held
 * only by connections in TIME_WAIT pass. Returns 0 or a negative errno.
 *
 * The race accepted: between this probe's close and the first loop's
 * bind, another process could bind the port with SO_REUSEPORT and then
 * share it silently. The window is a few system calls long and needs a
 * process of the same user starting at the same instant; closing it would
 * take holding the port with one socket that every loop's listener then
 * shares, which tern_tcp_listen does not offer.
 */
static int probe_port(const char *host, unsigned long port)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_PASSIVE};
    struct addrinfo *ai;
    char service[24];
    snprintf(service, sizeof service, "%lu", port);
    int grc = getaddrinfo(host, service, &hints, &ai);
    if (grc != 0)
        return grc == EAI_MEMORY ? -ENOMEM : -EINVAL;
    int rc = 0;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) < 0)
        rc = -errno;
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return rc;
}

int main(int argc, char **argv)
{
    const char *host = "127.0.0.1";
    unsigned long port = 8080, loops = 0, shed_ms = 50, hup_ms = 0;
    bool hup_given = false;
    tern_pool_config pool;
    tern_pool_config_init(&pool);
    pool.threads = 2;
    pool.queue_capacity = 64;
    pool.long_threads_max = 64;
    unsigned max_rounds = 1000000;
    const char *files_dir = NULL;
    unsigned long owner_cap = 4, request_ms = 10000, idle_ms = 30000, write_ms = 10000;
    unsigned long drain_ms = 30000, max_body = 65536;
    unsigned long file_window = 64 * 1024, file_budget = 64ul * 1024 * 1024;
    tern_pool_watch watch;
    tern_pool_watch_init(&watch);
    unsigned long stall_ms = (unsigned long)(watch.stall_ns / 1000000);
    unsigned long overflow_max = watch.overflow_max;
    unsigned long overflow_idle_ms = (unsigned long)(watch.overflow_idle_ns / 1000000);

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc)
            usage(argv[0]);
        const char *v = argv[++i];
        if (strcmp(a, "--host") == 0)
            host = v;
        else if (strcmp(a, "--port") == 0)
            port = number(v, argv[0]);
        else if (strcmp(a, "--loops") == 0)
            loops = number(v, argv[0]);
        else if (strcmp(a, "--threads") == 0)
            pool.threads = (unsigned)number(v, argv[0]);
        else if (strcmp(a, "--queue") == 0)
            pool.queue_capacity = (unsigned)number(v, argv[0]);
        else if (strcmp(a, "--long-max") == 0)
            pool.long_threads_max = (unsigned)number(v, argv[0]);
        else if (strcmp(a, "--shed-wait-ms") == 0)
            shed_ms = number(v, argv[0]);
        else if (strcmp(a, "--hup-shed-wait-ms") == 0) {
            hup_ms = number(v, argv[0]);
            hup_given = true;
        } else if (strcmp(a, "--max-rounds") == 0)
            max_rounds = (unsigned)number(v, argv[0]);
        else if (strcmp(a, "--files") == 0)
            files_dir = v;
        else if (strcmp(a, "--owner-cap") == 0)
            owner_cap = number(v, argv[0]);
        else if (strcmp(a, "--request-timeout-ms") == 0)
            request_ms = number(v, argv[0]);
        else if (strcmp(a, "--idle-timeout-ms") == 0)
            idle_ms = number(v, argv[0]);
        else if (strcmp(a, "--write-timeout-ms") == 0)
            write_ms = number(v, argv[0]);
        else if (strcmp(a, "--drain-timeout-ms") == 0)
            drain_ms = number(v, argv[0]);
        else if (strcmp(a, "--max-body-bytes") == 0)
            max_body = number(v, argv[0]);
        else if (strcmp(a, "--stall-ms") == 0)
            stall_ms = number(v, argv[0]);
        else if (strcmp(a, "--overflow-max") == 0)
            overflow_max = number(v, argv[0]);
        else if (strcmp(a, "--overflow-idle-ms") == 0)
            overflow_idle_ms = number(v, argv[0]);
        else if (strcmp(a, "--file-window-bytes") == 0)
            file_window = number(v, argv[0]);
        else if (strcmp(a, "--file-budget-bytes") == 0)
            file_budget = number(v, argv[0]);
        else
            usage(argv[0]);
    }
    /* tern_owner_open takes caps 1..2^31; a day bounds the timeouts well below 2^62 ns. */
    if (loops > 1024 || owner_cap < 1 || owner_cap > (1ul << 31) || request_ms < 1 ||
        request_ms > 86400000 || idle_ms < 1 || idle_ms > 86400000 || write_ms < 1 ||
        write_ms > 86400000 || drain_ms < 1 || drain_ms > 86400000 || stall_ms > 86400000 ||
        overflow_max > 64 || overflow_idle_ms < 1 || overflow_idle_ms > 86400000)
        usage(argv[0]);
    /* A window holds two chunks of at least 4 KiB; the budget at least one window. */
    if (file_window < 8192 || file_window > (64ul << 20) || file_budget < file_window ||
        file_budget > (1ul << 40))
        usage(argv[0]);
    /* Process-wide, and in force before the pool starts with the group. */
    watch.stall_ns = (uint64_t)stall_ms * 1000 * 1000;
    watch.overflow_max = (unsigned)overflow_max;
    watch.overflow_idle_ns = (uint64_t)overflow_idle_ms * 1000 * 1000;
    int wrc = tern_pool_watch_set(&watch);
    if (wrc < 0) {
        fprintf(stderr, "tern-demo: the watchdog's settings: %s\n",
                tern_strerror(wrc));
        return 1;
    }
    unsigned long fd_limit = raise_fd_limit();
    if (port != 0) {
        int prc = probe_port(host, port);
        if (prc == -EADDRINUSE) {
            fprintf(stderr, "tern-demo: %s:%lu is already in use by another socket; not "
                            "sharing it (choose another --port)\n", host, port);
            return 1;
        }
        if (prc < 0) {
            fprintf(stderr, "tern-demo: cannot serve on %s:%lu: %s\n", host, port,
                    tern_strerror(prc));
            return 1;
        }
    }

    struct app app = {.shed_wait_ns = {shed_ms * 1000 * 1000,
                                       (hup_given ? hup_ms : shed_ms / 2) * 1000 * 1000},
                      .drain_ns = drain_ms * 1000 * 1000,
                      .file_budget = file_budget};
    /* --files: one real path, shared by every loop's server. */
    struct server files = {0};
    int files_rc = files_dir != NULL ? files_init(&files, files_dir) : 0;
    if (files_rc < 0) {
        fprintf(stderr, "tern-demo: --files %s: %s\n", files_dir, tern_strerror(files_rc));
        return 1;
    }
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.pool = &pool;
    tern_group_options go;
    tern_group_options_init(&go);
    go.loops = (unsigned)loops; /* 0: one per CPU */
    go.loop = &opts;
    go.name = "demo";
    int rc = tern_group_new(&app.group, &go);
    if (rc < 0) {
        fprintf(stderr, "tern-demo: tern_group_new: %s\n", tern_strerror(rc));
        return 1;
    }
    app.nloops = tern_group_size(app.group);
    atomic_init(&app.loops_draining, app.nloops);
    app.servers = calloc(app.nloops, sizeof(*app.servers));
    if (app.servers == NULL) {
        tern_group_free(app.group);
        return 1;
    }
    /*
     * Set every loop up before the group starts (no loop runs yet, so this
     * thread may make loop-only calls): a listener each on one port, the
     * first choosing it, and the teardown. Signals are watched on loop 0,
     * started by its setup on its thread; this thread blocks them first
     * and the group's threads block every signal, so only loop 0's watchers
     * (and, once draining, the waiter's sigwait) take them.
     */
    sigset_t watched;
    sigemptyset(&watched);
    sigaddset(&watched, SIGINT);
    sigaddset(&watched, SIGTERM);
    sigaddset(&watched, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &watched, NULL);
    unsigned shared_port = (unsigned)port;
    for (unsigned i = 0; i < app.nloops && rc == 0; i++) {
        struct server *srv = &app.servers[i];
        *srv = (struct server){.app = &app, .index = i, .loop = tern_group_loop(app.group, i),
                               .shed_wait_ns = app.shed_wait_ns[0], .max_rounds = max_rounds,
                               .owner_cap = (unsigned)owner_cap,
                               .request_ns = request_ms * 1000 * 1000,
                               .idle_ns = idle_ms * 1000 * 1000,
                               .write_ns = write_ms * 1000 * 1000,
                               .max_body = max_body,
                               .fd_limit = fd_limit,
                               .file_window = file_window,
                               .files_root = files.files_root};
        rc = tern_tcp_listen(srv->loop, host, shared_port, TERN_TCP_BACKLOG_DEFAULT,
                             TERN_TCP_REUSEPORT, http_accept, srv, &srv->listener);
        if (rc == 0)
            rc = tern_tcp_port(srv->loop, srv->listener, &srv->port);
        shared_port = srv->port;
        if (rc == 0)
            rc = tern_group_on_shutdown(app.group, i, server_teardown, srv);
    }
    if (rc == 0)
        rc = tern_group_on_setup(app.group, watch_signals, &app);
    if (rc == 0)
        rc = tern_group_start(app.group);
    if (rc < 0) {
        fprintf(stderr, "tern-demo: cannot serve on %s:%lu: %s\n", host, port, tern_strerror(rc));
        tern_group_free(app.group);
        free(app.servers);
        return 1;
    }
    printf("tern-demo listening on http://%s:%u (%u loops; pool: %u threads, queue %u; shed "
           "above %lu ms queue-wait p99, %lu ms after SIGHUP; %lu hashes in flight per "
           "connection; requests complete within %lu ms, idle %lu ms; descriptors %lu; "
           "watchdog: stall %llu ms, %u overflow workers, idle %llu ms; files: window %lu "
           "bytes, budget %lu bytes; pid %ld)\n",
           host, shared_port, app.nloops, pool.threads, pool.queue_capacity, shed_ms,
           (unsigned long)(app.shed_wait_ns[1] / 1000000), owner_cap, request_ms, idle_ms,
           fd_limit, (unsigned long long)(watch.stall_ns / 1000000), watch.overflow_max,
           (unsigned long long)(watch.overflow_idle_ns / 1000000), file_window, file_budget,
           (long)getpid());
    fflush(stdout);

    tern_group_wait(app.group); /* until the shutdown has run its course */
    if (app.signal_rc < 0) {
        tern_group_free(app.group);
        free(app.servers);
        return 1;
    }
    print_final(&app);
    tern_group_free(app.group);
    free(app.servers);
    tern_pool_shutdown(TERN_POOL_DRAIN, 5ull * 1000 * 1000 * 1000);
    free(files.files_root);
    return 0;
}
