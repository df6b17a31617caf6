/* server/model.c: the model download as a tarball (contract in model.h). */
#define _GNU_SOURCE           /* O_TMPFILE */
#include "base/layout.h"     /* layout_job_dir, layout_subdir */
#include "jobs/jobcfg.h"      /* jobcfg_from_json: the stored config */
#include "server/model.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>

#include "engine/checkpoint.h" /* ckpt_export_weights */
#include "jobs/model_bundle.h" /* model_prep_of_job_dir: preprocess.json */
#include "jobs/model_onnx.h"   /* model_onnx: format=onnx and model.onnx */
#include "jobs/snapshots.h"   /* snap_select_parse, snap_resolve */
#include "server/lookup.h"     /* lookup_job */

/* An unnamed temporary file in dir. */
static int temp_fd(const char *dir)
{
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0)
        return fd;
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/model-XXXXXX", dir) >= (int)sizeof path)
        return -1;
    fd = mkostemp(path, O_CLOEXEC);
    if (fd >= 0)
        unlink(path);
    return fd;
}

static struct archive_entry *new_entry(const char *name, int64_t size)
{
    struct archive_entry *e = archive_entry_new();
    if (!e)
        return NULL;
    archive_entry_set_pathname(e, name);
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, size);
    archive_entry_set_mtime(e, time(NULL), 0);
    return e;
}

static int add_bytes(struct archive *a, const char *name, const void *data, size_t n, char *err,
                     size_t errlen)
{
    struct archive_entry *e = new_entry(name, (int64_t)n);
    int rc = -1;
    if (!e) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (archive_write_header(a, e) != ARCHIVE_OK ||
        (n && archive_write_data(a, data, n) != (la_ssize_t)n)) {
        snprintf(err, errlen, "writing %s: %s", name, archive_error_string(a));
        goto out;
    }
    rc = 0;
out:
    archive_entry_free(e);
    return rc;
}

static int add_text(struct archive *a, const char *name, const char *text, char *err, size_t errlen)
{
    return add_bytes(a, name, text, strlen(text), err, errlen);
}

static int add_json(struct archive *a, const char *name, const cJSON *obj, char *err, size_t errlen)
{
    char *text = cJSON_Print(obj);
    if (!text) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t n = strlen(text);
    char *with_nl = realloc(text, n + 2);
    if (with_nl) {
        text = with_nl;
        text[n] = '\n';
        text[n + 1] = '\0';
    }
    int rc = add_text(a, name, text, err, errlen);
    free(text);
    return rc;
}

static int add_file(struct archive *a, const char *name, const char *path, char *err, size_t errlen)
{
    int rc = -1;
    struct archive_entry *e = NULL;
    char *chunk = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        snprintf(err, errlen, "reading %.300s: %s", path, strerror(errno));
        goto out;
    }
    e = new_entry(name, (int64_t)sb.st_size);
    chunk = malloc(1 << 16);
    if (!e || !chunk) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    if (archive_write_header(a, e) != ARCHIVE_OK) {
        snprintf(err, errlen, "writing %s: %s", name, archive_error_string(a));
        goto out;
    }
    int64_t left = sb.st_size;
    while (left > 0) {
        ssize_t k = read(fd, chunk, left < (1 << 16) ? (size_t)left : (1 << 16));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            snprintf(err, errlen, "reading %.300s: %s", path, k ? strerror(errno) : "file shrank");
            goto out;
        }
        if (archive_write_data(a, chunk, (size_t)k) != k) {
            snprintf(err, errlen, "writing %s: %s", name, archive_error_string(a));
            goto out;
        }
        left -= k;
    }
    rc = 0;
out:
    free(chunk);
    archive_entry_free(e);
    if (fd >= 0)
        close(fd);
    return rc;
}

/* The last value of each tag: every stored metric (epoch <= 0), or those up to
 * a snapshot's epoch. NULL on a store failure or out of memory. */
static cJSON *metrics_upto(store *st, int64_t job_id, int epoch)
{
    store_metric *ms = NULL;
    size_t n = 0;
    int rc = epoch > 0 ? store_metric_list(st, job_id, -1, &ms, &n)
                       : store_metric_latest(st, job_id, &ms, &n);
    if (rc != 0)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; o && i < n; i++) {
        if (epoch > 0 && ms[i].epoch > epoch + 1e-9)
            continue;
        cJSON *v = isfinite(ms[i].value) ? cJSON_CreateNumber(ms[i].value) : cJSON_CreateNull();
        if (!v) {
            cJSON_Delete(o);
            o = NULL;
            break;
        }
        if (cJSON_GetObjectItemCaseSensitive(o, ms[i].tag))
            cJSON_ReplaceItemInObjectCaseSensitive(o, ms[i].tag, v);
        else
            cJSON_AddItemToObject(o, ms[i].tag, v);
    }
    free(ms);
    return o;
}

typedef struct model_parts {
    jobcfg config;             /* the job's config (owned) */
    cJSON *preprocess, *info;  /* built here (owned) */
    uint8_t *onnx;             /* model.onnx (owned) */
    size_t onnx_len;
    char *labels;              /* labels.txt text */
    char weights[PATH_MAX + 64];
    int epoch;                 /* the weights' epoch */
    bool final;                /* model.safetensors, the end of training */
    bool weights_tmp;          /* weights is a temporary export: unlink it */
} model_parts;

static void parts_clear(model_parts *p)
{
    if (p->weights_tmp)
        unlink(p->weights);
    jobcfg_free(&p->config);
    cJSON_Delete(p->preprocess);
    cJSON_Delete(p->info);
    free(p->onnx);
    free(p->labels);
}

static char *labels_text(char *const *classes, int n)
{
    size_t size = 1;
    for (int i = 0; i < n; i++)
        size += strlen(classes[i]) + 1;
    char *text = malloc(size);
    if (!text)
        return NULL;
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        size_t k = strlen(classes[i]);
        memcpy(text + used, classes[i], k);
        used += k;
        text[used++] = '\n';
    }
    text[used] = '\0';
    return text;
}

/* preprocess.json: the job folder's (jobs/model_bundle.h), one format for
 * the tarball, kiln infer and the ONNX metadata. 0 or -1 with err. */
static int build_preprocess(const char *job_dir, model_parts *p, char *err, size_t errlen)
{
    model_prep prep;
    if (model_prep_of_job_dir(job_dir, &p->config, &prep, err, errlen) != 0)
        return -1;
    if (!(p->preprocess = model_prep_to_json(&prep)))
        return set_err(err, errlen, "out of memory");
    return 0;
}

static int build_info(server *srv, const store_job *j, model_parts *p, char *err, size_t errlen)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *ds = cJSON_CreateObject();
    cJSON *metrics = metrics_upto(srv->st, j->id, p->final ? 0 : p->epoch);
    store_dataset d;
    bool have_ds = store_dataset_get(srv->st, j->dataset_id, &d) == 0;
    bool ok = o && ds && metrics &&
              cJSON_AddNumberToObject(o, "job", (double)j->id) &&
              cJSON_AddNumberToObject(ds, "id", (double)j->dataset_id) &&
              (!have_ds || cJSON_AddStringToObject(ds, "name", d.name)) &&
              cJSON_AddItemToObject(o, "dataset", ds);
    if (ok)
        ds = NULL;
    ok = ok && cJSON_AddStringToObject(o, "network", j->network ? j->network : "") &&
         cJSON_AddNumberToObject(o, "epoch", p->epoch) &&
         cJSON_AddNumberToObject(o, "epochs", j->epochs) &&
         cJSON_AddStringToObject(o, "status", j->status) &&
         cJSON_AddItemToObject(o, "metrics", metrics);
    if (ok)
        metrics = NULL;
    ok = ok && cJSON_AddStringToObject(o, "created_at", j->created_at ? j->created_at : "") &&
         cJSON_AddStringToObject(o, "kiln_version", KILN_VERSION);
    if (have_ds)
        store_dataset_clear(&d);
    cJSON_Delete(ds);
    cJSON_Delete(metrics);
    if (!ok) {
        cJSON_Delete(o);
        snprintf(err, errlen, "out of memory or a store failure building info.json");
        return -1;
    }
    p->info = o;
    return 0;
}

/* A snapshot is a training checkpoint, which also holds the optimizer's
 * state: the download gets its weights only, exported to a temporary file in
 * tmpdir that parts_clear removes. 0 or -1 with err. */
static int export_snapshot(const char *tmpdir, model_parts *p, char *err, size_t errlen)
{
    static atomic_uint counter;
    char out[sizeof p->weights];
    if (snprintf(out, sizeof out, "%s/weights-%d-%u.safetensors", tmpdir, (int)getpid(),
                 atomic_fetch_add(&counter, 1)) >= (int)sizeof out) {
        snprintf(err, errlen, "temporary path too long");
        return -1;
    }
    if (ckpt_export_weights(p->weights, out, err, errlen) != 0)
        return -1;
    memcpy(p->weights, out, sizeof out);
    p->weights_tmp = true;
    return 0;
}

/* model.onnx: the weights, spec, labels and preprocess.json of the parts as
 * ONNX (jobs/model_onnx.h). 0 or -1 with err. */
static int build_onnx(model_parts *p, char *err, size_t errlen)
{
    model_prep prep;
    if (model_prep_from_json(p->preprocess, &prep, err, errlen) != 0)
        return -1;
    model_onnx_src src = { .spec = p->config.network, .input = jobcfg_net_input(&p->config),
                           .nclasses = p->config.nclasses, .labels = p->config.classes,
                           .prep = &prep, .network = p->config.network_name,
                           .weights = p->weights };
    return model_onnx(&src, KILN_VERSION, &p->onnx, &p->onnx_len, err, errlen);
}

/* Writes the tar to fd. 0 or -1 with err. */
static int write_tar(int fd, const model_parts *p, char *err, size_t errlen)
{
    struct archive *a = archive_write_new();
    int rc = -1;
    if (!a) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (archive_write_set_format_ustar(a) != ARCHIVE_OK ||
        archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
        archive_write_open_fd(a, fd) != ARCHIVE_OK) {
        snprintf(err, errlen, "starting the tar: %s", archive_error_string(a));
        goto out;
    }
    if (add_json(a, "network.json", p->config.network, err, errlen) != 0 ||
        add_file(a, "weights.safetensors", p->weights, err, errlen) != 0 ||
        add_text(a, "labels.txt", p->labels, err, errlen) != 0 ||
        add_json(a, "preprocess.json", p->preprocess, err, errlen) != 0 ||
        (p->onnx && add_bytes(a, "model.onnx", p->onnx, p->onnx_len, err, errlen) != 0) ||
        add_json(a, "info.json", p->info, err, errlen) != 0)
        goto out;
    if (archive_write_close(a) != ARCHIVE_OK) {
        snprintf(err, errlen, "finishing the tar: %s", archive_error_string(a));
        goto out;
    }
    rc = 0;
out:
    archive_write_free(a);
    return rc;
}

/* The ONNX file as the answer (p->onnx passes to the response). */
static enum MHD_Result send_onnx(request *r, const store_job *j, model_parts *p, int want_epoch)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(p->onnx_len, p->onnx,
                                                                MHD_RESPMEM_MUST_FREE);
    if (!resp)
        return MHD_NO;
    p->onnx = NULL;
    char disp[128];
    if (want_epoch > 0)
        snprintf(disp, sizeof disp, "attachment; filename=\"kiln-job-%lld-epoch-%d.onnx\"",
                 (long long)j->id, want_epoch);
    else
        snprintf(disp, sizeof disp, "attachment; filename=\"kiln-job-%lld.onnx\"", (long long)j->id);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_DISPOSITION, disp);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    return http_queue(r, MHD_HTTP_OK, resp);
}

/* Picks the weights file of a selection (snap_resolve: model.safetensors,
 * the best snapshot or epoch N's); answers its 404/409 itself (returns
 * false then). */
static bool pick_weights(request *r, const store_job *j, const char *job_dir, snap_select sel,
                         model_parts *p, enum MHD_Result *answered)
{
    api_error e;
    char path[PATH_MAX];
    memset(&e, 0, sizeof e);
    if (snap_resolve(job_dir, sel, j->epoch, path, sizeof path, &p->epoch, &p->final, &e) != 0) {
        *answered = http_error(r, e.status >= 400 && e.status < 600 ? (unsigned)e.status : 500,
                               e.code[0] ? e.code : "internal_error", "job %lld (%s): %s",
                               (long long)j->id, j->status, e.message);
        return false;
    }
    snprintf(p->weights, sizeof p->weights, "%s", path);
    return true;
}

int model_handle(request *r)
{
    server *srv = r->srv;
    enum MHD_Result ret;
    const char *format = http_arg(r, "format");
    const char *epoch_arg = http_arg(r, "epoch");
    snap_select sel;
    model_parts p;
    memset(&p, 0, sizeof p);
    store_job j;
    if (!lookup_job(r, r->id, &j, &ret))
        return ret;

    bool onnx = format && strcmp(format, "onnx") == 0;
    if (format && strcmp(format, "tar") != 0 && !onnx) {
        ret = http_error(r, MHD_HTTP_BAD_REQUEST, "unsupported_format",
                         "format \"%.32s\" is not available: use format=tar or format=onnx", format);
        goto out;
    }
    api_error se;
    if (snap_select_parse(epoch_arg, "epoch", &sel, &se) != 0) {
        ret = http_error(r, MHD_HTTP_BAD_REQUEST, se.code[0] ? se.code : "invalid_field", "%s", se.message);
        goto out;
    }
    char job_dir[PATH_MAX];
    if (layout_job_dir(job_dir, sizeof job_dir, srv->data_dir, j.id) != 0) {
        ret = http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error",
                         "the data directory's path is too long");
        goto out;
    }
    if (!pick_weights(r, &j, job_dir, sel, &p, &ret))
        goto out;

    char err[1024] = "";
    cJSON *stored = j.config_json ? cJSON_Parse(j.config_json) : NULL;
    api_error e;
    int cfg_rc = jobcfg_from_json(stored, JOBCFG_RESOLVED, &p.config, &e);
    cJSON_Delete(stored);
    if (cfg_rc != 0) {
        ret = http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error",
                         "job %lld's stored config is not valid: %s", (long long)j.id, e.message);
        goto out;
    }
    if (!(p.labels = labels_text(p.config.classes, p.config.nclasses))) {
        ret = http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", "out of memory");
        goto out;
    }
    if (build_preprocess(job_dir, &p, err, sizeof err) != 0 || build_info(srv, &j, &p, err, sizeof err) != 0) {
        ret = http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", "%s", err);
        goto out;
    }

    char tmpdir[PATH_MAX + 16];
    layout_subdir(tmpdir, sizeof tmpdir, srv->data_dir, LAYOUT_UPLOADS);
    if (!p.final && export_snapshot(tmpdir, &p, err, sizeof err) != 0) {
        ret = http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", "%s", err);
        goto out;
    }
    /* The tarball goes without model.onnx (and says why in info.json) when
     * the export fails, rather than not at all: its weights are still good. */
    if (build_onnx(&p, err, sizeof err) != 0) {
        if (onnx || !cJSON_AddStringToObject(p.info, "onnx_error", err)) {
            ret = http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error",
                             "exporting the model to ONNX: %s", err);
            goto out;
        }
        err[0] = '\0';
    }
    if (onnx) {
        ret = send_onnx(r, &j, &p, sel.kind != SNAP_FINAL ? p.epoch : 0);
        goto out;
    }
    int fd = temp_fd(tmpdir);
    if (fd < 0) {
        ret = http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "storage_error",
                         "cannot make a temporary file: %s", strerror(errno));
        goto out;
    }
    off_t size;
    if (write_tar(fd, &p, err, sizeof err) != 0 || (size = lseek(fd, 0, SEEK_END)) < 0) {
        close(fd);
        ret = http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", "%s",
                         err[0] ? err : strerror(errno));
        goto out;
    }
    struct MHD_Response *resp = MHD_create_response_from_fd_at_offset64((uint64_t)size, fd, 0);
    if (!resp) {
        close(fd);
        ret = MHD_NO;
        goto out;
    }
    char disp[128];
    if (sel.kind != SNAP_FINAL)
        snprintf(disp, sizeof disp, "attachment; filename=\"kiln-job-%lld-epoch-%d.tar\"", (long long)j.id,
                 p.epoch);
    else
        snprintf(disp, sizeof disp, "attachment; filename=\"kiln-job-%lld.tar\"", (long long)j.id);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/x-tar");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_DISPOSITION, disp);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    ret = http_queue(r, MHD_HTTP_OK, resp);
out:
    parts_clear(&p);
    store_job_clear(&j);
    return ret;
}
