/* server/job_clone.c: a job's request (GET /api/v1/jobs/{id}/request) and the
 * request of its clone (POST /api/v1/jobs/{id}/clone, created by api.c).
 *
 * Both start from the job's stored config, the same text as its job.json
 * (jobs/jobspec.c writes one and stores the other), turned back into a
 * request by jobs/jobreq.c: a built-in network by its name, the devices as a
 * request gives them. The clone's overrides and its default name are added
 * here; every check of the result is jobspec_create's, as for any new job.
 */
#include "server/job_clone.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "jobs/jobcfg.h"       /* JOBCFG_NAME_MAX */
#include "jobs/jobreq.h"       /* jobreq_from_config, jobreq_merge */
#include "server/lookup.h"     /* lookup_job */

/* Job j's request, owned by the caller, or NULL with e filled. */
static cJSON *source_request(const store_job *j, api_error *e)
{
    cJSON *config = j->config_json ? cJSON_Parse(j->config_json) : NULL;
    if (!config) {
        api_fail(e, 500, "internal", "job %lld's stored config does not parse", (long long)j->id);
        return NULL;
    }
    cJSON *req = jobreq_from_config(config, e);
    cJSON_Delete(config);
    if (!req && e->status < 500)          /* the job's own config: not the caller's fault */
        api_fail(e, 500, "internal", "job %lld's config does not make a request again: %.400s",
                 (long long)j->id, e->message);
    /* The name the job has now (PATCH /jobs/{id} renames it in the store;
     * job.json keeps the one it was created with). */
    cJSON *name = req && j->name && j->name[0] ? cJSON_CreateString(j->name) : NULL;
    if (name) {
        cJSON_DeleteItemFromObjectCaseSensitive(req, "name");
        cJSON_AddItemToObject(req, "name", name);
    }
    /* Its priority as it is now, likewise (PATCH changes it while it waits). */
    cJSON *prio = req ? cJSON_GetObjectItemCaseSensitive(req, "priority") : NULL;
    if (cJSON_IsNumber(prio))
        cJSON_SetNumberValue(prio, j->priority);
    return req;
}

/* Length of the first at most max bytes of s that end at a UTF-8 character's end. */
static size_t utf8_cut(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n <= max)
        return n;
    while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80)
        max--;              /* s[max] continues a character: cut before that character */
    return max;
}

/* Sets req's "name" to the default clone name of job id (whose request req is). */
static int set_default_name(cJSON *req, int64_t id, api_error *e)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(req, "name");
    char base[JOBCFG_NAME_MAX + 1], name[JOBCFG_NAME_MAX + 1];
    if (cJSON_IsString(n) && n->valuestring[0])
        snprintf(base, sizeof base, "%s", n->valuestring);
    else
        snprintf(base, sizeof base, "job %lld", (long long)id);
    size_t keep = utf8_cut(base, JOBCFG_NAME_MAX - (sizeof JOB_CLONE_SUFFIX - 1));
    snprintf(name, sizeof name, "%.*s%s", (int)keep, base, JOB_CLONE_SUFFIX);
    cJSON *v = cJSON_CreateString(name);
    if (!v || !(cJSON_GetObjectItemCaseSensitive(req, "name") ? cJSON_ReplaceItemInObjectCaseSensitive(req, "name", v)
                                                  : cJSON_AddItemToObject(req, "name", v))) {
        cJSON_Delete(v);
        return api_fail(e, 500, "internal", "out of memory");
    }
    return 0;
}

int job_clone_request(const store_job *j, const cJSON *overrides, cJSON **out, api_error *e)
{
    *out = NULL;
    cJSON *req = source_request(j, e);
    if (!req)
        return -1;
    bool named = overrides && cJSON_GetObjectItemCaseSensitive(overrides, "name");
    if ((overrides && jobreq_merge(req, overrides, e) != 0) ||
        (!named && set_default_name(req, j->id, e) != 0)) {
        cJSON_Delete(req);
        return -1;
    }
    *out = req;
    return 0;
}

int job_request_handle(request *r)
{
    store_job j;
    enum MHD_Result answered;
    if (!lookup_job(r, r->id, &j, &answered))
        return answered;
    api_error e;
    memset(&e, 0, sizeof e);
    cJSON *req = source_request(&j, &e);
    store_job_clear(&j);
    if (!req)
        return http_api_error(r, &e, "the job's request cannot be rebuilt from its config");
    return http_json(r, MHD_HTTP_OK, req);
}
