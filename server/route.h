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
 * JSON document (capped at the json-body-bytes limit, server/limits.h), or a multipart upload (streamed). */
typedef enum route_body { BODY_NONE, BODY_JSON, BODY_UPLOAD } route_body;

/* How a BODY_UPLOAD route reads its body (as server/upload.h's upload_begin,
 * upload_data and upload_free do for POST /api/v1/datasets, the default when
 * a route names none): begin on the first call (may answer early), data for
 * each chunk, release from the completion callback. Each returns an enum
 * MHD_Result but release. */
typedef struct route_upload {
    int (*begin)(struct request *r, bool has_body, uint64_t declared);
    int (*data)(struct request *r, const char *data, size_t size);
    void (*release)(struct request *r);
} route_upload;

typedef struct route {
    const char *method;           /* "GET", "POST", "DELETE" */
    const char *pattern;          /* "/api/v1/jobs/:id/cancel" */
    int (*fn)(struct request *r); /* returns an enum MHD_Result */
    route_body body;
    const route_upload *upload;   /* BODY_UPLOAD: NULL for the dataset upload's */
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
