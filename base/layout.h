/* base/layout.h: the data directory's layout (DESIGN.md, Storage), in one place.
 *
 *   kiln.db                     the store
 *   datasets/<id>/              a prepared dataset (header.json, *.kds, import.log)
 *   jobs/<id>/                  a job: job.json, log, checkpoints/, event files
 *   uploads/                    uploads in progress
 *   evaluations/<id>/           an evaluation: eval.json (the resolved request),
 *                               result.json, log
 *
 * Every module builds these paths with the functions below. Each writes into
 * buf and returns 0, or -1 when the path does not fit in n bytes (buf then
 * holds a truncated string that must not be used).
 */
#ifndef KILN_BASE_LAYOUT_H
#define KILN_BASE_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#define LAYOUT_DB_FILE "kiln.db"
#define LAYOUT_DATASETS "datasets"
#define LAYOUT_JOBS "jobs"
#define LAYOUT_UPLOADS "uploads"
#define LAYOUT_EVALUATIONS "evaluations"
#define LAYOUT_EVAL_JSON "eval.json"           /* in an evaluation's folder: the resolved request */
#define LAYOUT_EVAL_RESULT "result.json"       /* in an evaluation's folder: the result, once done */
#define LAYOUT_EVAL_LOG "log"                  /* in an evaluation's folder: the worker's stderr */
#define LAYOUT_JOB_JSON "job.json"            /* in a job's folder */
#define LAYOUT_JOB_LOG "log"                  /* in a job's folder */
#define LAYOUT_CHECKPOINTS "checkpoints"     /* in a job's folder: epoch-N, step-S .safetensors */
#define LAYOUT_MODEL "model.safetensors"      /* in a job's folder: the final weights */
#define LAYOUT_DATASET_HEADER "header.json"   /* in a dataset's folder */
#define LAYOUT_TRAIN_SPLIT "train.kds"        /* in a dataset's folder */
#define LAYOUT_VAL_SPLIT "val.kds"            /* in a dataset's folder */
#define LAYOUT_TEST_SPLIT "test.kds"          /* in a dataset's folder, when it has a test split */
#define LAYOUT_IMPORT_LOG "import.log"        /* in a dataset's folder */
#define LAYOUT_MEAN_IMAGE "mean.png"          /* in a dataset's folder: the training split's mean, made on first request */

/* <data>/<sub>: sub is one of LAYOUT_DATASETS, LAYOUT_JOBS, LAYOUT_UPLOADS,
 * LAYOUT_EVALUATIONS. */
int layout_subdir(char *buf, size_t n, const char *data, const char *sub);
/* <data>/datasets/<id> */
int layout_dataset_dir(char *buf, size_t n, const char *data, int64_t id);
/* <data>/jobs/<id> */
int layout_job_dir(char *buf, size_t n, const char *data, int64_t id);
/* <data>/evaluations/<id> */
int layout_eval_dir(char *buf, size_t n, const char *data, int64_t id);
/* <dir>/<name>: a file in a dataset's or a job's folder. */
int layout_file(char *buf, size_t n, const char *dir, const char *name);

#endif
