/* jobs/hparams.h: a job's hyper-parameters, flattened from its resolved
 * config (job.json, jobs/jobcfg.h) to dotted names: "solver.lr",
 * "solver.momentum", "batch_size", "epochs", "precision", "network_name",
 * "dataset_id", "seed", "lr_policy.type", "augmentation.mirror", ...
 *
 * The one place that says which of a job's fields are hyper-parameters: the
 * TensorBoard HParams records (jobs/runner.c) and anything that shows a job's
 * parameters side by side read them from here.
 */
#ifndef KILN_JOBS_HPARAMS_H
#define KILN_JOBS_HPARAMS_H

#include <cjson/cJSON.h>

/* Returns a new flat object (the caller's, cJSON_Delete) of name -> number,
 * string or bool, in the config's order: nested objects are walked with
 * their keys joined by "."; arrays, nulls, the network spec, paths and
 * bookkeeping fields (id, name, the folders, loader_threads) are left out. NULL only when
 * out of memory; a config that is not an object gives an empty object. */
cJSON *hparams_from_config(const cJSON *resolved);

#endif
