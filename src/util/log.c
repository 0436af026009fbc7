#include "util/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static int g_level = -1;
static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;

static void init_level(void) {
    if (g_level >= 0) return;
    g_level = ST_LOG_INFO;
    const char *env = getenv("STRATA_LOG");
    if (!env) return;
    if (!strcasecmp(env, "debug")) g_level = ST_LOG_DEBUG;
    else if (!strcasecmp(env, "warn")) g_level = ST_LOG_WARN;
    else if (!strcasecmp(env, "error")) g_level = ST_LOG_ERROR;
}

void st_log_set_level(st_log_level level) { g_level = (int)level; }

st_log_level st_log_get_level(void) {
    init_level();
    return (st_log_level)g_level;
}

void st_log(st_log_level level, const char *fmt, ...) {
    init_level();
    if ((int)level > g_level) return;
    static const char *tags[] = {"error: ", "warning: ", "", "debug: "};
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&g_log_lock);
    fputs(tags[level], stderr);
    vfprintf(stderr, fmt, ap);
    size_t n = strlen(fmt);
    if (n == 0 || fmt[n - 1] != '\n') fputc('\n', stderr);
    fflush(stderr);
    pthread_mutex_unlock(&g_log_lock);
    va_end(ap);
}

double st_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *st_fmt_bytes(char *buf, int buflen, double bytes) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) {
        bytes /= 1024.0;
        u++;
    }
    snprintf(buf, (size_t)buflen, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
    return buf;
}

static void progress_print(st_progress *p, uint64_t done) {
    char a[32], b[32];
    double pct = p->total ? 100.0 * (double)done / (double)p->total : 100.0;
    double dt = st_now() - p->t_start;
    if (p->bytes)
        st_info("%s: %3.0f%% (%s / %s, %.1f s)", p->what, pct, st_fmt_bytes(a, sizeof a, (double)done),
                st_fmt_bytes(b, sizeof b, (double)p->total), dt);
    else
        st_info("%s: %3.0f%% (%llu / %llu, %.1f s)", p->what, pct, (unsigned long long)done,
                (unsigned long long)p->total, dt);
}

void st_progress_begin(st_progress *p, const char *what, uint64_t total, int bytes) {
    memset(p, 0, sizeof *p);
    p->what = what;
    p->total = total;
    p->bytes = bytes;
    p->t_start = p->t_last = st_now();
}

void st_progress_add(st_progress *p, uint64_t amount) {
    uint64_t done = atomic_fetch_add((_Atomic uint64_t *)&p->done, amount) + amount;
    double now = st_now();
    pthread_mutex_lock(&g_log_lock);
    int due = now - p->t_last >= 0.5 && done < p->total;
    if (due) p->t_last = now;
    pthread_mutex_unlock(&g_log_lock);
    if (due) progress_print(p, done);
}

void st_progress_end(st_progress *p) {
    if (p->finished) return;
    p->finished = 1;
    progress_print(p, p->total);
}
