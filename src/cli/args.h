// Small helpers for the subcommands' flag parsing: value flags with clear errors naming the flag.
#ifndef STRATA_CLI_ARGS_H
#define STRATA_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct st_args {
    int argc;
    char **argv;
    int i;              // index of the flag being parsed
    const char *cmd;    // "run", for messages
    bool failed;
} st_args;

// True when argv[i] equals one of the names (e.g. "-n", "--n-predict").
bool st_args_is(st_args *a, const char *short_name, const char *long_name);
// The flag's value (argv[i+1]); advances i. On a missing value sets failed and prints an error.
const char *st_args_str(st_args *a);
int64_t st_args_int(st_args *a, int64_t min, int64_t max);
double st_args_float(st_args *a, double min, double max);
// Prints "strata CMD: unknown option 'X' (see strata CMD --help)" and sets failed.
void st_args_unknown(st_args *a);

#endif
