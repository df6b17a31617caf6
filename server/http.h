/* server/http.h: the request lifecycle on libmicrohttpd and the answer helpers.
 *
 * Lifecycle (DESIGN.md, HTTP layer): a request's state is created on the
 * access handler's first call and freed in MHD_OPTION_NOTIFY_COMPLETED. The
 * first call passes the front door (server/guard.h: URI and header sizes,
 * Host, Origin) before anything else, then only routes and checks what the headers declare (an oversize
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
#include <time.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "base/err.h"      /* api_error */
#include "server/route.h"
#include "server/server.h"


struct upload;

typedef struct request {
    server *srv;
    struct MHD_Connection *conn;
    const char *url;              /* the path below --base-path, unescaped by MHD (no query string) */
    const char *full_url;         /* the path as received, base path included (the access log) */
    const char *method;
    const char *version;          /* "HTTP/1.1", as MHD gives it */
    bool uri_ctl;                 /* the URI as received holds a control byte (guard_uri_ctl) */
    const char *uri_end;          /* where the URI as received ends as a C string (its NUL) */
    const route *rt;              /* NULL when unrouted (then an error is pending) */
    int64_t id;                   /* the route's :id */

    /* An answer decided before the handler (404/405/413): given at the end. */
    api_error pending;            /* status 0: none */
    char allow[64];               /* Allow header of a 405 */

    char *body;                   /* BODY_JSON/BODY_NONE bytes, NUL-terminated */
    size_t body_len, body_cap;
    bool body_too_large;

    /* Who asks: filled before the handler runs (server/auth.c, issue 15);
     * user_id 0 when the server runs without users (open on loopback). */
    int64_t user_id;
    bool admin;

    double t0;                    /* monotonic seconds at its first byte (GET /metrics' latency) */
    /* The access log (http.c): the status queued, and the connection's TCP
     * bytes written before the request (-1: unknown); its duration is from t0. */
    unsigned status;
    int64_t tcp_sent0;

    struct upload *up;            /* BODY_UPLOAD state (upload.c) */
    void *form;                   /* BODY_UPLOAD state of a route with its own route_upload */
    bool answered;
} request;

/* MHD_OPTION_URI_LOG_CALLBACK: the request's state, made when its URI is
 * seen as received, before libmicrohttpd decodes it in place (cls is the
 * server); the access handler then fills it on its first call. */
void *http_on_uri(void *cls, const char *uri, struct MHD_Connection *c);

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
/* e as the answer: its status when it is 4xx or 5xx (else 400), its code
 * (else "invalid_request"), its message (else `otherwise`). For requests
 * that a jobs/ function refused with an api_error. */
enum MHD_Result http_api_error(request *r, const api_error *e, const char *otherwise);
/* A 500 for a store failure, naming what was being done. */
enum MHD_Result http_store_error(request *r, const char *what);

/* A query argument, or NULL. */
const char *http_arg(request *r, const char *key);
/* A request header, or NULL. */
const char *http_header(request *r, const char *key);

/* Parses the JSON body (BODY_JSON routes). Returns a cJSON owned by the caller,
 * or NULL after queueing a 400 (the caller returns *answered's result). */
cJSON *http_body_json(request *r, enum MHD_Result *answered);

/* ---- multipart/form-data bodies (dataset uploads, classification) --------- */

/* A form body fed to libmicrohttpd's post processor under a cap. What goes
 * wrong while receiving is recorded, the rest of the body dropped, and
 * answered once the body is complete (http_form_failed). */
typedef struct http_form {
    struct MHD_PostProcessor *pp;
    uint64_t total, max;          /* body bytes seen; the cap */
    bool too_large;               /* past max */
    bool parse_failed;            /* MHD_post_process said no */
    int write_errno;              /* storing a part failed (0: it did not) */
    api_error bad;                /* the first problem found in a field (status 0: none) */
} http_form;

/* Records the first problem found while receiving (later ones are dropped). */
#define HTTP_FORM_BAD(f, http_status, ...)                           \
    do {                                                             \
        if (!(f)->bad.status)                                        \
            api_fail(&(f)->bad, (http_status), __VA_ARGS__);         \
    } while (0)

/* Starts f for r's body with cap max; on_field gets r as its closure.
 * MHD_YES, or what answering 400 invalid_multipart returned (no usable
 * boundary). f was zeroed by the caller; free with http_form_free. */
enum MHD_Result http_form_start(request *r, http_form *f, uint64_t max, MHD_PostDataIterator on_field);

/* One text field's part (key, data[0..size) at off) appended to buf (*len
 * bytes so far, at most max, NUL-terminated; *have: the field was seen). A
 * second part of the same field, a NUL byte or more than max bytes is
 * recorded in f as 400 invalid_field naming key, and buf is left as it was:
 * values are never glued together or cut at a NUL. */
void http_form_text(http_form *f, const char *key, char *buf, size_t *len, size_t max, bool *have,
                    const char *data, uint64_t off, size_t size);

/* Feeds body bytes: counted always, dropped once the form went wrong. */
void http_form_data(http_form *f, const char *data, size_t size);

/* What went wrong while receiving, answered (413 body_too_large as "<what>
 * is over the limit of N bytes<hint>", the first field problem, 400
 * invalid_multipart, 507/500 storage_error); false when nothing did. */
bool http_form_failed(request *r, const http_form *f, const char *what, const char *hint,
                      enum MHD_Result *answered);

/* Frees the post processor; f may be zeroed. */
void http_form_free(http_form *f);

/* True when s[0..n) is well-formed UTF-8 (no overlongs, surrogates or code
 * points past U+10FFFF); else *bad_at (may be NULL) is the offending offset. */
bool http_utf8_valid(const char *s, size_t n, size_t *bad_at);

/* Strict parses of query values: decimal integers in [lo, hi]. */
bool http_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);

#endif
