/* jobs/snapshots.h: a job's saved epochs, which one is best, and which
 * weights file a request for "epoch N", "best" or the final model means.
 *
 * The worker keeps <job>/snapshots.json (LAYOUT_SNAPSHOTS), rewritten
 * atomically after every snapshot and every prune:
 *   {"metric": "val/accuracy", "best": 9, "final_epoch": 14,
 *    "items": [{"epoch": 1, "step": 938, "file": "checkpoints/epoch-1.safetensors",
 *               "metrics": {"val/loss": 0.09, "val/accuracy": 0.97, "train/loss": 0.2, ...}}, ...]}
 * "items" lists the snapshots whose files exist (keep_checkpoints removes
 * files and their items together), oldest first; "best" is the epoch of the
 * best item by "metric" (ties go to the earlier epoch), or null when no item
 * has that metric. A job folder without snapshots.json (a job from before
 * it existed, or one that has not reached its first snapshot) is read from
 * its checkpoints/epoch-N.safetensors files, without metrics and so without
 * a best.
 *
 * One table of the metrics a snapshot can be judged by (snap_metrics), read
 * by the worker, jobcfg (checkpoint_metric, early_stopping.metric), the
 * snapshot list of the API and `kiln infer`/`kiln export`.
 */
#ifndef KILN_JOBS_SNAPSHOTS_H
#define KILN_JOBS_SNAPSHOTS_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "base/err.h"         /* api_error */

#define LAYOUT_SNAPSHOTS "snapshots.json"     /* in a job's folder */
#define SNAP_EPOCH_MAX 1000000

/* ---- the metrics a snapshot is judged by ------------------------------------- */

typedef enum snap_metric {
    SNAP_VAL_ACCURACY,        /* higher is better: the default checkpoint_metric */
    SNAP_VAL_LOSS,            /* lower is better */
    SNAP_TRAIN_ACCURACY,
    SNAP_TRAIN_LOSS,
    SNAP_METRIC_COUNT
} snap_metric;

const char *snap_metric_name(snap_metric m);            /* "val/accuracy"; NULL out of range */
int snap_metric_parse(const char *name, snap_metric *m); /* 0, or -1 for an unknown name */
bool snap_metric_higher_better(snap_metric m);
/* True when value a is better than b by more than min_delta (min_delta >= 0). */
bool snap_metric_improves(snap_metric m, double a, double b, double min_delta);

/* ---- which weights ------------------------------------------------------------ */

typedef enum snap_kind {
    SNAP_FINAL,               /* model.safetensors, or before the end the latest snapshot */
    SNAP_BEST,                /* "best": the best snapshot by the job's metric */
    SNAP_EPOCH,               /* a numbered epoch's snapshot */
} snap_kind;

typedef struct snap_select {
    snap_kind kind;
    int epoch;                /* SNAP_EPOCH: 1..SNAP_EPOCH_MAX */
} snap_select;

/* Parses a request's epoch: NULL or "" or "final" is SNAP_FINAL, "best",
 * or a decimal 1..SNAP_EPOCH_MAX. Returns 0, or -1 with e (400
 * invalid_field naming `field`). */
int snap_select_parse(const char *s, const char *field, snap_select *out, api_error *e);
/* The same from JSON: absent/null, "best", "final" or an integer. */
int snap_select_from_json(const cJSON *v, const char *field, snap_select *out, api_error *e);

/* ---- a job's snapshots ------------------------------------------------------- */

typedef struct snap_item {
    int epoch;
    int64_t step;
    char file[96];            /* relative to the job folder */
    cJSON *metrics;           /* owned object: tag -> number (may be empty) */
} snap_item;

typedef struct snap_list {
    snap_metric metric;
    int best;                 /* epoch of the best item, 0 when none */
    int final_epoch;          /* "final_epoch": the epochs model.safetensors was trained for,
                               * written by the worker at the end (an early stop ends before
                               * job.json's "epochs"); 0 when not recorded */
    int n;
    snap_item *items;         /* n, oldest first */
} snap_list;

/* Reads job_dir's snapshots (snapshots.json, or the checkpoint files, as
 * above). Returns 0 with *out filled (free with snap_list_free; an empty
 * list is not an error), or -1 with err set. */
int snap_list_load(const char *job_dir, snap_list *out, char *err, size_t errlen);
void snap_list_free(snap_list *l);       /* NULL-safe; leaves *l empty */
/* The item of an epoch, or NULL. */
const snap_item *snap_list_find(const snap_list *l, int epoch);
/* Recomputes l->best from the items' metrics by l->metric. */
void snap_list_pick_best(snap_list *l);
/* The list as JSON (snapshots.json's form, each item with "best": true/false),
 * owned by the caller; NULL when out of memory. */
cJSON *snap_list_to_json(const snap_list *l);
/* Writes job_dir/snapshots.json atomically. Returns 0, or -1 with err set. */
int snap_list_save(const char *job_dir, const snap_list *l, char *err, size_t errlen);

/* The weights file a selection means in job_dir: writes its path into path
 * and the epoch it holds into *epoch (for SNAP_FINAL with model.safetensors:
 * the list's final_epoch, which the worker records, else the caller's
 * epochs (what the job completed or asked for, when the caller has read it
 * already), else job.json's "epochs"), and *final (true for
 * model.safetensors). Errors, as api_error:
 *   404 snapshot_not_found  no snapshot of that epoch (the message lists those kept)
 *   409 no_best_snapshot    "best" asked of a job whose snapshots have no metric
 *   409 no_weights          nothing saved yet
 * Returns 0 or -1 with e. */
int snap_resolve(const char *job_dir, snap_select sel, int epochs, char *path, size_t pathlen,
                 int *epoch, bool *final, api_error *e);

#endif
