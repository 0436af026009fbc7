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
    char old[ST_ERR_MAX];
    memcpy(old, g_errmsg, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(g_errmsg, sizeof g_errmsg, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n < sizeof g_errmsg) {
        size_t room = sizeof g_errmsg - (size_t)n, len = strlen(old);
        if (len >= room) len = room - 1;  // keep the prefix; the message is cut, not lost
        memcpy(g_errmsg + n, old, len);
        g_errmsg[(size_t)n + len] = '\0';
    }
    return -1;
}

const char *st_errmsg(void) { return g_errmsg; }

void st_err_clear(void) { g_errmsg[0] = '\0'; }
