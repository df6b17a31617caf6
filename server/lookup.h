/* server/lookup.h: finding the job, dataset or evaluation a request names,
 * answering 404 when there is none.
 *
 * Every handler that reads one of them by id goes through here, so that a
 * missing one is always {"error":{"code":"<kind>_not_found","message":
 * "there is no <kind> <id>"}} and a store failure always a 500 store_error.
 *
 * Ownership (issue 15, server/auth.h) is decided here too: a row the caller
 * may not see answers exactly as a missing one (404, never 403), so that ids
 * of other users' objects reveal nothing. A user sees their own jobs,
 * datasets and evaluations, and shared datasets; an admin (and every request
 * of a server without users) sees all. Lists filter in SQL with
 * lookup_owner_filter.
 */
#ifndef KILN_SERVER_LOOKUP_H
#define KILN_SERVER_LOOKUP_H

#include <stdbool.h>
#include <stdint.h>

#include "db/store.h"        /* store_job, store_dataset, store_eval */
#include "server/http.h"     /* request, http_error */

/* The 404 for a missing kind ("job", "dataset", "evaluation") id: code
 * "<kind>_not_found". Returns what http_error returns. */
enum MHD_Result lookup_not_found(request *r, const char *kind, int64_t id);

/* Reads job id into *j: true, and the caller clears *j (j NULL: only checks
 * that the job exists); or false when the request has been answered (404
 * job_not_found, or 500 when the store fails), with *answered what the
 * handler returns. */
bool lookup_job(request *r, int64_t id, store_job *j, enum MHD_Result *answered);

/* lookup_job for a dataset (404 dataset_not_found); d is not optional. */
bool lookup_dataset(request *r, int64_t id, store_dataset *d, enum MHD_Result *answered);

/* lookup_dataset for a change (delete, PATCH): a shared dataset the caller
 * may read but does not own is 403 forbidden. */
bool lookup_dataset_change(request *r, int64_t id, store_dataset *d, enum MHD_Result *answered);

/* True when body's "dataset_id" (a job or evaluation request) names a
 * dataset that exists and the caller may not read; *id is that id. The
 * caller then answers as its creating function does for a missing dataset.
 * False otherwise (no such field, not an id, missing, readable): the
 * request's own checks answer. Answers nothing. */
bool lookup_body_dataset_hidden(request *r, const cJSON *body, int64_t *id);

/* The same for work started without a request (a sweep's trial) or again
 * later (a resumed job): true when config's "dataset_id" names a dataset
 * that exists and user `owner` may not read now (not theirs, not shared, and
 * they are no admin; owner 0, a server without users, reads all). */
bool lookup_config_dataset_hidden(server *srv, int64_t owner, const cJSON *config, int64_t *id);

/* The owner to filter lists by (store_*_list_for): 0 for an admin (all),
 * the caller's user id, or -1 (matches nothing) for user 0 without admin. */
int64_t lookup_owner_filter(const request *r);

/* lookup_job for an evaluation (404 evaluation_not_found); e is not optional. */
bool lookup_eval(request *r, int64_t id, store_eval *e, enum MHD_Result *answered);

#endif
