/* db/store_db.h: the store's connection for the other files of db/ (internal
 * to db/; db/users.c). Everything else goes through store.h's functions.
 *
 * store_db_lock takes the store's lock and returns its connection; the caller
 * runs its statements (prepared with bound parameters, finalized before it
 * unlocks) and calls store_db_unlock. No other store function may be called
 * in between (the lock is not recursive).
 */
#ifndef KILN_DB_STORE_DB_H
#define KILN_DB_STORE_DB_H

#include <sqlite3.h>
#include <stdio.h>

#include "db/store.h"

sqlite3 *store_db_lock(store *s);
void store_db_unlock(store *s);

/* A job row's columns, in the order store_db_read_job reads them (the
 * columns of jobs, unqualified, with the table named jobs). */
#define STORE_JOB_COLS "id, dataset_id, status, config_json, network, error, epoch, epochs, step, " \
                 "steps, images_per_sec, eta_seconds, created_at, started_at, finished_at, " \
                 "stopped_epoch, stopped_best_epoch, stopped_message, owner_id, name, tags, notes, " \
                 "precision, (SELECT d.name FROM datasets d WHERE d.id = jobs.dataset_id), sweep_id, " \
                 "priority, devices"
#define STORE_JOB_NCOLS 27

/* Fills *j from a row of STORE_JOB_COLS: 0, or -1 when out of memory (*j clear). */
int store_db_read_job(sqlite3_stmt *q, store_job *j);

/* Logs a failed statement on stderr: "kiln: store: <what>: <SQLite's message>". */
static inline void store_db_log(sqlite3 *db, const char *what)
{
    fprintf(stderr, "kiln: store: %s: %s\n", what, sqlite3_errmsg(db));
}

/* Prepares sql, or logs why not (store_db_log) and returns NULL. */
static inline sqlite3_stmt *store_db_prep(sqlite3 *db, const char *sql, const char *what)
{
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) {
        store_db_log(db, what);
        sqlite3_finalize(q);
        return NULL;
    }
    return q;
}

#endif
