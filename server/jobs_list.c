/* server/jobs_list.c: GET /api/v1/jobs with filters, search, sort and keyset
 * paging, and the PATCH body of a job's name, tags, notes and priority (contract in
 * jobs_list.h).
 *
 * The cursor is opaque to clients: base64url (no padding) of
 * {"s": sort, "o": "asc"|"desc", "id": last id, "v": last sort value (a
 * number as text with 17 significant digits, so that it reads back exact)}. It
 * holds the place, not an offset, so a page costs the same at any depth and
 * jobs created meanwhile neither shift nor repeat the rows (db/job_list.c).
 * A cursor made for another sort or order is refused (400) rather than
 * silently starting elsewhere.
 */
#include "server/jobs_list.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "db/store.h"          /* store_job_query_run */
#include "engine/settings.h"   /* precision_names */
#include "jobs/jobcfg.h"       /* JOBCFG_NAME_MAX, JOBCFG_NETWORK_NAME_MAX, JOBCFG_ID_MAX */
#include "server/lookup.h"     /* lookup_owner_filter */
#include "server/render.h"     /* render_job, render_list */

#define B64_VARIANT sodium_base64_VARIANT_URLSAFE_NO_PADDING

/* The query parameters the list takes (anything else is 400). */
static const char *const list_params[] = {
    "status", "dataset", "sweep", "network", "precision", "tag", "q", "sort", "order", "limit", "cursor",
    NULL,
};

static const char *const job_statuses[] = { "queued", "running", "done", "failed", "cancelled", NULL };

static bool in_list(const char *const *names, const char *s, size_t n)
{
    for (size_t i = 0; names[i]; i++)
        if (strlen(names[i]) == n && !strncmp(names[i], s, n))
            return true;
    return false;
}

/* ---- reading the query ----------------------------------------------------- */

typedef struct list_args {
    store_job_query q;
    char status_buf[64];               /* the statuses' texts, q.statuses point in here */
    store_job_key after;               /* the cursor's place (owned) */
    bool have_after;
} list_args;

typedef struct unknown_scan {
    const char *first;                 /* the first parameter not in list_params */
} unknown_scan;

static enum MHD_Result find_unknown(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    (void)value;
    unknown_scan *u = cls;
    if (!u->first && key && !in_list(list_params, key, strlen(key)))
        u->first = key;
    return MHD_YES;
}

/* A parameter's value, NULL when absent or empty (an empty filter is none). */
static const char *arg(request *r, const char *key)
{
    const char *v = http_arg(r, key);
    return v && *v ? v : NULL;
}

static int bad_param(api_error *e, const char *name, const char *fmt_rule, const char *value)
{
    return api_fail(e, 400, "invalid_parameter", "%s must be %s, not \"%.64s\"", name, fmt_rule, value);
}

/* status=done,failed: each a job status, at most once each. */
static int read_statuses(const char *v, list_args *a, api_error *e)
{
    if (strlen(v) >= sizeof a->status_buf)
        return bad_param(e, "status", "a comma-separated list of queued, running, done, failed, cancelled", v);
    snprintf(a->status_buf, sizeof a->status_buf, "%s", v);
    char *save = NULL;
    for (char *t = strtok_r(a->status_buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!in_list(job_statuses, t, strlen(t)))
            return bad_param(e, "status", "a comma-separated list of queued, running, done, failed, cancelled", v);
        bool seen = false;
        for (size_t i = 0; i < a->q.nstatuses; i++)
            seen = seen || !strcmp(a->q.statuses[i], t);
        if (!seen)
            a->q.statuses[a->q.nstatuses++] = t;
    }
    if (a->q.nstatuses == 0)
        return bad_param(e, "status", "a comma-separated list of queued, running, done, failed, cancelled", v);
    return 0;
}

/* A text filter of at most max bytes of UTF-8 without control characters. */
static int read_text(const char *name, const char *v, size_t max, const char **out, api_error *e)
{
    size_t n = strlen(v);
    bool ctrl = false;
    for (size_t i = 0; i < n; i++)
        ctrl = ctrl || (unsigned char)v[i] < 0x20 || v[i] == 0x7f;
    if (n > max || ctrl || !http_utf8_valid(v, n, NULL))
        return api_fail(e, 400, "invalid_parameter", "%s must be text of at most %zu bytes (UTF-8, no "
                        "control characters)", name, max);
    *out = v;
    return 0;
}

static int read_sort(const char *v, list_args *a, api_error *e)
{
    for (int i = 0; store_job_sort_names[i]; i++)
        if (!strcmp(v, store_job_sort_names[i])) {
            a->q.sort = (store_job_sort)i;
            return 0;
        }
    char names[128];
    settings_join(store_job_sort_names, names, sizeof names);
    return bad_param(e, "sort", names, v);
}

/* Decodes the cursor into a->after, checking it was made for this sort and order. */
static int read_cursor(const char *v, list_args *a, api_error *e)
{
    static const char *const rule = "a next_cursor of an earlier page with the same sort and order";
    size_t n = strlen(v), len = 0;
    unsigned char bin[JOBS_LIST_CURSOR_MAX];
    if (n > JOBS_LIST_CURSOR_MAX ||
        sodium_base642bin(bin, sizeof bin - 1, v, n, NULL, &len, NULL, B64_VARIANT) != 0)
        return bad_param(e, "cursor", rule, v);
    bin[len] = '\0';
    cJSON *c = cJSON_ParseWithLength((const char *)bin, len);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(c, "s");
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(c, "o");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
    const cJSON *val = cJSON_GetObjectItemCaseSensitive(c, "v");
    bool numeric = store_job_sort_numeric(a->q.sort);
    bool ok = cJSON_IsString(s) && !strcmp(s->valuestring, store_job_sort_names[a->q.sort]) &&
              cJSON_IsString(o) && !strcmp(o->valuestring, a->q.desc ? "desc" : "asc") &&
              cJSON_IsNumber(id) && id->valuedouble >= 0 && id->valuedouble <= JOBCFG_ID_MAX &&
              id->valuedouble == (double)(int64_t)id->valuedouble &&
              cJSON_IsString(val);
    if (ok) {
        a->after.id = (int64_t)id->valuedouble;
        char *end = NULL;
        if (numeric)
            ok = (a->after.num = strtod(val->valuestring, &end), end != val->valuestring && !*end);
        else
            ok = (a->after.text = strdup(val->valuestring)) != NULL;
        a->have_after = ok;
    }
    cJSON_Delete(c);
    return ok ? 0 : bad_param(e, "cursor", rule, v);
}

/* Fills *a from the request's query; 0, or -1 with e filled (400). */
static int read_args(request *r, list_args *a, api_error *e)
{
    unknown_scan u = { NULL };
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, find_unknown, &u);
    if (u.first)
        return api_fail(e, 400, "unknown_parameter", "unknown parameter \"%.64s\": the jobs list takes "
                        "status, dataset, sweep, network, precision, tag, q, sort, order, limit and cursor", u.first);
    a->q.owner = lookup_owner_filter(r);
    a->q.limit = JOBS_LIST_LIMIT_DEFAULT;
    const char *v;
    int64_t num;
    if ((v = arg(r, "status")) && read_statuses(v, a, e) != 0)
        return -1;
    if ((v = arg(r, "dataset"))) {
        if (!http_parse_i64(v, 1, (int64_t)JOBCFG_ID_MAX, &num))
            return bad_param(e, "dataset", "a dataset id", v);
        a->q.dataset_id = num;
    }
    if ((v = arg(r, "sweep"))) {
        if (!http_parse_i64(v, 1, INT64_MAX, &num))
            return bad_param(e, "sweep", "a sweep id", v);
        a->q.sweep_id = num;
    }
    if ((v = arg(r, "network")) && read_text("network", v, JOBCFG_NETWORK_NAME_MAX, &a->q.network, e) != 0)
        return -1;
    if ((v = arg(r, "precision"))) {
        if (!in_list(precision_names(), v, strlen(v))) {
            char names[96];
            settings_join(precision_names(), names, sizeof names);
            return bad_param(e, "precision", names, v);
        }
        a->q.precision = v;
    }
    if ((v = arg(r, "tag")) && read_text("tag", v, JOB_TAG_MAX, &a->q.tag, e) != 0)
        return -1;
    if ((v = arg(r, "q")) && read_text("q", v, JOBS_LIST_TEXT_MAX, &a->q.text, e) != 0)
        return -1;
    if ((v = arg(r, "sort")) && read_sort(v, a, e) != 0)
        return -1;
    a->q.desc = a->q.sort == STORE_JOB_SORT_CREATED;       /* newest first; the others A to Z */
    if ((v = arg(r, "order"))) {
        if (strcmp(v, "asc") && strcmp(v, "desc"))
            return bad_param(e, "order", "asc or desc", v);
        a->q.desc = !strcmp(v, "desc");
    }
    if ((v = arg(r, "limit"))) {
        if (!http_parse_i64(v, 1, JOBS_LIST_LIMIT_MAX, &num)) {
            char rule[48];
            snprintf(rule, sizeof rule, "an integer from 1 to %d", JOBS_LIST_LIMIT_MAX);
            return bad_param(e, "limit", rule, v);
        }
        a->q.limit = (size_t)num;
    }
    if ((v = arg(r, "cursor")) && read_cursor(v, a, e) != 0)
        return -1;
    if (a->have_after)
        a->q.after = &a->after;
    return 0;
}

/* ---- answering ------------------------------------------------------------- */

/* The cursor after place k for the query's sort and order: a new cJSON string,
 * or NULL when out of memory. */
static cJSON *make_cursor(const store_job_query *q, const store_job_key *k)
{
    /* A number as text with 17 digits: it reads back as the same double
     * (cJSON prints 15 when they compare equal within an epsilon). */
    char num[40];
    snprintf(num, sizeof num, "%.17g", k->num);
    const char *value = store_job_sort_numeric(q->sort) ? num : k->text ? k->text : "";
    cJSON *c = cJSON_CreateObject();
    bool ok = c && cJSON_AddStringToObject(c, "s", store_job_sort_names[q->sort]) &&
              cJSON_AddStringToObject(c, "o", q->desc ? "desc" : "asc") &&
              cJSON_AddNumberToObject(c, "id", (double)k->id) &&
              cJSON_AddStringToObject(c, "v", value) != NULL;
    char *text = ok ? cJSON_PrintUnformatted(c) : NULL;
    cJSON_Delete(c);
    if (!text)
        return NULL;
    size_t n = strlen(text);
    size_t cap = sodium_base64_ENCODED_LEN(n, B64_VARIANT);
    char *b64 = malloc(cap);
    cJSON *s = b64 ? cJSON_CreateString(sodium_bin2base64(b64, cap, (const unsigned char *)text, n,
                                                          B64_VARIANT)) : NULL;
    free(b64);
    free(text);
    return s;
}

int jobs_list_handle(request *r)
{
    list_args a;
    memset(&a, 0, sizeof a);
    api_error e;
    if (read_args(r, &a, &e) != 0) {
        store_job_key_clear(&a.after);
        return http_api_error(r, &e, "the jobs list's parameters are not valid");
    }
    store_job *list = NULL;
    size_t n = 0;
    bool more = false;
    store_job_key next;
    int64_t total = 0;
    int rc = store_job_query_run(r->srv->st, &a.q, &list, &n, &more, &next, &total);
    if (rc != 0) {
        store_job_key_clear(&a.after);
        return http_store_error(r, "listing jobs");
    }
    cJSON *items = cJSON_CreateArray();
    for (size_t i = 0; items && i < n; i++) {
        cJSON *it = render_job(r->srv->st, &list[i]);
        if (!it || !cJSON_AddItemToArray(items, it)) {
            cJSON_Delete(it);
            cJSON_Delete(items);
            items = NULL;
        }
    }
    store_job_list_free(list, n);
    cJSON *o = render_list(items);
    cJSON *cur = more ? make_cursor(&a.q, &next) : cJSON_CreateNull();
    bool ok = o && cur && cJSON_AddItemToObject(o, "next_cursor", cur);
    if (!ok)
        cJSON_Delete(cur);
    ok = ok && cJSON_AddNumberToObject(o, "total", (double)total);
    store_job_key_clear(&next);
    store_job_key_clear(&a.after);
    if (!ok) {
        cJSON_Delete(o);
        o = NULL;
    }
    return http_json(r, MHD_HTTP_OK, o);
}

/* ---- PATCH: name, tags, notes ---------------------------------------------- */

static bool has_control(const char *s, bool allow_newlines)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c < 0x20 && !(allow_newlines && (c == '\n' || c == '\t' || c == '\r'))) || c == 0x7f)
            return true;
    }
    return false;
}

/* A string field (null: ""); its copy in *out. */
static int edit_text(const cJSON *f, const char *name, size_t max, bool newlines, char **out, api_error *e)
{
    if (!cJSON_IsNull(f) && (!cJSON_IsString(f) || strlen(f->valuestring) > max ||
                             has_control(f->valuestring, newlines)))
        return api_fail(e, 400, "invalid_field", "%s must be a string of at most %zu bytes%s", name, max,
                        newlines ? "" : " without control characters");
    if (!(*out = strdup(cJSON_IsNull(f) ? "" : f->valuestring)))
        return api_fail(e, 500, "internal_error", "out of memory");
    return 0;
}

/* The tags: an array (null: []) of strings, each trimmed of spaces, 1 to
 * JOB_TAG_MAX bytes, no control characters; duplicates dropped; at most
 * JOB_TAGS_MAX. Their JSON text in *out. */
static int edit_tags(const cJSON *f, char **out, api_error *e)
{
    static const char *const rule = "tags must be an array of at most %d strings, each 1 to %d bytes "
                                    "without control characters";
    if (!cJSON_IsNull(f) && (!cJSON_IsArray(f) || cJSON_GetArraySize(f) > JOB_TAGS_MAX))
        return api_fail(e, 400, "invalid_field", rule, JOB_TAGS_MAX, JOB_TAG_MAX);
    cJSON *tags = cJSON_CreateArray();
    if (!tags)
        return api_fail(e, 500, "internal_error", "out of memory");
    const cJSON *list = cJSON_IsNull(f) ? NULL : f, *t;
    cJSON_ArrayForEach(t, list) {
        if (!cJSON_IsString(t))
            goto bad;
        const char *s = t->valuestring;
        while (*s == ' ')
            s++;
        size_t n = strlen(s);
        while (n > 0 && s[n - 1] == ' ')
            n--;
        char tag[JOB_TAG_MAX + 1];
        if (n == 0 || n > JOB_TAG_MAX)
            goto bad;
        memcpy(tag, s, n);
        tag[n] = '\0';
        if (has_control(tag, false))
            goto bad;
        bool dup = false;
        const cJSON *seen;
        cJSON_ArrayForEach(seen, tags)
            dup = dup || !strcmp(seen->valuestring, tag);
        if (!dup && !cJSON_AddItemToArray(tags, cJSON_CreateString(tag))) {
            cJSON_Delete(tags);
            return api_fail(e, 500, "internal_error", "out of memory");
        }
    }
    *out = cJSON_PrintUnformatted(tags);
    cJSON_Delete(tags);
    return *out ? 0 : api_fail(e, 500, "internal_error", "out of memory");
bad:
    cJSON_Delete(tags);
    return api_fail(e, 400, "invalid_field", rule, JOB_TAGS_MAX, JOB_TAG_MAX);
}

/* "priority": an integer in jobcfg's range (the same rule as at creation). */
static int edit_priority(const cJSON *f, job_edit *out, api_error *e)
{
    double v = cJSON_IsNumber(f) ? f->valuedouble : 0.5;
    if (v != (double)(long long)v || v < JOBCFG_PRIORITY_MIN || v > JOBCFG_PRIORITY_MAX)
        return api_fail(e, 400, "invalid_field", "priority must be an integer from %d to %d",
                        JOBCFG_PRIORITY_MIN, JOBCFG_PRIORITY_MAX);
    out->has_priority = true;
    out->priority = (int)v;
    return 0;
}

int job_edit_parse(const cJSON *body, job_edit *out, api_error *e)
{
    memset(out, 0, sizeof *out);
    if (!cJSON_IsObject(body))
        return api_fail(e, 400, "invalid_request", "the body must be a JSON object with name, tags, notes "
                        "or priority");
    const cJSON *f;
    int rc = 0;
    cJSON_ArrayForEach(f, body) {
        if (!strcmp(f->string, "name") && !out->name)
            rc = edit_text(f, "name", JOBCFG_NAME_MAX, false, &out->name, e);
        else if (!strcmp(f->string, "notes") && !out->notes)
            rc = edit_text(f, "notes", JOB_NOTES_MAX, true, &out->notes, e);
        else if (!strcmp(f->string, "tags") && !out->tags_json)
            rc = edit_tags(f, &out->tags_json, e);
        else if (!strcmp(f->string, "priority") && !out->has_priority)
            rc = edit_priority(f, out, e);
        else
            rc = api_fail(e, 400, "unknown_field", "unknown field \"%.64s\": a job's PATCH takes name, "
                          "tags, notes and priority", f->string);
        if (rc != 0) {
            job_edit_free(out);
            return -1;
        }
    }
    return 0;
}

void job_edit_free(job_edit *ed)
{
    if (!ed)
        return;
    free(ed->name);
    free(ed->tags_json);
    free(ed->notes);
    memset(ed, 0, sizeof *ed);
}

/* ---- the schema ------------------------------------------------------------ */

cJSON *jobs_list_schema(void)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *sorts = cJSON_CreateStringArray(store_job_sort_names, STORE_JOB_SORT_COUNT);
    bool ok = o && sorts && cJSON_AddItemToObject(o, "sort", sorts);
    if (!ok)
        cJSON_Delete(sorts);
    ok = ok && cJSON_AddNumberToObject(o, "limit_default", JOBS_LIST_LIMIT_DEFAULT) &&
         cJSON_AddNumberToObject(o, "limit_max", JOBS_LIST_LIMIT_MAX) &&
         cJSON_AddNumberToObject(o, "q_max_bytes", JOBS_LIST_TEXT_MAX);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

cJSON *job_edit_schema(void)
{
    cJSON *o = cJSON_CreateObject();
    bool ok = o && cJSON_AddNumberToObject(o, "name_max_bytes", JOBCFG_NAME_MAX) &&
              cJSON_AddNumberToObject(o, "tags_max", JOB_TAGS_MAX) &&
              cJSON_AddNumberToObject(o, "tag_max_bytes", JOB_TAG_MAX) &&
              cJSON_AddNumberToObject(o, "notes_max_bytes", JOB_NOTES_MAX) &&
              cJSON_AddNumberToObject(o, "priority_min", JOBCFG_PRIORITY_MIN) &&
              cJSON_AddNumberToObject(o, "priority_max", JOBCFG_PRIORITY_MAX);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
