/* server/guard.c: the front door's checks (contract in guard.h). */
#define _GNU_SOURCE           /* memmem */
#include "server/guard.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cjson/cJSON.h>       /* CJSON_NESTING_LIMIT */
#include <microhttpd.h>

#include "base/err.h"          /* set_err */
#include "server/http.h"       /* request, http_error, http_header */

#define GUARD_NAME_MAX 255      /* a DNS name's longest text form */

/* ---- names and ports ------------------------------------------------------- */

/* "name[:port]" -> name (its span in s) and port (0 when absent). Returns
 * false when the text is not a host: empty, an unclosed '[', a port that is
 * not 1..65535, a character no host name has. */
static bool split_host(const char *s, size_t n, const char **name, size_t *name_len, int *port)
{
    const char *colon = NULL;
    *port = 0;
    if (n == 0)
        return false;
    if (s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (!close)
            return false;
        *name = s;
        *name_len = (size_t)(close - s) + 1;
        if (*name_len < n) {
            if (close[1] != ':')
                return false;
            colon = close + 1;
        }
    } else {
        colon = memrchr(s, ':', n);
        *name = s;
        *name_len = colon ? (size_t)(colon - s) : n;
    }
    if (*name_len == 0 || *name_len > GUARD_NAME_MAX + 2)
        return false;
    bool bracketed = s[0] == '[';
    for (size_t i = bracketed; i < *name_len - bracketed; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!(bracketed ? isxdigit(c) || c == ':' || c == '.' : isalnum(c) || c == '.' || c == '-' || c == '_'))
            return false;
    }
    if (colon) {
        size_t digits = n - (size_t)(colon + 1 - s);
        if (digits == 0 || digits > 5)
            return false;
        int p = 0;
        for (const char *d = colon + 1; d < s + n; d++) {
            if (!isdigit((unsigned char)*d))
                return false;
            p = p * 10 + (*d - '0');
        }
        if (p < 1 || p > 65535)
            return false;
        *port = p;
    }
    return true;
}

static int push_host(guard_hosts *h, const char *name, size_t len, int port, char *err, size_t errlen)
{
    for (size_t i = 0; i < h->n; i++)
        if (h->list[i].port == port && strlen(h->list[i].name) == len && !strncasecmp(h->list[i].name, name, len))
            return 0;                          /* already known */
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 16;
        guard_host *nl = realloc(h->list, cap * sizeof *nl);
        if (!nl)
            return set_err(err, errlen, "out of memory");
        h->list = nl;
        h->cap = cap;
    }
    char *copy = strndup(name, len);
    if (!copy)
        return set_err(err, errlen, "out of memory");
    for (char *c = copy; *c; c++)
        *c = (char)tolower((unsigned char)*c);
    h->list[h->n++] = (guard_host){ copy, port };
    return 0;
}

int guard_hosts_add(guard_hosts *h, const char *spec, char *err, size_t errlen)
{
    const char *name;
    size_t len;
    int port;
    if (!split_host(spec, strlen(spec), &name, &len, &port))
        return set_err(err, errlen, "%s takes NAME or NAME:PORT (a host name, an IPv4 address or a bracketed "
                       "IPv6 address, and a port 1..65535), not \"%s\"", GUARD_ALLOWED_HOST_FLAG, spec);
    return push_host(h, name, len, port ? port : GUARD_PORT_ANY, err, errlen);
}

/* An address as a Host header writes it: IPv6 in brackets. */
static int push_addr(guard_hosts *h, const char *addr, char *err, size_t errlen)
{
    char buf[GUARD_NAME_MAX + 3];
    if (strchr(addr, ':')) {
        snprintf(buf, sizeof buf, "[%s]", addr);
        addr = buf;
    }
    return push_host(h, addr, strlen(addr), GUARD_PORT_SELF, err, errlen);
}

static int push_interfaces(guard_hosts *h, char *err, size_t errlen)
{
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0)
        return 0;                              /* the named defaults still apply */
    int rc = 0;
    for (struct ifaddrs *i = ifs; i && rc == 0; i = i->ifa_next) {
        char text[INET6_ADDRSTRLEN];
        if (!i->ifa_addr)
            continue;
        if (i->ifa_addr->sa_family == AF_INET)
            inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, text, sizeof text);
        else if (i->ifa_addr->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr, text, sizeof text);
        else
            continue;
        if (strchr(text, '%'))
            continue;                          /* a scoped link-local address: no Host writes it */
        rc = push_addr(h, text, err, errlen);
    }
    freeifaddrs(ifs);
    return rc;
}

int guard_hosts_defaults(guard_hosts *h, const char *bound_host, char *err, size_t errlen)
{
    static const char *const fixed[] = { "localhost", "127.0.0.1", "::1" };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (push_addr(h, fixed[i], err, errlen) != 0)
            return -1;
    if (push_addr(h, bound_host, err, errlen) != 0)
        return -1;
    if ((!strcmp(bound_host, "0.0.0.0") || !strcmp(bound_host, "::")) && push_interfaces(h, err, errlen) != 0)
        return -1;
    char me[GUARD_NAME_MAX + 1];
    if (gethostname(me, sizeof me) == 0) {
        me[sizeof me - 1] = '\0';
        if (*me && push_addr(h, me, err, errlen) != 0)
            return -1;
    }
    return 0;
}

void guard_hosts_set_port(guard_hosts *h, int port)
{
    atomic_store(&h->port, port);
}

void guard_hosts_free(guard_hosts *h)
{
    for (size_t i = 0; i < h->n; i++)
        free(h->list[i].name);
    free(h->list);
    h->list = NULL;
    h->n = h->cap = 0;
}

bool guard_host_allowed(const guard_hosts *h, const char *host)
{
    const char *name;
    size_t len;
    int port;
    if (!split_host(host, strlen(host), &name, &len, &port))
        return false;
    if (!port)
        port = 80;
    int self = atomic_load(&((guard_hosts *)h)->port);
    for (size_t i = 0; i < h->n; i++) {
        const guard_host *g = &h->list[i];
        if (strlen(g->name) != len || strncasecmp(g->name, name, len) != 0)
            continue;
        if (g->port == GUARD_PORT_ANY || g->port == port || (g->port == GUARD_PORT_SELF && self && self == port))
            return true;
    }
    return false;
}

bool guard_origin_same(const char *origin, const char *host)
{
    int def;
    const char *auth;
    if (!strncasecmp(origin, "http://", 7))
        def = 80, auth = origin + 7;
    else if (!strncasecmp(origin, "https://", 8))
        def = 443, auth = origin + 8;
    else
        return false;                          /* "null", another scheme */
    const char *on, *hn;
    size_t ol, hl;
    int op, hp;
    if (!split_host(auth, strlen(auth), &on, &ol, &op) || !split_host(host, strlen(host), &hn, &hl, &hp))
        return false;
    return ol == hl && !strncasecmp(on, hn, ol) && (op ? op : def) == (hp ? hp : def);
}

/* ---- the first call ---------------------------------------------------------- */

typedef struct byte_sum {
    size_t bytes;
    size_t per_item;            /* what each item adds besides key and value */
} byte_sum;

static enum MHD_Result add_sizes(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                 const char *value, size_t value_size)
{
    (void)kind;
    (void)key;
    byte_sum *s = cls;
    s->bytes += key_size + (value ? value_size : 0) + s->per_item;
    return MHD_YES;
}

static size_t kind_bytes(struct MHD_Connection *c, enum MHD_ValueKind kind, size_t per_item)
{
    byte_sum s = { 0, per_item };
    MHD_get_connection_values_n(c, kind, add_sizes, &s);
    return s.bytes;
}

static bool changes_state(const char *method)
{
    return !strcmp(method, "POST") || !strcmp(method, "PUT") || !strcmp(method, "PATCH") ||
           !strcmp(method, "DELETE");
}

static int hex_digit(unsigned char c)
{
    return isdigit(c) ? c - '0' : tolower(c) - 'a' + 10;
}

bool guard_uri_ctl(const char *raw)
{
    for (const unsigned char *p = (const unsigned char *)raw; *p; p++) {
        int v = *p;
        if (*p == '%' && isxdigit(p[1]) && isxdigit(p[2]))
            v = hex_digit(p[1]) * 16 + hex_digit(p[2]);
        if (v < 0x20 || v == 0x7f)
            return true;
    }
    return false;
}

/* RFC 9110 5.6.2: a header name is a token. "Content-Length : 5" is not one,
 * and a server that skips it reads the body as the next request. */
static bool is_token(const char *s, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!(isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c))))
            return false;
    }
    return true;
}

/* The headers that decide where a body ends or who may write: each may come once. */
static const char *const once_headers[] = { MHD_HTTP_HEADER_CONTENT_LENGTH, MHD_HTTP_HEADER_TRANSFER_ENCODING,
                                            MHD_HTTP_HEADER_HOST, "Origin" };
#define ONCE_COUNT (sizeof once_headers / sizeof once_headers[0])

/* One pass over the header lines: how often each of once_headers comes,
 * and the first name that is not a token. */
typedef struct header_scan {
    int seen[ONCE_COUNT];
    const char *bad_name;
} header_scan;

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                   const char *value, size_t value_size)
{
    (void)kind;
    (void)value;
    (void)value_size;
    header_scan *h = cls;
    if (!is_token(key, key_size)) {
        h->bad_name = key;
        return MHD_NO;
    }
    for (size_t i = 0; i < ONCE_COUNT; i++)
        h->seen[i] += !strcasecmp(key, once_headers[i]);
    return MHD_YES;
}

/* The request's framing, which libmicrohttpd 0.9.75 takes as it comes: a
 * header that decides where the body ends or who may write, sent twice, is
 * refused rather than guessed at (the first and the last may differ between
 * kiln and a proxy in front: request smuggling); so are a Content-Length
 * beside Transfer-Encoding, a transfer coding other than chunked (501, RFC
 * 9112 6.1: its body would never be delivered, and the client would wait)
 * an HTTP/1.1 request without Host (RFC 9112 3.2), a header name that is
 * not a token and a Content-Length that is not digits. */
static bool framing_refused(request *r, int *answered)
{
    header_scan h = { { 0 }, NULL };
    MHD_get_connection_values_n(r->conn, MHD_HEADER_KIND, scan_header, &h);
    if (h.bad_name) {
        *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "bad_request",
                               "the header name \"%.64s\" holds a space or another character a name may not",
                               h.bad_name);
        return true;
    }
    for (size_t i = 0; i < ONCE_COUNT; i++) {
        if (h.seen[i] > 1) {
            *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "bad_request",
                                   "the request has more than one %s header", once_headers[i]);
            return true;
        }
    }
    const char *cl = http_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && (!*cl || strspn(cl, "0123456789") != strlen(cl))) {
        *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "bad_request",
                               "Content-Length \"%.40s\" is not a number of bytes", cl);
        return true;
    }
    const char *te = http_header(r, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    if (te && strcasecmp(te, "chunked") != 0) {
        *answered = http_error(r, MHD_HTTP_NOT_IMPLEMENTED, "not_implemented",
                               "Transfer-Encoding \"%.100s\" is not supported; send the body with a "
                               "Content-Length or \"chunked\"", te);
        return true;
    }
    if (te && http_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "bad_request",
                               "the request has both Content-Length and Transfer-Encoding; send one");
        return true;
    }
    if (r->version && !strcmp(r->version, MHD_HTTP_VERSION_1_1) && !http_header(r, MHD_HTTP_HEADER_HOST)) {
        *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "bad_request",
                               "an HTTP/1.1 request must have a Host header");
        return true;
    }
    return false;
}

bool guard_check(request *r, int *answered)
{
    const serve_limits *l = &r->srv->limits;
    if (r->uri_ctl) {
        *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_uri",
                               "the URL holds a control character (%%00 to %%1F or %%7F, escaped or "
                               "not); no path or query value kiln takes has one");
        return true;
    }
    if (framing_refused(r, answered))
        return true;
    /* The URI as decoded: the path, and each query argument with its '=' and '&'/'?'. */
    size_t uri = strlen(r->url) + kind_bytes(r->conn, MHD_GET_ARGUMENT_KIND, 2);
    if (uri > l->uri_bytes) {
        *answered = http_error(r, MHD_HTTP_URI_TOO_LONG, "uri_too_long",
                               "the request's URI (%zu bytes) is over the limit of %llu bytes (uri-bytes)", uri,
                               (unsigned long long)l->uri_bytes);
        return true;
    }
    /* Each header line as sent: "Name: value\r\n". */
    size_t headers = kind_bytes(r->conn, MHD_HEADER_KIND, 4);
    if (headers > l->header_bytes) {
        *answered = http_error(r, MHD_HTTP_REQUEST_HEADER_FIELDS_TOO_LARGE, "headers_too_large",
                               "the request's headers (%zu bytes) are over the limit of %llu bytes (header-bytes)",
                               headers, (unsigned long long)l->header_bytes);
        return true;
    }
    const char *host = http_header(r, MHD_HTTP_HEADER_HOST);
    if (host && !guard_host_allowed(&r->srv->hosts, host)) {
        *answered = http_error(r, MHD_HTTP_MISDIRECTED_REQUEST, "unknown_host",
                               "this server is not known as \"%.300s\" (the Host header); it answers to localhost, "
                               "its own addresses and host name, and the names given with kiln serve %s "
                               "NAME[:PORT]", host, GUARD_ALLOWED_HOST_FLAG);
        return true;
    }
    const char *origin = http_header(r, "Origin");
    if (origin && changes_state(r->method) && !(host ? guard_origin_same(origin, host) : false)) {
        *answered = http_error(r, MHD_HTTP_FORBIDDEN, "cross_origin",
                               "a request from a page of another site (Origin: %.300s) may not change anything "
                               "here; only this server's own pages (http://%.300s) may", origin,
                               host ? host : "with a Host header");
        return true;
    }
    return false;
}

/* ---- the body's type ------------------------------------------------------------ */

/* "application/json", alone or with parameters ("; charset=utf-8"). */
static bool is_json_type(const char *ct)
{
    if (!ct || strncasecmp(ct, "application/json", 16) != 0)
        return false;
    char next = ct[16];
    return next == '\0' || next == ';' || next == ' ' || next == '\t';
}

bool guard_body_type(request *r, bool has_body, int *answered)
{
    if (!has_body || !r->rt)
        return false;
    bool json_route = r->rt->body == BODY_JSON || (r->rt->body == BODY_NONE && changes_state(r->method));
    const char *ct = http_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!json_route || is_json_type(ct))
        return false;
    *answered = http_error(r, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type",
                           "%s %s takes %s (Content-Type: application/json), not %.200s", r->method, r->url,
                           r->rt->body == BODY_JSON ? "a JSON body" : "no body, or a JSON one",
                           ct ? ct : "a body without a Content-Type");
    return true;
}

/* ---- \u0000 in JSON text ------------------------------------------------------- */

/* Where the scan is: in an object (at a key or its value) or an array. */
typedef struct frame {
    bool obj;
    bool want_key;              /* obj: the next string is a key */
    size_t index;               /* array: the element's index */
    const char *key;            /* obj: the current key's raw text */
    size_t key_len;
} frame;

/* Past the string whose opening quote is s[i]; *nul set when it holds \u0000. */
static size_t skip_string(const char *s, size_t n, size_t i, bool *nul)
{
    *nul = false;
    for (i++; i < n && s[i] != '"'; i++) {
        if (s[i] != '\\')
            continue;
        if (i + 5 < n && s[i + 1] == 'u' && !memcmp(s + i + 2, "0000", 4))
            *nul = true;
        i++;                                   /* the escaped character */
    }
    return i + 1;
}

static void write_path(const frame *st, size_t depth, char *out, size_t outlen)
{
    size_t o = 0;
    out[0] = '\0';
    for (size_t k = 0; k < depth && o < outlen; k++) {
        int w = st[k].obj ? snprintf(out + o, outlen - o, "%s%.*s", k ? "." : "", (int)(st[k].key_len > 40 ? 40
                                     : st[k].key_len), st[k].key ? st[k].key : "")
                          : snprintf(out + o, outlen - o, "[%zu]", st[k].index);
        if (w < 0)
            break;
        o += (size_t)w;
    }
}

/* The path to the first string holding \u0000; s is JSON cJSON accepted. */
static void find_nul_path(const char *s, size_t n, frame *st, size_t max_depth, char *where, size_t wherelen)
{
    size_t depth = 0;
    for (size_t i = 0; i < n;) {
        char c = s[i];
        frame *top = depth ? &st[depth - 1] : NULL;
        if ((c == '{' || c == '[') && depth < max_depth) {
            st[depth++] = (frame){ .obj = c == '{', .want_key = c == '{' };
            i++;
        } else if ((c == '}' || c == ']') && depth) {
            depth--;
            i++;
        } else if (c == ',' && top) {
            if (top->obj)
                top->want_key = true;
            else
                top->index++;
            i++;
        } else if (c == ':' && top) {
            top->want_key = false;
            i++;
        } else if (c == '"') {
            bool nul;
            size_t end = skip_string(s, n, i, &nul);
            bool is_key = top && top->obj && top->want_key;
            if (is_key) {
                top->key = s + i + 1;
                top->key_len = end - i - 2;
            }
            if (nul && is_key) {
                char parent[200];
                write_path(st, depth - 1, parent, sizeof parent);
                if (depth > 1)
                    snprintf(where, wherelen, "a key in \"%s\"", parent);
                else
                    snprintf(where, wherelen, "a key of the body");
                return;
            }
            if (nul) {
                char path[200];
                write_path(st, depth, path, sizeof path);
                snprintf(where, wherelen, "the field \"%s\"", path);
                return;
            }
            i = end;
        } else {
            i++;                               /* whitespace, numbers, true, false, null */
        }
    }
    snprintf(where, wherelen, "a string");
}

bool guard_json_nul(const char *s, size_t n, char *where, size_t wherelen)
{
    bool found = false;
    for (const char *p = memmem(s, n, "\\u0000", 6); p && !found;
         p = memmem(p + 1, n - (size_t)(p + 1 - s), "\\u0000", 6)) {
        size_t run = 1;                        /* "\\u0000" is a backslash and "u0000" */
        while ((size_t)(p - s) >= run && p[-(ptrdiff_t)run] == '\\')
            run++;
        found = run % 2 == 1;
    }
    if (!found)
        return false;
    size_t max_depth = CJSON_NESTING_LIMIT + 1;
    frame *st = malloc(max_depth * sizeof *st);
    if (st)
        find_nul_path(s, n, st, max_depth, where, wherelen);
    else
        snprintf(where, wherelen, "a string");
    free(st);
    return true;
}

/* ---- a key given twice in a JSON object ------------------------------------------------ */

static int cmp_key(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Depth first from v, whose path is path[0..len); true with where filled at
 * the first object holding a key twice. The nesting is cJSON's, at most
 * CJSON_NESTING_LIMIT deep; each object's keys are sorted once. */
static bool dup_from(const cJSON *v, char *path, size_t len, size_t cap, char *where, size_t wherelen)
{
    if (!cJSON_IsObject(v) && !cJSON_IsArray(v))
        return false;
    if (cJSON_IsObject(v)) {
        size_t n = 0;
        for (const cJSON *c = v->child; c; c = c->next)
            n++;
        const char **keys = n > 1 ? malloc(n * sizeof *keys) : NULL;
        if (keys) {
            size_t k = 0;
            for (const cJSON *c = v->child; c; c = c->next)
                keys[k++] = c->string ? c->string : "";
            qsort(keys, n, sizeof *keys, cmp_key);
            for (k = 1; k < n && strcmp(keys[k - 1], keys[k]) != 0; k++)
                ;
            if (k < n) {
                snprintf(where, wherelen, "the key \"%.64s\" is given twice in %s%.*s%s", keys[k],
                         len ? "\"" : "the body", (int)len, path, len ? "\"" : "");
                free(keys);
                return true;
            }
            free(keys);
        }
    }
    size_t i = 0;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
        int w = cJSON_IsObject(v) ? snprintf(path + len, cap - len, "%s%.40s", len ? "." : "", c->string ? c->string : "")
                                  : snprintf(path + len, cap - len, "[%zu]", i);
        size_t sub = w < 0 ? len : len + (size_t)w < cap ? len + (size_t)w : cap - 1;
        if (dup_from(c, path, sub, cap, where, wherelen))
            return true;
        path[len] = '\0';
    }
    return false;
}

bool guard_json_dup(const cJSON *doc, char *where, size_t wherelen)
{
    char path[256] = "";
    return dup_from(doc, path, 0, sizeof path, where, wherelen);
}

size_t guard_mhd_memory_limit(const serve_limits *l)
{
    return (size_t)(2 * (l->uri_bytes + l->header_bytes) + 16 * 1024);
}
