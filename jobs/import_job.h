/* jobs/import_job.h: one dataset import, from its row in the store to ready or
 * failed; the same steps for `kiln import` (jobs/import_cli.c), for an upload
 * (server/upload.c) and for files on the server (a JSON POST /api/v1/datasets).
 *
 *   import_job_begin   inserts the dataset (status "importing") and makes its
 *                      empty folder <data>/datasets/<id>/
 *   import_job_run     runs the importer (jobs/import.h, import_run) into that
 *                      folder, writing its progress and ETA to the store, then
 *                      marks the dataset "ready" with the header the importer
 *                      returns, or "failed" with the reason and removes the
 *                      folder; a cancelled import removes the row too
 *   import_job_start   an upload's import on a background thread: the check
 *                      (import_probe, bounded; when it read the whole archive
 *                      and the options give the size, the estimate of the
 *                      prepared size too: import_estimate_check), begin, a
 *                      hook that lets the caller answer its client, then run
 *   import_job_spawn   run on a background thread, after a begin made on the
 *                      caller's thread (files on the server)
 *   import_job_cancel  asks a running import of this process to stop
 *
 * Cancelling: every import between begin and the end of run is listed in this
 * process. import_job_cancel marks it; the importer sees the mark at its next
 * progress report (the progress callback's return) and stops with "import
 * cancelled"; run then deletes the dataset's row and removes its folder. An
 * import cancelled while it waits for its turn (import_hooks.serial) never
 * starts. import_job_stop_all (the server's shutdown) stops every import the
 * same way but keeps each row, marked failed with the reason.
 */
#ifndef KILN_JOBS_IMPORT_JOB_H
#define KILN_JOBS_IMPORT_JOB_H

#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"      /* api_error */
#include "db/store.h"      /* store */
#include "jobs/import.h"   /* import_source, import_progress_fn */

struct import_running;

#define IMPORT_JOB_ETA_WINDOW 8  /* the ETA uses the rate over the last 8 progress writes */

typedef struct import_job {
    store *st;
    int64_t id;              /* the dataset's row */
    char dir[PATH_MAX];      /* <data>/datasets/<id> */
    double started;          /* when the importer started (CLOCK_MONOTONIC seconds) */
    double last_fraction;    /* the progress last written to the store ... */
    double last_time;        /* ... and when */
    double seen_time[IMPORT_JOB_ETA_WINDOW];   /* the last writes' times and fractions: */
    double seen_fraction[IMPORT_JOB_ETA_WINDOW];   /* the ETA's recent rate */
    int seen;                /* writes so far */
    struct import_running *running;   /* this process's record of it (cancel); NULL after run */
} import_job;

/* Inserts dataset `name` in status "importing" and makes its folder empty
 * (a leftover of an older data directory with that id is removed). st must
 * stay open until import_job_run returns. Returns 0 with j filled, or -1 with
 * e set: 500 "store_error" (nothing was created; the store's message goes to
 * stderr) or 500 "storage_error" (the row is marked failed with the reason). */
int import_job_begin(import_job *j, store *st, const char *data_dir, const char *name, api_error *e);

/* Imports src into j->dir. The store's progress is the importer's fraction
 * times 0.99, written at most every 1% and 0.25 s (and at least every second
 * while it moves), with the seconds left estimated from the rate over the
 * last IMPORT_JOB_ETA_WINDOW writes (an importer's passes go at different
 * speeds; -1, shown as null, until 1% and a second have passed);
 * observe (may be NULL) sees every report, and its return is ignored. On
 * success the dataset is marked "ready" with its classes, shape, counts and
 * mean, taken from the importer's ds_info, and the import report; on failure
 * it is marked "failed" with err (also returned) and j->dir is removed; when
 * cancelled (import_job_cancel) the row is deleted too and err is "import
 * cancelled". Returns 0 or -1. */
int import_job_run(import_job *j, const import_source *src, import_progress_fn observe, void *arg,
                   char *err, size_t errlen);

/* For a begun job that will never run (the caller could not start it): marks
 * it failed with why, removes its folder and its record. */
void import_job_abandon(import_job *j, const char *why);

/* Asks the import of dataset id, if one runs in this process, to stop (see
 * the top of this file). Returns 0 when one was found, or -1 (none: it has
 * ended, or another process imports it). */
int import_job_cancel(int64_t id);

/* Asks every import of this process to stop; each is marked failed with
 * why (copied). For the server's shutdown. */
void import_job_stop_all(const char *why);

/* What import_job_start and import_job_spawn tell their caller, on the
 * import's thread. */
typedef struct import_hooks {
    /* import_job_start only: called once, when the archive has been checked
     * and the dataset made: e is NULL and id the new dataset's, and the import
     * goes on; or e says why not (import_probe's and import_job_begin's errors;
     * id is -1) and nothing more is done. */
    void (*checked)(void *arg, int64_t id, const api_error *e);
    /* Called last, when the dataset is ready, failed or cancelled (or was
     * never made) and an upload's archive removed; the store is not touched
     * afterwards. */
    void (*finished)(void *arg);
    void *arg;
    pthread_mutex_t *serial; /* held while the importer runs (one import at a time); may be NULL */
    /* import_job_start only: the check's bounds (check-bytes, check-seconds,
     * the server's stop flag), and a slot of check_slots (kiln serve's
     * checks; may be NULL) held while it runs: a check waits its turn, and
     * gives up with 503 shutting_down when check.stop turns true meanwhile. */
    import_check_limits check;
    sem_t *check_slots;
} import_hooks;

/* Starts a detached thread that imports the archive at archive_path as dataset
 * `name` (IMPORT_ARCHIVE with opts; NULL: IMPORT_OPTS_DEFAULT) into
 * <data_dir>/datasets/<id>/. The thread takes the archive over and removes it
 * when done (an upload's temporary file). Returns 0, or -1 with err set when
 * no thread could be started: then no hook is called and the archive stays
 * the caller's. */
int import_job_start(store *st, const char *data_dir, const char *name, const char *archive_path,
                     const import_opts *opts, const import_hooks *hooks, char *err, size_t errlen);

/* Starts a detached thread that runs import_job_run(j, src) for a job the
 * caller has begun (import_job_begin), so that the dataset exists before the
 * caller answers. j and src (its strings too) are copied; src's files are the
 * user's and stay. hooks->checked is not used (may be NULL); hooks->finished
 * is called last. Returns 0, or -1 with err set when no thread could be
 * started: then no hook is called and the job is abandoned
 * (import_job_abandon with err). */
int import_job_spawn(const import_job *j, const import_source *src, const import_hooks *hooks,
                     char *err, size_t errlen);

#endif
