/* jobs/model_bundle.c: opening a trained model (contract in model_bundle.h). */
#include "jobs/model_bundle.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>

#include "base/layout.h"      /* LAYOUT_JOB_JSON, layout_file */
#include "engine/dataset.h"   /* ds_info_load */
#include "engine/fileio.h"    /* fio_read_file, fio_rm_rf */
#include "jobs/readers.h"     /* READERS_MAX_CLASSES: the most classes a dataset has */

#define PREP_JSON_MAX (1u << 20)
#define TAR_TEXT_MAX ((size_t)64 << 20)               /* network.json, labels.txt, ... */
#define TAR_WEIGHTS_MAX ((int64_t)16 << 30)           /* weights.safetensors */

/* ---- preprocessing ---------------------------------------------------------- */

int model_prep_from_job(const jobcfg *c, model_prep *out, char *err, size_t errlen)
{
    ds_info info;
    char derr[512];
    memset(out, 0, sizeof *out);
    if (ds_info_load(c->dataset_dir, &info, derr, sizeof derr) != 0)
        return set_err(err, errlen, "the job's dataset header is unreadable: %s", derr);
    out->c = info.c;
    out->h = info.h;
    out->w = info.w;
    if (img_resize_parse(info.resize[0] ? info.resize : "squash", &out->resize) != 0)
        out->resize = IMG_SQUASH;
    for (int k = 0; k < info.c && k < 4; k++)
        out->mean[k] = info.mean[k];
    out->scale = 1.0f / 255.0f;
    net_shape in = jobcfg_net_input(c);
    out->crop_h = in.h;
    out->crop_w = in.w;
    ds_info_free(&info);
    return 0;
}

cJSON *model_prep_to_json(const model_prep *p)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *mean = o ? cJSON_AddArrayToObject(o, "mean") : NULL;
    bool ok = mean != NULL;
    for (int k = 0; ok && k < p->c && k < 4; k++)
        ok = cJSON_AddItemToArray(mean, cJSON_CreateNumber(p->mean[k]));
    ok = ok && cJSON_AddNumberToObject(o, "channels", p->c) && cJSON_AddNumberToObject(o, "height", p->h) &&
         cJSON_AddNumberToObject(o, "width", p->w) &&
         cJSON_AddStringToObject(o, "resize", img_resize_name(p->resize)) &&
         cJSON_AddNumberToObject(o, "scale", p->scale) && cJSON_AddStringToObject(o, "layout", "NCHW") &&
         cJSON_AddStringToObject(o, "formula", "x = (pixel - mean[c]) * scale, pixel in 0..255");
    /* trained on crops (augmentation.crop): the network takes the centre crop
     * of the resized image, as validation did */
    if (ok && (p->crop_h != p->h || p->crop_w != p->w))
        ok = cJSON_AddItemToObject(o, "center_crop", cJSON_CreateIntArray((const int[]){ p->crop_h, p->crop_w }, 2));
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static bool int_field(const cJSON *o, const char *k, int lo, int hi, int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
        return false;
    *out = (int)v->valuedouble;
    return true;
}

int model_prep_from_json(const cJSON *j, model_prep *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!cJSON_IsObject(j))
        return set_err(err, errlen, "preprocess.json is not an object");
    if (!int_field(j, "channels", 1, 3, &out->c) || out->c == 2)
        return set_err(err, errlen, "preprocess.json: channels must be 1 or 3");
    if (!int_field(j, "height", 1, IMG_MAX_SIDE, &out->h) || !int_field(j, "width", 1, IMG_MAX_SIDE, &out->w))
        return set_err(err, errlen, "preprocess.json: height and width must be integers 1..%d", IMG_MAX_SIDE);
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(j, "resize");
    if (!rs)
        out->resize = IMG_SQUASH;
    else if (!cJSON_IsString(rs) || img_resize_parse(rs->valuestring, &out->resize) != 0)
        return set_err(err, errlen, "preprocess.json: resize must be squash, crop, fill or half_crop");
    const cJSON *mean = cJSON_GetObjectItemCaseSensitive(j, "mean");
    if (!cJSON_IsArray(mean) || cJSON_GetArraySize(mean) != out->c)
        return set_err(err, errlen, "preprocess.json: mean must list one value per channel (%d)", out->c);
    for (int k = 0; k < out->c; k++) {
        const cJSON *v = cJSON_GetArrayItem(mean, k);
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 255))
            return set_err(err, errlen, "preprocess.json: mean[%d] must be a number 0..255", k);
        out->mean[k] = (float)v->valuedouble;
    }
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(j, "scale");
    if (!cJSON_IsNumber(sc) || !(sc->valuedouble > 0 && sc->valuedouble <= 1))
        return set_err(err, errlen, "preprocess.json: scale must be a number in (0, 1]");
    out->scale = (float)sc->valuedouble;
    out->crop_h = out->h;
    out->crop_w = out->w;
    const cJSON *cc = cJSON_GetObjectItemCaseSensitive(j, "center_crop");
    if (cc) {
        const cJSON *ch = cJSON_GetArrayItem(cc, 0), *cw = cJSON_GetArrayItem(cc, 1);
        if (!cJSON_IsArray(cc) || cJSON_GetArraySize(cc) != 2 || !cJSON_IsNumber(ch) || !cJSON_IsNumber(cw) ||
            ch->valuedouble < 1 || ch->valuedouble > out->h || cw->valuedouble < 1 || cw->valuedouble > out->w)
            return set_err(err, errlen, "preprocess.json: center_crop must be [h, w] within the %dx%d image",
                           out->h, out->w);
        out->crop_h = (int)ch->valuedouble;
        out->crop_w = (int)cw->valuedouble;
    }
    return 0;
}

/* Reads a preprocess.json file. 1 when there is none, 0, or -1 with err. */
static int prep_load(const char *path, model_prep *out, char *err, size_t errlen)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return errno == ENOENT ? 1 : set_err(err, errlen, "%s: %s", path, strerror(errno));
    size_t len = 0;
    char *text = fio_read_file(path, PREP_JSON_MAX, &len, err, errlen);
    if (!text)
        return -1;
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    int rc = j ? model_prep_from_json(j, out, err, errlen) : set_err(err, errlen, "%s is not valid JSON", path);
    cJSON_Delete(j);
    return rc;
}

int model_prep_of_job_dir(const char *job_dir, const jobcfg *c, model_prep *out, char *err, size_t errlen)
{
    char path[PATH_MAX];
    if (layout_file(path, sizeof path, job_dir, MODEL_PREPROCESS_JSON) != 0)
        return set_err(err, errlen, "the job folder's path is too long");
    int rc = prep_load(path, out, err, errlen);
    return rc == 1 ? model_prep_from_job(c, out, err, errlen) : rc;
}

/* ---- bundles ---------------------------------------------------------------- */

void model_bundle_free(model_bundle *b)
{
    if (!b)
        return;
    cJSON_Delete(b->spec);
    for (int i = 0; b->labels && i < b->nclasses; i++)
        free(b->labels[i]);
    free(b->labels);
    if (b->tmpdir[0])
        fio_rm_rf(b->tmpdir);
    memset(b, 0, sizeof *b);
}

static void set_network_name(model_bundle *b, const char *fallback)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(b->spec, "name");
    const char *name = cJSON_IsString(n) && n->valuestring[0] ? n->valuestring : fallback;
    snprintf(b->network_name, sizeof b->network_name, "%s", name ? name : "");
}

int model_bundle_from_job(const char *job_dir, snap_select sel, model_bundle *out, api_error *e)
{
    memset(out, 0, sizeof *out);
    jobcfg cfg;
    char err[512];
    if (jobcfg_load(job_dir, &cfg, e) != 0) {
        if (e->status < 500)
            e->status = 500;
        return -1;
    }
    int rc = -1;
    if (model_prep_of_job_dir(job_dir, &cfg, &out->prep, err, sizeof err) != 0) {
        api_fail(e, 500, "internal_error", "the job's preprocessing: %s", err);
        goto out;
    }
    if (snap_resolve(job_dir, sel, cfg.epochs, out->weights, sizeof out->weights, &out->epoch, &out->final, e) != 0)
        goto out;
    out->spec = cJSON_Duplicate(cfg.network, true);
    out->labels = calloc((size_t)cfg.nclasses, sizeof *out->labels);
    if (!out->spec || !out->labels) {
        api_fail(e, 500, "internal_error", "out of memory");
        goto out;
    }
    out->nclasses = cfg.nclasses;
    for (int i = 0; i < cfg.nclasses; i++)
        if (!(out->labels[i] = strdup(cfg.classes[i]))) {
            api_fail(e, 500, "internal_error", "out of memory");
            goto out;
        }
    out->input = jobcfg_net_input(&cfg);
    out->job_id = cfg.id;
    set_network_name(out, cfg.network_name);
    rc = 0;
out:
    jobcfg_free(&cfg);
    if (rc != 0)
        model_bundle_free(out);
    return rc;
}

/* ---- tarballs ------------------------------------------------------------------ */

/* Reads the current entry's data into a NUL-terminated malloc'ed string. */
static char *entry_text(struct archive *a, int64_t size, const char *name, api_error *e)
{
    if (size < 0 || (uint64_t)size > TAR_TEXT_MAX) {
        api_fail(e, 400, "bad_model", "the model's %s is larger than %zu bytes", name, TAR_TEXT_MAX);
        return NULL;
    }
    char *buf = malloc((size_t)size + 1);
    if (!buf) {
        api_fail(e, 500, "internal_error", "out of memory");
        return NULL;
    }
    la_ssize_t k = size ? archive_read_data(a, buf, (size_t)size) : 0;
    if (k != size) {
        free(buf);
        api_fail(e, 400, "bad_model", "the model's %s is truncated", name);
        return NULL;
    }
    buf[size] = '\0';
    return buf;
}

static int entry_to_file(struct archive *a, int64_t size, const char *path, api_error *e)
{
    if (size < 0 || size > TAR_WEIGHTS_MAX)
        return api_fail(e, 400, "bad_model", "the model's weights are larger than the limit");
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return api_fail(e, 500, "internal_error", "cannot write %s: %s", path, strerror(errno));
    int rc = archive_read_data_into_fd(a, fd) == ARCHIVE_OK ? 0 : -1;
    if (close(fd) != 0)
        rc = -1;
    if (rc != 0)
        return api_fail(e, 400, "bad_model", "the model's weights could not be read: %s", archive_error_string(a));
    return 0;
}

/* labels.txt: one class per line, as the download writes it. */
static int parse_labels(char *text, model_bundle *b, api_error *e)
{
    int n = 0;
    for (char *p = text; *p; p++)
        n += *p == '\n';
    if (text[0] && text[strlen(text) - 1] != '\n')
        n++;
    if (n < 2 || n > READERS_MAX_CLASSES)
        return api_fail(e, 400, "bad_model", "the model's labels.txt lists %d classes (2..%d)", n, READERS_MAX_CLASSES);
    if (!(b->labels = calloc((size_t)n, sizeof *b->labels)))
        return api_fail(e, 500, "internal_error", "out of memory");
    char *line = text;
    for (int i = 0; i < n; i++) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        if (!(b->labels[i] = strdup(line)))
            return api_fail(e, 500, "internal_error", "out of memory");
        b->nclasses = i + 1;
        line = nl ? nl + 1 : line + strlen(line);
    }
    return 0;
}

typedef struct tar_parts {
    char *network, *labels, *prep, *info;
    bool weights;
} tar_parts;

static int read_tar(const char *tar_path, const char *weights, tar_parts *t, api_error *e)
{
    struct archive *a = archive_read_new();
    if (!a)
        return api_fail(e, 500, "internal_error", "out of memory");
    archive_read_support_format_tar(a);
    archive_read_support_filter_gzip(a);
    int rc = -1;
    if (archive_read_open_filename(a, tar_path, 1 << 16) != ARCHIVE_OK) {
        api_fail(e, 400, "bad_model", "%.300s is not a model tarball: %s", tar_path, archive_error_string(a));
        goto out;
    }
    struct archive_entry *ent;
    int r;
    while ((r = archive_read_next_header(a, &ent)) == ARCHIVE_OK) {
        const char *name = archive_entry_pathname(ent);
        if (name && !strncmp(name, "./", 2))
            name += 2;
        int64_t size = archive_entry_size(ent);
        char **slot = !name ? NULL : !strcmp(name, "network.json") ? &t->network
                    : !strcmp(name, "labels.txt") ? &t->labels : !strcmp(name, MODEL_PREPROCESS_JSON) ? &t->prep
                    : !strcmp(name, "info.json") ? &t->info : NULL;
        if (archive_entry_filetype(ent) != AE_IFREG)
            continue;
        if (slot && !*slot) {
            if (!(*slot = entry_text(a, size, name, e)))
                goto out;
        } else if (name && !strcmp(name, "weights.safetensors") && !t->weights) {
            if (entry_to_file(a, size, weights, e) != 0)
                goto out;
            t->weights = true;
        }
    }
    if (r != ARCHIVE_EOF) {
        api_fail(e, 400, "bad_model", "%.300s: %s", tar_path, archive_error_string(a));
        goto out;
    }
    const char *missing = !t->network ? "network.json" : !t->weights ? "weights.safetensors"
                        : !t->labels ? "labels.txt" : !t->prep ? MODEL_PREPROCESS_JSON : NULL;
    if (missing) {
        api_fail(e, 400, "bad_model", "%.300s has no %s: a model tarball holds network.json, "
                 "weights.safetensors, labels.txt and preprocess.json", tar_path, missing);
        goto out;
    }
    rc = 0;
out:
    archive_read_free(a);
    return rc;
}

int model_bundle_from_tar(const char *tar_path, const char *tmp_parent, model_bundle *out, api_error *e)
{
    memset(out, 0, sizeof *out);
    tar_parts t = { 0 };
    char err[512];
    int rc = -1;
    if (!tmp_parent)
        tmp_parent = getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp";
    if (snprintf(out->tmpdir, sizeof out->tmpdir, "%s/kiln-model-XXXXXX", tmp_parent) >= (int)sizeof out->tmpdir ||
        !mkdtemp(out->tmpdir)) {
        out->tmpdir[0] = '\0';
        return api_fail(e, 500, "internal_error", "cannot make a temporary folder in %.300s: %s", tmp_parent,
                        strerror(errno));
    }
    if (snprintf(out->weights, sizeof out->weights, "%.*s/weights.safetensors", (int)sizeof out->weights - 32,
                 out->tmpdir) >= (int)sizeof out->weights) {
        api_fail(e, 500, "internal_error", "the temporary folder's path is too long");
        goto out;
    }
    if (read_tar(tar_path, out->weights, &t, e) != 0)
        goto out;
    if (!(out->spec = cJSON_Parse(t.network)) || !cJSON_IsObject(out->spec)) {
        api_fail(e, 400, "bad_model", "the model's network.json is not a JSON object");
        goto out;
    }
    cJSON *pj = cJSON_Parse(t.prep);
    int prc = model_prep_from_json(pj, &out->prep, err, sizeof err);
    cJSON_Delete(pj);
    if (prc != 0) {
        api_fail(e, 400, "bad_model", "%s", err);
        goto out;
    }
    if (parse_labels(t.labels, out, e) != 0)
        goto out;
    out->input = (net_shape){ out->prep.c, out->prep.crop_h, out->prep.crop_w };
    cJSON *info = t.info ? cJSON_Parse(t.info) : NULL;
    const cJSON *ep = cJSON_GetObjectItemCaseSensitive(info, "epoch");
    const cJSON *job = cJSON_GetObjectItemCaseSensitive(info, "job");
    const cJSON *netname = cJSON_GetObjectItemCaseSensitive(info, "network");
    out->epoch = cJSON_IsNumber(ep) && ep->valuedouble >= 0 && ep->valuedouble <= SNAP_EPOCH_MAX ? (int)ep->valuedouble : 0;
    out->job_id = cJSON_IsNumber(job) && job->valuedouble >= 0 ? (int64_t)job->valuedouble : 0;
    out->final = true;
    set_network_name(out, cJSON_IsString(netname) ? netname->valuestring : NULL);
    cJSON_Delete(info);
    rc = 0;
out:
    free(t.network);
    free(t.labels);
    free(t.prep);
    free(t.info);
    if (rc != 0)
        model_bundle_free(out);
    return rc;
}

int model_bundle_open(const char *path, snap_select sel, model_bundle *out, api_error *e)
{
    struct stat sb;
    memset(out, 0, sizeof *out);
    if (stat(path, &sb) != 0)
        return api_fail(e, 404, "path_not_found", "%.300s: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode))
        return model_bundle_from_job(path, sel, out, e);
    if (sel.kind != SNAP_FINAL)
        return api_fail(e, 400, "invalid_field", "a model tarball holds one set of weights: an epoch can be "
                        "chosen only from a job folder");
    return model_bundle_from_tar(path, NULL, out, e);
}

net *model_bundle_net(const model_bundle *b, int max_batch, char *err, size_t errlen)
{
    net *n = net_create(b->spec, b->input, b->nclasses, max_batch, NULL, NULL, 1, err, errlen);
    if (!n)
        return NULL;
    if (net_load(n, b->weights, err, errlen) != 0) {
        net_free(n);
        return NULL;
    }
    return n;
}
