/* server/jobs_list.h: the jobs list (GET /api/v1/jobs: filters, search,
 * sort, keyset paging) and a job's user-editable fields (PATCH
 * /api/v1/jobs/{id}: name, tags, notes), issue 16.
 *
 * The limits below are the only ones: the handlers check them, GET
 * /api/v1/schema publishes them ("jobs_list", "job_edit"), and the dashboard
 * reads them from there.
 */
#ifndef KILN_SERVER_JOBS_LIST_H
#define KILN_SERVER_JOBS_LIST_H

#include <stdbool.h>

#include <cjson/cJSON.h>

#include "base/err.h"        /* api_error */
#include "server/http.h"     /* request */

#define JOBS_LIST_LIMIT_DEFAULT 50     /* jobs in a page when the request names no limit */
#define JOBS_LIST_LIMIT_MAX 500        /* jobs in a page at most */
#define JOBS_LIST_TEXT_MAX 200         /* bytes of a search (q) */
#define JOBS_LIST_CURSOR_MAX 1024      /* bytes of a cursor */
#define JOB_TAGS_MAX 20                /* tags on a job */
#define JOB_TAG_MAX 40                 /* bytes of a tag */
#define JOB_NOTES_MAX 10000            /* bytes of a job's notes */
/* A job's name: JOBCFG_NAME_MAX bytes (jobs/jobcfg.h), as in a job request. */

/* GET /api/v1/jobs?status=&dataset=&network=&precision=&tag=&q=&sort=&order=
 * &limit=&cursor=: {"items":[job...],"next_cursor":string|null,"total":n}.
 * A parameter the list does not take, or a bad value, is 400 naming it. */
int jobs_list_handle(request *r);

/* A PATCH body read: each field NULL when the body leaves it as it is.
 * tags_json is the tags as a JSON array text (trimmed, duplicates dropped).
 * Owned; free with job_edit_free. */
typedef struct job_edit {
    char *name, *tags_json, *notes;
    bool has_priority;                 /* "priority" given (issue 17): a queued job's new one */
    int priority;                      /* JOBCFG_PRIORITY_MIN..MAX */
} job_edit;

/* Reads a PATCH /api/v1/jobs/{id} body ({"name"?, "tags"?, "notes"?,
 * "priority"?}; null name or notes clear it, null tags empty them): 0, or -1
 * with e filled (400 unknown_field, invalid_field naming the field and its
 * limit; 500 out of memory). Whether the job may still change its priority
 * (only while queued: 409 otherwise) is the handler's. */
int job_edit_parse(const cJSON *body, job_edit *out, api_error *e);
void job_edit_free(job_edit *ed);

/* {"jobs_list": {...}, "job_edit": {...}}'s two objects: the list's
 * parameters (sort keys, limit default and maximum) and the editable fields'
 * limits, for GET /api/v1/schema. New cJSON, or NULL when out of memory. */
cJSON *jobs_list_schema(void);
cJSON *job_edit_schema(void);

#endif
