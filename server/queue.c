/* server/queue.c: GET /api/v1/queue (contract in queue.h). */
#include "server/queue.h"

#include <stdlib.h>

#include <cjson/cJSON.h>

#include "jobs/jobcfg.h"       /* JOBCFG_PRIORITY_MIN, JOBCFG_PRIORITY_MAX */
#include "jobs/scheduler.h"    /* sched_queue_view */
#include "server/lookup.h"     /* lookup_owner_filter */
#include "server/render.h"     /* render_slurm: a job's Slurm id, state and reason */
#include "server/server.h"     /* r->srv: the store, the scheduler */

/* What an item of the queue shows, from its store row. */
typedef struct queue_row {
    int64_t id, job_id, owner_id;
    const char *name, *status, *created_at, *started_at, *devices_json;
    int priority;
} queue_row;

static bool add(cJSON *o, const char *key, cJSON *v)
{
    if (v && cJSON_AddItemToObject(o, key, v))
        return true;
    cJSON_Delete(v);
    return false;
}

static cJSON *str_or_null(const char *s)
{
    return s ? cJSON_CreateString(s) : cJSON_CreateNull();
}

static cJSON *id_or_null(int64_t id, bool hidden)
{
    return !hidden && id > 0 ? cJSON_CreateNumber((double)id) : cJSON_CreateNull();
}

/* The stored devices (a JSON array text) as an array; null when none. */
static cJSON *devices(const char *json)
{
    cJSON *a = json ? cJSON_Parse(json) : NULL;
    if (cJSON_IsArray(a))
        return a;
    cJSON_Delete(a);
    return cJSON_CreateNull();
}

static cJSON *render_item(const request *r, const sched_queue_item *it, const queue_row *row,
                          size_t position)
{
    int64_t filter = lookup_owner_filter(r);
    bool hidden = !(filter == 0 || (filter > 0 && row->owner_id == filter));
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    bool job = it->kind == STORE_WORK_JOB;
    bool ok = add(o, "kind", cJSON_CreateString(job ? "job" : "evaluation")) &&
              add(o, "id", id_or_null(it->id, hidden)) &&
              add(o, "job_id", id_or_null(job ? it->id : row->job_id, hidden)) &&
              add(o, "name", hidden ? cJSON_CreateNull() : str_or_null(row->name)) &&
              add(o, "owner_id", id_or_null(row->owner_id, hidden)) &&
              add(o, "hidden", cJSON_CreateBool(hidden)) &&
              add(o, "status", str_or_null(row->status)) &&
              add(o, "priority", cJSON_CreateNumber(row->priority)) &&
              add(o, "created_at", hidden ? cJSON_CreateNull() : str_or_null(row->created_at)) &&
              add(o, "started_at", hidden ? cJSON_CreateNull() : str_or_null(row->started_at)) &&
              add(o, "assigned_devices", devices(row->devices_json)) &&
              add(o, "position", it->running ? cJSON_CreateNull() : cJSON_CreateNumber((double)position)) &&
              add(o, "waiting_for", it->running ? cJSON_CreateNull() : cJSON_CreateString(it->why)) &&
              add(o, "can_change_priority", cJSON_CreateBool(job && !it->running && !hidden &&
                                                              !it->slurm_job_id)) &&
              add(o, "slurm", job && !hidden ? render_slurm(r->srv->st, it->id) : cJSON_CreateNull());
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* The item rendered from its store row: 0 (*out NULL when the row is gone
 * meanwhile: left out), -1 on a store error or out of memory. */
static int item_json(request *r, const sched_queue_item *it, size_t position, cJSON **out)
{
    *out = NULL;
    queue_row row = { 0 };
    int rc;
    if (it->kind == STORE_WORK_JOB) {
        store_job j;
        if ((rc = store_job_get(r->srv->st, it->id, &j)) != 0)
            return rc == STORE_NOT_FOUND ? 0 : -1;
        row = (queue_row){ .id = j.id, .owner_id = j.owner_id, .name = j.name, .status = j.status,
                           .created_at = j.created_at, .started_at = j.started_at,
                           .devices_json = j.devices_json, .priority = j.priority };
        *out = render_item(r, it, &row, position);
        store_job_clear(&j);
    } else {
        store_eval e;
        if ((rc = store_eval_get(r->srv->st, it->id, &e)) != 0)
            return rc == STORE_NOT_FOUND ? 0 : -1;
        row = (queue_row){ .id = e.id, .job_id = e.job_id, .owner_id = e.owner_id, .status = e.status,
                           .created_at = e.created_at, .started_at = e.started_at,
                           .devices_json = e.devices_json };
        *out = render_item(r, it, &row, position);
        store_eval_clear(&e);
    }
    return *out ? 0 : -1;
}

int queue_handle(request *r)
{
    sched_queue_item *items = NULL;
    size_t n = 0;
    if (sched_queue_view(r->srv->sched, &items, &n) != 0)
        return http_store_error(r, "reading the queue");
    cJSON *doc = cJSON_CreateObject();
    cJSON *running = doc ? cJSON_AddArrayToObject(doc, "running") : NULL;
    cJSON *queued = doc ? cJSON_AddArrayToObject(doc, "queued") : NULL;
    bool ok = running && queued;
    size_t position = 0;
    for (size_t i = 0; ok && i < n; i++) {
        cJSON *o = NULL;
        if (item_json(r, &items[i], items[i].running ? 0 : position + 1, &o) != 0) {
            ok = false;
            break;
        }
        if (!o)
            continue;
        position += !items[i].running;
        ok = cJSON_AddItemToArray(items[i].running ? running : queued, o);
        if (!ok)
            cJSON_Delete(o);
    }
    free(items);
    ok = ok && add(doc, "priority_min", cJSON_CreateNumber(JOBCFG_PRIORITY_MIN)) &&
         add(doc, "priority_max", cJSON_CreateNumber(JOBCFG_PRIORITY_MAX));
    if (!ok) {
        cJSON_Delete(doc);
        return http_error(r, 500, "internal_error", "reading the queue failed (store error or out of memory)");
    }
    return http_json(r, 200, doc);
}
