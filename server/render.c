/* server/render.c: the API's JSON representations (contract in render.h). */
#include "server/render.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/jobcfg.h"      /* jobcfg_from_json: the stored config, typed */
#include "db/slurm_store.h"   /* store_slurm_get: a job's Slurm id, state, reason, nodes */

/* Adds s as a string, or null when s is NULL. Returns false when out of memory. */
static bool add_str(cJSON *o, const char *key, const char *s)
{
    cJSON *v = s ? cJSON_CreateString(s) : cJSON_CreateNull();
    return v && cJSON_AddItemToObject(o, key, v);
}

static bool add_num(cJSON *o, const char *key, double v)
{
    cJSON *n = isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull();
    return n && cJSON_AddItemToObject(o, key, n);
}

static bool add_item(cJSON *o, const char *key, cJSON *v)
{
    if (!v)
        return false;
    if (!cJSON_AddItemToObject(o, key, v)) {
        cJSON_Delete(v);
        return false;
    }
    return true;
}

/* classes, shape, counts, the import report and the source from the store's
 * record of a ready dataset (jobs/import_job.c; older rows hold header.json's
 * text). NULL or unreadable: [] / null / null and no report or source. */
static bool add_header_fields(cJSON *o, const char *info_json)
{
    cJSON *h = info_json ? cJSON_Parse(info_json) : NULL;
    bool ok = true;
    const cJSON *classes = cJSON_GetObjectItemCaseSensitive(h, "classes");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(h, "shape");
    const cJSON *counts = cJSON_GetObjectItemCaseSensitive(h, "counts");
    ok &= add_item(o, "classes", cJSON_IsArray(classes) ? cJSON_Duplicate(classes, 1)
                                                       : cJSON_CreateArray());
    ok &= add_item(o, "shape", cJSON_IsArray(shape) ? cJSON_Duplicate(shape, 1) : cJSON_CreateNull());
    if (cJSON_IsObject(counts)) {
        cJSON *c = cJSON_CreateObject();
        const cJSON *tr = cJSON_GetObjectItemCaseSensitive(counts, "train");
        const cJSON *va = cJSON_GetObjectItemCaseSensitive(counts, "val");
        const cJSON *te = cJSON_GetObjectItemCaseSensitive(counts, "test");
        ok &= c != NULL;
        if (c) {
            ok &= add_num(c, "train", cJSON_IsNumber(tr) ? tr->valuedouble : 0);
            ok &= add_num(c, "val", cJSON_IsNumber(va) ? va->valuedouble : 0);
            if (cJSON_IsNumber(te) && te->valuedouble > 0)      /* only with a test split */
                ok &= add_num(c, "test", te->valuedouble);
        }
        ok &= add_item(o, "counts", c);
    } else {
        ok &= add_item(o, "counts", cJSON_CreateNull());
    }
    /* how the images were made and stored, and the options asked for */
    static const char *const passed[] = { "mean", "resize", "encoding", "options" };
    for (size_t i = 0; ok && i < sizeof passed / sizeof passed[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(h, passed[i]);
        if (v) ok &= add_item(o, passed[i], cJSON_Duplicate(v, 1));
    }
    const cJSON *report = cJSON_GetObjectItemCaseSensitive(h, "report");
    if (cJSON_IsObject(report))                /* the import report (jobs/import.h) */
        ok &= add_item(o, "report", cJSON_Duplicate(report, 1));
    const cJSON *source = cJSON_GetObjectItemCaseSensitive(h, "source");
    if (cJSON_IsObject(source))                /* {"type", "path"}: what it was imported from */
        ok &= add_item(o, "source", cJSON_Duplicate(source, 1));
    cJSON_Delete(h);
    return ok;
}

cJSON *render_dataset(const store_dataset *d)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    bool ready = d->status && !strcmp(d->status, "ready");
    bool importing = d->status && !strcmp(d->status, "importing");
    double progress = ready ? 1.0 : d->progress < 0 ? 0 : d->progress > 1 ? 1 : d->progress;
    bool ok = add_num(o, "id", (double)d->id);
    ok &= add_str(o, "name", d->name);
    ok &= add_str(o, "status", d->status);
    ok &= add_num(o, "progress", progress);
    /* the import's estimate (jobs/import_job.c): null until it can be made, and once it ended */
    ok &= add_item(o, "eta_seconds", importing && d->eta_seconds > 0 && isfinite(d->eta_seconds)
                                         ? cJSON_CreateNumber(d->eta_seconds) : cJSON_CreateNull());
    ok &= add_str(o, "created_at", d->created_at);
    ok &= add_num(o, "owner_id", d->owner_id > 0 ? (double)d->owner_id : NAN);   /* null: nobody's */
    ok &= add_item(o, "shared", cJSON_CreateBool(d->shared));
    ok &= add_header_fields(o, ready ? d->info_json : NULL);
    ok &= add_str(o, "error", d->error);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* {"kind","count","gpus"} from the config's devices as jobcfg reads them. */
cJSON *render_job_devices(const cJSON *config)
{
    jobcfg c;
    api_error e;
    if (!config)
        return cJSON_CreateNull();
    if (jobcfg_from_json(config, JOBCFG_RESOLVED, &c, &e) != 0)
        return e.status >= 500 ? NULL : cJSON_CreateNull();    /* out of memory, or unreadable */
    const jobcfg_devices *d = &c.devices;
    bool listed = d->kind == BACKEND_CUDA && d->listed;
    cJSON *o = cJSON_CreateObject();
    bool ok = o && add_str(o, "kind", backend_kind_name(d->kind)) && add_num(o, "count", d->count) &&
              add_item(o, "gpus", listed ? cJSON_CreateIntArray(d->ids, d->count) : cJSON_CreateNull());
    jobcfg_free(&c);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* {"epoch","best_epoch","message"} when early stopping ended the job, else null. */
static cJSON *render_stopped_early(const store_job *j)
{
    if (j->stopped_epoch <= 0 || !j->stopped_message)
        return cJSON_CreateNull();
    cJSON *o = cJSON_CreateObject();
    bool ok = o && add_num(o, "epoch", j->stopped_epoch) &&
              add_item(o, "best_epoch", j->stopped_best_epoch > 0 ? cJSON_CreateNumber(j->stopped_best_epoch)
                                                                 : cJSON_CreateNull()) &&
              add_str(o, "message", j->stopped_message);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* The stored tags (a JSON array of strings) as an array; [] when unreadable. */
static cJSON *render_job_tags(const char *tags_json)
{
    cJSON *t = tags_json ? cJSON_Parse(tags_json) : NULL;
    if (cJSON_IsArray(t))
        return t;
    cJSON_Delete(t);
    return cJSON_CreateArray();
}

double render_job_progress(const store_job *j)
{
    if (j->status && !strcmp(j->status, "done"))
        return 1.0;
    if (j->steps <= 0)
        return 0.0;
    double p = (double)j->step / (double)j->steps;
    return p < 0 ? 0 : p > 1 ? 1 : p;
}

/* The devices a worker was given (the store's JSON array text) as an array;
 * null when it has none (not started since it was queued) or it is unreadable. */
static cJSON *render_assigned(const char *devices_json)
{
    cJSON *a = devices_json ? cJSON_Parse(devices_json) : NULL;
    if (cJSON_IsArray(a))
        return a;
    cJSON_Delete(a);
    return cJSON_CreateNull();
}

cJSON *render_slurm(store *st, int64_t job_id)
{
    store_slurm sl;
    if (store_slurm_get(st, job_id, &sl) != 0 || sl.slurm_job_id <= 0)
        return cJSON_CreateNull();
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    bool ok = add_num(o, "job_id", (double)sl.slurm_job_id);
    ok &= add_str(o, "state", sl.state[0] ? sl.state : NULL);
    ok &= add_str(o, "reason", sl.reason[0] ? sl.reason : NULL);
    ok &= add_str(o, "nodes", sl.nodes[0] ? sl.nodes : NULL);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

cJSON *render_job(store *st, const store_job *j)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    bool ok = add_num(o, "id", (double)j->id);
    ok &= add_num(o, "dataset_id", (double)j->dataset_id);
    ok &= add_str(o, "dataset_name", j->dataset_name);
    ok &= add_str(o, "name", j->name ? j->name : "");
    ok &= add_item(o, "tags", render_job_tags(j->tags_json));
    ok &= add_str(o, "notes", j->notes ? j->notes : "");
    ok &= add_str(o, "network", j->network);
    ok &= add_str(o, "precision", j->precision);
    ok &= add_str(o, "status", j->status);
    ok &= add_str(o, "created_at", j->created_at);
    ok &= add_num(o, "owner_id", j->owner_id > 0 ? (double)j->owner_id : NAN);
    ok &= add_num(o, "sweep_id", j->sweep_id > 0 ? (double)j->sweep_id : NAN);   /* null: no sweep */
    ok &= add_str(o, "started_at", j->started_at);
    ok &= add_str(o, "finished_at", j->finished_at);
    ok &= add_num(o, "epoch", j->epoch);
    ok &= add_num(o, "epochs", j->epochs);
    ok &= add_num(o, "step", (double)j->step);
    ok &= add_num(o, "steps", (double)j->steps);
    ok &= add_num(o, "progress", render_job_progress(j));
    ok &= add_num(o, "images_per_sec", j->images_per_sec);
    ok &= add_item(o, "eta_seconds", j->eta_seconds >= 0 && isfinite(j->eta_seconds)
                                         ? cJSON_CreateNumber(j->eta_seconds) : cJSON_CreateNull());
    ok &= add_str(o, "error", j->error);
    ok &= add_item(o, "stopped_early", render_stopped_early(j));
    cJSON *config = j->config_json ? cJSON_Parse(j->config_json) : NULL;
    ok &= add_item(o, "devices", render_job_devices(config));
    ok &= add_item(o, "assigned_devices", render_assigned(j->devices_json));
    ok &= add_num(o, "priority", j->priority);
    ok &= add_item(o, "slurm", render_slurm(st, j->id));
    ok &= add_item(o, "config", config ? config : cJSON_CreateNull());

    cJSON *metrics = cJSON_CreateObject();
    store_metric *ms = NULL;
    size_t n = 0;
    if (metrics && store_metric_latest(st, j->id, &ms, &n) == 0) {
        for (size_t i = 0; i < n; i++)
            ok &= add_num(metrics, ms[i].tag, ms[i].value);
    } else {
        ok = false;
    }
    free(ms);
    ok &= add_item(o, "metrics", metrics);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

cJSON *render_metric(const store_metric *m)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    bool ok = add_num(o, "step", (double)m->step);
    ok &= add_num(o, "epoch", m->epoch);
    ok &= add_str(o, "tag", m->tag);
    ok &= add_num(o, "value", m->value);
    ok &= add_num(o, "wall_time", m->wall_time);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

cJSON *render_status(const char *status, const char *error)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    if (!add_str(o, "status", status) || !add_str(o, "error", error)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* The stored result, whole or its headline; JSON null when there is none. */
static cJSON *eval_result(const char *text, bool full)
{
    cJSON *r = text ? cJSON_Parse(text) : NULL;
    if (!cJSON_IsObject(r)) {
        cJSON_Delete(r);
        return cJSON_CreateNull();
    }
    if (full)
        return r;
    static const char *const headline[] = { "count", "loss", "top1_accuracy", "top5_accuracy", "top_k" };
    cJSON *h = cJSON_CreateObject();
    for (size_t i = 0; h && i < sizeof headline / sizeof headline[0]; i++) {
        cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(r, headline[i]);
        if (v && !cJSON_AddItemToObject(h, headline[i], v)) {
            cJSON_Delete(v);
            cJSON_Delete(h);
            h = NULL;
        }
    }
    cJSON_Delete(r);
    return h;
}

cJSON *render_evaluation(const store_eval *e, bool full)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    bool ok = add_num(o, "id", (double)e->id) && add_num(o, "job_id", (double)e->job_id) &&
              add_num(o, "dataset_id", (double)e->dataset_id) && add_str(o, "split", e->split) &&
              add_str(o, "selection", e->selection) && add_num(o, "epoch", e->epoch > 0 ? e->epoch : NAN) &&
              add_str(o, "status", e->status) && add_num(o, "progress", e->progress) &&
              add_str(o, "error", e->error) && add_str(o, "created_at", e->created_at) &&
              add_str(o, "started_at", e->started_at) && add_str(o, "finished_at", e->finished_at) &&
              add_num(o, "owner_id", e->owner_id > 0 ? (double)e->owner_id : NAN) &&
              add_item(o, "assigned_devices", render_assigned(e->devices_json)) &&
              add_item(o, "result", eval_result(e->result_json, full));
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

cJSON *render_list(cJSON *items)
{
    if (!items)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToObject(o, "items", items)) {
        cJSON_Delete(o);
        cJSON_Delete(items);
        return NULL;
    }
    return o;
}
