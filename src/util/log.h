// Logging to stderr with levels, and progress lines for long steps (load, pack, make-model, prefill).
#ifndef STRATA_UTIL_LOG_H
#define STRATA_UTIL_LOG_H

#include <stdint.h>
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { ST_LOG_ERROR = 0, ST_LOG_WARN = 1, ST_LOG_INFO = 2, ST_LOG_DEBUG = 3 } st_log_level;

// Messages above this level are dropped. Default INFO; STRATA_LOG=debug|info|warn|error overrides.
void st_log_set_level(st_log_level level);
st_log_level st_log_get_level(void);
void st_log(st_log_level level, const char *fmt, ...) ST_PRINTF(2, 3);

#define st_error(...) st_log(ST_LOG_ERROR, __VA_ARGS__)
#define st_warn(...) st_log(ST_LOG_WARN, __VA_ARGS__)
#define st_info(...) st_log(ST_LOG_INFO, __VA_ARGS__)
#define st_debug(...) st_log(ST_LOG_DEBUG, __VA_ARGS__)

// Progress of one long step. Prints "what: 42% (1.2 GiB / 2.9 GiB)" at most every 0.5 s and at the end,
// on its own line each time (so logs captured by a supervisor stay readable). Thread-safe for `done` updates.
typedef struct st_progress {
    const char *what;
    uint64_t total;      // units: bytes when `bytes` is set, items otherwise
    int bytes;           // format amounts as bytes
    double t_start;      // seconds (st_now)
    double t_last;
    uint64_t done;       // updated atomically by st_progress_add
    int finished;
} st_progress;

void st_progress_begin(st_progress *p, const char *what, uint64_t total, int bytes);
void st_progress_add(st_progress *p, uint64_t amount);
void st_progress_end(st_progress *p);

// Monotonic seconds.
double st_now(void);
// "1.50 GiB" style; returns buf.
const char *st_fmt_bytes(char *buf, int buflen, double bytes);

#ifdef __cplusplus
}
#endif

#endif
