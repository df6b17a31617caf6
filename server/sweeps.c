/* server/sweeps.c: hyper-parameter sweeps: routes and controller (contract in sweeps.h). */
#include "server/sweeps.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/layout.h"        /* layout_job_dir, layout_file */
#include "db/sweep_store.h"
#include "engine/fileio.h"      /* fio_write_atomic */
#include "jobs/jobreq.h"        /* jobreq_set */
#include "jobs/jobspec.h"       /* jobspec_create */
#include "jobs/sweep.h"
#include "server/lookup.h"      /* lookup_body_dataset_hidden, lookup_owner_filter */
#include "server/render.h"      /* render_list */

struct sweeper {
    struct server *srv;
    pthread_mutex_t mu;         /* one drive at a time (the thread's and the handlers') */
    pthread_mutex_t wake_mu;
    pthread_cond_t wake;
    bool woken, stopping;
    pthread_t thread;
};

/* ---- one drive of a sweep ----------------------------------------------------- */

typedef struct drive {
    struct server *srv;
    store_sweep sw;
    sweep_spec spec;
    store_trial *rows;          /* the trial rows, by number (spec.trials of room) */
    sweep_trial *t;             /* their decision state */
    int n;
    int nr;                     /* metric slots a trial has: asha's rungs, else 1 */
} drive;

static void drive_free(drive *d)
{
    for (int i = 0; i < d->n; i++)
        store_trial_clear(&d->rows[i]);
    free(d->rows);
    free(d->t);
    sweep_spec_free(&d->spec);
    store_sweep_clear(&d->sw);
}

/* "[0.91,null]" of a trial's per-rung metrics. */
static void metrics_text(const sweep_trial *t, int nr, char *buf, size_t n)
{
    size_t at = (size_t)snprintf(buf, n, "[");
    for (int k = 0; k < nr && at < n; k++)
        at += (size_t)(isfinite(t->metrics[k]) ? snprintf(buf + at, n - at, "%s%.17g", k ? "," : "", t->metrics[k])
                                               : snprintf(buf + at, n - at, "%snull", k ? "," : ""));
    if (at < n)
        snprintf(buf + at, n - at, "]");
}

static void metrics_parse(const char *text, sweep_trial *t)
{
    for (int k = 0; k < SWEEP_MAX_RUNGS; k++)
        t->metrics[k] = NAN;
    cJSON *a = text ? cJSON_Parse(text) : NULL;
    for (int k = 0; k < SWEEP_MAX_RUNGS && k < cJSON_GetArraySize(a); k++) {
        const cJSON *v = cJSON_GetArrayItem(a, k);
        if (cJSON_IsNumber(v))
            t->metrics[k] = v->valuedouble;
    }
    cJSON_Delete(a);
}

/* The latest metric a trial has (its highest completed rung's), or NaN. */
static double latest_metric(const sweep_trial *t, int nr)
{
    for (int k = nr - 1; k >= 0; k--)
        if (!isnan(t->metrics[k]))
            return t->metrics[k];
    return NAN;
}

/* Replaces row i's message (NULL: none). */
static void set_message(drive *d, int i, const char *msg)
{
    free(d->rows[i].message);
    d->rows[i].message = msg ? strdup(msg) : NULL;
}

static int save_trial(drive *d, int i)
{
    char metrics[SWEEP_MAX_RUNGS * 28 + 4];
    metrics_text(&d->t[i], d->nr, metrics, sizeof metrics);
    store_trial x = d->rows[i];
    x.state = (char *)sweep_tstate_name(d->t[i].state);
    x.rung = d->t[i].rung;
    x.metrics_json = metrics;
    return store_trial_update(d->srv->st, &x);
}

/* Loads sweep id and its trials. 0, STORE_NOT_FOUND, or -1. */
static int drive_load(drive *d, struct server *srv, int64_t id)
{
    memset(d, 0, sizeof *d);
    d->srv = srv;
    int rc = store_sweep_get(srv->st, id, &d->sw);
    if (rc != 0)
        return rc;
    api_error e;
    cJSON *spec = cJSON_Parse(d->sw.spec_json);
    rc = spec ? sweep_spec_parse(spec, &d->spec, &e) : -1;
    cJSON_Delete(spec);
    if (rc != 0) {                            /* written by another kiln, or by hand: it cannot go on */
        if (!strcmp(d->sw.status, "running") &&
            store_sweep_finish(srv->st, id, "failed", "its stored request cannot be read") == 0)
            fprintf(stderr, "kiln: sweep %lld: its stored request cannot be read; failed\n", (long long)id);
        store_sweep_clear(&d->sw);
        return -1;
    }
    d->nr = d->spec.method == SWEEP_ASHA ? d->spec.nrungs : 1;
    store_trial *rows = NULL;
    size_t n = 0;
    d->rows = calloc((size_t)d->spec.trials, sizeof *d->rows);
    d->t = calloc((size_t)d->spec.trials, sizeof *d->t);
    if (!d->rows || !d->t || store_trial_list(srv->st, id, &rows, &n) != 0) {
        drive_free(d);
        return -1;
    }
    for (size_t i = 0; i < n && (int)i < d->spec.trials; i++) {
        d->rows[d->n] = rows[i];
        memset(&rows[i], 0, sizeof rows[i]);
        sweep_trial *t = &d->t[d->n];
        if (sweep_tstate_parse(d->rows[d->n].state, &t->state) != 0)
            t->state = TRIAL_FAILED;
        t->rung = d->rows[d->n].rung;
        metrics_parse(d->rows[d->n].metrics_json, t);
        d->n++;
    }
    store_trial_list_free(rows, n);
    return 0;
}

/* The value of the sweep's metric at the job's last step (NaN when none). */
static double job_metric(store *st, int64_t job_id, const char *tag)
{
    store_metric *ms = NULL;
    size_t n = 0;
    double v = NAN;
    if (store_metric_latest(st, job_id, &ms, &n) == 0)
        for (size_t i = 0; i < n; i++)
            if (!strcmp(ms[i].tag, tag))
                v = ms[i].value;
    free(ms);
    return v;
}

/* A running trial whose job has ended: recorded. */
static void observe(drive *d, int i)
{
    sweep_trial *t = &d->t[i];
    if (t->state != TRIAL_RUNNING)
        return;
    store_job j;
    int rc = d->rows[i].job_id ? store_job_get(d->srv->st, d->rows[i].job_id, &j) : STORE_NOT_FOUND;
    if (rc == STORE_NOT_FOUND) {
        t->state = TRIAL_FAILED;
        set_message(d, i, "its job was deleted");
        save_trial(d, i);
        return;
    }
    if (rc != 0)
        return;                               /* the next tick tries again */
    if (!strcmp(j.status, "done")) {
        t->metrics[t->rung] = job_metric(d->srv->st, j.id, d->spec.metric);
        t->state = d->spec.method == SWEEP_ASHA && t->rung < d->nr - 1 ? TRIAL_WAITING : TRIAL_DONE;
        set_message(d, i, NULL);
    } else if (!strcmp(j.status, "failed")) {
        t->state = TRIAL_FAILED;
        set_message(d, i, j.error ? j.error : "its job failed");
    } else if (!strcmp(j.status, "cancelled")) {
        t->state = TRIAL_CANCELLED;
        set_message(d, i, "its job was cancelled");
    }
    if (t->state != TRIAL_RUNNING)
        save_trial(d, i);
    store_job_clear(&j);
}

/* The job request's name for trial i: the base's name, else the sweep's, and the trial's number. */
static int name_trial(drive *d, cJSON *req, int i, api_error *e)
{
    char name[SWEEP_NAME_MAX + 48];
    const cJSON *base = cJSON_GetObjectItemCaseSensitive(d->spec.base, "name");
    const char *stem = cJSON_IsString(base) && base->valuestring[0] ? base->valuestring
                     : d->sw.name && d->sw.name[0] ? d->sw.name : NULL;
    if (stem) {
        int n = (int)strnlen(stem, 150);      /* room for the suffix within a job name's 200 bytes */
        while (n > 0 && stem[n] && ((unsigned char)stem[n] & 0xC0) == 0x80)
            n--;                              /* cut at a character, not inside one */
        snprintf(name, sizeof name, "%.*s · trial %d", n, stem, i);
    } else {
        snprintf(name, sizeof name, "sweep %lld · trial %d", (long long)d->sw.id, i);
    }
    cJSON *s = cJSON_CreateString(name);
    int rc = s ? jobreq_set(req, "name", s, e) : api_fail(e, 500, "internal", "out of memory");
    cJSON_Delete(s);
    return rc;
}

/* Makes trial d->n: its job (jobspec_create), then its row. A job that cannot
 * be made is a failed trial, its reason in *e. 0, or -1 on a store failure. */
static int start_trial(drive *d, api_error *e)
{
    int i = d->n;
    memset(e, 0, sizeof *e);
    cJSON *values = sweep_trial_values(&d->spec, i);
    int epochs = d->spec.method == SWEEP_ASHA ? d->spec.rungs[0] : 0;
    cJSON *req = values ? sweep_trial_request(&d->spec, values, epochs, e) : NULL;
    int64_t job_id = 0;
    int rc = !values ? api_fail(e, 500, "internal", "out of memory") : !req ? -1 : name_trial(d, req, i, e);
    /* The owner must read this trial's dataset now: the space may name one
     * (not only base.dataset_id), and a dataset may be unshared mid-sweep. */
    int64_t ds;
    if (rc == 0 && lookup_config_dataset_hidden(d->srv, d->sw.owner_id, req, &ds))
        rc = api_fail(e, 422, "dataset_not_found", "dataset %lld does not exist", (long long)ds);
    if (rc == 0)
        rc = jobspec_create(d->srv->st, d->srv->data_dir, req, &job_id, e);
    cJSON_Delete(req);
    if (rc == 0 && d->sw.owner_id > 0)
        store_set_owner(d->srv->st, STORE_OWNED_JOB, job_id, d->sw.owner_id);
    char *params = values ? cJSON_PrintUnformatted(values) : NULL;
    cJSON_Delete(values);
    store_trial row = { .sweep_id = d->sw.id, .trial = i, .job_id = rc == 0 ? job_id : 0,
                        .params_json = params ? strdup(params) : strdup("{}"),
                        .state = strdup(sweep_tstate_name(rc == 0 ? TRIAL_RUNNING : TRIAL_FAILED)),
                        .metrics_json = strdup("[]"),
                        .message = rc == 0 ? NULL : strdup(e->message) };
    cJSON_free(params);
    if (!row.params_json || !row.state || !row.metrics_json || store_trial_insert(d->srv->st, &row) != 0) {
        store_trial_clear(&row);
        return -1;
    }
    if (rc != 0)
        fprintf(stderr, "kiln: sweep %lld: trial %d could not be made: %s\n", (long long)d->sw.id, i,
                e->message);
    d->rows[i] = row;
    d->t[i].state = rc == 0 ? TRIAL_RUNNING : TRIAL_FAILED;
    d->t[i].rung = 0;
    metrics_parse(NULL, &d->t[i]);
    d->n++;
    if (rc == 0)
        sched_wake(d->srv->sched);
    return 0;
}

/* job_id's job.json with "epochs" set: the config's text (cJSON_Print), or NULL. */
static char *config_with_epochs(const char *config_json, int epochs)
{
    cJSON *cfg = config_json ? cJSON_Parse(config_json) : NULL;
    cJSON *n = cJSON_CreateNumber(epochs);
    char *text = NULL;
    if (cfg && n && cJSON_ReplaceItemInObjectCaseSensitive(cfg, "epochs", n)) {
        n = NULL;
        text = cJSON_Print(cfg);
    }
    cJSON_Delete(n);
    cJSON_Delete(cfg);
    return text;
}

/* asha: trial i (waiting at its rung, its job done) goes on to the next rung:
 * job.json and the job's row get the rung's epochs, the job is queued, and
 * its worker resumes from the checkpoint at the rung's end. A job that is
 * no longer done (deleted, resumed by hand) stops the trial instead. */
static void promote(drive *d, int i)
{
    sweep_trial *t = &d->t[i];
    int next = d->spec.rungs[t->rung + 1];
    store_job j;
    char why[256] = "";
    int64_t job_id = d->rows[i].job_id;
    int rc = job_id ? store_job_get(d->srv->st, job_id, &j) : STORE_NOT_FOUND;
    if (rc != 0) {
        snprintf(why, sizeof why, "could not be promoted: its job %s", rc == STORE_NOT_FOUND ? "is gone"
                                                                         : "could not be read");
    } else if (strcmp(j.status, "done")) {
        snprintf(why, sizeof why, "could not be promoted: its job is %s", j.status);
        store_job_clear(&j);
    } else {
        char dir[PATH_MAX], path[PATH_MAX + 16], err[256];
        char *text = config_with_epochs(j.config_json, next);
        int64_t steps = j.epochs > 0 ? j.steps / j.epochs * next : 0;
        int old_rung = t->rung;
        t->rung++;
        t->state = TRIAL_RUNNING;
        char metrics[SWEEP_MAX_RUNGS * 28 + 4];
        metrics_text(t, d->nr, metrics, sizeof metrics);
        store_trial x = d->rows[i];
        x.state = (char *)sweep_tstate_name(TRIAL_RUNNING);
        x.rung = t->rung;
        x.metrics_json = metrics;
        x.message = NULL;
        if (!text || layout_job_dir(dir, sizeof dir, d->srv->data_dir, job_id) != 0 ||
            layout_file(path, sizeof path, dir, LAYOUT_JOB_JSON) != 0 ||
            fio_write_atomic(path, text, strlen(text), err, sizeof err) != 0)
            snprintf(why, sizeof why, "could not be promoted: its job.json could not be written");
        else if (store_sweep_promote(d->srv->st, &x, job_id, next, steps, text) != 0)
            snprintf(why, sizeof why, "could not be promoted: its job is no longer done");
        cJSON_free(text);
        store_job_clear(&j);
        if (!why[0]) {
            set_message(d, i, NULL);
            fprintf(stderr, "kiln: sweep %lld: trial %d (job %lld) promoted to rung %d: %d epochs\n",
                    (long long)d->sw.id, i, (long long)job_id, t->rung, next);
            hub_open(d->srv->hub, job_id);
            hub_publish(d->srv->hub, job_id, "status", "{\"status\":\"queued\",\"error\":null}");
            sched_wake(d->srv->sched);
            return;
        }
        t->rung = old_rung;
    }
    t->state = TRIAL_STOPPED;
    set_message(d, i, why);
    save_trial(d, i);
}

/* Nothing runs and nothing can start: waiting trials are stopped, the sweep is done. */
static void end_sweep(drive *d, const char *status, const char *why)
{
    for (int i = 0; i < d->n; i++) {
        if (d->t[i].state != TRIAL_WAITING)
            continue;
        char msg[160];
        int k = d->t[i].rung;
        snprintf(msg, sizeof msg, "%s at rung %d (%d epoch%s)", why, k, d->spec.rungs[k],
                 d->spec.rungs[k] == 1 ? "" : "s");
        d->t[i].state = TRIAL_STOPPED;
        set_message(d, i, msg);
        save_trial(d, i);
    }
    if (store_sweep_finish(d->srv->st, d->sw.id, status, NULL) == 0)
        fprintf(stderr, "kiln: sweep %lld: %s\n", (long long)d->sw.id, status);
}

static void record_best(drive *d)
{
    int best = -1;
    for (int i = 0; i < d->n; i++)
        if (!isnan(latest_metric(&d->t[i], d->nr)) &&
            (best < 0 || sweep_better(&d->spec, latest_metric(&d->t[i], d->nr), latest_metric(&d->t[best], d->nr))))
            best = i;
    double m = best >= 0 ? latest_metric(&d->t[best], d->nr) : NAN;
    if (best != d->sw.best_trial || (best >= 0 && m != d->sw.best_metric))
        store_sweep_set_best(d->srv->st, d->sw.id, best, m);
}

/* One drive of sweep id (the caller holds the sweeper's mutex). first: when
 * not NULL, the reason trial 0 could not be made, if it was made in this
 * drive and failed (POST answers with it); first->status stays 0 otherwise. */
static int drive_sweep(struct server *srv, int64_t id, api_error *first)
{
    drive d;
    int rc = drive_load(&d, srv, id);
    if (rc != 0)
        return rc;
    if (strcmp(d.sw.status, "running")) {
        drive_free(&d);
        return 0;
    }
    for (int i = 0; i < d.n; i++)
        observe(&d, i);
    int guard = d.spec.trials * d.nr + d.spec.parallel + 4;
    while (guard-- > 0) {
        int running = 0, p = -1;
        for (int i = 0; i < d.n; i++)
            running += d.t[i].state == TRIAL_RUNNING;
        sweep_action a = sweep_next(&d.spec, d.t, d.n, running < d.spec.parallel, &p);
        if (a == SWEEP_NEW) {
            api_error e;
            int i = d.n;
            if (start_trial(&d, &e) != 0)
                break;
            if (i == 0 && first && d.t[0].state == TRIAL_FAILED) {
                *first = e;
                break;
            }
        } else if (a == SWEEP_PROMOTE) {
            promote(&d, p);
        } else {
            if (a == SWEEP_END)
                end_sweep(&d, "done", "stopped by the sweep");
            break;
        }
    }
    record_best(&d);
    drive_free(&d);
    return 0;
}

/* ---- the controller thread ------------------------------------------------------ */

static void drive_open_sweeps(sweeper *w)
{
    int64_t *ids = NULL;
    size_t n = 0;
    if (store_sweep_ids_with_status(w->srv->st, "running", &ids, &n) != 0)
        return;
    for (size_t i = 0; i < n && !w->stopping; i++) {
        pthread_mutex_lock(&w->mu);
        drive_sweep(w->srv, ids[i], NULL);
        pthread_mutex_unlock(&w->mu);
    }
    free(ids);
}

static void *sweeper_main(void *arg)
{
    sweeper *w = arg;
    pthread_mutex_lock(&w->wake_mu);
    while (!w->stopping) {
        pthread_mutex_unlock(&w->wake_mu);
        drive_open_sweeps(w);
        pthread_mutex_lock(&w->wake_mu);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)SWEEPS_TICK_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        while (!w->woken && !w->stopping)
            if (pthread_cond_timedwait(&w->wake, &w->wake_mu, &ts) != 0)
                break;
        w->woken = false;
    }
    pthread_mutex_unlock(&w->wake_mu);
    return NULL;
}

static void sweeper_wake(sweeper *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->wake_mu);
    w->woken = true;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->wake_mu);
}

sweeper *sweeper_start(struct server *srv, char *err, size_t errlen)
{
    sweeper *w = calloc(1, sizeof *w);
    if (!w) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    w->srv = srv;
    pthread_mutex_init(&w->mu, NULL);
    pthread_mutex_init(&w->wake_mu, NULL);
    pthread_cond_init(&w->wake, NULL);
    int rc = pthread_create(&w->thread, NULL, sweeper_main, w);
    if (rc != 0) {
        set_err(err, errlen, "cannot start the sweep controller: %s", strerror(rc));
        free(w);
        return NULL;
    }
    return w;
}

void sweeper_stop(sweeper *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->wake_mu);
    w->stopping = true;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->wake_mu);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_mutex_destroy(&w->wake_mu);
    pthread_cond_destroy(&w->wake);
    free(w);
}

/* ---- representation ------------------------------------------------------------- */

static bool add(cJSON *o, const char *key, cJSON *v)
{
    if (v && cJSON_AddItemToObject(o, key, v))
        return true;
    cJSON_Delete(v);
    return false;
}

static cJSON *num_or_null(double v)
{
    return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull();
}

static cJSON *str_or_null(const char *s)
{
    return s ? cJSON_CreateString(s) : cJSON_CreateNull();
}

/* One trial's object; *epochs_done gets its job's completed epochs. */
static cJSON *render_trial(const drive *d, int i, store *st, int *epochs_done)
{
    const store_trial *row = &d->rows[i];
    const sweep_trial *t = &d->t[i];
    store_job j;
    bool have_job = row->job_id && store_job_get(st, row->job_id, &j) == 0;
    cJSON *o = cJSON_CreateObject();
    cJSON *metrics = cJSON_CreateArray();
    for (int k = 0; metrics && k < d->nr; k++)
        if (!cJSON_AddItemToArray(metrics, num_or_null(t->metrics[k]))) {
            cJSON_Delete(metrics);
            metrics = NULL;
        }
    *epochs_done = have_job ? j.epoch : 0;
    bool ok = o && add(o, "trial", cJSON_CreateNumber(i)) &&
              add(o, "job_id", row->job_id ? cJSON_CreateNumber((double)row->job_id) : cJSON_CreateNull()) &&
              add(o, "params", cJSON_Parse(row->params_json ? row->params_json : "{}")) &&
              add(o, "state", cJSON_CreateString(sweep_tstate_name(t->state))) &&
              add(o, "job_status", str_or_null(have_job ? j.status : NULL)) &&
              add(o, "rung", cJSON_CreateNumber(t->rung)) &&
              add(o, "epochs", cJSON_CreateNumber(have_job ? j.epochs : 0)) &&
              add(o, "epoch", cJSON_CreateNumber(have_job ? j.epoch : 0)) &&
              add(o, "metric", num_or_null(latest_metric(t, d->nr))) &&
              add(o, "metrics", metrics) &&
              add(o, "message", str_or_null(row->message));
    if (!o || !metrics)
        ok = false;
    if (have_job)
        store_job_clear(&j);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* The trials' order: by the metric, best first (none last), then by number. */
static const sweep_spec *sort_spec;
static int by_metric(const void *a, const void *b)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(*(cJSON *const *)a, "metric");
    const cJSON *y = cJSON_GetObjectItemCaseSensitive(*(cJSON *const *)b, "metric");
    double mx = cJSON_IsNumber(x) ? x->valuedouble : NAN, my = cJSON_IsNumber(y) ? y->valuedouble : NAN;
    if (sweep_better(sort_spec, mx, my))
        return -1;
    if (sweep_better(sort_spec, my, mx))
        return 1;
    return cJSON_GetObjectItemCaseSensitive(*(cJSON *const *)a, "trial")->valueint -
           cJSON_GetObjectItemCaseSensitive(*(cJSON *const *)b, "trial")->valueint;
}
static pthread_mutex_t sort_mu = PTHREAD_MUTEX_INITIALIZER;

/* The trials array, sorted; counts by state and epochs spent added to o. */
static bool add_trials(cJSON *o, const drive *d, store *st, bool with_list, cJSON **best)
{
    cJSON **items = calloc((size_t)d->n + 1, sizeof *items);
    int counts[TRIAL_CANCELLED + 1] = { 0 };
    long spent = 0;
    bool ok = items != NULL;
    for (int i = 0; ok && i < d->n; i++) {
        int done = 0;
        items[i] = render_trial(d, i, st, &done);
        ok = items[i] != NULL;
        spent += done;
        counts[d->t[i].state]++;
    }
    cJSON *c = ok ? cJSON_CreateObject() : NULL;
    ok = ok && add(o, "counts", c);
    for (int s = 0; ok && s <= TRIAL_CANCELLED; s++)
        ok = cJSON_AddNumberToObject(c, sweep_tstate_name((sweep_tstate)s), counts[s]) != NULL;
    ok = ok && add(o, "epochs_spent", cJSON_CreateNumber((double)spent));
    *best = NULL;
    if (ok && d->sw.best_trial >= 0 && d->sw.best_trial < d->n)
        *best = cJSON_Duplicate(items[d->sw.best_trial], 1);
    if (ok && with_list) {
        pthread_mutex_lock(&sort_mu);
        sort_spec = &d->spec;
        qsort(items, (size_t)d->n, sizeof *items, by_metric);
        pthread_mutex_unlock(&sort_mu);
        cJSON *arr = cJSON_CreateArray();
        ok = add(o, "trials", arr);
        for (int i = 0; i < d->n; i++) {
            if (ok && cJSON_AddItemToArray(arr, items[i]))
                items[i] = NULL;
            else
                ok = false;
        }
    }
    for (int i = 0; i < d->n && items; i++)
        cJSON_Delete(items[i]);
    free(items);
    return ok;
}

/* A sweep's object; with its trials when with_list. NULL when out of memory. */
static cJSON *render_sweep(const drive *d, store *st, bool with_list)
{
    const store_sweep *w = &d->sw;
    cJSON *o = cJSON_CreateObject();
    cJSON *rungs = cJSON_CreateIntArray(d->spec.rungs, d->spec.nrungs);
    cJSON *best = NULL;
    bool ok = o && rungs && add(o, "id", cJSON_CreateNumber((double)w->id)) &&
              add(o, "name", cJSON_CreateString(w->name ? w->name : "")) &&
              add(o, "method", cJSON_CreateString(w->method)) &&
              add(o, "status", cJSON_CreateString(w->status)) &&
              add(o, "metric", cJSON_CreateString(d->spec.metric)) &&
              add(o, "mode", cJSON_CreateString(d->spec.maximize ? "max" : "min")) &&
              add(o, "parallel", cJSON_CreateNumber(d->spec.parallel)) &&
              add(o, "trials_planned", cJSON_CreateNumber(d->spec.trials)) &&
              add(o, "trials_made", cJSON_CreateNumber(d->n)) &&
              add(o, "rungs", rungs) &&
              add(o, "created_at", cJSON_CreateString(w->created_at ? w->created_at : "")) &&
              add(o, "finished_at", str_or_null(w->finished_at)) &&
              add(o, "owner_id", w->owner_id > 0 ? cJSON_CreateNumber((double)w->owner_id) : cJSON_CreateNull()) &&
              add(o, "error", str_or_null(w->error)) &&
              add(o, "spec", cJSON_Parse(w->spec_json)) &&
              add_trials(o, d, st, with_list, &best) &&
              add(o, "best", best ? best : cJSON_CreateNull());
    if (!rungs || !o)
        ok = false;
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* ---- routes -------------------------------------------------------------------- */

static bool visible(const request *r, int64_t owner)
{
    return r->admin || (r->user_id > 0 && owner == r->user_id);
}

/* Loads sweep id for r: true, or false with *answered (404 as for a missing one). */
static bool lookup_sweep(request *r, int64_t id, drive *d, int *answered)
{
    int rc = drive_load(d, r->srv, id);
    if (rc == 0 && visible(r, d->sw.owner_id))
        return true;
    if (rc == 0)
        drive_free(d);
    *answered = rc == 0 || rc == STORE_NOT_FOUND ? lookup_not_found(r, "sweep", id)
                                                 : http_store_error(r, "reading the sweep");
    return false;
}

static int answer_sweep(request *r, unsigned status, int64_t id)
{
    drive d;
    int answered;
    if (!lookup_sweep(r, id, &d, &answered))
        return answered;
    cJSON *o = render_sweep(&d, r->srv->st, true);
    drive_free(&d);
    return http_json(r, status, o);
}

int sweeps_create(request *r)
{
    enum MHD_Result answered;
    cJSON *doc = http_body_json(r, &answered);
    if (!doc)
        return answered;
    sweep_spec spec;
    api_error e;
    memset(&e, 0, sizeof e);
    int rc = sweep_spec_parse(doc, &spec, &e);
    cJSON_Delete(doc);
    if (rc != 0)
        return http_api_error(r, &e, "the sweep request is not valid");
    int64_t ds;
    if (lookup_body_dataset_hidden(r, spec.base, &ds)) {
        sweep_spec_free(&spec);
        return http_error(r, 422, "dataset_not_found", "base.dataset_id: dataset %lld does not exist",
                          (long long)ds);
    }
    cJSON *norm = NULL;
    char *text = NULL;
    if (sweep_check_requests(&spec, &e) != 0) {
        sweep_spec_free(&spec);
        return http_api_error(r, &e, "the sweep's trials are not valid");
    }
    norm = sweep_spec_to_json(&spec);
    text = norm ? cJSON_PrintUnformatted(norm) : NULL;
    cJSON_Delete(norm);
    int64_t id = 0;
    int64_t owner = r->user_id > 0 ? r->user_id : 0;
    rc = text ? store_sweep_insert(r->srv->st, spec.name, sweep_method_name(spec.method), text, owner, &id) : -1;
    cJSON_free(text);
    sweep_spec_free(&spec);
    if (rc != 0)
        return http_store_error(r, "storing the sweep");
    sweeper *w = r->srv->sweeper;
    memset(&e, 0, sizeof e);
    pthread_mutex_lock(&w->mu);
    drive_sweep(r->srv, id, &e);
    if (e.status)
        store_sweep_delete(r->srv->st, id);    /* its first trial's request is not valid: the sweep's 4xx */
    pthread_mutex_unlock(&w->mu);
    if (e.status) {
        char msg[sizeof e.message];
        snprintf(msg, sizeof msg, "%s", e.message);
        snprintf(e.message, sizeof e.message, "the sweep's first trial: %.480s", msg);
        return http_api_error(r, &e, "the sweep's first trial could not be made");
    }
    fprintf(stderr, "kiln: sweep %lld created\n", (long long)id);
    return answer_sweep(r, MHD_HTTP_CREATED, id);
}

int sweeps_list(request *r)
{
    int64_t *ids = NULL;
    store_sweep *list = NULL;
    size_t n = 0;
    if (store_sweep_list_for(r->srv->st, lookup_owner_filter(r), &list, &n) != 0)
        return http_store_error(r, "listing sweeps");
    cJSON *items = cJSON_CreateArray();
    for (size_t i = 0; items && i < n; i++) {
        drive d;
        if (drive_load(&d, r->srv, list[i].id) != 0)
            continue;                          /* deleted meanwhile */
        cJSON *o = render_sweep(&d, r->srv->st, false);
        drive_free(&d);
        if (!o || !cJSON_AddItemToArray(items, o)) {
            cJSON_Delete(o);
            cJSON_Delete(items);
            items = NULL;
        }
    }
    store_sweep_list_free(list, n);
    free(ids);
    return http_json(r, MHD_HTTP_OK, render_list(items));
}

int sweeps_get(request *r)
{
    return answer_sweep(r, MHD_HTTP_OK, r->id);
}

/* Cancels a running sweep: its running trials' jobs are cancelled (queued
 * ones at once, running ones stop at their next step), waiting ones stopped. */
int sweeps_cancel(request *r)
{
    drive d;
    int answered;
    sweeper *w = r->srv->sweeper;
    pthread_mutex_lock(&w->mu);
    if (!lookup_sweep(r, r->id, &d, &answered)) {
        pthread_mutex_unlock(&w->mu);
        return answered;
    }
    if (strcmp(d.sw.status, "running")) {
        char status[16];
        snprintf(status, sizeof status, "%s", d.sw.status);
        drive_free(&d);
        pthread_mutex_unlock(&w->mu);
        return http_error(r, MHD_HTTP_CONFLICT, "sweep_finished", "sweep %lld has already ended (%s)",
                          (long long)r->id, status);
    }
    for (int i = 0; i < d.n; i++)
        observe(&d, i);
    for (int i = 0; i < d.n; i++) {
        if (d.t[i].state != TRIAL_RUNNING)
            continue;
        int rc = sched_cancel(r->srv->sched, d.rows[i].job_id);
        if (rc != 0 && rc != SCHED_ALREADY_ENDED && rc != STORE_NOT_FOUND)
            fprintf(stderr, "kiln: sweep %lld: cancelling job %lld failed\n", (long long)r->id,
                    (long long)d.rows[i].job_id);
        d.t[i].state = TRIAL_CANCELLED;
        set_message(&d, i, "cancelled with the sweep");
        save_trial(&d, i);
    }
    end_sweep(&d, "cancelled", "stopped: the sweep was cancelled");
    record_best(&d);
    drive_free(&d);
    pthread_mutex_unlock(&w->mu);
    sweeper_wake(w);
    return answer_sweep(r, MHD_HTTP_ACCEPTED, r->id);
}

int sweeps_delete(request *r)
{
    drive d;
    int answered;
    if (!lookup_sweep(r, r->id, &d, &answered))
        return answered;
    bool running = !strcmp(d.sw.status, "running");
    drive_free(&d);
    if (running)
        return http_error(r, MHD_HTTP_CONFLICT, "sweep_active", "sweep %lld is running; cancel it first "
                          "(POST /api/v1/sweeps/%lld/cancel)", (long long)r->id, (long long)r->id);
    int rc = store_sweep_delete(r->srv->st, r->id);
    if (rc == STORE_NOT_FOUND)
        return lookup_not_found(r, "sweep", r->id);
    if (rc != 0)
        return http_store_error(r, "deleting the sweep");
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    return http_queue(r, MHD_HTTP_NO_CONTENT, resp);
}
