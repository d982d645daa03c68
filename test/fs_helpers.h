/*
 * What the file-request tests share: a done callback that records the one
 * result it gets, and names in the scratch directory each test makes
 * (`dir`, filled by mkdtemp in the test's set-up).
 */
#ifndef TERN_TEST_FS_HELPERS_H
#define TERN_TEST_FS_HELPERS_H

#include "loop_helpers.h"

#include <sys/stat.h>

struct rec {
    atomic_uint n; /* callbacks so far: must end at 1 */
    int status;
    int64_t value;
    struct stat st;
    void *data;
    tern_fs_listing *listing;
};

static inline void rec_cb(tern_loop *loop, tern_id id, int status, tern_fs_result *res,
                          void *arg)
{
    (void)loop, (void)id;
    struct rec *r = arg;
    r->status = status;
    r->value = res->value;
    r->st = res->st;
    r->data = res->data;
    r->listing = res->listing;
    atomic_fetch_add(&r->n, 1);
}

static char dir[64];

/* dir/name, in one of four buffers that take turns. */
static inline const char *at(const char *name)
{
    static char paths[4][128];
    static unsigned next;
    char *p = paths[next++ % 4];
    snprintf(p, 128, "%s/%s", dir, name);
    return p;
}

static inline void put(const char *name, const char *text)
{
    FILE *f = fopen(at(name), "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

/* The size of dir/name, or -1 when it is not there. */
static inline off_t size_of(const char *name)
{
    struct stat st;
    return stat(at(name), &st) == 0 ? st.st_size : -1;
}

#endif
