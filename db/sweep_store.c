/* db/sweep_store.c: sweeps and their trials in the store (contract in sweep_store.h).
 *
 * As db/users.c: each function takes the store's lock (store_db_lock),
 * prepares its statements with bound parameters and finalizes them before
 * unlocking. The controller calls these a few times a second at most.
 */
#include "db/sweep_store.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "db/store_db.h"     /* store_db_lock, store_db_unlock */

#define NOW_SQL "strftime('%Y-%m-%dT%H:%M:%SZ', 'now')"
#define SWEEP_COLS "id, name, method, status, spec_json, best_trial, best_metric, error, created_at, " \
                   "finished_at, owner_id"
#define TRIAL_COLS "sweep_id, trial, job_id, params_json, rung, state, metrics_json, message"

static bool dup_col(sqlite3_stmt *q, int i, char **dst)
{
    *dst = NULL;
    if (sqlite3_column_type(q, i) == SQLITE_NULL)
        return true;
    const unsigned char *t = sqlite3_column_text(q, i);
    *dst = strdup(t ? (const char *)t : "");
    return *dst != NULL;
}

static int bind_text_or_null(sqlite3_stmt *q, int i, const char *t)
{
    return t ? sqlite3_bind_text(q, i, t, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(q, i);
}

/* ---- rows ------------------------------------------------------------------ */

static int read_sweep(sqlite3_stmt *q, void *elem)
{
    store_sweep *w = elem;
    memset(w, 0, sizeof *w);
    w->id = sqlite3_column_int64(q, 0);
    w->best_trial = sqlite3_column_type(q, 5) == SQLITE_NULL ? -1 : sqlite3_column_int(q, 5);
    w->best_metric = sqlite3_column_type(q, 6) == SQLITE_NULL ? NAN : sqlite3_column_double(q, 6);
    w->owner_id = sqlite3_column_int64(q, 10);
    bool ok = dup_col(q, 1, &w->name);
    ok = dup_col(q, 2, &w->method) && ok;
    ok = dup_col(q, 3, &w->status) && ok;
    ok = dup_col(q, 4, &w->spec_json) && ok;
    ok = dup_col(q, 7, &w->error) && ok;
    ok = dup_col(q, 8, &w->created_at) && ok;
    ok = dup_col(q, 9, &w->finished_at) && ok;
    if (!ok) {
        store_sweep_clear(w);
        return -1;
    }
    return 0;
}

static int read_trial(sqlite3_stmt *q, void *elem)
{
    store_trial *t = elem;
    memset(t, 0, sizeof *t);
    t->sweep_id = sqlite3_column_int64(q, 0);
    t->trial = sqlite3_column_int(q, 1);
    t->job_id = sqlite3_column_int64(q, 2);
    t->rung = sqlite3_column_int(q, 4);
    bool ok = dup_col(q, 3, &t->params_json);
    ok = dup_col(q, 5, &t->state) && ok;
    ok = dup_col(q, 6, &t->metrics_json) && ok;
    ok = dup_col(q, 7, &t->message) && ok;
    if (!ok) {
        store_trial_clear(t);
        return -1;
    }
    return 0;
}

static int read_id(sqlite3_stmt *q, void *elem)
{
    *(int64_t *)elem = sqlite3_column_int64(q, 0);
    return 0;
}

static void clear_sweep(void *elem) { store_sweep_clear(elem); }
static void clear_trial(void *elem) { store_trial_clear(elem); }
static void clear_none(void *elem) { (void)elem; }

typedef struct rows {
    size_t size;
    int (*read)(sqlite3_stmt *q, void *elem);
    void (*clear)(void *elem);
} rows;

static const rows sweep_rows = { sizeof(store_sweep), read_sweep, clear_sweep };
static const rows trial_rows = { sizeof(store_trial), read_trial, clear_trial };
static const rows id_rows = { sizeof(int64_t), read_id, clear_none };

/* Steps q (bound) to its first row into out: 0, STORE_NOT_FOUND or -1. Finalizes q. */
static int one(sqlite3 *db, sqlite3_stmt *q, const rows *k, const char *what, void *out)
{
    int ret = -1;
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW)
        ret = k->read(q, out);
    else if (rc == SQLITE_DONE)
        ret = STORE_NOT_FOUND;
    else
        store_db_log(db, what);
    sqlite3_finalize(q);
    return ret;
}

/* Every row of q (bound) into a new array: 0 with *out and *n, or -1. Finalizes q. */
static int all(sqlite3 *db, sqlite3_stmt *q, const rows *k, const char *what, void **out, size_t *n)
{
    char *arr = NULL;
    size_t len = 0, cap = 0;
    int rc;
    *out = NULL;
    *n = 0;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            char *na = realloc(arr, ncap * k->size);
            if (!na)
                break;
            arr = na;
            cap = ncap;
        }
        if (k->read(q, arr + len * k->size) != 0)
            break;
        len++;
    }
    if (rc != SQLITE_DONE) {
        store_db_log(db, what);
        sqlite3_finalize(q);
        for (size_t i = 0; i < len; i++)
            k->clear(arr + i * k->size);
        free(arr);
        return -1;
    }
    sqlite3_finalize(q);
    *out = arr;
    *n = len;
    return 0;
}

/* Steps a change (bound): 0, STORE_NOT_FOUND when no row changed, -1. Finalizes q. */
static int change(sqlite3 *db, sqlite3_stmt *q, int bind_rc, const char *what)
{
    int ret = -1;
    if (bind_rc == SQLITE_OK && sqlite3_step(q) == SQLITE_DONE)
        ret = sqlite3_changes(db) > 0 ? 0 : STORE_NOT_FOUND;
    else
        store_db_log(db, what);
    sqlite3_finalize(q);
    return ret;
}

static int exec(sqlite3 *db, const char *sql)
{
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK)
        return 0;
    store_db_log(db, sql);
    return -1;
}

/* ---- sweeps ------------------------------------------------------------------ */

int store_sweep_insert(store *s, const char *name, const char *method, const char *spec_json,
                       int64_t owner, int64_t *id)
{
    sqlite3 *db = store_db_lock(s);
    sqlite3_stmt *q = store_db_prep(db, "INSERT INTO sweeps (name, method, spec_json, owner_id, created_at) "
                               "VALUES (?1, ?2, ?3, NULLIF(?4, 0), " NOW_SQL ")", "inserting sweep");
    int ret = -1;
    if (q) {
        int b = sqlite3_bind_text(q, 1, name, -1, SQLITE_TRANSIENT);
        b = b ? b : sqlite3_bind_text(q, 2, method, -1, SQLITE_TRANSIENT);
        b = b ? b : sqlite3_bind_text(q, 3, spec_json, -1, SQLITE_TRANSIENT);
        b = b ? b : sqlite3_bind_int64(q, 4, owner);
        ret = change(db, q, b, "inserting sweep");
        if (ret == 0)
            *id = sqlite3_last_insert_rowid(db);
        else
            ret = -1;
    }
    store_db_unlock(s);
    return ret;
}

int store_sweep_get(store *s, int64_t id, store_sweep *out)
{
    sqlite3 *db = store_db_lock(s);
    sqlite3_stmt *q = store_db_prep(db, "SELECT " SWEEP_COLS " FROM sweeps WHERE id = ?1", "reading sweep");
    int ret = -1;
    if (q && sqlite3_bind_int64(q, 1, id) == SQLITE_OK)
        ret = one(db, q, &sweep_rows, "reading sweep", out);
    else
        sqlite3_finalize(q);
    store_db_unlock(s);
    return ret;
}

int store_sweep_list_for(store *s, int64_t owner, store_sweep **out, size_t *n)
{
    sqlite3 *db = store_db_lock(s);
    sqlite3_stmt *q = store_db_prep(db, "SELECT " SWEEP_COLS " FROM sweeps WHERE ?1 = 0 OR owner_id = ?1 "
                               "ORDER BY id DESC", "listing sweeps");
    int ret = -1;
    if (q && sqlite3_bind_int64(q, 1, owner) == SQLITE_OK)
        ret = all(db, q, &sweep_rows, "listing sweeps", (void **)out, n);
    else
        sqlite3_finalize(q);
    store_db_unlock(s);
    return ret;
}

int store_sweep_ids_with_status(store *s, const char *status, int64_t **ids, size_t *n)
{
    sqlite3 *db = store_db_lock(s);
    sqlite3_stmt *q = store_db_prep(db, "SELECT id FROM sweeps WHERE status = ?1 ORDER BY id", "listing sweeps");
    int ret = -1;
    if (q && sqlite3_bind_text(q, 1, status, -1, SQLITE_TRANSIENT) == SQLITE_OK)
        ret = all(db, q, &id_rows, "listing sweeps", (void **)ids, n);
    else
        sqlite3_finalize(q);
    store_db_unlock(s);
    return ret;
}

int store_sweep_set_best(store *s, int64_t id, int best_trial, double best_metric)
{
    sqlite3 *db = store_db_lock(s);
    sqlite3_stmt *q = store_db_prep(db, "UPDATE sweeps SET best_trial = NULLIF(?2, -1), best_metric = ?3 "
                               "WHERE id = ?1", "updating sweep");
    int ret = -1;
    if (q) {
        int b = sqlite3_bind_int64(q, 1, id);
        b = b ? b : sqlite3_bind_int(q, 2, best_trial);
        b = b ? b : isfinite(best_metric) ? sqlite3_bind_double(q, 3, best_metric) : sqlite3_bind_null(q, 3);
        ret = change(db, q, b, "updating sweep");
    }
    store_db_unlock(s);
    return ret;
}

int store_sweep_finish(store *s, int64_t id, const char *status, const char *error)
{
    sqlite3 *db = store_db_lock(s);
    sqlite3_stmt *q = store_db_prep(db, "UPDATE sweeps SET status = ?2, error = ?3, finished_at = " NOW_SQL
                               " WHERE id = ?1 AND status = 'running'", "ending sweep");
    int ret = -1;
    if (q) {
        int b = sqlite3_bind_int64(q, 1, id);
        b = b ? b : sqlite3_bind_text(q, 2, status, -1, SQLITE_TRANSIENT);
        b = b ? b : bind_text_or_null(q, 3, error);
        ret = change(db, q, b, "ending sweep");
    }
    store_db_unlock(s);
    return ret;
}

int store_sweep_delete(store *s, int64_t id)
{
    sqlite3 *db = store_db_lock(s);
    sqlite3_stmt *q = store_db_prep(db, "DELETE FROM sweeps WHERE id = ?1", "deleting sweep");
    int ret = q ? change(db, q, sqlite3_bind_int64(q, 1, id), "deleting sweep") : -1;
    store_db_unlock(s);
    return ret;
}

void store_sweep_clear(store_sweep *w)
{
    if (!w)
        return;
    free(w->name);
    free(w->method);
    free(w->status);
    free(w->spec_json);
    free(w->error);
    free(w->created_at);
    free(w->finished_at);
    memset(w, 0, sizeof *w);
}

void store_sweep_list_free(store_sweep *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        store_sweep_clear(&list[i]);
    free(list);
}

/* ---- trials ------------------------------------------------------------------ */

/* Binds a trial's columns in TRIAL_COLS order at 1..8. */
static int bind_trial(sqlite3_stmt *q, const store_trial *t)
{
    int b = sqlite3_bind_int64(q, 1, t->sweep_id);
    b = b ? b : sqlite3_bind_int(q, 2, t->trial);
    b = b ? b : t->job_id ? sqlite3_bind_int64(q, 3, t->job_id) : sqlite3_bind_null(q, 3);
    b = b ? b : sqlite3_bind_text(q, 4, t->params_json ? t->params_json : "{}", -1, SQLITE_TRANSIENT);
    b = b ? b : sqlite3_bind_int(q, 5, t->rung);
    b = b ? b : sqlite3_bind_text(q, 6, t->state, -1, SQLITE_TRANSIENT);
    b = b ? b : sqlite3_bind_text(q, 7, t->metrics_json ? t->metrics_json : "[]", -1, SQLITE_TRANSIENT);
    b = b ? b : bind_text_or_null(q, 8, t->message);
    return b;
}

/* Sets job t->job_id's sweep_id (no row is fine: the job may be gone). */
static int mark_job(sqlite3 *db, const store_trial *t)
{
    if (!t->job_id)
        return 0;
    sqlite3_stmt *q = store_db_prep(db, "UPDATE jobs SET sweep_id = ?2 WHERE id = ?1", "marking a trial's job");
    if (!q)
        return -1;
    int b = sqlite3_bind_int64(q, 1, t->job_id);
    b = b ? b : sqlite3_bind_int64(q, 2, t->sweep_id);
    int rc = change(db, q, b, "marking a trial's job");
    return rc < 0 ? -1 : 0;
}

int store_trial_insert(store *s, const store_trial *t)
{
    sqlite3 *db = store_db_lock(s);
    int ret = -1;
    if (exec(db, "BEGIN IMMEDIATE") == 0) {
        sqlite3_stmt *q = store_db_prep(db, "INSERT INTO sweep_trials (" TRIAL_COLS ") VALUES "
                                   "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)", "inserting trial");
        ret = q ? change(db, q, bind_trial(q, t), "inserting trial") : -1;
        if (ret == 0)
            ret = mark_job(db, t);
        ret = ret == 0 ? exec(db, "COMMIT") : -1;
        if (ret != 0)
            exec(db, "ROLLBACK");
    }
    store_db_unlock(s);
    return ret;
}

int store_trial_update(store *s, const store_trial *t)
{
    sqlite3 *db = store_db_lock(s);
    sqlite3_stmt *q = store_db_prep(db, "UPDATE sweep_trials SET job_id = ?3, params_json = ?4, rung = ?5, "
                               "state = ?6, metrics_json = ?7, message = ?8 "
                               "WHERE sweep_id = ?1 AND trial = ?2", "updating trial");
    int ret = q ? change(db, q, bind_trial(q, t), "updating trial") : -1;
    store_db_unlock(s);
    return ret;
}

int store_trial_list(store *s, int64_t sweep_id, store_trial **out, size_t *n)
{
    sqlite3 *db = store_db_lock(s);
    sqlite3_stmt *q = store_db_prep(db, "SELECT " TRIAL_COLS " FROM sweep_trials WHERE sweep_id = ?1 "
                               "ORDER BY trial", "listing trials");
    int ret = -1;
    if (q && sqlite3_bind_int64(q, 1, sweep_id) == SQLITE_OK)
        ret = all(db, q, &trial_rows, "listing trials", (void **)out, n);
    else
        sqlite3_finalize(q);
    store_db_unlock(s);
    return ret;
}

void store_trial_clear(store_trial *t)
{
    if (!t)
        return;
    free(t->params_json);
    free(t->state);
    free(t->metrics_json);
    free(t->message);
    memset(t, 0, sizeof *t);
}

void store_trial_list_free(store_trial *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        store_trial_clear(&list[i]);
    free(list);
}

int store_sweep_promote(store *s, const store_trial *t, int64_t job_id, int epochs, int64_t steps,
                        const char *config_json)
{
    sqlite3 *db = store_db_lock(s);
    int ret = -1;
    if (exec(db, "BEGIN IMMEDIATE") != 0)
        goto out;
    sqlite3_stmt *q = store_db_prep(db, "UPDATE jobs SET status = 'queued', error = NULL, started_at = NULL, "
                               "finished_at = NULL, epochs = ?2, steps = ?3, config_json = ?4, "
                               "eta_seconds = -1 WHERE id = ?1 AND status = 'done'", "promoting a trial");
    if (q) {
        int b = sqlite3_bind_int64(q, 1, job_id);
        b = b ? b : sqlite3_bind_int(q, 2, epochs);
        b = b ? b : sqlite3_bind_int64(q, 3, steps);
        b = b ? b : sqlite3_bind_text(q, 4, config_json, -1, SQLITE_TRANSIENT);
        ret = change(db, q, b, "promoting a trial");
    }
    if (ret == 0) {
        q = store_db_prep(db, "UPDATE sweep_trials SET job_id = ?3, params_json = ?4, rung = ?5, state = ?6, "
                     "metrics_json = ?7, message = ?8 WHERE sweep_id = ?1 AND trial = ?2",
                 "promoting a trial");
        ret = q ? change(db, q, bind_trial(q, t), "promoting a trial") : -1;
        ret = ret == STORE_NOT_FOUND ? -1 : ret;
    }
    if (ret == 0)
        ret = exec(db, "COMMIT");
    if (ret != 0)
        exec(db, "ROLLBACK");
out:
    store_db_unlock(s);
    return ret;
}
