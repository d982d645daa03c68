/*
 * The end of a group's shutdown, where a member frees its own loop.
 *
 * When the last member goes idle it ends phase one: it marks the group
 * finished, then wakes every member, each of which leaves and frees its
 * loop. A member already awake for another reason (a stale wake, a kick
 * from an earlier broadcast) can see the mark before that wake-up reaches
 * it. It must not free its loop while the waking member may still touch
 * it. The hook in tern__group_finishing holds the window open: it wakes
 * one member early and gives it time to leave, then the waking goes on.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tern.h"
#include "testing.h"

#define TEST_TIMEOUT 30
#define LOOPS 3
#define NAME "gfin"

/* Whether a thread of this process has the given name. */
static bool thread_named(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    cr_assert_not_null(d);
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[320], comm[32] = "";
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue; /* it left while we looked */
        if (fgets(comm, sizeof(comm), f) != NULL)
            comm[strcspn(comm, "\n")] = '\0';
        fclose(f);
        found = strcmp(comm, name) == 0;
    }
    closedir(d);
    return found;
}

static atomic_uint hook_calls;
static atomic_bool member_left_early;

/*
 * On the member that ends phase one, before it wakes the others: wake
 * the next member now, and wait (up to two seconds) for its thread to
 * leave. A member that frees its loop on seeing the mark alone is gone
 * well within that; a correct one waits for the waking to end.
 */
static void finishing(tern_group *g)
{
    if (atomic_fetch_add(&hook_calls, 1) != 0)
        return;
    int me = tern_group_index(g);
    cr_assert_geq(me, 0, "phase one ends on a member");
    unsigned other = ((unsigned)me + 1) % LOOPS;
    char name[16];
    snprintf(name, sizeof(name), NAME "-%u", other);
    cr_assert(thread_named(name), "member %u is still there before it is woken", other);
    tern_loop_stop(tern_group_loop(g, other));
    struct timespec pause = {.tv_nsec = 10 * 1000 * 1000};
    for (int i = 0; i < 200 && thread_named(name); i++)
        nanosleep(&pause, NULL);
    atomic_store(&member_left_early, !thread_named(name));
}

Test(group_finish, a_member_woken_early_waits_for_the_last_wake_before_freeing_its_loop,
     .timeout = TEST_TIMEOUT)
{
    tern_group_options go;
    tern_group_options_init(&go);
    go.loops = LOOPS;
    go.name = NAME;
    tern_group *g = NULL;
    cr_assert_eq(tern_group_new(&g, &go), 0);
    atomic_store(&tern__group_finishing, finishing);
    cr_assert_eq(tern_group_start(g), 0);
    cr_assert_eq(tern_group_shutdown(g), 0);
    cr_assert_eq(tern_group_wait(g), 0);
    atomic_store(&tern__group_finishing, NULL);
    tern_group_free(g);
    cr_assert_eq(atomic_load(&hook_calls), 1, "phase one ended once");
    cr_assert_not(atomic_load(&member_left_early),
                  "a member left (and freed its loop) while the others were still being woken");
}
