/* server/dataset_source.c: a dataset from files on the server (contract in
 * dataset_source.h).
 *
 * Everything a request can get wrong is checked on the HTTP thread before
 * the dataset exists: the members, the source's type and paths (the import
 * roots' rule is jobs/import_roots.c's, the options' limits jobs/import.c's
 * table), so that a bad request leaves no row. The import itself runs on its
 * own thread (jobs/import_job.c) and is counted in srv->imports for the
 * shutdown sequence, as an upload's is.
 */
#include "server/dataset_source.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "jobs/import_job.h"      /* import_job_begin, import_job_spawn */
#include "jobs/import_roots.h"    /* import_roots_check */
#include "server/auth.h"          /* auth_own */
#include "server/render.h"        /* render_dataset */
#include "server/upload.h"        /* dataset_name_ok, DATASET_NAME_MAX */

typedef enum path_want { WANT_FOLDER, WANT_FILE, WANT_EITHER } path_want;

/* The source types a JSON request may name, and what their path is. */
static const struct source_type {
    import_kind kind;
    path_want want;
    bool labels;                  /* takes "labels" */
} source_types[] = {
    { IMPORT_FOLDER, WANT_FOLDER, false },
    { IMPORT_LIST, WANT_FILE, true },
    { IMPORT_IDX, WANT_FOLDER, false },
    { IMPORT_CIFAR, WANT_EITHER, false },
};
#define SOURCE_TYPE_COUNT (sizeof source_types / sizeof source_types[0])

typedef struct source_req {
    char name[DATASET_NAME_MAX + 1];
    const struct source_type *type;
    import_source src;            /* path and labels point at the resolved paths below */
    char path[PATH_MAX], labels[PATH_MAX];
} source_req;

/* ---- reading the request --------------------------------------------------------- */

static bool is_option(const char *name)
{
    for (int i = 0; i < IMPORT_OPTION_COUNT; i++)
        if (!strcmp(name, import_option_name(i)))
            return true;
    return false;
}

static int unknown_member(const char *name, api_error *e)
{
    char options[256] = "";
    for (int i = 0, o = 0; i < IMPORT_OPTION_COUNT && o < (int)sizeof options; i++)
        o += snprintf(options + o, sizeof options - (size_t)o, "%s%s", i ? ", " : "", import_option_name(i));
    return api_fail(e, 400, "unknown_field",
                    "unknown field \"%.64s\": a dataset from the server takes name, source and the "
                    "options %s", name, options);
}

static const struct source_type *find_type(const char *name)
{
    import_kind k;
    if (import_kind_parse(name, &k) != 0)
        return NULL;
    for (size_t i = 0; i < SOURCE_TYPE_COUNT; i++)
        if (source_types[i].kind == k)
            return &source_types[i];
    return NULL;
}

static int bad_type(const cJSON *t, api_error *e)
{
    char names[128] = "";
    for (size_t i = 0, o = 0; i < SOURCE_TYPE_COUNT && o < sizeof names; i++)
        o += (size_t)snprintf(names + o, sizeof names - o, "%s\"%s\"", i ? ", " : "",
                              import_kind_name(source_types[i].kind));
    if (cJSON_IsString(t) && !strcmp(t->valuestring, import_kind_name(IMPORT_ARCHIVE)))
        return api_fail(e, 400, "invalid_field", "source.type \"archive\" is not read from the server: "
                        "upload the archive as multipart/form-data (curl -F name=NAME -F archive=@FILE); "
                        "source.type is one of %s", names);
    return api_fail(e, 400, "invalid_field", "source.type must be one of %s, not %.64s", names,
                    cJSON_IsString(t) ? t->valuestring : "a non-string");
}

/* "source": {"type", "path", "labels"}: the type and the paths as given. */
static int read_source(const cJSON *s, source_req *q, const char **path, const char **labels,
                       api_error *e)
{
    if (!cJSON_IsObject(s))
        return api_fail(e, 400, "invalid_field", "source must be an object: {\"type\": \"folder\", "
                        "\"path\": \"/data/photos\"}");
    const cJSON *f;
    cJSON_ArrayForEach(f, s)
        if (strcmp(f->string, "type") && strcmp(f->string, "path") && strcmp(f->string, "labels"))
            return api_fail(e, 400, "unknown_field", "unknown field \"source.%.64s\": a source takes "
                            "type, path and (a list) labels", f->string);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (!t)
        return api_fail(e, 400, "missing_field", "source.type is required: folder, list, idx or cifar");
    if (!(q->type = cJSON_IsString(t) ? find_type(t->valuestring) : NULL))
        return bad_type(t, e);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(s, "path");
    if (!p)
        return api_fail(e, 400, "missing_field", "source.path is required: the %s's absolute path on "
                        "the server", import_kind_name(q->type->kind));
    if (!cJSON_IsString(p))
        return api_fail(e, 400, "invalid_field", "source.path must be a string: an absolute path");
    *path = p->valuestring;
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(s, "labels");
    if (l && !q->type->labels)
        return api_fail(e, 400, "invalid_field", "source.labels is only for a list source");
    if (l && !cJSON_IsNull(l) && !cJSON_IsString(l))
        return api_fail(e, 400, "invalid_field", "source.labels must be a string: the absolute path "
                        "of a file naming one class per line");
    *labels = cJSON_IsString(l) ? l->valuestring : NULL;
    return 0;
}

/* path resolved into out and checked against the roots and what the source
 * wants; field names it in the message. */
static int check_path(const server *srv, const char *field, const char *path, path_want want, char *out,
                      const char *kind, api_error *e)
{
    if (import_roots_check(&srv->roots, path, out, e) != 0) {
        set_err_prefix(e->message, sizeof e->message, field);
        return -1;
    }
    struct stat sb;
    if (stat(out, &sb) != 0)
        return api_fail(e, 400, "path_unreadable", "%s: cannot read %.200s", field, path);
    bool dir = S_ISDIR(sb.st_mode), file = S_ISREG(sb.st_mode);
    if (want == WANT_FOLDER && !dir)
        return api_fail(e, 400, "invalid_field", "%s: %.200s is not a folder (a source of type %s "
                        "names a folder)", field, path, kind);
    if (want == WANT_FILE && !file)
        return api_fail(e, 400, "invalid_field", "%s: %.200s is not a file (a source of type %s "
                        "names a file)", field, path, kind);
    if (want == WANT_EITHER && !dir && !file)
        return api_fail(e, 400, "invalid_field", "%s: %.200s is neither a file nor a folder", field, path);
    return 0;
}

/* Fills q from the body; 0, or -1 with e. */
static int read_request(const server *srv, const cJSON *doc, source_req *q, api_error *e)
{
    const cJSON *f;
    cJSON_ArrayForEach(f, doc)
        if (strcmp(f->string, "name") && strcmp(f->string, "source") && !is_option(f->string))
            return unknown_member(f->string, e);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(doc, "name");
    if (!cJSON_IsString(name) || !dataset_name_ok(name->valuestring))
        return api_fail(e, 400, name ? "invalid_field" : "missing_field",
                        "name is required: non-empty UTF-8 of at most %d bytes without control characters",
                        DATASET_NAME_MAX);
    snprintf(q->name, sizeof q->name, "%s", name->valuestring);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(doc, "source");
    if (!s)
        return api_fail(e, 400, "missing_field", "source is required: {\"type\": \"folder\"|\"list\"|"
                        "\"idx\"|\"cifar\", \"path\": ...}; an archive is uploaded as multipart/form-data");
    const char *path = NULL, *labels = NULL;
    if (read_source(s, q, &path, &labels, e) != 0)
        return -1;

    q->src.kind = q->type->kind;
    q->src.roots = &srv->roots;      /* a list's images are held to the same rule, as it is read */
    cJSON_ArrayForEach(f, doc)
        if (is_option(f->string) && import_option_set_json(&q->src.opts, f->string, f, e) != 0)
            return -1;
    if (import_options_check(&q->src.opts, e) != 0)
        return -1;

    const char *kind = import_kind_name(q->type->kind);
    if (check_path(srv, "source.path", path, q->type->want, q->path, kind, e) != 0)
        return -1;
    q->src.path = q->path;
    if (labels) {
        if (check_path(srv, "source.labels", labels, WANT_FILE, q->labels, kind, e) != 0)
            return -1;
        q->src.labels = q->labels;
    }
    return 0;
}

/* ---- starting the import --------------------------------------------------------- */

static void import_ended(server *srv)
{
    pthread_mutex_lock(&srv->imp_mu);
    srv->imports--;
    pthread_cond_broadcast(&srv->imp_cond);
    pthread_mutex_unlock(&srv->imp_mu);
}

static void on_finished(void *arg)
{
    import_ended(arg);
}

static enum MHD_Result start_import(request *r, source_req *q)
{
    server *srv = r->srv;
    pthread_mutex_lock(&srv->imp_mu);
    bool stopping = atomic_load(&srv->stopping);
    if (!stopping)
        srv->imports++;
    pthread_mutex_unlock(&srv->imp_mu);
    if (stopping)
        return http_error(r, MHD_HTTP_SERVICE_UNAVAILABLE, "shutting_down",
                          "the server is shutting down; ask again once it is back");

    import_job job;
    api_error e;
    if (import_job_begin(&job, srv->st, srv->data_dir, q->name, &e) != 0) {
        import_ended(srv);
        return http_error(r, (unsigned)e.status, e.code, "%s", e.message);
    }
    int64_t id = job.id;
    upload_import_limits(srv, &q->src.opts);
    const import_hooks hooks = { NULL, on_finished, srv, &srv->import_serial, { 0, 0, NULL }, NULL };
    auth_own(r, STORE_OWNED_DATASET, id);
    char err[256];
    if (import_job_spawn(&job, &q->src, &hooks, err, sizeof err) != 0) {
        import_ended(srv);
        return http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", "%s", err);
    }
    fprintf(stderr, "kiln: dataset %lld (%s) from %s %s\n", (long long)id, q->name,
            import_kind_name(q->src.kind), q->src.path);
    store_dataset d;
    int rc = store_dataset_get(srv->st, id, &d);
    if (rc != 0)
        return http_store_error(r, "reading the new dataset");
    cJSON *body = render_dataset(&d);
    store_dataset_clear(&d);
    return http_json(r, MHD_HTTP_ACCEPTED, body);
}

int dataset_source_create(request *r)
{
    enum MHD_Result answered;
    cJSON *doc = http_body_json(r, &answered);
    if (!doc)
        return answered;
    source_req *q = calloc(1, sizeof *q);     /* two PATH_MAX buffers: not on an HTTP thread's stack */
    if (!q) {
        cJSON_Delete(doc);
        return http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", "out of memory");
    }
    q->src.opts = (import_opts)IMPORT_OPTS_DEFAULT;
    api_error e;
    memset(&e, 0, sizeof e);
    int rc = read_request(r->srv, doc, q, &e);
    cJSON_Delete(doc);
    answered = rc == 0 ? start_import(r, q) : http_error(r, (unsigned)e.status, e.code, "%s", e.message);
    free(q);
    return answered;
}
