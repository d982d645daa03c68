/*
 * tern_strerror / tern_err_name: both come from one list, know every code
 * the API returns, treat positive values as their negation, and never
 * fail on a value they do not know.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <limits.h>
#include <string.h>

#include "tern.h"

struct known {
    int err;
    const char *name;
};

/* Every status the loop, pool and resolver document. */
static const struct known known[] = {
    { -EAGAIN, "EAGAIN" },       { -ENOENT, "ENOENT" },       { -EINVAL, "EINVAL" },
    { -ECANCELED, "ECANCELED" }, { -EBADF, "EBADF" },         { -EEXIST, "EEXIST" },
    { -EPERM, "EPERM" },         { -ENOMEM, "ENOMEM" },       { -ESHUTDOWN, "ESHUTDOWN" },
    { -ETIMEDOUT, "ETIMEDOUT" }, { -EMFILE, "EMFILE" },
    { TERN_EAI_NONAME, "EAI_NONAME" }, { TERN_EAI_AGAIN, "EAI_AGAIN" },
    { TERN_EAI_FAIL, "EAI_FAIL" },     { TERN_EAI_FAMILY, "EAI_FAMILY" },
    { TERN_EAI_SERVICE, "EAI_SERVICE" }, { TERN_EAI_NODATA, "EAI_NODATA" },
    { TERN_EAI_OTHER, "EAI_OTHER" },
};

#define NKNOWN (sizeof known / sizeof known[0])

Test(error, names_of_documented_codes)
{
    for (size_t i = 0; i < NKNOWN; i++) {
        const char *name = tern_err_name(known[i].err);
        cr_assert_not_null(name);
        cr_expect_str_eq(name, known[i].name, "tern_err_name(%d)", known[i].err);
    }
}

Test(error, sentences_of_documented_codes_are_distinct_and_known)
{
    const char *unknown = tern_strerror(-987654);
    for (size_t i = 0; i < NKNOWN; i++) {
        const char *s = tern_strerror(known[i].err);
        cr_assert_not_null(s);
        cr_expect_gt(strlen(s), 0);
        cr_expect_str_neq(s, unknown, "%s has no sentence of its own", known[i].name);
        cr_expect_str_neq(s, "success");
        for (size_t j = 0; j < i; j++)
            cr_expect_str_neq(s, tern_strerror(known[j].err), "%s and %s share a sentence",
                              known[i].name, known[j].name);
    }
}

Test(error, zero_is_success)
{
    cr_assert_str_eq(tern_err_name(0), "OK");
    cr_assert_str_eq(tern_strerror(0), "success");
}

Test(error, positive_values_are_their_negation)
{
    cr_assert_str_eq(tern_err_name(EAGAIN), "EAGAIN");
    cr_assert_str_eq(tern_err_name(ECANCELED), "ECANCELED");
    cr_assert_str_eq(tern_strerror(ENOENT), tern_strerror(-ENOENT));
    cr_assert_str_eq(tern_err_name(-TERN_EAI_NONAME), "EAI_NONAME");
}

Test(error, unknown_values)
{
    /* INT_MIN cannot be negated in int; the functions must not trip on it. */
    const int odd[] = { -987654, 987654, -4095, TERN_EAI_BASE, TERN_EAI_BASE - 100,
                        INT_MIN, INT_MAX, INT_MIN + 1 };
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        cr_expect_str_eq(tern_err_name(odd[i]), "UNKNOWN", "tern_err_name(%d)", odd[i]);
        cr_expect_str_eq(tern_strerror(odd[i]), "unknown error", "tern_strerror(%d)", odd[i]);
    }
}
