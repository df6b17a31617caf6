/* db/sweep_store.h: hyper-parameter sweeps and their trials in the store.
 *
 * Conventions as store.h: 0, STORE_NOT_FOUND, or -1 on a database error;
 * strings in returned structs are owned by the struct (free with the *_clear
 * and *_list_free functions). A sweep's trial rows are the controller's
 * state (server/sweeps.c): what it decided survives a restart.
 */
#ifndef KILN_DB_SWEEP_STORE_H
#define KILN_DB_SWEEP_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "db/store.h"

typedef struct store_sweep {
    int64_t id;
    char *name;            /* "" when none */
    char *method;          /* "grid", "random", "asha" */
    char *status;          /* "running", "done", "cancelled", "failed" */
    char *spec_json;       /* the normalized request (jobs/sweep.h sweep_spec_to_json) */
    int best_trial;        /* -1: none yet */
    double best_metric;    /* NaN when none */
    char *error;           /* why it failed, else NULL */
    char *created_at, *finished_at;
    int64_t owner_id;      /* 0: none */
} store_sweep;

typedef struct store_trial {
    int64_t sweep_id;
    int trial;             /* its number in the sweep, from 0 */
    int64_t job_id;        /* 0: none (it could not be made, or its job was deleted) */
    char *params_json;     /* its values: {"solver.lr": 0.01, ...} */
    int rung;              /* asha: its rung; else 0 */
    char *state;           /* jobs/sweep.h sweep_tstate_name */
    char *metrics_json;    /* the metric at the end of each rung completed: [0.91, null, ...] */
    char *message;         /* "stopped by the sweep at rung 0 (1 epoch)", a failure's reason; or NULL */
} store_trial;

/* Inserts a sweep in status "running"; *id receives its id. */
int store_sweep_insert(store *s, const char *name, const char *method, const char *spec_json,
                       int64_t owner, int64_t *id);
int store_sweep_get(store *s, int64_t id, store_sweep *out);
/* Sweeps of user `owner` (0: all), newest first. */
int store_sweep_list_for(store *s, int64_t owner, store_sweep **out, size_t *n);
/* Ids of sweeps in a status, oldest first. */
int store_sweep_ids_with_status(store *s, const char *status, int64_t **ids, size_t *n);
/* Records the best trial so far (-1 and NaN: none). */
int store_sweep_set_best(store *s, int64_t id, int best_trial, double best_metric);
/* Ends a running sweep: status "done", "cancelled" or "failed" (error may be
 * NULL), finished_at now. STORE_NOT_FOUND when it is not running. */
int store_sweep_finish(store *s, int64_t id, const char *status, const char *error);
/* Deletes a sweep and its trial rows; its jobs stay (their sweep_id NULL). */
int store_sweep_delete(store *s, int64_t id);
void store_sweep_clear(store_sweep *w);
void store_sweep_list_free(store_sweep *list, size_t n);

/* Inserts trial t (state, rung, params, job) and marks its job's sweep_id
 * (when t->job_id is not 0), in one transaction. */
int store_trial_insert(store *s, const store_trial *t);
/* Updates a trial's job_id, rung, state, metrics_json and message. */
int store_trial_update(store *s, const store_trial *t);
/* A sweep's trials by their number. */
int store_trial_list(store *s, int64_t sweep_id, store_trial **out, size_t *n);
void store_trial_clear(store_trial *t);
void store_trial_list_free(store_trial *list, size_t n);

/* asha's promotion, in one transaction: job job_id, done, is queued again
 * (no error, no start or finish time) with epochs, steps and its new config,
 * and trial t gets its new rung and state ("running"). STORE_NOT_FOUND (and
 * nothing changed) when the job is not done. */
int store_sweep_promote(store *s, const store_trial *t, int64_t job_id, int epochs, int64_t steps,
                        const char *config_json);

#endif
