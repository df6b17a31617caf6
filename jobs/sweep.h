/* jobs/sweep.h: hyper-parameter sweeps, the pure part (no store, no server).
 *
 * A sweep request (POST /api/v1/sweeps) is parsed here once into a
 * sweep_spec: the base job request, the search space (one parameter per
 * dotted job-field path), the method, the metric and its direction, the
 * trials run at once. From the spec this module makes, deterministically:
 *   - each trial's values (sweep_trial_values): grid enumerates the product of
 *     the value lists (the last parameter varies fastest); random and asha
 *     sample trial i from (seed, i) alone, so a restarted server makes the
 *     same trial i again and no generator state needs storing; over a space
 *     of lists alone with no more trials than points, they take the points
 *     in a seeded random order instead (no point twice);
 *   - each trial's job request (sweep_trial_request): the base with the values
 *     set by path (jobs/jobreq.h), and for asha the rung's epochs;
 *   - what the controller does next with a free slot (sweep_next): start a
 *     new trial, promote a waiting asha trial, wait, or end.
 *
 * ASHA (Li et al., "A System for Massively Parallel Hyperparameter Tuning",
 * as Determined runs it): rungs from the top down, max_epochs and then
 * max_epochs / eta^k (rounded) while at least min_epochs: 1/3/9 epochs for
 * max 9, 1/3/10 for max 10. A trial trains to its rung's epochs; when a slot is
 * free the controller looks from the highest rung down for a trial waiting at
 * rung k that is among the top floor(n_k / eta) of the n_k trials that have
 * completed rung k so far (promoted ones included), and promotes the best
 * such one; otherwise it starts a new trial while trials remain. A trial
 * never promoted is stopped by the sweep when nothing else can happen.
 * eta defaults to 3 (rungs 1, 3, 9 for 1..9 epochs: three rungs in a small
 * budget).
 */
#ifndef KILN_JOBS_SWEEP_H
#define KILN_JOBS_SWEEP_H

#include <stdbool.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include "base/err.h"    /* api_error */

/* The limits of a sweep request, in one place (sweep.c's checks, the API's
 * OpenAPI text and the form read these). */
#define SWEEP_MAX_PARAMS 16          /* parameters in a space */
#define SWEEP_MAX_VALUES 100         /* values in one "values" list */
#define SWEEP_MAX_TRIALS 1000        /* trials of a sweep (a grid's product too) */
#define SWEEP_MAX_PARALLEL 64        /* trials run at once */
#define SWEEP_MAX_RUNGS 16
#define SWEEP_PATH_MAX 96            /* bytes of a parameter's path */
#define SWEEP_NAME_MAX 200
#define SWEEP_DEFAULT_ETA 3
#define SWEEP_DEFAULT_PARALLEL 2

typedef enum sweep_method { SWEEP_GRID, SWEEP_RANDOM, SWEEP_ASHA } sweep_method;
typedef enum sweep_dist { DIST_VALUES, DIST_UNIFORM, DIST_LOG_UNIFORM, DIST_INT_UNIFORM } sweep_dist;

typedef struct sweep_param {
    char path[SWEEP_PATH_MAX + 1];   /* "solver.lr" */
    sweep_dist dist;
    cJSON *values;                   /* DIST_VALUES: the list (owned) */
    double lo, hi;                   /* the ranges: [lo, hi] */
} sweep_param;

typedef struct sweep_spec {
    char name[SWEEP_NAME_MAX + 1];   /* "": none */
    sweep_method method;
    cJSON *base;                     /* the base job request (owned) */
    sweep_param params[SWEEP_MAX_PARAMS];
    int nparams;
    int trials;                      /* grid: the product; random, asha: as asked */
    int parallel;
    char metric[48];                 /* "val/accuracy" */
    bool maximize;                   /* "mode": "max" */
    uint64_t seed;                   /* the sampling's (random, asha) */
    int min_epochs, max_epochs, eta; /* asha */
    int rungs[SWEEP_MAX_RUNGS];      /* asha: each rung's epochs, ascending, the last max_epochs */
    int nrungs;
} sweep_spec;

/* Reads a POST /api/v1/sweeps body: {"name", "base", "space", "method",
 * "trials", "parallel", "metric", "mode", "seed", "min_epochs", "max_epochs",
 * "eta"}. Checks the structure only (the base's fields are checked by
 * sweep_check_requests and jobspec): unknown fields, a space entry that is
 * not exactly one of {"values": [...]}, {"uniform": [lo, hi]},
 * {"log_uniform": [lo, hi]} (lo > 0), {"int_uniform": [lo, hi]} (integers),
 * a range in a grid, trials missing for random/asha or given for grid, epochs
 * in an asha space. Errors are 400 invalid_field / unknown_field /
 * missing_field naming the path ("space.solver.lr: ..."). Returns 0 with
 * *out filled (free with sweep_spec_free), or -1 with e and *out empty. */
int sweep_spec_parse(const cJSON *body, sweep_spec *out, api_error *e);
void sweep_spec_free(sweep_spec *s);   /* NULL is a no-op */

/* The spec as a normalized request (what is stored and shown: defaults
 * filled); the caller's, NULL when out of memory. sweep_spec_parse of it
 * gives the same spec. */
cJSON *sweep_spec_to_json(const sweep_spec *s);

const char *sweep_method_name(sweep_method m);

/* Trial i's values: {"solver.lr": 0.01, ...} in the space's order; the
 * caller's, NULL when out of memory or i out of [0, trials). */
cJSON *sweep_trial_values(const sweep_spec *s, int i);

/* Trial request: a copy of the base with values set by path and, when
 * epochs > 0, "epochs" set (asha's rung; asha also sets snapshot_interval to
 * a divisor of every rung so that each rung ends on a checkpoint). Returns
 * the request (the caller's) or NULL with e (400 naming the path). */
cJSON *sweep_trial_request(const sweep_spec *s, const cJSON *values, int epochs, api_error *e);

/* Checks the job requests of the sweep's trials with the job rules
 * (jobcfg_from_json): every grid point; for random and asha the first 100
 * samples and, for each range, a trial at its low and its high end; for asha
 * also that the learning-rate policy does not depend on the run's length
 * (polynomial, cosine: each promotion would change it) and that it has no
 * early_stopping (the sweep decides when trials stop). Returns 0, or -1 with
 * e (400) naming the trial's values. */
int sweep_check_requests(const sweep_spec *s, api_error *e);

/* ---- the controller's decisions ------------------------------------------ */

typedef enum sweep_tstate {
    TRIAL_RUNNING,    /* its job is queued or running (toward its rung's epochs) */
    TRIAL_WAITING,    /* asha: done at a rung below the top, not yet decided */
    TRIAL_DONE,       /* finished (grid, random; asha at the top rung) */
    TRIAL_STOPPED,    /* asha: done at its rung, not promoted: stopped by the sweep */
    TRIAL_FAILED,     /* its job failed (or could not be made) */
    TRIAL_CANCELLED,  /* its job was cancelled */
} sweep_tstate;

const char *sweep_tstate_name(sweep_tstate t);
int sweep_tstate_parse(const char *name, sweep_tstate *out);   /* 0 or -1 */

typedef struct sweep_trial {
    sweep_tstate state;
    int rung;                          /* asha: the rung it trains to or finished; else 0 */
    double metrics[SWEEP_MAX_RUNGS];   /* the metric at the end of each rung it completed (NaN: none) */
} sweep_trial;

typedef enum sweep_action { SWEEP_NEW, SWEEP_PROMOTE, SWEEP_WAIT, SWEEP_END } sweep_action;

/* What to do with one free slot, given the n trials made so far (index =
 * trial number): SWEEP_NEW (start trial n; n < trials), SWEEP_PROMOTE
 * (*promote: the trial to take to its next rung), SWEEP_WAIT (trials are
 * running and nothing else can start), SWEEP_END (nothing runs, nothing can
 * start: the sweep is over). The caller checks that a slot is free (running <
 * parallel) before asking for NEW or PROMOTE; with none free it asks anyway
 * and gets WAIT or END the same way (pass slot_free false). */
sweep_action sweep_next(const sweep_spec *s, const sweep_trial *t, int n, bool slot_free, int *promote);

/* Is a better than b for the spec's direction? NaN is worse than any number. */
bool sweep_better(const sweep_spec *s, double a, double b);

#endif
