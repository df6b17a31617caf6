/* jobs/snap_keep.h: what the worker keeps as a job trains: the record of
 * every validated epoch (epochs.json), which snapshots stay on disk
 * (keep_checkpoints) and when training stops early (early_stopping).
 * The decisions are pure functions of numbers, unit-tested in
 * tests/unit/test_snap_keep.c; jobs/runner.c applies them.
 *
 * epochs.json (SNAP_EPOCHS_JSON, in the job folder), rewritten atomically
 * after each epoch's validation, before that epoch's snapshot is saved:
 *   {"items": [{"epoch": 1, "step": 938,
 *               "metrics": {"val/loss": 0.09, "val/accuracy": 0.97,
 *                           "train/loss": 0.2, "train/accuracy": 0.94}}, ...]}
 * one item per epoch, in order, whether or not the epoch was snapshotted
 * (snapshot_interval > 1), with the epoch's validation metrics and the mean
 * of its training steps' loss and accuracy (a metric that was not finite is
 * left out; for an epoch a cancel interrupted, the training means cover
 * the steps after the resume, which is why only validation metrics can be
 * checkpoint_metric or early_stopping.metric). It is early stopping's
 * memory across a resume: a requeued
 * worker that resumes from the checkpoint of epoch E (or of a step inside
 * epoch E + 1) drops the items after E and replays the rest through
 * es_update, so the run stops where the uninterrupted one would have. A job
 * folder from before epochs.json resumes with its early-stopping count
 * starting at the resume.
 */
#ifndef KILN_JOBS_SNAP_KEEP_H
#define KILN_JOBS_SNAP_KEEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "jobs/jobcfg.h"      /* jobcfg_early_stop */
#include "jobs/snapshots.h"   /* snap_list, snap_metric */

#define SNAP_EPOCHS_JSON "epochs.json"

/* ---- which snapshots stay ---------------------------------------------------- */

/* With keep_checkpoints = keep (0: keep all), which of l's items stay: the
 * last `keep` (l's items are oldest first), the best (l->best, when not 0)
 * and the epoch `pinned` (the checkpoint a resume needs; 0: none). Writes
 * keep_out[i] for each of l->n items and returns how many go. */
int snap_keep_plan(const snap_list *l, int keep, int pinned, bool *keep_out);

/* ---- early stopping ---------------------------------------------------------- */

typedef struct es_state {
    int best_epoch;           /* the epoch of the best value so far; 0: none yet */
    double best;
    int last_epoch;           /* the last epoch fed in */
    int wait;                 /* epochs since best_epoch without an improvement */
    bool stop;                /* the run should stop after the last epoch fed in */
} es_state;

void es_init(es_state *s);
/* Feeds epoch's value of cfg->metric (NaN: not measured, never an
 * improvement). The first finite value is the first best; a later one is
 * better only by more than min_delta (snap_metric_improves: a tie is no
 * improvement). Sets and returns s->stop: wait has reached patience. */
bool es_update(es_state *s, const jobcfg_early_stop *cfg, int epoch, double value);
/* "stopped early after epoch 14: val/loss has not improved for 5 epochs;
 * best epoch 9" into buf, for a state that says stop. */
void es_message(const es_state *s, const jobcfg_early_stop *cfg, char *buf, size_t n);

/* ---- the record of the epochs (epochs.json) ---------------------------------- */

/* Reads dir's epochs.json; a missing file is an empty record. Returns the
 * "items" array (owned by the caller), or NULL with err set (an unreadable
 * or malformed file). */
cJSON *snap_epochs_load(const char *dir, char *err, size_t errlen);
/* Writes items as dir's epochs.json, atomically. 0, or -1 with err set. */
int snap_epochs_save(const char *dir, const cJSON *items, char *err, size_t errlen);
/* Drops the items of epochs after `epoch`; returns how many went. */
int snap_epochs_truncate(cJSON *items, int epoch);
/* The value of metric m in an item, NaN when it has none. */
double snap_epochs_value(const cJSON *item, snap_metric m);

#endif
