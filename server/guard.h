/* server/guard.h: the front door. What every request must pass before
 * anything else looks at it (issue 15, "no cross-site writes"):
 *
 * - Its size: a URI over the uri-bytes limit gets 414, a header block over
 *   header-bytes 431, both in the JSON error format. libmicrohttpd's own
 *   buffer per connection (guard_mhd_memory_limit) is kept larger than the
 *   two limits together, so that these answers are ours; only a request far
 *   over them (about twice) meets libmicrohttpd's own short HTML 414/431.
 * - Its Host header: one of the names the server is known by (guard_hosts),
 *   else 421. This stops DNS rebinding: a page of evil.example whose name
 *   now resolves to 127.0.0.1 still sends "Host: evil.example:PORT". A
 *   request without Host (HTTP/1.0 only; an HTTP/1.1 one is 400, below)
 *   passes: a browser always sends Host, so such a request does not come
 *   from a web page.
 * - Its Origin header, on a state-changing method (POST, PUT, PATCH, DELETE):
 *   when present it must be this server's own origin (http or https, the
 *   same host and port as the Host header), else 403 naming the origin.
 *   Requests without Origin (curl, scripts) pass: browsers send Origin on
 *   every cross-site request that changes something.
 * - Its URI and framing: a control byte in the URI, raw or escaped, is 400
 *   (guard_uri_ctl); so is a Content-Length, Transfer-Encoding, Host or
 *   Origin header sent twice, both Content-Length and Transfer-Encoding, an
 *   HTTP/1.1 request without Host, a header name that is not a token or a
 *   Content-Length that is not digits; a transfer coding other than chunked
 *   is 501.
 * These run on the access handler's first call (guard_check), before the
 * route is looked at and before any body byte is read or stored.
 *
 * - Its body's type (guard_body_type): a body sent to a JSON route (BODY_JSON,
 *   or a POST/PUT/PATCH/DELETE route that takes no body) must be declared
 *   `Content-Type: application/json`, else 415: the types an HTML form or a
 *   "simple" fetch can send cross-site without asking (text/plain,
 *   application/x-www-form-urlencoded, multipart/form-data, none) are refused.
 * - Its JSON text (guard_json_nul): a string holding \u0000 is refused, naming
 *   the field; cJSON would end the string there and the rest would be lost.
 *   So is an object giving a key twice (guard_json_dup).
 *
 * No CORS header is ever sent: another site's page cannot read an answer.
 */
#ifndef KILN_SERVER_GUARD_H
#define KILN_SERVER_GUARD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "server/limits.h"   /* serve_limits */

struct request;

/* A name the server is known by, with the port it must come with. */
#define GUARD_PORT_ANY  (-1)  /* --allowed-host NAME: any port, or none */
#define GUARD_PORT_SELF (-2)  /* the defaults: the port the server is bound to */

typedef struct guard_host {
    char *name;                 /* lower case; an IPv6 address in brackets */
    int port;                   /* 1..65535, GUARD_PORT_ANY or GUARD_PORT_SELF */
} guard_host;

typedef struct guard_hosts {
    guard_host *list;           /* owned */
    size_t n, cap;
    atomic_int port;            /* the bound port; 0 until known (nothing matches SELF) */
} guard_hosts;

#define GUARD_ALLOWED_HOST_FLAG "--allowed-host"

/* Adds "NAME[:PORT]" (a DNS name, an IPv4 address or a bracketed IPv6
 * address; without a port any port is allowed, for a proxy in front). Returns
 * 0, or -1 with err naming the problem; h is unchanged then. */
int guard_hosts_add(guard_hosts *h, const char *spec, char *err, size_t errlen);

/* Adds the default names, each with the bound port: localhost, 127.0.0.1,
 * [::1], bound_host (the --host value), this machine's host name, and when
 * bound_host is a wildcard (0.0.0.0, ::) every address of its interfaces.
 * Returns 0, or -1 with err set (out of memory). */
int guard_hosts_defaults(guard_hosts *h, const char *bound_host, char *err, size_t errlen);

/* The bound port, once known (before it, a default name matches nothing). */
void guard_hosts_set_port(guard_hosts *h, int port);

/* Frees what h holds; h may be zeroed. */
void guard_hosts_free(guard_hosts *h);

/* True when host (a Host header's value, "name[:port]") is one of h's names
 * with a port it allows. A Host without a port means port 80. Thread-safe. */
bool guard_host_allowed(const guard_hosts *h, const char *host);

/* True when origin ("scheme://host[:port]", an Origin header's value) is
 * http or https on the same host and port as host (the Host header; a
 * default port, 80 or 443, may be left out of either). "null" is not. */
bool guard_origin_same(const char *origin, const char *host);

/* The access handler's first call: size, Host and Origin, in that order.
 * Returns false to go on; true when the request was refused, with
 * *answered what queueing the answer returned (an enum MHD_Result). */
bool guard_check(struct request *r, int *answered);

/* True when the URI as received (before libmicrohttpd decodes it) holds a
 * control byte, raw or %-escaped (%00-%1F, %7F). Decoded, "%00" would end
 * the path there: DELETE /api/v1/jobs/1%00/evaluations/2 would delete job 1. */
bool guard_uri_ctl(const char *raw);

/* After routing (r->rt set or NULL): true when r has a body (has_body) that
 * its route must get as application/json and does not; then 415 is queued
 * and *answered is the result. */
bool guard_body_type(struct request *r, bool has_body, int *answered);

/* True when the JSON text s[0..n), which cJSON has accepted, holds a string
 * with the escape \u0000; where then names it: the field "name", the field
 * "network.layers[2].type", a key in "solver", a key of the body. */
bool guard_json_nul(const char *s, size_t n, char *where, size_t wherelen);

/* True when an object in doc gives a key twice (cJSON keeps both and a
 * lookup finds the first, so which one counts would be a guess); where then
 * says which key and where: the key "epochs" is given twice in "solver". */
struct cJSON;
bool guard_json_dup(const struct cJSON *doc, char *where, size_t wherelen);

/* libmicrohttpd's memory per connection (MHD_OPTION_CONNECTION_MEMORY_LIMIT):
 * room for twice the uri-bytes and header-bytes limits, so that a request
 * just over either is still read and answered by guard_check. */
size_t guard_mhd_memory_limit(const serve_limits *l);

#endif
