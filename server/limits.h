/* server/limits.h: every limit of `kiln serve` that an operator may change,
 * in one table (SERVE_LIMIT_DEFS): its name, unit, default and range. The
 * command line sets them (`kiln serve --limit NAME=VALUE`, repeatable; a
 * byte count takes a K, M, G or T suffix, powers of 1024), `kiln serve
 * --help` and GET /api/v1/limits list them, and the server's code reads the
 * typed values from server.limits, never the table's strings. A request
 * refused at a limit gets a 4xx whose message names the limit (its table
 * name), so that an operator knows which one to raise.
 *
 * To add a limit: a field in serve_limits and a row in SERVE_LIMIT_DEFS
 * (server/limits.c); nothing else parses or prints it.
 */
#ifndef KILN_SERVER_LIMITS_H
#define KILN_SERVER_LIMITS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

typedef struct serve_limits {
    uint64_t json_body_bytes;        /* json-body-bytes: a JSON request body */
    uint64_t upload_bytes;           /* upload-bytes: one dataset upload's body */
    uint64_t connections;            /* connections: open HTTP connections in all */
    uint64_t idle_timeout_s;         /* idle-timeout: a connection with no traffic is closed after this */
    uint64_t password_ops;           /* password-ops: Argon2id passes of a new password's hash (auth.c) */
    uint64_t password_mem;           /* password-mem: Argon2id memory of a new password's hash */
    uint64_t session_lifetime_s;     /* session-lifetime: a dashboard sign-in expires after this */
    uint64_t connections_per_client; /* connections-per-client: open HTTP connections of one client address */
    uint64_t uri_bytes;              /* uri-bytes: a request's URI (server/guard.c) */
    uint64_t header_bytes;           /* header-bytes: a request's header lines together (server/guard.c) */
    uint64_t uploads_per_user;       /* uploads-per-user: dataset uploads one user (or address) has at once */
    uint64_t check_bytes;            /* check-bytes: archive bytes an upload's check decompresses */
    uint64_t check_seconds;          /* check-seconds: time an upload's check may take */
    uint64_t checks;                 /* checks: upload checks run at once (the rest wait their turn) */
    uint64_t dataset_bytes;          /* dataset-bytes: a prepared dataset, estimated before it is written */
    uint64_t image_pixels;           /* image-pixels: one image's pixels, from its header, before decoding */
    uint64_t import_pixels;          /* import-pixels: every image of one import, from their headers */
    uint64_t sse_heartbeat_s;        /* sse-heartbeat: an event stream's heartbeat comment interval (sse.c) */
    uint64_t hardware_interval_s;    /* hardware-interval: seconds between hardware samples (server/hardware.c) */
    uint64_t cluster_interval_s;     /* cluster-interval: seconds between two sinfo runs (server/cluster.c) */
} serve_limits;

typedef enum limit_unit { LIMIT_BYTES, LIMIT_COUNT, LIMIT_SECONDS } limit_unit;

typedef struct limit_def {
    const char *name;                /* "upload-bytes": --limit upload-bytes=4G */
    limit_unit unit;
    size_t offset;                   /* of its uint64_t in serve_limits */
    uint64_t def, min, max;
    const char *what;                /* one line for --help and the API */
} limit_def;

extern const limit_def SERVE_LIMIT_DEFS[];
extern const size_t SERVE_LIMIT_COUNT;

/* Every limit at its default. */
void serve_limits_default(serve_limits *l);

/* Applies "NAME=VALUE". Returns 0, or -1 with err naming the problem (an
 * unknown name lists the known ones; a value out of range gives the range). */
int serve_limits_set(serve_limits *l, const char *assignment, char *err, size_t errlen);

/* The value of the limit named name (NULL def when unknown). */
const limit_def *serve_limit_find(const char *name);
uint64_t serve_limit_value(const serve_limits *l, const limit_def *d);

/* One line a limit for `kiln serve --help`: name, default, what. */
void serve_limits_usage(FILE *f);

/* {"limits": [{"name", "unit", "value", "default", "min", "max", "description"}]} for
 * GET /api/v1/limits; NULL when out of memory. */
cJSON *serve_limits_json(const serve_limits *l);

#endif
