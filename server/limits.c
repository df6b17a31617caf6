/* server/limits.c: the table of kiln serve's limits (contract in limits.h). */
#include "server/limits.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"          /* set_err */
#include "jobs/import.h"        /* IMPORT_*_DEFAULT: kiln import's limits are these defaults */

#define KIB ((uint64_t)1 << 10)
#define MIB ((uint64_t)1 << 20)
#define GIB ((uint64_t)1 << 30)
#define TIB ((uint64_t)1 << 40)
#define OFF(f) offsetof(serve_limits, f)

const limit_def SERVE_LIMIT_DEFS[] = {
    { "json-body-bytes", LIMIT_BYTES, OFF(json_body_bytes), 1 * MIB, 1 * KIB, 64 * MIB,
      "a JSON request body" },
    { "upload-bytes", LIMIT_BYTES, OFF(upload_bytes), 2 * GIB, 1 * MIB, 4 * TIB,
      "one dataset upload's body" },
    { "connections", LIMIT_COUNT, OFF(connections), 10000, 16, 1000000,
      "open HTTP connections in all" },
    { "idle-timeout", LIMIT_SECONDS, OFF(idle_timeout_s), 30, 5, 86400,
      "a connection without traffic is closed after this (SSE streams send a heartbeat every sse-heartbeat)" },
    { "connections-per-client", LIMIT_COUNT, OFF(connections_per_client), 64, 1, 1000000,
      "open HTTP connections of one client address" },
    { "uri-bytes", LIMIT_BYTES, OFF(uri_bytes), 8 * KIB, 1 * KIB, 1 * MIB,
      "a request's URI, path and query (414 past it)" },
    { "header-bytes", LIMIT_BYTES, OFF(header_bytes), 32 * KIB, 1 * KIB, 1 * MIB,
      "a request's header lines together (431 past it)" },
    { "uploads-per-user", LIMIT_COUNT, OFF(uploads_per_user), 4, 1, 10000,
      "dataset uploads one user (or client address) has at once, from the first byte until the archive is imported" },
    { "check-bytes", LIMIT_BYTES, OFF(check_bytes), IMPORT_CHECK_BYTES_DEFAULT, 1 * MIB, 1 * TIB,
      "uncompressed archive bytes an upload's check reads" },
    { "check-seconds", LIMIT_SECONDS, OFF(check_seconds), IMPORT_CHECK_SECONDS_DEFAULT, 1, 3600,
      "time an upload's check may take" },
    { "checks", LIMIT_COUNT, OFF(checks), 2, 1, 256,
      "upload checks run at once; more wait their turn" },
    { "dataset-bytes", LIMIT_BYTES, OFF(dataset_bytes), IMPORT_DATASET_BYTES_DEFAULT, 1 * MIB, 1024 * TIB,
      "a prepared dataset, estimated from image count x shape before anything is written" },
    { "image-pixels", LIMIT_COUNT, OFF(image_pixels), IMPORT_IMAGE_PIXELS_DEFAULT, 1, IMPORT_IMAGE_PIXELS_MAX,
      "one image's pixels (width x height from its header), checked before it is decoded" },
    { "import-pixels", LIMIT_COUNT, OFF(import_pixels), IMPORT_IMPORT_PIXELS_DEFAULT, 1, (uint64_t)1 << 50,
      "the pixels of every image of one import (from their headers), checked before decoding" },
    { "hardware-interval", LIMIT_SECONDS, OFF(hardware_interval_s), 2, 1, 60,
      "seconds between hardware samples (GET /api/v1/hardware keeps the last 10 minutes)" },
    { "cluster-interval", LIMIT_SECONDS, OFF(cluster_interval_s), 10, 1, 600,
      "seconds between two sinfo --json runs for the Slurm cluster's nodes in GET /api/v1/hardware" },
    /* libsodium's Argon2id: its minimums (1 pass, 8 KiB) are for tests only;
     * the defaults are its INTERACTIVE level. server/auth.c checks the pair. */
    { "password-ops", LIMIT_COUNT, OFF(password_ops), 2, 1, 20,
      "Argon2id passes of a new password's hash (kiln user add takes it too)" },
    { "password-mem", LIMIT_BYTES, OFF(password_mem), 64 * MIB, 8 * KIB, 4 * GIB,
      "Argon2id memory of a new password's hash (kiln user add takes it too)" },
    { "session-lifetime", LIMIT_SECONDS, OFF(session_lifetime_s), 7 * 86400, 60, 365 * 86400,
      "a dashboard sign-in (the kiln_session cookie) expires after this" },
    { "sse-heartbeat", LIMIT_SECONDS, OFF(sse_heartbeat_s), 15, 1, 3600,
      "an event stream sends a heartbeat comment this often, so a vanished client is noticed and closed" },
};
const size_t SERVE_LIMIT_COUNT = sizeof SERVE_LIMIT_DEFS / sizeof SERVE_LIMIT_DEFS[0];

static uint64_t *field(serve_limits *l, const limit_def *d)
{
    return (uint64_t *)((char *)l + d->offset);
}

uint64_t serve_limit_value(const serve_limits *l, const limit_def *d)
{
    return *(const uint64_t *)((const char *)l + d->offset);
}

void serve_limits_default(serve_limits *l)
{
    memset(l, 0, sizeof *l);
    for (size_t i = 0; i < SERVE_LIMIT_COUNT; i++)
        *field(l, &SERVE_LIMIT_DEFS[i]) = SERVE_LIMIT_DEFS[i].def;
}

const limit_def *serve_limit_find(const char *name)
{
    for (size_t i = 0; i < SERVE_LIMIT_COUNT; i++)
        if (!strcmp(SERVE_LIMIT_DEFS[i].name, name))
            return &SERVE_LIMIT_DEFS[i];
    return NULL;
}

/* "123", or for bytes "4G" / "512M" / "64K" / "2T" (powers of 1024). */
static int parse_value(const limit_def *d, const char *s, uint64_t *out)
{
    if (!*s || *s == '-' || *s == '+')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return -1;
    uint64_t mul = 1;
    if (*end && d->unit == LIMIT_BYTES) {
        switch (*end) {
        case 'K': case 'k': mul = KIB; break;
        case 'M': case 'm': mul = MIB; break;
        case 'G': case 'g': mul = GIB; break;
        case 'T': case 't': mul = TIB; break;
        default: return -1;
        }
        end++;
        if (*end == 'i' || *end == 'B')
            end += *end == 'i' && end[1] == 'B' ? 2 : 1;
    }
    if (*end || (mul > 1 && v > UINT64_MAX / mul))
        return -1;
    *out = (uint64_t)v * mul;
    return 0;
}

int serve_limits_set(serve_limits *l, const char *assignment, char *err, size_t errlen)
{
    const char *eq = strchr(assignment, '=');
    char name[64];
    size_t n = eq ? (size_t)(eq - assignment) : 0;
    if (!eq || n == 0 || n >= sizeof name)
        return set_err(err, errlen, "--limit takes NAME=VALUE, not \"%s\"", assignment);
    memcpy(name, assignment, n);
    name[n] = '\0';
    const limit_def *d = serve_limit_find(name);
    if (!d) {
        char known[512];
        size_t o = 0;
        known[0] = '\0';
        for (size_t i = 0; i < SERVE_LIMIT_COUNT && o < sizeof known; i++)
            o += (size_t)snprintf(known + o, sizeof known - o, "%s%s", i ? ", " : "", SERVE_LIMIT_DEFS[i].name);
        return set_err(err, errlen, "unknown limit \"%s\"; the limits are %s", name, known);
    }
    uint64_t v;
    if (parse_value(d, eq + 1, &v) != 0 || v < d->min || v > d->max)
        return set_err(err, errlen, "limit %s must be %s from %" PRIu64 " to %" PRIu64 ", not \"%s\"", d->name,
                       d->unit == LIMIT_BYTES ? "a byte count (K, M, G, T: powers of 1024)"
                       : d->unit == LIMIT_SECONDS ? "seconds" : "a count",
                       d->min, d->max, eq + 1);
    *field(l, d) = v;
    return 0;
}

static const char *unit_name(limit_unit u)
{
    return u == LIMIT_BYTES ? "bytes" : u == LIMIT_SECONDS ? "seconds" : "count";
}

void serve_limits_usage(FILE *f)
{
    for (size_t i = 0; i < SERVE_LIMIT_COUNT; i++) {
        const limit_def *d = &SERVE_LIMIT_DEFS[i];
        fprintf(f, "  %-24s %s (default %" PRIu64 "%s)\n", d->name, d->what, d->def,
                d->unit == LIMIT_BYTES ? " bytes" : d->unit == LIMIT_SECONDS ? " s" : "");
    }
}

cJSON *serve_limits_json(const serve_limits *l)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *arr = root ? cJSON_AddArrayToObject(root, "limits") : NULL;
    if (!arr)
        goto fail;
    for (size_t i = 0; i < SERVE_LIMIT_COUNT; i++) {
        const limit_def *d = &SERVE_LIMIT_DEFS[i];
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            goto fail;
        }
        if (!cJSON_AddStringToObject(o, "name", d->name) || !cJSON_AddStringToObject(o, "unit", unit_name(d->unit)) ||
            !cJSON_AddNumberToObject(o, "value", (double)serve_limit_value(l, d)) ||
            !cJSON_AddNumberToObject(o, "default", (double)d->def) ||
            !cJSON_AddNumberToObject(o, "min", (double)d->min) || !cJSON_AddNumberToObject(o, "max", (double)d->max) ||
            !cJSON_AddStringToObject(o, "description", d->what))
            goto fail;
    }
    return root;
fail:
    cJSON_Delete(root);
    return NULL;
}
