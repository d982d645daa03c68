/*
 * A program that uses tern as an outside project does: only the installed
 * header, linked through pkg-config, CMake's find_package or a meson
 * dependency (test/consumers_test.sh). One timer on one loop, then the
 * loop's statistics (an inline getter calling the exported reader).
 */
#include <stdio.h>
#include <tern.h>

static void on_timer(tern_loop *loop, tern_id id, void *arg)
{
    (void)loop;
    (void)id;
    *(int *)arg = 1;
}

int main(void)
{
    tern_loop *loop = NULL;
    int fired = 0;
    if (tern_loop_new(&loop, NULL) != 0)
        return 1;
    if (tern_timer_start(loop, 1000, 0, on_timer, &fired, NULL) != 0)
        return 1;
    if (tern_loop_run(loop) != 0 || !fired)
        return 1;
    tern_loop_stats st;
    tern_loop_stats_get(loop, &st);
    tern_loop_free(loop);
    printf("tern consumer: timer fired after %llu turns\n", (unsigned long long)st.turns);
    return st.turns > 0 ? 0 : 1;
}
