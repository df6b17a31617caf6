/* engine/errors.h: filling the (char *err, size_t errlen) pair of the engine's
 * fallible functions. */
#ifndef KILN_ENGINE_ERRORS_H
#define KILN_ENGINE_ERRORS_H

#include <stddef.h>

/* Formats into err (when err is not NULL and errlen > 0), always terminated,
 * truncated to fit. Returns -1 so that callers can `return eng_err(...)`. */
int eng_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes err in place with "prefix: " (for context added on the way out). */
void eng_err_prefix(char *err, size_t errlen, const char *prefix);

#endif
