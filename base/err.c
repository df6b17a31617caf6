/* base/err.c: error strings and records (contract in err.h). */
#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void set_err_prefix(char *err, size_t errlen, const char *prefix)
{
    if (!err || errlen == 0)
        return;
    size_t pl = strlen(prefix) + 2;              /* "prefix: " */
    size_t ol = strnlen(err, errlen - 1);
    if (pl >= errlen)
        return;
    if (ol + pl >= errlen)
        ol = errlen - 1 - pl;
    memmove(err + pl, err, ol);
    memcpy(err, prefix, pl - 2);
    err[pl - 2] = ':';
    err[pl - 1] = ' ';
    err[ol + pl] = '\0';
}

int api_fail(api_error *e, int status, const char *code, const char *fmt, ...)
{
    e->status = status;
    snprintf(e->code, sizeof e->code, "%s", code);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}
