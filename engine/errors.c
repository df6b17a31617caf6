/* engine/errors.c: error strings for the engine's (err, errlen) convention. */
#include "engine/errors.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int eng_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void eng_err_prefix(char *err, size_t errlen, const char *prefix)
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
