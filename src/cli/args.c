#include "cli/args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool st_args_is(st_args *a, const char *short_name, const char *long_name) {
    const char *s = a->argv[a->i];
    return (short_name && !strcmp(s, short_name)) || (long_name && !strcmp(s, long_name));
}

const char *st_args_str(st_args *a) {
    const char *flag = a->argv[a->i];
    if (a->i + 1 >= a->argc) {
        fprintf(stderr, "strata %s: option '%s' needs a value (see strata %s --help)\n", a->cmd, flag, a->cmd);
        a->failed = true;
        return "";
    }
    return a->argv[++a->i];
}

int64_t st_args_int(st_args *a, int64_t min, int64_t max) {
    const char *flag = a->argv[a->i];
    const char *v = st_args_str(a);
    if (a->failed) return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 0);
    if (errno || *v == '\0' || *end != '\0' || x < min || x > max) {
        fprintf(stderr, "strata %s: option '%s' needs an integer in [%lld, %lld], got '%s'\n", a->cmd, flag,
                (long long)min, (long long)max, v);
        a->failed = true;
        return 0;
    }
    return x;
}

double st_args_float(st_args *a, double min, double max) {
    const char *flag = a->argv[a->i];
    const char *v = st_args_str(a);
    if (a->failed) return 0;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || *v == '\0' || *end != '\0' || !(x >= min && x <= max)) {
        fprintf(stderr, "strata %s: option '%s' needs a number in [%g, %g], got '%s'\n", a->cmd, flag, min, max, v);
        a->failed = true;
        return 0;
    }
    return x;
}

void st_args_unknown(st_args *a) {
    fprintf(stderr, "strata %s: unknown option '%s' (see strata %s --help)\n", a->cmd, a->argv[a->i], a->cmd);
    a->failed = true;
}
