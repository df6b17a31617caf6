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

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <sys/socket.h>
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

/* ---- uploads per user (the uploads-per-user limit) ------------------------------
 *
 * An upload holds a slot of its user (r->user_id; without users, its client
 * address) from its first byte until its archive is gone: upload_free when
 * no import took the file over, else the import's finished hook (the archive
 * waits in uploads/ until its import has run). */

typedef struct upload_slot {
    int64_t user_id;
    char addr[INET6_ADDRSTRLEN];     /* when user_id is 0 */
    int count;
    struct upload_slot *next;
} upload_slot;

static pthread_mutex_t slots_mu = PTHREAD_MUTEX_INITIALIZER;
static upload_slot *slots;

/* Who r is for the limit: its user, or without users its client's address. */
static void slot_key(request *r, int64_t *user, char *addr, size_t addrlen)
{
    *user = r->user_id;
    addr[0] = '\0';
    if (*user)
        return;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, addr, (socklen_t)addrlen);
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, addr, (socklen_t)addrlen);
}

/* Takes one of r's slots; NULL when r has max already (*held says how many)
 * or memory ran out (*held 0). */
static upload_slot *slot_take(request *r, uint64_t max, int *held)
{
    int64_t user;
    char addr[INET6_ADDRSTRLEN];
    slot_key(r, &user, addr, sizeof addr);
    pthread_mutex_lock(&slots_mu);
    upload_slot *s = slots;
    while (s && (s->user_id != user || strcmp(s->addr, addr) != 0))
        s = s->next;
    if (!s && (s = calloc(1, sizeof *s)) != NULL) {
        s->user_id = user;
        snprintf(s->addr, sizeof s->addr, "%s", addr);
        s->next = slots;
        slots = s;
    }
    *held = s ? s->count : 0;
    if (s && (uint64_t)s->count >= max)
        s = NULL;
    else if (s)
        s->count++;
    pthread_mutex_unlock(&slots_mu);
    return s;
}

static void slot_release(upload_slot *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&slots_mu);
    if (--s->count == 0) {
        for (upload_slot **p = &slots; *p; p = &(*p)->next)
            if (*p == s) {
                *p = s->next;
                break;
            }
        free(s);
    }
    pthread_mutex_unlock(&slots_mu);
}

typedef struct upload {
    upload_slot *slot;               /* its user's (NULL once the import thread holds it) */
    bool refused;                    /* answered past upload-bytes mid-body (the connection closes) */
    double refused_at;               /* when (CLOCK_MONOTONIC seconds) */
    uint64_t lingered;               /* body bytes read and dropped since */
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
    upload_slot *slot;               /* released when the import is done (the archive removed) */
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
        http_form_text(&up->body, key, up->name, &up->name_len, DATASET_NAME_MAX, &up->have_name, data, off,
                       size);
        return MHD_YES;
    }
    for (int f = 0; f < IMPORT_OPTION_COUNT; f++) {
        if (strcmp(key, import_option_name(f)) != 0)
            continue;
        http_form_text(&up->body, key, up->small[f], &up->small_len[f], SMALL_FIELD_MAX, &up->have[f], data, off,
                       size);
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
    int held = 0;
    upload_slot *slot = slot_take(r, r->srv->limits.uploads_per_user, &held);
    if (!slot && held)
        return http_error(r, MHD_HTTP_TOO_MANY_REQUESTS, "too_many_uploads",
                          "%d uploads of yours are in progress (received, checked or waiting for their "
                          "import), the limit (uploads-per-user); upload again once one is imported", held);
    if (!slot)
        return MHD_NO;
    upload *up = calloc(1, sizeof *up);
    if (!up) {
        slot_release(slot);
        return MHD_NO;
    }
    up->slot = slot;
    up->fd = -1;
    r->up = up;
    if (pthread_mutex_init(&up->mu, NULL) != 0)
        return MHD_NO;
    up->mu_init = true;
    return http_form_start(r, &up->body, r->srv->limits.upload_bytes, on_field);
}

/* A chunked body past upload-bytes (a declared one is refused before its
 * first byte): libmicrohttpd 0.9.75 cannot queue a response while a body is
 * still arriving (MHD_queue_response says no until the whole body is read),
 * and reading a body to its end only to refuse it is what the limit is
 * there to prevent. So the 413 is written to the socket here, as the
 * response MHD would have sent (HTTP/1.1, the JSON error, Connection:
 * close), and our side of the connection is shut for writing. Closing at
 * once would reset a connection the client is still writing to, and many
 * clients then report the reset, not the answer; so the connection lingers
 * as a web server's does: what arrives for up to LINGER_SECONDS and
 * LINGER_BYTES more is read and dropped (a client that has read the answer
 * stops sending), then MHD_NO makes MHD close it. */
#define LINGER_SECONDS 5.0   /* a client on a loaded machine may take seconds to read the answer */
#define LINGER_BYTES ((uint64_t)64 << 20)

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static enum MHD_Result refuse_mid_body(request *r)
{
    upload *up = r->up;
    up->refused = true;
    up->refused_at = mono_now();
    char msg[256];
    snprintf(msg, sizeof msg, "the upload is over the limit of %llu bytes (upload-bytes)",
             (unsigned long long)up->body.max);
    cJSON *root = cJSON_CreateObject();
    cJSON *e = root ? cJSON_AddObjectToObject(root, "error") : NULL;
    char *json = e && cJSON_AddStringToObject(e, "code", "body_too_large") &&
                 cJSON_AddStringToObject(e, "message", msg) ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (json && ci) {
        int fd = ci->connect_fd;
        char head[256];
        int hn = snprintf(head, sizeof head,
                          "HTTP/1.1 413 Content Too Large\r\nContent-Type: application/json\r\n"
                          "Cache-Control: no-store\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n",
                          strlen(json) + 1);
        if (send(fd, head, (size_t)hn, MSG_NOSIGNAL | MSG_DONTWAIT | MSG_MORE) == hn) {
            send(fd, json, strlen(json), MSG_NOSIGNAL | MSG_DONTWAIT | MSG_MORE);
            send(fd, "\n", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        shutdown(fd, SHUT_WR);
    }
    cJSON_free(json);
    fprintf(stderr, "kiln: POST %s: a chunked upload went past %llu bytes (upload-bytes); refused\n",
            r->url, (unsigned long long)up->body.max);
    return json && ci ? MHD_YES : MHD_NO;
}

enum MHD_Result upload_data(request *r, const char *data, size_t size)
{
    if (r->up->refused) {                    /* lingering: dropped, then closed */
        r->up->lingered += size;
        return r->up->lingered > LINGER_BYTES || mono_now() - r->up->refused_at > LINGER_SECONDS ? MHD_NO
                                                                                                   : MHD_YES;
    }
    http_form_data(&r->up->body, data, size);
    if (r->up->body.too_large)
        return refuse_mid_body(r);
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
    slot_release(up->slot);
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
    if (e) {                                 /* no import: the archive goes now, and its slot first */
        slot_release(w->slot);
        w->slot = NULL;
    }
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
    slot_release(w->slot);
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

void upload_import_limits(const server *srv, import_opts *o)
{
    o->max_dataset_bytes = srv->limits.dataset_bytes;
    o->max_image_pixels = srv->limits.image_pixels;
    o->max_import_pixels = srv->limits.import_pixels;
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

    import_hooks hooks = { upload_checked, upload_finished, w, &srv->import_serial,
                           { srv->limits.check_bytes, srv->limits.check_seconds, &srv->stopping },
                           &srv->check_slots };
    w->slot = up->slot;                      /* the import releases it once the archive is gone */
    up->slot = NULL;
    char err[256];
    if (import_job_start(srv->st, srv->data_dir, up->name, path, opts, &hooks, err, sizeof err) != 0) {
        unlink(path);
        up->slot = w->slot;
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
    if (up->refused)
        return MHD_NO;                       /* answered 413 mid-body already: close */

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
    upload_import_limits(r->srv, &opts);
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
