/* server/job_clone.h: a job's request, and the request of its clone.
 *
 * A job's request is the POST /api/v1/jobs body that recreates it, rebuilt
 * from its resolved config (the text of its job.json, which the store keeps)
 * by jobs/jobreq.h's jobreq_from_config. GET /api/v1/jobs/{id}/request
 * answers it (the dashboard's Clone fills the new-job form from it);
 * POST /api/v1/jobs/{id}/clone merges the body's overrides into it and
 * server/api.c creates the job exactly as POST /api/v1/jobs does.
 */
#ifndef KILN_SERVER_JOB_CLONE_H
#define KILN_SERVER_JOB_CLONE_H

#include <cjson/cJSON.h>

#include "base/err.h"        /* api_error */
#include "db/store.h"        /* store_job */
#include "server/http.h"     /* request */

/* What a clone is called when its overrides name none: the source's name
 * and this suffix, or "job <id>" and this suffix for a job without a name. */
#define JOB_CLONE_SUFFIX " (copy)"

/* The request of a clone of job j: j's request, with overrides (a JSON
 * object, or NULL for none) merged by jobreq_merge (objects deep; a null
 * removes the field, so that its default applies), and, unless the
 * overrides mention "name", the default name above (cut at a character to
 * the name's limit, JOBCFG_NAME_MAX bytes). Returns 0 with *out (owned by
 * the caller), or -1 with e filled: what jobreq_from_config or jobreq_merge
 * refused. Nothing is validated here beyond that: jobspec_create does it. */
int job_clone_request(const store_job *j, const cJSON *overrides, cJSON **out, api_error *e);

/* GET /api/v1/jobs/:id/request: job id's request (404 as GET /api/v1/jobs/:id). */
int job_request_handle(request *r);

#endif
