/* db/store.h: the SQLite store. Nothing else in kiln touches SQL.
 *
 * One database file (<data>/kiln.db) in WAL mode, synchronous=NORMAL,
 * foreign_keys=ON, a busy timeout; the schema carries PRAGMA user_version and
 * forward migrations run at open. Every statement is prepared with bound
 * parameters. A store handle is safe to use from several threads (calls are
 * serialised inside).
 *
 * Conventions: functions return 0 on success, STORE_NOT_FOUND when the row does
 * not exist, -1 on a database error (with err filled when err is not NULL).
 * Strings in returned structs are owned by the struct; free with the matching
 * *_clear function. Times are RFC 3339 UTC strings ("2026-11-22T08:00:00Z").
 */
#ifndef KILN_DB_STORE_H
#define KILN_DB_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STORE_NOT_FOUND 1

typedef struct store store;

/* Opens (creating if needed) and migrates the database at path. */
store *store_open(const char *path, char *err, size_t errlen);
void store_close(store *s);                  /* NULL is a no-op */
int store_schema_version(store *s);          /* PRAGMA user_version */

/* ---- datasets ------------------------------------------------------------- */

typedef struct store_dataset {
    int64_t id;
    char *name;
    char *status;          /* "importing", "ready", "failed" */
    double progress;       /* 0..1 while importing */
    double eta_seconds;    /* while importing: the seconds left, -1 when not known */
    char *info_json;       /* once ready: classes, shape, counts, mean, resize (JSON from the import's ds_info); else NULL */
    char *error;           /* reason when failed, else NULL */
    char *created_at;
    int64_t owner_id;      /* the user who made it; 0: none (open mode, or its user was removed) */
    bool shared;           /* readable by every user (changed only by its owner or an admin) */
} store_dataset;

/* Inserts a dataset in status "importing"; *id receives its id. */
int store_dataset_insert(store *s, const char *name, int64_t *id, char *err, size_t errlen);
int store_dataset_set_progress(store *s, int64_t id, double progress);   /* ETA unknown */
/* The progress and the seconds left (-1 or a non-finite value: not known). */
int store_dataset_set_progress_eta(store *s, int64_t id, double progress, double eta_seconds);
/* Marks ready with its header, or failed with its reason (info_json NULL). */
int store_dataset_finish(store *s, int64_t id, const char *status, const char *info_json,
                         const char *error);
int store_dataset_get(store *s, int64_t id, store_dataset *out);
int store_dataset_find_by_name(store *s, const char *name, store_dataset *out);
/* All datasets, newest first; *out is a malloc'ed array, free with store_dataset_list_free. */
int store_dataset_list(store *s, store_dataset **out, size_t *n);
/* The datasets user `owner` may read, newest first: its own and the shared
 * ones; owner 0: all (an admin, or a server without users). */
int store_dataset_list_for(store *s, int64_t owner, store_dataset **out, size_t *n);
/* Marks a dataset shared (readable by every user) or not. */
int store_dataset_set_shared(store *s, int64_t id, bool shared);
int store_dataset_delete(store *s, int64_t id);
void store_dataset_clear(store_dataset *d);
void store_dataset_list_free(store_dataset *list, size_t n);

/* ---- jobs ----------------------------------------------------------------- */

typedef struct store_job {
    int64_t id;
    int64_t dataset_id;
    char *status;          /* "queued", "running", "done", "failed", "cancelled" */
    char *config_json;     /* the resolved job config (what job.json holds) */
    char *network;         /* the network's name ("lenet" or the spec's name) */
    char *error;           /* reason when failed, else NULL */
    int epoch, epochs;     /* epochs completed, epochs asked */
    int64_t step, steps;   /* steps done, steps in the whole job */
    double images_per_sec;
    double eta_seconds;    /* -1 when unknown */
    char *created_at, *started_at, *finished_at;   /* NULL until they happen */
    /* early_stopping ended it (store_job_set_stopped_early): the last epoch
     * trained, the best epoch by its metric (0: none), the reason; 0/0/NULL
     * otherwise */
    int stopped_epoch, stopped_best_epoch;
    char *stopped_message;
    int64_t owner_id;      /* the user who made it; 0: none */
    int64_t sweep_id;      /* the sweep it is a trial of (db/sweep_store.h); 0: none */
    /* Issue 16 (migration 7): the user's name for it ("" none; initialised
     * from the config's "name"), tags (a JSON array of strings), notes ("" none),
     * precision ("fp32", "amp-bf16", "amp-fp16", from the config) and its
     * dataset's name (NULL when the dataset row is gone). */
    char *name, *tags_json, *notes, *precision, *dataset_name;
    /* Issue 17 (migration 9): its place in the queue, higher first
     * (JOBCFG_PRIORITY_MIN..MAX; from the config's "priority" at insert, then
     * store_job_set_priority), and the devices its worker was given, a JSON
     * array of strings (["cpu"], ["cuda:0","cuda:1"]); NULL while it has not
     * started since it was last queued. */
    int priority;
    char *devices_json;
} store_job;

int store_job_insert(store *s, int64_t dataset_id, const char *network, const char *config_json,
                     int epochs, int64_t *id, char *err, size_t errlen);
/* Sets status; "running" stamps started_at, a final status stamps finished_at.
 * error may be NULL. */
int store_job_set_status(store *s, int64_t id, const char *status, const char *error);
int store_job_set_progress(store *s, int64_t id, int epoch, int64_t step, int64_t steps,
                           double images_per_sec, double eta_seconds);
/* Records that early stopping ended the job after `epoch` (the worker's
 * {"t":"stopped_early"} report); message may not be NULL. */
int store_job_set_stopped_early(store *s, int64_t id, int epoch, int best_epoch, const char *message);
/* Puts a failed or cancelled job back in the queue (POST .../resume): status
 * "queued", no error, no start or finish time. Returns 0, STORE_NOT_FOUND
 * when there is no such job or it is in another status (nothing changed), -1
 * on an error. One statement, so two resumes cannot both succeed. */
int store_job_requeue_ended(store *s, int64_t id);
/* Replaces the stored config (jobspec stores it again once the id is in it). */
int store_job_set_config(store *s, int64_t id, const char *config_json);
int store_job_get(store *s, int64_t id, store_job *out);
int store_job_list(store *s, store_job **out, size_t *n);      /* newest first */
/* The jobs of user `owner`, newest first; owner 0: all. */
int store_job_list_for(store *s, int64_t owner, store_job **out, size_t *n);
/* Changes what a user may edit on a job; NULL leaves that field as it is.
 * tags_json must be a JSON array of strings (the caller validated it).
 * 0, STORE_NOT_FOUND (no such job), -1. */
int store_job_set_meta(store *s, int64_t id, const char *name, const char *tags_json,
                       const char *notes);

/* Changes a queued job's priority. 0; STORE_NOT_FOUND when there is no such
 * job or it is not queued (nothing changed: one statement, so a job that
 * starts meanwhile keeps its priority); -1. The range is the caller's check. */
int store_job_set_priority(store *s, int64_t id, int priority);

/* ---- the jobs list: filters, sort and keyset paging (db/job_list.c) ------ */

typedef enum store_job_sort {
    STORE_JOB_SORT_CREATED,    /* by id: the creation order */
    STORE_JOB_SORT_NAME,       /* case-insensitive */
    STORE_JOB_SORT_STATUS,
    STORE_JOB_SORT_NETWORK,
    STORE_JOB_SORT_DATASET,    /* the dataset's id (its index; by name would sort every row) */
    STORE_JOB_SORT_EPOCHS,
    STORE_JOB_SORT_PROGRESS,
    STORE_JOB_SORT_COUNT
} store_job_sort;

/* The names of the sort keys ("created", "name", ...), indexed by
 * store_job_sort, NULL-terminated. */
extern const char *const store_job_sort_names[];
/* Whether a sort key's values are numbers (else texts; created: only the id). */
bool store_job_sort_numeric(store_job_sort sort);

/* A place in a sorted list: the sort value of a row and its id. The next
 * page starts after it. A text value is owned (store_job_key_clear). */
typedef struct store_job_key {
    int64_t id;
    double num;            /* a numeric sort's value */
    char *text;            /* a text sort's value */
} store_job_key;

void store_job_key_clear(store_job_key *k);

#define STORE_JOB_STATUSES_MAX 5

typedef struct store_job_query {
    int64_t owner;                      /* 0: every job; else only owner_id's (-1: none) */
    const char *statuses[STORE_JOB_STATUSES_MAX];   /* any of these; nstatuses 0: any status */
    size_t nstatuses;
    int64_t dataset_id;                 /* 0: any */
    int64_t sweep_id;                   /* the trials of this sweep; 0: any job */
    const char *network, *precision;    /* exact; NULL: any */
    const char *tag;                    /* jobs carrying this tag; NULL: any */
    const char *text;                   /* search: a substring (case-insensitive for ASCII) of
                                           the name, network, notes or tags, or the id
                                           ("12" or "#12"); NULL: no search */
    store_job_sort sort;
    bool desc;                          /* ties broken by id in the same direction */
    size_t limit;                       /* rows at most; >= 1 */
    const store_job_key *after;         /* NULL: from the start; else after this place */
} store_job_query;

/* The jobs matching q, in its order: *out (free with store_job_list_free)
 * and *n <= q->limit. When more follow, *more is true and next is the last
 * row's place (pass it as q->after for the next page; clear it); else next
 * is cleared. total (NULL: not counted) receives how many jobs match q's
 * filters, all pages together. A job whose sort value changes between pages
 * may move past the place and show twice or not at all; any other job shows
 * exactly once across the pages, new jobs included when they sort after the
 * place. Validating q (statuses, limits) is the caller's; a status that does
 * not exist matches nothing. 0 or -1 (logged). */
int store_job_query_run(store *s, const store_job_query *q, store_job **out, size_t *n, bool *more,
                        store_job_key *next, int64_t *total);

/* The oldest queued job's id in *id, or STORE_NOT_FOUND. */
int store_job_next_queued(store *s, int64_t *id);
/* Ids of jobs in a status (e.g. "running", for recovery at start-up). */
int store_job_ids_with_status(store *s, const char *status, int64_t **ids, size_t *n);
int store_job_delete(store *s, int64_t id);
void store_job_clear(store_job *j);
void store_job_list_free(store_job *list, size_t n);

/* ---- metrics -------------------------------------------------------------- */

typedef struct store_metric {
    int64_t step;
    double epoch;
    char tag[48];          /* "train/loss", "val/accuracy", "lr", ... */
    double value;
    double wall_time;      /* unix seconds */
} store_metric;

int store_metric_insert(store *s, int64_t job_id, const store_metric *m);
/* Metrics of a job with step > since_step (use -1 for all), in insertion order. */
int store_metric_list(store *s, int64_t job_id, int64_t since_step, store_metric **out, size_t *n);
/* Paging a job's metrics in insertion order without holding anything
 * between pages (the SSE replay, server/sse.c). A metric's row id grows
 * with insertion.
 * store_metric_page: up to max metrics with after_row < row id <= upto_row
 * into out (an array of max, the caller's); *n of them, and *last_row the
 * row id of the last one (untouched when *n is 0). 0 or -1. */
int store_metric_page(store *s, int64_t job_id, int64_t after_row, int64_t upto_row,
                      store_metric *out, size_t max, size_t *n, int64_t *last_row);
/* The row id of the job's newest metric (0 when it has none). 0 or -1. */
int store_metric_last_row(store *s, int64_t job_id, int64_t *row);
/* The row id of the job's k-th metric (1-based, insertion order) among those
 * with row id <= upto_row: 0, STORE_NOT_FOUND when there are fewer than k, -1. */
int store_metric_row_at(store *s, int64_t job_id, int64_t k, int64_t upto_row, int64_t *row);
/* How many metrics the job has with row id <= upto_row. 0 or -1. */
int store_metric_count(store *s, int64_t job_id, int64_t upto_row, int64_t *n);
/* Deletes a job's metrics with step > after_step (-1: all), e.g. when a job is
 * requeued to run again from its start or from a checkpoint. */
int store_metric_delete(store *s, int64_t job_id, int64_t after_step);
/* The latest value of each tag, for the job view. */
int store_metric_latest(store *s, int64_t job_id, store_metric **out, size_t *n);

/* ---- evaluations -------------------------------------------------------- */

/* An evaluation of a job's model on a dataset split (jobs/evaluation.h). */
typedef struct store_eval {
    int64_t id;
    int64_t job_id, dataset_id;
    char *split;           /* "train", "val", "test" */
    char *selection;       /* the weights asked for: "final", "best" or an epoch number */
    int epoch;             /* the epoch those weights are from (0: not known) */
    char *status;          /* "queued", "running", "done", "failed", "cancelled" */
    double progress;       /* 0..1 */
    char *result_json;     /* once done: the result (result.json's text); else NULL */
    char *error;           /* reason when failed, else NULL */
    char *created_at, *started_at, *finished_at;   /* NULL until they happen */
    int64_t owner_id;      /* the user who made it; 0: none */
    char *devices_json;    /* the devices its worker was given, as a job's (store_job) */
} store_eval;

/* Inserts an evaluation in status "queued"; *id receives its id. */
int store_eval_insert(store *s, int64_t job_id, int64_t dataset_id, const char *split,
                      const char *selection, int epoch, int64_t *id, char *err, size_t errlen);
/* Sets status as store_job_set_status does ("running" stamps started_at,
 * "queued" clears it and the progress, a final status stamps finished_at). */
int store_eval_set_status(store *s, int64_t id, const char *status, const char *error);
int store_eval_set_progress(store *s, int64_t id, double progress);
/* Ends an evaluation: status "done" with its result (progress 1), or
 * "failed"/"cancelled" with error (may be NULL) and no result. */
int store_eval_finish(store *s, int64_t id, const char *status, const char *result_json,
                      const char *error);
int store_eval_get(store *s, int64_t id, store_eval *out);
/* A job's evaluations, newest first (free with store_eval_list_free). */
int store_eval_list_by_job(store *s, int64_t job_id, store_eval **out, size_t *n);
/* A job's evaluations made by user `owner` (0: all), newest first. */
int store_eval_list_by_job_for(store *s, int64_t job_id, int64_t owner, store_eval **out, size_t *n);
/* Ids of evaluations in a status, oldest first. */
int store_eval_ids_with_status(store *s, const char *status, int64_t **ids, size_t *n);
/* How many evaluations use a dataset. */
int store_eval_count_by_dataset(store *s, int64_t dataset_id, size_t *n);
int store_eval_delete(store *s, int64_t id);
void store_eval_clear(store_eval *e);
void store_eval_list_free(store_eval *list, size_t n);

/* ---- owners --------------------------------------------------------------- */

/* What a user may own (issue 15; users and tokens are db/users.h). */
typedef enum store_owned { STORE_OWNED_DATASET, STORE_OWNED_JOB, STORE_OWNED_EVAL } store_owned;

/* Records who made a row (set right after it is inserted); owner 0 clears it. */
int store_set_owner(store *s, store_owned kind, int64_t id, int64_t owner);

/* ---- the queue: jobs and evaluations together ---------------------------- */

typedef enum store_work { STORE_WORK_JOB, STORE_WORK_EVAL } store_work;

typedef struct store_queued {
    store_work kind;
    int64_t id;
    int priority;          /* a job's; an evaluation's is 0 */
} store_queued;

/* Every queued job and evaluation in the order the scheduler starts them:
 * higher priority first (an evaluation has 0), then oldest (by created_at;
 * in the same second jobs before evaluations, then by id). *out is
 * malloc'ed (NULL and 0 for none). */
int store_queue_list(store *s, store_queued **out, size_t *n);

/* Records the devices a job's or an evaluation's worker was given, a JSON
 * array of strings (NULL clears it); a status change back to "queued" clears
 * it too. 0, STORE_NOT_FOUND, -1. */
int store_set_devices(store *s, store_work kind, int64_t id, const char *devices_json);

#endif
