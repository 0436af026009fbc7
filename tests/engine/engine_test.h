// Shared by the C tests of the public engine API (header-only; each test is its own program).
#ifndef STRATA_TESTS_ENGINE_TEST_H
#define STRATA_TESTS_ENGINE_TEST_H

#include <stdio.h>

#include "strata.h"

// Loads argv[1] on argv[2] ("cpu" when absent) with the rest of *ep as the caller set it; prints `usage` (argc < 2)
// or the load error and returns NULL.
static strata_engine *test_engine_open(int argc, char **argv, const char *usage, strata_engine_params *ep) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s\n", usage);
        return NULL;
    }
    ep->model_path = argv[1];
    ep->device = argc > 2 ? argv[2] : "cpu";
    strata_engine *e = strata_engine_load(ep);
    if (!e) fprintf(stderr, "load: %s\n", strata_last_error());
    return e;
}

#endif
