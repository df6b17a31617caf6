/* base/err.h: kiln's one error convention, shared by every module.
 *
 * Library functions that can fail on a user's input take (char *err, size_t
 * errlen) and fill err with a message the user can act on; set_err does the
 * filling everywhere (engine, jobs, db, server). Where an error becomes an
 * HTTP answer it travels as an api_error: a status, a snake_case code and the
 * message, the three parts of DESIGN.md's {"error": {"code", "message"}}.
 */
#ifndef KILN_BASE_ERR_H
#define KILN_BASE_ERR_H

#include <stddef.h>

/* Formats into err (when err is not NULL and errlen > 0), always terminated,
 * truncated to fit. Returns -1 so that callers can `return set_err(...)`. */
int set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes err in place with "prefix: " (for context added on the way out). */
void set_err_prefix(char *err, size_t errlen, const char *prefix);

/* An error on its way to a client: 400 for a malformed or out-of-range
 * field, 404, 409, 413, 422 for a well-formed request this server cannot
 * honour, 500 for its own failures. */
typedef struct api_error {
    int status;
    char code[48];          /* "invalid_field", "dataset_not_found", ... */
    char message[512];
} api_error;

/* Fills e (which must not be NULL) and returns -1. */
int api_fail(api_error *e, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
