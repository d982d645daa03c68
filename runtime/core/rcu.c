/*
 * TERN_LOOP_RCU: the thread that runs such a loop is a urcu-qsbr reader.
 *
 * It registers once (on its first run of an RCU loop) and is online only
 * while it runs one, so a host that pumps run_once() does not pay a
 * registration per pump, and synchronize_rcu() never waits for a thread
 * between runs; turn.c also takes it offline while it blocks in the
 * backend and reports a quiescent state after every turn. Our own
 * registration ends when the thread exits.
 *
 * A thread the application registered itself stays the application's:
 * tern neither registers it again (liburcu asserts on that) nor leaves it
 * offline afterwards — it finds it online and leaves it online.
 */
#define _LGPL_SOURCE /* for the reader's `registered` flag */

#include "loop_p.h"
#include "os_thread.h"
#include "qsbr.h"

static tern__tls_key_t rcu_key;
static tern__once_t rcu_once = TERN__ONCE_INIT;
static _Thread_local bool ours;       /* tern registered this thread */
static _Thread_local unsigned depth;  /* RCU loops this thread runs, nested */
static _Thread_local bool app_online; /* registered by the application */

static void thread_exit(void *arg)
{
    (void)arg;
    tern__qsbr_unregister();
}

static void key_init(void)
{
    tern__tls_create(&rcu_key, thread_exit);
}

void tern__rcu_enter(tern_loop *loop)
{
    if (!(loop->flags & TERN_LOOP_RCU) || depth++ > 0)
        return;
    if (tern__qsbr_registered() && !ours) {
        app_online = true; /* the application's reader: leave it be */
        return;
    }
    app_online = false;
    if (!ours) {
        tern__once(&rcu_once, key_init);
        tern__qsbr_register();        /* registers online */
        tern__tls_set(rcu_key, loop); /* any non-NULL value arms the destructor */
        ours = true;
    } else {
        tern__qsbr_online();
    }
}

void tern__rcu_leave(tern_loop *loop)
{
    if (!(loop->flags & TERN_LOOP_RCU) || --depth > 0)
        return;
    if (!app_online)
        tern__qsbr_offline();
}
