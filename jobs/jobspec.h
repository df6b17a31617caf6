/* jobs/jobspec.h: a training request turned into a job.
 *
 * jobspec_create validates a POST /api/v1/jobs body (unknown fields, types,
 * ranges, the dataset, the network spec through the engine), fills defaults,
 * inserts the job, and writes jobs/<id>/job.json (atomically) before the
 * scheduler can see it. The resolved config is what the worker reads.
 */
#ifndef KILN_JOBS_JOBSPEC_H
#define KILN_JOBS_JOBSPEC_H

#include <stdbool.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include "base/err.h"    /* api_error */
#include "db/store.h"
#include "jobs/jobcfg.h"    /* jobcfg */

/* Returns 0 with *id set, or -1 with e filled. */
int jobspec_create(store *st, const char *data_dir, const cJSON *request, int64_t *id, api_error *e);

/* kiln train: validates a request as jobspec_create does (same checks and
 * errors), but for the prepared dataset in dataset_dir, with no store and no
 * dataset_id (giving one is an error). Returns 0 with *out resolved ("id" 0;
 * free it with jobcfg_free), or -1 with e filled. */
int jobspec_resolve_local(const cJSON *request, const char *dataset_dir, jobcfg *out, api_error *e);

#endif
