/* server/http.c: the request lifecycle and answer helpers (contract in http.h).
 *
 * Guarantees:
 * - A request body is never truncated: past its cap the request gets 413
 *   (at once when Content-Length declares it, else once the body has ended).
 * - Every answer the layer makes itself (404, 405, 413, 415, 400 on bad JSON)
 *   is a JSON error body; a 405 carries Allow.
 * - Request state is freed exactly once, in the completion callback, whatever
 *   happened (client gone, early reject, suspended upload resumed).
 * - With --base-path /p every path lives under /p/: a request for /p/x is
 *   routed as /x; /p itself is redirected (308) to /p/; /healthz is answered
 *   at both places; any other path is a 404 outside_base_path (before
 *   routing, sign-in or body).
 * - The access log (--access-log, on by default): one line a request on
 *   stderr when it completes, written with one fprintf (lines never mix):
 *     kiln: access TIME CLIENT METHOD PATH STATUS BYTES MS user=ID
 *   TIME is RFC 3339 UTC with milliseconds; CLIENT the peer address; PATH
 *   as received (base path included, no query string; bytes outside
 *   printable ASCII, '%' and '"' as %XX); STATUS the status queued, or '-'
 *   when none was (client gone first); BYTES the bytes written to the
 *   connection for this request, headers included (TCP_INFO), or '-';
 *   MS the time from the request's headers to its end (a stream's whole
 *   life); ID the user who asked, '-' for none. "on" leaves out GET
 *   /healthz and GET /metrics (monitors poll them); "all" keeps them.
 *   Requests that libmicrohttpd refuses by itself (over the connection
 *   limits, malformed request lines) are not logged.
 */
#include "server/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/tcp.h>              /* struct tcp_info with tcpi_bytes_sent, TCP_INFO */
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/utf8.h"              /* utf8_valid, utf8_dup_any: answers are UTF-8 */
#include "base/num.h"               /* num_parse_i64 */
#include "server/auth.h"           /* auth_request */
#include "server/guard.h"          /* guard_check, guard_body_type, guard_json_nul */
#include "server/prom.h"           /* prom_http_observe: GET /metrics' request counters */
#include "server/static_files.h"   /* static_serve */
#include "server/upload.h"         /* upload_begin, upload_data, upload_free */

/* ---- answers -------------------------------------------------------------- */

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static bool is_api(const char *url);

/* What GET /metrics labels a request with: its route's pattern, "static" for a
 * dashboard file, "unrouted" for anything else (never the raw URL). */
static const char *route_label(const request *r)
{
    if (r->rt)
        return r->rt->pattern;
    if (!r->pending.status && !is_api(r->url) && (!strcmp(r->method, "GET") || !strcmp(r->method, "HEAD")))
        return "static";
    return "unrouted";
}

enum MHD_Result http_queue(request *r, unsigned status, struct MHD_Response *resp)
{
    if (!resp)
        return MHD_NO;
    enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    if (ret == MHD_YES) {
        r->answered = true;
        r->status = status;
        prom_http_observe(r->method, route_label(r), status, mono_now() - r->t0);
    }
    return ret;
}

enum MHD_Result http_json(request *r, unsigned status, cJSON *body)
{
    char *text = body ? cJSON_PrintUnformatted(body) : NULL;
    cJSON_Delete(body);
    if (!text) {
        static const char oom[] =
            "{\"error\":{\"code\":\"internal_error\",\"message\":\"out of memory rendering the answer\"}}";
        struct MHD_Response *resp = MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom,
                                                                    MHD_RESPMEM_PERSISTENT);
        if (!resp)
            return MHD_NO;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
        return http_queue(r, MHD_HTTP_INTERNAL_SERVER_ERROR, resp);
    }
    size_t len = strlen(text);
    if (!utf8_valid(text, len, NULL)) {
        /* Defence in depth: cJSON copies a string's bytes as they are, and a
         * name that reached the store in another encoding must not make the
         * answer invalid JSON (base/utf8.h's rule: such bytes read as Latin-1). */
        char *fixed = utf8_dup_any(text, len);
        if (fixed) {
            cJSON_free(text);
            text = fixed;
            len = strlen(text);
        }
    }
    /* A trailing newline makes curl output readable. */
    char *with_nl = realloc(text, len + 2);
    if (with_nl) {
        text = with_nl;
        text[len++] = '\n';
        text[len] = '\0';
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED && r->allow[0])
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    return http_queue(r, status, resp);
}

static enum MHD_Result error_v(request *r, unsigned status, const char *code, const char *fmt,
                               va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    cJSON *root = cJSON_CreateObject();
    cJSON *e = root ? cJSON_AddObjectToObject(root, "error") : NULL;
    if (!e || !cJSON_AddStringToObject(e, "code", code) || !cJSON_AddStringToObject(e, "message", msg)) {
        cJSON_Delete(root);
        root = NULL;
    }
    return http_json(r, status, root);
}

enum MHD_Result http_error(request *r, unsigned status, const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    enum MHD_Result ret = error_v(r, status, code, fmt, ap);
    va_end(ap);
    return ret;
}

enum MHD_Result http_api_error(request *r, const api_error *e, const char *otherwise)
{
    return http_error(r, e->status >= 400 && e->status < 600 ? (unsigned)e->status : 400,
                      e->code[0] ? e->code : "invalid_request", "%s", e->message[0] ? e->message : otherwise);
}

enum MHD_Result http_store_error(request *r, const char *what)
{
    fprintf(stderr, "kiln: %s %s: store error while %s\n", r->method, r->url, what);
    return http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "store_error",
                      "the database failed while %s; see the server log", what);
}

const char *http_arg(request *r, const char *key)
{
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, key);
}

const char *http_header(request *r, const char *key)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, key);
}

bool http_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    return num_parse_i64(s, lo, hi, out);    /* base/num.c: the one strict rule */
}

bool http_utf8_valid(const char *s, size_t n, size_t *bad_at)
{
    return utf8_valid(s, n, bad_at);         /* base/utf8.c: the one definition */
}

enum MHD_Result http_form_start(request *r, http_form *f, uint64_t max, MHD_PostDataIterator on_field)
{
    f->max = max;
    f->pp = MHD_create_post_processor(r->conn, 64 * 1024, on_field, r);
    if (!f->pp)
        return http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_multipart",
                          "the multipart/form-data body has no usable boundary");
    return MHD_YES;
}

void http_form_text(http_form *f, const char *key, char *buf, size_t *len, size_t max, bool *have,
                    const char *data, uint64_t off, size_t size)
{
    /* A part starts at off 0; libmicrohttpd may hand over a part's first
     * 0 bytes before its data, so only a field with bytes already is seen twice. */
    if (off == 0 && *have && *len > 0) {
        HTTP_FORM_BAD(f, MHD_HTTP_BAD_REQUEST, "invalid_field", "the form has field \"%s\" more than once", key);
        return;
    }
    *have = true;
    if (memchr(data, '\0', size)) {
        HTTP_FORM_BAD(f, MHD_HTTP_BAD_REQUEST, "invalid_field", "field \"%s\" holds a NUL byte", key);
        return;
    }
    if (*len + size > max) {
        HTTP_FORM_BAD(f, MHD_HTTP_BAD_REQUEST, "invalid_field", "field \"%s\" is longer than %zu bytes", key, max);
        return;
    }
    memcpy(buf + *len, data, size);
    *len += size;
    buf[*len] = '\0';
}

void http_form_data(http_form *f, const char *data, size_t size)
{
    f->total += size;
    if (f->too_large || f->parse_failed)
        return;                              /* dropped; answered at the end */
    if (f->total > f->max) {
        f->too_large = true;
        return;
    }
    if (MHD_post_process(f->pp, data, size) != MHD_YES)
        f->parse_failed = true;
}

bool http_form_failed(request *r, const http_form *f, const char *what, const char *hint,
                      enum MHD_Result *answered)
{
    if (f->too_large)
        *answered = http_error(r, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                               "%s is over the limit of %llu bytes%s", what, (unsigned long long)f->max, hint);
    else if (f->bad.status)
        *answered = http_error(r, (unsigned)f->bad.status, f->bad.code, "%s", f->bad.message);
    else if (f->parse_failed)
        *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_multipart",
                               "the multipart/form-data body could not be parsed");
    else if (f->write_errno)
        *answered = http_error(r, f->write_errno == ENOSPC || f->write_errno == EDQUOT
                                      ? MHD_HTTP_INSUFFICIENT_STORAGE : MHD_HTTP_INTERNAL_SERVER_ERROR,
                               "storage_error", "could not store the upload: %s", strerror(f->write_errno));
    else
        return false;
    return true;
}

void http_form_free(http_form *f)
{
    if (f->pp)
        MHD_destroy_post_processor(f->pp);
    f->pp = NULL;
}

cJSON *http_body_json(request *r, enum MHD_Result *answered)
{
    if (!r->body_len) {
        *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_json",
                               "the request needs a JSON object as its body");
        return NULL;
    }
    /* cJSON takes any byte below 0x20 for whitespace and does not check UTF-8:
     * JSON allows neither raw control bytes nor other encodings. */
    size_t bad = 0;
    for (size_t i = 0; i < r->body_len; i++) {
        unsigned char ch = (unsigned char)r->body[i];
        if (ch < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') {
            *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_json",
                                   "the body holds a control byte (0x%02x) at byte %zu; JSON does not "
                                   "allow it", ch, i);
            return NULL;
        }
    }
    if (!http_utf8_valid(r->body, r->body_len, &bad)) {
        *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_json",
                               "the body is not UTF-8 (at byte %zu)", bad);
        return NULL;
    }
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithLengthOpts(r->body, r->body_len, &end, 0);
    if (!doc) {
        size_t at = end && end >= r->body ? (size_t)(end - r->body) : 0;
        *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_json",
                               "the body is not valid JSON (parsing stopped at byte %zu of %zu)",
                               at, r->body_len);
        return NULL;
    }
    /* Only whitespace may follow the document. */
    for (const char *p = end; p && p < r->body + r->body_len; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n') {
            cJSON_Delete(doc);
            *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_json",
                                   "the body has text after its JSON value (at byte %zu)",
                                   (size_t)(p - r->body));
            return NULL;
        }
    }
    if (!cJSON_IsObject(doc)) {
        cJSON_Delete(doc);
        *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_json",
                               "the body must be a JSON object ({...})");
        return NULL;
    }
    /* cJSON ends a string at \u0000 and drops the rest: refused, not truncated. */
    char where[256];
    if (guard_json_nul(r->body, r->body_len, where, sizeof where)) {
        cJSON_Delete(doc);
        *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_json",
                               "%s holds \\u0000 (a NUL character), which kiln does not take in text", where);
        return NULL;
    }
    if (guard_json_dup(doc, where, sizeof where)) {
        cJSON_Delete(doc);
        *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_json", "%s; give each once", where);
        return NULL;
    }
    return doc;
}

/* ---- the lifecycle -------------------------------------------------------- */

static enum MHD_Result answer_pending(request *r)
{
    return http_error(r, (unsigned)r->pending.status, r->pending.code, "%s", r->pending.message);
}

/* Does the request declare a body (Content-Length > 0 or chunked)? */
static bool has_body(request *r, uint64_t *declared, bool *known)
{
    const char *cl = http_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *te = http_header(r, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    *known = false;
    *declared = 0;
    if (cl) {
        errno = 0;
        char *end;
        unsigned long long v = strtoull(cl, &end, 10);
        if (!errno && end != cl && *end == '\0') {
            *known = true;
            *declared = v;
        }
    }
    return (*known && *declared > 0) || (te && *te);
}

static bool is_api(const char *url)
{
    return !strncmp(url, "/api/", 5) || !strcmp(url, "/api");
}

/* First call: route, check declared size and type. Returns MHD_YES to go on;
 * an early reject is queued here. */
static enum MHD_Result request_begin(request *r)
{
    uint64_t declared;
    bool known;
    bool body = has_body(r, &declared, &known);

    route_status rs = route_find(http_routes, http_route_count, r->method, r->url, &r->rt, &r->id,
                                 r->allow, sizeof r->allow);
    if (rs == ROUTE_NOT_FOUND && !is_api(r->url) &&
        (!strcmp(r->method, "GET") || !strcmp(r->method, "HEAD"))) {
        r->rt = NULL;                /* a static file: answered at the end */
    } else if (rs == ROUTE_NOT_FOUND) {
        api_fail(&r->pending, MHD_HTTP_NOT_FOUND, "not_found", "no such route: %s %s (the API is under /api/v1)",
                    r->method, r->url);
    } else if (rs == ROUTE_BAD_METHOD) {
        api_fail(&r->pending, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed",
                    "%s does not take %s (it takes %s)", r->url, r->method, r->allow);
    }
    if (!r->pending.status && r->rt)
        auth_request(r);                    /* who asks (server/auth.h): r->user_id, r->admin, or a 401 */
    if (r->pending.status) {
        if (body)
            return answer_pending(r);       /* early: do not read a body we will not use */
        return MHD_YES;
    }

    if (r->rt && r->rt->body == BODY_UPLOAD && r->rt->upload)
        return (enum MHD_Result)r->rt->upload->begin(r, body, known ? declared : UINT64_MAX);
    if (r->rt && r->rt->body == BODY_UPLOAD)
        return upload_begin(r, body, known ? declared : UINT64_MAX);

    const uint64_t json_max = r->srv->limits.json_body_bytes;
    if (body && known && declared > json_max)
        return http_error(r, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                          "the request body (%llu bytes) is over the limit of %llu bytes (json-body-bytes)",
                          (unsigned long long)declared, (unsigned long long)json_max);
    int refused;
    if (guard_body_type(r, body, &refused))
        return (enum MHD_Result)refused;
    return MHD_YES;
}

/* A chunk of body. Returns MHD_YES, or MHD_NO to drop the connection. */
static enum MHD_Result request_data(request *r, const char *data, size_t size)
{
    if (r->up)
        return upload_data(r, data, size);
    if (r->form)
        return (enum MHD_Result)r->rt->upload->data(r, data, size);
    if (r->body_too_large || r->pending.status)
        return MHD_YES;                     /* read and dropped; answered at the end */
    if (size > r->srv->limits.json_body_bytes - r->body_len) {
        r->body_too_large = true;
        free(r->body);
        r->body = NULL;
        r->body_len = r->body_cap = 0;
        /* libmicrohttpd 0.9.75 cannot queue an answer mid-body (MHD_queue_response
         * says no), so the rest is read and dropped and the 413 comes at its end. */
        return MHD_YES;
    }
    if (r->body_len + size + 1 > r->body_cap) {
        size_t cap = r->body_cap ? r->body_cap : 4096;
        while (cap < r->body_len + size + 1)
            cap *= 2;
        char *nb = realloc(r->body, cap);
        if (!nb)
            return MHD_NO;
        r->body = nb;
        r->body_cap = cap;
    }
    memcpy(r->body + r->body_len, data, size);
    r->body_len += size;
    r->body[r->body_len] = '\0';
    return MHD_YES;
}

/* The body is complete: answer. */
static enum MHD_Result request_end(request *r)
{
    if (r->pending.status)
        return answer_pending(r);
    if (r->body_too_large)
        return http_error(r, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                          "the request body is over the limit of %llu bytes (json-body-bytes)",
                          (unsigned long long)r->srv->limits.json_body_bytes);
    if (!r->rt)
        return static_serve(r);
    return (enum MHD_Result)r->rt->fn(r);
}

/* ---- the base path ---------------------------------------------------------- */

/* Places r->url below --base-path. Returns false to go on; true when the
 * request is answered here or a 404 is pending (*ret is what to return). */
static bool base_path_route(request *r, enum MHD_Result *ret)
{
    const char *base = r->srv->base_path;
    size_t n = strlen(base);
    if (!n)
        return false;
    if (!strncmp(r->url, base, n) && r->url[n] == '/') {
        r->url += n;
        return false;
    }
    if (!strcmp(r->url, "/healthz"))
        return false;                /* also here: the container's HEALTHCHECK and direct probes */
    if (!strcmp(r->url, base)) {
        /* The dashboard's relative links need the trailing slash. */
        char to[SERVE_BASE_PATH_MAX + 1];
        snprintf(to, sizeof to, "%s/", base);
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        if (resp)
            MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, to);
        *ret = http_queue(r, MHD_HTTP_PERMANENT_REDIRECT, resp);
        return true;
    }
    api_fail(&r->pending, MHD_HTTP_NOT_FOUND, "outside_base_path",
             "kiln is served under %s/ (--base-path); %s is outside it", base, r->url);
    uint64_t declared;
    bool known;
    *ret = has_body(r, &declared, &known) ? answer_pending(r) : MHD_YES;
    return true;
}

/* ---- the access log ----------------------------------------------------------- */

/* Bytes the application has written to c's socket (sent once, or waiting to
 * be sent), or -1 when the kernel does not say. */
static int64_t tcp_written(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (!ci || getsockopt(ci->connect_fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_sent) + sizeof ti.tcpi_bytes_sent)
        return -1;
    return (int64_t)(ti.tcpi_bytes_sent - ti.tcpi_bytes_retrans + ti.tcpi_notsent_bytes);
}

static bool access_logged(const request *r)
{
    static const char *const polled[] = { "/healthz", "/metrics" };
    access_log_mode m = r->srv->access_log;
    if (m == ACCESS_LOG_OFF)
        return false;
    if (m == ACCESS_LOG_ALL || strcmp(r->method, "GET") != 0)
        return true;
    for (size_t i = 0; i < sizeof polled / sizeof polled[0]; i++)
        if (!strcmp(r->url, polled[i]))
            return false;
    return true;
}

/* s with bytes outside printable ASCII, '%' and '"' as %XX, cut to fit. */
static void log_escape(char *out, size_t n, const char *s)
{
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && o + 4 < n; p++) {
        if (*p <= 0x20 || *p >= 0x7f || *p == '%' || *p == '"')
            o += (size_t)snprintf(out + o, n - o, "%%%02X", *p);
        else
            out[o++] = (char)*p;
    }
    out[o] = '\0';
}

static void client_address(struct MHD_Connection *c, char *out, size_t n)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    snprintf(out, n, "-");
    if (!ci || !ci->client_addr)
        return;
    const struct sockaddr *sa = ci->client_addr;
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, out, (socklen_t)n);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, out, (socklen_t)n);
}

static void access_log(request *r)
{
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    double ms = (mono_now() - r->t0) * 1e3;
    struct tm tm;
    gmtime_r(&wall.tv_sec, &tm);
    char when[40], path[1024], client[INET6_ADDRSTRLEN + 1], status[16] = "-", bytes[24] = "-", user[24] = "-";
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    log_escape(path, sizeof path, r->full_url);
    client_address(r->conn, client, sizeof client);
    if (r->status)
        snprintf(status, sizeof status, "%u", r->status);
    int64_t sent = r->tcp_sent0 >= 0 ? tcp_written(r->conn) : -1;
    if (sent >= r->tcp_sent0 && r->tcp_sent0 >= 0)
        snprintf(bytes, sizeof bytes, "%lld", (long long)(sent - r->tcp_sent0));
    if (r->user_id)
        snprintf(user, sizeof user, "%lld", (long long)r->user_id);
    fprintf(stderr, "kiln: access %s.%03ldZ %s %s %s %s %s %.3f user=%s\n", when, wall.tv_nsec / 1000000L,
            client, r->method, path, status, bytes, ms, user);
}

void *http_on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    request *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->srv = cls;
    r->conn = c;
    r->uri_ctl = guard_uri_ctl(uri);
    r->uri_end = uri + strlen(uri);
    return r;
}

enum MHD_Result http_on_request(void *cls, struct MHD_Connection *c, const char *url,
                                const char *method, const char *version, const char *data,
                                size_t *size, void **con_cls)
{
    (void)cls;
    request *r = *con_cls;
    if (!r)                                 /* http_on_uri ran out of memory: the URI went unchecked */
        return MHD_NO;
    if (!r->method) {                       /* the first call */
        r->url = r->full_url = url;
        r->method = method;
        r->version = version;
        /* libmicrohttpd ends the URI where the request line's last space was
         * and the version follows it; a raw NUL inside the URI ends the C
         * string earlier, with bytes left before the version. */
        if (version && version > r->uri_end + 1)
            r->uri_ctl = true;
        r->t0 = mono_now();
        r->tcp_sent0 = r->srv->access_log != ACCESS_LOG_OFF ? tcp_written(c) : -1;
        *con_cls = r;
        int refused;
        if (guard_check(r, &refused))       /* size, Host, Origin: before anything else */
            return (enum MHD_Result)refused;
        enum MHD_Result ret;
        if (base_path_route(r, &ret))
            return ret;
        return request_begin(r);
    }
    if (r->answered) {
        *size = 0;                          /* an early answer is queued: drop the rest */
        return MHD_YES;
    }
    if (*size) {
        enum MHD_Result ret = request_data(r, data, *size);
        *size = 0;
        return ret;
    }
    return request_end(r);
}

void http_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                       enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    request *r = *con_cls;
    if (!r)
        return;
    if (r->method && access_logged(r))      /* no method: it never reached the handler */
        access_log(r);
    upload_free(r);
    if (r->rt && r->rt->upload)
        r->rt->upload->release(r);
    free(r->body);
    free(r);
    *con_cls = NULL;
}
