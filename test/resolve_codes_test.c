/*
 * Every getaddrinfo failure tern_resolve can meet reaches its callback as
 * the documented code (include/tern.h, TERN_EAI_*): each EAI_* as its
 * TERN_EAI_*, EAI_MEMORY as -ENOMEM, EAI_SYSTEM as the negative errno the
 * lookup left (or TERN_EAI_OTHER when it left none, so a failure never
 * reads as success), and a code tern does not know as TERN_EAI_OTHER;
 * once each, with no result. The lookup is a fake installed through
 * tern__set_getaddrinfo that answers the code the test sets.
 */
#include <criterion/criterion.h>
#include <netdb.h>

#include "pool_helpers.h"

static _Atomic int answer_code;  /* what the fake getaddrinfo returns */
static _Atomic int answer_errno; /* the errno it leaves behind */

static int fake_getaddrinfo(const char *host, const char *service, const struct addrinfo *hints,
                            struct addrinfo **res)
{
    (void)host, (void)service, (void)hints;
    *res = NULL;
    errno = atomic_load(&answer_errno);
    return atomic_load(&answer_code);
}

struct seen {
    atomic_int calls;
    int status;
    bool had_result;
};

static void lookup_cb(tern_loop *loop, tern_id id, int status, struct addrinfo *res, void *arg)
{
    (void)loop, (void)id;
    struct seen *s = arg;
    s->status = status;
    s->had_result = res != NULL;
    tern_freeaddrinfo(res);
    atomic_fetch_add(&s->calls, 1);
}

Test(resolve_codes, each_lookup_failure_arrives_as_its_documented_code)
{
    static const struct {
        int code, err, want;
    } cases[] = {
        {EAI_NONAME, 0, TERN_EAI_NONAME},
        {EAI_AGAIN, 0, TERN_EAI_AGAIN},
        {EAI_FAIL, 0, TERN_EAI_FAIL},
        {EAI_FAMILY, 0, TERN_EAI_FAMILY},
        {EAI_SERVICE, 0, TERN_EAI_SERVICE},
#ifdef EAI_NODATA
        {EAI_NODATA, 0, TERN_EAI_NODATA},
#endif
        {EAI_MEMORY, 0, -ENOMEM},
        {EAI_SYSTEM, ECONNREFUSED, -ECONNREFUSED},
        {EAI_SYSTEM, 0, TERN_EAI_OTHER},
        {EAI_BADFLAGS, 0, TERN_EAI_OTHER},
    };
    tern__set_getaddrinfo(fake_getaddrinfo);
    tern_loop *loop = NULL;
    cr_assert_eq(tern_loop_new(&loop, NULL), 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        atomic_store(&answer_code, cases[i].code);
        atomic_store(&answer_errno, cases[i].err);
        struct seen s = {.status = 1};
        cr_assert_eq(tern_resolve(loop, "host.test", "80", NULL, lookup_cb, &s, NULL), 0);
        cr_assert_eq(tern_loop_run(loop), 0);
        cr_assert_eq(atomic_load(&s.calls), 1, "case %zu: %d callbacks", i, atomic_load(&s.calls));
        cr_assert_eq(s.status, cases[i].want, "case %zu (EAI %d, errno %d): %s, not %s", i,
                     cases[i].code, cases[i].err, tern_err_name(s.status),
                     tern_err_name(cases[i].want));
        cr_assert(!s.had_result, "case %zu: a failure came with a result", i);
    }
    tern_loop_free(loop);
    tern__set_getaddrinfo(NULL);
    cr_assert_eq(tern_pool_shutdown(TERN_POOL_DRAIN, 10 * PH_SEC), 0);
}
