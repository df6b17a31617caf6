/* jobs/import_job.c: a dataset import from its row in the store to ready or
 * failed (contract in import_job.h).
 *
 * Guarantees:
 * - A dataset this module inserts ends "ready" with its header, or "failed"
 *   with a reason and no folder, or (cancelled) with neither row nor folder,
 *   unless the process dies first (the server's start marks datasets left
 *   "importing" failed).
 * - The store's record of a ready dataset comes from the importer's typed
 *   header (ds_info), never from reading header.json back.
 * - import_job_start's thread calls hooks->checked exactly once and
 *   hooks->finished last; the archive is removed before finished. A source
 *   given to import_job_spawn is never removed.
 * - An import is in this process's list of running imports (for
 *   import_job_cancel) from its begin until its run has ended; the stop mark
 *   is read on the importer's thread at every progress report, without a
 *   lock (an atomic).
 */
#include "jobs/import_job.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/layout.h"         /* layout_dataset_dir */
#include "engine/fileio.h"       /* fio_mkdir_p, fio_rm_rf */

#define PROGRESS_STEP 0.01       /* store writes: at most one per 1% ... */
#define PROGRESS_INTERVAL 0.25   /* ... and per 0.25 s, */
#define PROGRESS_REFRESH 1.0     /* but one a second while it moves (the ETA) */
#define PROGRESS_BEFORE_READY 0.99   /* the last 1% is the store's "ready" */
#define ETA_MIN_FRACTION 0.01    /* no ETA before 1% ... */
#define ETA_MIN_SECONDS 1.0      /* ... and a second of importing */
#define TURN_POLL_NS 50000000L   /* waiting for the serial lock: look at the stop mark every 50 ms */
#define CANCELLED "import cancelled"

/* ---- this process's running imports ------------------------------------------ */

typedef enum stop_kind { STOP_NONE, STOP_CANCEL, STOP_SHUTDOWN } stop_kind;

struct import_running {
    int64_t id;
    atomic_int stop;                 /* a stop_kind */
    struct import_running *next;
};

static pthread_mutex_t running_mu = PTHREAD_MUTEX_INITIALIZER;
static struct import_running *running_list;
static char shutdown_why[256];       /* import_job_stop_all's reason, under running_mu */

static struct import_running *running_add(int64_t id)
{
    struct import_running *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->id = id;
    atomic_init(&r->stop, STOP_NONE);
    pthread_mutex_lock(&running_mu);
    r->next = running_list;
    running_list = r;
    pthread_mutex_unlock(&running_mu);
    return r;
}

/* Takes r off the list and frees it; returns its last stop mark (after this,
 * import_job_cancel no longer finds the import). */
static stop_kind running_remove(struct import_running *r)
{
    if (!r)
        return STOP_NONE;
    pthread_mutex_lock(&running_mu);
    for (struct import_running **p = &running_list; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            break;
        }
    stop_kind last = (stop_kind)atomic_load(&r->stop);
    pthread_mutex_unlock(&running_mu);
    free(r);
    return last;
}

static stop_kind stop_requested(const import_job *j)
{
    return j->running ? (stop_kind)atomic_load(&j->running->stop) : STOP_NONE;
}

int import_job_cancel(int64_t id)
{
    int rc = -1;
    pthread_mutex_lock(&running_mu);
    for (struct import_running *r = running_list; r; r = r->next)
        if (r->id == id) {
            atomic_store(&r->stop, STOP_CANCEL);
            rc = 0;
        }
    pthread_mutex_unlock(&running_mu);
    return rc;
}

void import_job_stop_all(const char *why)
{
    pthread_mutex_lock(&running_mu);
    snprintf(shutdown_why, sizeof shutdown_why, "%s", why);
    for (struct import_running *r = running_list; r; r = r->next) {
        int none = STOP_NONE;
        atomic_compare_exchange_strong(&r->stop, &none, STOP_SHUTDOWN);   /* a cancel stays one */
    }
    pthread_mutex_unlock(&running_mu);
}

/* ---- begin ------------------------------------------------------------------------ */

int import_job_begin(import_job *j, store *st, const char *data_dir, const char *name, api_error *e)
{
    memset(j, 0, sizeof *j);
    j->st = st;
    j->id = -1;
    char err[256] = "";
    if (store_dataset_insert(st, name, &j->id, err, sizeof err) != 0) {
        fprintf(stderr, "kiln: dataset \"%s\": could not insert it: %s\n", name, err);
        return api_fail(e, 500, "store_error",
                        "the database failed while creating the dataset; see the server log");
    }
    bool fits = layout_dataset_dir(j->dir, sizeof j->dir, data_dir, j->id) == 0;
    if (fits)
        fio_rm_rf(j->dir);              /* a leftover of an older data directory */
    if (!fits || fio_mkdir_p(j->dir) != 0) {
        api_fail(e, 500, "storage_error", "cannot create the dataset folder: %s",
                 fits ? strerror(errno) : "the data directory's path is too long");
        store_dataset_finish(st, j->id, "failed", NULL, e->message);
        return -1;
    }
    if (!(j->running = running_add(j->id))) {
        api_fail(e, 500, "internal_error", "out of memory");
        store_dataset_finish(st, j->id, "failed", NULL, e->message);
        fio_rm_rf(j->dir);
        return -1;
    }
    return 0;
}

void import_job_abandon(import_job *j, const char *why)
{
    store_dataset_finish(j->st, j->id, "failed", NULL, why && why[0] ? why : "the import did not start");
    fio_rm_rf(j->dir);
    running_remove(j->running);
    j->running = NULL;
}

/* ---- running the importer --------------------------------------------------- */

typedef struct run_ctx {
    import_job *job;
    import_progress_fn observe;
    void *arg;
} run_ctx;

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Records a write at now and returns the seconds left at fraction: the rate
 * from the oldest write the window holds (the importer's start while it holds
 * fewer), or -1 while it is too early to tell. */
static double eta_seconds(import_job *j, double fraction, double now)
{
    int slot = j->seen % IMPORT_JOB_ETA_WINDOW;
    double t0 = j->started, f0 = 0;
    if (j->seen >= IMPORT_JOB_ETA_WINDOW) {        /* slot holds the oldest write */
        t0 = j->seen_time[slot];
        f0 = j->seen_fraction[slot];
    }
    j->seen_time[slot] = now;
    j->seen_fraction[slot] = fraction;
    j->seen++;
    if (fraction >= 1.0)
        return 0;
    if (fraction < ETA_MIN_FRACTION || now - j->started < ETA_MIN_SECONDS || fraction <= f0 || now <= t0)
        return -1;
    return (1.0 - fraction) * (now - t0) / (fraction - f0);
}

static int on_progress(void *arg, double fraction)
{
    run_ctx *c = arg;
    import_job *j = c->job;
    if (c->observe)
        c->observe(c->arg, fraction);
    stop_kind stop = stop_requested(j);
    if (stop != STOP_NONE)
        return 1;
    double now = now_seconds(), since = now - j->last_time;
    bool due = fraction >= 1.0 ||
               (fraction - j->last_fraction >= PROGRESS_STEP && since >= PROGRESS_INTERVAL) ||
               (fraction > j->last_fraction && since >= PROGRESS_REFRESH);
    if (!due)
        return 0;
    j->last_fraction = fraction;
    j->last_time = now;
    store_dataset_set_progress_eta(j->st, j->id, fraction * PROGRESS_BEFORE_READY,
                                   eta_seconds(j, fraction, now));
    return 0;
}
/* The import report as JSON (GET /api/v1/datasets/{id}'s "report"). */
static cJSON *report_json(const import_report *r, const ds_info *info)
{
    cJSON *o = cJSON_CreateObject(), *problems = NULL, *per = NULL;
    bool ok = o && cJSON_AddNumberToObject(o, "images", (double)r->images) &&
              cJSON_AddNumberToObject(o, "unreadable", (double)r->unreadable) &&
              cJSON_AddNumberToObject(o, "skipped", (double)r->skipped) &&
              cJSON_AddNumberToObject(o, "outside_classes", (double)r->outside) &&
              (!r->shape_note[0] || cJSON_AddStringToObject(o, "shape_chosen", r->shape_note)) &&
              (problems = cJSON_AddArrayToObject(o, "problems")) &&
              (per = cJSON_AddObjectToObject(o, "per_class"));
    for (int i = 0; ok && i < r->nproblems; i++) {
        cJSON *p = cJSON_CreateObject();
        ok = p && cJSON_AddItemToArray(problems, p) &&
             cJSON_AddStringToObject(p, "what", r->problems[i].what) &&
             cJSON_AddStringToObject(p, "path", r->problems[i].path) &&
             cJSON_AddStringToObject(p, "why", r->problems[i].why);
    }
    static const char *const splits[3] = { "train", "val", "test" };
    for (int s = 0; ok && s < 3 && r->per_class[s] && r->nclasses == info->nclasses; s++) {
        cJSON *byclass = cJSON_AddObjectToObject(per, splits[s]);
        for (int k = 0; ok && byclass && k < r->nclasses; k++)
            ok = cJSON_AddNumberToObject(byclass, info->classes[k], (double)r->per_class[s][k]) != NULL;
        ok = ok && byclass;
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* The source as the API shows it: {"type", "path"} (no path for an archive:
 * an upload's is a temporary file). NULL when out of memory. */
static cJSON *source_json(const import_source *src)
{
    cJSON *o = cJSON_CreateObject();
    bool ok = o && cJSON_AddStringToObject(o, "type", import_kind_name(src->kind)) &&
              (src->kind == IMPORT_ARCHIVE || !src->path || cJSON_AddStringToObject(o, "path", src->path)) &&
              (!src->labels || cJSON_AddStringToObject(o, "labels", src->labels));
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* The store's record of a ready dataset (store_dataset.info_json): the
 * header's classes, shape, counts, mean, resize and encoding, the source, the
 * options asked for and the import report when there is one. Returns a string the caller frees, or NULL when out of
 * memory. */
static char *info_json(const ds_info *info, const import_source *src, const import_report *r)
{
    cJSON *root = ds_info_to_json(info);           /* what header.json holds */
    cJSON *sj = root ? source_json(src) : NULL;
    bool ok = sj && cJSON_AddItemToObject(root, "source", sj);
    if (!ok)
        cJSON_Delete(sj);
    cJSON *oj = ok && src->kind != IMPORT_MNIST_JSON ? import_options_to_json(&src->opts) : NULL;
    ok = ok && (src->kind == IMPORT_MNIST_JSON || (oj && cJSON_AddItemToObject(root, "options", oj)));
    if (!ok && oj)
        cJSON_Delete(oj);
    cJSON *rj = ok && r ? report_json(r, info) : NULL;
    ok = ok && (!r || (rj && cJSON_AddItemToObject(root, "report", rj)));
    if (!ok && rj)
        cJSON_Delete(rj);
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
}

/* The end of a stopped import: a cancelled one leaves neither row nor
 * folder; one stopped by the shutdown is marked failed with the reason. */
static int stopped(import_job *j, stop_kind stop, char *err, size_t errlen)
{
    if (stop == STOP_CANCEL) {
        if (store_dataset_delete(j->st, j->id) < 0)
            fprintf(stderr, "kiln: dataset %lld: could not delete its row after the cancel\n",
                    (long long)j->id);
        fio_rm_rf(j->dir);
        return set_err(err, errlen, CANCELLED);
    }
    pthread_mutex_lock(&running_mu);
    set_err(err, errlen, "%s", shutdown_why[0] ? shutdown_why : "the import was stopped");
    pthread_mutex_unlock(&running_mu);
    store_dataset_finish(j->st, j->id, "failed", NULL, err);
    fio_rm_rf(j->dir);
    return -1;
}

int import_job_run(import_job *j, const import_source *src, import_progress_fn observe, void *arg,
                   char *err, size_t errlen)
{
    run_ctx c = { j, observe, arg };
    ds_info info;
    import_report rep;
    memset(&info, 0, sizeof info);
    memset(&rep, 0, sizeof rep);
    j->started = j->last_time = now_seconds();
    j->last_fraction = 0;
    j->seen = 0;
    int rc = -1;
    if (stop_requested(j) == STOP_NONE)          /* cancelled while it waited for its turn: never starts */
        rc = import_run(src, j->dir, on_progress, &c, &info, &rep, err, errlen);
    stop_kind stop = stop_requested(j);
    bool recorded = false;           /* the row's end is written */
    if (stop == STOP_CANCEL || (rc != 0 && stop == STOP_SHUTDOWN)) {
        rc = stopped(j, stop, err, errlen);
        recorded = true;
    } else if (rc == 0) {
        char *json = info_json(&info, src, src->kind == IMPORT_MNIST_JSON ? NULL : &rep);
        if (!json)
            rc = set_err(err, errlen, "out of memory recording the dataset");
        else if (store_dataset_finish(j->st, j->id, "ready", json, NULL) != 0)
            rc = set_err(err, errlen, "recording the dataset as ready failed");
        free(json);
    }
    if (rc != 0 && !recorded) {
        store_dataset_finish(j->st, j->id, "failed", NULL, err && err[0] ? err : "the import failed");
        fio_rm_rf(j->dir);
    }
    ds_info_free(&info);
    import_report_free(&rep);
    /* A cancel that came after the mark was read above: the dataset was asked
     * to be deleted, and the caller was told so. */
    if (running_remove(j->running) == STOP_CANCEL && stop != STOP_CANCEL)
        rc = stopped(j, STOP_CANCEL, err, errlen);
    j->running = NULL;
    return rc;
}

/* ---- in the background (uploads, files on the server) ------------------------------- */

typedef struct import_task {
    store *st;
    char *data_dir, *name;           /* import_job_start: begun on the thread */
    bool begun;                      /* import_job_spawn: job is begun */
    import_job job;
    import_source src;               /* path and labels owned */
    bool take_source;                /* remove src.path when done (an upload's archive) */
    import_hooks hooks;
} import_task;

static void task_free(import_task *t)
{
    if (!t)
        return;
    free(t->data_dir);
    free(t->name);
    free((char *)t->src.path);
    free((char *)t->src.labels);
    free(t);
}

/* A task with copies of src's strings; NULL when out of memory. */
static import_task *task_new(const import_source *src, const import_hooks *hooks)
{
    import_task *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->src = *src;
    t->src.path = src->path ? strdup(src->path) : NULL;
    t->src.labels = src->labels ? strdup(src->labels) : NULL;
    t->hooks = *hooks;
    if ((src->path && !t->src.path) || (src->labels && !t->src.labels)) {
        task_free(t);
        return NULL;
    }
    return t;
}

/* Takes the serial lock, giving up when the import is stopped meanwhile.
 * Returns whether the lock is held. */
static bool take_turn(pthread_mutex_t *serial, const import_job *j)
{
    const struct timespec poll = { 0, TURN_POLL_NS };
    while (pthread_mutex_trylock(serial) != 0) {
        if (stop_requested(j) != STOP_NONE)
            return false;
        nanosleep(&poll, NULL);
    }
    return true;
}

/* Takes a check slot, giving up when the check's stop flag turns true
 * meanwhile. Returns whether the slot is held. */
static bool take_check_slot(sem_t *slots, const atomic_bool *stop)
{
    for (;;) {
        if (stop && atomic_load(stop))
            return false;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += TURN_POLL_NS;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        if (sem_timedwait(slots, &until) == 0)
            return true;
        if (errno != ETIMEDOUT && errno != EINTR)
            return false;
    }
}

/* An upload's check: the archive within its bounds (a check slot held while
 * it runs), then, when the whole archive was read and the options give the
 * size, the estimate of the prepared dataset (channels: the options', else
 * 1, the least it can be). Returns 0, or -1 with e set. */
static int check_upload(const import_task *t, api_error *e)
{
    const import_hooks *h = &t->hooks;
    if (h->check_slots && !take_check_slot(h->check_slots, h->check.stop))
        return api_fail(e, 503, "shutting_down", "the server is shutting down; upload again once it is back");
    import_check found;
    int rc = import_probe(t->src.path, &h->check, &found, e);
    if (h->check_slots)
        sem_post(h->check_slots);
    const import_opts *o = &t->src.opts;
    if (rc == 0 && found.complete && o->width && o->height)
        rc = import_estimate_check(found.images, o->channels ? o->channels : 1, o->height, o->width, o,
                                   t->data_dir, e);
    return rc;
}

static void *import_thread(void *arg)
{
    import_task *t = arg;
    import_job *job = &t->job;
    if (!t->begun) {
        api_error e;
        memset(&e, 0, sizeof e);
        if ((t->src.kind == IMPORT_ARCHIVE && check_upload(t, &e) != 0) ||
            import_job_begin(job, t->st, t->data_dir, t->name, &e) != 0) {
            t->hooks.checked(t->hooks.arg, -1, &e);
            goto done;
        }
        t->hooks.checked(t->hooks.arg, job->id, NULL);
    }

    char err[1024] = "";
    bool held = t->hooks.serial && take_turn(t->hooks.serial, job);
    int rc = import_job_run(job, &t->src, NULL, NULL, err, sizeof err);
    if (held)
        pthread_mutex_unlock(t->hooks.serial);
    if (rc == 0)
        fprintf(stderr, "kiln: dataset %lld ready\n", (long long)job->id);
    else
        fprintf(stderr, "kiln: dataset %lld: %s\n", (long long)job->id, err);
done:
    if (t->take_source)
        unlink(t->src.path);
    import_hooks h = t->hooks;
    task_free(t);
    if (h.finished)
        h.finished(h.arg);
    return NULL;
}

/* Starts t on a detached thread; 0, or -1 with err (t is still the caller's). */
static int task_start(import_task *t, char *err, size_t errlen)
{
    pthread_attr_t at;
    pthread_t th;
    int rc = pthread_attr_init(&at);
    if (rc == 0) {
        rc = pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (rc == 0)
            rc = pthread_create(&th, &at, import_thread, t);
        pthread_attr_destroy(&at);
    }
    if (rc != 0)
        return set_err(err, errlen, "could not start the import: %s", strerror(rc));
    return 0;
}

int import_job_start(store *st, const char *data_dir, const char *name, const char *archive_path,
                     const import_opts *opts, const import_hooks *hooks, char *err, size_t errlen)
{
    static const import_opts defaults = IMPORT_OPTS_DEFAULT;
    import_source src;
    memset(&src, 0, sizeof src);
    src.kind = IMPORT_ARCHIVE;
    src.path = archive_path;
    src.opts = opts ? *opts : defaults;
    import_task *t = task_new(&src, hooks);
    if (!t || !(t->data_dir = strdup(data_dir)) || !(t->name = strdup(name))) {
        task_free(t);
        return set_err(err, errlen, "out of memory");
    }
    t->st = st;
    t->take_source = true;
    if (task_start(t, err, errlen) != 0) {
        task_free(t);
        return -1;
    }
    return 0;
}

int import_job_spawn(const import_job *j, const import_source *src, const import_hooks *hooks,
                     char *err, size_t errlen)
{
    import_task *t = task_new(src, hooks);
    int rc = t ? 0 : set_err(err, errlen, "out of memory");
    if (t) {
        t->begun = true;
        t->job = *j;
        t->st = j->st;
        rc = task_start(t, err, errlen);
        if (rc != 0)
            task_free(t);
    }
    if (rc != 0) {
        import_job copy = *j;
        import_job_abandon(&copy, err);
    }
    return rc;
}
