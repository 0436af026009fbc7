// Error reporting: every fallible function returns -1 (or NULL) and leaves a message here.
// The message is per thread, so worker threads and the server never see each other's errors.
// Messages name the file, offset, field or request and say what was expected, e.g.
//   "model.gguf: offset 0x1a2: tensor 'blk.3.attn_q.weight': data ends past end of file (size 1048576)"
#ifndef STRATA_UTIL_ERR_H
#define STRATA_UTIL_ERR_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define ST_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define ST_PRINTF(a, b)
#endif

#define ST_ERR_MAX 1024

// Sets this thread's error message (printf-style) and returns -1 so callers can `return st_err(...)`.
int st_err(const char *fmt, ...) ST_PRINTF(1, 2);
int st_verr(const char *fmt, va_list ap);
// Prepends context ("loading model.gguf: ") to the current message; returns -1.
int st_err_prefix(const char *fmt, ...) ST_PRINTF(1, 2);
// The last message set on this thread ("" if none).
const char *st_errmsg(void);
void st_err_clear(void);

#ifdef __cplusplus
}
#endif

#endif
