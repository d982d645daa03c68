/*
 * tern_cancel from a thread that does not hold the loop, while
 * tern_loop_free tears the loop down (SPEC §7): the request is refused
 * with -ESHUTDOWN, not queued to a loop that will never turn again, and
 * the teardown still ends every operation once.
 */
#include "loop_helpers.h"

struct teardown_case {
    tern_loop *loop;
    tern_id timer;
    int cancel_rc;
    int post_rc;
    unsigned defers_ran;
};

static void never(tern_loop *loop, void *arg)
{
    (void)loop;
    (void)arg;
    cr_assert_fail("a post refused during teardown ran");
}

static void *foreign(void *arg)
{
    struct teardown_case *c = arg;
    c->cancel_rc = tern_cancel(c->loop, c->timer);
    c->post_rc = tern_post(c->loop, never, NULL);
    return NULL;
}

/* Runs in tern_loop_free's drain: the loop is closing. */
static void during_free(tern_loop *loop, void *arg)
{
    (void)loop;
    struct teardown_case *c = arg;
    c->defers_ran++;
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, foreign, c), 0);
    pthread_join(t, NULL);
}

static void timer_cb(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    (void)arg;
    cr_assert_fail("a timer cancelled by the teardown fired");
}

Test(foreign_cancel_edges, a_cancel_from_another_thread_during_free_is_refused,
     .timeout = TEST_TIMEOUT)
{
    struct teardown_case c = {.loop = loop_new_default(), .cancel_rc = 99, .post_rc = 99};
    cr_assert_eq(tern_timer_start(c.loop, HOUR, 0, timer_cb, NULL, &c.timer), 0);
    cr_assert_eq(tern_defer(c.loop, during_free, &c), 0);
    tern_loop_free(c.loop);
    cr_assert_eq(c.defers_ran, 1u, "the pending defer ran in the teardown");
    cr_assert_eq(c.cancel_rc, -ESHUTDOWN, "cancel during free: %d", c.cancel_rc);
    cr_assert_eq(c.post_rc, -ESHUTDOWN, "post during free: %d", c.post_rc);
}
