/* server/route.h: matching a request's method and path against a route table.
 *
 * Patterns are absolute paths whose segments are literal or ":id"; ":id"
 * matches a positive decimal integer that fits in int64 (at most one per
 * pattern). A trailing slash on the path is ignored ("/api/v1/jobs/" matches
 * "/api/v1/jobs"); empty segments ("//") never match. HEAD is answered by GET
 * routes. Pure functions, no I/O: tested in tests/unit/test_server_route.c.
 */
#ifndef KILN_SERVER_ROUTE_H
#define KILN_SERVER_ROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct request;

/* What a route's body may be: none (any small body is read and ignored), a
 * JSON document (capped at HTTP_JSON_MAX), or a multipart upload (streamed). */
typedef enum route_body { BODY_NONE, BODY_JSON, BODY_UPLOAD } route_body;

typedef struct route {
    const char *method;           /* "GET", "POST", "DELETE" */
    const char *pattern;          /* "/api/v1/jobs/:id/cancel" */
    int (*fn)(struct request *r); /* returns an enum MHD_Result */
    route_body body;
} route;

/* True when path matches pattern; *id receives the ":id" value (0 when the
 * pattern has none). id may be NULL. */
bool route_match(const char *pattern, const char *path, int64_t *id);

typedef enum route_status {
    ROUTE_FOUND,          /* *found set */
    ROUTE_NOT_FOUND,      /* no pattern matches the path */
    ROUTE_BAD_METHOD,     /* the path exists for other methods: allow lists them */
} route_status;

/* Looks up method + path in table[0..n). On ROUTE_BAD_METHOD, allow receives
 * the methods the path takes, comma-separated ("GET, POST"), for a 405's
 * Allow header; allow may be NULL. */
route_status route_find(const route *table, size_t n, const char *method, const char *path,
                        const route **found, int64_t *id, char *allow, size_t allowlen);

#endif
