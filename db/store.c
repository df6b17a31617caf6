/* db/store.c: the SQLite store (contract in store.h).
 *
 * Crash safety: the database runs in WAL mode with synchronous=NORMAL, so a
 * committed transaction survives a crash of kiln (a power loss may lose the
 * last few commits, never corrupt the file). Every write is one statement in
 * its own transaction, except the migrations, which run together in one
 * BEGIN IMMEDIATE transaction: a second process opening the same file at the
 * same moment waits (busy timeout) and then finds the schema current.
 *
 * Threads: one connection, opened SQLITE_OPEN_FULLMUTEX, and a mutex of our own
 * around every public function, so that a statement's bind-step-read-reset is
 * never interleaved with another thread's. Statements are prepared once (a
 * table of SQL texts, prepared lazily and kept) and always use bound
 * parameters; no value ever reaches SQL text.
 */
#include "db/store.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "base/err.h"
#include "db/migrations.h"   /* store_migrations, store_migration_count */
#include "db/store_db.h"     /* store_db_lock, store_db_unlock */

#define STORE_BUSY_TIMEOUT_MS 5000
#define NOW_SQL "strftime('%Y-%m-%dT%H:%M:%SZ', 'now')"

/* ---- the statements ------------------------------------------------------- */

enum stmt_id {
    ST_DS_INSERT,
    ST_DS_PROGRESS,
    ST_DS_FINISH,
    ST_DS_GET,
    ST_DS_BY_NAME,
    ST_DS_LIST,
    ST_DS_DELETE,
    ST_JOB_INSERT,
    ST_JOB_STATUS,
    ST_JOB_PROGRESS,
    ST_JOB_CONFIG,
    ST_JOB_STOPPED,
    ST_JOB_GET,
    ST_JOB_LIST,
    ST_JOB_NEXT_QUEUED,
    ST_JOB_IDS_STATUS,
    ST_JOB_DELETE,
    ST_METRIC_INSERT,
    ST_METRIC_LIST,
    ST_METRIC_LIST_ALL,
    ST_METRIC_DELETE,
    ST_METRIC_LATEST,
    ST_METRIC_PAGE,
    ST_METRIC_LAST_ROW,
    ST_METRIC_ROW_AT,
    ST_METRIC_COUNT,
    ST_JOB_REQUEUE_ENDED,
    ST_EVAL_INSERT,
    ST_EVAL_STATUS,
    ST_EVAL_PROGRESS,
    ST_EVAL_FINISH,
    ST_EVAL_GET,
    ST_EVAL_BY_JOB,
    ST_EVAL_IDS_STATUS,
    ST_EVAL_COUNT_DATASET,
    ST_EVAL_DELETE,
    ST_QUEUE_LIST,
    ST_DS_LIST_FOR,
    ST_DS_SHARED,
    ST_JOB_LIST_FOR,
    ST_EVAL_BY_JOB_FOR,
    ST_DS_OWNER,
    ST_JOB_OWNER,
    ST_EVAL_OWNER,
    ST_JOB_META,
    ST_JOB_PRIORITY,
    ST_JOB_DEVICES,
    ST_EVAL_DEVICES,
    ST_COUNT
};

#define DS_COLS "id, name, status, progress, info_json, error, created_at, eta_seconds, owner_id, shared"
#define JOB_COLS STORE_JOB_COLS
#define METRIC_COLS "step, epoch, tag, value, wall_time"
#define EVAL_COLS "id, job_id, dataset_id, split, selection, epoch, status, progress, result_json, " \
                  "error, created_at, started_at, finished_at, owner_id, devices"
/* A job's and an evaluation's status change (?2) stamps the same times:
 * "running" starts, "queued" unstarts, an end finishes, anything else unfinishes. */
#define STATUS_STAMPS_SQL \
    "started_at = CASE WHEN ?2 = 'running' THEN " NOW_SQL " " \
    "                  WHEN ?2 = 'queued' THEN NULL ELSE started_at END, " \
    "finished_at = CASE WHEN ?2 IN ('done', 'failed', 'cancelled') THEN " NOW_SQL " " \
    "                   ELSE NULL END, " \
    "devices = CASE WHEN ?2 = 'queued' THEN NULL ELSE devices END "

static const char *const stmt_sql[ST_COUNT] = {
    [ST_DS_INSERT] = "INSERT INTO datasets (name, status, progress, created_at) "
                     "VALUES (?1, 'importing', 0, " NOW_SQL ")",
    [ST_DS_PROGRESS] = "UPDATE datasets SET progress = ?2, eta_seconds = ?3 WHERE id = ?1",
    [ST_DS_FINISH] = "UPDATE datasets SET status = ?2, info_json = ?3, error = ?4, eta_seconds = -1, "
                     "progress = CASE WHEN ?2 = 'ready' THEN 1 ELSE progress END WHERE id = ?1",
    [ST_DS_GET] = "SELECT " DS_COLS " FROM datasets WHERE id = ?1",
    [ST_DS_BY_NAME] = "SELECT " DS_COLS " FROM datasets WHERE name = ?1 "
                      "ORDER BY (status = 'ready') DESC, id DESC LIMIT 1",
    [ST_DS_LIST] = "SELECT " DS_COLS " FROM datasets ORDER BY id DESC",
    [ST_DS_DELETE] = "DELETE FROM datasets WHERE id = ?1",
    /* The name and precision start as the config's (migration 7). */
    [ST_JOB_INSERT] = "INSERT INTO jobs (dataset_id, status, network, config_json, epochs, created_at, "
                      "name, precision, priority) VALUES (?1, 'queued', ?2, ?3, ?4, " NOW_SQL ", "
                      "CASE WHEN json_valid(?3) THEN COALESCE(json_extract(?3, '$.name'), '') ELSE '' END, "
                      "CASE WHEN json_valid(?3) THEN COALESCE(json_extract(?3, '$.precision'), 'fp32') "
                      "ELSE 'fp32' END, "
                      "CASE WHEN json_valid(?3) AND json_type(?3, '$.priority') = 'integer' "
                      "THEN json_extract(?3, '$.priority') ELSE 0 END)",
    [ST_JOB_META] = "UPDATE jobs SET name = COALESCE(?2, name), tags = COALESCE(?3, tags), "
                    "notes = COALESCE(?4, notes) WHERE id = ?1",
    [ST_JOB_STATUS] =
        "UPDATE jobs SET status = ?2, error = ?3, " STATUS_STAMPS_SQL "WHERE id = ?1",
    [ST_JOB_PROGRESS] = "UPDATE jobs SET epoch = ?2, step = ?3, steps = ?4, images_per_sec = ?5, "
                        "eta_seconds = ?6 WHERE id = ?1",
    [ST_JOB_CONFIG] = "UPDATE jobs SET config_json = ?2 WHERE id = ?1",
    [ST_JOB_STOPPED] = "UPDATE jobs SET stopped_epoch = ?2, stopped_best_epoch = ?3, "
                       "stopped_message = ?4 WHERE id = ?1",
    [ST_JOB_GET] = "SELECT " JOB_COLS " FROM jobs WHERE id = ?1",
    [ST_JOB_LIST] = "SELECT " JOB_COLS " FROM jobs ORDER BY id DESC",
    [ST_JOB_NEXT_QUEUED] = "SELECT id FROM jobs WHERE status = 'queued' ORDER BY id LIMIT 1",
    [ST_JOB_IDS_STATUS] = "SELECT id FROM jobs WHERE status = ?1 ORDER BY id",
    [ST_JOB_DELETE] = "DELETE FROM jobs WHERE id = ?1",
    [ST_METRIC_INSERT] = "INSERT INTO metrics (job_id, step, epoch, tag, value, wall_time) "
                         "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    [ST_METRIC_LIST] = "SELECT " METRIC_COLS " FROM metrics WHERE job_id = ?1 AND step > ?2 ORDER BY id",
    /* all of a job's metrics: read in id order off metrics_by_job_id (the "+"
     * keeps SQLite off the step index, whose rows it would then have to sort) */
    [ST_METRIC_LIST_ALL] = "SELECT " METRIC_COLS " FROM metrics WHERE job_id = ?1 AND +step > ?2 ORDER BY id",
    [ST_METRIC_DELETE] = "DELETE FROM metrics WHERE job_id = ?1 AND step > ?2",
    [ST_METRIC_LATEST] = "SELECT " METRIC_COLS " FROM metrics WHERE id IN "
                         "(SELECT MAX(id) FROM metrics WHERE job_id = ?1 GROUP BY tag) ORDER BY tag",
    /* Paging a job's metrics by row id (index metrics_by_job_id, migration 5):
     * each page is one short statement, so a slow reader holds nothing between pages. */
    [ST_METRIC_PAGE] = "SELECT id, " METRIC_COLS " FROM metrics WHERE job_id = ?1 AND id > ?2 "
                       "AND id <= ?3 ORDER BY id LIMIT ?4",
    [ST_METRIC_LAST_ROW] = "SELECT COALESCE(MAX(id), 0) FROM metrics WHERE job_id = ?1",
    [ST_METRIC_ROW_AT] = "SELECT id FROM metrics WHERE job_id = ?1 AND id <= ?2 ORDER BY id "
                         "LIMIT 1 OFFSET ?3",
    [ST_METRIC_COUNT] = "SELECT COUNT(*) FROM metrics WHERE job_id = ?1 AND id <= ?2",
    [ST_JOB_REQUEUE_ENDED] =
        "UPDATE jobs SET status = 'queued', error = NULL, started_at = NULL, finished_at = NULL, "
        "devices = NULL "
        "WHERE id = ?1 AND status IN ('failed', 'cancelled')",
    [ST_EVAL_INSERT] = "INSERT INTO evaluations (job_id, dataset_id, split, selection, epoch, status, "
                       "created_at) VALUES (?1, ?2, ?3, ?4, ?5, 'queued', " NOW_SQL ")",
    [ST_EVAL_STATUS] =
        "UPDATE evaluations SET status = ?2, error = ?3, "
        "progress = CASE WHEN ?2 = 'queued' THEN 0 ELSE progress END, " STATUS_STAMPS_SQL
        "WHERE id = ?1",
    [ST_EVAL_PROGRESS] = "UPDATE evaluations SET progress = ?2 WHERE id = ?1",
    [ST_EVAL_FINISH] = "UPDATE evaluations SET status = ?2, result_json = ?3, error = ?4, "
                       "progress = CASE WHEN ?2 = 'done' THEN 1 ELSE progress END, "
                       "finished_at = " NOW_SQL " WHERE id = ?1",
    [ST_EVAL_GET] = "SELECT " EVAL_COLS " FROM evaluations WHERE id = ?1",
    [ST_EVAL_BY_JOB] = "SELECT " EVAL_COLS " FROM evaluations WHERE job_id = ?1 ORDER BY id DESC",
    [ST_EVAL_IDS_STATUS] = "SELECT id FROM evaluations WHERE status = ?1 ORDER BY id",
    [ST_EVAL_COUNT_DATASET] = "SELECT COUNT(*) FROM evaluations WHERE dataset_id = ?1",
    [ST_EVAL_DELETE] = "DELETE FROM evaluations WHERE id = ?1",
    /* The one queue order (store.h): priority, higher first (evaluations 0),
     * then oldest, jobs before evaluations, then id. */
    [ST_QUEUE_LIST] = "SELECT 0 AS kind, id, created_at, priority FROM jobs WHERE status = 'queued' "
                      "UNION ALL "
                      "SELECT 1 AS kind, id, created_at, 0 FROM evaluations WHERE status = 'queued' "
                      "ORDER BY 4 DESC, 3, 1, 2",
    /* ?1 = 0: every row (an admin, or no users); else that owner's (and shared datasets). */
    [ST_DS_LIST_FOR] = "SELECT " DS_COLS " FROM datasets WHERE ?1 = 0 OR owner_id = ?1 OR shared = 1 "
                       "ORDER BY id DESC",
    [ST_DS_SHARED] = "UPDATE datasets SET shared = ?2 WHERE id = ?1",
    [ST_JOB_LIST_FOR] = "SELECT " JOB_COLS " FROM jobs WHERE ?1 = 0 OR owner_id = ?1 ORDER BY id DESC",
    [ST_EVAL_BY_JOB_FOR] = "SELECT " EVAL_COLS " FROM evaluations WHERE job_id = ?1 AND "
                           "(?2 = 0 OR owner_id = ?2) ORDER BY id DESC",
    [ST_DS_OWNER] = "UPDATE datasets SET owner_id = NULLIF(?2, 0) WHERE id = ?1",
    [ST_JOB_OWNER] = "UPDATE jobs SET owner_id = NULLIF(?2, 0) WHERE id = ?1",
    [ST_EVAL_OWNER] = "UPDATE evaluations SET owner_id = NULLIF(?2, 0) WHERE id = ?1",
    [ST_JOB_PRIORITY] = "UPDATE jobs SET priority = ?2 WHERE id = ?1 AND status = 'queued'",
    [ST_JOB_DEVICES] = "UPDATE jobs SET devices = ?2 WHERE id = ?1",
    [ST_EVAL_DEVICES] = "UPDATE evaluations SET devices = ?2 WHERE id = ?1",
};

struct store {
    sqlite3 *db;
    pthread_mutex_t mu;
    sqlite3_stmt *stmt[ST_COUNT];
};


/* For the functions whose contract has no err: the reason goes to stderr,
 * where the server's log has it next to the request that failed. */
static void log_db_error(store *s, const char *what)
{
    fprintf(stderr, "kiln: store: %s: %s\n", what, sqlite3_errmsg(s->db));
}

/* The prepared statement for id, reset and with no bindings, or NULL. Call
 * with s->mu held; pair with stmt_done. */
static sqlite3_stmt *stmt_get(store *s, enum stmt_id id, char *err, size_t errlen)
{
    if (!s->stmt[id]) {
        int rc = sqlite3_prepare_v3(s->db, stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT,
                                    &s->stmt[id], NULL);
        if (rc != SQLITE_OK) {
            set_err(err, errlen, "preparing statement %d: %s", (int)id, sqlite3_errmsg(s->db));
            if (!err)
                log_db_error(s, "prepare");
            s->stmt[id] = NULL;
            return NULL;
        }
    }
    return s->stmt[id];
}

static void stmt_done(sqlite3_stmt *q)
{
    if (q) {
        sqlite3_reset(q);
        sqlite3_clear_bindings(q);
    }
}

/* *dst = a copy of text column i, or NULL for SQL NULL. Returns false only
 * when a non-NULL value could not be copied (out of memory). */
static bool col_dup(sqlite3_stmt *q, int i, char **dst)
{
    *dst = NULL;
    if (sqlite3_column_type(q, i) == SQLITE_NULL)
        return true;
    const unsigned char *t = sqlite3_column_text(q, i);
    *dst = t ? strdup((const char *)t) : NULL;
    return *dst != NULL;
}

static void lock(store *s) { pthread_mutex_lock(&s->mu); }
static void unlock(store *s) { pthread_mutex_unlock(&s->mu); }

/* ---- opening and migrating ------------------------------------------------ */

static int exec_sql(store *s, const char *sql, char *err, size_t errlen)
{
    char *msg = NULL;
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        set_err(err, errlen, "%s", msg ? msg : sqlite3_errstr(rc));
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

static int read_user_version(store *s, int *version, char *err, size_t errlen)
{
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(s->db, "PRAGMA user_version", -1, &q, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(q);
    if (rc != SQLITE_ROW) {
        set_err(err, errlen, "reading the schema version: %s", sqlite3_errmsg(s->db));
        sqlite3_finalize(q);
        return -1;
    }
    *version = sqlite3_column_int(q, 0);
    sqlite3_finalize(q);
    return 0;
}

static int latest_version(void)
{
    return store_migrations[store_migration_count - 1].version;
}

static int migrate(store *s, const char *path, char *err, size_t errlen)
{
    char msg[512];
    int version = 0;
    int latest = latest_version();

    if (exec_sql(s, "BEGIN IMMEDIATE", msg, sizeof msg) != 0) {
        set_err(err, errlen, "%s: cannot start the schema check: %s", path, msg);
        return -1;
    }
    if (read_user_version(s, &version, msg, sizeof msg) != 0) {
        set_err(err, errlen, "%s: %s", path, msg);
        goto fail;
    }
    if (version > latest) {
        set_err(err, errlen,
                "%s has schema version %d, newer than this kiln knows (%d): it was written by a "
                "newer kiln; run that version, or use another data directory", path, version, latest);
        goto fail;
    }
    for (size_t i = 0; i < store_migration_count; i++) {
        const store_migration *m = &store_migrations[i];
        if (m->version <= version)
            continue;
        if (exec_sql(s, m->sql, msg, sizeof msg) != 0) {
            set_err(err, errlen, "%s: migration to schema version %d (%s) failed: %s", path,
                    m->version, m->what, msg);
            goto fail;
        }
        char pragma[64];
        snprintf(pragma, sizeof pragma, "PRAGMA user_version = %d", m->version);
        if (exec_sql(s, pragma, msg, sizeof msg) != 0) {
            set_err(err, errlen, "%s: setting schema version %d: %s", path, m->version, msg);
            goto fail;
        }
    }
    if (exec_sql(s, "COMMIT", msg, sizeof msg) != 0) {
        set_err(err, errlen, "%s: committing the schema: %s", path, msg);
        goto fail;
    }
    return 0;
fail:
    exec_sql(s, "ROLLBACK", NULL, 0);
    return -1;
}

/* The query planner's statistics of the jobs table (sqlite_stat1), which
 * the jobs list needs to choose between a filter's index and the sort's
 * (db/job_list.c: without them a filter on a few big datasets sorts thousands
 * of rows instead of reading 51 in order). Taken at open and every
 * JOB_STATS_EVERY jobs created; analysis_limit keeps each under a few ms at
 * any size. A failure only costs speed: logged. Call with s->mu held, or
 * before the store is shared. */
#define JOB_STATS_EVERY 1000

static void refresh_job_stats(store *s)
{
    char msg[256];
    if (exec_sql(s, "PRAGMA analysis_limit = 1000; ANALYZE jobs;", msg, sizeof msg) != 0)
        fprintf(stderr, "kiln: store: analyzing jobs: %s\n", msg);
}

store *store_open(const char *path, char *err, size_t errlen)
{
    char msg[512];
    store *s = calloc(1, sizeof *s);
    if (!s) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    int rc = sqlite3_open_v2(path, &s->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
    if (rc != SQLITE_OK) {
        set_err(err, errlen, "cannot open %s: %s", path, s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
        goto fail;
    }
    sqlite3_extended_result_codes(s->db, 1);
    sqlite3_busy_timeout(s->db, STORE_BUSY_TIMEOUT_MS);

    /* journal_mode answers with the mode it is in: anything but "wal" means the
     * file system cannot do WAL (some network file systems), and we refuse it. */
    sqlite3_stmt *q = NULL;
    rc = sqlite3_prepare_v2(s->db, "PRAGMA journal_mode = WAL", -1, &q, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(q);
    if (rc != SQLITE_ROW) {
        set_err(err, errlen, "%s: cannot switch to WAL mode: %s (is it a SQLite database?)", path,
                sqlite3_errmsg(s->db));
        sqlite3_finalize(q);
        goto fail;
    }
    const char *mode = (const char *)sqlite3_column_text(q, 0);
    if (!mode || strcmp(mode, "wal") != 0) {
        set_err(err, errlen, "%s: the database stays in journal mode \"%s\", not WAL; put the data "
                "directory on a local file system", path, mode ? mode : "?");
        sqlite3_finalize(q);
        goto fail;
    }
    sqlite3_finalize(q);

    if (exec_sql(s, "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;", msg, sizeof msg) != 0) {
        set_err(err, errlen, "%s: %s", path, msg);
        goto fail;
    }
    if (migrate(s, path, err, errlen) != 0)
        goto fail;
    refresh_job_stats(s);
    return s;
fail:
    store_close(s);
    return NULL;
}

void store_close(store *s)
{
    if (!s)
        return;
    for (int i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(s->stmt[i]);
    sqlite3_close(s->db);      /* every statement is finalized: closes now */
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int store_schema_version(store *s)
{
    int v = -1;
    lock(s);
    if (read_user_version(s, &v, NULL, 0) != 0)
        v = -1;
    unlock(s);
    return v;
}

/* ---- small helpers for one-statement functions ----------------------------- */

static int bind_text_or_null(sqlite3_stmt *q, int i, const char *t)
{
    return t ? sqlite3_bind_text(q, i, t, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(q, i);
}

/* Steps an UPDATE/DELETE whose parameters are bound: 0, STORE_NOT_FOUND when
 * no row changed, -1 on an error. Resets q. Call with s->mu held. */
static int step_change(store *s, sqlite3_stmt *q, int bind_rc, const char *what)
{
    int ret = -1;
    if (bind_rc != SQLITE_OK) {
        log_db_error(s, what);
        goto out;
    }
    if (sqlite3_step(q) != SQLITE_DONE) {
        log_db_error(s, what);
        goto out;
    }
    ret = sqlite3_changes(s->db) > 0 ? 0 : STORE_NOT_FOUND;
out:
    stmt_done(q);
    return ret;
}

static bool valid_dataset_status(const char *st)
{
    return st && (!strcmp(st, "importing") || !strcmp(st, "ready") || !strcmp(st, "failed"));
}

static bool valid_job_status(const char *st)
{
    static const char *const ok[] = { "queued", "running", "done", "failed", "cancelled" };
    for (size_t i = 0; st && i < sizeof ok / sizeof ok[0]; i++)
        if (!strcmp(st, ok[i]))
            return true;
    return false;
}

/* How to read one kind of row (a dataset, a job, a metric, an id) into an
 * element of an array. */
typedef struct row_kind {
    size_t size;                                /* of one element */
    int (*read)(sqlite3_stmt *q, void *elem);   /* 0, or -1 out of memory (elem left clear) */
    void (*clear)(void *elem);                  /* frees what read took; NULL: nothing */
} row_kind;

/* Steps q (its parameters bound) to its first row and reads it into out:
 * 0, STORE_NOT_FOUND when there is no row, -1 on an error (logged as what).
 * Resets q. Call with s->mu held. */
static int read_one(store *s, sqlite3_stmt *q, const row_kind *k, const char *what, void *out)
{
    int ret = -1;
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW)
        ret = k->read(q, out);
    else if (rc == SQLITE_DONE)
        ret = STORE_NOT_FOUND;
    else
        log_db_error(s, what);
    stmt_done(q);
    return ret;
}

/* Steps q (its parameters bound) to its end, reading every row into a new
 * malloc'ed array: 0 with *out and *n (NULL and 0 for no rows), or -1 on an
 * error (logged as what) with *out and *n untouched. Resets q. Call with
 * s->mu held. */
static int read_all(store *s, sqlite3_stmt *q, const row_kind *k, const char *what, void **out,
                    size_t *n)
{
    char *arr = NULL;
    size_t len = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            char *na = ncap <= SIZE_MAX / k->size ? realloc(arr, ncap * k->size) : NULL;
            if (!na)
                goto oom;
            arr = na;
            cap = ncap;
        }
        if (k->read(q, arr + len * k->size) != 0)
            goto oom;
        len++;
    }
    if (rc != SQLITE_DONE) {
        log_db_error(s, what);
        goto fail;
    }
    stmt_done(q);
    *out = arr;
    *n = len;
    return 0;
oom:
    fprintf(stderr, "kiln: store: %s: out of memory after %zu rows\n", what, len);
fail:
    stmt_done(q);
    for (size_t i = 0; k->clear && i < len; i++)
        k->clear(arr + i * k->size);
    free(arr);
    return -1;
}

/* Rows of one id column (ST_JOB_NEXT_QUEUED, ST_JOB_IDS_STATUS). */
static int read_id(sqlite3_stmt *q, void *elem)
{
    *(int64_t *)elem = sqlite3_column_int64(q, 0);
    return 0;
}

static const row_kind id_rows = { sizeof(int64_t), read_id, NULL };

/* A statement's one parameter ?1: none, an integer (an id) or a text. */
typedef struct key {
    enum { KEY_NONE, KEY_INT, KEY_TEXT } type;
    int64_t i;
    const char *t;
} key;

#define NO_KEY ((key){ .type = KEY_NONE })
#define KEY_ID(v) ((key){ .type = KEY_INT, .i = (v) })
#define KEY_TEXT(v) ((key){ .type = KEY_TEXT, .t = (v) })

static int bind_key(sqlite3_stmt *q, key k)
{
    if (k.type == KEY_INT)
        return sqlite3_bind_int64(q, 1, k.i);
    if (k.type == KEY_TEXT)
        return sqlite3_bind_text(q, 1, k.t, -1, SQLITE_TRANSIENT);
    return SQLITE_OK;
}

/* The first row of statement st with ?1 = k, read into out: read_one's
 * returns. Takes s->mu. */
static int get_row(store *s, enum stmt_id st, key k, const row_kind *rk, const char *what, void *out)
{
    lock(s);
    int ret = -1;
    sqlite3_stmt *q = stmt_get(s, st, NULL, 0);
    if (q) {
        if (bind_key(q, k) == SQLITE_OK)
            ret = read_one(s, q, rk, what, out);
        else
            stmt_done(q);
    }
    unlock(s);
    return ret;
}

/* Every row of statement st with ?1 = k, in a new array: 0 with *out and *n
 * (NULL and 0 for no rows), or -1 with *out NULL and *n 0. Takes s->mu. */
static int list_rows(store *s, enum stmt_id st, key k, const row_kind *rk, const char *what, void **out,
                     size_t *n)
{
    void *arr = NULL;
    *out = NULL;
    *n = 0;
    lock(s);
    int ret = -1;
    sqlite3_stmt *q = stmt_get(s, st, NULL, 0);
    if (q) {
        if (bind_key(q, k) == SQLITE_OK)
            ret = read_all(s, q, rk, what, &arr, n);
        else
            stmt_done(q);
    }
    unlock(s);
    if (ret == 0)
        *out = arr;
    return ret;
}

/* Runs statement st (a DELETE or UPDATE) with ?1 = id: step_change's returns.
 * Takes s->mu. */
static int change_by_id(store *s, enum stmt_id st, int64_t id, const char *what)
{
    lock(s);
    int ret = -1;
    sqlite3_stmt *q = stmt_get(s, st, NULL, 0);
    if (q)
        ret = step_change(s, q, sqlite3_bind_int64(q, 1, id), what);
    unlock(s);
    return ret;
}

/* A job's or an evaluation's status change (statement st: ?1 id, ?2 status,
 * ?3 error or NULL): 0, STORE_NOT_FOUND, or -1 (an invalid status is logged
 * with the kind's name). Takes s->mu. */
static int set_status(store *s, enum stmt_id st, const char *kind, int64_t id, const char *status,
                      const char *error)
{
    if (!valid_job_status(status)) {
        fprintf(stderr, "kiln: store: %s %lld: invalid status \"%s\"\n", kind, (long long)id,
                status ? status : "(null)");
        return -1;
    }
    lock(s);
    int ret = -1;
    sqlite3_stmt *q = stmt_get(s, st, NULL, 0);
    if (q) {
        int b = sqlite3_bind_int64(q, 1, id);
        if (b == SQLITE_OK)
            b = sqlite3_bind_text(q, 2, status, -1, SQLITE_TRANSIENT);
        if (b == SQLITE_OK)
            b = bind_text_or_null(q, 3, error);
        char what[32];
        snprintf(what, sizeof what, "%s status", kind);
        ret = step_change(s, q, b, what);
    }
    unlock(s);
    return ret;
}

/* ---- datasets ------------------------------------------------------------- */

int store_dataset_insert(store *s, const char *name, int64_t *id, char *err, size_t errlen)
{
    int ret = -1;
    lock(s);
    sqlite3_stmt *q = stmt_get(s, ST_DS_INSERT, err, errlen);
    if (!q)
        goto out;
    if (sqlite3_bind_text(q, 1, name, -1, SQLITE_TRANSIENT) != SQLITE_OK ||
        sqlite3_step(q) != SQLITE_DONE) {
        set_err(err, errlen, "inserting dataset: %s", sqlite3_errmsg(s->db));
        goto out;
    }
    *id = sqlite3_last_insert_rowid(s->db);
    ret = 0;
out:
    stmt_done(q);
    unlock(s);
    return ret;
}

int store_dataset_set_progress(store *s, int64_t id, double progress)
{
    return store_dataset_set_progress_eta(s, id, progress, -1);
}

int store_dataset_set_progress_eta(store *s, int64_t id, double progress, double eta_seconds)
{
    lock(s);
    int ret = -1;
    sqlite3_stmt *q = stmt_get(s, ST_DS_PROGRESS, NULL, 0);
    if (q) {
        int b = sqlite3_bind_int64(q, 1, id);
        if (b == SQLITE_OK)
            b = sqlite3_bind_double(q, 2, progress);
        if (b == SQLITE_OK)
            b = sqlite3_bind_double(q, 3, eta_seconds >= 0 && isfinite(eta_seconds) ? eta_seconds : -1);
        ret = step_change(s, q, b, "dataset progress");
    }
    unlock(s);
    return ret;
}

int store_dataset_finish(store *s, int64_t id, const char *status, const char *info_json,
                         const char *error)
{
    if (!valid_dataset_status(status))
        return -1;
    lock(s);
    int ret = -1;
    sqlite3_stmt *q = stmt_get(s, ST_DS_FINISH, NULL, 0);
    if (q) {
        int b = sqlite3_bind_int64(q, 1, id);
        if (b == SQLITE_OK)
            b = sqlite3_bind_text(q, 2, status, -1, SQLITE_TRANSIENT);
        if (b == SQLITE_OK)
            b = bind_text_or_null(q, 3, info_json);
        if (b == SQLITE_OK)
            b = bind_text_or_null(q, 4, error);
        ret = step_change(s, q, b, "dataset finish");
    }
    unlock(s);
    return ret;
}

/* Fills a store_dataset from a row of DS_COLS. Returns 0, or -1 when out of memory. */
static int read_dataset(sqlite3_stmt *q, void *elem)
{
    store_dataset *d = elem;
    memset(d, 0, sizeof *d);
    d->id = sqlite3_column_int64(q, 0);
    d->progress = sqlite3_column_double(q, 3);
    bool ok = col_dup(q, 1, &d->name);
    ok = col_dup(q, 2, &d->status) && ok;
    ok = col_dup(q, 4, &d->info_json) && ok;
    ok = col_dup(q, 5, &d->error) && ok;
    ok = col_dup(q, 6, &d->created_at) && ok;
    d->eta_seconds = sqlite3_column_double(q, 7);
    d->owner_id = sqlite3_column_int64(q, 8);      /* NULL reads as 0 */
    d->shared = sqlite3_column_int(q, 9) != 0;
    if (!ok) {
        store_dataset_clear(d);
        return -1;
    }
    return 0;
}

static void clear_dataset(void *elem)
{
    store_dataset_clear(elem);
}

static const row_kind dataset_rows = { sizeof(store_dataset), read_dataset, clear_dataset };

int store_dataset_get(store *s, int64_t id, store_dataset *out)
{
    return get_row(s, ST_DS_GET, KEY_ID(id), &dataset_rows, "reading dataset", out);
}

int store_dataset_find_by_name(store *s, const char *name, store_dataset *out)
{
    return get_row(s, ST_DS_BY_NAME, KEY_TEXT(name), &dataset_rows, "reading dataset", out);
}

int store_dataset_list(store *s, store_dataset **out, size_t *n)
{
    void *arr;
    int ret = list_rows(s, ST_DS_LIST, NO_KEY, &dataset_rows, "listing datasets", &arr, n);
    *out = arr;
    return ret;
}

int store_dataset_list_for(store *s, int64_t owner, store_dataset **out, size_t *n)
{
    void *arr;
    int ret = list_rows(s, ST_DS_LIST_FOR, KEY_ID(owner), &dataset_rows, "listing datasets", &arr, n);
    *out = arr;
    return ret;
}

int store_dataset_set_shared(store *s, int64_t id, bool shared)
{
    lock(s);
    int ret = -1;
    sqlite3_stmt *q = stmt_get(s, ST_DS_SHARED, NULL, 0);
    if (q) {
        int b = sqlite3_bind_int64(q, 1, id);
        if (b == SQLITE_OK)
            b = sqlite3_bind_int(q, 2, shared ? 1 : 0);
        ret = step_change(s, q, b, "dataset shared");
    }
    unlock(s);
    return ret;
}

int store_dataset_delete(store *s, int64_t id)
{
    return change_by_id(s, ST_DS_DELETE, id, "deleting dataset");
}

void store_dataset_clear(store_dataset *d)
{
    if (!d)
        return;
    free(d->name);
    free(d->status);
    free(d->info_json);
    free(d->error);
    free(d->created_at);
    memset(d, 0, sizeof *d);
}

void store_dataset_list_free(store_dataset *list, size_t n)
{
    for (size_t i = 0; list && i < n; i++)
        store_dataset_clear(&list[i]);
    free(list);
}

/* ---- jobs ----------------------------------------------------------------- */

int store_job_insert(store *s, int64_t dataset_id, const char *network, const char *config_json,
                     int epochs, int64_t *id, char *err, size_t errlen)
{
    int ret = -1;
    lock(s);
    sqlite3_stmt *q = stmt_get(s, ST_JOB_INSERT, err, errlen);
    if (!q)
        goto out;
    int b = sqlite3_bind_int64(q, 1, dataset_id);
    if (b == SQLITE_OK)
        b = sqlite3_bind_text(q, 2, network, -1, SQLITE_TRANSIENT);
    if (b == SQLITE_OK)
        b = sqlite3_bind_text(q, 3, config_json, -1, SQLITE_TRANSIENT);
    if (b == SQLITE_OK)
        b = sqlite3_bind_int(q, 4, epochs);
    if (b != SQLITE_OK || sqlite3_step(q) != SQLITE_DONE) {
        set_err(err, errlen, "inserting job: %s", sqlite3_errmsg(s->db));
        goto out;
    }
    *id = sqlite3_last_insert_rowid(s->db);
    ret = 0;
out:
    stmt_done(q);
    if (ret == 0 && *id % JOB_STATS_EVERY == 0)
        refresh_job_stats(s);
    unlock(s);
    return ret;
}

int store_job_set_status(store *s, int64_t id, const char *status, const char *error)
{
    return set_status(s, ST_JOB_STATUS, "job", id, status, error);
}

int store_job_requeue_ended(store *s, int64_t id)
{
    lock(s);
    int ret = -1;
    sqlite3_stmt *q = stmt_get(s, ST_JOB_REQUEUE_ENDED, NULL, 0);
    if (q)
        ret = step_change(s, q, sqlite3_bind_int64(q, 1, id), "requeueing a job");
    unlock(s);
    return ret;
}

int store_job_set_progress(store *s, int64_t id, int epoch, int64_t step, int64_t steps,
                           double images_per_sec, double eta_seconds)
{
    lock(s);
    int ret = -1;
    sqlite3_stmt *q = stmt_get(s, ST_JOB_PROGRESS, NULL, 0);
    if (q) {
        int b = sqlite3_bind_int64(q, 1, id);
        if (b == SQLITE_OK)
            b = sqlite3_bind_int(q, 2, epoch);
        if (b == SQLITE_OK)
            b = sqlite3_bind_int64(q, 3, step);
        if (b == SQLITE_OK)
            b = sqlite3_bind_int64(q, 4, steps);
        if (b == SQLITE_OK)
            b = sqlite3_bind_double(q, 5, isfinite(images_per_sec) ? images_per_sec : 0);
        if (b == SQLITE_OK)
            b = sqlite3_bind_double(q, 6, isfinite(eta_seconds) ? eta_seconds : -1);
        ret = step_change(s, q, b, "job progress");
    }
    unlock(s);
    return ret;
}

int store_job_set_stopped_early(store *s, int64_t id, int epoch, int best_epoch, const char *message)
{
    lock(s);
    int ret = -1;
    sqlite3_stmt *q = stmt_get(s, ST_JOB_STOPPED, NULL, 0);
    if (q) {
        int b = sqlite3_bind_int64(q, 1, id);
        if (b == SQLITE_OK)
            b = sqlite3_bind_int(q, 2, epoch);
        if (b == SQLITE_OK)
            b = sqlite3_bind_int(q, 3, best_epoch);
        if (b == SQLITE_OK)
            b = sqlite3_bind_text(q, 4, message, -1, SQLITE_TRANSIENT);
        ret = step_change(s, q, b, "job early stop");
    }
    unlock(s);
    return ret;
}

int store_job_set_config(store *s, int64_t id, const char *config_json)
{
    lock(s);
    int ret = -1;
    sqlite3_stmt *q = stmt_get(s, ST_JOB_CONFIG, NULL, 0);
    if (q) {
        int b = sqlite3_bind_int64(q, 1, id);
        if (b == SQLITE_OK)
            b = sqlite3_bind_text(q, 2, config_json, -1, SQLITE_TRANSIENT);
        ret = step_change(s, q, b, "job config");
    }
    unlock(s);
    return ret;
}

int store_job_set_meta(store *s, int64_t id, const char *name, const char *tags_json,
                       const char *notes)
{
    lock(s);
    int ret = -1;
    sqlite3_stmt *q = stmt_get(s, ST_JOB_META, NULL, 0);
    if (q) {
        int b = sqlite3_bind_int64(q, 1, id);
        if (b == SQLITE_OK)
            b = bind_text_or_null(q, 2, name);
        if (b == SQLITE_OK)
            b = bind_text_or_null(q, 3, tags_json);
        if (b == SQLITE_OK)
            b = bind_text_or_null(q, 4, notes);
        ret = step_change(s, q, b, "job name, tags and notes");
    }
    unlock(s);
    return ret;
}

int store_job_set_priority(store *s, int64_t id, int priority)
{
    lock(s);
    int ret = -1;
    sqlite3_stmt *q = stmt_get(s, ST_JOB_PRIORITY, NULL, 0);
    if (q) {
        int b = sqlite3_bind_int64(q, 1, id);
        if (b == SQLITE_OK)
            b = sqlite3_bind_int(q, 2, priority);
        ret = step_change(s, q, b, "job priority");
    }
    unlock(s);
    return ret;
}

int store_set_devices(store *s, store_work kind, int64_t id, const char *devices_json)
{
    lock(s);
    int ret = -1;
    sqlite3_stmt *q = stmt_get(s, kind == STORE_WORK_EVAL ? ST_EVAL_DEVICES : ST_JOB_DEVICES, NULL, 0);
    if (q) {
        int b = sqlite3_bind_int64(q, 1, id);
        if (b == SQLITE_OK)
            b = bind_text_or_null(q, 2, devices_json);
        ret = step_change(s, q, b, "the devices of a job or evaluation");
    }
    unlock(s);
    return ret;
}

static int read_job(sqlite3_stmt *q, void *elem)
{
    return store_db_read_job(q, elem);
}

int store_db_read_job(sqlite3_stmt *q, store_job *j)
{
    memset(j, 0, sizeof *j);
    j->id = sqlite3_column_int64(q, 0);
    j->dataset_id = sqlite3_column_int64(q, 1);
    j->epoch = sqlite3_column_int(q, 6);
    j->epochs = sqlite3_column_int(q, 7);
    j->step = sqlite3_column_int64(q, 8);
    j->steps = sqlite3_column_int64(q, 9);
    j->images_per_sec = sqlite3_column_double(q, 10);
    j->eta_seconds = sqlite3_column_double(q, 11);
    bool ok = col_dup(q, 2, &j->status);
    ok = col_dup(q, 3, &j->config_json) && ok;
    ok = col_dup(q, 4, &j->network) && ok;
    ok = col_dup(q, 5, &j->error) && ok;
    ok = col_dup(q, 12, &j->created_at) && ok;
    ok = col_dup(q, 13, &j->started_at) && ok;
    ok = col_dup(q, 14, &j->finished_at) && ok;
    j->stopped_epoch = sqlite3_column_int(q, 15);
    j->stopped_best_epoch = sqlite3_column_int(q, 16);
    ok = col_dup(q, 17, &j->stopped_message) && ok;
    j->owner_id = sqlite3_column_int64(q, 18);
    ok = col_dup(q, 19, &j->name) && ok;
    ok = col_dup(q, 20, &j->tags_json) && ok;
    ok = col_dup(q, 21, &j->notes) && ok;
    ok = col_dup(q, 22, &j->precision) && ok;
    ok = col_dup(q, 23, &j->dataset_name) && ok;
    j->sweep_id = sqlite3_column_int64(q, 24);     /* NULL reads as 0 */
    j->priority = sqlite3_column_int(q, 25);
    ok = col_dup(q, 26, &j->devices_json) && ok;
    if (!ok) {
        store_job_clear(j);
        return -1;
    }
    return 0;
}

static void clear_job(void *elem)
{
    store_job_clear(elem);
}

static const row_kind job_rows = { sizeof(store_job), read_job, clear_job };

int store_job_get(store *s, int64_t id, store_job *out)
{
    return get_row(s, ST_JOB_GET, KEY_ID(id), &job_rows, "reading job", out);
}

int store_job_list(store *s, store_job **out, size_t *n)
{
    void *arr;
    int ret = list_rows(s, ST_JOB_LIST, NO_KEY, &job_rows, "listing jobs", &arr, n);
    *out = arr;
    return ret;
}

int store_job_list_for(store *s, int64_t owner, store_job **out, size_t *n)
{
    void *arr;
    int ret = list_rows(s, ST_JOB_LIST_FOR, KEY_ID(owner), &job_rows, "listing jobs", &arr, n);
    *out = arr;
    return ret;
}

int store_job_next_queued(store *s, int64_t *id)
{
    return get_row(s, ST_JOB_NEXT_QUEUED, NO_KEY, &id_rows, "next queued job", id);
}

int store_job_ids_with_status(store *s, const char *status, int64_t **ids, size_t *n)
{
    void *arr;
    int ret = list_rows(s, ST_JOB_IDS_STATUS, KEY_TEXT(status), &id_rows, "reading ids", &arr, n);
    *ids = arr;
    return ret;
}

int store_job_delete(store *s, int64_t id)
{
    return change_by_id(s, ST_JOB_DELETE, id, "deleting job");
}

void store_job_clear(store_job *j)
{
    if (!j)
        return;
    free(j->status);
    free(j->config_json);
    free(j->network);
    free(j->error);
    free(j->created_at);
    free(j->started_at);
    free(j->finished_at);
    free(j->stopped_message);
    free(j->name);
    free(j->devices_json);
    free(j->tags_json);
    free(j->notes);
    free(j->precision);
    free(j->dataset_name);
    memset(j, 0, sizeof *j);
}

void store_job_list_free(store_job *list, size_t n)
{
    for (size_t i = 0; list && i < n; i++)
        store_job_clear(&list[i]);
    free(list);
}

/* ---- metrics -------------------------------------------------------------- */

int store_metric_insert(store *s, int64_t job_id, const store_metric *m)
{
    lock(s);
    int ret = -1;
    sqlite3_stmt *q = stmt_get(s, ST_METRIC_INSERT, NULL, 0);
    if (q) {
        size_t taglen = strnlen(m->tag, sizeof m->tag);
        int b = sqlite3_bind_int64(q, 1, job_id);
        if (b == SQLITE_OK)
            b = sqlite3_bind_int64(q, 2, m->step);
        if (b == SQLITE_OK)
            b = sqlite3_bind_double(q, 3, m->epoch);
        if (b == SQLITE_OK)
            b = sqlite3_bind_text(q, 4, m->tag, (int)taglen, SQLITE_TRANSIENT);
        if (b == SQLITE_OK)   /* NaN binds as NULL; +-Inf is kept */
            b = isnan(m->value) ? sqlite3_bind_null(q, 5) : sqlite3_bind_double(q, 5, m->value);
        if (b == SQLITE_OK)
            b = sqlite3_bind_double(q, 6, m->wall_time);
        if (b != SQLITE_OK || sqlite3_step(q) != SQLITE_DONE)
            log_db_error(s, "inserting metric");
        else
            ret = 0;
        stmt_done(q);
    }
    unlock(s);
    return ret;
}

/* Fills a store_metric from a row of METRIC_COLS (a NULL value reads as NaN). */
static int read_metric(sqlite3_stmt *q, void *elem)
{
    store_metric *m = elem;
    memset(m, 0, sizeof *m);
    m->step = sqlite3_column_int64(q, 0);
    m->epoch = sqlite3_column_double(q, 1);
    const unsigned char *tag = sqlite3_column_text(q, 2);
    snprintf(m->tag, sizeof m->tag, "%s", tag ? (const char *)tag : "");
    m->value = sqlite3_column_type(q, 3) == SQLITE_NULL ? NAN : sqlite3_column_double(q, 3);
    m->wall_time = sqlite3_column_double(q, 4);
    return 0;
}

static const row_kind metric_rows = { sizeof(store_metric), read_metric, NULL };

int store_metric_list(store *s, int64_t job_id, int64_t since_step, store_metric **out, size_t *n)
{
    void *arr = NULL;
    *out = NULL;
    *n = 0;
    lock(s);
    int ret = -1;
    sqlite3_stmt *q = stmt_get(s, since_step < 0 ? ST_METRIC_LIST_ALL : ST_METRIC_LIST, NULL, 0);
    if (q) {
        int b = sqlite3_bind_int64(q, 1, job_id);
        if (b == SQLITE_OK)
            b = sqlite3_bind_int64(q, 2, since_step);
        if (b == SQLITE_OK)
            ret = read_all(s, q, &metric_rows, "reading metrics", &arr, n);
        else
            stmt_done(q);
    }
    unlock(s);
    if (ret == 0)
        *out = arr;
    return ret;
}

int store_metric_page(store *s, int64_t job_id, int64_t after_row, int64_t upto_row,
                      store_metric *out, size_t max, size_t *n, int64_t *last_row)
{
    *n = 0;
    lock(s);
    int ret = -1;
    sqlite3_stmt *q = stmt_get(s, ST_METRIC_PAGE, NULL, 0);
    if (q) {
        int b = sqlite3_bind_int64(q, 1, job_id);
        if (b == SQLITE_OK)
            b = sqlite3_bind_int64(q, 2, after_row);
        if (b == SQLITE_OK)
            b = sqlite3_bind_int64(q, 3, upto_row);
        if (b == SQLITE_OK)
            b = sqlite3_bind_int64(q, 4, max > INT64_MAX ? INT64_MAX : (int64_t)max);
        int rc = b;
        while (b == SQLITE_OK && *n < max && (rc = sqlite3_step(q)) == SQLITE_ROW) {
            *last_row = sqlite3_column_int64(q, 0);
            store_metric *m = &out[(*n)++];
            memset(m, 0, sizeof *m);
            m->step = sqlite3_column_int64(q, 1);
            m->epoch = sqlite3_column_double(q, 2);
            const unsigned char *tag = sqlite3_column_text(q, 3);
            snprintf(m->tag, sizeof m->tag, "%s", tag ? (const char *)tag : "");
            m->value = sqlite3_column_type(q, 4) == SQLITE_NULL ? NAN : sqlite3_column_double(q, 4);
            m->wall_time = sqlite3_column_double(q, 5);
        }
        if (b == SQLITE_OK && (rc == SQLITE_DONE || rc == SQLITE_ROW))
            ret = 0;
        else
            log_db_error(s, "reading a page of metrics");
        stmt_done(q);
    }
    unlock(s);
    return ret;
}

/* One integer of statement st with ?1 = job_id, ?2 = a and (when b_set) ?3 = b:
 * 0 with *out, STORE_NOT_FOUND without a row, -1 on an error. */
static int job_int(store *s, enum stmt_id st, int64_t job_id, int64_t a, bool a_set, int64_t b,
                   bool b_set, const char *what, int64_t *out)
{
    lock(s);
    int ret = -1;
    sqlite3_stmt *q = stmt_get(s, st, NULL, 0);
    if (q) {
        int rc = sqlite3_bind_int64(q, 1, job_id);
        if (rc == SQLITE_OK && a_set)
            rc = sqlite3_bind_int64(q, 2, a);
        if (rc == SQLITE_OK && b_set)
            rc = sqlite3_bind_int64(q, 3, b);
        if (rc == SQLITE_OK)
            rc = sqlite3_step(q);
        if (rc == SQLITE_ROW) {
            *out = sqlite3_column_int64(q, 0);
            ret = 0;
        } else if (rc == SQLITE_DONE) {
            ret = STORE_NOT_FOUND;
        } else {
            log_db_error(s, what);
        }
        stmt_done(q);
    }
    unlock(s);
    return ret;
}

int store_metric_last_row(store *s, int64_t job_id, int64_t *row)
{
    return job_int(s, ST_METRIC_LAST_ROW, job_id, 0, false, 0, false, "reading metrics", row);
}

int store_metric_row_at(store *s, int64_t job_id, int64_t k, int64_t upto_row, int64_t *row)
{
    if (k < 1)
        return STORE_NOT_FOUND;
    return job_int(s, ST_METRIC_ROW_AT, job_id, upto_row, true, k - 1, true, "reading metrics", row);
}

int store_metric_count(store *s, int64_t job_id, int64_t upto_row, int64_t *n)
{
    return job_int(s, ST_METRIC_COUNT, job_id, upto_row, true, 0, false, "counting metrics", n);
}

int store_metric_delete(store *s, int64_t job_id, int64_t after_step)
{
    lock(s);
    int ret = -1;
    sqlite3_stmt *q = stmt_get(s, ST_METRIC_DELETE, NULL, 0);
    if (q) {
        int b = sqlite3_bind_int64(q, 1, job_id);
        if (b == SQLITE_OK)
            b = sqlite3_bind_int64(q, 2, after_step);
        ret = step_change(s, q, b, "deleting metrics");
        if (ret == STORE_NOT_FOUND)
            ret = 0;           /* nothing to delete is fine */
    }
    unlock(s);
    return ret;
}

int store_metric_latest(store *s, int64_t job_id, store_metric **out, size_t *n)
{
    void *arr;
    int ret = list_rows(s, ST_METRIC_LATEST, KEY_ID(job_id), &metric_rows, "reading metrics", &arr, n);
    *out = arr;
    return ret;
}

/* ---- evaluations ---------------------------------------------------------- */

static bool valid_split(const char *sp)
{
    return sp && (!strcmp(sp, "train") || !strcmp(sp, "val") || !strcmp(sp, "test"));
}

int store_eval_insert(store *s, int64_t job_id, int64_t dataset_id, const char *split,
                      const char *selection, int epoch, int64_t *id, char *err, size_t errlen)
{
    if (!valid_split(split) || !selection)
        return set_err(err, errlen, "inserting evaluation: invalid split or selection");
    int ret = -1;
    lock(s);
    sqlite3_stmt *q = stmt_get(s, ST_EVAL_INSERT, err, errlen);
    if (!q)
        goto out;
    int b = sqlite3_bind_int64(q, 1, job_id);
    if (b == SQLITE_OK)
        b = sqlite3_bind_int64(q, 2, dataset_id);
    if (b == SQLITE_OK)
        b = sqlite3_bind_text(q, 3, split, -1, SQLITE_TRANSIENT);
    if (b == SQLITE_OK)
        b = sqlite3_bind_text(q, 4, selection, -1, SQLITE_TRANSIENT);
    if (b == SQLITE_OK)
        b = sqlite3_bind_int(q, 5, epoch);
    if (b != SQLITE_OK || sqlite3_step(q) != SQLITE_DONE) {
        set_err(err, errlen, "inserting evaluation: %s", sqlite3_errmsg(s->db));
        goto out;
    }
    *id = sqlite3_last_insert_rowid(s->db);
    ret = 0;
out:
    stmt_done(q);
    unlock(s);
    return ret;
}

int store_eval_set_status(store *s, int64_t id, const char *status, const char *error)
{
    return set_status(s, ST_EVAL_STATUS, "evaluation", id, status, error);
}

int store_eval_set_progress(store *s, int64_t id, double progress)
{
    lock(s);
    int ret = -1;
    sqlite3_stmt *q = stmt_get(s, ST_EVAL_PROGRESS, NULL, 0);
    if (q) {
        int b = sqlite3_bind_int64(q, 1, id);
        if (b == SQLITE_OK)
            b = sqlite3_bind_double(q, 2, !isfinite(progress) || progress < 0 ? 0 : progress > 1 ? 1 : progress);
        ret = step_change(s, q, b, "evaluation progress");
    }
    unlock(s);
    return ret;
}

int store_eval_finish(store *s, int64_t id, const char *status, const char *result_json,
                      const char *error)
{
    bool done = status && !strcmp(status, "done");
    if (!status || (!done && strcmp(status, "failed") && strcmp(status, "cancelled")) ||
        (done && !result_json) || (!done && result_json)) {
        fprintf(stderr, "kiln: store: evaluation %lld: cannot finish as \"%s\"%s\n", (long long)id,
                status ? status : "(null)", result_json ? " with a result" : "");
        return -1;
    }
    lock(s);
    int ret = -1;
    sqlite3_stmt *q = stmt_get(s, ST_EVAL_FINISH, NULL, 0);
    if (q) {
        int b = sqlite3_bind_int64(q, 1, id);
        if (b == SQLITE_OK)
            b = sqlite3_bind_text(q, 2, status, -1, SQLITE_TRANSIENT);
        if (b == SQLITE_OK)
            b = bind_text_or_null(q, 3, result_json);
        if (b == SQLITE_OK)
            b = bind_text_or_null(q, 4, error);
        ret = step_change(s, q, b, "evaluation finish");
    }
    unlock(s);
    return ret;
}

/* Fills a store_eval from a row of EVAL_COLS. Returns 0, or -1 when out of memory. */
static int read_eval(sqlite3_stmt *q, void *elem)
{
    store_eval *e = elem;
    memset(e, 0, sizeof *e);
    e->id = sqlite3_column_int64(q, 0);
    e->job_id = sqlite3_column_int64(q, 1);
    e->dataset_id = sqlite3_column_int64(q, 2);
    e->epoch = sqlite3_column_int(q, 5);
    e->progress = sqlite3_column_double(q, 7);
    bool ok = col_dup(q, 3, &e->split);
    ok = col_dup(q, 4, &e->selection) && ok;
    ok = col_dup(q, 6, &e->status) && ok;
    ok = col_dup(q, 8, &e->result_json) && ok;
    ok = col_dup(q, 9, &e->error) && ok;
    ok = col_dup(q, 10, &e->created_at) && ok;
    ok = col_dup(q, 11, &e->started_at) && ok;
    ok = col_dup(q, 12, &e->finished_at) && ok;
    e->owner_id = sqlite3_column_int64(q, 13);
    ok = col_dup(q, 14, &e->devices_json) && ok;
    if (!ok) {
        store_eval_clear(e);
        return -1;
    }
    return 0;
}

static void clear_eval(void *elem)
{
    store_eval_clear(elem);
}

static const row_kind eval_rows = { sizeof(store_eval), read_eval, clear_eval };

int store_eval_get(store *s, int64_t id, store_eval *out)
{
    return get_row(s, ST_EVAL_GET, KEY_ID(id), &eval_rows, "reading evaluation", out);
}

int store_eval_list_by_job(store *s, int64_t job_id, store_eval **out, size_t *n)
{
    void *arr;
    int ret = list_rows(s, ST_EVAL_BY_JOB, KEY_ID(job_id), &eval_rows, "listing evaluations", &arr, n);
    *out = arr;
    return ret;
}

int store_eval_list_by_job_for(store *s, int64_t job_id, int64_t owner, store_eval **out, size_t *n)
{
    void *arr = NULL;
    *out = NULL;
    *n = 0;
    lock(s);
    int ret = -1;
    sqlite3_stmt *q = stmt_get(s, ST_EVAL_BY_JOB_FOR, NULL, 0);
    if (q) {
        int b = sqlite3_bind_int64(q, 1, job_id);
        if (b == SQLITE_OK)
            b = sqlite3_bind_int64(q, 2, owner);
        if (b == SQLITE_OK)
            ret = read_all(s, q, &eval_rows, "listing evaluations", &arr, n);
        else
            stmt_done(q);
    }
    unlock(s);
    if (ret == 0)
        *out = arr;
    return ret;
}

int store_eval_ids_with_status(store *s, const char *status, int64_t **ids, size_t *n)
{
    void *arr;
    int ret = list_rows(s, ST_EVAL_IDS_STATUS, KEY_TEXT(status), &id_rows, "reading evaluation ids",
                        &arr, n);
    *ids = arr;
    return ret;
}

int store_eval_count_by_dataset(store *s, int64_t dataset_id, size_t *n)
{
    int64_t count = 0;
    *n = 0;
    int ret = get_row(s, ST_EVAL_COUNT_DATASET, KEY_ID(dataset_id), &id_rows, "counting evaluations", &count);
    if (ret == 0)
        *n = (size_t)count;
    return ret;
}

int store_eval_delete(store *s, int64_t id)
{
    return change_by_id(s, ST_EVAL_DELETE, id, "deleting evaluation");
}

void store_eval_clear(store_eval *e)
{
    if (!e)
        return;
    free(e->split);
    free(e->selection);
    free(e->status);
    free(e->result_json);
    free(e->error);
    free(e->created_at);
    free(e->started_at);
    free(e->finished_at);
    free(e->devices_json);
    memset(e, 0, sizeof *e);
}

void store_eval_list_free(store_eval *list, size_t n)
{
    for (size_t i = 0; list && i < n; i++)
        store_eval_clear(&list[i]);
    free(list);
}

/* ---- owners --------------------------------------------------------------- */

int store_set_owner(store *s, store_owned kind, int64_t id, int64_t owner)
{
    static const enum stmt_id by_kind[] = {
        [STORE_OWNED_DATASET] = ST_DS_OWNER,
        [STORE_OWNED_JOB] = ST_JOB_OWNER,
        [STORE_OWNED_EVAL] = ST_EVAL_OWNER,
    };
    if ((unsigned)kind >= sizeof by_kind / sizeof by_kind[0])
        return -1;
    lock(s);
    int ret = -1;
    sqlite3_stmt *q = stmt_get(s, by_kind[kind], NULL, 0);
    if (q) {
        int b = sqlite3_bind_int64(q, 1, id);
        if (b == SQLITE_OK)
            b = sqlite3_bind_int64(q, 2, owner);
        ret = step_change(s, q, b, "setting an owner");
    }
    unlock(s);
    return ret;
}

/* ---- for db/users.c (db/store_db.h) --------------------------------------- */

sqlite3 *store_db_lock(store *s)
{
    lock(s);
    return s->db;
}

void store_db_unlock(store *s)
{
    unlock(s);
}

/* ---- the queue ------------------------------------------------------------ */

static int read_queued(sqlite3_stmt *q, void *elem)
{
    store_queued *w = elem;
    w->kind = sqlite3_column_int(q, 0) ? STORE_WORK_EVAL : STORE_WORK_JOB;
    w->id = sqlite3_column_int64(q, 1);
    w->priority = sqlite3_column_int(q, 3);
    return 0;
}

static const row_kind queued_rows = { sizeof(store_queued), read_queued, NULL };

int store_queue_list(store *s, store_queued **out, size_t *n)
{
    void *arr;
    int ret = list_rows(s, ST_QUEUE_LIST, NO_KEY, &queued_rows, "listing the queue", &arr, n);
    *out = arr;
    return ret;
}
