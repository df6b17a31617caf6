/* jobs/evaluation.c: an evaluation request checked and queued, and its
 * eval.json (contract in evaluation.h). The worker is jobs/eval_worker.c. */
#include "jobs/evaluation.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/layout.h"      /* layout_eval_dir, LAYOUT_EVAL_JSON, LAYOUT_*_SPLIT */
#include "engine/fileio.h"    /* fio_write_atomic, fio_read_file, fio_mkdir_p, fio_rm_rf */

/* ---- splits ------------------------------------------------------------------ */

static const struct {
    const char *name, *file;
} split_table[EVAL_SPLIT_COUNT] = {
    [EVAL_SPLIT_TRAIN] = { "train", LAYOUT_TRAIN_SPLIT },
    [EVAL_SPLIT_VAL] = { "val", LAYOUT_VAL_SPLIT },
    [EVAL_SPLIT_TEST] = { "test", LAYOUT_TEST_SPLIT },
};

const char *eval_split_name(eval_split s)
{
    return (unsigned)s < EVAL_SPLIT_COUNT ? split_table[s].name : NULL;
}

const char *eval_split_file(eval_split s)
{
    return (unsigned)s < EVAL_SPLIT_COUNT ? split_table[s].file : NULL;
}

int eval_split_parse(const char *name, eval_split *out)
{
    for (int i = 0; name && i < EVAL_SPLIT_COUNT; i++)
        if (!strcmp(name, split_table[i].name)) {
            *out = (eval_split)i;
            return 0;
        }
    return -1;
}

/* ---- the checks the request and the worker share ------------------------------ */

/* "[a,b,c]" into buf, shortened with "..." past its size. */
static void class_list(const char *const *names, int n, char *buf, size_t len)
{
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < n && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%s", i ? "," : "", names[i]);
    if (k + 1 < len)
        snprintf(buf + k, len - k, "]");
    else if (len > 5)
        snprintf(buf + len - 5, 5, "...]");
}

int eval_check_classes(const char *const *model, int nmodel, const char *const *data, int ndata,
                       api_error *e)
{
    int first = -1;
    for (int i = 0; i < nmodel && i < ndata && first < 0; i++)
        if (strcmp(model[i], data[i]))
            first = i;
    if (first < 0 && nmodel == ndata)
        return 0;
    char dl[160], ml[160], diff[200];
    class_list(data, ndata, dl, sizeof dl);
    class_list(model, nmodel, ml, sizeof ml);
    if (first >= 0)
        snprintf(diff, sizeof diff, "class %d differs (%.60s vs %.60s)", first + 1, data[first], model[first]);
    else
        snprintf(diff, sizeof diff, "the dataset has %d classes, the model %d", ndata, nmodel);
    return api_fail(e, 422, "class_mismatch", "the dataset has classes %s; the model was trained on %s: "
                    "%s. Evaluate on a dataset with the model's classes in the same order", dl, ml, diff);
}

int eval_check_shape(const model_prep *p, int c, int h, int w, api_error *e)
{
    if (p->c == c && p->h == h && p->w == w)
        return 0;
    return api_fail(e, 422, "shape_mismatch", "the dataset's images are %dx%dx%d (channels x height x "
                    "width), but the model was trained on %dx%dx%d images; import the dataset at the "
                    "model's size", c, h, w, p->c, p->h, p->w);
}

/* ---- eval.json ------------------------------------------------------------------ */

cJSON *eval_spec_to_json(const eval_spec *s)
{
    cJSON *o = cJSON_CreateObject(), *d = NULL;
    bool ok = o && cJSON_AddNumberToObject(o, "id", (double)s->id) &&
              cJSON_AddNumberToObject(o, "job_id", (double)s->job_id) &&
              cJSON_AddStringToObject(o, "job_dir", s->job_dir) &&
              cJSON_AddNumberToObject(o, "dataset_id", (double)s->dataset_id) &&
              cJSON_AddStringToObject(o, "dataset_dir", s->dataset_dir) &&
              cJSON_AddStringToObject(o, "split", eval_split_name(s->split)) &&
              cJSON_AddStringToObject(o, "selection", s->selection) &&
              (s->weights.kind == SNAP_EPOCH ? cJSON_AddNumberToObject(o, "weights", s->weights.epoch) != NULL
                                             : cJSON_AddStringToObject(o, "weights", "final") != NULL) &&
              cJSON_AddNumberToObject(o, "epoch", s->epoch) &&
              cJSON_AddNumberToObject(o, "batch_size", s->batch_size) &&
              (d = cJSON_AddObjectToObject(o, "devices")) &&
              cJSON_AddStringToObject(d, "kind", s->devices.kind == BACKEND_CUDA ? "cuda" : "cpu") &&
              cJSON_AddNumberToObject(d, "count", 1);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static int bad_spec(api_error *e, const char *field)
{
    return api_fail(e, 500, "bad_eval_json", "%s: \"%s\" is missing or not valid", LAYOUT_EVAL_JSON, field);
}

static int spec_int(const cJSON *o, const char *k, double lo, double hi, int64_t *out, api_error *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > hi ||
        v->valuedouble != (double)(int64_t)v->valuedouble)
        return bad_spec(e, k);
    *out = (int64_t)v->valuedouble;
    return 0;
}

static int spec_str(const cJSON *o, const char *k, char *out, size_t n, api_error *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsString(v) || !v->valuestring[0] || strlen(v->valuestring) >= n)
        return bad_spec(e, k);
    snprintf(out, n, "%s", v->valuestring);
    return 0;
}

static int spec_from_json(const cJSON *o, eval_spec *s, api_error *e)
{
    int64_t v = 0;
    char split[8], kind[8];
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(o, "weights");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "devices");
    if (spec_int(o, "id", 1, JOBCFG_ID_MAX, &s->id, e) || spec_int(o, "job_id", 1, JOBCFG_ID_MAX, &s->job_id, e) ||
        spec_int(o, "dataset_id", 1, JOBCFG_ID_MAX, &s->dataset_id, e) ||
        spec_str(o, "job_dir", s->job_dir, sizeof s->job_dir, e) ||
        spec_str(o, "dataset_dir", s->dataset_dir, sizeof s->dataset_dir, e) ||
        spec_str(o, "split", split, sizeof split, e) ||
        spec_str(o, "selection", s->selection, sizeof s->selection, e))
        return -1;
    if (eval_split_parse(split, &s->split) != 0)
        return bad_spec(e, "split");
    if (cJSON_IsString(w) && !strcmp(w->valuestring, "final")) {
        s->weights = (snap_select){ .kind = SNAP_FINAL };
    } else if (spec_int(o, "weights", 1, SNAP_EPOCH_MAX, &v, e) == 0) {
        s->weights = (snap_select){ .kind = SNAP_EPOCH, .epoch = (int)v };
    } else {
        return -1;
    }
    if (spec_int(o, "epoch", 0, SNAP_EPOCH_MAX, &v, e))
        return -1;
    s->epoch = (int)v;
    if (spec_int(o, "batch_size", 1, 1 << 20, &v, e))
        return -1;
    s->batch_size = (int)v;
    if (!cJSON_IsObject(d) || spec_str(d, "kind", kind, sizeof kind, e) ||
        (strcmp(kind, "cpu") && strcmp(kind, "cuda")))
        return bad_spec(e, "devices");
    s->devices = (jobcfg_devices){ .kind = strcmp(kind, "cuda") ? BACKEND_CPU : BACKEND_CUDA, .count = 1 };
    return 0;
}

int eval_spec_load(const char *dir, eval_spec *out, api_error *e)
{
    char path[PATH_MAX + 32], err[512];
    size_t len = 0;
    memset(out, 0, sizeof *out);
    if (layout_file(path, sizeof path, dir, LAYOUT_EVAL_JSON) != 0)
        return api_fail(e, 500, "internal_error", "the path of %s in %s is too long", LAYOUT_EVAL_JSON, dir);
    char *text = fio_read_file(path, EVAL_SPEC_MAX, &len, err, sizeof err);
    if (!text)
        return api_fail(e, 500, "bad_eval_json", "%s", err);
    cJSON *o = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return api_fail(e, 500, "bad_eval_json", "%s is not a JSON object", path);
    }
    int rc = spec_from_json(o, out, e);
    cJSON_Delete(o);
    return rc;
}

/* ---- the request ------------------------------------------------------------------ */

typedef struct eval_request {
    int64_t dataset_id;              /* 0: the job's */
    eval_split split;
    snap_select sel;
    char selection[16];
} eval_request;

static int parse_request(const cJSON *body, eval_request *q, api_error *e)
{
    static const char *const fields[] = { "dataset_id", "split", "epoch", NULL };
    if (!cJSON_IsObject(body))
        return api_fail(e, 400, "invalid_request", "the body must be a JSON object");
    const cJSON *f;
    cJSON_ArrayForEach(f, body) {
        bool known = false;
        for (int i = 0; fields[i]; i++)
            known = known || !strcmp(f->string, fields[i]);
        if (!known)
            return api_fail(e, 400, "unknown_field", "unknown field \"%.64s\": an evaluation takes "
                            "dataset_id, split and epoch", f->string);
    }
    memset(q, 0, sizeof *q);
    f = cJSON_GetObjectItemCaseSensitive(body, "dataset_id");
    if (f && !cJSON_IsNull(f)) {
        if (!cJSON_IsNumber(f) || f->valuedouble < 1 || f->valuedouble > JOBCFG_ID_MAX ||
            f->valuedouble != (double)(int64_t)f->valuedouble)
            return api_fail(e, 400, "invalid_field", "dataset_id must be a dataset's id (a positive integer)");
        q->dataset_id = (int64_t)f->valuedouble;
    }
    f = cJSON_GetObjectItemCaseSensitive(body, "split");
    if (!f || cJSON_IsNull(f))
        return api_fail(e, 400, "missing_field", "split is required: train, val or test");
    if (!cJSON_IsString(f) || eval_split_parse(f->valuestring, &q->split) != 0)
        return api_fail(e, 400, "invalid_field", "split must be train, val or test");
    f = cJSON_GetObjectItemCaseSensitive(body, "epoch");
    if (snap_select_from_json(f, "epoch", &q->sel, e) != 0)
        return -1;
    if (q->sel.kind == SNAP_EPOCH)
        snprintf(q->selection, sizeof q->selection, "%d", q->sel.epoch);
    else
        snprintf(q->selection, sizeof q->selection, "%s", q->sel.kind == SNAP_BEST ? "best" : "final");
    return 0;
}

/* The dataset's record in the store: ready, with the split, its classes and
 * image size checked against the model. Fills the dataset's folder. */
static int check_dataset(store *st, const char *abs_data, int64_t id, eval_split split,
                         const model_bundle *b, char *dir, size_t dirlen, api_error *e)
{
    store_dataset d;
    int rc = store_dataset_get(st, id, &d);
    if (rc == STORE_NOT_FOUND)
        return api_fail(e, 404, "dataset_not_found", "there is no dataset %lld", (long long)id);
    if (rc != 0)
        return api_fail(e, 500, "internal_error", "reading dataset %lld failed", (long long)id);
    int ret = -1;
    cJSON *info = NULL;
    const char **names = NULL;
    if (strcmp(d.status, "ready")) {
        api_fail(e, 409, "dataset_not_ready", "dataset %lld is %s%s%.200s; evaluate on a ready dataset",
                 (long long)id, d.status, d.error ? ": " : "", d.error ? d.error : "");
        goto out;
    }
    info = d.info_json ? cJSON_Parse(d.info_json) : NULL;
    const cJSON *classes = cJSON_GetObjectItemCaseSensitive(info, "classes");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(info, "shape");
    const cJSON *counts = cJSON_GetObjectItemCaseSensitive(info, "counts");
    int n = cJSON_GetArraySize(classes);
    if (!cJSON_IsArray(classes) || !cJSON_IsArray(shape) || cJSON_GetArraySize(shape) != 3 ||
        !cJSON_IsObject(counts) || !(names = calloc((size_t)n + 1, sizeof *names))) {
        api_fail(e, 500, "internal_error", "dataset %lld's record has no classes, shape or counts",
                 (long long)id);
        goto out;
    }
    /* the split: present, with images */
    char have[64] = "";
    for (int s = 0, k = 0; s < EVAL_SPLIT_COUNT; s++) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(counts, eval_split_name((eval_split)s));
        if (cJSON_IsNumber(c) && c->valuedouble > 0)
            k += snprintf(have + k, sizeof have - (size_t)k, "%s%s", k ? ", " : "", eval_split_name((eval_split)s));
    }
    const cJSON *count = cJSON_GetObjectItemCaseSensitive(counts, eval_split_name(split));
    if (!cJSON_IsNumber(count) || count->valuedouble <= 0) {
        api_fail(e, 422, "split_not_found", "dataset %lld has no %s split (no images in it); it has: %s",
                 (long long)id, eval_split_name(split), have[0] ? have : "none");
        goto out;
    }
    const cJSON *x;
    int i = 0;
    cJSON_ArrayForEach(x, classes)
        names[i++] = cJSON_IsString(x) ? x->valuestring : "";
    int dims[3];
    for (int k = 0; k < 3; k++)
        dims[k] = (int)cJSON_GetArrayItem(shape, k)->valuedouble;
    if (eval_check_classes((const char *const *)b->labels, b->nclasses, names, n, e) != 0 ||
        eval_check_shape(&b->prep, dims[0], dims[1], dims[2], e) != 0)
        goto out;
    if (layout_dataset_dir(dir, dirlen, abs_data, id) != 0) {
        api_fail(e, 500, "internal_error", "the data directory's path is too long");
        goto out;
    }
    ret = 0;
out:
    free(names);
    cJSON_Delete(info);
    store_dataset_clear(&d);
    return ret;
}

/* The job's batch size and the device an evaluation of it takes. */
static int job_settings(const char *job_dir, eval_spec *sp, api_error *e)
{
    jobcfg c;
    if (jobcfg_load(job_dir, &c, e) != 0)
        return -1;
    sp->batch_size = c.batch_size;
    sp->devices = (jobcfg_devices){ .kind = c.devices.kind == BACKEND_CUDA ? BACKEND_CUDA : BACKEND_CPU,
                                    .count = 1 };
    jobcfg_free(&c);
    return 0;
}

/* Makes the evaluation's folder and writes eval.json into it. */
static int write_spec(const char *abs_data, const eval_spec *sp, api_error *e)
{
    char dir[PATH_MAX], parent[PATH_MAX], path[PATH_MAX + 32], err[512];
    if (layout_subdir(parent, sizeof parent, abs_data, LAYOUT_EVALUATIONS) != 0 ||
        layout_eval_dir(dir, sizeof dir, abs_data, sp->id) != 0 ||
        layout_file(path, sizeof path, dir, LAYOUT_EVAL_JSON) != 0)
        return api_fail(e, 500, "internal_error", "the data directory's path is too long");
    if (fio_mkdir_p(parent) != 0)
        return api_fail(e, 500, "internal_error", "cannot create %s: %s", parent, strerror(errno));
    fio_rm_rf(dir);                  /* a folder left by an older database */
    if (mkdir(dir, 0755) != 0)
        return api_fail(e, 500, "internal_error", "cannot create %s: %s", dir, strerror(errno));
    cJSON *o = eval_spec_to_json(sp);
    char *text = o ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!text)
        return api_fail(e, 500, "internal_error", "out of memory");
    int rc = fio_write_atomic(path, text, strlen(text), err, sizeof err);
    cJSON_free(text);
    if (rc != 0)
        return api_fail(e, 500, "internal_error", "writing %s failed: %s", path, err);
    return 0;
}

int eval_create(store *st, const char *data_dir, int64_t job_id, const cJSON *body, int64_t *id,
                api_error *e)
{
    eval_request q;
    eval_spec sp;
    model_bundle b;
    store_job j;
    char abs_data[PATH_MAX];
    bool have_bundle = false;
    int ret = -1;

    memset(&sp, 0, sizeof sp);
    memset(&b, 0, sizeof b);
    int rc = store_job_get(st, job_id, &j);
    if (rc == STORE_NOT_FOUND)
        return api_fail(e, 404, "job_not_found", "there is no job %lld", (long long)job_id);
    if (rc != 0)
        return api_fail(e, 500, "internal_error", "reading job %lld failed", (long long)job_id);
    sp.job_id = job_id;
    sp.dataset_id = j.dataset_id;
    store_job_clear(&j);
    if (parse_request(body, &q, e) != 0)
        return -1;
    if (q.dataset_id)
        sp.dataset_id = q.dataset_id;
    sp.split = q.split;
    snprintf(sp.selection, sizeof sp.selection, "%s", q.selection);
    if (!realpath(data_dir, abs_data))
        return api_fail(e, 500, "internal_error", "data directory %s: %s", data_dir, strerror(errno));
    if (layout_job_dir(sp.job_dir, sizeof sp.job_dir, abs_data, job_id) != 0)
        return api_fail(e, 500, "internal_error", "the data directory's path is too long");

    if (model_bundle_from_job(sp.job_dir, q.sel, &b, e) != 0)
        goto out;
    have_bundle = true;
    /* Pinned: the weights "best" or "final" mean now. */
    sp.epoch = b.epoch;
    sp.weights = b.final || b.epoch < 1 ? (snap_select){ .kind = SNAP_FINAL }
                                        : (snap_select){ .kind = SNAP_EPOCH, .epoch = b.epoch };
    if (check_dataset(st, abs_data, sp.dataset_id, sp.split, &b, sp.dataset_dir, sizeof sp.dataset_dir, e) != 0 ||
        job_settings(sp.job_dir, &sp, e) != 0)
        goto out;

    char err[256];
    if (store_eval_insert(st, job_id, sp.dataset_id, eval_split_name(sp.split), sp.selection, sp.epoch,
                          &sp.id, err, sizeof err) != 0) {
        api_fail(e, 500, "internal_error", "storing the evaluation failed: %s", err);
        goto out;
    }
    if (write_spec(abs_data, &sp, e) != 0) {
        store_eval_delete(st, sp.id);        /* never leave one the worker cannot read */
        goto out;
    }
    *id = sp.id;
    ret = 0;
out:
    if (have_bundle)
        model_bundle_free(&b);
    return ret;
}
