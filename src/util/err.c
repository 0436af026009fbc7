#include "util/err.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char g_errmsg[ST_ERR_MAX];

int st_verr(const char *fmt, va_list ap) {
    vsnprintf(g_errmsg, sizeof g_errmsg, fmt, ap);
    return -1;
}

int st_err(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    st_verr(fmt, ap);
    va_end(ap);
    return -1;
}

int st_err_prefix(const char *fmt, ...) {
    char prefix[ST_ERR_MAX], old[ST_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, g_errmsg, sizeof old);
    snprintf(g_errmsg, sizeof g_errmsg, "%s%s", prefix, old);
    return -1;
}

const char *st_errmsg(void) { return g_errmsg; }

void st_err_clear(void) { g_errmsg[0] = '\0'; }
