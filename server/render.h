/* server/render.h: the API's JSON representations, in one place.
 *
 * Shapes (the BRIEF's "API representations"):
 *   dataset {"id","name","status","progress","eta_seconds","created_at",
 *            "classes","shape","counts":{"train","val"[,"test"]},"report",
 *            "source":{"type","path"},"error"}      (classes [], shape and
 *            counts null until the dataset is ready, report and source only
 *            then; eta_seconds a number only while importing, once it can be
 *            estimated)
 *   job     {"id","dataset_id","dataset_name","name","tags","notes","network",
 *            "precision","status","created_at","started_at",
 *            "finished_at","epoch","epochs","step","steps","progress",
 *            "images_per_sec","eta_seconds","error","stopped_early","devices",
 *            "config","metrics"}
 *           stopped_early {"epoch","best_epoch" (null: none),"message"} when
 *           early_stopping ended the job (status done), else null
 *           devices {"kind":"cpu"|"cuda","count","gpus":[ids] or null (any
 *           free ones; always null on the CPU)}, or null where the stored
 *           config does not read (render_job_devices)
 *           slurm {"job_id","state","reason","nodes"} (strings null until
 *           Slurm gave them) when the Slurm dispatcher submitted it, else null
 *           (render_slurm)
 *   metric  {"step","epoch","tag","value","wall_time"}
 *   evaluation {"id","job_id","dataset_id","split","selection","epoch",
 *            "status","progress","error","created_at","started_at",
 *            "finished_at","result"}   (epoch: the weights' epoch, null when
 *            not known; result null until done, then the whole result.json
 *            (jobs/evaluation.h), or in a list only its headline: count,
 *            loss, top1_accuracy, top5_accuracy, top_k)
 * Every function returns a new cJSON owned by the caller, or NULL when out of
 * memory (or, for render_job, when the store fails reading metrics).
 */
#ifndef KILN_SERVER_RENDER_H
#define KILN_SERVER_RENDER_H

#include <stdbool.h>

#include <cjson/cJSON.h>

#include "db/store.h"
#include <stdint.h>

cJSON *render_dataset(const store_dataset *d);
/* Reads the job's latest metrics from st for "metrics". */
cJSON *render_job(store *st, const store_job *j);
cJSON *render_metric(const store_metric *m);
/* full: the whole result; else its headline (lists). */
cJSON *render_evaluation(const store_eval *e, bool full);
/* SSE status data: {"status":status,"error":error or null}. */
cJSON *render_status(const char *status, const char *error);
/* {"items":[...]} around an array (taken over; NULL gives NULL). */
cJSON *render_list(cJSON *items);
/* The devices of a job's stored (resolved) config, read by jobcfg_from_json:
 * an object as above, JSON null when config is NULL or does not read as a
 * job config, or NULL when out of memory. config is not taken over. */
cJSON *render_job_devices(const cJSON *config);
/* A job's Slurm fields (db/slurm_store.h) as the "slurm" object above; JSON
 * null when it was never submitted to Slurm; NULL when out of memory. */
cJSON *render_slurm(store *st, int64_t job_id);
/* A job's progress fraction: step/steps in [0, 1], 1 when done. */
double render_job_progress(const store_job *j);

#endif
