/* jobs/import_job.c: a dataset import from its row in the store to ready or
 * failed (contract in import_job.h).
 *
 * Guarantees:
 * - A dataset this module inserts ends "ready" with its header, or "failed"
 *   with a reason and no folder, unless the process dies first (the server's
 *   start marks datasets left "importing" failed).
 * - The store's record of a ready dataset comes from the importer's typed
 *   header (ds_info), never from reading header.json back.
 * - import_job_start's thread calls hooks->checked exactly once and
 *   hooks->finished last; the archive is removed before finished.
 */
#include "jobs/import_job.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/layout.h"         /* layout_dataset_dir */
#include "engine/fileio.h"       /* fio_mkdir_p, fio_rm_rf */

#define PROGRESS_STEP 0.01       /* store writes: at most one per 1% ... */
#define PROGRESS_INTERVAL 0.25   /* ... and per 0.25 s */
#define PROGRESS_BEFORE_READY 0.99   /* the last 1% is the store's "ready" */

int import_job_begin(import_job *j, store *st, const char *data_dir, const char *name, api_error *e)
{
    memset(j, 0, sizeof *j);
    j->st = st;
    j->id = -1;
    char err[256] = "";
    if (store_dataset_insert(st, name, &j->id, err, sizeof err) != 0) {
        fprintf(stderr, "kiln: dataset \"%s\": could not insert it: %s\n", name, err);
        return api_fail(e, 500, "store_error",
                        "the database failed while creating the dataset; see the server log");
    }
    bool fits = layout_dataset_dir(j->dir, sizeof j->dir, data_dir, j->id) == 0;
    if (fits)
        fio_rm_rf(j->dir);              /* a leftover of an older data directory */
    if (!fits || fio_mkdir_p(j->dir) != 0) {
        api_fail(e, 500, "storage_error", "cannot create the dataset folder: %s",
                 fits ? strerror(errno) : "the data directory's path is too long");
        store_dataset_finish(st, j->id, "failed", NULL, e->message);
        return -1;
    }
    return 0;
}

/* ---- running the importer --------------------------------------------------- */

typedef struct run_ctx {
    import_job *job;
    import_progress_fn observe;
    void *arg;
} run_ctx;

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void on_progress(void *arg, double fraction)
{
    run_ctx *c = arg;
    import_job *j = c->job;
    if (c->observe)
        c->observe(c->arg, fraction);
    double now = now_seconds();
    if (fraction < 1.0 &&
        (fraction - j->last_fraction < PROGRESS_STEP || now - j->last_time < PROGRESS_INTERVAL))
        return;
    j->last_fraction = fraction;
    j->last_time = now;
    store_dataset_set_progress(j->st, j->id, fraction * PROGRESS_BEFORE_READY);
}

/* The import report as JSON (GET /api/v1/datasets/{id}'s "report"). */
static cJSON *report_json(const import_report *r, const ds_info *info)
{
    cJSON *o = cJSON_CreateObject(), *problems = NULL, *per = NULL;
    bool ok = o && cJSON_AddNumberToObject(o, "images", (double)r->images) &&
              cJSON_AddNumberToObject(o, "unreadable", (double)r->unreadable) &&
              cJSON_AddNumberToObject(o, "skipped", (double)r->skipped) &&
              cJSON_AddNumberToObject(o, "outside_classes", (double)r->outside) &&
              (!r->shape_note[0] || cJSON_AddStringToObject(o, "shape_chosen", r->shape_note)) &&
              (problems = cJSON_AddArrayToObject(o, "problems")) &&
              (per = cJSON_AddObjectToObject(o, "per_class"));
    for (int i = 0; ok && i < r->nproblems; i++) {
        cJSON *p = cJSON_CreateObject();
        ok = p && cJSON_AddItemToArray(problems, p) &&
             cJSON_AddStringToObject(p, "what", r->problems[i].what) &&
             cJSON_AddStringToObject(p, "path", r->problems[i].path) &&
             cJSON_AddStringToObject(p, "why", r->problems[i].why);
    }
    static const char *const splits[3] = { "train", "val", "test" };
    for (int s = 0; ok && s < 3 && r->per_class[s] && r->nclasses == info->nclasses; s++) {
        cJSON *byclass = cJSON_AddObjectToObject(per, splits[s]);
        for (int k = 0; ok && byclass && k < r->nclasses; k++)
            ok = cJSON_AddNumberToObject(byclass, info->classes[k], (double)r->per_class[s][k]) != NULL;
        ok = ok && byclass;
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* The store's record of a ready dataset (store_dataset.info_json): the
 * header's classes, shape, counts and mean, and the import report when there
 * is one. Returns a string the caller frees, or NULL when out of memory. */
static char *info_json(const ds_info *info, const import_report *r)
{
    cJSON *root = ds_info_to_json(info);           /* what header.json holds */
    cJSON *rj = root && r ? report_json(r, info) : NULL;
    bool ok = root && (!r || (rj && cJSON_AddItemToObject(root, "report", rj)));
    if (!ok && rj && root)
        cJSON_Delete(rj);
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
}

/* Runs the importer that src names into dir; *info as import_archive's. */
static int run_importer(const import_source *src, const char *dir, run_ctx *c, ds_info *info,
                        import_report *rep, char *err, size_t errlen)
{
    switch (src->kind) {
    case IMPORT_ARCHIVE:
        return import_archive_reported(src->path, dir, &src->opts, on_progress, c, info, rep, err,
                                       errlen);
    case IMPORT_MNIST_JSON:
        return import_mnist_json(src->path, dir, on_progress, c, info, err, errlen);
    }
    memset(info, 0, sizeof *info);
    return set_err(err, errlen, "unknown import source %d", (int)src->kind);
}

int import_job_run(import_job *j, const import_source *src, import_progress_fn observe, void *arg,
                   char *err, size_t errlen)
{
    run_ctx c = { j, observe, arg };
    ds_info info;
    import_report rep;
    memset(&rep, 0, sizeof rep);
    int rc = run_importer(src, j->dir, &c, &info, &rep, err, errlen);
    if (rc == 0) {
        char *json = info_json(&info, src->kind == IMPORT_ARCHIVE ? &rep : NULL);
        if (!json)
            rc = set_err(err, errlen, "out of memory recording the dataset");
        else if (store_dataset_finish(j->st, j->id, "ready", json, NULL) != 0)
            rc = set_err(err, errlen, "recording the dataset as ready failed");
        free(json);
    }
    ds_info_free(&info);
    import_report_free(&rep);
    if (rc != 0) {
        store_dataset_finish(j->st, j->id, "failed", NULL, err && err[0] ? err : "the import failed");
        fio_rm_rf(j->dir);
    }
    return rc;
}

/* ---- in the background (uploads) -------------------------------------------- */

typedef struct import_task {
    store *st;
    char *data_dir, *name, *path;
    import_opts opts;
    import_hooks hooks;
} import_task;

static void task_free(import_task *t)
{
    if (!t)
        return;
    free(t->data_dir);
    free(t->name);
    free(t->path);
    free(t);
}

static void *import_thread(void *arg)
{
    import_task *t = arg;
    import_job job;
    api_error e;
    memset(&e, 0, sizeof e);
    if (import_probe(t->path, &e) != 0 || import_job_begin(&job, t->st, t->data_dir, t->name, &e) != 0) {
        t->hooks.checked(t->hooks.arg, -1, &e);
        goto done;
    }
    t->hooks.checked(t->hooks.arg, job.id, NULL);

    const import_source src = { IMPORT_ARCHIVE, t->path, t->opts };
    char err[1024] = "";
    if (t->hooks.serial)
        pthread_mutex_lock(t->hooks.serial);
    int rc = import_job_run(&job, &src, NULL, NULL, err, sizeof err);
    if (t->hooks.serial)
        pthread_mutex_unlock(t->hooks.serial);
    if (rc == 0)
        fprintf(stderr, "kiln: dataset %lld (%s) ready\n", (long long)job.id, t->name);
    else
        fprintf(stderr, "kiln: dataset %lld (%s) failed: %s\n", (long long)job.id, t->name, err);
done:
    unlink(t->path);
    import_hooks h = t->hooks;
    task_free(t);
    h.finished(h.arg);
    return NULL;
}

int import_job_start(store *st, const char *data_dir, const char *name, const char *archive_path,
                     const import_opts *opts, const import_hooks *hooks, char *err, size_t errlen)
{
    static const import_opts defaults = IMPORT_OPTS_DEFAULT;
    import_task *t = calloc(1, sizeof *t);
    if (!t || !(t->data_dir = strdup(data_dir)) || !(t->name = strdup(name)) ||
        !(t->path = strdup(archive_path))) {
        task_free(t);
        return set_err(err, errlen, "out of memory");
    }
    t->st = st;
    t->opts = opts ? *opts : defaults;
    t->hooks = *hooks;

    pthread_attr_t at;
    pthread_t th;
    int rc = pthread_attr_init(&at);
    if (rc == 0) {
        rc = pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (rc == 0)
            rc = pthread_create(&th, &at, import_thread, t);
        pthread_attr_destroy(&at);
    }
    if (rc != 0) {
        task_free(t);
        return set_err(err, errlen, "could not start the import: %s", strerror(rc));
    }
    return 0;
}
