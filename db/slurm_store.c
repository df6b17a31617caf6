/* db/slurm_store.c: a job's Slurm fields (contract in slurm_store.h).
 *
 * As db/event_store.c: each function takes the store's lock
 * (store_db_lock), prepares its statement with bound parameters and
 * finalizes it before unlocking.
 */
#include "db/slurm_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "db/store_db.h"     /* store_db_lock, store_db_unlock, store_db_prep */

/* Runs one UPDATE of a job's row: the job id is ?1, bind fills the rest. */
static int update_job(store *s, int64_t job_id, const char *sql, const char *what,
                      int (*bind)(sqlite3_stmt *q, const void *arg), const void *arg)
{
    sqlite3 *db = store_db_lock(s);
    int ret = -1;
    sqlite3_stmt *q = store_db_prep(db, sql, what);
    if (q) {
        int rc = sqlite3_bind_int64(q, 1, job_id);
        if (rc == SQLITE_OK && bind)
            rc = bind(q, arg);
        if (rc == SQLITE_OK)
            rc = sqlite3_step(q);
        if (rc == SQLITE_DONE)
            ret = sqlite3_changes(db) ? 0 : STORE_NOT_FOUND;
        else
            store_db_log(db, what);
        sqlite3_finalize(q);
    }
    store_db_unlock(s);
    return ret;
}

static int bind_id2(sqlite3_stmt *q, const void *arg)
{
    return sqlite3_bind_int64(q, 2, *(const int64_t *)arg);
}

int store_slurm_submitted(store *s, int64_t job_id, int64_t slurm_job_id)
{
    return update_job(s, job_id, "UPDATE jobs SET slurm_job_id = ?2, slurm_state = 'PENDING', "
                      "slurm_reason = '', slurm_nodes = '', slurm_offset = 0, slurm_active = 1 "
                      "WHERE id = ?1", "storing a job's Slurm id", bind_id2, &slurm_job_id);
}

typedef struct state_args { const char *state, *reason, *nodes; } state_args;

static int bind_state(sqlite3_stmt *q, const void *arg)
{
    const state_args *a = arg;
    int rc = sqlite3_bind_text(q, 2, a->state, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_text(q, 3, a->reason, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_text(q, 4, a->nodes, -1, SQLITE_STATIC);
    return rc;
}

int store_slurm_set_state(store *s, int64_t job_id, const char *state, const char *reason,
                          const char *nodes)
{
    state_args a = { state ? state : "", reason ? reason : "", nodes ? nodes : "" };
    return update_job(s, job_id, "UPDATE jobs SET slurm_state = ?2, slurm_reason = ?3, "
                      "slurm_nodes = ?4 WHERE id = ?1", "storing a job's Slurm state",
                      bind_state, &a);
}

int store_slurm_set_offset(store *s, int64_t job_id, int64_t offset)
{
    return update_job(s, job_id, "UPDATE jobs SET slurm_offset = ?2 WHERE id = ?1",
                      "storing how far a job's reports were read", bind_id2, &offset);
}

int store_slurm_ended(store *s, int64_t job_id)
{
    return update_job(s, job_id, "UPDATE jobs SET slurm_active = 0 WHERE id = ?1",
                      "storing a Slurm job's end", NULL, NULL);
}

static void copy_col(sqlite3_stmt *q, int col, char *buf, size_t n)
{
    const unsigned char *t = sqlite3_column_text(q, col);
    snprintf(buf, n, "%s", t ? (const char *)t : "");
}

int store_slurm_get(store *s, int64_t job_id, store_slurm *out)
{
    memset(out, 0, sizeof *out);
    sqlite3 *db = store_db_lock(s);
    int ret = -1;
    const char *what = "reading a job's Slurm fields";
    sqlite3_stmt *q = store_db_prep(db, "SELECT slurm_job_id, slurm_state, slurm_reason, "
                                    "slurm_nodes, slurm_offset, slurm_active FROM jobs "
                                    "WHERE id = ?1", what);
    if (q) {
        int rc = sqlite3_bind_int64(q, 1, job_id);
        if (rc == SQLITE_OK)
            rc = sqlite3_step(q);
        if (rc == SQLITE_ROW) {
            out->slurm_job_id = sqlite3_column_int64(q, 0);
            copy_col(q, 1, out->state, sizeof out->state);
            copy_col(q, 2, out->reason, sizeof out->reason);
            copy_col(q, 3, out->nodes, sizeof out->nodes);
            out->report_offset = sqlite3_column_int64(q, 4);
            out->active = sqlite3_column_int(q, 5) != 0;
            ret = 0;
        } else if (rc == SQLITE_DONE) {
            ret = STORE_NOT_FOUND;
        } else {
            store_db_log(db, what);
        }
        sqlite3_finalize(q);
    }
    store_db_unlock(s);
    return ret;
}

int store_slurm_active(store *s, int64_t **ids, size_t *n)
{
    *ids = NULL;
    *n = 0;
    sqlite3 *db = store_db_lock(s);
    int ret = -1;
    const char *what = "reading the jobs running in Slurm";
    sqlite3_stmt *q = store_db_prep(db, "SELECT id FROM jobs WHERE slurm_active = 1 AND "
                                    "status IN ('queued', 'running') ORDER BY id", what);
    size_t cap = 0;
    int rc = q ? SQLITE_ROW : SQLITE_ERROR;
    while (q && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (*n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            int64_t *grown = realloc(*ids, ncap * sizeof *grown);
            if (!grown) {
                rc = SQLITE_NOMEM;
                break;
            }
            *ids = grown;
            cap = ncap;
        }
        (*ids)[(*n)++] = sqlite3_column_int64(q, 0);
    }
    if (rc == SQLITE_DONE)
        ret = 0;
    else if (q)
        store_db_log(db, what);
    sqlite3_finalize(q);
    store_db_unlock(s);
    if (ret != 0) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    return ret;
}
