/* server/api.c: the route table and the REST handlers for info, datasets and jobs.
 *
 * Handlers run on an HTTP thread once the request's body is complete. They
 * read and write the store (short statements, WAL), never wait on a worker,
 * and answer with the representations of render.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/layout.h"           /* layout_dataset_dir, layout_job_dir */
#include "engine/checkpoint.h"     /* ckpt_latest: a job's resume point */
#include "engine/fileio.h"         /* fio_rm_rf */
#include "engine/net.h"            /* engine_backends, engine_devices */
#include "engine/summary.h"        /* summary_build, summary_to_json */
#include "jobs/import.h"           /* import_schema: the upload's options */
#include "jobs/import_job.h"       /* import_job_cancel */
#include "jobs/dispatch.h"         /* dispatch_name: GET /api/v1/info */
#include "jobs/jobcfg.h"           /* jobcfg_read_*, jobcfg_schema: the job fields' rules */
#include "jobs/joblock.h"          /* joblock_take: a job folder's lock */
#include "jobs/jobspec.h"          /* jobspec_create */
#include "jobs/memfit.h"           /* memfit_usable: what a job may plan on */
#include "server/auth.h"           /* auth_own */
#include "server/auth_api.h"       /* the session, token and user routes */
#include "server/dataset_view.h"   /* dsview_samples, dsview_image, dsview_mean */
#include "server/evaluation.h"     /* the evaluation routes; evaluation_before_job_delete */
#include "server/hardware.h"       /* hw_json: GET /api/v1/hardware */
#include "server/cluster.h"        /* cluster_json: its "cluster" object */
#include "server/prom.h"           /* prom_handle: GET /metrics */
#include "server/http.h"
#include "server/infer.h"          /* infer_handle, infer_upload */
#include "server/job_clone.h"      /* job_clone_request, job_request_handle */
#include "server/jobs_list.h"      /* jobs_list_handle, job_edit_parse, the list's schema */
#include "server/lookup.h"         /* lookup_job, lookup_dataset, lookup_not_found */
#include "server/metric_select.h"  /* metric_select: tag= and max_points= of GET .../metrics */
#include "server/model.h"          /* model_handle */
#include "server/snapshots_view.h" /* snapshots_handle */
#include "server/openapi.h"        /* kiln_openapi_json */
#include "server/queue.h"          /* queue_handle */
#include "server/render.h"
#include "server/sse.h"            /* sse_handle */
#include "server/sweeps.h"         /* the sweep routes */
#include "server/upload.h"         /* upload_finish */

#define MAX_DEVICES 64

/* Appends item to the array items and returns items; when item is NULL or
 * cannot be added, deletes both and returns NULL (then http_json answers 500).
 * items == NULL only deletes item. */
static cJSON *list_add(cJSON *items, cJSON *item)
{
    if (items && item && cJSON_AddItemToArray(items, item))
        return items;
    cJSON_Delete(item);
    cJSON_Delete(items);
    return NULL;
}

/* ---- service ------------------------------------------------------------------ */

static int count_status(store *st, const char *status, size_t *n)
{
    int64_t *ids = NULL;
    int rc = store_job_ids_with_status(st, status, &ids, n);
    free(ids);
    return rc;
}

/* "backends_available": the compiled-in backends that can run here: the CPU
 * always, another when at least one of its devices was found (the header's
 * backend chip says "CUDA built, no GPU found" from the difference). */
static bool add_available_backends(cJSON *o, const engine_device *devs, int ndev)
{
    cJSON *a = cJSON_AddArrayToObject(o, "backends_available");
    bool ok = a != NULL;
    for (const char *const *b = engine_backends(); ok && b && *b; b++) {
        bool found = !strcmp(*b, "cpu");
        for (int i = 0; !found && i < ndev; i++)
            found = !strcmp(devs[i].kind, *b);
        if (found)
            ok = cJSON_AddItemToArray(a, cJSON_CreateString(*b));
    }
    return ok;
}

static int h_info(request *r)
{
    size_t queued = 0, running = 0;
    if (count_status(r->srv->st, "queued", &queued) != 0 || count_status(r->srv->st, "running", &running) != 0)
        return http_store_error(r, "counting jobs");
    engine_device devs[MAX_DEVICES];
    int ndev = engine_devices(devs, MAX_DEVICES);
    if (ndev > MAX_DEVICES)
        ndev = MAX_DEVICES;

    cJSON *o = cJSON_CreateObject();
    bool ok = o && cJSON_AddStringToObject(o, "version", KILN_VERSION) &&
              cJSON_AddStringToObject(o, "dispatcher", dispatch_name(r->srv->dispatcher));
    cJSON *backends = ok ? cJSON_AddArrayToObject(o, "backends") : NULL;
    cJSON *devices = ok ? cJSON_AddArrayToObject(o, "devices") : NULL;
    cJSON *queue = ok ? cJSON_AddObjectToObject(o, "queue") : NULL;
    ok = ok && backends && devices && queue;
    for (const char *const *b = engine_backends(); ok && b && *b; b++)
        ok = cJSON_AddItemToArray(backends, cJSON_CreateString(*b));
    for (int i = 0; ok && i < ndev; i++) {
        cJSON *d = cJSON_CreateObject();
        ok = d && cJSON_AddItemToArray(devices, d) && cJSON_AddStringToObject(d, "kind", devs[i].kind) &&
             cJSON_AddNumberToObject(d, "index", devs[i].index) &&
             cJSON_AddStringToObject(d, "name", devs[i].name) &&
             cJSON_AddNumberToObject(d, "memory_bytes", (double)devs[i].memory_bytes) &&
             (devs[i].free_bytes ? cJSON_AddNumberToObject(d, "memory_free_bytes",
                                                          (double)devs[i].free_bytes)
                                 : cJSON_AddNullToObject(d, "memory_free_bytes"));
        if (ok && !strcmp(devs[i].kind, "cuda")) {
            char cc[16];
            snprintf(cc, sizeof cc, "%d.%d", devs[i].cc_major, devs[i].cc_minor);
            ok = cJSON_AddStringToObject(d, "compute_capability", cc) != NULL;
        }
    }
    ok = ok && add_available_backends(o, devs, ndev);
    ok = ok && cJSON_AddNumberToObject(queue, "queued", (double)queued) &&
         cJSON_AddNumberToObject(queue, "running", (double)running);
    if (!ok) {
        cJSON_Delete(o);
        o = NULL;
    }
    return http_json(r, MHD_HTTP_OK, o);
}

/* GET /api/v1/hardware[?since=T]: the sampler's current sample and its
 * history (after Unix time T: a poller asks only for what is new), and the
 * Slurm cluster's nodes as last sampled (null without a cluster). */
static int h_hardware(request *r)
{
    const char *since = http_arg(r, "since");
    double t = 0;
    if (since) {
        char *end = NULL;
        errno = 0;
        t = strtod(since, &end);
        if (!*since || *end || errno || !(t >= 0 && t < 1e12))
            return http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_parameter",
                              "since must be a time in Unix seconds (a number from 0), not \"%.40s\"", since);
    }
    if (!r->srv->hw)
        return http_error(r, MHD_HTTP_SERVICE_UNAVAILABLE, "unavailable", "the hardware sampler is not running");
    cJSON *o = hw_json(r->srv->hw, t), *c = o ? cluster_json(r->srv->cluster) : NULL;
    if (o && (!c || !cJSON_AddItemToObject(o, "cluster", c))) {
        cJSON_Delete(c);
        cJSON_Delete(o);
        o = NULL;
    }
    return http_json(r, MHD_HTTP_OK, o);
}

static int h_limits(request *r)
{
    return http_json(r, MHD_HTTP_OK, serve_limits_json(&r->srv->limits));
}

static int h_healthz(request *r)
{
    cJSON *o = cJSON_CreateObject();
    if (o && !cJSON_AddStringToObject(o, "status", "ok")) {
        cJSON_Delete(o);
        o = NULL;
    }
    return http_json(r, MHD_HTTP_OK, o);
}

/* Behind --base-path the document's server is the prefix (servers[0].url). */
static int openapi_under_base(request *r)
{
    cJSON *doc = cJSON_ParseWithLength(kiln_openapi_json, kiln_openapi_json_len);
    cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "servers"), 0);
    if (!first || !cJSON_ReplaceItemInObjectCaseSensitive(first, "url", cJSON_CreateString(r->srv->base_path))) {
        cJSON_Delete(doc);
        return http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", "the OpenAPI document has no server");
    }
    return http_json(r, MHD_HTTP_OK, doc);
}

static int h_openapi(request *r)
{
    if (r->srv->base_path[0])
        return openapi_under_base(r);
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        kiln_openapi_json_len, (void *)kiln_openapi_json, MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    return http_queue(r, MHD_HTTP_OK, resp);
}

static int h_networks(request *r)
{
    cJSON *items = cJSON_CreateArray();
    for (const char *const *n = net_builtin_names(); items && n && *n; n++) {
        const char *text = net_builtin(*n);
        cJSON *spec = text ? cJSON_Parse(text) : NULL;
        cJSON *o = cJSON_CreateObject();
        if (!spec || !o || !cJSON_AddStringToObject(o, "name", *n) ||
            !cJSON_AddItemToObject(o, "spec", spec)) {
            cJSON_Delete(spec);              /* not yet owned by o */
            cJSON_Delete(o);
            cJSON_Delete(items);
            items = NULL;
            break;
        }
        items = list_add(items, o);
    }
    return http_json(r, MHD_HTTP_OK, render_list(items));
}

/* POST /api/v1/networks/summary: {"network": name|spec, "input": [C,H,W],
 * "classes": N, "batch_size": N, "solver": "sgd"|"adam"|"adamw" or
 * {"type", "momentum"}, "precision": "fp32"|"amp-bf16"|"amp-fp16"}.
 * batch_size, precision and the solver's type and momentum are a job's
 * fields, read by jobs/jobcfg.c's readers with its limits and defaults.
 * Otherwise: a built-in's input and classes (else the spec's "input" and 10
 * classes). */
typedef struct summary_req {
    const cJSON *network;
    cJSON *spec;                     /* owned */
    net_shape in;
    int classes, batch;
    solver_type solver;
    double momentum;
    precision_mode prec;
} summary_req;

#define SUMMARY_DIM_MAX 1000000

/* The solver, a name or {"type", "momentum"}; 0, or -1 with e filled. */
static int summary_solver(const cJSON *f, summary_req *q, api_error *e)
{
    int type;
    if (cJSON_IsObject(f)) {
        const cJSON *k;
        cJSON_ArrayForEach(k, f)
            if (strcmp(k->string, "type") && strcmp(k->string, "momentum"))
                return api_fail(e, 400, "unknown_field", "unknown field \"solver.%.64s\": the "
                                "summary's solver takes type and momentum", k->string);
        if (jobcfg_read_choice(f, "solver.type", &type, e) != 0 ||
            jobcfg_read_num(f, "solver.momentum", &q->momentum, e) != 0)
            return -1;
        q->solver = (solver_type)type;
        return 0;
    }
    cJSON *wrap = cJSON_IsString(f) ? cJSON_CreateObject() : NULL;
    int rc = wrap && cJSON_AddItemReferenceToObject(wrap, "type", (cJSON *)f) ?
             jobcfg_read_choice(wrap, "solver.type", &type, e) : -1;
    cJSON_Delete(wrap);
    if (rc != 0) {
        char names[96];
        settings_join(solver_type_names(), names, sizeof names);
        return api_fail(e, 400, "invalid_field", "solver must be %s, or {\"type\": one of those, "
                        "\"momentum\": a number in [0, 1)}", names);
    }
    q->solver = (solver_type)type;
    return 0;
}

/* Fills *q from body; returns 0, or -1 with e filled. */
static int summary_request(const cJSON *body, summary_req *q, api_error *e)
{
    static const char *const fields[] = { "network", "input", "classes", "batch_size", "solver",
                                          "precision", NULL };
    const cJSON *f;
    cJSON_ArrayForEach(f, body) {
        bool known = false;
        for (int i = 0; fields[i]; i++)
            known = known || !strcmp(f->string, fields[i]);
        if (!known)
            return api_fail(e, 400, "unknown_field", "unknown field \"%.64s\": the summary takes "
                            "network, input, classes, batch_size, solver (type, momentum) and "
                            "precision", f->string);
    }
    q->network = cJSON_GetObjectItemCaseSensitive(body, "network");
    if (!q->network)
        return api_fail(e, 400, "missing_field", "network is required: a built-in name or a spec");
    if (cJSON_IsString(q->network)) {
        const char *text = net_builtin(q->network->valuestring);
        if (!text)
            return api_fail(e, 422, "unknown_network", "no built-in network \"%.64s\"",
                            q->network->valuestring);
        summary_builtin_defaults(q->network->valuestring, &q->in, &q->classes);
        if (!(q->spec = cJSON_Parse(text)))
            return api_fail(e, 500, "internal_error", "out of memory");
    } else if (!cJSON_IsObject(q->network)) {
        return api_fail(e, 400, "invalid_field", "network must be a built-in network's name or a "
                        "spec object");
    }
    if ((f = cJSON_GetObjectItemCaseSensitive(body, "input"))) {
        int dims[3], k = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, f) {
            if (k == 3 || !cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble > SUMMARY_DIM_MAX ||
                x->valuedouble != (int)x->valuedouble)
                break;
            dims[k++] = (int)x->valuedouble;
        }
        if (!cJSON_IsArray(f) || k != 3 || cJSON_GetArraySize(f) != 3)
            return api_fail(e, 400, "invalid_field", "input must be [C, H, W], three integers from "
                            "1 to %d", SUMMARY_DIM_MAX);
        q->in = (net_shape){ dims[0], dims[1], dims[2] };
    }
    if ((f = cJSON_GetObjectItemCaseSensitive(body, "classes"))) {
        if (!cJSON_IsNumber(f) || f->valuedouble < 1 || f->valuedouble > SUMMARY_DIM_MAX ||
            f->valuedouble != (int)f->valuedouble)
            return api_fail(e, 400, "invalid_field", "classes must be an integer from 1 to %d",
                            SUMMARY_DIM_MAX);
        q->classes = (int)f->valuedouble;
    }
    /* Unlike a job request, the summary has always refused null values. */
    static const char *const shared[] = { "batch_size", "precision" };
    for (size_t i = 0; i < sizeof shared / sizeof shared[0]; i++)
        if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(body, shared[i])))
            return jobcfg_refuse(shared[i], e);
    int prec;
    if (jobcfg_read_int(body, "batch_size", &q->batch, e) != 0 ||
        jobcfg_read_choice(body, "precision", &prec, e) != 0 ||
        jobcfg_read_num(NULL, "solver.momentum", &q->momentum, e) != 0)
        return -1;
    q->prec = (precision_mode)prec;
    q->solver = SOLVER_SGD;
    if ((f = cJSON_GetObjectItemCaseSensitive(body, "solver")))
        return summary_solver(f, q, e);
    return 0;
}

/* Adds to each device of a summary's training_memory what is available on it
 * now (jobs/memfit.h: MemAvailable or the GPU's free memory, less the
 * margin): "memory_available_bytes" (null when not known), "fits_available"
 * and "max_batch_available", the figures a job is checked against. Returns
 * o, or NULL (o deleted) when out of memory. */
static cJSON *summary_available(cJSON *o, const summary *s)
{
    cJSON *tm = cJSON_GetObjectItemCaseSensitive(o, "training_memory");
    cJSON *devs = cJSON_GetObjectItemCaseSensitive(tm, "devices");
    engine_device d[MAX_DEVICES];
    int n = engine_devices(d, MAX_DEVICES);
    int i = 0;
    cJSON *dev;
    cJSON_ArrayForEach(dev, devs) {
        if (i >= n || i >= s->ndevices)
            break;
        int64_t usable = d[i].free_bytes ? memfit_usable(d[i].free_bytes) : 0;
        summary_mem m = { .fixed = s->fixed_bytes, .per_image = s->image_bytes };
        bool ok = usable > 0
            ? cJSON_AddNumberToObject(dev, "memory_available_bytes", (double)usable) &&
              cJSON_AddBoolToObject(dev, "fits_available", s->train_bytes <= usable) &&
              cJSON_AddNumberToObject(dev, "max_batch_available", (double)summary_max_batch(&m, usable))
            : cJSON_AddNullToObject(dev, "memory_available_bytes") &&
              cJSON_AddNullToObject(dev, "fits_available") &&
              cJSON_AddNullToObject(dev, "max_batch_available");
        if (!ok) {
            cJSON_Delete(o);
            return NULL;
        }
        i++;
    }
    return o;
}

static int h_network_summary(request *r)
{
    enum MHD_Result answered;
    cJSON *doc = http_body_json(r, &answered);
    if (!doc)
        return answered;
    summary_req q = { .classes = 10 };
    summary s = { 0 };
    api_error e;
    char err[512];
    if (summary_request(doc, &q, &e) < 0)
        answered = http_error(r, (unsigned)e.status, e.code, "%s", e.message);
    else if (summary_build(q.spec ? q.spec : q.network, q.in, q.classes, q.batch, q.solver,
                           q.momentum > 0, q.prec, &s, err, sizeof err) < 0)
        answered = http_error(r, 422, "invalid_network", "%s", err);
    else
        answered = http_json(r, MHD_HTTP_OK, summary_available(summary_to_json(&s), &s));
    summary_free(&s);
    cJSON_Delete(q.spec);
    cJSON_Delete(doc);
    return answered;
}

/* GET /api/v1/schema: the limits and defaults of every request field, from
 * the tables the server validates with: a job's (jobs/jobcfg.c) and a
 * dataset upload's options (jobs/import.c). */
static int h_schema(request *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *job = jobcfg_schema(), *ds = import_schema();
    bool ok = o && job && cJSON_AddItemToObject(o, "job", job);
    if (ok)
        job = NULL;
    ok = ok && ds && cJSON_AddItemToObject(o, "dataset", ds);
    if (ok)
        ds = NULL;
    cJSON *list = jobs_list_schema(), *edit = job_edit_schema();
    ok = ok && list && cJSON_AddItemToObject(o, "jobs_list", list);
    if (ok)
        list = NULL;
    ok = ok && edit && cJSON_AddItemToObject(o, "job_edit", edit);
    if (ok)
        edit = NULL;
    if (!ok) {
        cJSON_Delete(list);
        cJSON_Delete(edit);
        cJSON_Delete(job);
        cJSON_Delete(ds);
        cJSON_Delete(o);
        return http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", "out of memory");
    }
    return http_json(r, MHD_HTTP_OK, o);
}

/* ---- datasets ------------------------------------------------------------------- */

static int h_datasets_list(request *r)
{
    store_dataset *list = NULL;
    size_t n = 0;
    if (store_dataset_list_for(r->srv->st, lookup_owner_filter(r), &list, &n) != 0)
        return http_store_error(r, "listing datasets");
    cJSON *items = cJSON_CreateArray();
    for (size_t i = 0; items && i < n; i++)
        items = list_add(items, render_dataset(&list[i]));
    store_dataset_list_free(list, n);
    return http_json(r, MHD_HTTP_OK, render_list(items));
}

static int h_dataset_get(request *r)
{
    store_dataset d;
    enum MHD_Result answered;
    if (!lookup_dataset(r, r->id, &d, &answered))
        return answered;
    cJSON *o = render_dataset(&d);
    store_dataset_clear(&d);
    return http_json(r, MHD_HTTP_OK, o);
}

/* DELETE of an importing dataset: cancels its import (jobs/import_job.h),
 * which removes the row and the folder once the importer has stopped: 202
 * with the dataset, its status "cancelling" (204 when it is gone already).
 * false when no import of it runs
 * in this server and it is not importing any more (the caller deletes it as
 * any other); an import of another process (kiln import) is 409. */
static bool cancel_import(request *r, enum MHD_Result *answered)
{
    store_dataset d;
    if (import_job_cancel(r->id) == 0) {
        int rc = store_dataset_get(r->srv->st, r->id, &d);
        if (rc == STORE_NOT_FOUND) {           /* already stopped and removed */
            struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
            *answered = http_queue(r, MHD_HTTP_NO_CONTENT, resp);
            return true;
        }
        if (rc != 0) {
            *answered = http_store_error(r, "reading the dataset");
            return true;
        }
        cJSON *o = render_dataset(&d);
        store_dataset_clear(&d);
        if (o)
            cJSON_ReplaceItemInObjectCaseSensitive(o, "status", cJSON_CreateString("cancelling"));
        *answered = http_json(r, MHD_HTTP_ACCEPTED, o);
        return true;
    }
    if (!lookup_dataset(r, r->id, &d, answered))
        return true;
    bool importing = !strcmp(d.status, "importing");
    store_dataset_clear(&d);
    if (importing)
        *answered = http_error(r, MHD_HTTP_CONFLICT, "dataset_importing",
                               "dataset %lld is being imported by another process (kiln import); delete "
                               "it once it is ready or failed", (long long)r->id);
    return importing;
}

static int h_dataset_delete(request *r)
{
    server *srv = r->srv;
    store_dataset d;
    enum MHD_Result answered;
    if (!lookup_dataset_change(r, r->id, &d, &answered))
        return answered;
    bool importing = !strcmp(d.status, "importing");
    store_dataset_clear(&d);
    if (importing && cancel_import(r, &answered))
        return answered;
    store_job *jobs = NULL;
    size_t n = 0, users = 0;
    if (store_job_list(srv->st, &jobs, &n) != 0)
        return http_store_error(r, "listing jobs");
    for (size_t i = 0; i < n; i++)
        users += jobs[i].dataset_id == r->id;
    store_job_list_free(jobs, n);
    size_t evals = 0;
    if (store_eval_count_by_dataset(srv->st, r->id, &evals) != 0)
        return http_store_error(r, "counting evaluations");
    if (users || evals)
        return http_error(r, MHD_HTTP_CONFLICT, "dataset_in_use",
                          "dataset %lld is used by %zu job(s) and %zu evaluation(s); delete those first",
                          (long long)r->id, users, evals);
    int rc = store_dataset_delete(srv->st, r->id);
    if (rc == STORE_NOT_FOUND)
        return lookup_not_found(r, "dataset", r->id);
    if (rc != 0)
        return http_store_error(r, "deleting the dataset");
    char dir[PATH_MAX + 64];
    if (layout_dataset_dir(dir, sizeof dir, srv->data_dir, r->id) == 0 && fio_rm_rf(dir) != 0)
        fprintf(stderr, "kiln: dataset %lld: could not remove %s: %s\n", (long long)r->id, dir,
                strerror(errno));
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    return http_queue(r, MHD_HTTP_NO_CONTENT, resp);
}

/* PATCH /api/v1/datasets/:id {"shared": true|false}: shares a dataset
 * read-only with every user, or stops (its owner or an admin). */
static int h_dataset_patch(request *r)
{
    enum MHD_Result answered;
    cJSON *doc = http_body_json(r, &answered);
    if (!doc)
        return answered;
    const cJSON *f, *shared = NULL;
    cJSON_ArrayForEach(f, doc) {
        if (strcmp(f->string, "shared")) {
            answered = http_error(r, MHD_HTTP_BAD_REQUEST, "unknown_field",
                                  "unknown field \"%.64s\": a dataset's PATCH takes shared", f->string);
            cJSON_Delete(doc);
            return answered;
        }
        shared = f;
    }
    bool on = cJSON_IsTrue(shared);
    bool valid = cJSON_IsBool(shared);
    cJSON_Delete(doc);
    if (!valid)
        return http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_field", "shared must be true or false");
    store_dataset d;
    if (!lookup_dataset_change(r, r->id, &d, &answered))
        return answered;
    store_dataset_clear(&d);
    int rc = store_dataset_set_shared(r->srv->st, r->id, on);
    if (rc == STORE_NOT_FOUND)
        return lookup_not_found(r, "dataset", r->id);
    if (rc != 0)
        return http_store_error(r, "sharing the dataset");
    if (!lookup_dataset(r, r->id, &d, &answered))
        return answered;
    cJSON *o = render_dataset(&d);
    store_dataset_clear(&d);
    return http_json(r, MHD_HTTP_OK, o);
}

/* ---- jobs ------------------------------------------------------------------------ */

/* The latest checkpoint of job id's folder: 1 found (its step in *step), 0
 * none, -1 unreadable (err) or a path too long. */
static int job_checkpoint(const server *srv, int64_t id, int64_t *step, char *err, size_t errlen)
{
    char dir[PATH_MAX], ckdir[PATH_MAX + 16], ckpath[PATH_MAX + 64];
    ckpt_info ck;
    if (layout_job_dir(dir, sizeof dir, srv->data_dir, id) != 0 ||
        layout_file(ckdir, sizeof ckdir, dir, LAYOUT_CHECKPOINTS) != 0)
        return set_err(err, errlen, "the data directory's path is too long");
    int found = ckpt_latest(ckdir, ckpath, sizeof ckpath, &ck, err, errlen);
    if (found == 1)
        *step = ck.step;
    return found;
}

static bool resumable_status(const char *status)
{
    return !strcmp(status, "failed") || !strcmp(status, "cancelled");
}

/* One job's representation: render_job's, plus "resumable" (a failed or
 * cancelled job with a checkpoint: POST .../resume would take it). */
static int answer_job(request *r, unsigned status, int64_t id)
{
    store_job j;
    enum MHD_Result answered;
    if (!lookup_job(r, id, &j, &answered))
        return answered;
    cJSON *o = render_job(r->srv->st, &j);
    int64_t step = 0;
    bool resumable = resumable_status(j.status) && job_checkpoint(r->srv, id, &step, NULL, 0) == 1;
    store_job_clear(&j);
    if (o && !cJSON_AddBoolToObject(o, "resumable", resumable)) {
        cJSON_Delete(o);
        o = NULL;
    }
    return http_json(r, status, o);
}

/* PATCH /api/v1/jobs/:id {"name"?, "tags"?, "notes"?, "priority"?}
 * (server/jobs_list.h): the owner or an admin edits; answers the job. A new
 * priority goes first, and only while the job is queued (409 job_not_queued,
 * nothing changed); the scheduler then looks at the queue again. */
static int h_job_patch(request *r)
{
    enum MHD_Result answered;
    cJSON *doc = http_body_json(r, &answered);
    if (!doc)
        return answered;
    job_edit ed;
    api_error e;
    int rc = job_edit_parse(doc, &ed, &e);
    cJSON_Delete(doc);
    if (rc != 0)
        return http_api_error(r, &e, "the job's PATCH is not valid");
    if (!lookup_job(r, r->id, NULL, &answered)) {
        job_edit_free(&ed);
        return answered;
    }
    rc = ed.has_priority ? store_job_set_priority(r->srv->st, r->id, ed.priority) : 0;
    if (rc == STORE_NOT_FOUND) {
        job_edit_free(&ed);
        return http_error(r, 409, "job_not_queued", "job %lld is no longer queued: its priority "
                          "changes only while it waits", (long long)r->id);
    }
    if (ed.has_priority && rc == 0)
        sched_wake(r->srv->sched);
    if (rc == 0)
        rc = ed.name || ed.tags_json || ed.notes ? store_job_set_meta(r->srv->st, r->id, ed.name, ed.tags_json, ed.notes)
                                                 : 0;
    job_edit_free(&ed);
    if (rc == STORE_NOT_FOUND)
        return lookup_not_found(r, "job", r->id);
    if (rc != 0)
        return http_store_error(r, "editing the job");
    return answer_job(r, MHD_HTTP_OK, r->id);
}

/* A new job from the request doc (POST /api/v1/jobs, or a clone's), owned by
 * the caller: 201 with the job, or jobspec_create's error. */
static int create_job(request *r, const cJSON *doc)
{
    int64_t id = 0;
    api_error e;
    memset(&e, 0, sizeof e);
    /* Another user's dataset that is not shared is as missing (jobspec's answer). */
    int64_t ds;
    if (lookup_body_dataset_hidden(r, doc, &ds))
        return http_error(r, 422, "dataset_not_found", "dataset %lld does not exist", (long long)ds);
    if (jobspec_create(r->srv->st, r->srv->data_dir, doc, &id, &e) != 0)
        return http_api_error(r, &e, "the job request is not valid");
    auth_own(r, STORE_OWNED_JOB, id);
    sched_wake(r->srv->sched);
    return answer_job(r, MHD_HTTP_CREATED, id);
}

static int h_job_create(request *r)
{
    enum MHD_Result answered;
    cJSON *doc = http_body_json(r, &answered);
    if (!doc)
        return answered;
    int rc = create_job(r, doc);
    cJSON_Delete(doc);
    return rc;
}

/* POST /api/v1/jobs/{id}/clone: a new job from job id's request, the body's
 * overrides (optional: no body is a plain copy) merged and named as
 * server/job_clone.h says, created as POST /api/v1/jobs creates one. */
static int h_job_clone(request *r)
{
    enum MHD_Result answered;
    cJSON *overrides = NULL;
    if (r->body_len && !(overrides = http_body_json(r, &answered)))
        return answered;
    store_job j;
    if (!lookup_job(r, r->id, &j, &answered)) {
        cJSON_Delete(overrides);
        return answered;
    }
    cJSON *req = NULL;
    api_error e;
    memset(&e, 0, sizeof e);
    int rc = job_clone_request(&j, overrides, &req, &e);
    store_job_clear(&j);
    cJSON_Delete(overrides);
    if (rc != 0)
        return http_api_error(r, &e, "the overrides are not valid");
    rc = create_job(r, req);
    cJSON_Delete(req);
    return rc;
}

static int h_job_get(request *r)
{
    return answer_job(r, MHD_HTTP_OK, r->id);
}

static int h_job_delete(request *r)
{
    server *srv = r->srv;
    store_job j;
    enum MHD_Result answered;
    if (!lookup_job(r, r->id, &j, &answered))
        return answered;
    bool active = !strcmp(j.status, "queued") || !strcmp(j.status, "running");
    char status[16];
    snprintf(status, sizeof status, "%s", j.status);
    store_job_clear(&j);
    if (active)
        return http_error(r, MHD_HTTP_CONFLICT, "job_active",
                          "job %lld is %s; cancel it first (POST /api/v1/jobs/%lld/cancel)",
                          (long long)r->id, status, (long long)r->id);
    /* A worker a killed server left may still write the folder (jobs/joblock.h):
     * the folder goes only with its lock held. */
    char dir[PATH_MAX], err[256];
    int lock_fd = -1;
    pid_t holder = 0;
    bool have_dir = layout_job_dir(dir, sizeof dir, srv->data_dir, r->id) == 0;
    if (have_dir && joblock_take(dir, 0, &lock_fd, &holder, err, sizeof err) == JOBLOCK_BUSY)
        return http_error(r, MHD_HTTP_CONFLICT, "job_active",
                          "job %lld's folder is still written by a worker (pid %ld) that an earlier "
                          "server started; try again once it has exited", (long long)r->id,
                          (long)holder);
    int64_t *evals = NULL;          /* its evaluations go with it (ON DELETE CASCADE) */
    size_t nevals = 0;
    if (!evaluation_before_job_delete(r, r->id, &evals, &nevals, &answered)) {
        if (lock_fd >= 0)
            close(lock_fd);
        return answered;
    }
    int rc = store_job_delete(srv->st, r->id);
    if (rc == 0)
        evaluation_remove_dirs(srv, evals, nevals);
    free(evals);
    if (rc == 0 && have_dir && fio_rm_rf(dir) != 0)
        fprintf(stderr, "kiln: job %lld: could not remove %s: %s\n", (long long)r->id, dir, strerror(errno));
    if (lock_fd >= 0)
        close(lock_fd);
    if (rc == STORE_NOT_FOUND)
        return lookup_not_found(r, "job", r->id);
    if (rc != 0)
        return http_store_error(r, "deleting the job");
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    return http_queue(r, MHD_HTTP_NO_CONTENT, resp);
}

static int h_job_cancel(request *r)
{
    store_job j;
    enum MHD_Result answered;
    if (!lookup_job(r, r->id, &j, &answered))
        return answered;
    store_job_clear(&j);
    int rc = sched_cancel(r->srv->sched, r->id);
    if (rc == STORE_NOT_FOUND)
        return lookup_not_found(r, "job", r->id);                  /* deleted meanwhile */
    if (rc == SCHED_ALREADY_ENDED) {
        if (!lookup_job(r, r->id, &j, &answered))
            return answered;
        char status[16];
        snprintf(status, sizeof status, "%s", j.status);
        store_job_clear(&j);
        return http_error(r, MHD_HTTP_CONFLICT, "job_finished", "job %lld has already ended (%s)",
                          (long long)r->id, status);
    }
    if (rc != 0)
        return http_store_error(r, "cancelling the job");
    return answer_job(r, MHD_HTTP_ACCEPTED, r->id);
}

/* POST /api/v1/jobs/{id}/resume: a failed or cancelled job with a checkpoint
 * goes back to the queue; its worker resumes from the latest checkpoint
 * (jobs/runner.c) and the scheduler drops the metrics past its step. 409 for
 * any other status or without a checkpoint. */
static int h_job_resume(request *r)
{
    store_job j;
    enum MHD_Result answered;
    if (!lookup_job(r, r->id, &j, &answered))
        return answered;
    char status[16];
    snprintf(status, sizeof status, "%s", j.status);
    /* Its owner must still read its dataset (it may have been unshared since). */
    cJSON *config = j.config_json ? cJSON_Parse(j.config_json) : NULL;
    int64_t ds;
    bool hidden = config && lookup_config_dataset_hidden(r->srv, j.owner_id, config, &ds);
    cJSON_Delete(config);
    store_job_clear(&j);
    if (hidden)
        return http_error(r, 422, "dataset_not_found", "dataset %lld does not exist", (long long)ds);
    if (!resumable_status(status))
        return http_error(r, MHD_HTTP_CONFLICT, "job_not_resumable",
                          "job %lld is %s; only a failed or cancelled job can be resumed",
                          (long long)r->id, status);
    char err[256];
    int64_t step = 0;
    int found = job_checkpoint(r->srv, r->id, &step, err, sizeof err);
    if (found < 0)
        return http_error(r, MHD_HTTP_CONFLICT, "job_not_resumable",
                          "job %lld's checkpoints cannot be read: %s", (long long)r->id, err);
    if (found == 0)
        return http_error(r, MHD_HTTP_CONFLICT, "job_not_resumable",
                          "job %lld has no checkpoint to resume from; create it again to run it from "
                          "the start", (long long)r->id);
    int rc = store_job_requeue_ended(r->srv->st, r->id);
    if (rc == STORE_NOT_FOUND)              /* resumed, deleted or changed meanwhile */
        return http_error(r, MHD_HTTP_CONFLICT, "job_not_resumable",
                          "job %lld is no longer failed or cancelled", (long long)r->id);
    if (rc != 0)
        return http_store_error(r, "resuming the job");
    fprintf(stderr, "kiln: job %lld: resumed; it goes on from its checkpoint at step %lld\n",
            (long long)r->id, (long long)step);
    hub_open(r->srv->hub, r->id);           /* its stream goes on with the new run (jobs/hub.h) */
    hub_publish(r->srv->hub, r->id, "status", "{\"status\":\"queued\",\"error\":null}");
    sched_wake(r->srv->sched);
    return answer_job(r, MHD_HTTP_ACCEPTED, r->id);
}

/* GET /api/v1/jobs/{id}/metrics[?since=STEP][&tag=A,B][&max_points=N]: the
 * stored metrics in insertion order; tag= keeps the tags named, max_points=
 * downsamples each tag's series (server/metric_select.h). */
static int h_job_metrics(request *r)
{
    int64_t since = -1, max_points = 0;
    const char *s = http_arg(r, "since");
    if (s && !http_parse_i64(s, -1, INT64_MAX, &since))
        return http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_field",
                          "since must be a step number (an integer >= -1), not \"%.32s\"", s);
    const char *mp = http_arg(r, "max_points");
    if (mp && !http_parse_i64(mp, 2, INT64_MAX, &max_points))
        return http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_field",
                          "max_points must be an integer >= 2 (the most points per tag), not \"%.32s\"", mp);
    const char *tags = http_arg(r, "tag");
    store_job j;
    enum MHD_Result answered;
    if (!lookup_job(r, r->id, &j, &answered))
        return answered;
    store_job_clear(&j);
    store_metric *ms = NULL;
    size_t n = 0;
    if (store_metric_list(r->srv->st, r->id, since, &ms, &n) != 0)
        return http_store_error(r, "reading metrics");
    api_error e = { 0 };
    if (metric_select(ms, &n, tags, max_points, &e) != 0) {
        free(ms);
        return http_api_error(r, &e, "the metrics could not be selected");
    }
    cJSON *items = cJSON_CreateArray();
    for (size_t i = 0; items && i < n; i++)
        items = list_add(items, render_metric(&ms[i]));
    free(ms);
    return http_json(r, MHD_HTTP_OK, render_list(items));
}

static int h_job_log(request *r)
{
    store_job j;
    enum MHD_Result answered;
    if (!lookup_job(r, r->id, &j, &answered))
        return answered;
    store_job_clear(&j);
    char path[PATH_MAX + 8];
    char dir[PATH_MAX];
    if (layout_job_dir(dir, sizeof dir, r->srv->data_dir, r->id) != 0 ||
        layout_file(path, sizeof path, dir, LAYOUT_JOB_LOG) != 0)
        return http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error",
                          "the data directory's path is too long");
    struct MHD_Response *resp;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd >= 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode)) {
        resp = MHD_create_response_from_fd((uint64_t)sb.st_size, fd);
        if (!resp)
            close(fd);
    } else {
        if (fd >= 0)
            close(fd);
        resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);   /* no log yet */
    }
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    return http_queue(r, MHD_HTTP_OK, resp);
}

/* ---- the table ------------------------------------------------------------------- */

const route http_routes[] = {
    { .method = "GET", .pattern = "/healthz", .fn = h_healthz },
    { .method = "GET", .pattern = "/api/v1/info", .fn = h_info },
    { .method = "GET", .pattern = "/api/v1/openapi.json", .fn = h_openapi },
    { .method = "GET", .pattern = "/api/v1/limits", .fn = h_limits },
    { .method = "GET", .pattern = "/api/v1/hardware", .fn = h_hardware },
    { .method = "GET", .pattern = "/metrics", .fn = prom_handle },
    { .method = "GET", .pattern = "/api/v1/schema", .fn = h_schema },
    { .method = "GET", .pattern = "/api/v1/networks", .fn = h_networks },
    { .method = "POST", .pattern = "/api/v1/networks/summary", .fn = h_network_summary, .body = BODY_JSON },
    { .method = "GET", .pattern = "/api/v1/datasets", .fn = h_datasets_list },
    { .method = "POST", .pattern = "/api/v1/datasets", .fn = upload_finish, .body = BODY_UPLOAD },
    { .method = "GET", .pattern = "/api/v1/datasets/:id", .fn = h_dataset_get },
    { .method = "PATCH", .pattern = "/api/v1/datasets/:id", .fn = h_dataset_patch, .body = BODY_JSON },
    { .method = "DELETE", .pattern = "/api/v1/datasets/:id", .fn = h_dataset_delete },
    { .method = "GET", .pattern = "/api/v1/datasets/:id/samples", .fn = dsview_samples },
    { .method = "GET", .pattern = "/api/v1/datasets/:id/image.png", .fn = dsview_image },
    { .method = "GET", .pattern = "/api/v1/datasets/:id/mean.png", .fn = dsview_mean },
    { .method = "GET", .pattern = "/api/v1/queue", .fn = queue_handle },
    { .method = "GET", .pattern = "/api/v1/jobs", .fn = jobs_list_handle },
    { .method = "POST", .pattern = "/api/v1/jobs", .fn = h_job_create, .body = BODY_JSON },
    { .method = "GET", .pattern = "/api/v1/jobs/:id", .fn = h_job_get },
    { .method = "PATCH", .pattern = "/api/v1/jobs/:id", .fn = h_job_patch, .body = BODY_JSON },
    { .method = "DELETE", .pattern = "/api/v1/jobs/:id", .fn = h_job_delete },
    { .method = "POST", .pattern = "/api/v1/jobs/:id/cancel", .fn = h_job_cancel },
    { .method = "POST", .pattern = "/api/v1/jobs/:id/resume", .fn = h_job_resume },
    { .method = "POST", .pattern = "/api/v1/jobs/:id/clone", .fn = h_job_clone, .body = BODY_JSON },
    { .method = "GET", .pattern = "/api/v1/jobs/:id/request", .fn = job_request_handle },
    { .method = "GET", .pattern = "/api/v1/jobs/:id/metrics", .fn = h_job_metrics },
    { .method = "GET", .pattern = "/api/v1/jobs/:id/log", .fn = h_job_log },
    { .method = "GET", .pattern = "/api/v1/jobs/:id/events", .fn = sse_handle },
    { .method = "GET", .pattern = "/api/v1/jobs/:id/model", .fn = model_handle },
    { .method = "POST", .pattern = "/api/v1/jobs/:id/infer", .fn = infer_handle, .body = BODY_UPLOAD,
      .upload = &infer_upload },
    { .method = "GET", .pattern = "/api/v1/jobs/:id/snapshots", .fn = snapshots_handle },
    { .method = "POST", .pattern = "/api/v1/jobs/:id/evaluations", .fn = evaluation_create, .body = BODY_JSON },
    { .method = "GET", .pattern = "/api/v1/jobs/:id/evaluations", .fn = evaluation_list },
    { .method = "GET", .pattern = "/api/v1/evaluations/:id", .fn = evaluation_get },
    { .method = "DELETE", .pattern = "/api/v1/evaluations/:id", .fn = evaluation_delete },
    { .method = "POST", .pattern = "/api/v1/evaluations/:id/cancel", .fn = evaluation_cancel },
    { .method = "GET", .pattern = "/api/v1/sweeps", .fn = sweeps_list },
    { .method = "POST", .pattern = "/api/v1/sweeps", .fn = sweeps_create, .body = BODY_JSON },
    { .method = "GET", .pattern = "/api/v1/sweeps/:id", .fn = sweeps_get },
    { .method = "DELETE", .pattern = "/api/v1/sweeps/:id", .fn = sweeps_delete },
    { .method = "POST", .pattern = "/api/v1/sweeps/:id/cancel", .fn = sweeps_cancel },
    { .method = "GET", .pattern = "/api/v1/session", .fn = auth_session_get },
    { .method = "POST", .pattern = "/api/v1/session", .fn = auth_session_create, .body = BODY_JSON },
    { .method = "DELETE", .pattern = "/api/v1/session", .fn = auth_session_delete },
    { .method = "GET", .pattern = "/api/v1/tokens", .fn = auth_tokens_list },
    { .method = "POST", .pattern = "/api/v1/tokens", .fn = auth_token_create, .body = BODY_JSON },
    { .method = "DELETE", .pattern = "/api/v1/tokens/:id", .fn = auth_token_delete },
    { .method = "GET", .pattern = "/api/v1/users", .fn = auth_users_list },
    { .method = "POST", .pattern = "/api/v1/users", .fn = auth_user_create, .body = BODY_JSON },
    { .method = "DELETE", .pattern = "/api/v1/users/:id", .fn = auth_user_delete },
};

const size_t http_route_count = sizeof http_routes / sizeof http_routes[0];
