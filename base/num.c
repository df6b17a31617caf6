/* base/num.c: strict number parsing (contract in num.h). */
#include "base/num.h"

#include <errno.h>
#include <stdlib.h>

bool num_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    if (!s || !((*s >= '0' && *s <= '9') || *s == '-'))
        return false;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}
