/* server/snapshots_view.c: a job's snapshots as the API shows them (contract
 * in snapshots_view.h). */
#include "server/snapshots_view.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/layout.h"      /* layout_job_dir */
#include "jobs/jobcfg.h"      /* jobcfg_from_json: the job's checkpoint_metric */
#include "jobs/snapshots.h"   /* snap_list_load, snap_list_pick_best */
#include "server/lookup.h"    /* lookup_job */

/* The job's checkpoint_metric from its stored config; the default when the
 * config does not read. */
static snap_metric metric_of(const store_job *j)
{
    cJSON *stored = j->config_json ? cJSON_Parse(j->config_json) : NULL;
    jobcfg c;
    api_error e;
    snap_metric m = SNAP_VAL_ACCURACY;
    if (stored && jobcfg_from_json(stored, JOBCFG_RESOLVED, &c, &e) == 0) {
        m = c.checkpoint_metric;
        jobcfg_free(&c);
    }
    cJSON_Delete(stored);
    return m;
}

static bool add_download(cJSON *d, const char *format, int64_t job, int epoch)
{
    char url[160];
    snprintf(url, sizeof url, "/api/v1/jobs/%lld/model?format=%s&epoch=%d", (long long)job, format,
             epoch);
    return cJSON_AddStringToObject(d, format, url) != NULL;
}

static cJSON *render_item(const snap_item *it, bool best, int64_t job)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *d = cJSON_CreateObject();
    cJSON *m = it->metrics ? cJSON_Duplicate(it->metrics, 1) : cJSON_CreateObject();
    bool ok = o && d && m && cJSON_AddNumberToObject(o, "epoch", it->epoch) &&
              cJSON_AddNumberToObject(o, "step", (double)it->step) &&
              cJSON_AddBoolToObject(o, "best", best) && cJSON_AddItemToObject(o, "metrics", m);
    if (ok)
        m = NULL;
    ok = ok && add_download(d, "tar", job, it->epoch) && add_download(d, "onnx", job, it->epoch) &&
         cJSON_AddItemToObject(o, "downloads", d);
    if (ok)
        d = NULL;
    cJSON_Delete(m);
    cJSON_Delete(d);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *render_snapshots(const snap_list *l, int64_t job)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *items = o ? cJSON_AddArrayToObject(o, "items") : NULL;
    bool ok = items && cJSON_AddStringToObject(o, "metric", snap_metric_name(l->metric)) &&
              cJSON_AddItemToObject(o, "best", l->best ? cJSON_CreateNumber(l->best) : cJSON_CreateNull());
    for (int i = 0; ok && i < l->n; i++) {
        cJSON *it = render_item(&l->items[i], l->best && l->items[i].epoch == l->best, job);
        ok = it && cJSON_AddItemToArray(items, it);
        if (!ok)
            cJSON_Delete(it);
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int snapshots_handle(request *r)
{
    server *srv = r->srv;
    store_job j;
    enum MHD_Result ret;
    if (!lookup_job(r, r->id, &j, &ret))
        return ret;
    char dir[PATH_MAX], err[512];
    snap_list l;
    if (layout_job_dir(dir, sizeof dir, srv->data_dir, j.id) != 0) {
        ret = http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error",
                         "the data directory's path is too long");
    } else if (snap_list_load(dir, &l, err, sizeof err) != 0) {
        ret = http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "unreadable",
                         "job %lld's snapshots: %s", (long long)j.id, err);
    } else {
        /* The job's metric, also for a list read from files alone. */
        if (l.metric != metric_of(&j)) {
            l.metric = metric_of(&j);
            snap_list_pick_best(&l);
        }
        ret = http_json(r, MHD_HTTP_OK, render_snapshots(&l, j.id));
        snap_list_free(&l);
    }
    store_job_clear(&j);
    return ret;
}
