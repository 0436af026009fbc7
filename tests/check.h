// The check macro shared by the C tests (header-only; each test is its own program): CHECK(cond, fmt, ...) prints the
// failing line and counts it in `failures`, which the test's main() turns into its exit status.
#ifndef STRATA_TESTS_CHECK_H
#define STRATA_TESTS_CHECK_H

#include <stdio.h>

static int failures;
#define CHECK(cond, ...)                                         \
    do {                                                         \
        if (!(cond)) {                                           \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                        \
            fprintf(stderr, "\n");                               \
            failures++;                                          \
        }                                                        \
    } while (0)

#endif
