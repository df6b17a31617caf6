/* server/http.h: the request lifecycle on libmicrohttpd and the answer helpers.
 *
 * Lifecycle (DESIGN.md, HTTP layer): a request's state is created on the
 * access handler's first call and freed in MHD_OPTION_NOTIFY_COMPLETED. The
 * first call only routes and checks what the headers declare (an oversize
 * Content-Length gets 413, a wrong Content-Type 415, a body sent to an unknown
 * route 404): those early rejects are the only answers given on the first call.
 * Body bytes are appended (JSON, capped) or streamed to the upload's post
 * processor; the route's handler runs on the first call after the body is
 * complete. A handler may suspend the connection and answer when resumed
 * (uploads): it is then called again with the same request.
 *
 * Every error answer is {"error":{"code","message"}} with a fitting status.
 */
#ifndef KILN_SERVER_HTTP_H
#define KILN_SERVER_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "base/err.h"      /* api_error */
#include "server/route.h"
#include "server/server.h"

#define HTTP_JSON_MAX ((size_t)1 << 20)               /* JSON request bodies: 1 MiB */
#define HTTP_UPLOAD_MAX ((uint64_t)2 << 30)           /* dataset uploads: 2 GiB */

struct upload;

typedef struct request {
    server *srv;
    struct MHD_Connection *conn;
    const char *url;              /* the path, unescaped by MHD (no query string) */
    const char *method;
    const route *rt;              /* NULL when unrouted (then an error is pending) */
    int64_t id;                   /* the route's :id */

    /* An answer decided before the handler (404/405/413): given at the end. */
    api_error pending;            /* status 0: none */
    char allow[64];               /* Allow header of a 405 */

    char *body;                   /* BODY_JSON/BODY_NONE bytes, NUL-terminated */
    size_t body_len, body_cap;
    bool body_too_large;

    struct upload *up;            /* BODY_UPLOAD state (upload.c) */
    void *form;                   /* BODY_UPLOAD state of a route with its own route_upload */
    bool answered;
} request;

/* The MHD access handler and completion callback (cls is the server). */
enum MHD_Result http_on_request(void *cls, struct MHD_Connection *c, const char *url,
                                const char *method, const char *version, const char *data,
                                size_t *size, void **con_cls);
void http_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                       enum MHD_RequestTerminationCode toe);

/* The route table (api.c), for http.c and for the OpenAPI consistency test. */
extern const route http_routes[];
extern const size_t http_route_count;

/* ---- answers: each queues a response and returns MHD_YES, or MHD_NO when the
 * response could not be made (MHD then closes the connection). ------------- */

/* Queues resp with status and releases the caller's reference. */
enum MHD_Result http_queue(request *r, unsigned status, struct MHD_Response *resp);
/* A JSON answer; takes ownership of body (freed here, NULL gives a 500). */
enum MHD_Result http_json(request *r, unsigned status, cJSON *body);
/* {"error":{"code":code,"message":...}}. */
enum MHD_Result http_error(request *r, unsigned status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A 500 for a store failure, naming what was being done. */
enum MHD_Result http_store_error(request *r, const char *what);

/* A query argument, or NULL. */
const char *http_arg(request *r, const char *key);
/* A request header, or NULL. */
const char *http_header(request *r, const char *key);

/* Parses the JSON body (BODY_JSON routes). Returns a cJSON owned by the caller,
 * or NULL after queueing a 400 (the caller returns *answered's result). */
cJSON *http_body_json(request *r, enum MHD_Result *answered);

/* True when s[0..n) is well-formed UTF-8 (no overlongs, surrogates or code
 * points past U+10FFFF); else *bad_at (may be NULL) is the offending offset. */
bool http_utf8_valid(const char *s, size_t n, size_t *bad_at);

/* Strict parses of query values: decimal integers in [lo, hi]. */
bool http_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);

#endif
