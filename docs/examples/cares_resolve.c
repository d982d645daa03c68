/*
 * c-ares on a tern loop: another library's sockets and timeouts driven by
 * tern's fd watchers and loop hooks (docs/net.md, "Loop hooks").
 *
 * The program starts its own DNS server on 127.0.0.1 (a UDP socket on the
 * same loop, watched with tern_io_start) that answers every A query with
 * 192.0.2.7 — but drops the first query it sees, so c-ares must time out
 * and send again: the resolve finishes only if the loop honours c-ares's
 * timeout. Then it asks c-ares for tern.example's address and checks it.
 *
 * How c-ares is wired to tern:
 *  - c-ares says which sockets it wants watched (ARES_OPT_SOCK_STATE_CB):
 *    each gets a tern fd watcher, whose callback calls ares_process_fd.
 *  - a prepare hook (last thing before the loop computes its wait) asks
 *    c-ares for its next timeout and arms a tern timer for it, so the
 *    wait ends in time;
 *  - a check hook (first thing after the wait) calls ares_process_fd with
 *    no socket, which is how c-ares handles its timeouts.
 * Both hooks are unref'd: the watchers of c-ares's sockets keep the loop
 * running; the answer's callback stops it.
 *
 * Build: part of the test suite (suite 'examples') when libcares is found.
 */
#include <arpa/inet.h>
#include <ares.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdnoreturn.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <tern.h>

#define MAX_SOCKS 16

static tern_loop *loop;
static ares_channel channel;
static struct {
    int fd;
    tern_id watcher;
} socks[MAX_SOCKS];
static tern_id timeout_timer;
static int answer_status = 1; /* 1: no answer yet */
static struct in_addr answer;

/* Never returns: the calls after a failed start never see its id unset. */
static noreturn void fail(const char *what, int rc)
{
    fprintf(stderr, "cares_resolve: %s: %s\n", what, rc < 0 ? tern_strerror(rc) : "failed");
    exit(1);
}

/* ---- the loopback DNS server ---------------------------------------- */

static int dns_fd;
static tern_id dns_watcher;
static unsigned queries_seen;

static void dns_readable(tern_loop *l, tern_id id, int fd, unsigned events, void *arg)
{
    (void)l, (void)id, (void)events, (void)arg;
    unsigned char q[512], r[512];
    struct sockaddr_storage from;
    socklen_t flen = sizeof from;
    ssize_t n = recvfrom(fd, q, sizeof q, 0, (struct sockaddr *)&from, &flen);
    if (n < 12 + 5)
        return;
    if (++queries_seen == 1)
        return; /* drop the first: the client must time out and retry */
    /* The question ends at the name's zero byte, then type and class. */
    size_t at = 12;
    while (at < (size_t)n && q[at] != 0)
        at += (size_t)q[at] + 1;
    size_t qend = at + 1 + 4;
    if (qend > (size_t)n || qend + 16 > sizeof r)
        return;
    memcpy(r, q, qend);
    r[2] = 0x81; /* response, recursion desired */
    r[3] = 0x80; /* recursion available, no error */
    r[6] = 0, r[7] = 1; /* one answer */
    r[8] = r[9] = r[10] = r[11] = 0;
    static const unsigned char a[16] = {0xc0, 12,   0, 1,  0, 1,  0, 0, 0, 60,
                                        0,    4,    192, 0, 2, 7};
    memcpy(r + qend, a, sizeof a);
    (void)sendto(fd, r, qend + sizeof a, 0, (struct sockaddr *)&from, flen);
}

static unsigned dns_start(void)
{
    dns_fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sin;
    if (dns_fd < 0 || bind(dns_fd, (struct sockaddr *)&sin, sizeof sin) < 0 ||
        getsockname(dns_fd, (struct sockaddr *)&sin, &len) < 0)
        fail("dns server socket", -errno);
    int rc = tern_io_start(loop, dns_fd, TERN_READABLE, dns_readable, NULL, &dns_watcher);
    if (rc < 0)
        fail("tern_io_start", rc);
    tern_unref(loop, dns_watcher); /* the server alone does not keep the loop running */
    return ntohs(sin.sin_port);
}

/* ---- c-ares on the loop -------------------------------------------- */

static void sock_ready(tern_loop *l, tern_id id, int fd, unsigned events, void *arg)
{
    (void)l, (void)id, (void)arg;
    ares_socket_t rd = (events & (TERN_READABLE | TERN_HANGUP | TERN_ERROR)) ? fd : ARES_SOCKET_BAD;
    ares_socket_t wr = (events & TERN_WRITABLE) ? fd : ARES_SOCKET_BAD;
    ares_process_fd(channel, rd, wr);
}

/* c-ares: watch fd for these events from now on (none: forget it). */
static void sock_state(void *data, ares_socket_t fd, int readable, int writable)
{
    (void)data;
    unsigned ev = (readable ? TERN_READABLE : 0) | (writable ? TERN_WRITABLE : 0);
    int slot = -1;
    for (int i = 0; i < MAX_SOCKS; i++)
        if (socks[i].watcher != 0 && socks[i].fd == fd)
            slot = i;
    if (slot >= 0 && ev == 0) {
        tern_io_stop(loop, socks[slot].watcher);
        socks[slot].watcher = 0;
    } else if (slot >= 0) {
        tern_io_modify(loop, socks[slot].watcher, ev);
    } else if (ev != 0) {
        for (slot = 0; slot < MAX_SOCKS && socks[slot].watcher != 0; slot++) {
        }
        if (slot == MAX_SOCKS)
            fail("too many c-ares sockets", -EMFILE);
        int rc = tern_io_start(loop, fd, ev, sock_ready, NULL, &socks[slot].watcher);
        if (rc < 0)
            fail("tern_io_start", rc);
        socks[slot].fd = fd;
    }
}

static void timeout_fired(tern_loop *l, tern_id id, void *arg)
{
    (void)l, (void)id, (void)arg;
    timeout_timer = 0; /* the check hook that follows does c-ares's part */
}

/* Prepare: the wait must end by c-ares's next timeout. */
static void before_wait(tern_loop *l, tern_id id, void *arg)
{
    (void)id, (void)arg;
    if (timeout_timer != 0) {
        tern_timer_stop(l, timeout_timer);
        timeout_timer = 0;
    }
    struct timeval tv;
    if (ares_timeout(channel, NULL, &tv) == NULL)
        return; /* nothing in flight */
    uint64_t ns = (uint64_t)tv.tv_sec * 1000000000u + (uint64_t)tv.tv_usec * 1000u;
    if (tern_timer_start(l, ns, 0, timeout_fired, NULL, &timeout_timer) == 0)
        tern_unref(l, timeout_timer);
}

/* Check: after the wait, let c-ares act on whatever timed out. */
static void after_wait(tern_loop *l, tern_id id, void *arg)
{
    (void)l, (void)id, (void)arg;
    ares_process_fd(channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
}

static void on_answer(void *arg, int status, int timeouts, unsigned char *abuf, int alen)
{
    (void)arg;
    struct hostent *host = NULL;
    if (status == ARES_SUCCESS)
        status = ares_parse_a_reply(abuf, alen, &host, NULL, NULL);
    if (status == ARES_SUCCESS && host->h_addr_list[0] != NULL)
        memcpy(&answer, host->h_addr_list[0], sizeof answer);
    if (host != NULL)
        ares_free_hostent(host);
    printf("c-ares answered after %d timeout(s): %s\n", timeouts, ares_strerror(status));
    answer_status = status;
    tern_loop_stop(loop); /* c-ares may keep its socket open for the next query */
}

static void watchdog(tern_loop *l, tern_id id, void *arg)
{
    (void)l, (void)id, (void)arg;
    fail("no answer within 10 s", -ETIMEDOUT);
}

int main(void)
{
    int rc = tern_loop_new(&loop, NULL);
    if (rc < 0)
        fail("tern_loop_new", rc);
    unsigned port = dns_start();

    if (ares_library_init(ARES_LIB_INIT_ALL) != ARES_SUCCESS)
        fail("ares_library_init", 0);
    struct ares_options opts = {.sock_state_cb = sock_state, .timeout = 200, .tries = 4,
                                .flags = ARES_FLAG_NOSEARCH | ARES_FLAG_NOCHECKRESP};
    if (ares_init_options(&channel, &opts,
                          ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES |
                              ARES_OPT_FLAGS) != ARES_SUCCESS)
        fail("ares_init_options", 0);
    char server[64];
    snprintf(server, sizeof server, "127.0.0.1:%u", port);
    if (ares_set_servers_ports_csv(channel, server) != ARES_SUCCESS)
        fail("ares_set_servers_ports_csv", 0);

    tern_id prepare, check, dog;
    if ((rc = tern_hook_start(loop, TERN_HOOK_PREPARE, before_wait, NULL, &prepare)) < 0 ||
        (rc = tern_hook_start(loop, TERN_HOOK_CHECK, after_wait, NULL, &check)) < 0 ||
        (rc = tern_timer_start(loop, 10000000000ull, 0, watchdog, NULL, &dog)) < 0)
        fail("hooks", rc);
    tern_unref(loop, prepare);
    tern_unref(loop, check);
    tern_unref(loop, dog);

    ares_query(channel, "tern.example", 1 /* C_IN */, 1 /* T_A */, on_answer, NULL);
    rc = tern_loop_run(loop);
    if (rc < 0)
        fail("tern_loop_run", rc);

    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &answer, text, sizeof text);
    printf("tern.example is %s (the server saw %u queries)\n", text, queries_seen);
    if (answer_status != ARES_SUCCESS || strcmp(text, "192.0.2.7") != 0 || queries_seen < 2)
        fail("wrong answer", 0);

    ares_destroy(channel);
    ares_library_cleanup();
    tern_io_stop(loop, dns_watcher);
    close(dns_fd);
    tern_hook_stop(loop, prepare);
    tern_hook_stop(loop, check);
    tern_timer_stop(loop, dog);
    tern_loop_free(loop);
    return 0;
}
