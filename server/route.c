/* server/route.c: route matching (contract in route.h). */
#include "server/route.h"

#include <stdio.h>
#include <string.h>

/* Length of the segment starting at s (up to '/' or the end). */
static size_t seg_len(const char *s)
{
    return strcspn(s, "/");
}

/* Parses a positive decimal int64 from s[0..n). */
static bool parse_id(const char *s, size_t n, int64_t *out)
{
    if (n == 0 || n > 19)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v == 0 || v > (uint64_t)INT64_MAX)
        return false;
    *out = (int64_t)v;
    return true;
}

bool route_match(const char *pattern, const char *path, int64_t *id)
{
    int64_t got = 0;
    if (!pattern || !path || pattern[0] != '/' || path[0] != '/')
        return false;
    size_t plen = strlen(path);
    if (plen > 1 && path[plen - 1] == '/')
        plen--;                               /* one trailing slash is ignored */
    const char *u = path, *uend = path + plen, *p = pattern;
    while (*p) {
        if (*p != '/' || u >= uend || *u != '/')
            return false;
        p++;
        u++;
        size_t pl = seg_len(p), ul = 0;
        while (u + ul < uend && u[ul] != '/')
            ul++;
        if (pl == 0 || ul == 0) {
            if (pl == 0 && ul == 0 && *p == '\0' && u == uend)
                break;                        /* the root pattern "/" */
            return false;
        }
        if (pl == 3 && !strncmp(p, ":id", 3)) {
            if (!parse_id(u, ul, &got))
                return false;
        } else if (pl != ul || strncmp(p, u, pl) != 0) {
            return false;
        }
        p += pl;
        u += ul;
    }
    if (u != uend)
        return false;
    if (id)
        *id = got;
    return true;
}

route_status route_find(const route *table, size_t n, const char *method, const char *path,
                        const route **found, int64_t *id, char *allow, size_t allowlen)
{
    bool path_known = false;
    size_t used = 0;
    if (allow && allowlen)
        allow[0] = '\0';
    const char *want = method && !strcmp(method, "HEAD") ? "GET" : method;
    for (size_t i = 0; i < n; i++) {
        int64_t got = 0;
        if (!route_match(table[i].pattern, path, &got))
            continue;
        if (want && !strcmp(table[i].method, want)) {
            if (found)
                *found = &table[i];
            if (id)
                *id = got;
            return ROUTE_FOUND;
        }
        path_known = true;
        if (allow && used < allowlen && !strstr(allow, table[i].method)) {
            int k = snprintf(allow + used, allowlen - used, "%s%s", used ? ", " : "",
                             table[i].method);
            if (k > 0)
                used += (size_t)k;
            if (!strcmp(table[i].method, "GET") && used < allowlen) {
                k = snprintf(allow + used, allowlen - used, ", HEAD");
                if (k > 0)
                    used += (size_t)k;
            }
        }
    }
    return path_known ? ROUTE_BAD_METHOD : ROUTE_NOT_FOUND;
}
