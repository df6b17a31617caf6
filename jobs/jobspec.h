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

/* Returns 0 with *id set, or -1 with e filled. */
int jobspec_create(store *st, const char *data_dir, const cJSON *request, int64_t *id, api_error *e);

/* kiln train: validates a request as jobspec_create does (same checks and
 * errors), but for the prepared dataset in dataset_dir, with no store and no
 * dataset_id (giving one is an error). Returns the resolved job.json object
 * ("id" 0), owned by the caller, or NULL with e filled. */
cJSON *jobspec_resolve_local(const cJSON *request, const char *dataset_dir, api_error *e);

/* The GPUs a job's job.json asks for: returns how many (0: a CPU job), with
 * ids[0..n) filled when it names them (*listed), else any free ones will do.
 * Reads what older versions wrote too ("gpu": one GPU's number, or -1 for
 * any). ids has room for max. */
int jobspec_gpus(const cJSON *cfg, int *ids, int max, bool *listed);

/* The folder of a job: <data_dir>/jobs/<id> (into buf). */
void jobspec_dir(const char *data_dir, int64_t id, char *buf, size_t n);

#endif
