/* server/upload.c: multipart dataset uploads and their background import
 * (contract in upload.h).
 *
 * Threads: the post processor's iterator runs on an HTTP thread and only
 * writes the archive's bytes to the upload file (page cache, no fsync). The
 * check of the archive, every store write and the import run on the upload's
 * own thread. The handoff: the HTTP thread suspends the connection, then
 * starts the thread; the thread fills the upload's result under its mutex and
 * resumes the connection, after which it never touches the request again.
 * Imports are serialised (srv->import_serial) so two uploads do not fight for
 * the CPU; each one's checking happens at once regardless.
 */
#define _GNU_SOURCE           /* strcasestr, mkostemp */
#include "server/upload.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>

#include "engine/fileio.h"         /* fio_mkdir_p, fio_rm_rf, fio_read_file */
#include "jobs/import.h"           /* import_archive, import_opts */
#include "server/render.h"         /* render_dataset */

#define NAME_MAX_LEN 200
#define SMALL_FIELD_MAX 32
#define PROBE_MAX_ENTRIES 1000000ul

enum { F_VAL, F_WIDTH, F_HEIGHT, F_CHANNELS, F_COUNT };
static const char *const small_fields[F_COUNT] = { "val_percent", "width", "height", "channels" };

typedef enum up_state { UP_RECEIVING, UP_CHECKING, UP_DONE } up_state;

typedef struct upload {
    struct MHD_PostProcessor *pp;
    int fd;                          /* the archive's upload file, -1 when none */
    char path[PATH_MAX];             /* "" once the import thread owns it */
    uint64_t total;                  /* body bytes seen */
    uint64_t archive_bytes;
    bool have_archive, have_name;
    char name[NAME_MAX_LEN + 1];
    size_t name_len;
    bool have[F_COUNT];
    char small[F_COUNT][SMALL_FIELD_MAX + 1];
    size_t small_len[F_COUNT];
    bool too_large;
    bool parse_failed;               /* MHD_post_process said no */
    int write_errno;

    /* The first problem found while receiving: answered at the end. */
    unsigned bad_status;
    char bad_code[48];
    char bad_msg[300];

    /* The handoff to the thread. */
    pthread_mutex_t mu;
    bool mu_init;
    up_state state;
    unsigned result_status;
    char result_code[48];
    char result_msg[600];
    int64_t dataset_id;
} upload;

typedef struct import_task {
    server *srv;
    upload *up;                      /* until the connection is resumed */
    struct MHD_Connection *conn;
    char path[PATH_MAX];
    char name[NAME_MAX_LEN + 1];
    import_opts opts;
    int64_t id;
    char dir[PATH_MAX];
    double last_progress;
    double last_report;
} import_task;

static void set_bad(upload *up, unsigned status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void set_bad(upload *up, unsigned status, const char *code, const char *fmt, ...)
{
    if (up->bad_status)
        return;                      /* keep the first problem */
    up->bad_status = status;
    snprintf(up->bad_code, sizeof up->bad_code, "%s", code);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(up->bad_msg, sizeof up->bad_msg, fmt, ap);
    va_end(ap);
}

/* ---- receiving -------------------------------------------------------------- */

static int open_upload_file(server *srv, upload *up)
{
    if (snprintf(up->path, sizeof up->path, "%s/uploads/upload-XXXXXX", srv->data_dir) >=
        (int)sizeof up->path) {
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
    if (up->write_errno || up->bad_status)
        return;
    if (up->fd < 0 && open_upload_file(srv, up) != 0) {
        up->write_errno = errno ? errno : EIO;
        return;
    }
    while (size > 0) {
        ssize_t k = write(up->fd, data, size);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            up->write_errno = errno;
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
            set_bad(up, MHD_HTTP_BAD_REQUEST, "invalid_field",
                    "field \"archive\" must be a file (curl -F archive=@FILE)");
            return MHD_YES;
        }
        if (off == 0 && up->have_archive && up->archive_bytes > 0) {
            set_bad(up, MHD_HTTP_BAD_REQUEST, "invalid_field", "the form has more than one archive");
            return MHD_YES;
        }
        up->have_archive = true;
        if (size)
            write_archive(r->srv, up, data, size);
        return MHD_YES;
    }
    if (!strcmp(key, "name")) {
        up->have_name = true;
        if (up->name_len + size > NAME_MAX_LEN) {
            set_bad(up, MHD_HTTP_BAD_REQUEST, "invalid_field",
                    "field \"name\" is longer than %d bytes", NAME_MAX_LEN);
            return MHD_YES;
        }
        memcpy(up->name + up->name_len, data, size);
        up->name_len += size;
        up->name[up->name_len] = '\0';
        return MHD_YES;
    }
    for (int f = 0; f < F_COUNT; f++) {
        if (strcmp(key, small_fields[f]) != 0)
            continue;
        up->have[f] = true;
        if (up->small_len[f] + size > SMALL_FIELD_MAX) {
            set_bad(up, MHD_HTTP_BAD_REQUEST, "invalid_field", "field \"%s\" is too long", key);
            return MHD_YES;
        }
        memcpy(up->small[f] + up->small_len[f], data, size);
        up->small_len[f] += size;
        up->small[f][up->small_len[f]] = '\0';
        return MHD_YES;
    }
    set_bad(up, MHD_HTTP_BAD_REQUEST, "unknown_field",
            "unknown form field \"%.64s\": the upload takes name, archive, val_percent, width, height, channels",
            key);
    return MHD_YES;
}

enum MHD_Result upload_begin(request *r, bool has_body, uint64_t declared)
{
    const char *ct = http_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!ct || strncasecmp(ct, "multipart/form-data", 19) != 0) {
        return http_error(r, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type",
                          "upload a dataset as multipart/form-data with the fields name and archive "
                          "(curl -F name=NAME -F archive=@FILE.tar.gz), not %s",
                          ct ? ct : "a body without a Content-Type");
    }
    if (!has_body)
        return http_error(r, MHD_HTTP_BAD_REQUEST, "missing_field",
                          "the form is empty: it needs the fields name and archive");
    if (declared != UINT64_MAX && declared > HTTP_UPLOAD_MAX)
        return http_error(r, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                          "the upload (%llu bytes) is over the limit of %llu bytes",
                          (unsigned long long)declared, (unsigned long long)HTTP_UPLOAD_MAX);
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
    up->pp = MHD_create_post_processor(r->conn, 64 * 1024, on_field, r);
    if (!up->pp)
        return http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_multipart",
                          "the multipart/form-data body has no usable boundary");
    return MHD_YES;
}

enum MHD_Result upload_data(request *r, const char *data, size_t size)
{
    upload *up = r->up;
    up->total += size;
    if (up->too_large || up->parse_failed)
        return MHD_YES;                      /* dropped; answered at the end */
    if (up->total > HTTP_UPLOAD_MAX) {
        up->too_large = true;
        return MHD_YES;
    }
    if (MHD_post_process(up->pp, data, size) != MHD_YES)
        up->parse_failed = true;
    return MHD_YES;
}

void upload_free(request *r)
{
    upload *up = r->up;
    if (!up)
        return;
    if (up->pp)
        MHD_destroy_post_processor(up->pp);
    if (up->fd >= 0)
        close(up->fd);
    if (up->path[0])
        unlink(up->path);
    if (up->mu_init)
        pthread_mutex_destroy(&up->mu);
    free(up);
    r->up = NULL;
}

/* ---- checking the archive ----------------------------------------------------- */

static bool hidden_or_outside(const char *path)
{
    /* Hidden components and __MACOSX are skipped by the importer too. */
    const char *p = path;
    while (*p == '/' || (p[0] == '.' && p[1] == '/'))
        p += (*p == '/') ? 1 : 2;
    for (const char *c = p; *c;) {
        size_t n = strcspn(c, "/");
        if ((n > 0 && c[0] == '.') || (n == 8 && !strncmp(c, "__MACOSX", 8)))
            return true;
        c += n;
        if (*c == '/')
            c++;
    }
    return !strchr(p, '/');                  /* a file outside any class folder */
}

int upload_probe_archive(const char *path, char *code, size_t codelen, char *msg, size_t msglen)
{
    int ret = -1;
    struct archive *a = archive_read_new();
    if (!a) {
        snprintf(code, codelen, "internal_error");
        snprintf(msg, msglen, "out of memory opening the archive");
        return -1;
    }
    archive_read_support_filter_all(a);
    archive_read_support_format_all(a);
    if (archive_read_open_filename(a, path, 64 * 1024) != ARCHIVE_OK) {
        snprintf(code, codelen, "invalid_archive");
        snprintf(msg, msglen, "the upload is not an archive kiln can read (tar, tar.gz, zip): %s",
                 archive_error_string(a) ? archive_error_string(a) : "unknown format");
        goto out;
    }
    struct archive_entry *e;
    unsigned long entries = 0;
    int r;
    while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK || r == ARCHIVE_WARN) {
        if (++entries > PROBE_MAX_ENTRIES)
            break;
        const char *name = archive_entry_pathname(e);
        if (archive_entry_filetype(e) != AE_IFREG || !name || hidden_or_outside(name))
            continue;
        unsigned char head[8];
        la_ssize_t k = archive_read_data(a, head, sizeof head);
        if (k < 0) {
            snprintf(code, codelen, "invalid_archive");
            snprintf(msg, msglen, "the archive is damaged: %s",
                     archive_error_string(a) ? archive_error_string(a) : "read error");
            goto out;
        }
        static const unsigned char png[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
        if ((k >= 8 && !memcmp(head, png, 8)) ||
            (k >= 3 && head[0] == 0xff && head[1] == 0xd8 && head[2] == 0xff)) {
            ret = 0;
            goto out;
        }
    }
    if (r != ARCHIVE_EOF && r != ARCHIVE_OK && r != ARCHIVE_WARN) {
        snprintf(code, codelen, "invalid_archive");
        snprintf(msg, msglen, "%s: %s",
                 entries ? "the archive is damaged" : "the upload is not an archive kiln can read (tar, tar.gz, zip)",
                 archive_error_string(a) ? archive_error_string(a) : "read error");
        goto out;
    }
    snprintf(code, codelen, "no_images");
    snprintf(msg, msglen, "the archive holds no images: it needs one folder of PNG or JPEG images per "
                          "class (e.g. cats/1.png, dogs/2.jpg)");
out:
    archive_read_free(a);
    return ret;
}

/* ---- the background thread ------------------------------------------------------ */

static void task_progress(void *arg, double fraction)
{
    import_task *t = arg;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = (double)ts.tv_sec + ts.tv_nsec / 1e9;
    /* At most a few store writes a second. */
    if (fraction - t->last_progress < 0.01 && fraction < 1.0)
        return;
    if (now - t->last_report < 0.25 && fraction < 1.0)
        return;
    t->last_progress = fraction;
    t->last_report = now;
    store_dataset_set_progress(t->srv->st, t->id, fraction * 0.99);
}

/* Hands the result to the waiting connection and resumes it; the request must
 * not be touched afterwards. */
static void hand_back(import_task *t, unsigned status, const char *code, const char *msg)
{
    upload *up = t->up;
    pthread_mutex_lock(&up->mu);
    up->result_status = status;
    snprintf(up->result_code, sizeof up->result_code, "%s", code ? code : "");
    snprintf(up->result_msg, sizeof up->result_msg, "%s", msg ? msg : "");
    up->dataset_id = t->id;
    up->state = UP_DONE;
    MHD_resume_connection(t->conn);
    pthread_mutex_unlock(&up->mu);
    t->up = NULL;
    t->conn = NULL;

    server *srv = t->srv;
    pthread_mutex_lock(&srv->imp_mu);
    srv->probes--;
    pthread_cond_broadcast(&srv->imp_cond);
    pthread_mutex_unlock(&srv->imp_mu);
}

static void run_import(import_task *t)
{
    char err[1024] = "";
    server *srv = t->srv;
    pthread_mutex_lock(&srv->import_serial);
    int rc = import_archive(t->path, t->dir, &t->opts, task_progress, t, err, sizeof err);
    pthread_mutex_unlock(&srv->import_serial);
    if (rc == 0) {
        char hpath[PATH_MAX + 16];
        snprintf(hpath, sizeof hpath, "%s/header.json", t->dir);
        char *header = fio_read_file(hpath, 16u << 20, NULL, NULL, 0);
        if (!header) {
            snprintf(err, sizeof err, "the import wrote no readable header.json (%s)", strerror(errno));
            rc = -1;
        } else {
            if (store_dataset_finish(srv->st, t->id, "ready", header, NULL) != 0)
                fprintf(stderr, "kiln: dataset %lld: could not store its ready state\n", (long long)t->id);
            free(header);
            fprintf(stderr, "kiln: dataset %lld (%s) ready\n", (long long)t->id, t->name);
        }
    }
    if (rc != 0) {
        fprintf(stderr, "kiln: dataset %lld (%s) failed: %s\n", (long long)t->id, t->name, err);
        store_dataset_finish(srv->st, t->id, "failed", NULL, err[0] ? err : "the import failed");
        fio_rm_rf(t->dir);
    }
}

static void *import_thread(void *arg)
{
    import_task *t = arg;
    server *srv = t->srv;
    char code[48], msg[600];

    if (upload_probe_archive(t->path, code, sizeof code, msg, sizeof msg) != 0) {
        hand_back(t, MHD_HTTP_BAD_REQUEST, code, msg);
        goto done;
    }
    char err[256] = "";
    if (store_dataset_insert(srv->st, t->name, &t->id, err, sizeof err) != 0) {
        fprintf(stderr, "kiln: upload: could not insert dataset: %s\n", err);
        hand_back(t, MHD_HTTP_INTERNAL_SERVER_ERROR, "store_error",
                  "the database failed while creating the dataset; see the server log");
        goto done;
    }
    bool fits = snprintf(t->dir, sizeof t->dir, "%s/datasets/%lld", srv->data_dir, (long long)t->id) <
                (int)sizeof t->dir;
    if (fits)
        fio_rm_rf(t->dir);                    /* a leftover of an older data dir */
    if (!fits || fio_mkdir_p(t->dir) != 0) {
        snprintf(msg, sizeof msg, "cannot create the dataset folder: %s", strerror(errno));
        store_dataset_finish(srv->st, t->id, "failed", NULL, msg);
        hand_back(t, MHD_HTTP_INTERNAL_SERVER_ERROR, "storage_error", msg);
        goto done;
    }
    hand_back(t, MHD_HTTP_ACCEPTED, NULL, NULL);
    run_import(t);
done:
    unlink(t->path);
    pthread_mutex_lock(&srv->imp_mu);
    srv->imports--;
    pthread_cond_broadcast(&srv->imp_cond);
    pthread_mutex_unlock(&srv->imp_mu);
    free(t);
    return NULL;
}

/* ---- the handler ------------------------------------------------------------------ */

/* Parses the optional small fields into opts; queues a 400 on a bad value. */
static bool parse_options(request *r, import_opts *o, enum MHD_Result *answered)
{
    upload *up = r->up;
    static const struct { int lo, hi; } range[F_COUNT] = {
        [F_VAL] = { 0, 100 }, [F_WIDTH] = { 1, 4096 }, [F_HEIGHT] = { 1, 4096 }, [F_CHANNELS] = { 1, 3 },
    };
    int64_t v[F_COUNT] = { 0 };
    for (int f = 0; f < F_COUNT; f++) {
        if (!up->have[f])
            continue;
        if (!http_parse_i64(up->small[f], range[f].lo, range[f].hi, &v[f]) ||
            (f == F_CHANNELS && v[f] == 2)) {
            *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_field",
                                   "field \"%s\" must be %s, not \"%s\"", small_fields[f],
                                   f == F_CHANNELS ? "1 or 3" : f == F_VAL ? "an integer 0..100"
                                                                           : "an integer 1..4096",
                                   up->small[f]);
            return false;
        }
    }
    if (up->have[F_WIDTH] != up->have[F_HEIGHT]) {
        *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_field",
                               "give width and height together (or neither: the first image's size)");
        return false;
    }
    if (up->have[F_VAL])
        o->val_percent = (int)v[F_VAL];
    if (up->have[F_WIDTH]) {
        o->width = (int)v[F_WIDTH];
        o->height = (int)v[F_HEIGHT];
    }
    if (up->have[F_CHANNELS])
        o->channels = (int)v[F_CHANNELS];
    return true;
}

static bool name_ok(const char *s)
{
    if (!*s || !http_utf8_valid(s, strlen(s), NULL))
        return false;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return false;
    return true;
}

/* The body is complete and valid: suspend and start the thread. */
static enum MHD_Result start_check(request *r, const import_opts *opts)
{
    upload *up = r->up;
    server *srv = r->srv;
    import_task *t = calloc(1, sizeof *t);
    if (!t)
        return http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", "out of memory");
    t->srv = srv;
    t->up = up;
    t->conn = r->conn;
    t->opts = *opts;
    snprintf(t->path, sizeof t->path, "%s", up->path);
    snprintf(t->name, sizeof t->name, "%s", up->name);

    pthread_mutex_lock(&srv->imp_mu);
    if (atomic_load(&srv->stopping)) {
        pthread_mutex_unlock(&srv->imp_mu);
        free(t);
        return http_error(r, MHD_HTTP_SERVICE_UNAVAILABLE, "shutting_down",
                          "the server is shutting down; upload again once it is back");
    }
    srv->probes++;
    srv->imports++;
    pthread_mutex_unlock(&srv->imp_mu);

    /* The thread now owns the file. */
    close(up->fd);
    up->fd = -1;
    up->path[0] = '\0';
    up->state = UP_CHECKING;
    MHD_suspend_connection(r->conn);

    pthread_attr_t at;
    pthread_t th;
    int rc = pthread_attr_init(&at);
    if (!rc)
        rc = pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (!rc)
        rc = pthread_create(&th, &at, import_thread, t);
    pthread_attr_destroy(&at);
    if (rc) {
        unlink(t->path);
        free(t);
        pthread_mutex_lock(&srv->imp_mu);
        srv->probes--;
        srv->imports--;
        pthread_cond_broadcast(&srv->imp_cond);
        pthread_mutex_unlock(&srv->imp_mu);
        pthread_mutex_lock(&up->mu);
        up->state = UP_DONE;
        up->result_status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        snprintf(up->result_code, sizeof up->result_code, "internal_error");
        snprintf(up->result_msg, sizeof up->result_msg, "could not start the import: %s", strerror(rc));
        MHD_resume_connection(r->conn);
        pthread_mutex_unlock(&up->mu);
    }
    return MHD_YES;
}

static enum MHD_Result answer_result(request *r)
{
    upload *up = r->up;
    pthread_mutex_lock(&up->mu);
    unsigned status = up->result_status;
    char code[48], msg[600];
    snprintf(code, sizeof code, "%s", up->result_code);
    snprintf(msg, sizeof msg, "%s", up->result_msg);
    int64_t id = up->dataset_id;
    pthread_mutex_unlock(&up->mu);

    if (status != MHD_HTTP_ACCEPTED)
        return http_error(r, status, code, "%s", msg);
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
    if (!up)
        return http_error(r, MHD_HTTP_BAD_REQUEST, "missing_field", "the form needs name and archive");
    if (up->state == UP_DONE)
        return answer_result(r);
    if (up->state == UP_CHECKING)
        return MHD_YES;                      /* not reached: suspended until done */

    if (up->too_large)
        return http_error(r, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                          "the upload is over the limit of %llu bytes",
                          (unsigned long long)HTTP_UPLOAD_MAX);
    if (up->bad_status)
        return http_error(r, up->bad_status, up->bad_code, "%s", up->bad_msg);
    if (up->parse_failed)
        return http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_multipart",
                          "the multipart/form-data body could not be parsed");
    if (up->write_errno) {
        unsigned st = up->write_errno == ENOSPC || up->write_errno == EDQUOT
                          ? MHD_HTTP_INSUFFICIENT_STORAGE : MHD_HTTP_INTERNAL_SERVER_ERROR;
        return http_error(r, st, "storage_error", "could not store the upload: %s",
                          strerror(up->write_errno));
    }
    if (!up->have_name || !name_ok(up->name))
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
