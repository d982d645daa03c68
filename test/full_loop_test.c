/*
 * A loop at max_operations (tern.h, tern_loop_options): every call that
 * would add an operation returns -EAGAIN and adds nothing — no callback
 * ever runs for it, a descriptor handed in is left as it was (its flags
 * too), and the loop ends as soon as the one operation that filled it is
 * gone. Then, with room again, the same kind of call is accepted.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "adding_calls.h"

#define TEST_TIMEOUT 60

static void on_filler(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop, (void)id, (void)arg;
}

Test(full_loop, every_adding_call_is_refused_and_adds_nothing, .timeout = TEST_TIMEOUT)
{
    tern_loop_options o;
    tern_loop_options_init(&o);
    o.max_operations = 1;
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, &o), 0);
    cr_assert_eq(pipe(pipe_fd), 0);

    tern_id filler = 0;
    cr_assert_eq(tern_timer_start(loop, 1000, 0, on_filler, NULL, &filler), 0);
    for (size_t i = 0; i < N_CALLS; i++) {
        bool wrote = false;
        int rc = calls[i].call(loop, &wrote);
        cr_expect(!wrote, "%s at max_operations wrote an id", calls[i].name);
        cr_expect_eq(rc, -EAGAIN, "%s at max_operations returned %d (%s)", calls[i].name, rc,
                     rc < 0 ? strerror(-rc) : "accepted");
    }

    /* An address that can never bind is its own error even at the limit:
     * a retryable -EAGAIN would send the caller round for ever. */
    tern_id udp = 0;
    cr_assert_eq(tern_udp_bind(loop, "not-an-address", 0, 0, &udp), -EINVAL);
    cr_assert_eq(tern_udp_bind(loop, "127.0.0.1", 0, TERN_UDP_IPV6ONLY, &udp), -EINVAL);
    cr_assert_eq(udp, 0);

    /* A stream handed in is refused and left as it was, flags included. */
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    int fl = fcntl(sv[0], F_GETFL), fdfl = fcntl(sv[0], F_GETFD);
    tern_id stream = 0;
    cr_assert_eq(tern_stream_open(loop, sv[0], &stream), -EAGAIN);
    cr_assert_eq(stream, 0);
    cr_assert_eq(fcntl(sv[0], F_GETFL), fl, "the refused descriptor's status flags changed");
    cr_assert_eq(fcntl(sv[0], F_GETFD), fdfl, "the refused descriptor's descriptor flags changed");
    cr_assert_eq(write(sv[1], "x", 1), 1, "the refused descriptor was closed");
    char c;
    cr_assert_eq(read(sv[0], &c, 1), 1);

    /* Only the filler is live: the loop ends with it, and nothing refused ran. */
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(called, 0, "%d refused operations called back", called);

    /* With room again, an adding call is accepted and completes. */
    cr_assert_eq(tern_post(loop, post_fn, NULL), 0);
    cr_assert_eq(tern_loop_run(loop), 0);
    cr_assert_eq(called, 1);
    tern_loop_free(loop);
    close(sv[0]);
    close(sv[1]);
    close(pipe_fd[0]);
    close(pipe_fd[1]);
}
