/*
 * signal_test: the signal watchers' Windows subset, console control
 * events. Wine 8 does not deliver GenerateConsoleCtrlEvent to a process
 * without a console (it fails with ERROR_INVALID_ACCESS, and AllocConsole
 * is refused), as under meson test, so each event is handed to what the
 * control routine does (tern__console_event, the platform seam) from a
 * thread of its own, as the system would; where the real event can be
 * raised (Windows with a console) the last test raises it too.
 * Checked: one callback per event per watcher, in step 2 on the loop's
 * thread, with the signal's number (Ctrl-C SIGINT, Ctrl-Break SIGBREAK,
 * close SIGHUP; logoff and shutdown not taken); two loops each get their
 * own; a stopped watcher gets none and, the last one gone, the event is
 * no longer taken (the system's default is back); other numbers are
 * refused and change nothing; a loop freed with a watcher armed and an
 * event on the way is clean; an event a watcher took is reported taken,
 * so the process is not ended.
 * Closes with "N passed, N failed"; exit 0 when all pass.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <windows.h>

#include "platform.h"
#include "runner.h"
#include "tern.h"

#define MS 1000000ll

struct seen {
    int calls;
    int signo;
    tern_loop *loop;
    DWORD thread;
    bool on_own_thread;
};

static DWORD loop_thread;

static void on_signal(tern_loop *loop, tern_id id, int signo, void *arg)
{
    (void)id;
    struct seen *s = arg;
    s->calls++;
    s->signo = signo;
    s->loop = loop;
    s->on_own_thread = GetCurrentThreadId() == loop_thread;
}

/* The control routine's work, run on a thread of its own as the system does. */
static DWORD WINAPI routine_thread(LPVOID arg)
{
    return tern__console_event((unsigned long)(uintptr_t)arg) ? 1 : 0;
}

static bool raise_event(DWORD event)
{
    HANDLE t = CreateThread(NULL, 0, routine_thread, (LPVOID)(uintptr_t)event, 0, NULL);
    CHECK(t != NULL);
    if (t == NULL)
        return false;
    WaitForSingleObject(t, INFINITE);
    DWORD taken = 0;
    GetExitCodeThread(t, &taken);
    CloseHandle(t);
    return taken == 1;
}

/* Turn loop until *calls reaches want (2 s at most), then a few more turns. */
static void turn_until(tern_loop *loop, const int *calls, int want)
{
    for (int i = 0; i < 200 && *calls < want; i++)
        (void)tern_loop_run_once(loop, 10 * MS);
    for (int i = 0; i < 3; i++)
        (void)tern_loop_run_once(loop, 5 * MS);
}

static tern_loop *new_loop(void)
{
    tern_loop *loop = NULL;
    CHECK(tern_loop_new(&loop, NULL) == 0);
    return loop;
}

TEST(one_callback_per_event_in_step_2)
{
    tern_loop *loop = new_loop();
    struct seen s = {0};
    tern_id id = 0;
    CHECK(tern_signal_start(loop, SIGINT, on_signal, &s, &id) == 0);
    CHECK(id != 0);
    CHECK(raise_event(CTRL_C_EVENT));
    CHECK(s.calls == 0); /* never on the routine's thread, never before a turn */
    turn_until(loop, &s.calls, 1);
    CHECK(s.calls == 1);
    CHECK(s.signo == SIGINT);
    CHECK(s.loop == loop);
    CHECK(s.on_own_thread);
    /* Two events before a turn: two callbacks. */
    CHECK(raise_event(CTRL_C_EVENT));
    CHECK(raise_event(CTRL_C_EVENT));
    turn_until(loop, &s.calls, 3);
    CHECK(s.calls == 3);
    CHECK(tern_signal_stop(loop, id) == 0);
    CHECK(tern_signal_stop(loop, id) == -ENOENT);
    tern_loop_free(loop);
}

TEST(break_and_close_have_their_numbers)
{
    tern_loop *loop = new_loop();
    struct seen i = {0}, b = {0}, h = {0};
    tern_id ii, ib, ih;
    CHECK(tern_signal_start(loop, SIGINT, on_signal, &i, &ii) == 0);
    CHECK(tern_signal_start(loop, SIGBREAK, on_signal, &b, &ib) == 0);
    CHECK(tern_signal_start(loop, SIGHUP, on_signal, &h, &ih) == 0);
    CHECK(raise_event(CTRL_BREAK_EVENT));
    turn_until(loop, &b.calls, 1);
    CHECK(b.calls == 1 && b.signo == SIGBREAK && b.signo == 21);
    CHECK(i.calls == 0 && h.calls == 0);
    CHECK(raise_event(CTRL_CLOSE_EVENT));
    turn_until(loop, &h.calls, 1);
    CHECK(h.calls == 1 && h.signo == SIGHUP && h.signo == 1);
    CHECK(i.calls == 0 && b.calls == 1);
    /* Logoff and shutdown (services only) are left to the system. */
    CHECK(!raise_event(CTRL_LOGOFF_EVENT));
    CHECK(!raise_event(CTRL_SHUTDOWN_EVENT));
    turn_until(loop, &h.calls, 2);
    CHECK(h.calls == 1 && i.calls == 0 && b.calls == 1);
    CHECK(tern_signal_stop(loop, ii) == 0);
    CHECK(tern_signal_stop(loop, ib) == 0);
    CHECK(tern_signal_stop(loop, ih) == 0);
    tern_loop_free(loop);
}

TEST(two_loops_each_get_one)
{
    tern_loop *a = new_loop(), *b = new_loop();
    struct seen sa = {0}, sb = {0}, sb2 = {0};
    tern_id ia, ib, ib2;
    CHECK(tern_signal_start(a, SIGINT, on_signal, &sa, &ia) == 0);
    CHECK(tern_signal_start(b, SIGINT, on_signal, &sb, &ib) == 0);
    CHECK(tern_signal_start(b, SIGINT, on_signal, &sb2, &ib2) == 0);
    CHECK(raise_event(CTRL_C_EVENT));
    turn_until(a, &sa.calls, 1);
    turn_until(b, &sb.calls, 1);
    turn_until(b, &sb2.calls, 1);
    CHECK(sa.calls == 1 && sa.loop == a);
    CHECK(sb.calls == 1 && sb.loop == b);
    CHECK(sb2.calls == 1 && sb2.loop == b);
    CHECK(tern_signal_stop(a, ia) == 0);
    CHECK(tern_signal_stop(b, ib) == 0);
    CHECK(tern_signal_stop(b, ib2) == 0);
    tern_loop_free(a);
    tern_loop_free(b);
}

TEST(stopped_watchers_get_none)
{
    tern_loop *loop = new_loop();
    struct seen s = {0}, t = {0};
    tern_id is, it;
    CHECK(tern_signal_start(loop, SIGINT, on_signal, &s, &is) == 0);
    CHECK(tern_signal_start(loop, SIGINT, on_signal, &t, &it) == 0);
    /* Counted and posted, then stopped before the turn: no callback. */
    CHECK(raise_event(CTRL_C_EVENT));
    CHECK(tern_signal_stop(loop, is) == 0);
    turn_until(loop, &t.calls, 1);
    CHECK(s.calls == 0);
    CHECK(t.calls == 1);
    CHECK(tern_signal_stop(loop, it) == 0);
    /* The last one gone: the event is not taken (the default action's). */
    CHECK(!raise_event(CTRL_C_EVENT));
    turn_until(loop, &t.calls, 2);
    CHECK(s.calls == 0 && t.calls == 1);
    CHECK(tern_loop_run_once(loop, 0) == 0); /* nothing live is left */
    tern_loop_free(loop);
}

TEST(other_signals_are_refused)
{
    tern_loop *loop = new_loop();
    struct seen s = {0};
    const int refused[] = {0, -1, SIGTERM, SIGSEGV, SIGABRT, SIGFPE, SIGILL, 3, 9, 64, 1000};
    for (size_t k = 0; k < sizeof(refused) / sizeof(refused[0]); k++) {
        tern_id id = 77;
        CHECK(tern_signal_start(loop, refused[k], on_signal, &s, &id) == -EINVAL);
        CHECK(id == 77);
    }
    tern_id id = 77;
    CHECK(tern_signal_start(loop, SIGINT, NULL, &s, &id) == -EINVAL);
    CHECK(id == 77);
    /* Nothing changed: no routine takes the event, nothing keeps the loop. */
    CHECK(!raise_event(CTRL_C_EVENT));
    CHECK(!raise_event(CTRL_BREAK_EVENT));
    CHECK(tern_loop_run_once(loop, 0) == 0);
    CHECK(s.calls == 0);
    tern_loop_free(loop);
}

TEST(a_loop_freed_with_a_watcher_armed)
{
    tern_loop *loop = new_loop(), *other = new_loop();
    struct seen s = {0}, o = {0};
    tern_id io;
    CHECK(tern_signal_start(loop, SIGINT, on_signal, &s, NULL) == 0);
    CHECK(tern_signal_start(loop, SIGBREAK, on_signal, &s, NULL) == 0);
    CHECK(tern_signal_start(other, SIGINT, on_signal, &o, &io) == 0);
    CHECK(raise_event(CTRL_C_EVENT)); /* posted to both, not yet run */
    tern_loop_free(loop);
    CHECK(s.calls == 0);
    /* The other loop's watcher is untouched; the freed one's are gone. */
    CHECK(raise_event(CTRL_C_EVENT));
    CHECK(!raise_event(CTRL_BREAK_EVENT));
    turn_until(other, &o.calls, 2);
    CHECK(o.calls == 2);
    CHECK(s.calls == 0);
    CHECK(tern_signal_stop(other, io) == 0);
    CHECK(!raise_event(CTRL_C_EVENT));
    tern_loop_free(other);
}

TEST(the_process_is_not_ended_when_taken)
{
    tern_loop *loop = new_loop();
    struct seen s = {0};
    tern_id id;
    CHECK(tern_signal_start(loop, SIGINT, on_signal, &s, &id) == 0);
    CHECK(raise_event(CTRL_C_EVENT)); /* taken: the routine answers TRUE */
    turn_until(loop, &s.calls, 1);
    CHECK(s.calls == 1);
    /* The real event, where this process has a console to raise it in
     * (not under wine 8 or meson test): the process survives it. */
    if (GenerateConsoleCtrlEvent(CTRL_C_EVENT, 0)) {
        turn_until(loop, &s.calls, 2);
        CHECK(s.calls == 2);
    } else {
        printf("note: GenerateConsoleCtrlEvent unavailable here (error %lu); seam only\n",
               GetLastError());
    }
    CHECK(tern_signal_stop(loop, id) == 0);
    tern_loop_free(loop);
}

int main(void)
{
    loop_thread = GetCurrentThreadId();
    static const struct runner_test tests[] = {
        RUNNER_TEST(one_callback_per_event_in_step_2),
        RUNNER_TEST(break_and_close_have_their_numbers),
        RUNNER_TEST(two_loops_each_get_one),
        RUNNER_TEST(stopped_watchers_get_none),
        RUNNER_TEST(other_signals_are_refused),
        RUNNER_TEST(a_loop_freed_with_a_watcher_armed),
        RUNNER_TEST(the_process_is_not_ended_when_taken),
    };
    return RUNNER_MAIN(tests);
}
