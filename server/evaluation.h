/* server/evaluation.h: the evaluation routes (jobs/evaluation.h does the work).
 *
 *   POST   /api/v1/jobs/{id}/evaluations     {"dataset_id","split","epoch"} -> 201 evaluation
 *   GET    /api/v1/jobs/{id}/evaluations     the job's evaluations, newest first (headlines)
 *   GET    /api/v1/evaluations/{id}          status, progress and, once done, the result
 *   POST   /api/v1/evaluations/{id}/cancel   202; 409 evaluation_finished when it has ended
 *   DELETE /api/v1/evaluations/{id}          204; 409 evaluation_active while queued or running
 * Representations: render_evaluation (server/render.h). Errors: eval_create's.
 */
#ifndef KILN_SERVER_EVALUATION_H
#define KILN_SERVER_EVALUATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/http.h"

int evaluation_create(request *r);
int evaluation_list(request *r);
int evaluation_get(request *r);
int evaluation_cancel(request *r);
int evaluation_delete(request *r);

/* Before job_id is deleted (its evaluations go with it): false with a 409
 * evaluation_active (or a 500) answered in *answered while one of them is
 * queued or running; else true with *ids (malloc'ed, may be NULL) and *n
 * its evaluations, whose folders evaluation_remove_dirs removes once the
 * job is gone. */
bool evaluation_before_job_delete(request *r, int64_t job_id, int64_t **ids, size_t *n,
                                  enum MHD_Result *answered);
void evaluation_remove_dirs(server *srv, const int64_t *ids, size_t n);

#endif
