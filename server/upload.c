/* server/upload.c: multipart dataset uploads (contract in upload.h).
 *
 * Threads: the post processor's iterator runs on an HTTP thread and only
 * writes the archive's bytes to the upload file (page cache, no fsync). The
 * check of the archive, every store write and the import run on the import's
 * own thread (jobs/import_job.h, import_job_start). The handoff: the HTTP
 * thread suspends the connection, then starts the import; its `checked` hook
 * fills the upload's result under the upload's mutex and resumes the
 * connection, after which the import never touches the request again.
 * Imports are serialised (srv->import_serial) so two uploads do not fight for
 * the CPU; each one's checking happens at once regardless.
 */
#define _GNU_SOURCE           /* mkostemp */
#include "server/upload.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"              /* api_error, api_fail */
#include "base/layout.h"           /* layout_subdir, layout_file, LAYOUT_UPLOADS */
#include "jobs/import_job.h"       /* import_job_start, import_opts */
#include "server/dataset_source.h" /* dataset_source_create: a JSON body */
#include "server/render.h"         /* render_dataset */

#define SMALL_FIELD_MAX 32           /* an import option's value (import_option_name) */

typedef enum up_state { UP_RECEIVING, UP_CHECKING, UP_DONE } up_state;

typedef struct upload {
    int fd;                          /* the archive's upload file, -1 when none */
    char path[PATH_MAX];             /* "" once the import thread owns it */
    uint64_t archive_bytes;
    bool have_archive, have_name;
    char name[DATASET_NAME_MAX + 1];
    size_t name_len;
    bool have[IMPORT_OPTION_COUNT];
    char small[IMPORT_OPTION_COUNT][SMALL_FIELD_MAX + 1];
    size_t small_len[IMPORT_OPTION_COUNT];
    /* The body and what went wrong while receiving: answered at the end. */
    http_form body;

    /* The handoff from the import's thread. */
    pthread_mutex_t mu;
    bool mu_init;
    up_state state;
    api_error result;                /* status 202: accepted as dataset_id */
    int64_t dataset_id;
} upload;

/* The import's hooks' view of one upload (freed by upload_finished). */
typedef struct upload_waiter {
    server *srv;
    upload *up;                      /* until the connection is resumed */
    struct MHD_Connection *conn;
    int64_t owner;                   /* the uploading user (0: none) */
} upload_waiter;

/* ---- receiving -------------------------------------------------------------- */

static int open_upload_file(server *srv, upload *up)
{
    char dir[PATH_MAX];
    if (layout_subdir(dir, sizeof dir, srv->data_dir, LAYOUT_UPLOADS) != 0 ||
        layout_file(up->path, sizeof up->path, dir, "upload-XXXXXX") != 0) {
        up->path[0] = '\0';
        errno = ENAMETOOLONG;
        return -1;
    }
    up->fd = mkostemp(up->path, O_CLOEXEC);
    if (up->fd < 0) {
        up->path[0] = '\0';
        return -1;
    }
    return 0;
}

static void write_archive(server *srv, upload *up, const char *data, size_t size)
{
    if (up->body.write_errno || up->body.bad.status)
        return;
    if (up->fd < 0 && open_upload_file(srv, up) != 0) {
        up->body.write_errno = errno ? errno : EIO;
        return;
    }
    while (size > 0) {
        ssize_t k = write(up->fd, data, size);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            up->body.write_errno = errno;
            return;
        }
        data += k;
        size -= (size_t)k;
        up->archive_bytes += (uint64_t)k;
    }
}

static enum MHD_Result on_field(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *filename, const char *content_type,
                                const char *transfer_encoding, const char *data, uint64_t off,
                                size_t size)
{
    (void)kind;
    (void)content_type;
    (void)transfer_encoding;
    request *r = cls;
    upload *up = r->up;
    if (!key)
        return MHD_YES;
    if (!strcmp(key, "archive")) {
        if (!filename) {
            HTTP_FORM_BAD(&up->body, MHD_HTTP_BAD_REQUEST, "invalid_field",
                    "field \"archive\" must be a file (curl -F archive=@FILE)");
            return MHD_YES;
        }
        if (off == 0 && up->have_archive && up->archive_bytes > 0) {
            HTTP_FORM_BAD(&up->body, MHD_HTTP_BAD_REQUEST, "invalid_field", "the form has more than one archive");
            return MHD_YES;
        }
        up->have_archive = true;
        if (size)
            write_archive(r->srv, up, data, size);
        return MHD_YES;
    }
    if (!strcmp(key, "name")) {
        up->have_name = true;
        if (up->name_len + size > DATASET_NAME_MAX) {
            HTTP_FORM_BAD(&up->body, MHD_HTTP_BAD_REQUEST, "invalid_field",
                    "field \"name\" is longer than %d bytes", DATASET_NAME_MAX);
            return MHD_YES;
        }
        memcpy(up->name + up->name_len, data, size);
        up->name_len += size;
        up->name[up->name_len] = '\0';
        return MHD_YES;
    }
    for (int f = 0; f < IMPORT_OPTION_COUNT; f++) {
        if (strcmp(key, import_option_name(f)) != 0)
            continue;
        up->have[f] = true;
        if (up->small_len[f] + size > SMALL_FIELD_MAX) {
            HTTP_FORM_BAD(&up->body, MHD_HTTP_BAD_REQUEST, "invalid_field", "field \"%s\" is too long", key);
            return MHD_YES;
        }
        memcpy(up->small[f] + up->small_len[f], data, size);
        up->small_len[f] += size;
        up->small[f][up->small_len[f]] = '\0';
        return MHD_YES;
    }
    char fields[160] = "name, archive";
    for (int f = 0; f < IMPORT_OPTION_COUNT; f++) {
        size_t o = strlen(fields);
        snprintf(fields + o, sizeof fields - o, ", %s", import_option_name(f));
    }
    HTTP_FORM_BAD(&up->body, MHD_HTTP_BAD_REQUEST, "unknown_field",
            "unknown form field \"%.64s\": the upload takes %s", key, fields);
    return MHD_YES;
}

/* A JSON body (application/json, with or without parameters): files on the server. */
static bool is_json(const char *ct)
{
    return ct && !strncasecmp(ct, "application/json", 16) &&
           (ct[16] == '\0' || ct[16] == ';' || ct[16] == ' ');
}

enum MHD_Result upload_begin(request *r, bool has_body, uint64_t declared)
{
    const char *ct = http_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (is_json(ct)) {
        /* files on the server (dataset_source.c): http.c reads the body as JSON */
        if (declared != UINT64_MAX && declared > r->srv->limits.json_body_bytes)
            return http_error(r, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                              "the request body (%llu bytes) is over the limit of %llu bytes (json-body-bytes)",
                              (unsigned long long)declared, (unsigned long long)r->srv->limits.json_body_bytes);
        return MHD_YES;
    }
    if (!ct || strncasecmp(ct, "multipart/form-data", 19) != 0) {
        return http_error(r, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type",
                          "create a dataset by uploading an archive as multipart/form-data with the "
                          "fields name and archive (curl -F name=NAME -F archive=@FILE.tar.gz), or from "
                          "files on the server as application/json ({\"name\", \"source\": {\"type\", "
                          "\"path\"}}), not %s", ct ? ct : "a body without a Content-Type");
    }
    if (!has_body)
        return http_error(r, MHD_HTTP_BAD_REQUEST, "missing_field",
                          "the form is empty: it needs the fields name and archive");
    if (declared != UINT64_MAX && declared > r->srv->limits.upload_bytes)
        return http_error(r, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                          "the upload (%llu bytes) is over the limit of %llu bytes (upload-bytes)",
                          (unsigned long long)declared, (unsigned long long)r->srv->limits.upload_bytes);
    if (atomic_load(&r->srv->stopping))
        return http_error(r, MHD_HTTP_SERVICE_UNAVAILABLE, "shutting_down",
                          "the server is shutting down; upload again once it is back");
    upload *up = calloc(1, sizeof *up);
    if (!up)
        return MHD_NO;
    up->fd = -1;
    r->up = up;
    if (pthread_mutex_init(&up->mu, NULL) != 0)
        return MHD_NO;
    up->mu_init = true;
    return http_form_start(r, &up->body, r->srv->limits.upload_bytes, on_field);
}

enum MHD_Result upload_data(request *r, const char *data, size_t size)
{
    http_form_data(&r->up->body, data, size);
    return MHD_YES;
}

void upload_free(request *r)
{
    upload *up = r->up;
    if (!up)
        return;
    http_form_free(&up->body);
    if (up->fd >= 0)
        close(up->fd);
    if (up->path[0])
        unlink(up->path);
    if (up->mu_init)
        pthread_mutex_destroy(&up->mu);
    free(up);
    r->up = NULL;
}

/* ---- the import's hooks (on the import's thread) ------------------------------- */

/* Hands the result to the waiting connection and resumes it; the request must
 * not be touched afterwards. */
static void upload_checked(void *arg, int64_t id, const api_error *e)
{
    upload_waiter *w = arg;
    upload *up = w->up;
    if (!e && w->owner > 0 && store_set_owner(w->srv->st, STORE_OWNED_DATASET, id, w->owner) != 0)
        fprintf(stderr, "kiln: dataset %lld: could not record its owner\n", (long long)id);
    pthread_mutex_lock(&up->mu);
    if (e)
        up->result = *e;
    else
        up->result.status = MHD_HTTP_ACCEPTED;
    up->dataset_id = id;
    up->state = UP_DONE;
    MHD_resume_connection(w->conn);
    pthread_mutex_unlock(&up->mu);
    w->up = NULL;
    w->conn = NULL;

    server *srv = w->srv;
    pthread_mutex_lock(&srv->imp_mu);
    srv->probes--;
    pthread_cond_broadcast(&srv->imp_cond);
    pthread_mutex_unlock(&srv->imp_mu);
}

static void upload_finished(void *arg)
{
    upload_waiter *w = arg;
    server *srv = w->srv;
    free(w);
    pthread_mutex_lock(&srv->imp_mu);
    srv->imports--;
    pthread_cond_broadcast(&srv->imp_cond);
    pthread_mutex_unlock(&srv->imp_mu);
}

/* ---- the handler ------------------------------------------------------------------ */

/* Parses the optional small fields into opts (jobs/import.c's table of
 * their limits); queues a 400 on a bad value. */
static bool parse_options(request *r, import_opts *o, enum MHD_Result *answered)
{
    upload *up = r->up;
    api_error e;
    for (int f = 0; f < IMPORT_OPTION_COUNT; f++)
        if (up->have[f] && import_option_set(o, import_option_name(f), up->small[f], &e) != 0) {
            *answered = http_error(r, (unsigned)e.status, e.code, "%s", e.message);
            return false;
        }
    if (import_options_check(o, &e) != 0) {
        *answered = http_error(r, (unsigned)e.status, e.code, "%s", e.message);
        return false;
    }
    return true;
}

bool dataset_name_ok(const char *s)
{
    if (!*s || strlen(s) > DATASET_NAME_MAX || !http_utf8_valid(s, strlen(s), NULL))
        return false;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return false;
    return true;
}

/* The body is complete and valid: suspend and start the import. */
static enum MHD_Result start_check(request *r, const import_opts *opts)
{
    upload *up = r->up;
    server *srv = r->srv;
    upload_waiter *w = calloc(1, sizeof *w);
    if (!w)
        return http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", "out of memory");
    w->srv = srv;
    w->up = up;
    w->conn = r->conn;
    w->owner = r->user_id;

    pthread_mutex_lock(&srv->imp_mu);
    if (atomic_load(&srv->stopping)) {
        pthread_mutex_unlock(&srv->imp_mu);
        free(w);
        return http_error(r, MHD_HTTP_SERVICE_UNAVAILABLE, "shutting_down",
                          "the server is shutting down; upload again once it is back");
    }
    srv->probes++;
    srv->imports++;
    pthread_mutex_unlock(&srv->imp_mu);

    /* The import takes the file over. */
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", up->path);
    close(up->fd);
    up->fd = -1;
    up->path[0] = '\0';
    up->state = UP_CHECKING;
    MHD_suspend_connection(r->conn);

    const import_hooks hooks = { upload_checked, upload_finished, w, &srv->import_serial };
    char err[256];
    if (import_job_start(srv->st, srv->data_dir, up->name, path, opts, &hooks, err, sizeof err) != 0) {
        unlink(path);
        free(w);
        pthread_mutex_lock(&srv->imp_mu);
        srv->probes--;
        srv->imports--;
        pthread_cond_broadcast(&srv->imp_cond);
        pthread_mutex_unlock(&srv->imp_mu);
        pthread_mutex_lock(&up->mu);
        up->state = UP_DONE;
        api_fail(&up->result, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", "%s", err);
        MHD_resume_connection(r->conn);
        pthread_mutex_unlock(&up->mu);
    }
    return MHD_YES;
}

static enum MHD_Result answer_result(request *r)
{
    upload *up = r->up;
    pthread_mutex_lock(&up->mu);
    api_error result = up->result;
    int64_t id = up->dataset_id;
    pthread_mutex_unlock(&up->mu);

    if (result.status != MHD_HTTP_ACCEPTED)
        return http_error(r, (unsigned)result.status, result.code, "%s", result.message);
    store_dataset d;
    int rc = store_dataset_get(r->srv->st, id, &d);
    if (rc != 0)
        return http_store_error(r, "reading the new dataset");
    cJSON *body = render_dataset(&d);
    store_dataset_clear(&d);
    return http_json(r, MHD_HTTP_ACCEPTED, body);
}

int upload_finish(request *r)
{
    upload *up = r->up;
    enum MHD_Result answered;
    if (!up && is_json(http_header(r, MHD_HTTP_HEADER_CONTENT_TYPE)))
        return dataset_source_create(r);
    if (!up)
        return http_error(r, MHD_HTTP_BAD_REQUEST, "missing_field", "the form needs name and archive");
    if (up->state == UP_DONE)
        return answer_result(r);
    if (up->state == UP_CHECKING)
        return MHD_YES;                      /* not reached: suspended until done */

    if (http_form_failed(r, &up->body, "the upload", "", &answered))
        return answered;
    if (!up->have_name || !dataset_name_ok(up->name))
        return http_error(r, MHD_HTTP_BAD_REQUEST, "missing_field",
                          "the form needs a text field \"name\": non-empty UTF-8 without control "
                          "characters (curl -F name=NAME)");
    if (!up->have_archive)
        return http_error(r, MHD_HTTP_BAD_REQUEST, "missing_field",
                          "the form needs a file field \"archive\" (curl -F archive=@FILE.tar.gz)");
    if (up->fd < 0) {
        /* An empty file: make one so the check gives its ordinary answer. */
        if (open_upload_file(r->srv, up) != 0)
            return http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "storage_error",
                              "could not store the upload: %s", strerror(errno));
    }
    import_opts opts = IMPORT_OPTS_DEFAULT;
    if (!parse_options(r, &opts, &answered))
        return answered;
    return start_check(r, &opts);
}

void upload_wait_probes(server *srv)
{
    pthread_mutex_lock(&srv->imp_mu);
    while (srv->probes > 0)
        pthread_cond_wait(&srv->imp_cond, &srv->imp_mu);
    pthread_mutex_unlock(&srv->imp_mu);
}

int upload_wait_imports(server *srv, int timeout_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&srv->imp_mu);
    while (srv->imports > 0) {
        if (pthread_cond_timedwait(&srv->imp_cond, &srv->imp_mu, &until) == ETIMEDOUT)
            break;
    }
    int left = srv->imports;
    pthread_mutex_unlock(&srv->imp_mu);
    return left;
}
