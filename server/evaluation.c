/* server/evaluation.c: the evaluation routes (contract in evaluation.h).
 *
 * Handlers only read and write the store and the evaluation's folder; the
 * work runs in `kiln evaluate`, started by the scheduler. */
#include "server/evaluation.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/layout.h"        /* layout_eval_dir */
#include "engine/fileio.h"      /* fio_rm_rf */
#include "jobs/evaluation.h"    /* eval_create */
#include "jobs/scheduler.h"     /* sched_wake, sched_cancel_eval */
#include "server/auth.h"        /* auth_own */
#include "server/lookup.h"      /* lookup_job, lookup_eval, lookup_not_found */
#include "server/render.h"      /* render_evaluation, render_list */

static bool active(const char *status)
{
    return !strcmp(status, "queued") || !strcmp(status, "running");
}

static int answer_eval(request *r, unsigned status, int64_t id)
{
    store_eval e;
    enum MHD_Result answered;
    if (!lookup_eval(r, id, &e, &answered))
        return answered;
    cJSON *o = render_evaluation(&e, true);
    store_eval_clear(&e);
    return http_json(r, status, o);
}

int evaluation_create(request *r)
{
    enum MHD_Result answered;
    cJSON *doc = http_body_json(r, &answered);
    if (!doc)
        return answered;
    int64_t id = 0;
    api_error e;
    memset(&e, 0, sizeof e);
    /* Another user's job, or dataset that is not shared, is as missing. */
    int64_t ds;
    if (!lookup_job(r, r->id, NULL, &answered)) {
        cJSON_Delete(doc);
        return answered;
    }
    if (lookup_body_dataset_hidden(r, doc, &ds)) {
        answered = lookup_not_found(r, "dataset", ds);
        cJSON_Delete(doc);
        return answered;
    }
    int rc = eval_create(r->srv->st, r->srv->data_dir, r->id, doc, &id, &e);
    cJSON_Delete(doc);
    if (rc != 0)
        return http_api_error(r, &e, "the evaluation request is not valid");
    auth_own(r, STORE_OWNED_EVAL, id);
    sched_wake(r->srv->sched);
    return answer_eval(r, MHD_HTTP_CREATED, id);
}

int evaluation_list(request *r)
{
    enum MHD_Result answered;
    if (!lookup_job(r, r->id, NULL, &answered))
        return answered;
    store_eval *list = NULL;
    size_t n = 0;
    if (store_eval_list_by_job_for(r->srv->st, r->id, lookup_owner_filter(r), &list, &n) != 0)
        return http_store_error(r, "listing evaluations");
    cJSON *items = cJSON_CreateArray();
    for (size_t i = 0; items && i < n; i++) {
        cJSON *o = render_evaluation(&list[i], false);
        if (!o || !cJSON_AddItemToArray(items, o)) {
            cJSON_Delete(o);
            cJSON_Delete(items);
            items = NULL;
        }
    }
    store_eval_list_free(list, n);
    return http_json(r, MHD_HTTP_OK, render_list(items));
}

int evaluation_get(request *r)
{
    return answer_eval(r, MHD_HTTP_OK, r->id);
}

int evaluation_cancel(request *r)
{
    store_eval e;
    enum MHD_Result answered;
    if (!lookup_eval(r, r->id, &e, &answered))
        return answered;
    store_eval_clear(&e);
    int rc = sched_cancel_eval(r->srv->sched, r->id);
    if (rc == STORE_NOT_FOUND)
        return lookup_not_found(r, "evaluation", r->id);
    if (rc == SCHED_ALREADY_ENDED) {
        if (!lookup_eval(r, r->id, &e, &answered))
            return answered;
        answered = http_error(r, MHD_HTTP_CONFLICT, "evaluation_finished",
                              "evaluation %lld has already ended (%s)", (long long)r->id, e.status);
        store_eval_clear(&e);
        return answered;
    }
    if (rc != 0)
        return http_store_error(r, "cancelling the evaluation");
    return answer_eval(r, MHD_HTTP_ACCEPTED, r->id);
}

static void remove_dir(server *srv, int64_t id)
{
    char dir[PATH_MAX];
    if (layout_eval_dir(dir, sizeof dir, srv->data_dir, id) == 0 && fio_rm_rf(dir) != 0)
        fprintf(stderr, "kiln: evaluation %lld: could not remove %s: %s\n", (long long)id, dir,
                strerror(errno));
}

int evaluation_delete(request *r)
{
    store_eval e;
    enum MHD_Result answered;
    if (!lookup_eval(r, r->id, &e, &answered))
        return answered;
    if (active(e.status)) {
        answered = http_error(r, MHD_HTTP_CONFLICT, "evaluation_active",
                              "evaluation %lld is %s; cancel it first (POST /api/v1/evaluations/%lld/cancel)",
                              (long long)r->id, e.status, (long long)r->id);
        store_eval_clear(&e);
        return answered;
    }
    store_eval_clear(&e);
    int rc = store_eval_delete(r->srv->st, r->id);
    if (rc == STORE_NOT_FOUND)
        return lookup_not_found(r, "evaluation", r->id);
    if (rc != 0)
        return http_store_error(r, "deleting the evaluation");
    remove_dir(r->srv, r->id);
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    return http_queue(r, MHD_HTTP_NO_CONTENT, resp);
}

bool evaluation_before_job_delete(request *r, int64_t job_id, int64_t **ids, size_t *n,
                                  enum MHD_Result *answered)
{
    store_eval *list = NULL;
    size_t count = 0;
    *ids = NULL;
    *n = 0;
    if (store_eval_list_by_job(r->srv->st, job_id, &list, &count) != 0) {
        *answered = http_store_error(r, "listing the job's evaluations");
        return false;
    }
    for (size_t i = 0; i < count; i++)
        if (active(list[i].status)) {
            *answered = http_error(r, MHD_HTTP_CONFLICT, "evaluation_active",
                                   "evaluation %lld of job %lld is %s; cancel it first "
                                   "(POST /api/v1/evaluations/%lld/cancel)", (long long)list[i].id,
                                   (long long)job_id, list[i].status, (long long)list[i].id);
            store_eval_list_free(list, count);
            return false;
        }
    *ids = count ? malloc(count * sizeof **ids) : NULL;
    if (count && !*ids) {             /* their folders would be left behind */
        store_eval_list_free(list, count);
        *answered = http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", "out of memory");
        return false;
    }
    for (size_t i = 0; i < count; i++)
        (*ids)[i] = list[i].id;
    *n = count;
    store_eval_list_free(list, count);
    return true;
}

void evaluation_remove_dirs(server *srv, const int64_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        remove_dir(srv, ids[i]);
}
