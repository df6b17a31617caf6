/* db/event_store.c: a job's stored event stream (contract in event_store.h).
 *
 * As db/users.c: each function takes the store's lock (store_db_lock),
 * prepares its statements with bound parameters and finalizes them before
 * unlocking. An append is one transaction (the counter and the row), so a
 * crash leaves neither or both.
 */
#include "db/event_store.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "db/store_db.h"     /* store_db_lock, store_db_unlock */

/* The one value sql (a statement on job ?1 whose row is one integer: its
 * event_seq) answers, into *id. 0, STORE_NOT_FOUND when the job is not
 * there, or -1 (logged as `what`). */
static int job_seq(sqlite3 *db, const char *sql, int64_t job_id, uint64_t *id, const char *what)
{
    sqlite3_stmt *q = store_db_prep(db, sql, what);
    if (!q)
        return -1;
    int ret = -1;
    int rc = sqlite3_bind_int64(q, 1, job_id);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        *id = (uint64_t)sqlite3_column_int64(q, 0);
        ret = 0;
    } else if (rc == SQLITE_DONE) {
        ret = STORE_NOT_FOUND;
    } else {
        store_db_log(db, what);
    }
    sqlite3_finalize(q);
    return ret;
}

/* Takes the next id of the job's stream (0 with *id, STORE_NOT_FOUND, -1).
 * Inside the append's transaction. */
static int next_id(sqlite3 *db, int64_t job_id, uint64_t *id)
{
    return job_seq(db, "UPDATE jobs SET event_seq = event_seq + 1 WHERE id = ?1 RETURNING event_seq", job_id, id,
                   "taking an event id");
}

static int insert_event(sqlite3 *db, int64_t job_id, uint64_t id, const char *type, int64_t step,
                        const char *data)
{
    sqlite3_stmt *q = store_db_prep(db, "INSERT INTO job_events (job_id, seq, type, step, data) "
                               "VALUES (?1, ?2, ?3, ?4, ?5)", "storing an event");
    if (!q)
        return -1;
    int rc = sqlite3_bind_int64(q, 1, job_id);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(q, 2, (int64_t)id);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_text(q, 3, type, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK)
        rc = step < 0 ? sqlite3_bind_null(q, 4) : sqlite3_bind_int64(q, 4, step);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_text(q, 5, data, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(q);
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) {
        store_db_log(db, "storing an event");
        return -1;
    }
    return 0;
}

int store_event_append(store *s, int64_t job_id, const char *type, int64_t step, const char *data,
                       uint64_t *id)
{
    sqlite3 *db = store_db_lock(s);
    int ret = -1;
    if (sqlite3_exec(db, "SAVEPOINT event_append", NULL, NULL, NULL) != SQLITE_OK) {
        store_db_log(db, "storing an event");
        goto out;
    }
    ret = next_id(db, job_id, id);
    if (ret == 0 && insert_event(db, job_id, *id, type, step, data) != 0)
        ret = -1;
    if (ret != 0)
        sqlite3_exec(db, "ROLLBACK TO event_append", NULL, NULL, NULL);
    if (sqlite3_exec(db, "RELEASE event_append", NULL, NULL, NULL) != SQLITE_OK && ret == 0) {
        store_db_log(db, "storing an event");
        ret = -1;
    }
out:
    store_db_unlock(s);
    return ret;
}

int store_event_page(store *s, int64_t job_id, uint64_t after, store_event *out, size_t max,
                     size_t *n)
{
    *n = 0;
    sqlite3 *db = store_db_lock(s);
    int ret = -1;
    sqlite3_stmt *q = store_db_prep(db, "SELECT seq, type, data FROM job_events WHERE job_id = ?1 AND seq > ?2 "
                               "ORDER BY seq LIMIT ?3", "reading events");
    if (!q)
        goto out;
    int rc = sqlite3_bind_int64(q, 1, job_id);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(q, 2, after > INT64_MAX ? INT64_MAX : (int64_t)after);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(q, 3, max > INT64_MAX ? INT64_MAX : (int64_t)max);
    while (rc == SQLITE_OK && *n < max && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        const unsigned char *type = sqlite3_column_text(q, 1);
        const unsigned char *data = sqlite3_column_text(q, 2);
        store_event *e = &out[*n];
        e->id = (uint64_t)sqlite3_column_int64(q, 0);
        snprintf(e->type, sizeof e->type, "%s", type ? (const char *)type : "");
        e->data = strdup(data ? (const char *)data : "null");
        if (!e->data) {
            rc = SQLITE_NOMEM;
            break;
        }
        (*n)++;
        rc = SQLITE_OK;
    }
    if (rc == SQLITE_OK || rc == SQLITE_DONE || rc == SQLITE_ROW) {
        ret = 0;
    } else {
        store_db_log(db, "reading events");
        for (size_t i = 0; i < *n; i++)
            store_event_clear(&out[i]);
        *n = 0;
    }
    sqlite3_finalize(q);
out:
    store_db_unlock(s);
    return ret;
}

int store_event_trim(store *s, int64_t job_id, int64_t after_step)
{
    sqlite3 *db = store_db_lock(s);
    int ret = -1;
    sqlite3_stmt *q = store_db_prep(db, "DELETE FROM job_events WHERE job_id = ?1 AND "
                               "(type = 'status' OR (type = 'metric' AND (?2 < 0 OR step > ?2)))",
                           "trimming events");
    if (q) {
        int rc = sqlite3_bind_int64(q, 1, job_id);
        if (rc == SQLITE_OK)
            rc = sqlite3_bind_int64(q, 2, after_step);
        if (rc == SQLITE_OK)
            rc = sqlite3_step(q);
        if (rc == SQLITE_DONE)
            ret = 0;
        else
            store_db_log(db, "trimming events");
        sqlite3_finalize(q);
    }
    store_db_unlock(s);
    return ret;
}

int store_event_last(store *s, int64_t job_id, uint64_t *id)
{
    sqlite3 *db = store_db_lock(s);
    int ret = job_seq(db, "SELECT event_seq FROM jobs WHERE id = ?1", job_id, id, "reading an event id");
    store_db_unlock(s);
    return ret;
}

void store_event_clear(store_event *e)
{
    if (!e)
        return;
    free(e->data);
    e->data = NULL;
}
