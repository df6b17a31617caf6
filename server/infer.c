/* server/infer.c: POST /api/v1/jobs/{id}/infer (contract in infer.h).
 *
 * Receiving: the post processor's iterator runs on an HTTP thread and only
 * writes bytes: every image, one after another, into one spool file (a
 * request of thousands of small images makes one file, not thousands: a
 * file system allocates and frees inodes slowly), each image's offset and
 * length recorded; an archive into a file of its own.
 *
 * Threads: The handler, on an HTTP
 * thread, checks the form and the job, builds the inference process's
 * request (jobs/infer_server.h), marks the request queued, suspends the
 * connection and appends it to the service's queue. The service's thread
 * takes requests one at a time (the inference process uses every core),
 * calls the process, stores the answer under the request's mutex and resumes
 * the connection, after which it never touches the request again; the
 * handler, called again, answers from what was stored. The temporary files
 * belong to the request and are removed by its release (the completion
 * callback), which MHD does not call while the connection is suspended.
 */
#define _GNU_SOURCE           /* mkostemp */
#include "server/infer.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/layout.h"       /* layout_subdir, layout_file, layout_job_dir, LAYOUT_UPLOADS */
#include "jobs/infer.h"        /* INFER_LIMITS */
#include "jobs/snapshots.h"    /* snap_select_parse */
#include "server/infer_proc.h" /* infer_proc_call */
#include "server/lookup.h"     /* lookup_job */

#define SMALL_FIELD_MAX 32     /* top_k, epoch */
#define CACHE_HEADER "X-Kiln-Model-Cache"

typedef enum ir_state { IR_RECEIVING, IR_QUEUED, IR_DONE } ir_state;
typedef enum ir_part { PART_NONE, PART_IMAGE, PART_ARCHIVE, PART_SMALL } ir_part;
enum { SMALL_TOP_K, SMALL_EPOCH, SMALL_COUNT };
static const char *const small_names[SMALL_COUNT] = { "top_k", "epoch" };

typedef struct ifile {
    char *name;                    /* as the form names it (owned) */
    uint64_t offset, bytes;        /* where its bytes are in the spool file */
    bool over;                     /* past INFER_LIMITS.max_image_bytes: the rest dropped */
} ifile;

/* A temporary file under <data>/uploads, made on the first byte. Bytes are
 * gathered in buf and written TFILE_BUF at a time: a request of thousands of
 * small images makes a few writes, not one for each piece of each image. */
#define TFILE_BUF ((size_t)256 << 10)
typedef struct tfile {
    int fd;                        /* -1 when not open */
    char path[PATH_MAX];           /* "" until made */
    uint64_t size;                 /* bytes taken, written or in buf */
    char *buf;                     /* TFILE_BUF bytes, malloc'ed on the first byte */
    size_t buffered;
} tfile;

typedef struct infer_req {
    server *srv;
    http_form body;                /* the body and what went wrong receiving it */

    ifile *files;
    int nfiles, cap;
    tfile spool;                   /* the images' bytes */
    tfile archive;
    ir_part part;                  /* the form part being received */
    bool have_archive;
    char small[SMALL_COUNT][SMALL_FIELD_MAX + 1];
    size_t small_len[SMALL_COUNT];
    bool have_small[SMALL_COUNT];

    /* the handoff to the service's thread */
    pthread_mutex_t mu;
    bool mu_init;
    ir_state state;
    struct MHD_Connection *conn;
    cJSON *job;                    /* the inference process's request (owned until queued) */
    int status;                    /* the answer */
    char *answer;                  /* its body's text (malloc'ed) */
    char cache[8];                 /* "hit", "miss" or "" */
    struct infer_req *next;        /* in the queue */
} infer_req;

typedef struct infer_service {
    server *srv;
    infer_proc *proc;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    infer_req *head, *tail;
    int queued;
    bool stopping;
    infer_req *current;            /* taken from the queue, not yet answered */
} infer_service;

/* ---- receiving ------------------------------------------------------------------ */

static int write_all(int fd, const char *data, size_t size)
{
    while (size > 0) {
        ssize_t k = write(fd, data, size);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return errno ? errno : EIO;
        data += k;
        size -= (size_t)k;
    }
    return 0;
}

/* Writes what t's buffer holds. */
static void tfile_flush(infer_req *q, tfile *t)
{
    if (t->buffered && !q->body.write_errno)
        q->body.write_errno = write_all(t->fd, t->buf, t->buffered);
    t->buffered = 0;
}

/* Appends to t, making it under <data>/uploads on the first byte. */
static void write_bytes(infer_req *q, tfile *t, const char *data, size_t size)
{
    if (q->body.write_errno || size == 0)
        return;
    if (t->fd < 0) {
        char dir[PATH_MAX];
        if (layout_subdir(dir, sizeof dir, q->srv->data_dir, LAYOUT_UPLOADS) != 0 ||
            layout_file(t->path, sizeof t->path, dir, "infer-XXXXXX") != 0) {
            t->path[0] = '\0';
            q->body.write_errno = ENAMETOOLONG;
            return;
        }
        if ((t->fd = mkostemp(t->path, O_CLOEXEC)) < 0) {
            t->path[0] = '\0';
            q->body.write_errno = errno ? errno : EIO;
            return;
        }
    }
    if (!t->buf && !(t->buf = malloc(TFILE_BUF))) {
        q->body.write_errno = ENOMEM;
        return;
    }
    t->size += size;
    if (t->buffered + size > TFILE_BUF)
        tfile_flush(q, t);
    if (size >= TFILE_BUF) {
        if (!q->body.write_errno)
            q->body.write_errno = write_all(t->fd, data, size);
        return;
    }
    memcpy(t->buf + t->buffered, data, size);
    t->buffered += size;
}

/* The last bytes written, the file closed (it stays until tfile_remove). */
static void tfile_close(infer_req *q, tfile *t)
{
    if (t->fd >= 0)
        tfile_flush(q, t);
    if (t->fd >= 0)
        close(t->fd);
    t->fd = -1;
    free(t->buf);
    t->buf = NULL;
}

static void tfile_remove(tfile *t)
{
    if (t->fd >= 0)
        close(t->fd);
    t->fd = -1;
    free(t->buf);
    t->buf = NULL;
    if (t->path[0])
        unlink(t->path);
    t->path[0] = '\0';
}

/* A new image part named filename. */
static ifile *new_file(infer_req *q, const char *filename)
{
    if (q->nfiles >= INFER_LIMITS.max_items) {
        HTTP_FORM_BAD(&q->body, MHD_HTTP_CONTENT_TOO_LARGE, "too_many_images",
                "the form has more than %d images (the limit); send them in several requests",
                INFER_LIMITS.max_items);
        return NULL;
    }
    if (q->nfiles == q->cap) {
        int cap = q->cap ? q->cap * 2 : 8;
        ifile *nf = realloc(q->files, (size_t)cap * sizeof *nf);
        if (!nf) {
            HTTP_FORM_BAD(&q->body, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", "out of memory");
            return NULL;
        }
        q->files = nf;
        q->cap = cap;
    }
    ifile *f = &q->files[q->nfiles];
    memset(f, 0, sizeof *f);
    if (!(f->name = strdup(filename))) {
        HTTP_FORM_BAD(&q->body, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", "out of memory");
        return NULL;
    }
    q->nfiles++;
    return f;
}

static void on_image(infer_req *q, const char *filename, const char *data, uint64_t off, size_t size)
{
    ifile *f = q->nfiles ? &q->files[q->nfiles - 1] : NULL;
    if (off == 0 && (q->part != PART_IMAGE || !f || f->bytes > 0 || strcmp(f->name, filename) != 0)) {
        q->part = PART_IMAGE;
        if (!(f = new_file(q, filename)))
            return;
        f->offset = q->spool.size;
    }
    if (!f || f->over)
        return;
    if (f->bytes + size > INFER_LIMITS.max_image_bytes) {
        f->over = true;                      /* its bytes so far stay in the spool, unused */
        return;
    }
    f->bytes += size;
    write_bytes(q, &q->spool, data, size);
}

static void on_archive(infer_req *q, const char *data, uint64_t off, size_t size)
{
    /* A new part starts at off 0: a second "archive" part, even right after
     * the first, is refused rather than appended to it. */
    if (off == 0 && (q->part != PART_ARCHIVE || q->archive.size > 0)) {
        if (q->have_archive) {
            HTTP_FORM_BAD(&q->body, MHD_HTTP_BAD_REQUEST, "invalid_field", "the form has more than one archive; put "
                    "the images in one");
            return;
        }
        q->have_archive = true;
        q->part = PART_ARCHIVE;
    }
    if (q->part == PART_ARCHIVE)
        write_bytes(q, &q->archive, data, size);
}

static enum MHD_Result on_field(void *cls, enum MHD_ValueKind kind, const char *key, const char *filename,
                                const char *content_type, const char *transfer_encoding, const char *data,
                                uint64_t off, size_t size)
{
    (void)kind;
    (void)content_type;
    (void)transfer_encoding;
    request *r = cls;
    infer_req *q = r->form;
    if (!key || q->body.bad.status)
        return MHD_YES;
    bool image = !strcmp(key, "image"), archive = !strcmp(key, "archive");
    if ((image || archive) && !filename) {
        HTTP_FORM_BAD(&q->body, MHD_HTTP_BAD_REQUEST, "invalid_field", "field \"%s\" must be a file (curl -F %s=@FILE)", key,
                key);
        return MHD_YES;
    }
    if (image) {
        on_image(q, filename, data, off, size);
        return MHD_YES;
    }
    if (archive) {
        on_archive(q, data, off, size);
        return MHD_YES;
    }
    for (int f = 0; f < SMALL_COUNT; f++) {
        if (strcmp(key, small_names[f]) != 0)
            continue;
        q->part = PART_SMALL;
        http_form_text(&q->body, key, q->small[f], &q->small_len[f], SMALL_FIELD_MAX, &q->have_small[f], data,
                       off, size);
        return MHD_YES;
    }
    HTTP_FORM_BAD(&q->body, MHD_HTTP_BAD_REQUEST, "unknown_field",
            "unknown form field \"%.64s\": classifying takes image (files), archive, top_k and epoch", key);
    return MHD_YES;
}

static int infer_begin(request *r, bool has_body, uint64_t declared)
{
    const char *ct = http_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!ct || strncasecmp(ct, "multipart/form-data", 19) != 0)
        return http_error(r, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type",
                          "classify images by uploading them as multipart/form-data: image files and/or an "
                          "archive, with top_k and epoch optional (curl -F image=@digit.png), not %s",
                          ct ? ct : "a body without a Content-Type");
    if (!has_body)
        return http_error(r, MHD_HTTP_BAD_REQUEST, "missing_field",
                          "the form is empty: it needs image files or an archive of images");
    if (declared != UINT64_MAX && declared > INFER_LIMITS.max_total_bytes)
        return http_error(r, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                          "the request (%llu bytes) is over the limit of %llu bytes; send the images in "
                          "several requests", (unsigned long long)declared,
                          (unsigned long long)INFER_LIMITS.max_total_bytes);
    if (atomic_load(&r->srv->stopping))
        return http_error(r, MHD_HTTP_SERVICE_UNAVAILABLE, "shutting_down",
                          "the server is shutting down; try again once it is back");
    infer_req *q = calloc(1, sizeof *q);
    if (!q)
        return MHD_NO;
    q->srv = r->srv;
    q->spool.fd = q->archive.fd = -1;
    r->form = q;
    if (pthread_mutex_init(&q->mu, NULL) != 0)
        return MHD_NO;
    q->mu_init = true;
    return http_form_start(r, &q->body, INFER_LIMITS.max_total_bytes, on_field);
}

static int infer_data(request *r, const char *data, size_t size)
{
    infer_req *q = r->form;
    http_form_data(&q->body, data, size);
    return MHD_YES;
}

static void infer_release(request *r)
{
    infer_req *q = r->form;
    if (!q)
        return;
    http_form_free(&q->body);
    tfile_remove(&q->spool);
    tfile_remove(&q->archive);
    for (int i = 0; i < q->nfiles; i++)
        free(q->files[i].name);
    free(q->files);
    if (q->mu_init)
        pthread_mutex_destroy(&q->mu);
    cJSON_Delete(q->job);
    free(q->answer);
    free(q);
    r->form = NULL;
}

const route_upload infer_upload = { infer_begin, infer_data, infer_release };

/* ---- the request for the inference process ------------------------------------- */

static cJSON *file_json(const ifile *f)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "name", f->name))
        goto fail;
    if (f->over || f->bytes == 0) {
        char msg[160];
        if (f->over)
            snprintf(msg, sizeof msg, "the file is over the limit of %llu bytes for one image",
                     (unsigned long long)INFER_LIMITS.max_image_bytes);
        else
            snprintf(msg, sizeof msg, "the file is empty");
        cJSON *e = cJSON_AddObjectToObject(o, "error");
        if (!e || !cJSON_AddStringToObject(e, "code", f->over ? "image_too_large" : "invalid_image") ||
            !cJSON_AddStringToObject(e, "message", msg))
            goto fail;
    } else if (!cJSON_AddNumberToObject(o, "offset", (double)f->offset) ||
               !cJSON_AddNumberToObject(o, "length", (double)f->bytes)) {
        goto fail;
    }
    return o;
fail:
    cJSON_Delete(o);
    return NULL;
}

/* {"job_dir", "epoch", "top_k", "spool", "files", "archive"}; NULL when out of memory. */
static cJSON *process_request(const infer_req *q, const char *job_dir, snap_select sel, int top_k)
{
    cJSON *j = cJSON_CreateObject();
    cJSON *files = j ? cJSON_AddArrayToObject(j, "files") : NULL;
    if (!files || !cJSON_AddStringToObject(j, "job_dir", job_dir))
        goto fail;
    cJSON *ep = sel.kind == SNAP_BEST ? cJSON_CreateString("best")
                : sel.kind == SNAP_EPOCH ? cJSON_CreateNumber(sel.epoch) : cJSON_CreateNull();
    if (!cJSON_AddItemToObject(j, "epoch", ep)) {
        cJSON_Delete(ep);
        goto fail;
    }
    if (!(top_k ? cJSON_AddNumberToObject(j, "top_k", top_k) : cJSON_AddNullToObject(j, "top_k")))
        goto fail;
    for (int i = 0; i < q->nfiles; i++) {
        cJSON *f = file_json(&q->files[i]);
        if (!f || !cJSON_AddItemToArray(files, f)) {
            cJSON_Delete(f);
            goto fail;
        }
    }
    if (!(q->archive.path[0] ? cJSON_AddStringToObject(j, "archive", q->archive.path)
                             : cJSON_AddNullToObject(j, "archive")) ||
        !(q->spool.path[0] ? cJSON_AddStringToObject(j, "spool", q->spool.path) : cJSON_AddNullToObject(j, "spool")))
        goto fail;
    return j;
fail:
    cJSON_Delete(j);
    return NULL;
}

/* ---- the service's thread ------------------------------------------------------- */

/* Stores the answer and resumes the connection; q is not touched afterwards. */
static void finish(infer_req *q, int status, char *answer, const char *cache)
{
    pthread_mutex_lock(&q->mu);
    q->status = status;
    q->answer = answer;
    snprintf(q->cache, sizeof q->cache, "%s", cache ? cache : "");
    q->state = IR_DONE;
    MHD_resume_connection(q->conn);
    pthread_mutex_unlock(&q->mu);
}

static char *error_text(const api_error *e)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *o = root ? cJSON_AddObjectToObject(root, "error") : NULL;
    char *text = NULL;
    if (o && cJSON_AddStringToObject(o, "code", e->code) && cJSON_AddStringToObject(o, "message", e->message))
        text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

static void finish_error(infer_req *q, const api_error *e)
{
    finish(q, e->status, error_text(e), NULL);
}

static void run_one(infer_service *svc, infer_req *q)
{
    api_error e = { 0 };
    infer_reply rep;
    int rc = infer_proc_call(svc->proc, q->job, &rep, &e);
    cJSON_Delete(q->job);
    q->job = NULL;
    if (rc != 0)
        finish_error(q, &e);
    else
        finish(q, rep.status, rep.body, rep.cache);
}

static void *service_main(void *arg)
{
    infer_service *svc = arg;
    pthread_mutex_lock(&svc->mu);
    for (;;) {
        while (!svc->head && !svc->stopping)
            pthread_cond_wait(&svc->cond, &svc->mu);
        if (!svc->head)
            break;                           /* stopping, nothing queued */
        infer_req *q = svc->head;
        svc->head = q->next;
        if (!svc->head)
            svc->tail = NULL;
        svc->queued--;
        svc->current = q;
        bool stopping = svc->stopping;
        pthread_mutex_unlock(&svc->mu);
        if (stopping) {
            api_error e;
            api_fail(&e, MHD_HTTP_SERVICE_UNAVAILABLE, "shutting_down",
                     "the server is shutting down; try again once it is back");
            finish_error(q, &e);
        } else {
            run_one(svc, q);
        }
        pthread_mutex_lock(&svc->mu);
        svc->current = NULL;
        pthread_cond_broadcast(&svc->cond);
    }
    pthread_mutex_unlock(&svc->mu);
    return NULL;
}

int infer_service_start(server *srv, const char *exe, char *err, size_t errlen)
{
    infer_service *svc = calloc(1, sizeof *svc);
    if (!svc || !(svc->proc = infer_proc_new(exe))) {
        free(svc);
        return set_err(err, errlen, "out of memory");
    }
    svc->srv = srv;
    pthread_mutex_init(&svc->mu, NULL);
    pthread_cond_init(&svc->cond, NULL);
    int rc = pthread_create(&svc->thread, NULL, service_main, svc);
    if (rc != 0) {
        infer_proc_free(svc->proc);
        free(svc);
        return set_err(err, errlen, "cannot start the inference thread: %s", strerror(rc));
    }
    svc->started = true;
    srv->infer = svc;
    return 0;
}

void infer_service_stop(server *srv)
{
    infer_service *svc = srv ? srv->infer : NULL;
    if (!svc)
        return;
    pthread_mutex_lock(&svc->mu);
    svc->stopping = true;
    if (svc->current)
        infer_proc_abort(svc->proc);
    pthread_cond_broadcast(&svc->cond);
    pthread_mutex_unlock(&svc->mu);
    pthread_join(svc->thread, NULL);         /* it answers what is queued 503 first */
    infer_proc_free(svc->proc);
    pthread_mutex_destroy(&svc->mu);
    pthread_cond_destroy(&svc->cond);
    free(svc);
    srv->infer = NULL;
}

/* ---- the handler ------------------------------------------------------------------ */

static enum MHD_Result answer_stored(request *r, infer_req *q)
{
    pthread_mutex_lock(&q->mu);
    int status = q->status;
    char *text = q->answer;
    q->answer = NULL;
    char cache[8];
    snprintf(cache, sizeof cache, "%s", q->cache);
    pthread_mutex_unlock(&q->mu);
    if (!text)
        return http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", "out of memory");
    size_t len = strlen(text);
    char *body = realloc(text, len + 2);
    if (!body) {
        free(text);
        return http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", "out of memory");
    }
    body[len++] = '\n';
    body[len] = '\0';
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (cache[0])
        MHD_add_response_header(resp, CACHE_HEADER, cache);
    return http_queue(r, (unsigned)status, resp);
}

/* What went wrong while receiving, answered; false when nothing did. */
static bool receive_failed(request *r, infer_req *q, enum MHD_Result *answered)
{
    if (http_form_failed(r, &q->body, "the request", "; send the images in several requests", answered))
        return true;
    if (q->nfiles == 0 && !q->have_archive)
        *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "missing_field",
                               "the form needs image files (curl -F image=@digit.png) or an archive of images "
                               "(-F archive=@images.tar.gz)");
    else
        return false;
    return true;
}

/* The form's top_k (0: the default) and epoch; false after a 400. */
static bool read_fields(request *r, infer_req *q, int *top_k, snap_select *sel, enum MHD_Result *answered)
{
    *top_k = 0;
    if (q->have_small[SMALL_TOP_K]) {
        int64_t v;
        if (!http_parse_i64(q->small[SMALL_TOP_K], 1, INT_MAX, &v)) {
            *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_field",
                                   "top_k must be an integer from 1 to the model's classes, not \"%s\"",
                                   q->small[SMALL_TOP_K]);
            return false;
        }
        *top_k = (int)v;
    }
    api_error e;
    const char *ep = q->have_small[SMALL_EPOCH] ? q->small[SMALL_EPOCH] : NULL;
    if (snap_select_parse(ep, "epoch", sel, &e) != 0) {
        *answered = http_error(r, (unsigned)e.status, e.code, "%s", e.message);
        return false;
    }
    return true;
}

/* The body is complete and valid: queue it for the service's thread. */
static enum MHD_Result enqueue(request *r, infer_req *q)
{
    infer_service *svc = r->srv->infer;
    pthread_mutex_lock(&svc->mu);
    if (svc->stopping || svc->queued >= INFER_QUEUE_MAX) {
        bool stopping = svc->stopping;
        pthread_mutex_unlock(&svc->mu);
        if (stopping)
            return http_error(r, MHD_HTTP_SERVICE_UNAVAILABLE, "shutting_down",
                              "the server is shutting down; try again once it is back");
        return http_error(r, MHD_HTTP_SERVICE_UNAVAILABLE, "busy",
                          "%d classification requests are already waiting; try again shortly", INFER_QUEUE_MAX);
    }
    q->state = IR_QUEUED;
    q->conn = r->conn;
    MHD_suspend_connection(r->conn);
    if (svc->tail)
        svc->tail->next = q;
    else
        svc->head = q;
    svc->tail = q;
    svc->queued++;
    pthread_cond_signal(&svc->cond);
    pthread_mutex_unlock(&svc->mu);
    return MHD_YES;
}

int infer_handle(request *r)
{
    infer_req *q = r->form;
    enum MHD_Result answered;
    if (!q)
        return http_error(r, MHD_HTTP_BAD_REQUEST, "missing_field",
                          "the form needs image files or an archive of images");
    if (q->state == IR_DONE)
        return answer_stored(r, q);
    if (q->state == IR_QUEUED)
        return MHD_YES;                      /* not reached: suspended until done */
    tfile_close(q, &q->spool);
    tfile_close(q, &q->archive);
    if (receive_failed(r, q, &answered))
        return answered;
    int top_k;
    snap_select sel;
    if (!read_fields(r, q, &top_k, &sel, &answered))
        return answered;

    if (!lookup_job(r, r->id, NULL, &answered))
        return answered;
    char job_dir[PATH_MAX];
    if (layout_job_dir(job_dir, sizeof job_dir, r->srv->data_dir, r->id) != 0)
        return http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", "the data directory's path is too long");
    if (!r->srv->infer)
        return http_error(r, MHD_HTTP_SERVICE_UNAVAILABLE, "inference_unavailable", "classification is not running");
    if (!(q->job = process_request(q, job_dir, sel, top_k)))
        return http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", "out of memory");
    return enqueue(r, q);
}
