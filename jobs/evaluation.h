/* jobs/evaluation.h: evaluating a job's model on a dataset split.
 *
 * POST /api/v1/jobs/{id}/evaluations {"dataset_id", "split", "epoch"}
 * becomes an evaluation here (eval_create): the request is checked against
 * the job's model (model_bundle_from_job with the snapshot selection: its
 * errors are snap_resolve's) and the dataset's record in the store (ready,
 * the split present and not empty, the same class names in the same order,
 * the image size the model was trained on), the row is inserted queued and
 * <data>/evaluations/<id>/eval.json written (atomically) before the
 * scheduler can see it. The scheduler (jobs/scheduler.h) runs it as
 * `kiln evaluate --eval-dir DIR` (eval_main), which checks the same things
 * again with the same functions, runs the split through the loader in
 * validation mode (centre crop, no mirror) with the model's preprocessing
 * (its training dataset's mean and scale), net_predict in batches of the
 * job's batch size, counts (jobs/eval_metrics.h), and writes result.json.
 *
 * eval.json (the resolved request):
 *   {"id", "job_id", "job_dir", "dataset_id", "dataset_dir", "split",
 *    "selection": "final"|"best"|"N" (as asked), "weights": "final" or N
 *    (the weights "selection" meant when it was asked: pinned, so that a
 *    later snapshot does not change what runs), "epoch" (theirs, 0 when not
 *    known), "batch_size", "devices": {"kind": "cpu"|"cuda", "count": 1}}
 * A job that trained on GPUs is evaluated on one GPU (any free one), else on
 * the CPU.
 *
 * The worker reports JSON lines on stdout as the training worker does
 * (jobs/runner.h): {"t":"status","status":"running"}, {"t":"progress",
 * "done":N,"total":T} (images), then {"t":"done"} after result.json is in
 * place, or {"t":"error","message"}, or {"t":"status","status":"cancelled"}
 * on SIGTERM (exit 0). Exit status: 0 done or cancelled, 1 failed, 2 a bad
 * command line.
 */
#ifndef KILN_JOBS_EVALUATION_H
#define KILN_JOBS_EVALUATION_H

#include <limits.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "base/err.h"            /* api_error */
#include "db/store.h"            /* store */
#include "jobs/jobcfg.h"         /* jobcfg_devices */
#include "jobs/model_bundle.h"   /* model_prep */
#include "jobs/snapshots.h"      /* snap_select */

#define EVAL_RESULT_MAX ((size_t)256 << 20)   /* result.json's size at most */
#define EVAL_SPEC_MAX ((size_t)1 << 20)       /* eval.json's */

/* The splits a dataset may have: "train", "val", "test" and their files. */
typedef enum eval_split { EVAL_SPLIT_TRAIN, EVAL_SPLIT_VAL, EVAL_SPLIT_TEST, EVAL_SPLIT_COUNT } eval_split;
const char *eval_split_name(eval_split s);         /* NULL out of range */
const char *eval_split_file(eval_split s);         /* LAYOUT_*_SPLIT */
int eval_split_parse(const char *name, eval_split *out);   /* 0, or -1 for an unknown name */

typedef struct eval_spec {
    int64_t id, job_id, dataset_id;
    char job_dir[PATH_MAX], dataset_dir[PATH_MAX];
    eval_split split;
    char selection[16];       /* as asked */
    snap_select weights;      /* resolved: SNAP_FINAL (model.safetensors) or SNAP_EPOCH */
    int epoch;
    int batch_size;
    jobcfg_devices devices;
} eval_spec;

/* eval.json's object for s, owned by the caller; NULL when out of memory. */
cJSON *eval_spec_to_json(const eval_spec *s);
/* Reads dir/eval.json, checking every field. 0, or -1 with e (500
 * bad_eval_json naming the field, or the file's read error). */
int eval_spec_load(const char *dir, eval_spec *out, api_error *e);

/* The dataset's classes must be the model's, the same names in the same
 * order: 0, or -1 with e 422 class_mismatch naming the first difference
 * ("the dataset has classes [a,b,x]; the model was trained on [a,b,c]:
 * class 3 differs (x vs c)"). */
int eval_check_classes(const char *const *model, int nmodel, const char *const *data, int ndata,
                       api_error *e);
/* The dataset's stored images (c x h x w) must be the size the model's
 * dataset stored (prep's c, h, w): 0, or -1 with e 422 shape_mismatch
 * naming both. */
int eval_check_shape(const model_prep *p, int c, int h, int w, api_error *e);

/* POST /api/v1/jobs/{job_id}/evaluations: body {"dataset_id" (default: the
 * job's dataset), "split" (required), "epoch" (absent/"final", "best" or N)}.
 * Returns 0 with *id (the evaluation, queued), or -1 with e:
 *   400 invalid_field / unknown_field / missing_field (the body),
 *   404 job_not_found, dataset_not_found, snapshot_not_found,
 *   409 dataset_not_ready, no_weights, no_best_snapshot,
 *   422 split_not_found (naming the splits it has), split_empty,
 *       class_mismatch, shape_mismatch,
 *   500 internal_error. */
int eval_create(store *st, const char *data_dir, int64_t job_id, const cJSON *body, int64_t *id,
                api_error *e);

/* `kiln evaluate --eval-dir DIR [--gpus N]`: argv starts at "evaluate".
 * Returns the exit status. */
int eval_main(int argc, char **argv);

#endif
