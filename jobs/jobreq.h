/* jobs/jobreq.h: job requests made from other jobs (clone, sweep trials).
 *
 * A job keeps only its resolved config (job.json); a request that makes the
 * same job again is rebuilt from it, changed by overrides, and then goes
 * through jobspec_create like any POST /api/v1/jobs body, so a clone or a
 * sweep trial is validated by the same rules as a job typed by hand.
 */
#ifndef KILN_JOBS_JOBREQ_H
#define KILN_JOBS_JOBREQ_H

#include <cjson/cJSON.h>
#include "base/err.h"    /* api_error */

/* The POST /api/v1/jobs body that recreates the job whose resolved config
 * (job.json) is `resolved`: the fields a request takes, a built-in network by
 * its name (a custom one as its spec), the devices as a request names them
 * (the CPU: 0; GPUs: the listed ones, else their count). Creating a job from
 * it gives the same resolved config but for its id. Returns the new object
 * (the caller's), or NULL with e (400 invalid_field when `resolved` is not a
 * job config; 500 out of memory). */
cJSON *jobreq_from_config(const cJSON *resolved, api_error *e);

/* Merges overrides into req, as a PATCH-like deep merge: an object merges into
 * the object of the same name (made when absent), any other value replaces
 * the field, and null removes it (so its default applies). Field names and
 * values are checked later by jobspec_create. Returns 0, or -1 with e (400
 * invalid_field when overrides is not an object; 500 out of memory); req may
 * be partly merged then. */
int jobreq_merge(cJSON *req, const cJSON *overrides, api_error *e);

/* Sets the field at a dotted path ("solver.lr", "batch_size") to a copy of
 * value, making the objects on the way; a path through a field that is not
 * an object replaces that field (network "lenet" by "network.x" is refused:
 * 400 invalid_field). Empty path parts are a 400 invalid_field naming the
 * path. Returns 0 or -1 with e. */
int jobreq_set(cJSON *req, const char *path, const cJSON *value, api_error *e);

#endif
