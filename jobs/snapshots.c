/* jobs/snapshots.c: a job's snapshots and the choice of weights (contract in snapshots.h). */
#include "jobs/snapshots.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/layout.h"      /* LAYOUT_CHECKPOINTS, LAYOUT_MODEL, LAYOUT_JOB_JSON */
#include "engine/fileio.h"    /* fio_read_file, fio_write_atomic */
#include "jobs/jobcfg.h"      /* JOBCFG_JSON_MAX */

#define SNAPSHOTS_JSON_MAX (16u << 20)

static const struct {
    const char *name;
    bool higher_better;
} metrics[SNAP_METRIC_COUNT] = {
    [SNAP_VAL_ACCURACY] = { "val/accuracy", true },
    [SNAP_VAL_LOSS] = { "val/loss", false },
    [SNAP_TRAIN_ACCURACY] = { "train/accuracy", true },
    [SNAP_TRAIN_LOSS] = { "train/loss", false },
};

const char *snap_metric_name(snap_metric m)
{
    return (unsigned)m < SNAP_METRIC_COUNT ? metrics[m].name : NULL;
}

int snap_metric_parse(const char *name, snap_metric *m)
{
    for (int i = 0; name && i < SNAP_METRIC_COUNT; i++)
        if (!strcmp(name, metrics[i].name)) {
            *m = (snap_metric)i;
            return 0;
        }
    return -1;
}

bool snap_metric_higher_better(snap_metric m)
{
    return (unsigned)m < SNAP_METRIC_COUNT && metrics[m].higher_better;
}

bool snap_metric_improves(snap_metric m, double a, double b, double min_delta)
{
    if (!isfinite(a))
        return false;
    if (!isfinite(b))
        return true;
    return snap_metric_higher_better(m) ? a > b + min_delta : a < b - min_delta;
}

/* ---- selections ------------------------------------------------------------ */

int snap_select_parse(const char *s, const char *field, snap_select *out, api_error *e)
{
    memset(out, 0, sizeof *out);
    if (!s || !*s || !strcmp(s, "final")) {
        out->kind = SNAP_FINAL;
        return 0;
    }
    if (!strcmp(s, "best")) {
        out->kind = SNAP_BEST;
        return 0;
    }
    char *end = NULL;
    errno = 0;
    long v = (s[0] >= '0' && s[0] <= '9') ? strtol(s, &end, 10) : 0;
    if (errno || !end || *end || v < 1 || v > SNAP_EPOCH_MAX)
        return api_fail(e, 400, "invalid_field", "%s must be an epoch number 1..%d, \"best\" or \"final\", "
                        "not \"%.32s\"", field, SNAP_EPOCH_MAX, s);
    out->kind = SNAP_EPOCH;
    out->epoch = (int)v;
    return 0;
}

int snap_select_from_json(const cJSON *v, const char *field, snap_select *out, api_error *e)
{
    memset(out, 0, sizeof *out);
    if (!v || cJSON_IsNull(v))
        return 0;
    if (cJSON_IsString(v))
        return snap_select_parse(v->valuestring, field, out, e);
    if (cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && v->valuedouble >= 1 &&
        v->valuedouble <= SNAP_EPOCH_MAX) {
        out->kind = SNAP_EPOCH;
        out->epoch = (int)v->valuedouble;
        return 0;
    }
    return api_fail(e, 400, "invalid_field", "%s must be an epoch number 1..%d, \"best\" or \"final\"",
                    field, SNAP_EPOCH_MAX);
}

/* ---- lists ---------------------------------------------------------------- */

void snap_list_free(snap_list *l)
{
    if (!l)
        return;
    for (int i = 0; i < l->n; i++)
        cJSON_Delete(l->items[i].metrics);
    free(l->items);
    memset(l, 0, sizeof *l);
}

const snap_item *snap_list_find(const snap_list *l, int epoch)
{
    for (int i = 0; i < l->n; i++)
        if (l->items[i].epoch == epoch)
            return &l->items[i];
    return NULL;
}

static bool item_value(const snap_item *it, snap_metric m, double *v)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(it->metrics, snap_metric_name(m));
    if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble))
        return false;
    *v = x->valuedouble;
    return true;
}

void snap_list_pick_best(snap_list *l)
{
    double best = NAN;
    l->best = 0;
    for (int i = 0; i < l->n; i++) {
        double v;
        if (item_value(&l->items[i], l->metric, &v) && (!l->best || snap_metric_improves(l->metric, v, best, 0))) {
            best = v;
            l->best = l->items[i].epoch;
        }
    }
}

static int by_epoch(const void *a, const void *b)
{
    const snap_item *x = a, *y = b;
    return (x->epoch > y->epoch) - (x->epoch < y->epoch);
}

static bool file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Appends an item (epoch, file); the caller fills the rest. NULL when out of memory. */
static snap_item *list_append(snap_list *l, int *cap)
{
    if (l->n == *cap) {
        int ncap = *cap ? *cap * 2 : 16;
        snap_item *p = realloc(l->items, (size_t)ncap * sizeof *p);
        if (!p)
            return NULL;
        l->items = p;
        *cap = ncap;
    }
    snap_item *it = &l->items[l->n++];
    memset(it, 0, sizeof *it);
    return it;
}

/* The epoch-N files of job_dir/checkpoints, without metrics. */
static int list_from_files(const char *job_dir, snap_list *l, char *err, size_t errlen)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", job_dir, LAYOUT_CHECKPOINTS) >= (int)sizeof path)
        return set_err(err, errlen, "the job folder's path is too long");
    DIR *d = opendir(path);
    if (!d)
        return errno == ENOENT ? 0 : set_err(err, errlen, "cannot read %s: %s", path, strerror(errno));
    int cap = 0, rc = 0;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        int n, used = 0;
        if (sscanf(ent->d_name, "epoch-%d.safetensors%n", &n, &used) != 1 || ent->d_name[used] != '\0' ||
            n < 1 || n > SNAP_EPOCH_MAX)
            continue;
        snap_item *it = list_append(l, &cap);
        if (!it || !(it->metrics = cJSON_CreateObject())) {
            rc = set_err(err, errlen, "out of memory");
            break;
        }
        it->epoch = n;
        snprintf(it->file, sizeof it->file, "%s/epoch-%d.safetensors", LAYOUT_CHECKPOINTS, n);
    }
    closedir(d);
    if (rc == 0 && l->n > 1)
        qsort(l->items, (size_t)l->n, sizeof *l->items, by_epoch);
    return rc;
}

/* A snapshot file name must stay inside the job folder's checkpoints/. */
static bool file_name_ok(const char *f)
{
    return !strncmp(f, LAYOUT_CHECKPOINTS "/", sizeof LAYOUT_CHECKPOINTS) && !strstr(f, "..") &&
           !strchr(f + sizeof LAYOUT_CHECKPOINTS, '/');
}

static int list_from_json(const char *path, const cJSON *j, snap_list *l, char *err, size_t errlen)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "metric");
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(j, "items");
    if (!cJSON_IsObject(j) || !cJSON_IsString(m) || snap_metric_parse(m->valuestring, &l->metric) != 0 ||
        !cJSON_IsArray(items))
        return set_err(err, errlen, "%s: not a snapshot list (it needs \"metric\" and \"items\")", path);
    const cJSON *fe = cJSON_GetObjectItemCaseSensitive(j, "final_epoch");
    if (cJSON_IsNumber(fe) && fe->valuedouble >= 1 && fe->valuedouble <= SNAP_EPOCH_MAX)
        l->final_epoch = (int)fe->valuedouble;
    int cap = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, items) {
        const cJSON *ep = cJSON_GetObjectItemCaseSensitive(x, "epoch");
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(x, "step");
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(x, "file");
        const cJSON *ms = cJSON_GetObjectItemCaseSensitive(x, "metrics");
        if (!cJSON_IsNumber(ep) || ep->valuedouble < 1 || ep->valuedouble > SNAP_EPOCH_MAX ||
            !cJSON_IsString(f) || strlen(f->valuestring) >= sizeof l->items[0].file ||
            !file_name_ok(f->valuestring) || (ms && !cJSON_IsObject(ms)))
            return set_err(err, errlen, "%s: a malformed item", path);
        snap_item *it = list_append(l, &cap);
        if (!it || !(it->metrics = ms ? cJSON_Duplicate(ms, true) : cJSON_CreateObject()))
            return set_err(err, errlen, "out of memory");
        it->epoch = (int)ep->valuedouble;
        it->step = cJSON_IsNumber(st) ? (int64_t)st->valuedouble : 0;
        snprintf(it->file, sizeof it->file, "%s", f->valuestring);
    }
    if (l->n > 1)
        qsort(l->items, (size_t)l->n, sizeof *l->items, by_epoch);
    return 0;
}

int snap_list_load(const char *job_dir, snap_list *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->metric = SNAP_VAL_ACCURACY;
    char path[PATH_MAX];
    if (layout_file(path, sizeof path, job_dir, LAYOUT_SNAPSHOTS) != 0)
        return set_err(err, errlen, "the job folder's path is too long");
    size_t len = 0;
    char rerr[256];
    char *text = file_exists(path) ? fio_read_file(path, SNAPSHOTS_JSON_MAX, &len, rerr, sizeof rerr) : NULL;
    int rc;
    if (text) {
        cJSON *j = cJSON_ParseWithLength(text, len);
        free(text);
        rc = j ? list_from_json(path, j, out, err, errlen)
               : set_err(err, errlen, "%s is not valid JSON", path);
        cJSON_Delete(j);
    } else {
        rc = list_from_files(job_dir, out, err, errlen);
    }
    if (rc != 0) {
        snap_list_free(out);
        return -1;
    }
    snap_list_pick_best(out);
    return 0;
}

cJSON *snap_list_to_json(const snap_list *l)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *items = o ? cJSON_AddArrayToObject(o, "items") : NULL;
    bool ok = items && cJSON_AddStringToObject(o, "metric", snap_metric_name(l->metric)) &&
              (l->best ? cJSON_AddNumberToObject(o, "best", l->best) : cJSON_AddNullToObject(o, "best")) &&
              (!l->final_epoch || cJSON_AddNumberToObject(o, "final_epoch", l->final_epoch));
    for (int i = 0; ok && i < l->n; i++) {
        const snap_item *it = &l->items[i];
        cJSON *x = cJSON_CreateObject();
        if (!x || !cJSON_AddItemToArray(items, x)) {
            cJSON_Delete(x);
            ok = false;
            break;
        }
        ok = cJSON_AddNumberToObject(x, "epoch", it->epoch) && cJSON_AddNumberToObject(x, "step", (double)it->step) &&
             cJSON_AddStringToObject(x, "file", it->file) && cJSON_AddBoolToObject(x, "best", it->epoch == l->best);
        cJSON *ms = ok ? cJSON_Duplicate(it->metrics, true) : NULL;
        if (!ms || !cJSON_AddItemToObject(x, "metrics", ms)) {
            cJSON_Delete(ms);
            ok = false;
        }
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int snap_list_save(const char *job_dir, const snap_list *l, char *err, size_t errlen)
{
    char path[PATH_MAX];
    if (layout_file(path, sizeof path, job_dir, LAYOUT_SNAPSHOTS) != 0)
        return set_err(err, errlen, "the job folder's path is too long");
    cJSON *o = snap_list_to_json(l);
    char *text = o ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!text)
        return set_err(err, errlen, "out of memory");
    int rc = fio_write_atomic(path, text, strlen(text), err, errlen);
    cJSON_free(text);
    return rc;
}

/* ---- resolving a selection ------------------------------------------------ */

/* "1, 2, 5" of the kept epochs, for a 404's message. */
static void kept_epochs(const snap_list *l, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < l->n && k + 16 < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%d", i ? ", " : "", l->items[i].epoch);
}

/* The epochs job.json asks for, or 0 when it cannot be read: for a caller
 * that does not know them. */
static int job_epochs(const char *job_dir)
{
    char path[PATH_MAX];
    if (layout_file(path, sizeof path, job_dir, LAYOUT_JOB_JSON) != 0)
        return 0;
    size_t len = 0;
    char e[128];
    char *text = fio_read_file(path, JOBCFG_JSON_MAX, &len, e, sizeof e);
    cJSON *j = text ? cJSON_ParseWithLength(text, len) : NULL;
    free(text);
    const cJSON *ep = cJSON_GetObjectItemCaseSensitive(j, "epochs");
    int n = cJSON_IsNumber(ep) ? (int)ep->valuedouble : 0;
    cJSON_Delete(j);
    return n;
}

static int item_path(const char *job_dir, const snap_item *it, char *path, size_t pathlen, api_error *e)
{
    if (snprintf(path, pathlen, "%s/%s", job_dir, it->file) >= (int)pathlen)
        return api_fail(e, 500, "internal_error", "the job folder's path is too long");
    return 0;
}

int snap_resolve(const char *job_dir, snap_select sel, int epochs, char *path, size_t pathlen,
                 int *epoch, bool *final, api_error *e)
{
    snap_list l;
    char err[512];
    *final = false;
    *epoch = 0;
    if (snap_list_load(job_dir, &l, err, sizeof err) != 0)
        return api_fail(e, 500, "internal_error", "reading the job's snapshots: %s", err);
    int rc = -1;
    const snap_item *it = NULL;
    char kept[256];
    kept_epochs(&l, kept, sizeof kept);
    switch (sel.kind) {
    case SNAP_EPOCH:
        if (!(it = snap_list_find(&l, sel.epoch))) {
            if (l.n)
                api_fail(e, 404, "snapshot_not_found", "there is no snapshot of epoch %d; the job keeps "
                         "epochs %s", sel.epoch, kept);
            else
                api_fail(e, 404, "snapshot_not_found", "there is no snapshot of epoch %d; the job has no "
                         "snapshots yet", sel.epoch);
            goto out;
        }
        break;
    case SNAP_BEST:
        if (!l.best) {
            if (l.n)
                api_fail(e, 409, "no_best_snapshot", "no snapshot of this job has a %s to choose the best "
                         "by (snapshots kept: epochs %s)", snap_metric_name(l.metric), kept);
            else
                api_fail(e, 409, "no_weights", "the job has no snapshots yet: the first comes at the end of "
                         "its first epoch");
            goto out;
        }
        it = snap_list_find(&l, l.best);
        break;
    case SNAP_FINAL: {
        char model[PATH_MAX];
        if (layout_file(model, sizeof model, job_dir, LAYOUT_MODEL) == 0 && file_exists(model)) {
            if (snprintf(path, pathlen, "%s", model) >= (int)pathlen) {
                api_fail(e, 500, "internal_error", "the job folder's path is too long");
                goto out;
            }
            *final = true;
            *epoch = l.final_epoch > 0 ? l.final_epoch : epochs > 0 ? epochs : job_epochs(job_dir);
            rc = 0;
            goto out;
        }
        if (!l.n) {
            api_fail(e, 409, "no_weights", "the job has no weights yet: the first snapshot comes at the end of "
                     "its first epoch");
            goto out;
        }
        it = &l.items[l.n - 1];
        break;
    }
    }
    if (item_path(job_dir, it, path, pathlen, e) != 0)
        goto out;
    if (!file_exists(path)) {
        api_fail(e, 404, "snapshot_not_found", "the snapshot of epoch %d is listed but its file is gone",
                 it->epoch);
        goto out;
    }
    *epoch = it->epoch;
    rc = 0;
out:
    snap_list_free(&l);
    return rc;
}
