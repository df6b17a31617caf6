/* base/utf8.c: the one rule for names that may not be UTF-8 (contract in utf8.h). */
#include "base/utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The length of the well-formed sequence at p[0..n), or 0 when it is not one. */
static size_t seq_len(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4, min = 0x10000;
    else
        return 0;
    if (n < len)
        return 0;
    unsigned cp = c & (0xffu >> (len + 1));
    for (size_t k = 1; k < len; k++) {
        if ((p[k] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

bool utf8_valid(const char *s, size_t n, size_t *bad_at)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = seq_len(p + i, n - i);
        if (!k) {
            if (bad_at)
                *bad_at = i;
            return false;
        }
        i += k;
    }
    return true;
}

size_t utf8_from_any(const char *s, size_t n, char *out, size_t outlen)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = seq_len(p + i, n - i);
        unsigned char latin1[2];
        const unsigned char *src = p + i;
        size_t w = k;
        if (!k) {                                  /* a Latin-1 byte: U+0080..U+00FF */
            latin1[0] = (unsigned char)(0xc0 | (p[i] >> 6));
            latin1[1] = (unsigned char)(0x80 | (p[i] & 0x3f));
            src = latin1;
            w = 2;
            k = 1;
        }
        if (o + w + 1 > outlen)
            break;
        memcpy(out + o, src, w);
        o += w;
        i += k;
    }
    out[o] = '\0';
    return o;
}

char *utf8_dup_any(const char *s, size_t n)
{
    if (n > (SIZE_MAX - 1) / 2)
        return NULL;
    char *out = malloc(2 * n + 1);
    if (out)
        utf8_from_any(s, n, out, 2 * n + 1);
    return out;
}
