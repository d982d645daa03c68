/*
 * queue_test: tern's own wait-free queue (backends/mpsc.h) and the queue
 * seam's Windows names (backends/wfq.h), as a plain Windows program: the
 * same checks the Linux stress program runs (test/mpsc_checks.h), under
 * wine or on Windows. Exit status 0 when every check passed; closes with
 * "N passed, N failed". TERN_SEED (hex or decimal) replays another seed.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <windows.h>

static atomic_uint passed, failed;

static void check_at(int ok, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s: ", ok ? "ok" : "FAIL");
    vprintf(fmt, ap);
    printf(ok ? "\n" : " (line %d)\n", line);
    va_end(ap);
    atomic_fetch_add(ok ? &passed : &failed, 1);
}

#define MPSC_CHECK(cond, ...) check_at((cond) != 0, __LINE__, __VA_ARGS__)

static void mpsc_sleep_ms(unsigned ms)
{
    Sleep(ms);
}

#include "../mpsc_checks.h"
#include "wfq.h"

struct rec {
    tern__wfq_node node;
    int v;
};

#define REC(n) ((struct rec *)(void *)((char *)(n)-offsetof(struct rec, node)))

/* The seam's names as inbound.c uses them, on the Windows side of wfq.h. */
static void seam_checks(void)
{
    tern__wfq_head h, lh;
    tern__wfq_tail t, lt;
    struct rec r[3] = {{.v = 0}, {.v = 1}, {.v = 2}};
    tern__wfq_init(&h, &t);
    tern__wfq_init(&lh, &lt);
    MPSC_CHECK(tern__wfq_empty(&h, &t), "seam: a new queue is empty");
    MPSC_CHECK(!tern__wfq_splice(&lh, &lt, &h, &t), "seam: nothing to splice");
    for (int i = 0; i < 3; i++) {
        tern__wfq_node_init(&r[i].node);
        MPSC_CHECK(tern__wfq_enqueue(&h, &t, &r[i].node) == (i == 0),
                   "seam: enqueue %d reports empty only first", i);
    }
    MPSC_CHECK(!tern__wfq_empty(&h, &t) && tern__wfq_splice(&lh, &lt, &h, &t),
               "seam: the splice takes them");
    tern__wfq_node *n, *nx;
    int seen = 0, order = 1;
    tern__wfq_for_each(&lh, &lt, n) order &= REC(n)->v == seen++;
    MPSC_CHECK(seen == 3 && order, "seam: for_each walks in order (%d)", seen);
    /* A list threaded through the links of nodes off the queue, as
     * inbound.c keeps its cancels while the walk frees records. */
    tern__wfq_link list = NULL, *end = &list;
    seen = 0;
    tern__wfq_for_each_safe(&lh, &lt, n, nx)
    {
        n->next = NULL;
        *end = n;
        end = &n->next;
        seen++;
    }
    order = 1;
    int k = 0;
    for (tern__wfq_node *c = list; c != NULL; c = c->next)
        order &= REC(c)->v == k++;
    MPSC_CHECK(seen == 3 && k == 3 && order, "seam: for_each_safe, and a list through the links");
}

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    const char *s = getenv("TERN_SEED");
    uint64_t seed = s != NULL ? strtoull(s, NULL, 0) : UINT64_C(0x5eed3b5c);
    printf("seed=0x%016llx\n", (unsigned long long)seed);
    seam_checks();
    mpsc_held_checks();
    static const unsigned producers[] = {1, 2, 4, 8};
    for (unsigned i = 0; i < sizeof(producers) / sizeof(producers[0]); i++)
        mpsc_race(producers[i], 200000 / producers[i], seed + i);
    printf("queue_test: seed=0x%016llx\n%u passed, %u failed\n", (unsigned long long)seed,
           atomic_load(&passed), atomic_load(&failed));
    return atomic_load(&failed) == 0 ? 0 : 1;
}
