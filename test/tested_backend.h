/*
 * A loop on the backend TERN_TEST_BACKEND names, else the default one:
 * how suites that are not BACKEND_TESTs run again on another backend
 * (test/meson.build's unit_runs: the file-request, UDP and stream suites on io_uring).
 * Asserts that the loop was made on that backend: io_uring refused by the
 * kernel would hand it to epoll, and the run would prove nothing.
 */
#ifndef TERN_TEST_TESTED_BACKEND_H
#define TERN_TEST_TESTED_BACKEND_H

#include <criterion/criterion.h>
#include <stdlib.h>

#include "tern.h"

static inline tern_loop *loop_new_tested(void)
{
    tern_loop_options opts;
    tern_loop_options_init(&opts);
    opts.backend = getenv("TERN_TEST_BACKEND");
    tern_loop *loop = NULL;
    int rc = tern_loop_new(&loop, &opts);
    cr_assert_eq(rc, 0, "tern_loop_new: %s", tern_strerror(rc));
    if (opts.backend != NULL)
        cr_assert_str_eq(tern_loop_backend_name(loop), opts.backend);
    return loop;
}

#endif
